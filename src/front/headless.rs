//! Headless frontend: plain log lines (no escape codes, no `\r`) and the metrics file.

use std::io::Write;
use std::time::Duration;

use crossbeam_channel::{select, tick};

use super::sync::{sync_note, Ends};
use super::units;
use super::words::{describe, event_line, step_line};
use crate::engine::events::{Applied, Event, StepStats};
use crate::engine::{Engine, EngineError, RunInfo, RunResult};
use crate::front::steps::Steps;
use crate::front::summary::{Spikes, Summary};
use crate::observe::mfu::Mfu;
use crate::observe::monitor::{Monitor, StepRow, Totals};
use crate::observe::straggler::{Detector, Warning};
use crate::observe::telemetry::{process_memory, Telemetry};
use crate::observe::Recorder;

/// How often the log collects step samples.
const STEP_POLL: Duration = Duration::from_millis(20);

/// `[MM:SS.ss]` since the run started (minutes past 99 keep counting), truncated to the
/// hundredth so that no second reads 60.
fn stamp(t: Duration) -> String {
    let cs = t.as_millis() / 10;
    format!("[{:02}:{:02}.{:02}]", cs / 6000, cs / 100 % 60, cs % 100)
}

/// What the log keeps between lines: the step rows, the straggler detector, the metrics file.
struct Log<'a> {
    out: &'a mut dyn Write,
    metrics: Recorder,
    telemetry: Telemetry,
    monitor: Monitor,
    detector: Detector,
    /// The run as it started (its budget, accumulation, strategy, calibration, ranks).
    info: RunInfo,
    ends: Ends,
    log_every: u64,
    mfu: Mfu,
    /// The newest step, where its line was not printed: the end of a run stopped early
    /// prints it.
    unprinted: Option<(StepRow, Option<f64>)>,
    /// The step the newest epoch's end was at (its line stands for that step's): a step's
    /// samples may complete its row after the epoch's event.
    epoch_said: u64,
    /// For the end's summary: the run's totals as of its newest step, its best validation.
    totals: Option<Totals>,
    /// The totals as of the last step line printed.
    printed: Option<Totals>,
    best_val: Option<f32>,
    /// Gradient spikes said.
    spikes: Spikes,
}

