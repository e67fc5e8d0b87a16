//! What each device is doing, sampled at an interval. One sample type for every backend:
//! a metric a device cannot report is `None` (shown as n/a), never 0.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use crate::comm::samples::Samples;
use crate::engine::events::StepStats;
use crate::engine::{Device, RunInfo};
use crate::observe::machine_load::{Load, LoadMeter};
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
    load: Option<LoadMeter>,
    /// A run over several processes: the samples the others send (`Peers`).
    peers: Option<Peers>,
}

/// The other processes' samples of their ranks, as process 0 hears them.
struct Peers {
    samples: Arc<Samples>,
    /// Process 0's ranks (read here, or from their step times).
    own: Range<usize>,
    /// How old a sample may be to be shown, or a machine's load to be taken as holding.
    within: Duration,
    /// When each machine's load last came (by the first rank of the process that sent it).
    loads_heard: BTreeMap<usize, Instant>,
}

/// What process 0 heard of another machine's load since the last sample.
pub enum PeerLoad {
    Load(Load),
    /// None came for longer than a few intervals (said once): what was said of it holds no more.
    Unheard,
}

impl Telemetry {
    /// The telemetry of `info`'s run, read by process 0: NVML reads the GPUs of its machine
    /// alone (another machine's GPU at the same bus id is another GPU: its ranks keep their
    /// busy share from their step times).
    pub fn new(info: &RunInfo, interval: Duration) -> Telemetry {
        let here = |rank: &usize| info.on_first_host(*rank);
        let gpus = gpus_of(info, (0..info.devices.len()).filter(here));
        let latest = Arc::new(Mutex::new(None));
        let ids: Vec<String> = gpus.iter().map(|g| g.1.clone()).collect();
        let into = latest.clone();
        let stop = (!gpus.is_empty())
            .then(|| crate::observe::nvml::Nvml::open(&ids).ok())
            .flatten()
            .and_then(|nvml| {
                spawn_sampler(nvml, interval, move |s| {
                    if let Ok(mut l) = into.lock() {
                        *l = Some(s);
                    }
                })
            });
        Telemetry {
            gpu_ranks: gpus.iter().map(|g| g.0).collect(),
            latest,
            _stop: stop,
            load: Some(Default::default()),
            ..Telemetry::of_steps(info.devices.len())
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
            peers: None,
        }
    }

    /// Process 0 of a run over several processes (`peers`: the samples the others send, and
    /// its own ranks): another process's rank shows its process's newest sample (where one
    /// came within a few intervals), its busy share from its step times where that has none.
    pub fn with_peers(
        mut self,
        peers: Option<(Arc<Samples>, Range<usize>)>,
        interval: Duration,
    ) -> Telemetry {
        self.peers = peers.map(|(samples, own)| Peers {
            samples,
            own,
            within: 3 * interval + Duration::from_secs(2),
            loads_heard: Default::default(),
        });
        self
    }

    /// A process other than process 0, on another machine: reads the GPUs of its ranks
    /// (`local`) and, where it is the run's first process there, the machine's load, every
    /// `interval`, and posts them for process 0 (`comm::samples`), until the returned sender
    /// is dropped. None where it has nothing to read.
    pub fn post_for_process_0(
        info: &RunInfo,
        local: Range<usize>,
        interval: Duration,
        samples: Arc<Samples>,
    ) -> Option<Sender<()>> {
        let gpus = gpus_of(info, local.clone());
        let ids: Vec<String> = gpus.iter().map(|g| g.1.clone()).collect();
        let nvml = (!gpus.is_empty())
            .then(|| crate::observe::nvml::Nvml::open(&ids).ok())
            .flatten();
        let mut load = first_here(info, &local).then(|| {
            let mut meter = LoadMeter::default();
            meter.siblings = info.peers_here.iter().map(|p| p.pid).collect();
            meter
        });
        if nvml.is_none() && load.is_none() {
            return None;
        }
        every(interval, move || {
            if let Some(nvml) = &nvml {
                let posted: Vec<(usize, Vec<u64>)> = (gpus.iter().zip(nvml.sample()))
                    .map(|((rank, _), s)| (*rank, s.to_words()))
                    .collect();
                samples.post(&posted);
            }
            if let Some(l) = load.as_mut().and_then(LoadMeter::sample) {
                samples.post_load(local.start, &l.to_words());
            }
        })
    }

