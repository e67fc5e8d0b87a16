//! Headless frontend: plain log lines (no escape codes, no `\r`) and the metrics file.

use std::io::Write;
use std::time::Duration;

use super::sync::{sync_note, Ends};
use super::units;
use super::words::{describe, event_line, step_line};
use crate::engine::events::{Applied, Ending, Event};
use crate::engine::{Engine, EngineError, RunInfo, RunResult};
use crate::front::summary::{Flags, Spikes, Summary};
use crate::front::watch::{Seen, Watch};
use crate::front::watcher::Watcher;
use crate::observe::metrics::Record;
use crate::observe::mfu::Mfu;
use crate::observe::monitor::{StepRow, Totals};
use crate::observe::telemetry::Telemetry;
use crate::observe::Recorder;

/// `[MM:SS.ss]` since the run started (minutes past 99 keep counting), truncated to the
/// hundredth so that no second reads 60.
fn stamp(t: Duration) -> String {
    let cs = t.as_millis() / 10;
    format!("[{:02}:{:02}.{:02}]", cs / 6000, cs / 100 % 60, cs % 100)
}

/// What the log keeps between lines: its newest step, its figures for the end.
struct Log<'a> {
    out: &'a mut dyn Write,
    /// The run as it started (its budget, accumulation, strategy, calibration, ranks).
    info: RunInfo,
    ends: Ends,
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
    /// Stragglers and the run's limits said.
    flags: Flags,
    /// The time left to the end of the budget as of the newest row.
    eta: Option<Duration>,
    /// The latest time a line was stamped with.
    stamped: Duration,
    /// The newest step reported, and whether the run's end (`Finished`) was said.
    reached: u64,
    ended: bool,
}

impl<'a> Log<'a> {
    fn new(info: RunInfo, out: &'a mut dyn Write) -> Log<'a> {
        Log {
            out,
            ends: Ends::of(&info),
            mfu: Mfu::for_run(&info),
            unprinted: None,
            epoch_said: 0,
            totals: None,
            printed: None,
            best_val: None,
            spikes: Spikes::default(),
            flags: Flags::default(),
            eta: None,
            stamped: Duration::ZERO,
            reached: 0,
            ended: false,
            info,
        }
    }

    /// A line's stamp, for `t` since the start: never earlier than the line before's (a step's
    /// row completes when its slowest rank's sample comes, after an event that rank sent
    /// later may have been stamped).
    fn stamp(&mut self, t: Duration) -> String {
        self.stamped = self.stamped.max(t);
        stamp(self.stamped)
    }

    /// Says what the watch saw.
    fn show(&mut self, seen: Vec<Seen>) {
        for seen in seen {
            match seen {
                Seen::Step {
                    row,
                    samples_per_s,
                    eta,
                    logged,
                } => {
                    self.eta = eta;
                    self.on_row(row, samples_per_s, logged)
                }
                // (a step's comes as `Seen::Step`)
                Seen::Record(Record::Step { .. }) => {}
                Seen::Record(Record::Event { t, event }) => match event {
                    Event::Finished { .. } => self.end(&event, t),
                    _ => self.on_event(&event, t),
                },
                // (an epoch's end or validation said late: the run's last, a best)
                Seen::Late { t, event } => self.on_event(&event, t),
                Seen::Unlogged { event, .. } => self.best(&event),
                Seen::Record(Record::Warning {
                    t,
                    kind,
                    rank,
                    step,
                    spikes,
                    message,
                }) => {
                    if kind == "grad_spike" {
                        self.spikes.add(spikes);
                    }
                    self.on_warning(&kind, (rank, step), &message, t)
                }
                Seen::Record(Record::Telemetry { .. }) => {}
                Seen::Note(n) => put(self.out, format_args!("{n}")),
            }
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
            self.summary(step, ending, t);
        }
    }

    /// The `summary:` line of a run that ended at `step` after `t`.
    fn summary(&mut self, step: u64, ending: Ending, t: Duration) {
        self.ended = true;
        let summary = Summary {
            best_val_accuracy: self.best_val,
            grad_spikes: self.spikes.clone(),
            flags: self.flags.clone(),
            ..Summary::of(step, ending, t, &self.totals.unwrap_or_default())
        };
        let figures = summary.figures(&self.info);
        let at = self.stamp(t);
        put(self.out, format_args!("{at} summary: {figures}"));
    }

    /// A failed run's end (its error said after, by the caller): its figures as far as it got,
    /// as a finished run's (it sends no end of its own).
    fn failed(&mut self) {
        if !self.ended {
            // (how it ended is the error's to say: the figures do not tell)
            self.summary(self.reached, Ending::Stopped, self.stamped);
        }
    }

    /// The best validation accuracy, with `ev`'s.
    fn best(&mut self, ev: &Event) {
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
    }

    fn on_row(&mut self, row: StepRow, rate: Option<f64>, due: bool) {
        if due {
            self.print_step(&row, rate);
        }
        self.totals = row.totals.or(self.totals);
        self.reached = self.reached.max(row.step);
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
        if let Some(eta) = self.eta.filter(|_| row.progress < 1.0) {
            line += &format!(" | eta {}", units::clock(eta));
        }
        let at = self.stamp(row.at);
        put(self.out, format_args!("{at} {line}"));
    }

    /// A detector's warning of `kind` (a clearing's ends in `_cleared`).
    fn on_warning(
        &mut self,
        kind: &str,
        (rank, step): (Option<usize>, Option<u64>),
        message: &str,
        t: Duration,
    ) {
        let level = if kind.ends_with("_cleared") {
            "note"
        } else {
            "WARN"
        };
        let at = self.stamp(t);
        put(self.out, format_args!("{at} {level} {message}"));
        let who = rank.map(|r| self.info.rank_label(r));
        self.flags.add(kind, who, step);
    }

    fn on_event(&mut self, ev: &Event, t: Duration) {
        self.best(ev);
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
            let at = self.stamp(t);
            // (a headless run is paused by an attached client: how to go on, said where it shows)
            let how = match (ev, &self.info.run_dir) {
                (
                    Event::Control {
                        applied: Applied::Paused,
                        ..
                    },
                    Some(dir),
                ) => format!(" (to resume: mgtop-train attach {}, then p)", dir.display()),
                _ => String::new(),
            };
            put(self.out, format_args!("{at} {l}{how}"));
        }
    }
}

