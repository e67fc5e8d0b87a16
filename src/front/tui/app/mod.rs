//! The terminal UI's state. It changes only through `apply_record` and `apply` (the run's
//! records, from its watch, a file or a socket, and what the frontend loop says) and
//! `handle_key` (what the user presses), so it is tested without a terminal; the
//! render functions only read it.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Duration;

mod device;
mod events;
mod keys;
mod log;
mod view;

pub use device::{DeviceState, Split};
pub use keys::VIEW_ONLY;
pub use log::{Level, LogEntry};
pub use view::{Mode, Popup, RunState, View, Window};

use crate::engine::control::Control;
use crate::engine::events::{Ending, Event};
use crate::engine::RunInfo;
use crate::front::summary::Spikes;
pub use crate::front::summary::Summary;
use crate::observe::history::History;
use crate::observe::mfu::Mfu;
use crate::observe::monitor::{Monitor, StepRow, Totals};
use crate::observe::sample::DeviceSample;
use crate::observe::straggler::SaidFor;

/// Why a metrics file without an end record is not taken for a running run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Silent {
    /// Its run directory says its run is not running.
    Killed,
    /// A file outside a run directory that has not grown for `replay::QUIET`.
    NoEnd,
    /// An attached run whose process has sent nothing, not even its `live` marker, for
    /// `attach::QUIET`.
    NotResponding,
    /// A run whose process on this machine is suspended (Ctrl-Z, `kill -STOP`).
    Suspended,
    /// A file with a line that is no record: read up to it (the run may have gone on).
    Damaged,
}

/// Points kept per chart series for the whole run.
const HISTORY_POINTS: usize = 2048;
/// Steps behind the per-device step-time bar (its mean split).
const RECENT_STEPS: usize = 64;
/// Steps kept per device for its sparkline and step-time chart (a wide screen's row holds
/// more than the bar's 64).
const SPARK_STEPS: usize = 256;
const LOG_LINES: usize = 500;
/// How long the footer keeps an answer.
const FLASH_FOR: Duration = Duration::from_secs(15);

/// How long a validation goes on before the header says `VALIDATING`.
const VALIDATING_SAID: Duration = Duration::from_secs(1);

/// What the engine or the sampler reports to the UI.
#[derive(Clone, Debug)]
pub enum AppEvent {
    Engine(Event),
    /// A step every rank has done, as the metrics file records it (the watch of a run in this
    /// process, a file, a live socket): every rank's sample, and the samples/s then.
    Row {
        row: StepRow,
        samples_per_sec: Option<f64>,
    },
    /// Device samples (one per rank) and this process's memory, at a time since the start.
    Telemetry {
        at: Duration,
        devices: Vec<DeviceSample>,
        process_memory: Option<(u64, u64)>,
    },
    /// The clock moved on (drives elapsed time while nothing else happens).
    Tick(Duration),
    /// SIGTERM / SIGHUP: the run is stopping with a checkpoint.
    Signal,
    /// Something to tell the user that is not an engine event (e.g. metrics file failure).
    Notice(Level, String),
    /// A detector's warning as the metrics file records it: its `kind` (a
    /// clearing's ends in `_cleared`), the rank it is about, its step where recorded, its words.
    Warned {
        kind: String,
        rank: Option<usize>,
        step: Option<u64>,
        /// A gradient spike's: the spikes it was said for.
        spikes: Option<SaidFor>,
        message: String,
    },
    /// The theme `t` switched to, by name.
    Theme(String),
    /// A one-line answer to a key that the frontend loop gives (e.g. the run has ended).
    Flash(String),
    /// The run refused a control a key asked for, and why.
    Refused(Control, String),
}

/// What a key asks the frontend loop to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Control(Control),
    Quit,
    /// Leave now without waiting for the workers (a third Ctrl-C while stopping: a worker
    /// stuck in a GPU kernel or NCCL must not hold the terminal).
    Abandon,
    /// Connect again to the attached run (its connection dropped).
    Reconnect,
    NextTheme,
    Redraw,
}

/// The validation result of one epoch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EpochPoint {
    pub epoch: u64,
    pub step: u64,
    pub train_loss: f32,
    pub val_loss: Option<f32>,
    pub val_accuracy: Option<f32>,
}

/// A validation's result: at an epoch's end or within one (`--val-every`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ValPoint {
    pub step: u64,
    /// Epochs trained by then (1.4: 40% into the second).
    pub epochs: f64,
    /// An epoch's own (at its end), not one of `--val-every` within it.
    pub epoch_end: bool,
    pub loss: f32,
    pub accuracy: f32,
}