    /// As `post_for_process_0`, made-up samples of every rank in `local`, `temp_c` degrees and
    /// nothing else, and a load of the machine whose two cores other work takes (`made-up
    /// (pid 1)`): `--inject-peer-sample`, for tests of the way between the processes.
    pub fn post_made_up(
        info: &RunInfo,
        local: Range<usize>,
        interval: Duration,
        samples: Arc<Samples>,
        temp_c: f32,
    ) -> Option<Sender<()>> {
        let sample = DeviceSample {
            temp_c: Some(temp_c),
            ..DeviceSample::default()
        };
        let load = Load {
            cores: 2,
            ours: 0.0,
            others: 2.0,
            top: Some(("made-up (pid 1)".into(), 2.0)),
        };
        let (first, loaded) = (local.start, first_here(info, &local));
        let posted: Vec<(usize, Vec<u64>)> = local.map(|r| (r, sample.to_words())).collect();
        every(interval, move || {
            samples.post(&posted);
            if loaded {
                samples.post_load(first, &load.to_words());
            }
        })
    }

    /// Process 0 of a run over several processes: the loads the other machines' processes
    /// sent since the last call, each by the first rank of the process that sent it, and
    /// those whose loads stopped coming (once each time they stop).
    pub fn peer_loads(&mut self) -> Vec<(usize, PeerLoad)> {
        let Some(p) = &mut self.peers else {
            return Vec::new();
        };
        let now = Instant::now();
        let heard: Vec<(usize, Load)> = (p.samples.loads().into_iter())
            .filter(|(r, _)| !p.own.contains(r))
            .filter_map(|(r, words)| Some((r, Load::from_words(&words)?)))
            .collect();
        for (r, _) in &heard {
            p.loads_heard.insert(*r, now);
        }
        let within = p.within;
        let mut out: Vec<(usize, PeerLoad)> = Vec::new();
        p.loads_heard.retain(|&r, at| {
            // (not while this process was stopped: Ctrl-Z, kill -STOP)
            let quiet = crate::clock::awake(now.duration_since(*at)) > within;
            if quiet {
                out.push((r, PeerLoad::Unheard));
            }
            !quiet
        });
        out.extend(heard.into_iter().map(|(r, l)| (r, PeerLoad::Load(l))));
        out
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
    pub fn load(&mut self) -> Option<Load> {
        self.load.as_mut()?.sample()
    }

    /// One sample per rank covering the time since the previous call (`now`: since the start).
    pub fn sample(&mut self, now: Duration) -> Vec<DeviceSample> {
        let mut samples = self.busy.sample(now);
        let latest = self.latest.lock().map(|l| l.clone()).unwrap_or_default();
        let read_here = self
            .gpu_ranks
            .iter()
            .copied()
            .zip(latest.unwrap_or_default());
        let peers = self.peers.as_ref().map_or(Vec::new(), |p| {
            (0..samples.len())
                .filter(|r| !p.own.contains(r) && !self.gpu_ranks.contains(r))
                .filter_map(|r| Some((r, p.samples.of(r, p.within)?)))
                .filter_map(|(r, words)| Some((r, DeviceSample::from_words(&words)?)))
                .collect()
        });
        for (rank, s) in read_here.chain(peers) {
            if let Some(slot) = samples.get_mut(rank) {
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

/// Whether the process of the ranks `local` is the run's first on its machine (by host name),
/// which reads the machine's load for process 0: the others there would read the same.
fn first_here(info: &RunInfo, local: &Range<usize>) -> bool {
    let host = info.hosts.get(local.start);
    !info.hosts.iter().take(local.start).any(|h| Some(h) == host)
}

/// Of `ranks` of `info`'s run, those on GPUs, each with its GPU's PCI bus id (as NVML finds it).
fn gpus_of(info: &RunInfo, ranks: impl Iterator<Item = usize>) -> Vec<(usize, String)> {
    (ranks.filter_map(|r| match info.devices.get(r)? {
        Device::Gpu { pci_bus_id, .. } => Some((r, pci_bus_id.clone().unwrap_or_default())),
        Device::Cpu { .. } => None,
    }))
    .collect()
}

/// Reads NVML every `interval` into `put` until the returned sender is dropped.
fn spawn_sampler(
    nvml: crate::observe::nvml::Nvml,
    interval: Duration,
    mut put: impl FnMut(Vec<DeviceSample>) + Send + 'static,
) -> Option<Sender<()>> {
    every(interval, move || put(nvml.sample()))
}

/// Calls `f` now and every `interval` on a thread of its own until the returned sender is
/// dropped.
fn every(interval: Duration, mut f: impl FnMut() + Send + 'static) -> Option<Sender<()>> {
    let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
    std::thread::Builder::new()
        .name("nvml-sampler".into())
        .spawn(move || loop {
            f();
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
    fn another_processes_ranks_show_its_samples_and_their_own_busy_share_where_it_has_none() {
        let samples = Arc::new(Samples::new(3));
        let interval = Duration::from_millis(100);
        // process 0 holds rank 0; the other process ranks 1 and 2
        let mut t = Telemetry::of_steps(3).with_peers(Some((samples.clone(), 0..1)), interval);
        for r in 0..3 {
            t.on_step(&ended(r, 900, 500, 500));
        }
        let gpu = DeviceSample {
            util: None,
            temp_c: Some(64.0),
            mem_used: Some(1 << 30),
            ..DeviceSample::default()
        };
        let words = |r: usize| (r, gpu.to_words());
        let there = Samples::new(3);
        // (rank 0's is process 0's own: one claiming it is not taken)
        there.post(&[words(0), words(1), words(2)]);
        samples.heard(&there.take_fresh().unwrap());
        let s = t.sample(Duration::from_millis(1000));
        assert_eq!(s[0].temp_c, None);
        for r in [1, 2] {
            assert_eq!((s[r].temp_c, s[r].mem_used), (Some(64.0), Some(1 << 30)));
            // NVML's busy share missing: the step times' (half of the step)
            assert!((s[r].util.unwrap() - 0.5).abs() < 0.01, "{:?}", s[r].util);
        }
        // a process silent for longer than a few intervals (here: a millisecond): its ranks'
        // samples are not shown
        t.peers.as_mut().unwrap().within = Duration::from_millis(1);
        std::thread::sleep(Duration::from_millis(5));
        let s = t.sample(Duration::from_millis(3000));
        assert_eq!(s[1].temp_c, None);
    }

    #[test]
    fn another_machines_load_is_given_as_it_comes_and_its_silence_once() {
        let samples = Arc::new(Samples::new(4));
        let interval = Duration::from_millis(100);
        let mut t = Telemetry::of_steps(4).with_peers(Some((samples.clone(), 0..2)), interval);
        let load = Load {
            cores: 16,
            ours: 2.0,
            others: 3.0,
            top: None,
        };
        let from = |rank: usize| {
            let there = Samples::new(4);
            there.post_load(rank, &load.to_words());
            samples.heard(&there.take_fresh().unwrap());
        };
        let given = |t: &mut Telemetry| -> Vec<(usize, bool)> {
            let heard = t.peer_loads().into_iter();
            heard
                .map(|(r, l)| (r, matches!(l, PeerLoad::Load(_))))
                .collect()
        };
        from(2);
        assert_eq!(given(&mut t), [(2, true)]);
        // (none new since: nothing, until it is overdue; process 0's own rank is not another's)
        assert_eq!(given(&mut t), []);
        from(0);
        assert_eq!(given(&mut t), []);
        t.peers.as_mut().unwrap().within = Duration::from_millis(1);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(given(&mut t), [(2, false)]);
        assert_eq!(given(&mut t), []);
        // coming again: given again
        from(2);
        assert_eq!(given(&mut t), [(2, true)]);
    }

    #[test]
    fn process_memory_is_plausible() {
        if let Some((rss, total)) = process_memory() {
            assert!(rss > 1 << 20 && rss < total, "{rss} {total}");
        }
    }
}
