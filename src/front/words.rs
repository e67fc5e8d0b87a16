//! What a run says in words: the start-up lines, step lines and event lines, the same in the
//! log and in the terminal UI.

use crate::config::Budget;
use crate::engine::events::{Applied, Ending, Event};
use crate::engine::strategy::Strategy;
use crate::engine::RunInfo;
use crate::nn::precision::Precision;
use crate::observe::monitor::StepRow;

/// The lines printed before the first step.
pub fn describe(info: &RunInfo) -> Vec<String> {
    let devs: Vec<String> = (0..info.ranks()).map(|r| info.rank_label(r)).collect();
    let mut lines = vec![format!("run: {}", info.name)];
    if let Some(dir) = &info.run_dir {
        lines.push(format!("run dir: {}", dir.display()));
    }
    let ranks = info.ranks();
    let gpu_run = info
        .devices
        .iter()
        .any(|d| matches!(d, crate::engine::Device::Gpu { .. }));
    let threads = match info.threads_per_worker {
        _ if gpu_run => String::new(),
        t if ranks == 1 => format!(", {t} thread{}", if t == 1 { "" } else { "s" }),
        1 => ", 1 thread each".to_string(),
        t => format!(", {t} threads each"),
    };
    // a run over several processes: where they are
    let spread = match info.processes {
        1 => String::new(),
        p => {
            let hosts = info.host_count();
            format!(
                " on {hosts} host{}, {p} processes",
                if hosts == 1 { "" } else { "s" }
            )
        }
    };
    lines.push(format!(
        "devices: {} ({ranks} rank{}{spread}{threads})",
        devs.join(" "),
        if ranks == 1 { "" } else { "s" }
    ));
    // GPUs with their model and PCI address, as nvidia-smi lists them
    for (r, d) in info.devices.iter().enumerate() {
        if let crate::engine::Device::Gpu {
            name, pci_bus_id, ..
        } = d
        {
            lines.push(format!(
                "  {}: {name}, PCI {}",
                info.rank_label(r),
                pci_bus_id.as_deref().unwrap_or("unknown")
            ));
        }
    }
    if let Some(note) = &info.device_note {
        lines.push(format!("note: {note}"));
    }
    if gpu_run {
        let wire = info.grad_dtype;
        lines.push(format!(
            "precision: {}",
            match info.precision {
                Precision::Tf32 => format!("tf32 (matrix products on the tensor cores with TF32 inputs, fp32 accumulation; weights, gradients and optimizer state in fp32, the all-reduce in {wire})"),
                Precision::Bf16 => format!("bf16 (activations and matrix products in bf16 with fp32 accumulation; batch-norm statistics, the loss, master weights, gradients and optimizer state in fp32, the all-reduce in {wire})"),
                p => match wire {
                    crate::nn::precision::GradDtype::Fp32 => p.name().to_string(),
                    _ => format!("{} (the all-reduce in {wire})", p.name()),
                },
            }
        ));
    }
    if let Some(note) = &info.precision_note {
        lines.push(format!("note: {note}"));
    }
    match info.cuda_graph.as_deref() {
        Some(graph) if gpu_run => lines.push(format!("cuda graph: {graph}")),
        // (asked for: the default, auto, says nothing on a CPU-only run)
        Some(graph) if graph.starts_with("on:") => lines.push(
            "note: --cuda-graph applies to GPUs: CPU workers compute their passes as before".into(),
        ),
        _ => {}
    }
    if let Some(m) = info.step_metrics.as_deref().filter(|_| gpu_run) {
        lines.push(format!("step metrics: {m}"));
    }
    if let Some(c) = &info.convolutions {
        lines.push(format!("convolutions: {c}"));
    }
    lines.push(format!("data: {}", info.data));
    lines.extend(info.data_notes.iter().map(|n| format!("  note: {n}")));
    lines.push(match info.prefetch {
        0 => "input: batches built on each worker's own thread (--prefetch 0)".to_string(),
        p => format!(
            "input: {} loader thread{} per rank, {p} batches prefetched",
            info.loader_threads,
            if info.loader_threads == 1 { "" } else { "s" }
        ),
    });
    lines.push(format!(
        "model: {}, {} parameters, {} per sample forward",
        info.model,
        info.params,
        crate::nn::model::flops_text(info.flops)
    ));
    lines.extend(info.layers.iter().map(|l| format!("  {l}")));
    lines.extend(info.model_notes.iter().map(|n| format!("  note: {n}")));
    let budget = match info.budget {
        Budget::Epochs(e) => format!(
            "{} (~{} steps/epoch)",
            crate::text::counted(e as usize, "epoch"),
            info.steps_per_epoch()
        ),
        Budget::Steps(s) => crate::text::counted(s as usize, "step"),
    };
    let accum = if info.grad_accum > 1 {
        format!(" x {} accumulation", info.grad_accum)
    } else {
        String::new()
    };
    lines.push(format!(
        "batch: {} per replica x {}{accum} = {} global; {budget}",
        info.per_replica,
        crate::text::counted(info.ranks(), "rank"),
        info.per_replica * info.ranks() * info.grad_accum
    ));
    let note = info
        .lr_note
        .as_ref()
        .map_or(String::new(), |n| format!(" ({n})"));
    lines.push(format!("lr: {:.2e}{note}", info.lr));
    if let Some(b) = info.baseline {
        lines.push(format!(
            "calibration: one device trains {b:.0} samples/s on this workload (speedup and efficiency below are against it)"
        ));
    }
    if info.strategy != Strategy::Mirrored {
        lines.push(format!("strategy: {}", info.strategy.describe()));
    }
    if let Some(line) = resumed_line(info) {
        lines.push(line);
    }
    lines
}

