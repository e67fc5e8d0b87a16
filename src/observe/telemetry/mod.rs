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
mod tests;
