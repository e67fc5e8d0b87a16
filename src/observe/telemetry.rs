//! What each device is doing, sampled at an interval. One sample type for every backend:
//! a metric a device cannot report is `None` (shown as n/a), never 0.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::Sender;

use crate::engine::events::StepStats;
use crate::engine::Device;
use crate::observe::sample::DeviceSample;

/// Busy time of CPU workers, from their step timings: each step's busy time (computing,
/// reducing, updating) spread over the wall time the step took, so a step longer than the
/// sample interval reads as busy through it rather than as idle samples and then one full one.
struct BusyMeter {
    ranks: Vec<RankBusy>,
    since: Duration,
}

#[derive(Clone, Copy, Default)]
struct RankBusy {
    /// Busy seconds of the steps that ended since the last sample, within the sample's span.
    busy: f64,
    /// The last step: when it ended, how long it took, and its busy share.
    last: Option<(Duration, Duration, f64)>,
}

impl BusyMeter {
    pub fn new(ranks: usize) -> BusyMeter {
        BusyMeter {
            ranks: vec![RankBusy::default(); ranks],
            since: Duration::ZERO,
        }
    }

    pub fn on_step(&mut self, s: &StepStats) {
        let Some(r) = self.ranks.get_mut(s.rank) else {
            return;
        };
        let busy = s.compute + s.comm + s.optimizer;
        let wall = s.step_time.max(busy);
        let share = match wall.is_zero() {
            true => 0.0,
            false => busy.as_secs_f64() / wall.as_secs_f64(),
        };
        // the part of the step inside this sample's span (the rest was the last sample's,
        // which counted it as the step before going on)
        let inside =
            s.at.saturating_sub(s.at.saturating_sub(wall).max(self.since));
        r.busy += share * inside.as_secs_f64();
        r.last = Some((s.at, wall, share));
    }

    /// One sample per rank covering the time since the previous call; `now` is time since
    /// the run started, on the clock of `StepStats::at`. After its last step a rank counts as
    /// going on as in it for as long as that step took, then as idle (paused, validating,
    /// waiting or done); before its first step its share is unknown.
    pub fn sample(&mut self, now: Duration) -> Vec<DeviceSample> {
        let since = self.since;
        let span = now.saturating_sub(since).as_secs_f64();
        self.since = now;
        self.ranks
            .iter_mut()
            .map(|r| {
                let util = r.last.filter(|_| span > 0.0).map(|(end, wall, share)| {
                    let going = now.min(end + wall).saturating_sub(end.max(since));
                    ((r.busy + share * going.as_secs_f64()) / span).min(1.0) as f32
                });
                r.busy = 0.0;
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
    /// What else keeps the machine's cores busy (`None`: the demo's, made-up run).
    load: Option<crate::observe::machine_load::LoadMeter>,
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
            gpu_ranks: gpus.iter().map(|g| g.0).collect(),
            latest,
            _stop: stop,
            load: Some(Default::default()),
            ..Telemetry::of_steps(devices.len())
        }
    }

    /// Busy shares from the step timings alone, reading nothing of the machine (the demo's
    /// run, whose device samples are made up).
    pub fn of_steps(ranks: usize) -> Telemetry {
        Telemetry {
            busy: BusyMeter::new(ranks),
            gpu_ranks: Vec::new(),
            latest: Arc::new(Mutex::new(None)),
            _stop: None,
            load: None,
        }
    }

    pub fn on_step(&mut self, s: &StepStats) {
        self.busy.on_step(s);
    }

    /// The run's other processes on this machine (`pids`): their time is the run's, their
    /// cores too.
    pub fn with_siblings(&mut self, siblings: Vec<u32>) {
        if let Some(l) = self.load.as_mut() {
            l.siblings = siblings;
        }
    }

    /// The machine's load since the last call (its first: none).
    pub fn load(&mut self) -> Option<crate::observe::machine_load::Load> {
        self.load.as_mut()?.sample()
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
            grad_norm: 1.0,
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
            paused: false,
            progress: 0.0,
            ends_at: None,
        }
    }

    /// A step of `rank` that ended at `at_ms`, `busy_ms` of it computing and `idle_ms` waiting.
    fn ended(rank: usize, at_ms: u64, busy_ms: u64, idle_ms: u64) -> StepStats {
        StepStats {
            at: Duration::from_millis(at_ms),
            sync_wait: Duration::from_millis(idle_ms),
            data_wait: Duration::ZERO,
            step_time: Duration::from_millis(busy_ms + idle_ms),
            ..step(rank, busy_ms, 0)
        }
    }

    #[test]
    fn busy_counts_work_not_waiting_and_resets_each_sample() {
        let mut m = BusyMeter::new(2);
        // before a rank's first step: unknown
        assert_eq!(m.sample(Duration::from_millis(10))[0].util, None);
        for i in 1..=10 {
            m.on_step(&ended(0, 10 + 100 * i, 80, 20));
            m.on_step(&ended(1, 10 + 100 * i, 20, 80));
        }
        let s = m.sample(Duration::from_millis(1010));
        assert!((s[0].util.unwrap() - 0.8).abs() < 1e-3, "{:?}", s[0].util);
        assert!((s[1].util.unwrap() - 0.2).abs() < 1e-3, "{:?}", s[1].util);
        assert_eq!(s[0].mem_access, None);
        // then paused: the step it was taken to be in (0.1 s of it busy 80%), then 0%, not n/a
        let s = m.sample(Duration::from_millis(2010));
        assert!((s[0].util.unwrap() - 0.08).abs() < 1e-3, "{:?}", s[0].util);
        let s = m.sample(Duration::from_millis(3010));
        assert_eq!(s[0].util, Some(0.0));
    }

    #[test]
    fn a_step_longer_than_the_interval_is_busy_through_it() {
        let mut m = BusyMeter::new(1);
        // 8 s steps, all computing, sampled every second: 100% throughout, no idle seconds
        m.on_step(&ended(0, 8000, 8000, 0));
        let mut utils = Vec::new();
        for t in 1..=20 {
            let now = 8000 + 1000 * t;
            if now % 8000 == 0 {
                m.on_step(&ended(0, now, 8000, 0));
            }
            utils.push(m.sample(Duration::from_millis(now))[0].util.unwrap());
        }
        assert!(utils.iter().all(|u| (u - 1.0).abs() < 1e-6), "{utils:?}");
        // the run ended at 24 s: idle once a step's time has passed without a step
        let idle = m.sample(Duration::from_millis(40_000))[0].util.unwrap();
        assert!(idle < 0.6, "{idle}");
        assert_eq!(m.sample(Duration::from_millis(41_000))[0].util, Some(0.0));
    }

    #[test]
    fn process_memory_is_plausible() {
        if let Some((rss, total)) = process_memory() {
            assert!(rss > 1 << 20 && rss < total, "{rss} {total}");
        }
    }
}
