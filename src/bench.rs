//! `mgtop-train bench`: training throughput of the reference workload (MLP 784-128-10, Adam
//! lr 1e-3, 60000x784 synthetic teacher data) and in-process all-reduce bus bandwidth.

use std::time::{Duration, Instant};

use crate::collective::{Collective, LocalCollective};
use crate::config::{Budget, DeviceSpec, RunConfig};
use crate::data::DataSpec;
use crate::engine::{Engine, EngineError};
use crate::model::ModelSpec;

/// Reference samples/s on the 2-core machine of ../shared/bench (median of 3):
/// (workers, batch, best TensorFlow MirroredStrategy, best PyTorch).
pub const REFERENCE: &[(usize, usize, f64, f64)] = &[
    (1, 32, 10_039.0, 17_692.0),
    (2, 32, 8_382.0, 9_798.0),
    (1, 128, 39_195.0, 61_663.0),
    (2, 128, 23_649.0, 42_354.0),
    (1, 512, 60_158.0, 164_052.0),
    (2, 512, 48_718.0, 116_487.0),
];

/// Samples/s of one training run: `timed` samples after `warm` samples of warm-up.
pub fn train_throughput(
    workers: usize,
    batch: usize,
    warm: usize,
    timed: usize,
) -> Result<f64, EngineError> {
    let global = batch * workers;
    let warm_steps = warm.div_ceil(global).max(2) as u64;
    let timed_steps = timed.div_ceil(global).max(2) as u64;
    let cfg = RunConfig {
        devices: DeviceSpec::Cpu(workers),
        model: ModelSpec { hidden: vec![128] },
        data: DataSpec::Synthetic {
            n: 60_000,
            d: 784,
            c: 10,
        },
        budget: Budget::Steps(warm_steps + timed_steps),
        batch_per_replica: batch,
        lr: Some(1e-3), // the reference scripts' Adam lr, whatever the batch
        val_fraction: 0.0,
        final_checkpoint: false,
        ..RunConfig::default()
    };
    let r = Engine::run(cfg)?;
    let t0 = r.step_ends[warm_steps as usize - 1];
    let t1 = *r.step_ends.last().expect("steps ran");
    Ok((timed_steps as usize * global) as f64 / (t1 - t0).as_secs_f64())
}

/// Bus bandwidth in GB/s (nccl-tests: 2(n-1)/n x bytes / time) of an all-reduce of `bytes`.
pub fn allreduce_busbw(ranks: usize, bytes: usize, iters: usize) -> f64 {
    let len = bytes / 4;
    let hs: Vec<_> = LocalCollective::group(ranks)
        .into_iter()
        .map(|mut c| {
            std::thread::spawn(move || {
                let mut buf = vec![1.0f32; len];
                c.all_reduce_sum(&mut buf).expect("warm-up");
                c.barrier().expect("barrier");
                let t = Instant::now();
                for _ in 0..iters {
                    c.all_reduce_sum(&mut buf).expect("all-reduce");
                }
                t.elapsed()
            })
        })
        .collect();
    let worst: Duration = hs
        .into_iter()
        .map(|h| h.join().expect("bench thread"))
        .max()
        .unwrap_or_default();
    let per = worst.as_secs_f64() / iters as f64;
    2.0 * (ranks - 1) as f64 / ranks as f64 * bytes as f64 / per / 1e9
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
