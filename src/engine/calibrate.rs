//! Scaling against one device: a short calibration run (`--calibrate`) measures what a single
//! device does with the same model, data and per-replica batch, and the frontends show the
//! run's throughput as a speedup and an efficiency against it.

use std::time::Duration;

use crate::config::{Budget, DeviceSpec, RunConfig};
use crate::engine::{Device, RunResult};

/// Steps of the calibration run before timing starts, and timed.
const WARM_STEPS: u64 = 20;
const TIMED_STEPS: u64 = 100;

/// The calibration run of `cfg`: the run's first device alone (a GPU run is measured against
/// one of its GPUs, a CPU run against one worker with the run's `threads_per_worker`, not one
/// given every core), a short fixed number of steps, nothing written. The engine runs it on the
/// run's own training split.
pub fn calibration_config(cfg: &RunConfig, first: &Device, threads_per_worker: usize) -> RunConfig {
    RunConfig {
        devices: match first {
            Device::Gpu { index, .. } => DeviceSpec::Gpus(vec![*index]),
            Device::Cpu { .. } => DeviceSpec::Cpu(1),
        },
        threads_per_worker: Some(threads_per_worker),
        budget: Budget::Steps(WARM_STEPS + TIMED_STEPS),
        final_checkpoint: false,
        checkpoint_every: None,
        val_every: None,
        checkpoint_best: false,
        resume: None,
        metrics_out: None,
        run_dir: None,
        link_latest: false,
        calibrate: false,
        slow_rank: None,
        slow_data: None,
        inject_panic: None,
        rebalance: false,
        inputs: crate::data::DataOptions::no_validation(),
        ..cfg.clone()
    }
}

/// Samples per second of the calibration run `r`.
pub fn calibrated_rate(r: &RunResult) -> f64 {
    timed_rate(r, WARM_STEPS)
}

/// Samples/s of the run `r`'s steps after the first `warm_steps`, from when each step ended and
/// the samples it trained (a batch cut to a small training split, an epoch's short last one,
/// count as what they took).
pub fn timed_rate(r: &RunResult, warm_steps: u64) -> f64 {
    let ends = &r.step_ends;
    let warm = (warm_steps as usize).min(ends.len().saturating_sub(1));
    let t0 = warm.checked_sub(1).map_or(Duration::ZERO, |i| ends[i]);
    let t1 = ends.last().copied().unwrap_or_default();
    let samples: usize = r.step_samples.get(warm..).unwrap_or_default().iter().sum();
    samples as f64 / (t1 - t0).as_secs_f64().max(1e-9)
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
    fn timed_rate_skips_the_warm_up_and_counts_the_samples_each_step_took() {
        let r = RunResult {
            step_ends: [1, 2, 12, 22, 32].map(Duration::from_millis).to_vec(),
            step_samples: vec![10; 5],
            ..RunResult::default()
        };
        // 3 timed steps of 10 samples in 30 ms, after 2 warm-up steps
        assert!((timed_rate(&r, 2) - 1000.0).abs() < 1e-6);
        // no warm-up: timed from the start of the run
        assert!((timed_rate(&r, 0) - 50.0 / 0.032).abs() < 1e-6);
        // an epoch's short last batch counts as what it took
        let short = RunResult {
            step_samples: vec![10, 10, 10, 10, 4],
            ..r
        };
        assert!((timed_rate(&short, 2) - 24.0 / 0.030).abs() < 1e-6);
    }

    #[test]
    fn speedup_and_efficiency() {
        assert_eq!(scaling(300.0, 100.0, 4), (3.0, 0.75));
    }

    #[test]
    fn calibration_runs_on_the_run_s_first_device() {
        let cfg = RunConfig::default();
        let gpu = Device::Gpu {
            index: 2,
            name: "H100".into(),
            pci_bus_id: None,
            arch: 90,
        };
        assert_eq!(
            calibration_config(&cfg, &gpu, 1).devices,
            DeviceSpec::Gpus(vec![2])
        );
        let cpu = calibration_config(&cfg, &Device::Cpu { index: 0 }, 3);
        assert_eq!(
            (cpu.devices, cpu.threads_per_worker),
            (DeviceSpec::Cpu(1), Some(3))
        );
    }
}
