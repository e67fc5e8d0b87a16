//! Where a run's records go: every metrics file (`--metrics-out`, the run directory's) and the
//! live hub that attached clients read. Each record is built once, as one line, for all of
//! them. Step records go to the files every `--log-every` steps (`kept`; and the run's last,
//! stopped early or not), epochs' ends and validations where `kept` keeps them (and the newest
//! thinned of each, late, before a checkpoint, the run's last step, a failure and its end),
//! and step records to the hub at most every
//! `LIVE_STEP_INTERVAL` (the newest step then), so an attached screen moves smoothly; with no
//! client attached the hub is given only what its history keeps.
//!
//! Beside them, the sinks that take records in the engine's types ([`Sink`]: the Prometheus
//! endpoint, TensorBoard's event file): every step (the ones logged marked), event, warning
//! and sample.
//!
//! A file or sink that fails is reported once and written no more; training goes on. A process
//! that quits at once (a second signal) still ends its metrics files with an `end` record.

mod files;
mod kept;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::config::log_every::LogEvery;
use crate::engine::events::Event;
use crate::engine::RunInfo;
use crate::observe::live::{Kind, LiveHub};
use crate::observe::metrics::{records, Line, MetricsWriter};
use crate::observe::mfu::Mfu;
use crate::observe::monitor::StepRow;
use crate::observe::sample::DeviceSample;
use crate::observe::straggler::Warning;
use crate::quit_at_once;
use kept::Verdict;

/// The shortest time between two step records to the live hub (at most 20 a second).
pub const LIVE_STEP_INTERVAL: Duration = Duration::from_millis(50);

/// What takes every record beside the metrics files and the hub. An `Err` is the warning's
/// words; the sink is then dropped.
pub trait Sink: Send {
    /// A complete step; `logged` for one the metrics file records (every `--log-every`th, the
    /// run's last).
    fn step(&mut self, row: &StepRow, rate: Option<f64>, logged: bool) -> Result<(), String>;
    /// The run's last step, at its end, where `step` had it unlogged (for sinks that keep
    /// only the logged steps: the run's last is always one).
    fn last_step(&mut self, _row: &StepRow, _rate: Option<f64>) -> Result<(), String> {
        Ok(())
    }
    /// Every event; `logged` for one the metrics file records (all but the epochs' ends and
    /// validations `auto` thins).
    fn event(&mut self, ev: &Event, t: Duration, logged: bool) -> Result<(), String>;
    /// An epoch's end or a validation `event` had unlogged, written now: a best that came too
    /// soon after the last kept, or the newest of its kind before a checkpoint, the run's last
    /// step, its failure or its end.
    fn late_event(&mut self, _ev: &Event, _t: Duration) -> Result<(), String> {
        Ok(())
    }
    fn warning(&mut self, _w: &Warning, _t: Duration) -> Result<(), String> {
        Ok(())
    }
    fn telemetry(
        &mut self,
        t: Duration,
        devices: &[DeviceSample],
        process: Option<(u64, u64)>,
    ) -> Result<(), String>;
    fn flush(&mut self) -> Result<(), String>;
}