/// The events view's pages as it last drew them, in entries (an entry wraps to as many lines
/// as the width takes): the view measures them, the keys move by them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LogFit {
    /// Entries shown whole from the first one shown.
    pub shown: usize,
    /// The first entry of the page above the one shown.
    pub above: usize,
    /// The first entry of the oldest page, full to its last row.
    pub oldest: usize,
}

pub struct App {
    pub info: RunInfo,
    pub readonly: bool,
    /// Where the run is: here, attached over a socket, or in a metrics file.
    pub mode: Mode,
    /// Attached, and the connection dropped: why (`r` connects again).
    pub disconnected: Option<String>,
    /// The most steps any record says were done (`step`).
    reached: u64,
    /// The events view's first entry shown, counted from the newest (↑ ↓ PgUp PgDn Home End).
    pub log_scroll: usize,
    /// What the events view showed when last drawn: its pages, in entries.
    pub log_fit: std::cell::Cell<LogFit>,
    /// A metrics file whose run has no end record and that is not heard any more: its run is
    /// not running (killed, or its machine went down), or a copy has not grown for a while.
    pub silent: Option<Silent>,
    pub state: RunState,
    monitor: Monitor,
    /// When the run last paused (its `Paused` event), for the ETA of rows read back.
    paused_at: Option<Duration>,
    pub devices: Vec<DeviceState>,
    /// The run's MFU arithmetic (GPU ranks with a known peak).
    pub mfu: Mfu,
    pub last_row: Option<StepRow>,
    pub samples_per_sec: Option<f64>,
    pub eta: Option<Duration>,
    pub per_replica: usize,
    /// A batch change's learning rate and the step it trains from, until a step of it reports.
    pub lr_from: Option<(u64, f32)>,
    /// Samples per rank when `--rebalance` has cut the global batch unevenly.
    pub split: Option<Vec<usize>>,
    /// A batch change asked for and not yet applied by the ranks: (from, to). (Which step it
    /// lands on is the ranks' to say: they may be steps ahead of the newest row shown.)
    pub pending_batch: Option<(usize, usize)>,
    /// The batches this screen asked for, oldest first, not yet applied nor refused.
    batch_asks: Vec<usize>,
    /// A pause (true) or resume (false) asked for and not yet applied.
    pub pending_pause: Option<bool>,
    /// A checkpoint asked for from this screen and not yet written.
    pub pending_checkpoint: bool,
    /// The newest checkpoint written (not a best one): its step, and when.
    checkpoint_written: Option<(u64, Duration)>,
    pub loss: History,
    pub loss_smooth: History,
    /// The mean gradient's norm per step shown (its peaks, kept however long the run), and of
    /// those steps how many `--clip-grad-norm` clipped (a run read back from a file or
    /// attached to: the steps it was told of).
    pub grad_norm: History,
    pub clipped: (u64, u64),
    /// Gradient spikes said (`Warning::GradSpike`, by the kind its record names).
    pub grad_spikes: Spikes,
    /// Stragglers and the run's limits said, for the summary.
    pub flags: crate::front::summary::Flags,
    /// The smoothed train loss, and the step it is of.
    ema: Option<(f64, u64)>,
    pub epochs: Vec<EpochPoint>,
    /// Every validation, the epochs' own and those within them.
    pub validations: Vec<ValPoint>,
    pub log: VecDeque<LogEntry>,
    pub view: View,
    pub window: Window,
    pub focus: Option<usize>,
    pub popup: Option<Popup>,
    /// A one-line answer to the last key (e.g. why it did nothing).
    pub flash: Option<String>,
    /// The footer's answer as it was last seen, and since when: gone after `FLASH_FOR`.
    flash_since: Option<(String, std::time::Instant)>,
    pub now: Duration,
    pub process_memory: Option<(u64, u64)>,
    pub last_checkpoint: Option<PathBuf>,
    pub best_checkpoint: Option<(PathBuf, f32)>,
    /// A validation begun after this step, when this screen heard of it, and not yet done
    /// (`Event::Validating`).
    pub validating: Option<(u64, Duration)>,
    pub summary: Option<Summary>,
    /// The user asked to stop: leave when the run has ended.
    pub quitting: bool,
    /// The end-of-run summary was dismissed (Esc) to look at the panels under it.
    pub summary_hidden: bool,
    /// The run's totals as of the newest row (for the summary).
    totals: Totals,
    /// What holds the whole run back now (`input-bound`, `launch-bound`, `underused`), from
    /// the detector's warnings until each is cleared.
    pub limits: Vec<crate::observe::straggler::Limit>,
}