/// Where the replicas stand after step `step`, for strategies that are not one model each step:
/// `replicas diverge by design (loss: rank 0's shard); next sync at step 108`.
pub fn sync_note(strategy: &Strategy, step: u64, ahead: Ahead) -> Option<String> {
    SyncAhead::of(strategy, step, ahead).map(|s| s.full())
}

/// When local SGD's replicas are next one, after a step. The run also makes them one off the
/// schedule (`Ahead`): before an epoch's validation, where that comes first, and at its end,
/// where no scheduled sync is left.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SyncAhead {
    /// Synchronous warm-up steps to this one.
    Warmup(u64),
    /// A warm-up of this many steps, longer than the run.
    WarmupAllRun(u64),
    /// The scheduled average after this step.
    Next(u64),
    /// The average for the epoch's validation, after this step.
    Validation(u64),
    /// The average at the run's end, this step.
    End(u64),
    /// The run has ended (this step), averaged.
    Ended(u64),
}

impl SyncAhead {
    pub fn of(strategy: &Strategy, step: u64, ahead: Ahead) -> Option<SyncAhead> {
        let before = |at: Option<u64>, n: u64| at.is_some_and(|a| a < n);
        match *strategy {
            Strategy::LocalSgd { .. } if ahead.run_end.is_some_and(|end| step >= end) => {
                Some(SyncAhead::Ended(step))
            }
            Strategy::LocalSgd { warmup, .. } if step < warmup => {
                Some(match ahead.run_end.is_some_and(|end| end <= warmup) {
                    true => SyncAhead::WarmupAllRun(warmup),
                    false => SyncAhead::Warmup(warmup),
                })
            }
            _ => strategy.next_sync(step).map(|n| match ahead {
                // (an epoch's validation, where there is one, comes before the run's end)
                Ahead {
                    validation: Some(v),
                    ..
                } if before(Some(v), n) => SyncAhead::Validation(v),
                Ahead {
                    run_end: Some(end), ..
                } if before(Some(end), n) => SyncAhead::End(end),
                _ => SyncAhead::Next(n),
            }),
        }
    }

    /// In full, for the log and a wide header.
    pub fn full(self) -> String {
        let diverge = "replicas diverge by design (loss: rank 0's shard)";
        match self {
            SyncAhead::Warmup(w) => {
                format!("synchronous warm-up: replicas step alone after step {w}")
            }
            SyncAhead::WarmupAllRun(w) => {
                format!("synchronous warm-up for the whole run (its {w} steps outlast it)")
            }
            SyncAhead::Next(n) => format!("{diverge}; next sync at step {n}"),
            SyncAhead::Validation(v) => {
                format!("{diverge}; averaged for the epoch's validation after step {v}")
            }
            SyncAhead::End(n) => format!("{diverge}; averaged at the end, step {n}"),
            SyncAhead::Ended(n) => format!("replicas averaged at the end, step {n}"),
        }
    }

    /// In a few words, for a narrow header.
    pub fn brief(self) -> String {
        match self {
            SyncAhead::Warmup(w) => format!("synchronous to step {w}"),
            SyncAhead::WarmupAllRun(_) => "synchronous all run".into(),
            SyncAhead::Next(n) => format!("sync at step {n}"),
            SyncAhead::Validation(v) => format!("sync at step {v} (validation)"),
            SyncAhead::End(n) => format!("sync at step {n} (end)"),
            SyncAhead::Ended(_) => "averaged at the end".into(),
        }
    }
}

