//! `mgtop-train scale`: the same workload over a grid of device counts, prefetch on/off and
//! per-replica batch sizes, each point timed for a time budget after a warm-up and repeated
//! (median), reported as a table (and CSV or JSON) with speedup and efficiency against one
//! device, and a warning where the repeats disagree too much for a figure to mean anything.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, TryRecvError};
use serde::Serialize;

mod checks;
mod grid;
mod report;

pub use report::{check_out, table, write};

use crate::cli::ScaleArgs;
use crate::cmd::view::OnSignals;
use crate::comm::Processes;
use crate::config::{Budget, DeviceSpec, RunConfig};
use crate::engine::calibrate::timed_rate;
use crate::engine::strategy::Strategy;
use crate::engine::{Engine, EngineError};
use crate::observe::machine_load::Load;
use crate::observe::monitor::Monitor;
use crate::observe::telemetry::Telemetry;

mod held;
mod repeats;
use held::{strategies, Held};
pub use repeats::{loaded_points, noise_warning, noisy_points, outside_warning};
pub use repeats::{spread_of, spread_text, NOISY_SPREAD};

/// One point of the grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    pub devices: usize,
    pub per_replica: usize,
    pub prefetch: bool,
    pub strategy: Strategy,
}

/// What one point measured (medians over repeats).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    pub strategy: String,
    pub devices: usize,
    pub per_replica: usize,
    pub global_batch: usize,
    pub prefetch: bool,
    pub samples_per_sec: f64,
    /// (fastest - slowest) / median of the repeats' samples/s: how far a figure can be trusted;
    /// None from one run (`--repeat 1`).
    pub spread: Option<f64>,
    /// Against one device at the same per-replica batch and prefetch setting.
    pub speedup: Option<f64>,
    pub efficiency: Option<f64>,
    /// GPUs: mean NVML utilization over the timed steps. CPU workers: mean over ranks of the
    /// share of step time spent computing, reducing and updating.
    pub utilization: f64,
    /// Memory-access time: mean NVML utilization.memory over the timed steps, GPUs only.
    pub memory_access: Option<f64>,
    /// Model FLOPs utilisation of the run's GPUs at its samples/s (GPUs whose peak is known).
    pub mfu: Option<f64>,
    pub data_wait_share: f64,
    pub comm_share: f64,
    pub sync_wait_share: f64,
    /// Parameters and gradients between devices and the host (central storage).
    pub transfer_share: f64,
    pub final_loss: f32,
    /// The final model's accuracy on the held-out split (none where the data has none).
    pub val_accuracy: Option<f32>,
    /// The faults injected in this point's ranks, as flags (`--slow-rank 1:2`); empty: none.
    pub faults: String,
    /// Other work that took this machine's cores while the point was timed (`Load::contended`);
    /// written as the cores it took (`outside_cores`, as the CSV's column).
    #[serde(rename = "outside_cores", serialize_with = "report::cores_taken")]
    pub outside: Option<Load>,
}

/// The faults `cfg` injects, as the flags that ask for them (empty: none).
fn fault_flags(cfg: &RunConfig) -> String {
    let mut flags = Vec::new();
    if let Some((r, f)) = cfg.slow_rank {
        flags.push(format!("--slow-rank {r}:{f}"));
    }
    if let Some((r, d)) = cfg.slow_data {
        flags.push(format!("--slow-data {r}:{}", d.as_millis()));
    }
    flags.join(" ")
}

#[derive(Clone, Debug)]
pub struct Plan {
    /// GPUs to measure on, in order (a count of n uses the first n); empty: CPU workers.
    pub gpus: Vec<usize>,
    pub counts: Vec<usize>,
    pub batches: Vec<usize>,
    pub prefetch: Vec<bool>,
    /// Distribution strategies to compare (`--strategies`).
    pub strategies: Vec<Strategy>,
    pub warmup_steps: u64,
    /// How long each run is timed for, after its warm-up steps.
    pub timed: Duration,
    pub repeat: usize,
}

impl Plan {
    /// Every point, prefetch-major then batch then strategy then device count (so the
    /// 1-device baseline of each series comes first).
    pub fn points(&self) -> Vec<Point> {
        let mut v = Vec::new();
        for &prefetch in &self.prefetch {
            for &per_replica in &self.batches {
                for &strategy in &self.strategies {
                    for &devices in &self.counts {
                        v.push(Point {
                            devices,
                            per_replica,
                            prefetch,
                            strategy,
                        });
                    }
                }
            }
        }
        v
    }
}

/// How often GPU telemetry is read during a timed measurement.
const NVML_EVERY: Duration = Duration::from_millis(200);