impl<'a> Log<'a> {
    fn new(
        info: RunInfo,
        out: &'a mut dyn Write,
        metrics: Recorder,
        log_every: u64,
        sample_interval: Duration,
    ) -> Log<'a> {
        Log {
            out,
            metrics,
            telemetry: Telemetry::new(&info.devices, sample_interval),
            monitor: Monitor::new(info.ranks()),
            detector: Detector::for_run(&info),
            ends: Ends::of(&info),
            log_every,
            mfu: Mfu::for_run(&info),
            unprinted: None,
            epoch_said: 0,
            totals: None,
            printed: None,
            best_val: None,
            spikes: Spikes::default(),
            info,
        }
    }

    /// The run's end (`Finished`, after its last samples): a run stopped early says its last
    /// step's line first, whatever --log-every (where no epoch's end said it), then the end and
    /// the summary.
    fn end(&mut self, ev: &Event, t: Duration) {
        if let Some((row, rate)) = self.unprinted.take() {
            if row.step > self.epoch_said {
                self.print_step(&row, rate);
            }
        }
        self.on_event(ev, t);
        if let Event::Finished { step, ending } = *ev {
            let summary = Summary {
                best_val_accuracy: self.best_val,
                grad_spikes: self.spikes.clone(),
                ..Summary::of(step, ending, t, &self.totals.unwrap_or_default())
            };
            let figures = summary.figures(&self.info);
            put(self.out, format_args!("{} summary: {figures}", stamp(t)));
        }
    }

    fn warn(&mut self, warnings: Vec<String>) {
        for w in warnings {
            put(self.out, format_args!("{w}"));
        }
    }

    /// Every device's sample into the metrics file and the straggler detector.
    fn on_sample(&mut self, at: Duration) {
        let devices = self.telemetry.sample(at);
        self.detector.on_telemetry(&devices);
        let r = self.metrics.telemetry(at, &devices, process_memory());
        self.warn(r);
    }

    fn on_step(&mut self, s: StepStats) {
        self.telemetry.on_step(&s);
        let Some(row) = self.monitor.on_step(s) else {
            return;
        };
        let rate = self.monitor.samples_per_sec();
        let due = row.logged(self.log_every);
        if due {
            self.print_step(&row, rate);
        }
        let w = self.metrics.step(&row, rate);
        self.warn(w);
        for w in self.detector.on_row(&row) {
            self.on_warning(&w, row.at);
        }
        self.totals = row.totals.or(self.totals);
        self.unprinted = (!due).then_some((row, rate));
    }

    fn print_step(&mut self, row: &StepRow, rate: Option<f64>) {
        // (the shares over the steps since the last line, as the summary's over the run)
        let window = (row.totals).map(|t| t.since(&self.printed.unwrap_or_default()));
        self.printed = row.totals.or(self.printed);
        let mut line = step_line(row, rate, &self.info, window.as_ref());
        if let Some(m) = self.mfu.mean(&row.ranks) {
            line += &format!(" | mfu {}", super::words::mfu_text(Some(m)));
        }
        let ahead = self.ends.ahead(row.step, row.ends_at);
        if let Some(note) = sync_note(&self.info.strategy, row.step, ahead) {
            line += &format!(" | {note}");
        }
        // (the budget's last step has nothing left to wait for)
        if let Some(eta) = self.monitor.eta().filter(|_| row.progress < 1.0) {
            line += &format!(" | eta {}", units::clock(eta));
        }
        put(self.out, format_args!("{} {line}", stamp(row.at)));
    }

    fn on_warning(&mut self, w: &Warning, t: Duration) {
        let level = if w.is_clear() { "note" } else { "WARN" };
        put(self.out, format_args!("{} {level} {w}", stamp(t)));
        if let Warning::GradSpike { step, .. } = w {
            self.spikes.add(Some(*step));
        }
        let r = self.metrics.warning(w, t);
        self.warn(r);
    }

    fn on_event(&mut self, ev: &Event, t: Duration) {
        if let Event::EpochDone {
            val_accuracy: Some(a),
            ..
        }
        | Event::Validated {
            val_accuracy: a, ..
        } = ev
        {
            self.best_val = Some(self.best_val.map_or(*a, |b| b.max(*a)));
        }
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
        // a checkpoint of a step whose line --log-every left out comes after that step's line
        // (a stopped run's last step is otherwise said after its checkpoint, at the end); an
        // epoch's end stands for its last step's line (its train loss said), which a run
        // stopped there would print after it, out of time order
        match ev {
            Event::Checkpoint { step, .. } if *step > self.epoch_said => {
                if let Some((row, rate)) = self.unprinted.take_if(|(r, _)| r.step == *step) {
                    self.print_step(&row, rate);
                }
            }
            Event::EpochDone { step, .. } => self.epoch_said = *step,
            _ => {}
        }
        if let Some(l) = event_line(ev, self.info.budget, self.info.grad_accum) {
            put(self.out, format_args!("{} {l}", stamp(t)));
        }
        let r = self.metrics.event(ev, t);
        self.warn(r);
    }

    /// An event from the engine, after the steps up to its own; the end is kept back (returned),
    /// to be said after the final step samples.
    fn on_engine_event(
        &mut self,
        steps: &mut Steps,
        ev: Event,
        t: Duration,
    ) -> Option<(Event, Duration)> {
        self.drain(steps, ev.step());
        if matches!(ev, Event::Finished { .. }) {
            return Some((ev, t));
        }
        self.on_event(&ev, t);
        None
    }

    /// Takes every step sample waiting, up to step `until` where given (an event's).
    fn drain(&mut self, steps: &mut Steps, until: Option<u64>) {
        for s in steps.take(until) {
            self.on_step(s);
        }
        self.metrics.catch_up();
    }
}

/// Prints the run until every worker has ended, then returns its result. `notes` follow the
/// start-up lines (where the run can be attached from); `metrics` takes every record.
pub fn run(
    engine: Engine,
    log_every: u64,
    sample_interval: Duration,
    out: &mut dyn Write,
    metrics: Recorder,
    notes: &[String],
) -> Result<RunResult, EngineError> {
    let info = engine.info().clone();
    for l in describe(&info).iter().chain(notes) {
        put(out, format_args!("{l}"));
    }
    let mut log = Log::new(info, out, metrics, log_every, sample_interval);
    let w = log.metrics.run_start(&log.info);
    log.warn(w);
    // step samples are collected every few milliseconds rather than as they come, so a
    // worker's `try_send` never has to wake this thread (that wake-up costs steps ~5%)
    let mut steps = Steps::new(engine.steps().clone());
    let events = engine.events().clone();
    let poll = tick(STEP_POLL);
    let sampler = tick(sample_interval);
    let mut end_record = None;
    loop {
        select! {
            recv(poll) -> _ => {
                // events already waiting first, each after the steps before it (else a step
                // after an event is printed before it)
                for ev in events.try_iter() {
                    end_record = end_record.or(log.on_engine_event(&mut steps, ev, engine.elapsed()));
                }
                log.drain(&mut steps, None);
                if let Some(w) = log.detector.tick(engine.elapsed(), &engine.heartbeats()) {
                    log.on_warning(&w, engine.elapsed());
                }
            }
            recv(sampler) -> _ => log.on_sample(engine.elapsed()),
            recv(events) -> e => match e {
                Ok(ev) => {
                    end_record = end_record.or(log.on_engine_event(&mut steps, ev, engine.elapsed()));
                }
                Err(_) => break,
            },
        }
    }
    // every worker has ended: take the last samples
    for s in steps.rest() {
        log.on_step(s);
    }
    // a last sample covers the part of the interval since the previous one (stamped no later
    // than the end, which follows it in the file: a reader's wall time is the end's)
    let last = end_record.as_ref().map(|(_, t)| *t);
    log.on_sample(last.unwrap_or_else(|| engine.elapsed()));
    if let Some((ev, t)) = end_record {
        log.end(&ev, t);
    }
    let w = log.metrics.flush();
    log.warn(w);
    let _ = log.out.flush();
    engine.join()
}

