//! Headless frontend: plain log lines (no escape codes, no `\r`) and the metrics file.

use std::io::Write;
use std::time::Duration;

use crossbeam_channel::{select, tick, Receiver};

use crate::config::Budget;
use crate::engine::events::{Applied, Event, StepStats};
use crate::engine::{Engine, EngineError, RunInfo, RunResult};
use crate::observe::metrics::{MetricsWriter, Recorder};
use crate::observe::monitor::{Monitor, StepRow};
use crate::observe::straggler::{Detector, Warning};
use crate::observe::telemetry::{process_memory, Telemetry};

/// How often the log collects step samples.
const STEP_POLL: Duration = Duration::from_millis(20);

fn stamp(t: Duration) -> String {
    let s = t.as_secs_f64();
    format!("[{:02}:{:05.2}]", (s / 60.0) as u64, s % 60.0)
}

/// The lines printed before the first step.
pub fn describe(info: &RunInfo) -> Vec<String> {
    let devs: Vec<String> = info.devices.iter().map(|d| d.label()).collect();
    let mut lines = vec![format!("run: {}", info.name)];
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
    lines.push(format!(
        "devices: {} ({ranks} rank{}{threads})",
        devs.join(" "),
        if ranks == 1 { "" } else { "s" }
    ));
    if let Some(note) = &info.device_note {
        lines.push(format!("note: {note}"));
    }
    lines.push(format!("data: {}", info.data));
    lines.push(format!("model: {}, {} parameters", info.model, info.params));
    let budget = match info.budget {
        Budget::Epochs(e) => format!("{e} epochs (~{} steps/epoch)", info.steps_per_epoch()),
        Budget::Steps(s) => format!("{s} steps"),
    };
    let accum = if info.grad_accum > 1 {
        format!(" x {} accumulation", info.grad_accum)
    } else {
        String::new()
    };
    lines.push(format!(
        "batch: {} per replica x {} ranks{accum} = {} global; {budget}",
        info.per_replica,
        info.ranks(),
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
    if let Some(b) = &info.batch_note {
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
    // per rank: `32x2`, or each rank's samples where --rebalance cut the batch unevenly
    let samples: Vec<usize> = row.ranks.iter().map(|r| r.samples).collect();
    let per_rank = if samples.windows(2).all(|w| w[0] == w[1]) {
        format!("{}x{}", row.per_replica, row.ranks.len())
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
        "{}{of} | loss {:.4} | lr {:.2e} | batch {per_rank}={} | {rate} samples/s{scaling} | step ms {} | comm {:.0}% wait {:.0}%",
        step,
        row.loss,
        row.lr,
        row.global_samples,
        times.join(" "),
        share(|r| r.comm),
        share(|r| r.sync_wait),
    )
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
        Event::Failed {
            rank,
            step,
            message,
        } => format!("ERROR rank {rank} at step {step}: {message}"),
        Event::Finished {
            step,
            stopped: true,
        } => format!("stopped at step {step}"),
        Event::Finished {
            step,
            stopped: false,
        } => format!("finished: {step} steps"),
    })
}

/// What the log keeps between lines: the step rows, the straggler detector, the metrics file.
struct Log<'a> {
    out: &'a mut dyn Write,
    metrics: Recorder,
    telemetry: Telemetry,
    monitor: Monitor,
    detector: Detector,
    budget: Budget,
    log_every: u64,
    baseline: Option<f64>,
}