/// One timed run of `base` at `p`; the final model is validated on `val`. Over `procs` (a
/// grid run by several processes) the point's devices are shared evenly between them.
fn measure_once(
    base: &RunConfig,
    plan: &Plan,
    p: Point,
    val: &Held,
    procs: Option<&Arc<dyn Processes>>,
) -> Result<Row, EngineError> {
    let here = p.devices / procs.map_or(1, |j| j.count());
    let cfg = RunConfig {
        devices: if plan.gpus.is_empty() {
            DeviceSpec::Cpu(here)
        } else {
            DeviceSpec::Gpus(plan.gpus[..here.min(plan.gpus.len())].to_vec())
        },
        batch_per_replica: p.per_replica,
        prefetch: if p.prefetch { base.prefetch.max(1) } else { 0 },
        // stopped once the time budget is spent (see below)
        budget: Budget::Steps(crate::engine::checkpoint::MAX_STEP),
        final_checkpoint: false,
        checkpoint_every: None,
        checkpoint_best: false,
        resume: None,
        metrics_out: None,
        run_dir: None,
        link_latest: false,
        calibrate: false,
        // trained on the same split as a run, validated once at the end (below)
        epoch_validation: false,
        val_every: None,
        strategy: p.strategy,
        // a fault on a rank the point does not have is left out
        slow_rank: base.slow_rank.filter(|f| f.0 < p.devices),
        slow_data: base.slow_data.filter(|f| f.0 < p.devices),
        ..base.clone()
    };
    if let Some(j) = procs {
        // a process may wait long at a point's start (process 0 ran the 1-device point alone)
        j.set_patience(Duration::MAX);
    }
    let faults = fault_flags(&cfg);
    let engine = Engine::start_in(cfg, procs.cloned())?;
    let mfu = crate::observe::mfu::Mfu::for_run(engine.info());
    if let Some(j) = procs {
        j.set_patience(crate::engine::peer_patience(base.stall_timeout));
    }
    // (the batch the run trains with: one past the training split is cut to it)
    let per_replica = engine.info().per_replica;
    let steps = engine.steps().clone();
    let events = engine.events().clone();
    let drain_events = std::thread::spawn(move || events.iter().count());
    // per rank: busy, data wait, comm, sync wait, step time (timed steps only)
    let mut sums = vec![[0.0f64; 6]; p.devices];
    let mut last_loss = f32::NAN;
    let mut last_step = 0;
    // GPUs: NVML utilization and memory-access time, sampled over the timed steps
    let mut telemetry = Telemetry::new(engine.info(), NVML_EVERY);
    // (the run's other processes here take its cores, not outside work)
    telemetry.with_siblings(engine.info().peers_here.iter().map(|p| p.pid).collect());
    let mut nvml = (0.0f64, 0.0f64, 0usize);
    let mut next_sample = None;
    let mut timed_from = None;
    let mut monitor = Monitor::new(p.devices);
    let mut stopping = false;
    loop {
        if let Some(t0) = timed_from {
            if !stopping && engine.elapsed() >= t0 + plan.timed {
                stopping = engine.controller().stop(false).is_ok();
            }
        }
        if let Some(at) = next_sample.filter(|&at| engine.elapsed() >= at) {
            for d in telemetry.sample(engine.elapsed()) {
                if let (Some(u), Some(m)) = (d.util, d.mem_access) {
                    nvml = (nvml.0 + u as f64, nvml.1 + m as f64, nvml.2 + 1);
                }
            }
            next_sample = Some(at + NVML_EVERY);
        }
        match steps.try_recv() {
            Ok(s) => {
                if s.step >= last_step {
                    (last_step, last_loss) = (s.step, s.loss);
                }
                if s.step > plan.warmup_steps {
                    next_sample.get_or_insert(engine.elapsed() + NVML_EVERY);
                    if timed_from.is_none() {
                        // (the machine's load from here: over the timed steps)
                        telemetry.load();
                        timed_from = Some(engine.elapsed());
                    }
                    // whole steps, as the frontends see them (a GPU's all-reduce split into
                    // transfer and waiting for peers)
                    for s in monitor.on_step(s).map(|row| row.ranks).unwrap_or_default() {
                        let t = &mut sums[s.rank];
                        t[0] += (s.compute + s.comm + s.optimizer).as_secs_f64();
                        t[1] += s.data_wait.as_secs_f64();
                        t[2] += s.comm.as_secs_f64();
                        t[3] += s.sync_wait.as_secs_f64();
                        t[4] += s.step_time.as_secs_f64();
                        t[5] += s.transfer.as_secs_f64();
                    }
                }
            }
            // collected on a timer so that no worker has to wake this thread per step
            Err(TryRecvError::Empty) => std::thread::sleep(Duration::from_millis(5)),
            Err(TryRecvError::Disconnected) => break,
        }
    }
    let outside = (timed_from.is_some())
        .then(|| telemetry.load())
        .flatten()
        .filter(Load::contended);
    let r = engine.join()?;
    let _ = drain_events.join();
    // (the batch each step took: one past the training split is cut to it)
    let asked = p.per_replica * p.devices * base.grad_accum;
    let global = r
        .step_samples
        .iter()
        .copied()
        .max()
        .map_or(asked, |g| g.min(asked));
    let samples_per_sec = timed_rate(&r, plan.warmup_steps);
    let share = |i: usize| {
        sums.iter()
            .map(|t| if t[4] > 0.0 { t[i] / t[4] } else { 0.0 })
            .sum::<f64>()
            / p.devices as f64
    };
    Ok(Row {
        strategy: p.strategy.to_string(),
        val_accuracy: val.accuracy(base, &r.state),
        transfer_share: share(5),
        devices: p.devices,
        per_replica,
        global_batch: global,
        prefetch: p.prefetch,
        samples_per_sec,
        mfu: mfu.of_run(samples_per_sec),
        spread: None,
        speedup: None,
        efficiency: None,
        utilization: if nvml.2 > 0 {
            nvml.0 / nvml.2 as f64
        } else {
            share(0)
        },
        memory_access: (nvml.2 > 0).then(|| nvml.1 / nvml.2 as f64),
        data_wait_share: share(1),
        comm_share: share(2),
        sync_wait_share: share(3),
        final_loss: last_loss,
        faults,
        outside,
    })
}

