//! `selftest`'s NCCL checks: an all-reduce over every GPU (one GPU too: a 1-rank communicator
//! is created, used and closed) against the in-process collective, and a join whose peer never
//! comes ending by its time limit and by the host's abort flag.

use std::time::Duration;

use cudarc::driver::CudaContext;
use cudarc::nccl::Id;

use super::nccl::{Communicator, Patience};
use super::replica::Group;
use super::selftest_compare::{check, compare, Check};
use super::{on, CudaError};
use crate::comm::{Collective, LocalCollective};
use crate::nn::rng::Rng;

/// NCCL all-reduce over every GPU against the in-process collective's sum.
pub fn nccl_check(gpus: usize) -> Check {
    let name = format!("nccl all-reduce over {gpus} GPUs");
    let id = match Id::new() {
        Ok(id) => id,
        Err(e) => return check(name, Err(CudaError::new(0, "create an NCCL id", e))),
    };
    let len = 1 << 20;
    let input = |rank: usize| -> Vec<f32> {
        let mut r = Rng::new(100 + rank as u64);
        (0..len).map(|_| r.normal()).collect()
    };
    let handles: Vec<_> = (0..gpus)
        .map(|rank| {
            let data = input(rank);
            std::thread::spawn(move || -> Result<Vec<f32>, CudaError> {
                let ctx = CudaContext::new(rank).map_err(on(rank, "open"))?;
                let stream = ctx.new_stream().map_err(on(rank, "create stream"))?;
                let g = Group {
                    id,
                    rank,
                    world: gpus,
                };
                let patience = Patience::only(NCCL_PATIENCE);
                let comm = Communicator::join(&stream, g.rank, g.world, &g.id, &patience)
                    .map_err(|e| CudaError::new(rank, "join the NCCL group", e))?;
                let mut buf = stream.clone_htod(&data).map_err(on(rank, "upload"))?;
                comm.all_reduce_sum(&mut buf, &patience)
                    .map_err(|e| CudaError::new(rank, "all-reduce", e))?;
                stream.clone_dtoh(&buf).map_err(on(rank, "download"))
            })
        })
        .collect();
    let mut want: Vec<Vec<f32>> = (0..gpus).map(input).collect();
    let colls = LocalCollective::group(gpus);
    std::thread::scope(|s| {
        for (mut c, buf) in colls.into_iter().zip(want.iter_mut()) {
            s.spawn(move || c.all_reduce_sum(buf).map(|_| ()));
        }
    });
    let mut worst = (0.0f64, 0.0f64);
    for (rank, h) in handles.into_iter().enumerate() {
        let got = match h.join() {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => return check(name, Err(e)),
            Err(_) => {
                return check(
                    name,
                    Err(CudaError::new(rank, "all-reduce", "thread panicked")),
                )
            }
        };
        let (a, r) = compare(&got, &want[rank], 1e-5, 1e-5);
        worst = (worst.0.max(a), worst.1.max(r));
    }
    check(name, Ok(worst))
}

/// How long selftest's NCCL calls may stay in progress (every rank is a thread of this call).
const NCCL_PATIENCE: Duration = Duration::from_secs(120);

/// Joining an NCCL group whose other rank never comes must end, not hang: once by the time
/// limit, once by the host's abort flag (how a peer's failure reaches a rank waiting in NCCL).
/// Needs one GPU. Passes when the join fails within its limit and a little more.
pub fn nccl_gives_up_checks() -> Vec<Check> {
    let limit = Duration::from_secs(2);
    let ways: [(&str, Option<Duration>); 2] = [
        ("nccl join gives up on a missing peer", None),
        ("nccl join ends when the run aborts", Some(limit / 4)),
    ];
    ways.into_iter()
        .map(|(name, abort_after)| {
            let t0 = std::time::Instant::now();
            let abort = || {
                abort_after
                    .filter(|&a| t0.elapsed() >= a)
                    .map(|_| "the run was aborted".to_string())
            };
            let patience = Patience {
                limit,
                abort: &abort,
            };
            let joined = Id::new()
                .map_err(|e| format!("create an NCCL id: {e:?}"))
                .and_then(|id| {
                    let stream = CudaContext::new(0)
                        .and_then(|c| c.new_stream())
                        .map_err(|e| format!("open GPU 0: {e:?}"))?;
                    Communicator::join(&stream, 0, 2, &id, &patience).map(|_| ())
                });
            let took = t0.elapsed();
            let allowed = abort_after.unwrap_or(limit) + Duration::from_secs(3);
            let note = match &joined {
                Ok(()) => "joined a group of 2 alone: NCCL did not wait for the peer".to_string(),
                Err(e) => format!("gave up after {:.1} s: {e}", took.as_secs_f64()),
            };
            let ended =
                joined.is_err() && (abort_after.is_none() || note.contains("the run was aborted"));
            Check {
                name: name.to_string(),
                worst: ended.then(|| took.as_secs_f64() / allowed.as_secs_f64()),
                max_abs: f64::NAN,
                note: note.chars().take(120).collect(),
            }
        })
        .collect()
}
