//! How the state follows what happens: the run's records (whole steps, warnings, engine
//! events, telemetry).

use super::{App, AppEvent, EpochPoint, Level, Mode, RunState, Summary, ValPoint};
use crate::engine::events::{Applied, Ending, Event};
use crate::front::words::event_line;
use crate::observe::metrics::Record;
use crate::observe::monitor::{StepRow, LOSS_EMA};
use crate::observe::straggler::{Limit, SaidFor};

/// The epochs and validations kept point by point: past twice as many, the older half of them
/// is thinned to every other point (the best validation kept), so a run of millions of short
/// epochs holds bounded memory, its charts their shape and its table its newest rows.
pub const POINTS: usize = 4096;

/// `v` with the older half thinned, where it holds `2 * POINTS`, keeping the first point that
/// `best` says is the best (one: a run at 100% has many).
fn thinned<T>(v: &mut Vec<T>, best: impl Fn(&T) -> bool) {
    if v.len() < 2 * POINTS {
        return;
    }
    let first_best = v.iter().position(best);
    let mut i = 0;
    v.retain(|_| {
        let keep = i >= POINTS || i % 2 == 0 || Some(i) == first_best;
        i += 1;
        keep
    });
}

impl App {
    /// Bounds the epochs and validations kept (`POINTS`).
    fn thin_points(&mut self) {
        // (the best looked for only where there is thinning to do: not every epoch)
        if self.epochs.len() < 2 * POINTS && self.validations.len() < 2 * POINTS {
            return;
        }
        let best = self.val_accuracy().1;
        thinned(&mut self.epochs, |e| {
            e.val_accuracy.is_some() && e.val_accuracy == best
        });
        thinned(&mut self.validations, |v| Some(v.accuracy) == best);
    }

    /// One record of the run, at the time it was written: a run in this process's as its
    /// watch records it, a metrics file's (`view`), a live socket's (`attach`).
    pub fn apply_record(&mut self, rec: Record) {
        match rec {
            Record::Step { row, samples_per_s } => {
                self.apply(AppEvent::Tick(row.at));
                self.apply(AppEvent::Row {
                    row,
                    samples_per_sec: samples_per_s,
                });
            }
            Record::Event { t, event } => {
                self.apply(AppEvent::Tick(t));
                self.apply(AppEvent::Engine(event));
            }
            Record::Warning {
                t,
                kind,
                rank,
                step,
                spikes,
                message,
            } => {
                self.apply(AppEvent::Tick(t));
                self.apply(AppEvent::Warned {
                    kind,
                    rank,
                    step,
                    spikes,
                    message,
                });
            }
            Record::Telemetry {
                t,
                devices,
                process_memory,
            } => self.apply(AppEvent::Telemetry {
                at: t,
                devices,
                process_memory,
            }),
        }
        // a failed run writes no `end`: its failure is its end (a run in this process ends
        // when its workers have: `finish`)
        if self.state == RunState::Failed && self.summary.is_none() && self.mode != Mode::Local {
            self.finish(None);
        }
    }

    /// The learning rate the run trains at: the last step's, or a batch change's from the
    /// step it applies at (the last step's row has the old one until a step of it comes).
    pub fn lr(&self) -> f32 {
        match (self.lr_from, &self.last_row) {
            (Some((_, lr)), _) => lr,
            (None, row) => row.as_ref().map_or(self.info.lr, |r| r.lr),
        }
    }

    pub(super) fn on_row(&mut self, row: StepRow, samples_per_sec: Option<f64>) {
        for s in &row.ranks {
            if let Some(d) = self.devices.get_mut(s.rank) {
                d.on_step(s);
            }
        }
        self.monitor.on_row(&row);
        self.samples_per_sec = samples_per_sec;
        self.eta = self.monitor.eta();
        self.count_row(&row);
        if self.lr_from.is_some_and(|(from, _)| row.step >= from) {
            self.lr_from = None;
        }
        self.last_row = Some(row);
    }