/// `mgtop-train scale`: the grid from the flags, measured, printed and optionally written; under
/// a launcher (`mpirun -np P mgtop-train scale ...`) over every process. In one process a
/// signal (`on_signals` installs its handling) ends the measuring after the run under way, with
/// the table of what was measured.
pub fn command(args: ScaleArgs, on_signals: &OnSignals) -> anyhow::Result<ExitCode> {
    super::debug_build_note();
    match crate::comm::launch::from_env().map_err(anyhow::Error::msg)? {
        Some(launch) if launch.is_multi() => {
            let local = launch.local_size.unwrap_or(1);
            super::processes::as_processes(&launch, |procs| {
                grid(args, Some((procs, local)), None).map(|_| ())
            })?;
            Ok(ExitCode::SUCCESS)
        }
        _ => {
            let (tx, rx) = crossbeam_channel::unbounded();
            on_signals(tx)?;
            grid(args, None, Some(&rx))
        }
    }
}

/// The grid, in this process alone or as one of `procs` (of which `local` share this machine).
fn grid(
    mut args: ScaleArgs,
    procs: Option<(Arc<dyn Processes>, usize)>,
    stop: Option<&Receiver<()>>,
) -> anyhow::Result<ExitCode> {
    let (procs, neighbours) = procs.unzip();
    let n = procs.as_ref().map_or(1, |j| j.count());
    let lead = procs.as_ref().is_none_or(|j| j.index() == 0);
    // the config file's settings too (said where ignored)
    let origins;
    (args.train, origins) = args.train.with_config_file().map_err(anyhow::Error::msg)?;
    // (unless given, local SGD steps alone from the first timed step: see below)
    let warmup_given = args.train.local_sgd_warmup.is_some();
    // with --strategies, --local-sgd-warmup is for the local-sgd ones of the list (without,
    // it stays for the --strategy it goes with)
    let warmup = args
        .strategies
        .as_ref()
        .and_then(|_| args.train.local_sgd_warmup.take());
    if lead {
        checks::say_ignored(&args.train);
    }
    let grid_flags = checks::grid_flags(&args);
    // (a checkpoint's model, data and batch would stand in for the flags' otherwise)
    args.train.resume = None;
    let (mut base, _, _) = (args.train)
        .resolve_noted(origins)
        .map_err(anyhow::Error::msg)?;
    let cores = crate::engine::available_cores();
    // On GPUs where the run would train on them (`--devices auto` with GPUs, or GPU ids).
    let (devices, _) = crate::engine::resolve_devices(&base.devices, None)?;
    let gpus: Vec<usize> = devices
        .iter()
        .filter_map(|d| match d {
            crate::engine::Device::Gpu { index, .. } => Some(*index),
            crate::engine::Device::Cpu { .. } => None,
        })
        .collect();
    let counts = if !args.counts.is_empty() {
        args.counts.clone()
    } else if n > 1 {
        // one device alone, then 1, 2, ... per process on every process
        let per = if gpus.is_empty() { cores } else { gpus.len() };
        std::iter::once(1).chain((1..=per).map(|k| k * n)).collect()
    } else if gpus.is_empty() {
        (1..=cores.max(2)).collect()
    } else {
        (1..=gpus.len()).collect()
    };
    if let Some(j) = &procs {
        checks::same_grid(j.as_ref(), grid_flags, &counts)?;
    }
    checks::points(&counts, n, &gpus, &base)?;
    // (the training flags checked as a run checks them first, before any point is measured)
    crate::engine::check_settings(&base)?;
    crate::cmd::listed_once("--batches", &args.batches)?;
    crate::cmd::listed_once("--prefetch-modes", &args.prefetch_modes)?;
    let batches = if args.batches.is_empty() {
        vec![base.batch_per_replica]
    } else {
        args.batches.clone()
    };
    if let Some(p) = &args.out {
        // refuse a bad --out before spending minutes measuring
        check_out(p).map_err(anyhow::Error::msg)?;
    }
    // Every count runs with the same threads per worker (what the largest count gets), so that
    // a speedup compares workers, not thread counts.
    // (over processes: the most each process runs, and the job's processes on this machine
    // share its cores)
    let most = counts.iter().copied().max().unwrap_or(1) / n;
    let threads = *base
        .threads_per_worker
        .get_or_insert((cores / (most.max(1) * neighbours.unwrap_or(1))).max(1));
    let listed = match &args.strategies {
        Some(list) => strategies(list, warmup, &base).map_err(anyhow::Error::msg)?,
        None => vec![base.strategy],
    };
    let listed = held::timing_local_sgd(listed, warmup_given, args.warmup_steps);
    checks::spanning_strategies(n, &counts, &listed)?;
    let plan = Plan {
        gpus,
        counts,
        batches,
        prefetch: args.prefetch_modes.iter().map(|m| m == "on").collect(),
        strategies: listed,
        warmup_steps: args.warmup_steps,
        timed: Duration::from_secs_f64(args.seconds),
        repeat: args.repeat,
    };
    let say = |line: &str| {
        if lead {
            crate::say!("{line}");
        }
    };
    // (a slowed rank is part of what is measured: said with the workload, 1 device included
    // where rank 0 is the slow one)
    let faults = fault_flags(&base);
    say(&format!(
        "workload: --model {} --data {}{}{faults}",
        base.model,
        base.data,
        if faults.is_empty() { "" } else { " " }
    ));
    say(&format!(
        "scale: {} points x {} runs, each timed for {:.1} s after {} warm-up steps (less where the workload's --steps ends it first), some {:.0} s in all with the warm-ups and the start of each (machine: {cores} cores; {threads} thread(s) per worker{})",
        plan.points().len(),
        plan.repeat.max(1),
        args.seconds,
        plan.warmup_steps,
        ((plan.points().len() * plan.repeat.max(1)) as f64 * (args.seconds + 0.3)).max(1.0),
        match n {
            1 => String::new(),
            n => format!("; {n} processes, each point's devices shared evenly, 1 device on process 0 alone"),
        }
    ));
    if let Some(line) = held::local_sgd_line(&plan.strategies, plan.warmup_steps) {
        say(&line);
    }
    let (mut done, mut total) = (0, plan.points().len() * plan.repeat.max(1));
    let grid = grid::run(&base, &plan, procs.as_ref(), stop, |i, all, r| {
        (done, total) = (i, all);
        say(&format!(
            "[{i}/{all}] {}, {} device(s), batch {} per replica, prefetch {}: {:.0} samples/s",
            r.strategy,
            r.devices,
            r.per_replica,
            if r.prefetch { "on" } else { "off" },
            r.samples_per_sec
        ));
    })?;
    if !lead {
        return Ok(ExitCode::SUCCESS);
    }
    let rows = grid.rows;
    if let Some((p, _)) = &grid.failed {
        crate::say!(
            "[{}/{total}] {}, {} device(s), batch {} per replica, prefetch {}: failed (below); the table holds the points measured before it",
            done + 1,
            p.strategy,
            p.devices,
            p.per_replica,
            if p.prefetch { "on" } else { "off" },
        );
    } else if done < total {
        crate::say!(
            "interrupted after {done} of {total} runs: the table holds the points measured so far"
        );
    }
    for line in table(&rows) {
        crate::say!("{line}");
    }
    if let Some(w) = outside_warning(&rows) {
        crate::say!("{w}");
    }
    if let Some(w) = noise_warning(&rows) {
        crate::say!("{w}");
    }
    match &args.out {
        // (an earlier report there is kept: nothing replaces it)
        Some(p) if rows.is_empty() => {
            crate::say!("nothing measured: {} left as it was", p.display())
        }
        Some(p) => {
            write(p, &rows).map_err(anyhow::Error::msg)?;
            crate::say!("written: {}", p.display());
        }
        None => {}
    }
    if let Some((_, e)) = grid.failed {
        return Err(e.into());
    }
    Ok(match done < total {
        true => ExitCode::from(130),
        false => ExitCode::SUCCESS,
    })
}

#[cfg(test)]
mod tests;
