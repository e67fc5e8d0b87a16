//! Process 0's starting point (a fresh model or its checkpoint's state) sent to every process:
//! a JSON header, then the state's floats.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::lost;
use crate::backend::TrainState;
use crate::comm::processes::broadcast_vec;
use crate::comm::Processes;
use crate::engine::loader::Cursor;
use crate::engine::start::Start;
use crate::engine::EngineError;
use crate::nn::optim::OptState;

/// The starting point as process 0 sends it.
#[derive(Serialize, Deserialize)]
struct StartHeader {
    step: u64,
    epoch: u64,
    offset: usize,
    per_replica: usize,
    lr: f32,
    lr_note: Option<String>,
    resume_note: Option<String>,
    checkpoint: Option<PathBuf>,
    init_notes: Vec<String>,
    epoch_sum: [f64; 2],
    shares: Option<Vec<usize>>,
    began: Vec<(std::ops::Range<usize>, u64)>,
    best_val: Option<crate::engine::checkpoint::BestVal>,
    t: u64,
    lens: [usize; 4],
}

fn floats(v: &[f32]) -> impl Iterator<Item = u8> + '_ {
    v.iter().flat_map(|f| f.to_le_bytes())
}

fn encode(s: &Start) -> Vec<u8> {
    let head = StartHeader {
        step: s.step,
        epoch: s.cursor.epoch,
        offset: s.cursor.offset,
        per_replica: s.per_replica,
        lr: s.lr,
        lr_note: s.lr_note.clone(),
        resume_note: s.resume_note.clone(),
        checkpoint: s.checkpoint.clone(),
        init_notes: s.init_notes.clone(),
        epoch_sum: s.epoch_sum,
        shares: s.shares.clone(),
        began: s.began.clone(),
        best_val: s.best_val,
        t: s.state.opt.t,
        lens: [
            s.state.params.len(),
            s.state.opt.m.len(),
            s.state.opt.v.len(),
            s.state.buffers.len(),
        ],
    };
    let head = serde_json::to_vec(&head).expect("plain data serializes");
    let mut out = (head.len() as u64).to_le_bytes().to_vec();
    out.extend(head);
    out.extend(floats(&s.state.params));
    out.extend(floats(&s.state.opt.m));
    out.extend(floats(&s.state.opt.v));
    out.extend(floats(&s.state.buffers));
    out
}

fn decode(b: &[u8]) -> Option<Start> {
    let n = u64::from_le_bytes(b.get(..8)?.try_into().ok()?) as usize;
    let head: StartHeader = serde_json::from_slice(b.get(8..8 + n)?).ok()?;
    let mut rest = b.get(8 + n..)?;
    let mut take = |len: usize| -> Option<Vec<f32>> {
        let bytes = rest.get(..len * 4)?;
        rest = &rest[len * 4..];
        Some(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
                .collect(),
        )
    };
    let params = take(head.lens[0])?;
    let (m, v) = (take(head.lens[1])?, take(head.lens[2])?);
    let buffers = take(head.lens[3])?;
    Some(Start {
        step: head.step,
        cursor: Cursor {
            epoch: head.epoch,
            offset: head.offset,
        },
        per_replica: head.per_replica,
        lr: head.lr,
        lr_note: head.lr_note,
        resume_note: head.resume_note,
        state: TrainState {
            params,
            opt: OptState { t: head.t, m, v },
            buffers,
        },
        checkpoint: head.checkpoint,
        init_notes: head.init_notes,
        epoch_sum: head.epoch_sum,
        shares: head.shares,
        began: head.began,
        best_val: head.best_val,
    })
}

/// Process 0's starting point (a fresh model or its checkpoint's state) on every process, so
/// that every replica starts from the same bits and only process 0 needs the checkpoint.
pub(in crate::engine) fn share_start(
    procs: &dyn Processes,
    ours: Option<Start>,
    n_params: usize,
) -> Result<Start, EngineError> {
    let bytes = ours.as_ref().map(encode).unwrap_or_default();
    let got = broadcast_vec(procs, bytes, 0).map_err(lost)?;
    decode(&got)
        .filter(|s| s.state.params.len() == n_params)
        .ok_or_else(|| {
            EngineError::Config(
                "process 0 sent a starting point this process cannot use (another model or build): run the same mgtop-train with the same flags everywhere".into(),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::ThreadProcesses;
    use crate::nn::optim::OptimizerKind;

    #[test]
    fn a_starting_point_survives_the_trip_to_every_process() {
        let start = Start {
            step: 7,
            cursor: Cursor {
                epoch: 1,
                offset: 96,
            },
            per_replica: 32,
            lr: 3e-3,
            lr_note: Some("from the checkpoint".into()),
            resume_note: None,
            state: TrainState {
                params: vec![1.5, -2.0, 3.25],
                opt: OptState {
                    t: 7,
                    ..OptState::new(OptimizerKind::Adam, 3)
                },
                buffers: vec![0.25, 4.0],
            },
            checkpoint: Some("runs/x/ckpt".into()),
            init_notes: vec!["--init w.safetensors: loaded 3 of 3".into()],
            epoch_sum: [12.5, 96.0],
            shares: Some(vec![40, 24]),
            began: vec![(1..3, 5)],
            best_val: Some(crate::engine::checkpoint::BestVal {
                accuracy: 0.97,
                step: 184,
            }),
        };
        let got: Vec<Start> = ThreadProcesses::group(3)
            .into_iter()
            .map(|p| {
                let ours = (p.index() == 0).then(|| start.clone());
                std::thread::spawn(move || share_start(&p, ours, 3).unwrap())
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        for s in got {
            assert_eq!(encode(&s), encode(&start));
        }
    }
}