impl App {
    pub fn new(info: RunInfo, readonly: bool) -> App {
        let devices = (0..info.ranks())
            .map(|r| DeviceState::new(info.rank_label(r)))
            .collect();
        let mut app = App {
            mfu: Mfu::for_run(&info),
            monitor: Monitor::new(info.ranks()),
            paused_at: None,
            per_replica: info.per_replica,
            lr_from: None,
            split: None,
            info,
            readonly,
            mode: Mode::Local,
            disconnected: None,
            silent: None,
            reached: 0,
            log_scroll: 0,
            log_fit: Default::default(),
            state: RunState::Starting,
            devices,
            last_row: None,
            samples_per_sec: None,
            eta: None,
            pending_batch: None,
            batch_asks: Vec::new(),
            pending_pause: None,
            pending_checkpoint: false,
            checkpoint_written: None,
            loss: History::new(HISTORY_POINTS),
            loss_smooth: History::new(HISTORY_POINTS),
            grad_norm: History::peaks(HISTORY_POINTS),
            clipped: (0, 0),
            grad_spikes: Spikes::default(),
            flags: Default::default(),
            ema: None,
            epochs: Vec::new(),
            validations: Vec::new(),
            log: VecDeque::new(),
            view: View::Overview,
            window: Window::OneMinute,
            focus: None,
            popup: None,
            flash: None,
            flash_since: None,
            now: Duration::ZERO,
            process_memory: None,
            last_checkpoint: None,
            best_checkpoint: None,
            validating: None,
            summary: None,
            quitting: false,
            summary_hidden: false,
            totals: Totals::default(),
            limits: Vec::new(),
        };
        // the start-up's notes, which a headless run prints under its lines (a device left
        // out, the precision, the data's classes, weights loaded in part by --init)
        let notes = (app.info.device_note.iter())
            .chain(&app.info.others_notes)
            .chain(&app.info.precision_notes)
            .chain(&app.info.data_notes)
            .chain(&app.info.model_notes)
            .map(|n| format!("note: {n}"))
            .collect::<Vec<_>>();
        for note in notes {
            app.push_log(Level::Info, note, false);
        }
        if let Some(line) = crate::front::words::resumed_line(&app.info) {
            let lr = app
                .info
                .lr_note
                .as_ref()
                .map_or(String::new(), |n| format!("; lr {:.2e} ({n})", app.info.lr));
            app.push_log(Level::Info, line + &lr, false);
        }
        app
    }

    /// The state of a run recorded in a metrics file: read-only, `q` leaves.
    pub fn watching(info: RunInfo) -> App {
        let mut app = App::new(info, true);
        app.mode = Mode::File;
        app
    }

    /// The state of a run in another process, attached over its socket.
    pub fn attached(info: RunInfo, readonly: bool) -> App {
        let mut app = App::new(info, readonly);
        app.mode = Mode::Attached;
        app
    }

    /// Device `i`'s MFU (0..1) over its recent steps; `None` for a CPU worker, a GPU whose
    /// peak is not known, or before its first step.
    pub fn device_mfu(&self, i: usize) -> Option<f64> {
        let d = self.devices.get(i)?;
        let samples = d.last.as_ref()?.samples;
        let (sum, n) = d.step_ms().fold((0.0, 0), |(s, n), ms| (s + ms, n + 1));
        let mean = Duration::try_from_secs_f64(sum / n.max(1) as f64 / 1e3).ok()?;
        self.mfu.of(i, samples, mean)
    }

    /// Whether this screen is a file's (nothing here can change the run).
    pub fn watching_file(&self) -> bool {
        self.mode == Mode::File
    }

    /// The newest step known to be done: a recorded run's file holds only every
    /// `--log-every`th step, but its checkpoints, epochs, failure and end name theirs too.
    pub fn step(&self) -> u64 {
        self.reached.max(self.info.start_step)
    }

    /// What an attached screen leaves behind when it detaches: the run going on, or paused (no
    /// one then resumes it but a screen that attaches), and what then resumes it.
    pub fn detach_leaves(&self) -> (&'static str, &'static str) {
        match (self.state, self.silent) {
            (_, Some(Silent::Suspended)) => (
                "the run stays suspended",
                " (its process continues with fg in its terminal, or kill -CONT)",
            ),
            (RunState::Paused, _) => ("the run stays paused", " (and press p to resume it)"),
            _ => ("the run goes on", ""),
        }
    }

    /// Whether the run trains and this screen hears it (not killed, not disconnected): its
    /// samples/s and ETA are current.
    pub fn heard_running(&self) -> bool {
        self.state == RunState::Running && self.silent.is_none() && self.disconnected.is_none()
    }

