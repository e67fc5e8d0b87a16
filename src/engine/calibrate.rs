//! Scaling against one device: a short calibration run (`--calibrate`) measures what a single
//! device does with the same model, data and per-replica batch, and the frontends show the
//! run's throughput as a speedup and an efficiency against it.
//!
//! It is timed as the run's own pace is counted (samples over the steps' time, not the wall
//! time between them), for long enough to mean something, once what the run finds done (the
//! pictures decoded and kept on their first use) is done.

use std::time::Duration;

use crate::config::{Budget, DeviceSpec, RunConfig};
use crate::engine::{Device, Engine, EngineError, RunResult};

/// Steps of the calibration run before timing starts, at least.
const WARM_STEPS: u64 = 20;
/// Timed, at least: steps, and their time summed.
const TIMED_STEPS: u64 = 100;
const TIMED: Duration = Duration::from_secs(1);
/// Timed at most (where its steps are slow: a large model on a CPU), and the fewest steps it
/// then takes.
const TIMED_AT_MOST: Duration = Duration::from_secs(10);
const FEWEST_STEPS: u64 = 3;

/// The calibration run of `cfg`: the run's first device alone (a GPU run is measured against
/// one of its GPUs, a CPU run against one worker with the run's `threads_per_worker`, not one
/// given every core), `warm` steps then timed until `measure` stops it, nothing written. The
/// engine runs it on the run's own training split.
pub fn calibration_config(
    cfg: &RunConfig,
    first: &Device,
    threads_per_worker: usize,
    warm: u64,
) -> RunConfig {
    RunConfig {
        devices: match first {
            Device::Gpu { index, .. } => DeviceSpec::Gpus(vec![*index]),
            Device::Cpu { .. } => DeviceSpec::Cpu(1),
        },
        threads_per_worker: Some(threads_per_worker),
        // (stopped by `measure` long before)
        budget: Budget::Steps(warm + 1_000_000_000),
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

/// Steps before the calibration is timed: `WARM_STEPS`, or where the training split's `samples`
/// are pictures `decoded_once` (on their first use, and kept), one pass over them at `per_step`
/// samples a step (the run reads them decoded: a one-device pace timed while they were decoded
/// would be slow by the decoding).
pub fn warm_steps(samples: usize, decoded_once: bool, per_step: usize) -> u64 {
    match decoded_once {
        true => (samples.div_ceil(per_step.max(1)) as u64).max(WARM_STEPS),
        false => WARM_STEPS,
    }
}

/// Samples per second of the calibration run `engine` (one rank) after its first `warm` steps:
/// its samples over its steps' time, as the run's pace is counted; stops it once timed long
/// enough.
pub fn measure(engine: Engine, warm: u64) -> Result<f64, EngineError> {
    let (mut samples, mut time, mut steps) = (0usize, Duration::ZERO, 0u64);
    let mut stopping = false;
    for s in engine.steps().clone().iter() {
        if s.step <= warm || stopping {
            continue;
        }
        (samples, time, steps) = (samples + s.samples, time + s.step_time, steps + 1);
        let enough = (steps >= TIMED_STEPS && time >= TIMED)
            || (steps >= FEWEST_STEPS && time >= TIMED_AT_MOST);
        if enough {
            stopping = engine.controller().stop(false).is_ok();
        }
    }
    engine.join_discarding_events()?;
    Ok(samples as f64 / time.as_secs_f64().max(1e-9))
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
            calibration_config(&cfg, &gpu, 1, WARM_STEPS).devices,
            DeviceSpec::Gpus(vec![2])
        );
        let cpu = calibration_config(&cfg, &Device::Cpu { index: 0 }, 3, WARM_STEPS);
        assert_eq!(
            (cpu.devices, cpu.threads_per_worker),
            (DeviceSpec::Cpu(1), Some(3))
        );
    }

    #[test]
    fn pictures_decoded_and_kept_on_their_first_use_are_decoded_before_the_timing() {
        // a pass over 2000 kept pictures at 32 a step
        assert_eq!(warm_steps(2000, true, 32), 63);
        // a small set: the warm-up's own steps
        assert_eq!(warm_steps(100, true, 32), WARM_STEPS);
        // decoded every time, or in memory: every pass alike
        assert_eq!(warm_steps(2000, false, 32), WARM_STEPS);
    }
}
