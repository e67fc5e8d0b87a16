//! Scaling against one device: a short calibration run (`--calibrate`) measures what a single
//! device does with the same model, data and per-replica batch, and the frontends show the
//! run's throughput as a speedup and an efficiency against it.

use crate::config::{Budget, DeviceSpec, RunConfig};
use crate::engine::{Engine, EngineError};

/// Steps of the calibration run before timing starts, and timed.
const WARM_STEPS: u64 = 20;
const TIMED_STEPS: u64 = 100;

/// Samples per second of one device on `cfg`'s workload.
pub fn calibrate(cfg: &RunConfig) -> Result<f64, EngineError> {
    let one = RunConfig {
        devices: DeviceSpec::Cpu(1),
        budget: Budget::Steps(WARM_STEPS + TIMED_STEPS),
        final_checkpoint: false,
        checkpoint_every: None,
        resume: None,
        metrics_out: None,
        calibrate: false,
        slow_rank: None,
        slow_data: None,
        inject_panic: None,
        rebalance: false,
        val_fraction: 0.0,
        ..cfg.clone()
    };
    let global = one.batch_per_replica * one.grad_accum;
    let r = Engine::run(one)?;
    let t0 = r.step_ends[WARM_STEPS as usize - 1];
    let t1 = *r.step_ends.last().expect("the calibration ran");
    Ok((TIMED_STEPS as usize * global) as f64 / (t1 - t0).as_secs_f64().max(1e-9))
}

/// Throughput against one device: (speedup, efficiency = speedup / ranks).
pub fn scaling(samples_per_sec: f64, baseline: f64, ranks: usize) -> (f64, f64) {
    let speedup = samples_per_sec / baseline;
    (speedup, speedup / ranks.max(1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speedup_and_efficiency() {
        assert_eq!(scaling(300.0, 100.0, 4), (3.0, 0.75));
    }
}
