//! A metrics file's `step` record: every rank's sample of the step, and the run's totals as of it.

use serde_json::Value;

use super::fields::{
    array, count, field, millis, num, opt_millis, opt_num, opt_uint, seconds, uint,
};
use super::parse::{Parsed, Record};
use crate::engine::events::{EndsAt, StepStats};
use crate::observe::monitor::{StepRow, Totals};

pub(super) fn step(v: &Value, ranks: usize) -> Parsed<Record> {
    let per_rank = array(v, "per_rank")?;
    if per_rank.len() != ranks {
        return Err(format!(
            "`per_rank` has {} entries; the run has {ranks} ranks",
            per_rank.len()
        ));
    }
    let at = seconds(v, "t")?;
    let (step, epoch) = (uint(v, "step")?, uint(v, "epoch")?);
    let loss = opt_num(v, "loss")?.unwrap_or(f64::NAN) as f32;
    let accuracy = opt_num(v, "accuracy")?.unwrap_or(f64::NAN) as f32;
    // (older files lack it; a norm is a length, as a float32 holds it)
    let grad_norm = match opt_num(v, "grad_norm")? {
        Some(n) if !(0.0..=f64::from(f32::MAX)).contains(&n) => {
            return Err(format!("`grad_norm` {n} is not a gradient's norm"))
        }
        n => n.unwrap_or(f64::NAN) as f32,
    };
    let lr = num(v, "lr")? as f32;
    let per_replica = count(v, "per_replica")?;
    let global_samples = count(v, "global_batch")?;
    // older files lack it: the header's bar then stays empty
    let progress = opt_num(v, "progress")?.unwrap_or(0.0);
    // (older files lack them)
    let ends_at = match (opt_uint(v, "epoch_ends_at")?, opt_uint(v, "run_ends_at")?) {
        (Some(epoch), Some(run)) => Some(EndsAt { epoch, run }),
        _ => None,
    };
    let ranks = per_rank
        .iter()
        .enumerate()
        .map(|(i, r)| {
            if count(r, "rank")? != i {
                return Err(format!("`per_rank` entry {i} is not rank {i}"));
            }
            Ok(StepStats {
                rank: i,
                step,
                epoch,
                samples: count(r, "samples")?,
                global_samples,
                per_replica,
                loss,
                accuracy,
                grad_norm,
                lr,
                data_wait: millis(r, "data_wait_ms")?,
                loader_busy: opt_millis(r, "loader_busy_ms")?,
                compute: millis(r, "compute_ms")?,
                compute_cpu: None,
                device_timed: false,
                comm: millis(r, "comm_ms")?,
                sync_wait: millis(r, "sync_wait_ms")?,
                // files written before strategies had no transfer part
                transfer: millis(r, "transfer_ms").unwrap_or_default(),
                optimizer: millis(r, "optimizer_ms")?,
                step_time: millis(r, "step_ms")?,
                at,
                after_pause: false,
                paused: false,
                progress,
                ends_at,
            })
        })
        .collect::<Parsed<Vec<StepStats>>>()?;
    Ok(Record::Step {
        row: StepRow {
            step,
            epoch,
            loss,
            accuracy,
            grad_norm,
            lr,
            per_replica,
            global_samples,
            at,
            progress,
            ends_at,
            ranks,
            totals: totals(v)?,
        },
        samples_per_s: opt_num(v, "samples_per_s")?,
    })
}

/// A step record's `totals` (files from before them have none).
fn totals(v: &Value) -> Parsed<Option<Totals>> {
    let Some(t) = field(v, "totals") else {
        return Ok(None);
    };
    let secs = |k: &str| {
        let x = num(t, k)?;
        (x.is_finite() && x >= 0.0)
            .then_some(x)
            .ok_or(format!("`{k}` is not a time in seconds"))
    };
    let read = || {
        Ok(Totals {
            steps: uint(t, "steps")?,
            samples: uint(t, "samples")?,
            train_s: secs("train_s")?,
            rank_s: secs("rank_s")?,
            compute_s: secs("compute_s")?,
            data_s: secs("data_s")?,
            comm_s: secs("comm_s")?,
            wait_s: secs("wait_s")?,
            // (files from before it was recorded: their host transfers are in `other`)
            transfer_s: opt_num(t, "transfer_s")?.map_or(Ok(0.0), |_| secs("transfer_s"))?,
            // (files from before it was recorded: no loaders' share is said)
            loader_s: opt_num(t, "loader_s")?.map_or(Ok(None), |_| secs("loader_s").map(Some))?,
            // (files from before it was recorded: the reader smooths the rows it has)
            smoothed_loss: opt_num(t, "smoothed_loss")?,
        })
    };
    read()
        .map(Some)
        .map_err(|e: String| format!("`totals`: {e}"))
}