/// Steps after which the run makes its replicas one whatever its strategy's schedule, where
/// they are known.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Ahead {
    /// The run's last step.
    pub run_end: Option<u64>,
    /// The current epoch's last step, where the run validates then and it is not the last.
    pub validation: Option<u64>,
}

/// What it takes to know where a run's epochs and budget end from one of its step rows.
#[derive(Clone, Copy, Debug)]
pub struct Ends {
    budget: Budget,
    train: usize,
    ranks: usize,
    accum: usize,
    validates: bool,
}

impl Ends {
    pub fn of(info: &RunInfo) -> Ends {
        Ends {
            budget: info.budget,
            train: info.train_samples,
            ranks: info.ranks(),
            accum: info.grad_accum.max(1),
            validates: info.val_samples > 0,
        }
    }

    /// What is ahead of step `step`, from its row's `per_replica` batch and progress (epochs
    /// done over the budget's) where an epoch budget needs them; without a row, a step
    /// budget's end only. An epoch budget's end assumes the batch stays as it is.
    pub fn ahead(&self, step: u64, at: Option<(usize, f64)>) -> Ahead {
        let epochs = match self.budget {
            Budget::Steps(last) => {
                return Ahead {
                    run_end: Some(last),
                    validation: None,
                }
            }
            Budget::Epochs(e) => e,
        };
        let Some((per_replica, progress)) = at else {
            return Ahead::default();
        };
        let global = per_replica * self.ranks * self.accum;
        if global == 0 || self.train == 0 || !progress.is_finite() {
            return Ahead::default();
        }
        let done = progress.clamp(0.0, 1.0) * epochs as f64;
        // whole epochs done and samples into the next (rounded: a row's progress is a float)
        let mut whole = done.floor() as u64;
        let mut offset = ((done - done.floor()) * self.train as f64).round() as usize;
        if offset >= self.train {
            (whole, offset) = (whole + 1, 0);
        }
        if whole >= epochs {
            return Ahead {
                run_end: Some(step),
                validation: None,
            };
        }
        let epoch_end = step + (self.train - offset).div_ceil(global) as u64;
        let later = (epochs - whole - 1) * self.train.div_ceil(global) as u64;
        Ahead {
            run_end: Some(epoch_end + later),
            validation: (self.validates && later > 0).then_some(epoch_end),
        }
    }
}

/// Where a resumed run starts, and where its batch size came from (the LR line says where
/// the LR came from).
pub fn resumed_line(info: &RunInfo) -> Option<String> {
    let p = info.resumed_from.as_ref()?;
    let mut line = format!(
        "resumed from {} at step {} (epoch {})",
        p.display(),
        info.start_step,
        info.start_epoch + 1
    );
    if let Some(b) = &info.resume_note {
        line += &format!("; {b}");
    }
    Some(line)
}

/// Samples per rank of an uneven split: `170/86`.
pub fn per_rank(sizes: &[usize]) -> String {
    sizes
        .iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join("/")
}

/// ` (1.70x one device, 85% efficiency)` where the run was calibrated.
pub fn scaling_note(rate: Option<f64>, baseline: Option<f64>, ranks: usize) -> String {
    match (rate, baseline) {
        (Some(r), Some(b)) => {
            let (speedup, eff) = crate::engine::calibrate::scaling(r, b, ranks);
            format!(
                " ({speedup:.2}x one device, {:.0}% efficiency)",
                eff * 100.0
            )
        }
        _ => String::new(),
    }
}

/// An MFU as a percentage: one decimal below 10% (where most runs are), whole above.
pub fn mfu_text(v: Option<f64>) -> String {
    match v {
        Some(v) if v < 0.0005 => "<0.1%".into(),
        Some(v) if v < 0.1 => format!("{:.1}%", v * 100.0),
        Some(v) => format!("{:.0}%", v * 100.0),
        None => "n/a".into(),
    }
}