/// A run of this process has written its own end record: nothing of it is left half done.
static ENDED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a run of this process has ended and written its records whole (what a second
/// signal would otherwise cut short is done: the process is writing its last lines).
pub fn run_ended() -> bool {
    ENDED.load(std::sync::atomic::Ordering::SeqCst)
}

pub struct Recorder {
    files: Arc<Mutex<files::Files>>,
    /// Writes the end record if the process quits at once; from the `run` record to the `end`.
    quit: Option<quit_at_once::Armed>,
    hub: Option<LiveHub>,
    sinks: Vec<Box<dyn Sink>>,
    /// The run's MFU arithmetic (from its `run` record) for the step records.
    mfu: Option<Mfu>,
    kept: kept::Kept,
    scores: kept::Scores,
    /// The best epoch's end and validation so far where they came too soon after the last
    /// kept: written before the next record (`kept::Verdict::Best`).
    bests: Vec<(Event, Duration)>,
    /// The newest epoch's end and validation, each where thinned: written before a checkpoint,
    /// the run's last step (where its row says so), a failure, or at the end.
    held: Vec<(Event, Duration)>,
    /// The events of `bests` and `held` written since `take_late`.
    late: Vec<(Event, Duration)>,
    /// The newest step not yet given to the hub (it came too soon after the last one).
    pending: Option<(StepRow, Option<f64>)>,
    /// The newest step, where not logged: the end of a run stopped early logs it (the last
    /// step is always in the files, whatever `--log-every`).
    unlogged: Option<(StepRow, Option<f64>)>,
    last_live: Option<Instant>,
    /// The sinks that failed (dropped): why, and the newest step recorded then, said again at
    /// the end (the warning came once, long before).
    stopped: Vec<(String, u64)>,
}

impl Recorder {
    pub fn new(files: Vec<MetricsWriter>, hub: Option<LiveHub>, log_every: LogEvery) -> Recorder {
        let files = files::Files::new(files);
        Recorder {
            files: Arc::new(Mutex::new(files)),
            quit: None,
            hub,
            sinks: Vec::new(),
            mfu: None,
            kept: kept::Kept::new(log_every),
            scores: kept::Scores::new(log_every),
            bests: Vec::new(),
            held: Vec::new(),
            late: Vec::new(),
            pending: None,
            unlogged: None,
            last_live: None,
            stopped: Vec::new(),
        }
    }

    /// Also gives every record to `sink`.
    pub fn with(mut self, sink: Box<dyn Sink>) -> Recorder {
        self.sinks.push(sink);
        self
    }

    /// Gives `f` every sink; the warnings of those that failed (dropped).
    fn each_sink(&mut self, mut f: impl FnMut(&mut dyn Sink) -> Result<(), String>) -> Vec<String> {
        let mut warnings = Vec::new();
        let step = self.files().step();
        self.sinks.retain_mut(|s| match f(s.as_mut()) {
            Ok(()) => true,
            Err(e) => {
                warnings.push(format!("warning: {e}; no more will be written there"));
                self.stopped.push((e, step));
                false
            }
        });
        warnings
    }

    /// Records nothing.
    pub fn none() -> Recorder {
        Recorder::new(Vec::new(), None, LogEvery::Steps(1))
    }

    fn files(&self) -> MutexGuard<'_, files::Files> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes `line` to every file (flushed where `flush`); the warnings of those that failed.
    fn write_files(&mut self, line: &Line, flush: bool) -> Vec<String> {
        self.files().write(line, flush)
    }

    /// Writes step `step`'s record, kept as the newest for a file that loses it (one a write
    /// fails on ends with it: a record held back in its buffer may be the one lost).
    fn write_step(&mut self, step: u64, line: &Line) -> Vec<String> {
        let mut files = self.files();
        files.newest_step = Some((step, line.clone()));
        files.write(line, false)
    }

    fn publish(&self, kind: Kind, line: &Line) {
        if let Some(h) = &self.hub {
            h.publish(kind, line.clone());
        }
    }

    /// Gives the hub the step held back, whatever the time (before a later record).
    fn release(&mut self) {
        if let (Some((row, rate)), Some(h)) = (self.pending.take(), &self.hub) {
            h.publish(
                Kind::Step,
                Line::new(&records::step(&row, rate, self.mfu.as_ref())),
            );
            self.last_live = Some(Instant::now());
        }
    }

    fn live_due(&self) -> bool {
        self.last_live
            .is_none_or(|t| t.elapsed() >= LIVE_STEP_INTERVAL)
    }

    /// The `run` record, first.
    pub fn run_start(&mut self, info: &RunInfo) -> Vec<String> {
        self.mfu = Some(Mfu::for_run(info)).filter(Mfu::any);
        let line = Line::new(&records::run(info));
        if let Some(h) = &self.hub {
            h.set_run(line.clone());
        }
        let mut warnings = Vec::new();
        {
            let mut files = self.files();
            files.at(Some(info.start_step), Duration::ZERO);
            warnings.extend(files.write(&line, true));
        }
        let files = self.files.clone();
        self.quit = Some(quit_at_once::arm(move || files::Files::quit(&files)));
        warnings
    }

    /// A complete step (every rank's sample): whether the files keep it (whether the log
    /// does), and the warnings of the files and sinks that failed.
    pub fn step(&mut self, row: &StepRow, rate: Option<f64>) -> (bool, Vec<String>) {
        let due = self.kept.keep(row);
        let mut warnings = self.each_sink(|s| s.step(row, rate, due));
        let to_files = {
            let mut files = self.files();
            files.at(Some(row.step), row.at);
            !files.writers.is_empty() || !files.lost.is_empty()
        };
        let logged = to_files && due;
        let held = !due && (to_files || !self.sinks.is_empty());
        self.unlogged = held.then(|| (row.clone(), rate));
        let line = logged.then(|| Line::new(&records::step(row, rate, self.mfu.as_ref())));
        if let Some(l) = &line {
            // (before the run's last step: the newest epoch and validation, whatever comes)
            warnings.extend(self.write_late(row.is_last()));
            warnings.extend(self.write_step(row.step, l));
        }
        let Some(hub) = &self.hub else {
            return (due, warnings);
        };
        if self.live_due() {
            self.pending = None;
            self.last_live = Some(Instant::now());
            match line.filter(|_| logged) {
                Some(l) => hub.publish(Kind::Step, l),
                None if hub.step_slot() => hub.publish(
                    Kind::Step,
                    Line::new(&records::step(row, rate, self.mfu.as_ref())),
                ),
                None => {}
            }
        } else if hub.clients() > 0 {
            self.pending = Some((row.clone(), rate));
        }
        (due, warnings)
    }

    /// Gives the hub the step held back once its time has come (call after taking steps).
    pub fn catch_up(&mut self) {
        if self.pending.is_some() && self.live_due() {
            self.release();
        }
    }

    /// A lifecycle event (`t`: seconds since the start, as the frontend saw it): whether the
    /// files keep it (whether the log does), and the warnings of the files and sinks that
    /// failed. The step held back goes first where its time has come (or at the end), else
    /// after: a run whose epochs take milliseconds must not send a step with each.
    pub fn event(&mut self, ev: &Event, t: Duration) -> (bool, Vec<String>) {
        let mut warnings = Vec::new();
        match ev {
            Event::Finished { .. } => {
                self.release();
                warnings.extend(self.write_unlogged(true));
            }
            // (a run that failed ends here: its newest epoch and validation, before its error;
            // a checkpoint of a step left unlogged, a stop's among them, follows that step's
            // record)
            Event::Failed { .. } | Event::Checkpoint { .. } => {
                self.catch_up();
                let saved = matches!(ev, Event::Checkpoint { .. })
                    && (self.unlogged.as_ref()).is_some_and(|(row, _)| Some(row.step) == ev.step());
                warnings.extend(self.write_unlogged(saved));
            }
            _ => self.catch_up(),
        }
        let verdict = self.scores.keep(ev, t);
        let logged = verdict == Verdict::Kept;
        let kind = std::mem::discriminant(ev);
        self.held.retain(|(h, _)| std::mem::discriminant(h) != kind);
        match verdict {
            Verdict::Kept => {}
            Verdict::Best => {
                self.bests
                    .retain(|(h, _)| std::mem::discriminant(h) != kind);
                self.bests.push((ev.clone(), t));
            }
            Verdict::Thinned => self.held.push((ev.clone(), t)),
        }
        warnings.extend(self.each_sink(|s| s.event(ev, t, logged)));
        self.files().at(ev.step(), t);
        if logged {
            warnings.extend(self.write_late(false));
            warnings.extend(self.write_event(ev, t));
        }
        (logged, warnings)
    }

    /// The epochs' ends and validations written late since the last call, in the order
    /// written (for the log: the screen had them as they came).
    pub fn take_late(&mut self) -> Vec<(Event, Duration)> {
        std::mem::take(&mut self.late)
    }

    /// Writes the bests waiting for the next record, and where `all` the newest thinned
    /// epoch's end and validation (the run may end: a last step, a checkpoint, a failure), in
    /// step order.
    fn write_late(&mut self, all: bool) -> Vec<String> {
        let mut late = std::mem::take(&mut self.bests);
        if all {
            late.append(&mut self.held);
        }
        self.write_late_events(late)
    }

    /// Writes `events`, in step order, as late ones.
    fn write_late_events(&mut self, mut events: Vec<(Event, Duration)>) -> Vec<String> {
        events.sort_by_key(|(ev, _)| ev.step());
        let mut warnings = Vec::new();
        for (ev, t) in events {
            warnings.extend(self.each_sink(|s| s.late_event(&ev, t)));
            warnings.extend(self.write_event(&ev, t));
            self.late.push((ev, t));
        }
        warnings
    }

    /// The records left unlogged that the files always keep, in step order: the newest
    /// epoch's end and validation (and the bests waiting), and where `row` the newest step's
    /// (at the run's end: its last step's; before a checkpoint: the step it saved).
    fn write_unlogged(&mut self, row: bool) -> Vec<String> {
        if !row {
            return self.write_late(true);
        }
        let mut held = std::mem::take(&mut self.held);
        held.append(&mut self.bests);
        let step = self.unlogged.as_ref().map_or(u64::MAX, |(row, _)| row.step);
        let (before, after): (Vec<_>, Vec<_>) =
            held.into_iter().partition(|(ev, _)| ev.step() < Some(step));
        let mut warnings = self.write_late_events(before);
        if let Some((row, rate)) = self.unlogged.take() {
            warnings.extend(self.each_sink(|s| s.last_step(&row, rate)));
            let line = Line::new(&records::step(&row, rate, self.mfu.as_ref()));
            warnings.extend(self.write_step(row.step, &line));
        }
        warnings.extend(self.write_late_events(after));
        warnings
    }

    /// Event `ev`'s record (where it has one) to the hub and the files.
    fn write_event(&mut self, ev: &Event, t: Duration) -> Vec<String> {
        let mut warnings = Vec::new();
        let Some(v) = records::event(ev, t) else {
            return warnings;
        };
        let line = Line::new(&v);
        let kind = match ev {
            Event::EpochDone { .. } => Kind::Epoch,
            Event::Validated { .. } => Kind::Validation,
            _ => Kind::Event,
        };
        self.publish(kind, &line);
        {
            // the run's end and the mark that it is written, at once: a process quitting
            // meanwhile writes no second one
            let mut files = self.files();
            warnings.extend(files.write(&line, true));
            files.keep(ev, &line);
            // (a run that fails, on the full disk too, ends with its error instead)
            if matches!(ev, Event::Finished { .. } | Event::Failed { .. }) && !files.ended {
                files.end_lost(&line);
            }
            files.ended |= matches!(ev, Event::Finished { .. });
        }
        if matches!(ev, Event::Finished { .. }) {
            self.quit = None;
            ENDED.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        warnings
    }

    /// Every device's sample, and this process's memory beside the machine's.
    pub fn telemetry(
        &mut self,
        t: Duration,
        devices: &[DeviceSample],
        process: Option<(u64, u64)>,
    ) -> Vec<String> {
        let mut warnings = self.each_sink(|s| s.telemetry(t, devices, process));
        warnings.extend(self.write_late(false));
        if self.files().writers.is_empty() && self.hub.is_none() {
            return warnings;
        }
        let line = Line::new(&records::telemetry(t, devices, process));
        self.publish(Kind::Telemetry, &line);
        warnings.extend(self.write_files(&line, true));
        warnings
    }

    /// A detector's warning (straggler, degraded, stall, bound, gradient spike) or its clearing.
    pub fn warning(&mut self, w: &Warning, t: Duration) -> Vec<String> {
        self.catch_up();
        let mut warnings = self.each_sink(|s| s.warning(w, t));
        warnings.extend(self.write_late(false));
        let line = Line::new(&records::warning(w, t));
        self.publish(Kind::Event, &line);
        warnings.extend(self.write_files(&line, false));
        warnings
    }

    /// Everything written out (at the end).
    pub fn flush(&mut self) -> Vec<String> {
        self.release();
        // (a run that ended without its end: a worker's panic, a screen left)
        let mut warnings = self.write_late(true);
        // (one failing now is said now)
        let before = self.stopped.len();
        warnings.extend(self.each_sink(|s| s.flush()));
        warnings.extend(self.files().each(MetricsWriter::flush));
        warnings.extend(
            (self.stopped[..before].iter()).map(|(e, step)| {
                format!("warning: nothing was written there after step {step}: {e}")
            }),
        );
        warnings
    }
}

#[cfg(test)]
mod tests;