    /// What every complete step adds: time, shares, the loss lines.
    fn count_row(&mut self, row: &StepRow) {
        self.now = self.now.max(row.at);
        self.reached = self.reached.max(row.step);
        match row.totals {
            Some(t) => self.totals = t,
            // (a file from before rows carried the run's totals: the rows it has)
            None => self.totals.add(row.global_samples, &row.ranks),
        }
        let x = row.step as f64;
        let loss = row.loss as f64;
        self.loss.push(x, loss);
        // the run's own, smoothed over every step; else (a file from before rows carried it)
        // over the rows there are, steps apart (a metrics file holds every --log-every'th):
        // each weighs as the steps since the one before would
        let ema = match (row.totals.and_then(|t| t.smoothed_loss), self.ema) {
            (Some(run), _) => run,
            (None, Some((e, at))) => {
                let steps = row.step.saturating_sub(at).clamp(1, 1 << 20);
                e + (1.0 - (1.0 - LOSS_EMA).powf(steps as f64)) * (loss - e)
            }
            (None, None) => loss,
        };
        self.ema = Some((ema, row.step));
        self.loss_smooth.push(x, ema);
        if row.grad_norm.is_finite() {
            self.grad_norm.push(x, f64::from(row.grad_norm));
            let over = self.info.clip_grad_norm.is_some_and(|c| row.grad_norm > c);
            self.clipped = (self.clipped.0 + 1, self.clipped.1 + u64::from(over));
        }
        if self.state == RunState::Starting {
            self.state = RunState::Running;
        }
    }

    /// A detector's warning: its device marked or cleared, its words in the events.
    pub(super) fn on_warning(
        &mut self,
        kind: &str,
        rank: Option<usize>,
        (step, spikes): (Option<u64>, Option<SaidFor>),
        text: String,
    ) {
        if let Some(d) = rank.and_then(|r| self.devices.get_mut(r)) {
            d.flag(kind, text.clone());
        }
        if kind == "grad_spike" {
            self.grad_spikes.add(spikes);
        }
        let who = rank.map(|r| self.info.rank_label(r));
        self.flags.add(kind, who, step);
        // the run's own limits stay in the header while they last
        let limit =
            (Limit::ALL.into_iter()).find(|l| kind.trim_end_matches("_cleared") == l.kind());
        if let Some(l) = limit {
            self.limits.retain(|&k| k != l);
            if !kind.ends_with("_cleared") {
                self.limits.push(l);
            }
        }
        let level = if kind.ends_with("_cleared") {
            Level::Info
        } else {
            Level::Warn
        };
        self.note(level, text);
    }