/// Prints the run until every worker has ended, then returns its result. `notes` follow the
/// start-up lines (where the run can be attached from); `metrics` takes every record.
pub fn run(
    engine: Engine,
    sample_interval: Duration,
    out: &mut dyn Write,
    metrics: Recorder,
    notes: &[String],
) -> Result<RunResult, EngineError> {
    let info = engine.info().clone();
    let out = &mut Lost::keeping(out);
    for l in describe(&info).iter().chain(notes) {
        put(out, format_args!("{l}"));
    }
    let telemetry =
        Telemetry::new(&info, sample_interval).with_peers(engine.peer_samples(), sample_interval);
    let mut watch = Watch::new(&info, engine.steps().clone(), metrics, telemetry);
    let mut log = Log::new(info, out);
    log.show(watch.take());
    // (the watch on its own thread: a log nobody reads loses lines, never records)
    let watcher = Watcher::start(&engine, watch, sample_interval);
    for seen in watcher.seen().iter() {
        log.show(seen);
    }
    log.show(watcher.rest());
    let result = engine.join();
    if result.is_err() {
        log.failed();
    }
    let _ = log.out.flush();
    // (a log that could not be written, a full disk: said where it cannot be missed; a closed
    // pipe, `| head`, was meant)
    if let Some(e) = out
        .lost
        .take()
        .filter(|e| e.kind() != std::io::ErrorKind::BrokenPipe)
    {
        crate::tell!("warning: the log could not be written from some point on ({e}): it is cut short; the run's records are whole in its metrics file (mgtop-train view shows them)");
    }
    result
}

/// The log's output, keeping the first write that failed (the lines after it are lost).
struct Lost<'a> {
    out: &'a mut dyn Write,
    lost: Option<std::io::Error>,
}

impl<'a> Lost<'a> {
    fn keeping(out: &'a mut dyn Write) -> Lost<'a> {
        Lost { out, lost: None }
    }

    fn keep<T>(&mut self, r: std::io::Result<T>) -> std::io::Result<T> {
        r.inspect_err(|e| {
            // (an interrupted write is tried again by `write_all`: nothing lost)
            use std::io::ErrorKind::{Interrupted, WouldBlock};
            if self.lost.is_none() && !matches!(e.kind(), Interrupted | WouldBlock) {
                self.lost = Some(std::io::Error::new(e.kind(), e.to_string()));
            }
        })
    }
}

impl Write for Lost<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = self.out.write(buf);
        self.keep(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let flushed = self.out.flush();
        self.keep(flushed)
    }
}

/// One line of the log, what would drive the terminal in it (an escape in a path or a name)
/// escaped; lost where the output is gone.
fn put(out: &mut dyn Write, line: std::fmt::Arguments) {
    let line = crate::text::printable_lines(&line.to_string());
    let _ = writeln!(out, "{line}");
}

#[cfg(test)]
mod tests;
