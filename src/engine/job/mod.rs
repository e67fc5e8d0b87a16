//! A run over several processes (one per machine, or per GPU): at start-up they meet, check
//! that they train the same thing, learn each other's devices and hosts, and take the same
//! starting point from process 0. Global rank = the process's offset + its local index.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::fingerprint;
use super::{Device, EngineError};
use crate::comm::processes::{broadcast_vec, gather_vecs};
use crate::comm::{CollectiveError, Processes};
use crate::config::RunConfig;
use crate::data::Dataset;
use crate::pids::hostname;

mod gpus;
pub(super) mod notes;
mod start_message;

pub(super) use gpus::share_machine;
pub(super) use start_message::share_start;

/// This process's place in the run, and every rank's device and host.
#[derive(Clone)]
pub(super) struct World {
    pub procs: Option<Arc<dyn Processes>>,
    /// Every rank's device, in global rank order.
    pub devices: Vec<Device>,
    /// Every rank's host (empty for a one-process run).
    pub hosts: Vec<String>,
    /// The global rank of every process's first rank, then the world size.
    pub offsets: Vec<usize>,
    /// Processes of this run on this machine (they share its cores).
    pub neighbours: usize,
    /// The run's other processes on this machine: their global ranks and process ids (their
    /// CPU time is the run's, not outside load; a lost one may be suspended here).
    pub peers_here: Vec<crate::pids::Peer>,
    /// The largest per-replica batch the memory of every other process allows (`memory`).
    pub others_max_batch: Option<usize>,
    /// The other processes' notes on their devices that differ from this one's (`notes`).
    pub others_notes: Vec<String>,
}

impl World {
    pub fn single(devices: Vec<Device>) -> World {
        let n = devices.len();
        World {
            procs: None,
            devices,
            hosts: Vec::new(),
            offsets: vec![0, n],
            neighbours: 1,
            peers_here: Vec::new(),
            others_max_batch: None,
            others_notes: Vec::new(),
        }
    }

    pub fn process(&self) -> usize {
        self.procs.as_ref().map_or(0, |p| p.index())
    }

    /// This process's ranks, as global ranks.
    pub fn local(&self) -> std::ops::Range<usize> {
        let p = self.process();
        self.offsets[p]..self.offsets[p + 1]
    }
}

/// What each process tells the others at start-up.
#[derive(Serialize, Deserialize)]
struct Hello {
    host: String,
    /// Its process id, and where that id means this process (`pids::pid_space`).
    pid: u32,
    pid_space: String,
    /// (GPU, index, name, PCI bus id, compute capability) of each device.
    devices: Vec<(bool, usize, String, Option<String>, u32)>,
    /// What every process must agree on, as (what, value).
    same: Vec<(String, String)>,
    /// The largest per-replica batch this process's memory allows.
    max_batch: usize,
    /// Its own note on its devices (`devices::resolve_devices`), for process 0 to say.
    note: Option<String>,
    /// Its `--data`, as given (a path may differ between machines: named where the data do).
    data: String,
}

/// Where a process of the run is among those on its machine (to share its GPUs and cores).
#[derive(Clone, Copy)]
pub(super) struct Place {
    /// Its index among them, and their number.
    pub local: (usize, usize),
    /// How many of them (it included) may run on the same cores as it: a launcher that binds
    /// each to cores of its own leaves it 1.
    pub sharers: usize,
}

pub(super) fn place_on_host(procs: &dyn Processes) -> Result<Place, EngineError> {
    let mine = format!("{}\n{:x}", hostname(), super::devices::affinity_key());
    let all = gather_vecs(procs, mine.as_bytes()).map_err(lost)?;
    let host = |b: &[u8]| b.split(|&c| c == b'\n').next().map(<[u8]>::to_vec);
    let me = &all[procs.index()];
    let here = all.iter().filter(|h| host(h) == host(me)).count();
    let before = (all[..procs.index()].iter())
        .filter(|h| host(h) == host(me))
        .count();
    let sharers = all.iter().filter(|h| *h == me).count();
    Ok(Place {
        local: (before, here),
        sharers,
    })
}

fn lost(e: CollectiveError) -> EngineError {
    EngineError::Collective(e)
}

/// How long the processes of a run wait for each other before one is taken for lost: as long
/// as a GPU all-reduce waits for a hung peer (a slow input or a long checkpoint write on
/// process 0 must not end the run), and never less than a paused run's meetings need.
pub fn peer_patience(stall_timeout: std::time::Duration) -> std::time::Duration {
    (stall_timeout * super::worker::ALL_REDUCE_TIMEOUT_FACTOR)
        .max(std::time::Duration::from_secs(5))
}

