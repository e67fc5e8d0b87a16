//! What a run says in words: the start-up lines, step lines and event lines, the same in the
//! log and in the terminal UI.

use crate::config::Budget;
use crate::engine::events::{Applied, Ending, Event};
use crate::engine::strategy::Strategy;
use crate::engine::RunInfo;
use crate::front::units::{bound_value, grad_norm, loss_value};
use crate::nn::precision::Precision;
use crate::observe::monitor::StepRow;

/// The lines printed before the first step.
pub fn describe(info: &RunInfo) -> Vec<String> {
    let devs: Vec<String> = (0..info.ranks()).map(|r| info.rank_label(r)).collect();
    let mut lines = vec![format!("run: {}", info.name)];
    if let Some(dir) = &info.run_dir {
        lines.push(format!("run dir: {}", dir.display()));
    }
    lines.extend(info.run_dir_note.iter().map(|n| format!("  note: {n}")));
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
    lines.extend(info.others_notes.iter().map(|n| format!("note: {n}")));
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
    lines.extend(info.precision_notes.iter().map(|n| format!("note: {n}")));
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
        "model: {}, {} parameters, {} per sample forward (a multiply-add is 2 FLOPs)",
        info.model,
        info.params,
        crate::nn::model::flops_text(info.flops)
    ));
    lines.extend(info.layers.iter().map(|l| format!("  {l}")));
    lines.extend(info.model_notes.iter().map(|n| format!("  note: {n}")));
    let budget = match info.budget {
        Budget::Epochs(e) => format!(
            "{} (~{}/epoch)",
            crate::text::counted(e as usize, "epoch"),
            crate::text::counted(info.steps_per_epoch() as usize, "step")
        ),
        Budget::Steps(s) => crate::text::counted(s as usize, "step"),
    };
    let accum = if info.grad_accum > 1 {
        format!(" x {} accumulation", info.grad_accum)
    } else {
        String::new()
    };
    let all = info.per_replica * info.ranks() * info.grad_accum;
    let global = crate::config::step_samples(
        info.per_replica,
        info.ranks(),
        info.grad_accum,
        info.train_samples,
    );
    let global = match global < all {
        true => format!("{global} global (the whole training split: the last shares take fewer)"),
        false => format!("{global} global"),
    };
    lines.push(format!(
        "batch: {} per replica x {}{accum} = {global}; {budget}",
        info.per_replica,
        crate::text::counted(info.ranks(), "rank"),
    ));
    let note = info
        .lr_note
        .as_ref()
        .map_or(String::new(), |n| format!(" ({n})"));
    let clip = info.clip_grad_norm.map_or(String::new(), |c| {
        format!(
            "; the mean gradient clipped to L2 norm {} (--clip-grad-norm)",
            bound_value(c)
        )
    });
    let schedule = crate::nn::schedule::describe(info.schedule, info.warmup)
        .map_or(String::new(), |s| format!("; {s}"));
    lines.push(format!("lr: {:.2e}{note}{schedule}{clip}", info.lr));
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

/// Ranks a line lists one by one; more are summed up (a 64-GPU run's line would run to
/// thousands of characters).
const LISTED_RANKS: usize = 8;

/// Samples per rank of an uneven split: `170/86`; past `LISTED_RANKS` ranks, the ranks of each
/// size counted, largest first (`29x38+28x12`: 38 ranks of 29 and 12 of 28).
pub fn per_rank(sizes: &[usize]) -> String {
    if sizes.len() <= LISTED_RANKS {
        return (sizes.iter().map(|n| n.to_string()))
            .collect::<Vec<_>>()
            .join("/");
    }
    let mut counted = std::collections::BTreeMap::<usize, usize>::new();
    for &s in sizes {
        *counted.entry(s).or_default() += 1;
    }
    (counted.iter().rev().map(|(s, n)| format!("{s}x{n}")))
        .collect::<Vec<_>>()
        .join("+")
}

/// Past `LISTED_RANKS` ranks, the rank or two an uneven split gives the fewest samples (a slow
/// rank's), which `per_rank` does not name: `; fewest: r3`.
fn fewest(sizes: &[usize]) -> String {
    let least = sizes.iter().copied().min().unwrap_or(0);
    let ranks: Vec<String> = (sizes.iter().enumerate())
        .filter(|&(_, &s)| s == least)
        .map(|(r, _)| format!("r{r}"))
        .collect();
    let uneven = sizes.iter().any(|&s| s != least);
    match sizes.len() > LISTED_RANKS && uneven && ranks.len() <= 2 {
        true => format!("; fewest: {}", ranks.join(", ")),
        false => String::new(),
    }
}

