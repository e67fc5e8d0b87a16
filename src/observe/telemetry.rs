//! What each device is doing, sampled at an interval. One sample type for every backend:
//! a metric a device cannot report is `None` (shown as n/a), never 0.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::Sender;

use crate::engine::events::StepStats;
use crate::engine::Device;
use crate::observe::sample::DeviceSample;

/// Busy time of CPU workers, from their step timings.
struct BusyMeter {
    busy: Vec<Duration>,
    since: Duration,
}

impl BusyMeter {
    pub fn new(ranks: usize) -> BusyMeter {
        BusyMeter {
            busy: vec![Duration::ZERO; ranks],
            since: Duration::ZERO,
        }
    }

    pub fn on_step(&mut self, s: &StepStats) {
        if let Some(b) = self.busy.get_mut(s.rank) {
            *b += s.compute + s.comm + s.optimizer;
        }
    }

    /// One sample per rank covering the time since the previous call; `now` is time since
    /// the run started, on the clock of `StepStats::at`.
    pub fn sample(&mut self, now: Duration) -> Vec<DeviceSample> {
        let span = now.saturating_sub(self.since).as_secs_f64();
        self.since = now;
        self.busy
            .iter_mut()
            .map(|b| {
                let util = (span > 0.0).then(|| (b.as_secs_f64() / span).min(1.0) as f32);
                *b = Duration::ZERO;
                DeviceSample {
                    util,
                    ..DeviceSample::default()
                }
            })
            .collect()
    }
}

/// Every rank's device sample: CPU workers' busy share from their step timings, GPUs' values
/// from NVML (read by a sampler thread every `interval`; a GPU NVML cannot read keeps its busy
/// share from its CUDA-event step times). Both frontends sample through this.
pub struct Telemetry {
    busy: BusyMeter,
    /// The rank of each NVML device, in the sampler's order.
    gpu_ranks: Vec<usize>,
    latest: Arc<Mutex<Option<Vec<DeviceSample>>>>,
    /// Dropped to stop the sampler thread.
    _stop: Option<Sender<()>>,
}

impl Telemetry {
    pub fn new(devices: &[Device], interval: Duration) -> Telemetry {
        let gpus: Vec<(usize, String)> = devices
            .iter()
            .enumerate()
            .filter_map(|(rank, d)| match d {
                Device::Gpu { pci_bus_id, .. } => {
                    Some((rank, pci_bus_id.clone().unwrap_or_default()))
                }
                Device::Cpu { .. } => None,
            })
            .collect();
        let latest = Arc::new(Mutex::new(None));
        let ids: Vec<String> = gpus.iter().map(|g| g.1.clone()).collect();
        let stop = (!gpus.is_empty())
            .then(|| crate::observe::nvml::Nvml::open(&ids).ok())
            .flatten()
            .and_then(|nvml| spawn_sampler(nvml, interval, latest.clone()));
        Telemetry {
            busy: BusyMeter::new(devices.len()),
            gpu_ranks: gpus.iter().map(|g| g.0).collect(),
            latest,
            _stop: stop,
        }
    }

    pub fn on_step(&mut self, s: &StepStats) {
        self.busy.on_step(s);
    }

    /// One sample per rank covering the time since the previous call (`now`: since the start).
    pub fn sample(&mut self, now: Duration) -> Vec<DeviceSample> {
        let mut samples = self.busy.sample(now);
        let latest = self.latest.lock().map(|l| l.clone()).unwrap_or_default();
        for (rank, s) in self.gpu_ranks.iter().zip(latest.unwrap_or_default()) {
            if let Some(slot) = samples.get_mut(*rank) {
                let fallback = slot.util;
                *slot = DeviceSample {
                    util: s.util.or(fallback),
                    ..s
                };
            }
        }
        samples
    }
}

/// Reads NVML every `interval` into `latest` until the returned sender is dropped.
fn spawn_sampler(
    nvml: crate::observe::nvml::Nvml,
    interval: Duration,
    latest: Arc<Mutex<Option<Vec<DeviceSample>>>>,
) -> Option<Sender<()>> {
    let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
    std::thread::Builder::new()
        .name("nvml-sampler".into())
        .spawn(move || loop {
            let s = nvml.sample();
            if let Ok(mut l) = latest.lock() {
                *l = Some(s);
            }
            // a message never comes: this waits `interval`, or ends when the sender is gone
            if let Err(crossbeam_channel::RecvTimeoutError::Disconnected) =
                stopped.recv_timeout(interval)
            {
                return;
            }
        })
        .ok()?;
    Some(stop)
}

/// This process's resident memory and the machine's total, in bytes (Linux; `None` elsewhere).
pub fn process_memory() -> Option<(u64, u64)> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    let total = crate::data::host_memory::meminfo("MemTotal")?;
    // the kernel's page size on every Linux platform we build for
    Some((pages * 4096, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(rank: usize, compute_ms: u64, wait_ms: u64) -> StepStats {
        StepStats {
            rank,
            step: 1,
            epoch: 1,
            samples: 1,
            global_samples: 2,
            per_replica: 1,
            loss: 1.0,
            accuracy: 0.0,
            lr: 1e-3,
            data_wait: Duration::from_millis(wait_ms),
            compute: Duration::from_millis(compute_ms),
            compute_cpu: None,
            device_timed: false,
            comm: Duration::ZERO,
            sync_wait: Duration::from_millis(wait_ms),
            transfer: Duration::ZERO,
            optimizer: Duration::ZERO,
            step_time: Duration::from_millis(compute_ms + 2 * wait_ms),
            at: Duration::ZERO,
            after_pause: false,
            progress: 0.0,
        }
    }

    #[test]
    fn busy_counts_work_not_waiting_and_resets_each_sample() {
        let mut m = BusyMeter::new(2);
        for _ in 0..10 {
            m.on_step(&step(0, 80, 5));
            m.on_step(&step(1, 20, 40));
        }
        let s = m.sample(Duration::from_secs(1));
        assert!((s[0].util.unwrap() - 0.8).abs() < 1e-6);
        assert!((s[1].util.unwrap() - 0.2).abs() < 1e-6);
        assert_eq!(s[0].mem_access, None);
        // nothing ran in the next second (paused): 0% busy, not n/a
        let s = m.sample(Duration::from_secs(2));
        assert_eq!(s[0].util, Some(0.0));
    }

    #[test]
    fn process_memory_is_plausible() {
        if let Some((rss, total)) = process_memory() {
            assert!(rss > 1 << 20 && rss < total, "{rss} {total}");
        }
    }
}