pub fn step_line(
    row: &StepRow,
    rate: Option<f64>,
    budget: Budget,
    baseline: Option<f64>,
) -> String {
    let scaling = scaling_note(rate, baseline, row.ranks.len());
    let of = match budget {
        Budget::Epochs(e) => format!("epoch {}/{e}", row.epoch),
        Budget::Steps(s) => format!("step {}/{s}", row.step),
    };
    let step = if matches!(budget, Budget::Steps(_)) {
        String::new()
    } else {
        format!("step {} ", row.step)
    };
    let rate = rate.map_or("-".to_string(), |r| format!("{r:.0}"));
    let times: Vec<String> = row
        .ranks
        .iter()
        .map(|r| format!("r{} {:.2}", r.rank, r.step_time.as_secs_f64() * 1e3))
        .collect();
    // per rank: `32x2`; the samples each rank took where that is not the batch per replica
    // (an epoch's short last batch, micro-batches accumulated: `736x2`), or each rank's where
    // --rebalance cut the batch unevenly
    let samples: Vec<usize> = row.ranks.iter().map(|r| r.samples).collect();
    let per_rank = if samples.windows(2).all(|w| w[0] == w[1]) {
        format!("{}x{}", samples.first().unwrap_or(&0), row.ranks.len())
    } else {
        per_rank(&samples)
    };
    // where this step's time went, over all ranks: moving gradients, and waiting for others
    let total: f64 = row.ranks.iter().map(|r| r.step_time.as_secs_f64()).sum();
    let share = |f: fn(&crate::engine::events::StepStats) -> std::time::Duration| {
        let t: f64 = row.ranks.iter().map(|r| f(r).as_secs_f64()).sum();
        if total > 0.0 {
            t / total * 100.0
        } else {
            0.0
        }
    };
    format!(
        "{}{of} | loss {:.4} | lr {:.2e} | batch {per_rank}={} | {rate} samples/s{scaling} | step ms {} | data {:.0}% comm {:.0}% wait {:.0}%",
        step,
        row.loss,
        row.lr,
        row.global_samples,
        times.join(" "),
        share(|r| r.data_wait),
        share(|r| r.comm),
        share(|r| r.sync_wait),
    ) + &match share(|r| r.transfer) {
        // central storage: parameters and gradients between the devices and the host copy
        t if t > 0.0 => format!(" transfer {t:.0}%"),
        _ => String::new(),
    }
}

pub fn event_line(ev: &Event, budget: Budget) -> Option<String> {
    Some(match ev {
        Event::Started { .. } => return None,
        Event::EpochDone {
            epoch,
            step,
            train_loss,
            val_loss,
            val_accuracy,
            ..
        } => {
            let of = match budget {
                Budget::Epochs(e) => format!("{epoch}/{e}"),
                Budget::Steps(_) => epoch.to_string(),
            };
            let val = match (val_loss, val_accuracy) {
                (Some(l), Some(a)) => format!(" | val loss {l:.4} acc {:.2}%", a * 100.0),
                _ => String::new(),
            };
            format!("epoch {of} done at step {step} | train loss {train_loss:.4}{val}")
        }
        Event::Control { step, applied } => match applied {
            Applied::Paused => format!("paused before step {}", step + 1),
            Applied::Resumed => format!("resumed at step {}", step + 1),
            Applied::BatchSize { from, to, lr } => format!(
                "batch per replica {from} -> {to} from step {} (lr now {lr:.2e})",
                step + 1
            ),
            Applied::Split(sizes) => format!(
                "rebalanced from step {}: samples per rank {} (global batch {} unchanged)",
                step + 1,
                per_rank(sizes),
                sizes.iter().sum::<usize>()
            ),
        },
        Event::Checkpoint { step, path } => {
            format!("checkpoint at step {step}: {}", path.display())
        }
        Event::InSync { step, ranks } => format!(
            "replicas in sync at step {step}: all {ranks} ranks' parameters hash the same (checked every --log-every steps)"
        ),
        Event::DataSkipped { step, message } => format!(
            "WARNING at step {step}: {message}; another image of its class stands in for it"
        ),
        Event::DeviceNote { rank, message } => format!("note: rank {rank}: {message}"),
        Event::Failed {
            rank,
            step,
            message,
        } => format!("ERROR rank {rank} at step {step}: {message}"),
        Event::Finished { step, ending } => ended(*step, *ending),
    })
}