/// The processes meet: each says its host, its devices and what it trains; a process that
/// trains something else is an error naming it.
pub(super) fn meet(
    procs: Arc<dyn Processes>,
    cfg: &RunConfig,
    (local, note): (Vec<Device>, Option<String>),
    train: &Dataset,
    val: &Dataset,
    max_batch: usize,
) -> Result<World, EngineError> {
    if cfg.strategy == crate::engine::strategy::Strategy::CentralStorage {
        return Err(EngineError::Shared(
            "--strategy central-storage keeps the one copy of the model in one process's memory, so it cannot span processes: across machines use --strategy mirrored (the default) or local-sgd:H".into(),
        ));
    }
    // (as a user gives them: `0.01`, `local-sgd:4 after 100 synchronous steps`; "" not given)
    fn given<T: std::fmt::Display>(v: Option<T>) -> String {
        v.map_or(String::new(), |v| v.to_string())
    }
    let strategy = match cfg.strategy {
        crate::engine::strategy::Strategy::LocalSgd { warmup, .. } => {
            format!("{} after {warmup} synchronous steps", cfg.strategy)
        }
        s => s.to_string(),
    };
    let budget = match cfg.budget {
        crate::config::Budget::Epochs(e) => format!("{e} epochs"),
        crate::config::Budget::Steps(s) => format!("{s} steps"),
    };
    let hello = Hello {
        data: cfg.data.to_string(),
        host: hostname(),
        pid: std::process::id(),
        pid_space: crate::pids::pid_space(),
        devices: local
            .iter()
            .map(|d| match d {
                Device::Cpu { index } => (false, *index, String::new(), None, 0),
                Device::Gpu {
                    index,
                    name,
                    pci_bus_id,
                    arch,
                } => (true, *index, name.clone(), pci_bus_id.clone(), *arch),
            })
            .collect(),
        same: vec![
            ("--model".into(), cfg.model.to_string()),
            ("--precision".into(), cfg.precision.to_string()),
            // (the all-reduce's calls and types: NCCL compares neither across ranks)
            ("--grad-dtype".into(), cfg.grad_dtype.to_string()),
            ("--optimizer".into(), cfg.optimizer.to_string()),
            ("--seed".into(), cfg.seed.to_string()),
            ("--grad-accum".into(), cfg.grad_accum.to_string()),
            // (with its warm-up: when local SGD averages decides which exchanges happen)
            ("--strategy".into(), strategy),
            // flags that decide which exchanges a step makes, or the numbers it computes
            // (the steps between two checks of the replicas: `auto` is said as such)
            ("--log-every".into(), cfg.log_every.to_string()),
            ("--rebalance".into(), cfg.rebalance.to_string()),
            ("--sync-bn".into(), cfg.sync_bn.to_string()),
            ("--bn-stats".into(), cfg.bn_stats.to_string()),
            // (Adam's and plain SGD's steps take no momentum)
            (
                "--momentum".into(),
                match cfg.optimizer.has_momentum() {
                    true => cfg.momentum().to_string(),
                    false => String::new(),
                },
            ),
            (
                "--no-decay-bn-bias".into(),
                cfg.no_decay_bn_bias.to_string(),
            ),
            ("--label-smoothing".into(), cfg.label_smoothing.to_string()),
            ("--clip-grad-norm".into(), given(cfg.clip_grad_norm)),
            ("--checkpoint-every".into(), given(cfg.checkpoint_every)),
            ("--val-every".into(), given(cfg.val_every)),
            ("--checkpoint-best".into(), cfg.checkpoint_best.to_string()),
            ("--keep-checkpoints".into(), given(cfg.keep_checkpoints)),
            (
                "the final checkpoint".into(),
                cfg.final_checkpoint.to_string(),
            ),
            ("--lr".into(), given(cfg.lr)),
            ("--weight-decay".into(), cfg.weight_decay.to_string()),
            ("--warmup".into(), cfg.warmup.to_string()),
            ("--schedule".into(), cfg.schedule.to_string()),
            ("--lr-scaling".into(), cfg.lr_scaling().to_string()),
            ("--val-split".into(), given(cfg.inputs.val_fraction)),
            // (whether given: its path may differ between machines, its contents are compared
            // with the data's)
            (
                "--val-data".into(),
                (cfg.inputs.val_data.as_ref()).map_or(String::new(), |_| "given".into()),
            ),
            ("--image-size".into(), given(cfg.inputs.image_size)),
            ("--augment".into(), cfg.inputs.augment.to_string()),
            ("--normalize".into(), cfg.inputs.normalize.to_string()),
            (
                "--freeze".into(),
                cfg.freeze.as_ref().map_or(String::new(), |f| f.to_string()),
            ),
            ("epoch validation".into(), cfg.epoch_validation.to_string()),
            (
                "--batch-per-replica".into(),
                cfg.batch_per_replica.to_string(),
            ),
            ("the budget (--epochs / --steps)".into(), budget),
            // (faults injected on one rank: the processes that run and watch it both know it,
            // or process 0's warnings blame the fault's effect on a likely cause)
            (
                "--slow-rank".into(),
                (cfg.slow_rank).map_or(String::new(), |(r, f)| format!("{r}:{f}")),
            ),
            (
                "--slow-data".into(),
                (cfg.slow_data).map_or(String::new(), |(r, d)| format!("{r}:{}", d.as_millis())),
            ),
            ("the data".into(), data_said(train, val)),
        ],
        max_batch,
        note,
    };
    let mine = serde_json::to_vec(&hello).expect("plain data serializes");
    let all =
        said_while_waiting(procs.index() == 0, || gather_vecs(&*procs, &mine)).map_err(lost)?;
    let hellos = all
        .iter()
        .map(|b| serde_json::from_slice::<Hello>(b))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| EngineError::Config(format!("a process sent a start-up message this build cannot read ({e}): run the same mgtop-train on every machine")))?;
    for (p, h) in hellos.iter().enumerate().skip(1) {
        for ((what, ours), (_, theirs)) in hellos[0].same.iter().zip(&h.same) {
            if ours != theirs {
                // (process 0 sends the others the settings a checkpoint recorded)
                let resumed = match cfg.resume {
                    Some(_) => " (a resumed run's other settings come from process 0's checkpoint)",
                    None => "",
                };
                let said = |v: &str| crate::text::setting(what, v);
                // (the data by what each read: a file one machine's copy lacks, or cannot read,
                // changes its count)
                let read = match what.as_str() {
                    "the data" => format!(
                        " (process {p} read --data {}, process 0 --data {}: compare the two machines' copies; a file one lacks or cannot read changes its count)",
                        h.data, hellos[0].data
                    ),
                    _ => String::new(),
                };
                return Err(EngineError::Shared(format!(
                    "process {p} (on {}) trains with {}, process 0 (on {}) with {}{read}: every process of a run must train the same model on the same data; give every process the same flags and data{resumed}",
                    h.host,
                    said(theirs),
                    hellos[0].host,
                    said(ours)
                )));
            }
        }
        if h.same.len() != hellos[0].same.len() {
            return Err(EngineError::Config(
                "the processes run different builds of mgtop-train: install the same one everywhere".into(),
            ));
        }
    }
    let mut offsets = vec![0];
    let (mut devices, mut hosts) = (Vec::new(), Vec::new());
    for h in &hellos {
        if h.devices.is_empty() {
            return Err(EngineError::Config(format!(
                "a process on {} has no devices",
                h.host
            )));
        }
        // (CPU workers named in their host's order: two processes on one machine train on
        // vm/cpu0 vm/cpu1, not vm/cpu0 twice)
        let earlier = (devices.iter().zip(&hosts))
            .filter(|(d, host)| matches!(d, Device::Cpu { .. }) && **host == h.host)
            .count();
        for (gpu, index, name, pci_bus_id, arch) in &h.devices {
            devices.push(match gpu {
                true => Device::Gpu {
                    index: *index,
                    name: name.clone(),
                    pci_bus_id: pci_bus_id.clone(),
                    arch: *arch,
                },
                false => Device::Cpu {
                    index: earlier + *index,
                },
            });
            hosts.push(h.host.clone());
        }
        offsets.push(devices.len());
    }
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    gpus::one_process_per_gpu(&devices, &hosts, &offsets, visible.as_deref())?;
    let gpus = devices
        .iter()
        .filter(|d| matches!(d, Device::Gpu { .. }))
        .count();
    if gpus > 0 && gpus < devices.len() {
        return Err(EngineError::Shared(format!(
            "some processes train on GPUs and some on CPU workers ({}): one run trains on one kind; give every process the same kind of --devices",
            describe(&devices, &hosts)
        )));
    }
    let mine = &hellos[procs.index()];
    let neighbours = hellos.iter().filter(|h| h.host == mine.host).count();
    let peers_here = (hellos.iter().enumerate())
        .filter(|&(p, h)| p != procs.index() && h.host == mine.host)
        .filter(|(_, h)| !h.pid_space.is_empty() && h.pid_space == mine.pid_space)
        .map(|(p, h)| crate::pids::Peer {
            ranks: offsets[p]..offsets[p + 1],
            pid: h.pid,
        })
        .collect();
    let others_max_batch = (hellos.iter().enumerate())
        .filter(|&(p, _)| p != procs.index())
        .map(|(_, h)| h.max_batch)
        .min();
    let others_notes = notes::of_others(&hellos, procs.index());
    Ok(World {
        procs: Some(procs),
        devices,
        hosts,
        offsets,
        neighbours,
        peers_here,
        others_max_batch,
        others_notes,
    })
}