    /// The step the ranks will reach next.
    pub fn next_step(&self) -> u64 {
        self.last_row
            .as_ref()
            .map_or(self.info.start_step, |r| r.step)
            + 1
    }

    /// Whether a validation has been under way for a while (`VALIDATING_SAID`: a quick one,
    /// as a small set's every epoch, would only make the header flicker): begun after the
    /// newest step shown, its figures not yet come.
    pub fn validating_a_while(&self) -> bool {
        self.validating.is_some_and(|(step, since)| {
            step >= self.step() && self.now.saturating_sub(since) >= VALIDATING_SAID
        })
    }

    pub fn apply(&mut self, ev: AppEvent) {
        match ev {
            AppEvent::Row {
                row,
                samples_per_sec,
            } => self.on_row(row, samples_per_sec),
            AppEvent::Engine(e) => self.on_event(e),
            AppEvent::Telemetry {
                at,
                devices,
                process_memory,
            } => {
                self.now = self.now.max(at);
                let t = at.as_secs_f64();
                for (d, s) in self.devices.iter_mut().zip(devices) {
                    if let Some(u) = s.util {
                        d.util.push(t, u as f64 * 100.0);
                    }
                    if let Some(m) = s.mem_access {
                        d.mem_access.push(t, m as f64 * 100.0);
                    }
                    d.sample = s;
                    d.sampled = true;
                }
                self.process_memory = process_memory.or(self.process_memory.take());
            }
            AppEvent::Tick(now) => self.now = self.now.max(now),
            AppEvent::Signal => {
                // (after the end there is nothing to stop: the screen leaves, as on `q`)
                self.quitting = true;
                if !self.state.ended() {
                    self.state = RunState::Stopping;
                    self.quitting = true;
                    self.note(
                        Level::Warn,
                        "signal received: stopping with a checkpoint (a run past its last step finishes it) and exiting"
                            .into(),
                    );
                }
            }
            AppEvent::Notice(level, text) => self.note(level, text),
            AppEvent::Warned {
                kind,
                rank,
                step,
                spikes,
                message,
            } => self.on_warning(&kind, rank, (step, spikes), message),
            AppEvent::Theme(name) => self.flash = Some(format!("theme: {name}")),
            AppEvent::Flash(text) => self.flash = Some(text),
            AppEvent::Refused(control, why) => {
                // what the key set in motion is not on its way after all
                match control {
                    Control::SetBatch(b) => self.batch_refused(b),
                    Control::Pause | Control::Resume => self.pending_pause = None,
                    Control::Checkpoint => self.pending_checkpoint = false,
                    Control::Stop { .. } => {}
                }
                self.note(Level::Warn, format!("refused: {why}"));
                self.flash = Some(why);
            }
        }
    }

    /// The footer's answer is for a moment: it goes `FLASH_FOR` after it was first seen here
    /// (the events panel keeps it), not at the next key. Called with the wall clock as the
    /// screen loops (a run's clock stands still once it ended, a file's jumps); whether it went.
    pub fn age_flash(&mut self, now: std::time::Instant) -> bool {
        match (&self.flash, &self.flash_since) {
            (Some(f), Some((seen, at))) if f == seen => {
                if now.saturating_duration_since(*at) >= FLASH_FOR {
                    self.flash = None;
                    self.flash_since = None;
                    return true;
                }
            }
            (Some(f), _) => self.flash_since = Some((f.clone(), now)),
            (None, _) => self.flash_since = None,
        }
        false
    }

    /// Every worker has ended: make sure there is a summary even when the run failed before
    /// it could report its end.
    pub fn finish(&mut self, error: Option<String>) {
        if let Some(e) = error.filter(|_| self.state != RunState::Failed) {
            self.state = RunState::Failed;
            self.note(Level::Error, format!("error: {e}"));
            self.summary = None;
        }
        if self.summary.is_none() {
            let step = self.step();
            if self.state != RunState::Failed {
                self.state = RunState::Done;
            }
            self.summary = Some(self.summarize(step, Ending::Stopped));
        }
    }

    /// The newest validation accuracy and the best so far.
    pub fn val_accuracy(&self) -> (Option<f32>, Option<f32>) {
        let accuracies = self.validations.iter().map(|v| v.accuracy);
        (accuracies.clone().next_back(), accuracies.reduce(f32::max))
    }
}

#[cfg(test)]
mod batch_tests;
#[cfg(test)]
mod events_tests;
#[cfg(test)]
mod quit_tests;
#[cfg(test)]
mod tests;