/// One line of the log, what would drive the terminal in it (an escape in a path or a name)
/// escaped; lost where the output is gone.
fn put(out: &mut dyn Write, line: std::fmt::Arguments) {
    let line = crate::text::printable_lines(&line.to_string());
    let _ = writeln!(out, "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_count_minutes_and_never_show_sixty_seconds() {
        let at = |ms| stamp(Duration::from_millis(ms));
        assert_eq!(at(0), "[00:00.00]");
        assert_eq!(at(59_999), "[00:59.99]");
        assert_eq!(at(60_000), "[01:00.00]");
        assert_eq!(at(754_321), "[12:34.32]");
        assert_eq!(at(6_000_000 + 1_500), "[100:01.50]");
    }

    /// The log of a run of `ranks` demo ranks stopped after step `last`, `events` at its end
    /// (one logged step in four); `late`: the last rank's sample of the last step comes after
    /// the events (its row completes after them).
    fn stopped_log(ranks: usize, last: u64, events: &[Event], late: bool) -> Vec<String> {
        let mut out = Vec::new();
        let info = crate::front::tui::demo::info(ranks);
        let metrics = Recorder::new(Vec::new(), None, 4);
        let mut log = Log::new(info, &mut out, metrics, 4, Duration::from_secs(1));
        let sample = |rank, step| crate::front::tui::demo::step(rank, ranks, step);
        for step in 1..=last {
            for rank in 0..ranks {
                if !(late && step == last && rank == ranks - 1) {
                    log.on_step(sample(rank, step));
                }
            }
        }
        let t = Duration::from_secs(60);
        for ev in events {
            log.on_event(ev, t);
        }
        if late {
            log.on_step(sample(ranks - 1, last));
        }
        let ending = crate::engine::events::Ending::Stopped;
        log.end(&Event::Finished { step: last, ending }, t);
        drop(log);
        let text = String::from_utf8(out).unwrap();
        text.lines()
            .map(|l| l[l.find(' ').unwrap() + 1..].to_string())
            .collect()
    }

    #[test]
    fn a_stopped_run_says_its_last_step_once_and_in_time_order() {
        let said = |lines: &[String]| -> Vec<String> {
            let words = |l: &String| l.split(" |").next().unwrap().to_string();
            lines.iter().map(words).collect()
        };
        // stopped between logged steps: the last step's line comes before the end
        let lines = stopped_log(2, 6, &[], false);
        assert_eq!(
            said(&lines)[..3],
            [
                "step 4 epoch 1/30",
                "step 6 epoch 1/30",
                "stopped at step 6"
            ]
        );
        // its checkpoint follows that line
        let path = std::path::PathBuf::from("ckpt");
        let checkpoint = Event::Checkpoint {
            step: 6,
            path,
            best: None,
        };
        let lines = stopped_log(2, 6, std::slice::from_ref(&checkpoint), false);
        assert_eq!(
            said(&lines)[1..3],
            ["step 6 epoch 1/30", "checkpoint at step 6: ckpt"]
        );
        // an epoch's end stands for its last step's line: none after it
        let epoch = Event::EpochDone {
            epoch: 1,
            step: 6,
            train_loss: 1.0,
            val_loss: None,
            val_accuracy: None,
            elapsed: Duration::from_secs(60),
        };
        for late in [false, true] {
            let lines = stopped_log(2, 6, &[epoch.clone(), checkpoint.clone()], late);
            let said = said(&lines);
            assert_eq!(said[0], "step 4 epoch 1/30");
            assert!(
                said[1].starts_with("epoch 1/30 done at step 6"),
                "{lines:?}"
            );
            assert_eq!(
                said[2..4],
                ["checkpoint at step 6: ckpt", "stopped at step 6"]
            );
        }
    }
}