/// How long process 0 waits at the start for the other processes before it says so, and then
/// how often it says so again.
const START_WAIT_SAID: std::time::Duration = std::time::Duration::from_secs(30);

/// `exchange()`, and where `lead` (process 0) and it waits longer than `START_WAIT_SAID`, a line
/// on stderr saying so, again every `START_WAIT_SAID`: nothing else shows the run yet, and a
/// process that hangs in its start (a stalled file system, a stopped process) would keep the
/// run waiting without a word (the exchange waits without limit here: a process reading a
/// large data set is slow, not lost).
fn said_while_waiting<T>(lead: bool, exchange: impl FnOnce() -> T) -> T {
    let (done, waiting) = crossbeam_channel::bounded::<()>(0);
    let said = lead.then(|| {
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                waiting.recv_timeout(START_WAIT_SAID)
            {
                crate::tell!(
                    "waiting for the other processes to reach the start of the run ({:.0} s so far): one still reading its data takes longer; one that died or hangs keeps the run waiting (its own output says why; Ctrl-C stops the run)",
                    start.elapsed().as_secs_f64()
                );
            }
        })
    });
    let r = exchange();
    drop(done);
    if let Some(t) = said {
        let _ = t.join();
    }
    r
}

/// A process's data as the start-up check compares it: its splits' sizes, shapes and classes
/// said, their contents by fingerprint.
fn data_said(train: &Dataset, val: &Dataset) -> String {
    format!(
        "{} training and {} validation samples of {} values, {} classes (contents {:x}, {:x})",
        train.len(),
        val.len(),
        train.features,
        train.classes,
        fingerprint::of_data(train),
        fingerprint::of_data(val)
    )
}