impl Log<'_> {
    fn warn(&mut self, warning: Option<String>) {
        if let Some(w) = warning {
            let _ = writeln!(self.out, "{w}");
        }
    }

    /// Every device's sample into the metrics file and the straggler detector.
    fn on_sample(&mut self, at: Duration) {
        let devices = self.telemetry.sample(at);
        self.detector.on_telemetry(&devices);
        let r = self
            .metrics
            .record(|m| m.telemetry(at, &devices, process_memory()));
        self.warn(r);
    }

    fn on_step(&mut self, s: StepStats) {
        self.telemetry.on_step(&s);
        let Some(row) = self.monitor.on_step(s) else {
            return;
        };
        if row.step.is_multiple_of(self.log_every) {
            let rate = self.monitor.samples_per_sec();
            let line = step_line(&row, rate, self.budget, self.baseline);
            let _ = writeln!(self.out, "{} {line}", stamp(row.at));
            let w = self.metrics.record(|w| w.step(&row, rate));
            self.warn(w);
        }
        for w in self.detector.on_row(&row) {
            self.on_warning(&w, row.at);
        }
    }

    fn on_warning(&mut self, w: &Warning, t: Duration) {
        let level = if w.is_clear() { "note" } else { "WARN" };
        let _ = writeln!(self.out, "{} {level} {w}", stamp(t));
        let r = self.metrics.record(|m| m.warning(w, t));
        self.warn(r);
    }

    fn on_event(&mut self, ev: &Event, t: Duration) {
        match ev {
            Event::Control {
                applied: Applied::Paused,
                ..
            } => self.detector.set_paused(true, t),
            Event::Control {
                applied: Applied::Resumed,
                ..
            } => self.detector.set_paused(false, t),
            _ => {}
        }
        if let Some(l) = event_line(ev, self.budget) {
            let _ = writeln!(self.out, "{} {l}", stamp(t));
        }
        let r = self.metrics.record(|w| w.event(ev, t));
        self.warn(r);
    }

    /// Takes every step sample waiting.
    fn drain(&mut self, steps: &Receiver<StepStats>) {
        while let Ok(s) = steps.try_recv() {
            self.on_step(s);
        }
    }
}

/// Prints the run until every worker has ended, then returns its result.
pub fn run(
    engine: Engine,
    log_every: u64,
    sample_interval: Duration,
    out: &mut dyn Write,
    metrics: Option<MetricsWriter>,
) -> Result<RunResult, EngineError> {
    let info = engine.info().clone();
    for l in describe(&info) {
        let _ = writeln!(out, "{l}");
    }
    let mut log = Log {
        out,
        metrics: Recorder::new(metrics),
        telemetry: Telemetry::new(&info.devices, sample_interval),
        monitor: Monitor::new(info.ranks()),
        detector: Detector::for_run(&info),
        budget: info.budget,
        log_every,
        baseline: info.baseline,
    };
    let w = log.metrics.record(|w| w.run_start(&info));
    log.warn(w);
    // step samples are collected every few milliseconds rather than as they come, so a
    // worker's `try_send` never has to wake this thread (that wake-up costs steps ~5%)
    let steps = engine.steps().clone();
    let events = engine.events().clone();
    let poll = tick(STEP_POLL);
    let sampler = tick(sample_interval);
    let mut end_record = None;
    loop {
        select! {
            recv(poll) -> _ => {
                log.drain(&steps);
                if let Some(w) = log.detector.tick(engine.elapsed(), &engine.heartbeats()) {
                    log.on_warning(&w, engine.elapsed());
                }
            }
            recv(sampler) -> _ => log.on_sample(engine.elapsed()),
            recv(events) -> e => match e {
                Ok(ev) => {
                    // steps before this event are printed before it
                    log.drain(&steps);
                    if matches!(ev, Event::Finished { .. }) {
                        // said last, after the final step samples
                        end_record = Some((ev, engine.elapsed()));
                    } else {
                        log.on_event(&ev, engine.elapsed());
                    }
                }
                Err(_) => break,
            },
        }
    }
    // every worker has ended: take the last samples
    for s in steps.iter() {
        log.on_step(s);
    }
    // a last sample covers the part of the interval since the previous one
    log.on_sample(engine.elapsed());
    if let Some((ev, t)) = end_record {
        log.on_event(&ev, t);
    }
    let w = log.metrics.record(|w| w.flush());
    log.warn(w);
    let _ = log.out.flush();
    engine.join()
}