/// Each rank's work in ms (`r0 2.55 r1 1.39`: `StepStats::work`, what a straggler has more
/// of); past `LISTED_RANKS` ranks, the median and the fastest and slowest ranks (`median
/// 82.00, fastest r47 30.20, slowest r1 136.30`).
fn step_times(ranks: &[crate::engine::events::StepStats]) -> String {
    let ms = |r: &crate::engine::events::StepStats| r.work().as_secs_f64() * 1e3;
    if ranks.len() <= LISTED_RANKS {
        return (ranks.iter().map(|r| format!("r{} {:.2}", r.rank, ms(r))))
            .collect::<Vec<_>>()
            .join(" ");
    }
    let mut sorted: Vec<&crate::engine::events::StepStats> = ranks.iter().collect();
    sorted.sort_by(|a, b| ms(a).total_cmp(&ms(b)));
    let (fast, slow, mid) = (
        sorted[0],
        sorted[sorted.len() - 1],
        sorted[sorted.len() / 2],
    );
    format!(
        "median {:.2}, fastest r{} {:.2}, slowest r{} {:.2}",
        ms(mid),
        fast.rank,
        ms(fast),
        slow.rank,
        ms(slow)
    )
}

/// ` (1.70x one device, 85% efficiency)` where the run was calibrated; said where it is slower
/// than one device alone.
pub fn scaling_note(rate: Option<f64>, baseline: Option<f64>, ranks: usize) -> String {
    match (rate, baseline) {
        (Some(r), Some(b)) => {
            let (speedup, eff) = crate::engine::calibrate::scaling(r, b, ranks);
            let slower = if speedup < 1.0 {
                ": slower than one device alone"
            } else {
                ""
            };
            format!(
                " ({speedup:.2}x one device, {:.0}% efficiency{slower})",
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

/// A step's log line; `window`: the steps since the previous line, whose time the shares
/// (`data 3% comm 7% wait 12%`) split (this step's alone where None: a step time swings with
/// every local-SGD exchange, every slow batch).
pub fn step_line(
    row: &StepRow,
    rate: Option<f64>,
    info: &RunInfo,
    window: Option<&crate::observe::monitor::Totals>,
) -> String {
    let (budget, baseline) = (info.budget, info.baseline);
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
    // per rank: `32x2`, micro-batches accumulated as the header says them (`32x2x3`); the
    // samples each rank took where that is not the batch per replica (an epoch's short last
    // batch: `736x2`), or each rank's where --rebalance cut the batch unevenly
    let samples: Vec<usize> = row.ranks.iter().map(|r| r.samples).collect();
    let ranks = row.ranks.len();
    let per_rank = match samples.first() {
        Some(&s) if samples.windows(2).all(|w| w[0] == w[1]) => {
            let b = row.per_replica;
            match s / b.max(1) {
                k if k > 1 && s == b * k => format!("{b}x{ranks}x{k}"),
                _ => format!("{s}x{ranks}"),
            }
        }
        _ => per_rank(&samples),
    };
    // where the ranks' time went since the last line (or in this step): input, moving
    // gradients, waiting for others, host transfers
    let parts = match window.filter(|w| w.rank_s > 0.0) {
        Some(w) => [w.rank_s, w.data_s, w.comm_s, w.wait_s, w.transfer_s],
        None => {
            let sum = |f: fn(&crate::engine::events::StepStats) -> std::time::Duration| {
                row.ranks.iter().map(|r| f(r).as_secs_f64()).sum::<f64>()
            };
            [
                sum(|r| r.step_time),
                sum(|r| r.data_wait),
                sum(|r| r.comm),
                sum(|r| r.sync_wait),
                sum(|r| r.transfer),
            ]
        }
    };
    let share = |i: usize| match parts[0] > 0.0 {
        true => parts[i] / parts[0] * 100.0,
        false => 0.0,
    };
    format!(
        "{}{of} | loss {} | grad norm {} | lr {:.2e} | batch {per_rank}={} | {rate} samples/s{scaling} | work ms {} | data {:.0}% comm {:.0}% wait {:.0}%",
        step,
        loss_value(row.loss.into(), 4),
        grad_norm(row.grad_norm)
            + match info.clip_grad_norm {
                Some(c) if row.grad_norm > c => " clipped",
                _ => "",
            },
        row.lr,
        row.global_samples,
        step_times(&row.ranks),
        share(1),
        share(2),
        share(3),
    ) + &match share(4) {
        // central storage: parameters and gradients between the devices and the host copy
        t if t > 0.0 => format!(" transfer {t:.0}%"),
        _ => String::new(),
    } + &match window.filter(|w| w.rank_s > 0.0) {
        // pictures decoded and augmented batch by batch: how near the loaders are to their
        // limit, before the ranks wait for them
        _ if !info.loaders_said() => String::new(),
        Some(w) => loaders_busy(w.loader_share()),
        None => loaders_busy(crate::observe::monitor::loader_share(&row.ranks)),
    }
}

/// ` | loaders 63% busy`, nothing where not known.
pub fn loaders_busy(share: Option<f64>) -> String {
    share.map_or(String::new(), |s| {
        format!(" | loaders {:.0}% busy", s * 100.0)
    })
}

/// What follows a run's `end` record, from `line` on.
pub fn past_end(line: u64) -> String {
    format!("the file goes on after the run's end record (from line {line}): left unread")
}

pub fn event_line(ev: &Event, budget: Budget, accum: usize) -> Option<String> {
    Some(match ev {
        // (a screen says it in its header; the figures follow)
        Event::Started { .. } | Event::Validating { .. } => return None,
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
                (Some(l), Some(a)) => format!(
                    " | val loss {} acc {:.2}%",
                    loss_value(*l as f64, 4),
                    a * 100.0
                ),
                _ => String::new(),
            };
            let train = loss_value(*train_loss as f64, 4);
            format!("epoch {of} done at step {step} | train loss {train}{val}")
        }
        Event::Validated {
            step,
            epochs,
            val_loss,
            val_accuracy,
            ..
        } => format!(
            "validated at step {step} ({epochs:.2} epochs) | val loss {} acc {:.2}%",
            loss_value(*val_loss as f64, 4),
            val_accuracy * 100.0
        ),
        Event::Control { step, applied } => match applied {
            Applied::Paused => format!("paused before step {}", step + 1),
            Applied::Resumed => format!("resumed at step {}", step + 1),
            Applied::BatchSize { from, to, lr } => format!(
                "batch per replica {from} -> {to} from step {} (lr now {lr:.2e})",
                step + 1
            ),
            Applied::Split(sizes) => {
                // (a micro-batch's sizes: each rank accumulates `accum` of them a step)
                let accumulated = match accum {
                    0 | 1 => String::new(),
                    a => format!(" x {a} accumulated"),
                };
                format!(
                    "rebalanced from step {}: samples per rank {}{accumulated} (global batch {} unchanged{})",
                    step + 1,
                    per_rank(sizes),
                    sizes.iter().sum::<usize>() * accum.max(1),
                    fewest(sizes)
                )
            }
        },
        // (who asked, as a file anyone may edit says it: shown, never obeyed)
        Event::Asked { control, by, .. } => format!(
            "{} asked {}",
            crate::text::printable(by),
            control.asked_words()
        ),
        Event::Checkpoint {
            step,
            path,
            best: None,
        } => format!("checkpoint at step {step}: {}", path.display()),
        Event::Checkpoint {
            step,
            path,
            best: Some(a),
        } => format!(
            "best checkpoint at step {step} (val acc {:.2}%): {}",
            a * 100.0,
            path.display()
        ),
        Event::InSync { step, ranks } => format!(
            "replicas in sync at step {step}: all {ranks} ranks' parameters hash the same (checked every --log-every steps, every 50th for auto)"
        ),
        Event::DataSkipped { step, message } => format!(
            "WARNING at step {step}: {message}"
        ),
        Event::Warning { step, message } => format!("WARNING at step {step}: {message}"),
        Event::DeviceNote { rank, message } => format!("note: rank {rank}: {message}"),
        Event::Failed {
            rank,
            step,
            message,
        } => format!("ERROR rank {rank} at step {step}: {message}"),
        Event::Finished { step, ending } => ended(*step, *ending),
    })
}

/// `--checkpoint-best`'s checkpoint as the screen's summary and exit line name it:
/// `runs/.../checkpoints/best (val acc 96.10%)`.
pub fn best_checkpoint(path: &std::path::Path, accuracy: f32) -> String {
    format!("{} (val acc {:.2}%)", path.display(), accuracy * 100.0)
}

/// How a run ended, in a line.
pub fn ended(step: u64, ending: Ending) -> String {
    match ending {
        Ending::Completed => format!("finished: {}", crate::text::counted(step as usize, "step")),
        Ending::Stopped => format!("stopped at step {step}"),
        Ending::Quit => format!(
            "quit at once after step {step}: what was under way then was left unfinished (the newest checkpoint is the one to resume from)"
        ),
    }
}

#[cfg(test)]
mod tests;