/// `nodeA/cpu0 nodeA/cpu1 nodeB/cpu0` (labels alone where there are no hosts).
fn describe(devices: &[Device], hosts: &[String]) -> String {
    devices
        .iter()
        .enumerate()
        .map(|(r, d)| d.label_on(hosts.get(r).map(String::as_str)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The NCCL group id of a run's GPUs: made here, or by process 0 and sent to the others.
pub(super) fn nccl_id(world: &World) -> Result<cudarc::nccl::Id, EngineError> {
    let make = || {
        cudarc::nccl::Id::new().map_err(|e| {
            let why = crate::backend::cuda::nccl::describe(e.0);
            EngineError::Config(format!("NCCL did not create a group id: {why}"))
        })
    };
    let Some(p) = &world.procs else {
        return make();
    };
    // every process joins: one without NCCL would fail there (in cudarc's words), and the
    // others wait for it at the join
    use crate::backend::cuda::libs::{why_missing, NCCL};
    let mine = match NCCL.loadable() {
        true => String::new(),
        false => why_missing(&NCCL),
    };
    let told = gather_vecs(&**p, mine.as_bytes()).map_err(lost)?;
    if let Some((k, why)) = told.iter().enumerate().find(|(_, w)| !w.is_empty()) {
        let host =
            (world.hosts.get(world.offsets[k])).map_or(String::new(), |h| format!(" on {h}"));
        return Err(EngineError::Shared(format!(
            "process {k}{host} cannot join the GPUs' all-reduce, which every process of a run of GPUs on several processes needs: {}",
            String::from_utf8_lossy(why)
        )));
    }
    let ours = match world.process() {
        0 => Some(make()?.internal().iter().map(|&c| c as u8).collect()),
        _ => None,
    };
    let bytes = broadcast_vec(&**p, ours.unwrap_or_default(), 0).map_err(lost)?;
    let id: [std::ffi::c_char; 128] = bytes
        .iter()
        .map(|&b| b as std::ffi::c_char)
        .collect::<Vec<_>>()
        .try_into()
        .map_err(|_| EngineError::Config("process 0 sent a malformed NCCL id".into()))?;
    Ok(cudarc::nccl::Id::uninit(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_named_with_their_hosts() {
        let d = vec![Device::Cpu { index: 0 }, Device::Cpu { index: 0 }];
        assert_eq!(describe(&d, &["a".into(), "b".into()]), "a/cpu0 b/cpu0");
        assert_eq!(describe(&d[..1], &[]), "cpu0");
    }
}