    pub(super) fn on_event(&mut self, e: Event) {
        // how far the run got: steps done by these events' accounts (a failure's step is the
        // one that failed; a control's the last done before it: a run paused between logged
        // steps shows where it paused)
        let done = match &e {
            Event::Checkpoint { step, .. }
            | Event::EpochDone { step, .. }
            | Event::Validated { step, .. }
            | Event::InSync { step, .. }
            | Event::Control { step, .. }
            | Event::Asked { step, .. }
            | Event::Finished { step, .. } => Some(*step),
            Event::Failed { step, .. } => Some(step.saturating_sub(1)),
            _ => None,
        };
        self.reached = self.reached.max(done.unwrap_or(0));
        // (a file that logs few steps: its epochs and checkpoints say the run trains)
        if self.state == RunState::Starting && done.is_some_and(|s| s > self.info.start_step) {
            self.state = RunState::Running;
        }
        // what answers a key of this screen is also said in the footer (the events panel may
        // be a line or two that the next epoch fills)
        let answers = match &e {
            Event::Checkpoint { best: None, .. } => std::mem::take(&mut self.pending_checkpoint),
            Event::Control {
                applied: a @ (Applied::Paused | Applied::Resumed),
                ..
            } => self.pending_pause == Some(matches!(a, Applied::Paused)),
            Event::Control {
                applied: Applied::BatchSize { to, .. },
                ..
            } => self.pending_batch.is_some_and(|p| p.1 == *to),
            _ => false,
        };
        match &e {
            Event::Started { per_replica, .. } => {
                self.per_replica = *per_replica;
                if self.state == RunState::Starting {
                    self.state = RunState::Running;
                }
            }
            Event::Control { applied, step } => match applied {
                Applied::Paused => {
                    self.paused_at = Some(self.now);
                    self.pending_pause = None;
                    if !matches!(self.state, RunState::Stopping) {
                        self.state = RunState::Paused;
                    }
                }
                Applied::Resumed => {
                    // (this process's own rows say so themselves: `StepStats.paused`)
                    if let Some(from) = self.paused_at.take().filter(|_| self.mode != Mode::Local) {
                        self.monitor.leave_out(from, self.now);
                        self.eta = self.monitor.eta();
                    }
                    self.pending_pause = None;
                    if self.state == RunState::Paused {
                        self.state = RunState::Running;
                    }
                }
                Applied::BatchSize { to, lr, .. } => {
                    self.per_replica = *to;
                    self.lr_from = Some((step + 1, *lr));
                    self.split = None;
                    self.batch_applied(*to);
                }
                Applied::Split(sizes) => self.split = Some(sizes.clone()),
            },
            &Event::Validating { step, .. } => self.validating = Some((step, self.now)),
            Event::EpochDone {
                epoch,
                step,
                train_loss,
                val_loss,
                val_accuracy,
                ..
            } => {
                self.validating = None;
                self.epochs.push(EpochPoint {
                    epoch: *epoch,
                    step: *step,
                    train_loss: *train_loss,
                    val_loss: *val_loss,
                    val_accuracy: *val_accuracy,
                });
                if let Some(accuracy) = *val_accuracy {
                    self.validations.push(ValPoint {
                        step: *step,
                        epochs: *epoch as f64,
                        epoch_end: true,
                        // (a NaN loss is written null)
                        loss: val_loss.unwrap_or(f32::NAN),
                        accuracy,
                    });
                }
                self.thin_points();
            }
            &Event::Validated {
                step,
                epochs,
                val_loss,
                val_accuracy,
                ..
            } => {
                self.validating = None;
                self.validations.push(ValPoint {
                    step,
                    epochs: epochs as f64,
                    epoch_end: false,
                    loss: val_loss,
                    accuracy: val_accuracy,
                });
                self.thin_points();
            }
            Event::Checkpoint {
                step,
                path,
                best: None,
            } => {
                self.last_checkpoint = Some(path.clone());
                self.checkpoint_written = Some((*step, self.now));
            }
            Event::Checkpoint {
                path,
                best: Some(a),
                ..
            } => self.best_checkpoint = Some((path.clone(), *a)),
            Event::InSync { .. }
            | Event::Asked { .. }
            | Event::DataSkipped { .. }
            | Event::Warning { .. }
            | Event::DeviceNote { .. } => {}
            Event::Failed { rank, message, .. } => {
                self.state = RunState::Failed;
                if let Some(d) = self.devices.get_mut(*rank) {
                    d.alert = Some(message.clone());
                }
            }
            Event::Finished { step, ending } => {
                if self.state != RunState::Failed {
                    self.state = RunState::Done;
                }
                // (what the footer said of the running run, e.g. what q would do, is over)
                self.flash = None;
                self.batch_asks.clear();
                self.pending_batch = None;
                self.pending_pause = None;
                self.pending_checkpoint = false;
                self.summary = Some(self.summarize(*step, *ending));
            }
        }
        if let Some(line) = event_line(&e, self.info.budget, self.info.grad_accum) {
            // (another client's change while the footer speaks: the newer state, not ours)
            // (`--rebalance`'s re-cuts come often, and say nothing the footer spoke of)
            let supersedes = self.flash.is_some()
                && matches!(
                    e,
                    Event::Control {
                        applied: Applied::BatchSize { .. } | Applied::Paused | Applied::Resumed,
                        ..
                    }
                );
            if answers || supersedes {
                self.flash = Some(line.clone());
            }
            let level = match e {
                Event::Failed { .. } => Level::Error,
                Event::DataSkipped { .. } | Event::Warning { .. } | Event::DeviceNote { .. } => {
                    Level::Warn
                }
                _ => Level::Info,
            };
            let progress = matches!(e, Event::EpochDone { .. } | Event::Validated { .. });
            self.push_log(level, line, progress);
        }
    }
}

impl App {
    /// The run's end in a few figures, from what this screen added up.
    pub(super) fn summarize(&self, steps: u64, ending: Ending) -> Summary {
        let failed = self.log.iter().find(|l| l.level == Level::Error);
        Summary {
            failed: (self.state == RunState::Failed)
                .then(|| failed.map(|l| l.text.clone()).unwrap_or_default()),
            best_val_accuracy: self.val_accuracy().1,
            last_checkpoint: self.last_checkpoint.clone(),
            best_checkpoint: self.best_checkpoint.clone(),
            grad_spikes: self.grad_spikes.clone(),
            flags: self.flags.clone(),
            ..Summary::of(steps, ending, self.now, &self.totals)
        }
    }
}