/// How a run ended, in a line.
pub fn ended(step: u64, ending: Ending) -> String {
    match ending {
        Ending::Completed => format!("finished: {}", crate::text::counted(step as usize, "step")),
        Ending::Stopped => format!("stopped at step {step}"),
        Ending::Quit => format!(
            "quit at once after step {step}: the step under way was neither finished nor checkpointed"
        ),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_run_s_end_and_its_epochs_validation_are_where_the_replicas_meet() {
        use super::{Ahead, Budget, Ends};
        // 1000 samples, 2 ranks x 32 = 64 a step: 16 steps an epoch (15 of 64, one of 40)
        let ends = |budget, validates| Ends {
            budget,
            train: 1000,
            ranks: 2,
            accum: 1,
            validates,
        };
        let ahead = |run_end, validation| Ahead {
            run_end,
            validation,
        };
        let e = ends(Budget::Epochs(3), true);
        // 8 steps into the first epoch: 512 samples
        let p = 512.0 / 1000.0 / 3.0;
        assert_eq!(e.ahead(8, Some((32, p))), ahead(Some(48), Some(16)));
        let quiet = ends(Budget::Epochs(3), false);
        assert_eq!(quiet.ahead(8, Some((32, p))), ahead(Some(48), None));
        // the last epoch's end is the run's: 2 epochs and 640 samples done at step 42
        let p = (2.0 + 0.64) / 3.0;
        assert_eq!(e.ahead(42, Some((32, p))), ahead(Some(48), None));
        // just after an epoch's end, the next epoch is counted whole
        assert_eq!(
            e.ahead(16, Some((32, 1.0 / 3.0))),
            ahead(Some(48), Some(32))
        );
        assert_eq!(e.ahead(48, Some((32, 1.0))), ahead(Some(48), None));
        // a step budget is known without a row; an epoch budget is not
        let steps = ends(Budget::Steps(300), true);
        assert_eq!(steps.ahead(5, None), ahead(Some(300), None));
        assert_eq!(e.ahead(5, None), Ahead::default());
        // local SGD whose next sync is past the end: the epoch's validation comes first
        use super::{Strategy, SyncAhead};
        let local = Strategy::LocalSgd {
            every: 64,
            warmup: 4,
            moments: false,
        };
        let at5 = e.ahead(5, Some((32, 320.0 / 1000.0 / 3.0)));
        assert_eq!(
            SyncAhead::of(&local, 5, at5),
            Some(SyncAhead::Validation(16))
        );
        let at40 = e.ahead(40, Some((32, (2.0 + 0.512) / 3.0)));
        assert_eq!(SyncAhead::of(&local, 40, at40), Some(SyncAhead::End(48)));
        assert_eq!(
            SyncAhead::of(&local, 48, ahead(Some(48), None)),
            Some(SyncAhead::Ended(48))
        );
    }

    use super::*;
    use crate::engine::Device;

    fn gpus(mut info: RunInfo) -> RunInfo {
        info.devices = (0..info.devices.len())
            .map(|index| Device::Gpu {
                index,
                name: "NVIDIA H100 80GB HBM3".into(),
                pci_bus_id: None,
                arch: 90,
            })
            .collect();
        info
    }

    #[test]
    fn a_gpu_run_says_when_its_step_metrics_are_read_and_a_cpu_run_does_not() {
        let mut info = crate::front::tui::demo::info(2);
        info.step_metrics = Some("read one step late".into());
        let said = describe(&gpus(info.clone()));
        assert!(
            said.contains(&"step metrics: read one step late".to_string()),
            "{said:?}"
        );
        let said = describe(&info);
        assert!(
            !said.iter().any(|l| l.starts_with("step metrics")),
            "{said:?}"
        );
    }

    #[test]
    fn the_cuda_graph_line_is_a_gpu_runs_and_a_cpu_run_asking_for_graphs_is_told() {
        use crate::config::cuda_graph::CudaGraph;
        let (on, line) = CudaGraph::On.resolve(false).unwrap();
        assert!(on);
        let mut info = crate::front::tui::demo::info(2);
        info.cuda_graph = Some(line.clone());
        let said = describe(&gpus(info.clone()));
        assert!(said.contains(&format!("cuda graph: {line}")), "{said:?}");
        let said = describe(&info);
        assert!(
            !said.iter().any(|l| l.starts_with("cuda graph")),
            "{said:?}"
        );
        assert!(
            said.iter()
                .any(|l| l.contains("--cuda-graph applies to GPUs")),
            "{said:?}"
        );
        // the default (auto) and off say nothing on CPU workers
        for mode in [CudaGraph::default(), CudaGraph::Off] {
            info.cuda_graph = mode.resolve(false).ok().map(|(_, l)| l);
            assert!(
                !describe(&info).iter().any(|l| l.contains("cuda")),
                "{mode}"
            );
        }
    }

    #[test]
    fn a_step_line_s_batch_is_what_the_ranks_took() {
        use crate::front::tui::demo;
        use crate::observe::monitor::Monitor;
        let row = |samples: usize| {
            let mut m = Monitor::new(2);
            let mut last = None;
            for r in 0..2 {
                let mut s = demo::step(r, 2, 1);
                s.samples = samples;
                s.global_samples = 2 * samples;
                last = m.on_step(s);
            }
            last.unwrap()
        };
        let line = |samples| step_line(&row(samples), None, Budget::Steps(9), None);
        assert!(line(32).contains("| batch 32x2=64 |"), "{}", line(32));
        // an epoch's short last batch at 32 per replica
        assert!(line(15).contains("| batch 15x2=30 |"), "{}", line(15));
    }
}
