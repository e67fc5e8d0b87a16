//! The terminal UI's state. It changes only through `apply` (what the engine and the sampler
//! report) and `handle_key` (what the user presses), so it is tested without a terminal; the
//! render functions only read it.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Duration;

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::control::{Control, MAX_BATCH};
use crate::engine::RunInfo;
use crate::events::{Applied, Event, StepStats};
use crate::headless::event_line;
use crate::history::History;
use crate::monitor::{Monitor, StepRow};
use crate::straggler::{Beat, Detector, Warning};
use crate::telemetry::DeviceSample;

/// Points kept per chart series for the whole run.
const HISTORY_POINTS: usize = 2048;
/// Steps behind the per-device step-time bar and sparkline.
const RECENT_STEPS: usize = 64;
const LOG_LINES: usize = 500;
/// Smoothing of the train-loss line (exponential moving average weight of a new step).
const EMA_ALPHA: f64 = 0.05;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    Starting,
    Running,
    Paused,
    Stopping,
    Done,
    Failed,
}

impl RunState {
    pub fn label(self) -> &'static str {
        match self {
            RunState::Starting => "STARTING",
            RunState::Running => "RUNNING",
            RunState::Paused => "PAUSED",
            RunState::Stopping => "STOPPING",
            RunState::Done => "DONE",
            RunState::Failed => "FAILED",
        }
    }
    pub fn ended(self) -> bool {
        matches!(self, RunState::Done | RunState::Failed)
    }
}

/// What the engine or the sampler reports to the UI.
#[derive(Clone, Debug)]
pub enum AppEvent {
    Engine(Event),
    Step(StepStats),
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
    /// Where each rank is within its step (for the stall check), at a time since the start.
    Beats(Duration, Vec<Beat>),
    /// Something to tell the user that is not an engine event (e.g. metrics file failure).
    Notice(Level, String),
}

/// What a key asks the frontend loop to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Control(Control),
    Quit,
    NextTheme,
    Redraw,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    Overview,
    Training,
    Log,
}

impl View {
    const ALL: [View; 3] = [View::Overview, View::Training, View::Log];
    pub fn label(self) -> &'static str {
        match self {
            View::Overview => "overview",
            View::Training => "training",
            View::Log => "events",
        }
    }
    fn step(self, by: isize) -> View {
        let i = View::ALL.iter().position(|v| *v == self).unwrap_or(0) as isize;
        View::ALL[(i + by).rem_euclid(View::ALL.len() as isize) as usize]
    }
}

/// How much history the device charts show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    OneMinute,
    TenMinutes,
    Whole,
}

impl Window {
    pub fn label(self) -> &'static str {
        match self {
            Window::OneMinute => "1 min",
            Window::TenMinutes => "10 min",
            Window::Whole => "whole run",
        }
    }
    pub fn span(self) -> Option<Duration> {
        match self {
            Window::OneMinute => Some(Duration::from_secs(60)),
            Window::TenMinutes => Some(Duration::from_secs(600)),
            Window::Whole => None,
        }
    }
    fn next(self) -> Window {
        match self {
            Window::OneMinute => Window::TenMinutes,
            Window::TenMinutes => Window::Whole,
            Window::Whole => Window::OneMinute,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Popup {
    Quit,
    Help,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Info,
    Warn,
    Error,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LogEntry {
    pub at: Duration,
    pub level: Level,
    pub text: String,
    /// An end-of-epoch line: a newer one replaces it when nothing came between, so a fast
    /// run's epochs do not push the pauses, batch changes and checkpoints off the panel.
    pub epoch: bool,
}

/// Where one rank's step time went, averaged over recent steps, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Split {
    pub data: f64,
    /// Forward, backward and optimizer.
    pub compute: f64,
    pub comm: f64,
    /// Waiting in the all-reduce for slower ranks.
    pub wait: f64,
}

impl Split {
    fn of(s: &StepStats) -> Split {
        Split {
            data: s.data_wait.as_secs_f64(),
            compute: (s.compute + s.optimizer).as_secs_f64(),
            comm: s.comm.as_secs_f64(),
            wait: s.sync_wait.as_secs_f64(),
        }
    }
    pub fn total(&self) -> f64 {
        self.data + self.compute + self.comm + self.wait
    }
}

pub struct DeviceState {
    pub label: String,
    recent: VecDeque<(Split, f64)>,
    pub last: Option<StepStats>,
    pub sample: DeviceSample,
    pub util: History,
    pub mem_access: History,
    /// Why this device's row is highlighted: its worker failed.
    pub alert: Option<String>,
    /// The detector's current warnings about this device (straggler, degraded), by kind.
    pub warnings: Vec<Warning>,
}

impl DeviceState {
    fn new(label: String) -> DeviceState {
        DeviceState {
            label,
            recent: VecDeque::with_capacity(RECENT_STEPS),
            last: None,
            sample: DeviceSample::default(),
            util: History::new(HISTORY_POINTS),
            mem_access: History::new(HISTORY_POINTS),
            alert: None,
            warnings: Vec::new(),
        }
    }

    /// Mean split of the recent steps.
    pub fn split(&self) -> Option<Split> {
        let n = self.recent.len() as f64;
        (n > 0.0).then(|| {
            let mut s = Split::default();
            for (p, _) in &self.recent {
                s.data += p.data / n;
                s.compute += p.compute / n;
                s.comm += p.comm / n;
                s.wait += p.wait / n;
            }
            s
        })
    }

    /// Recent step times in milliseconds, oldest first.
    pub fn step_ms(&self) -> impl Iterator<Item = f64> + '_ {
        self.recent.iter().map(|(_, ms)| *ms)
    }
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

/// Shown when the run has ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub steps: u64,
    pub stopped: bool,
    pub failed: Option<String>,
    pub best_val_accuracy: Option<f32>,
    pub wall: Duration,
    /// Samples per second of training time (pauses excluded).
    pub mean_samples_per_sec: Option<f64>,
    /// Share of step time spent computing, over all ranks and steps.
    pub compute_share: Option<f64>,
    /// Shares of step time waiting for data, in the all-reduce, and waiting for other ranks.
    pub data_share: Option<f64>,
    pub comm_share: Option<f64>,
    pub wait_share: Option<f64>,
    pub last_checkpoint: Option<PathBuf>,
}

pub struct App {
    pub info: RunInfo,
    pub readonly: bool,
    pub state: RunState,
    monitor: Monitor,
    detector: Detector,
    /// Warnings raised since the frontend last took them (for the metrics file).
    pub new_warnings: Vec<(Warning, Duration)>,
    pub devices: Vec<DeviceState>,
    pub last_row: Option<StepRow>,
    pub samples_per_sec: Option<f64>,
    pub eta: Option<Duration>,
    pub per_replica: usize,
    /// Samples per rank when `--rebalance` has cut the global batch unevenly.
    pub split: Option<Vec<usize>>,
    /// A batch change asked for and not yet applied by the ranks: (from, to, expected step).
    pub pending_batch: Option<(usize, usize, u64)>,
    /// A pause (true) or resume (false) asked for and not yet applied.
    pub pending_pause: Option<bool>,
    pub loss: History,
    pub loss_smooth: History,
    ema: Option<f64>,
    pub epochs: Vec<EpochPoint>,
    pub log: VecDeque<LogEntry>,
    pub view: View,
    pub window: Window,
    pub focus: Option<usize>,
    pub popup: Option<Popup>,
    /// A one-line answer to the last key (e.g. why it did nothing).
    pub flash: Option<String>,
    pub now: Duration,
    pub process_memory: Option<(u64, u64)>,
    pub last_checkpoint: Option<PathBuf>,
    pub summary: Option<Summary>,
    /// The user asked to stop: leave when the run has ended.
    pub quitting: bool,
    /// The end-of-run summary was dismissed (Esc) to look at the panels under it.
    pub summary_hidden: bool,
    /// Training time (sum of step times) and compute time (sum over ranks) of seen rows.
    train_time: f64,
    compute_time: f64,
    data_time: f64,
    comm_time: f64,
    wait_time: f64,
    rank_time: f64,
    rows_samples: u64,
}

impl App {
    pub fn new(info: RunInfo, readonly: bool) -> App {
        let devices = info
            .devices
            .iter()
            .map(|d| DeviceState::new(d.label()))
            .collect();
        App {
            monitor: Monitor::new(info.ranks()),
            detector: info.detector(),
            new_warnings: Vec::new(),
            per_replica: info.per_replica,
            split: None,
            info,
            readonly,
            state: RunState::Starting,
            devices,
            last_row: None,
            samples_per_sec: None,
            eta: None,
            pending_batch: None,
            pending_pause: None,
            loss: History::new(HISTORY_POINTS),
            loss_smooth: History::new(HISTORY_POINTS),
            ema: None,
            epochs: Vec::new(),
            log: VecDeque::new(),
            view: View::Overview,
            window: Window::OneMinute,
            focus: None,
            popup: None,
            flash: None,
            now: Duration::ZERO,
            process_memory: None,
            last_checkpoint: None,
            summary: None,
            quitting: false,
            summary_hidden: false,
            train_time: 0.0,
            compute_time: 0.0,
            data_time: 0.0,
            comm_time: 0.0,
            wait_time: 0.0,
            rank_time: 0.0,
            rows_samples: 0,
        }
    }

    fn note(&mut self, level: Level, text: String) {
        self.push_log(level, text, false);
    }

    fn push_log(&mut self, level: Level, text: String, epoch: bool) {
        if epoch && self.log.front().is_some_and(|l| l.epoch) {
            self.log.pop_front();
        }
        self.log.push_front(LogEntry {
            at: self.now,
            level,
            text,
            epoch,
        });
        self.log.truncate(LOG_LINES);
    }

    /// The step the ranks will reach next.
    pub fn next_step(&self) -> u64 {
        self.last_row
            .as_ref()
            .map_or(self.info.start_step, |r| r.step)
            + 1
    }

    pub fn apply(&mut self, ev: AppEvent) {
        match ev {
            AppEvent::Step(s) => self.on_step(s),
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
                }
                self.process_memory = process_memory.or(self.process_memory.take());
            }
            AppEvent::Tick(now) => self.now = self.now.max(now),
            AppEvent::Signal => {
                if !self.state.ended() {
                    self.state = RunState::Stopping;
                    self.quitting = true;
                    self.note(
                        Level::Warn,
                        "signal received: finishing the step, writing a checkpoint and exiting"
                            .into(),
                    );
                }
            }
            AppEvent::Notice(level, text) => self.note(level, text),
            AppEvent::Beats(at, beats) => {
                self.now = self.now.max(at);
                if let Some(w) = self.detector.tick(at, &beats) {
                    self.on_warning(w, at);
                }
            }
        }
    }

    fn on_step(&mut self, s: StepStats) {
        if let Some(d) = self.devices.get_mut(s.rank) {
            if d.recent.len() == RECENT_STEPS {
                d.recent.pop_front();
            }
            d.recent
                .push_back((Split::of(&s), s.step_time.as_secs_f64() * 1e3));
            d.last = Some(s.clone());
        }
        let Some(row) = self.monitor.on_step(s) else {
            return;
        };
        self.now = self.now.max(row.at);
        let step_time = row
            .ranks
            .iter()
            .map(|r| r.step_time.as_secs_f64())
            .fold(0.0, f64::max);
        self.train_time += step_time;
        self.rows_samples += row.global_samples as u64;
        for r in &row.ranks {
            self.compute_time += (r.compute + r.optimizer).as_secs_f64();
            self.data_time += r.data_wait.as_secs_f64();
            self.comm_time += r.comm.as_secs_f64();
            self.wait_time += r.sync_wait.as_secs_f64();
            self.rank_time += r.step_time.as_secs_f64();
        }
        let x = row.step as f64;
        let loss = row.loss as f64;
        self.loss.push(x, loss);
        let ema = self.ema.map_or(loss, |e| e + EMA_ALPHA * (loss - e));
        self.ema = Some(ema);
        self.loss_smooth.push(x, ema);
        self.samples_per_sec = self.monitor.samples_per_sec();
        self.eta = self.monitor.eta();
        if self.state == RunState::Starting {
            self.state = RunState::Running;
        }
        for w in self.detector.on_row(&row) {
            self.on_warning(w, row.at);
        }
        self.last_row = Some(row);
    }

    fn on_warning(&mut self, w: Warning, at: Duration) {
        if let Some(d) = w.rank().and_then(|r| self.devices.get_mut(r)) {
            let same = |o: &Warning| {
                matches!(
                    (&w, o),
                    (Warning::StragglerCleared { .. }, Warning::Straggler { .. })
                        | (Warning::DegradedCleared { .. }, Warning::Degraded { .. })
                )
            };
            d.warnings.retain(|o| !same(o));
            if !w.is_clear() {
                d.warnings.push(w.clone());
            }
        }
        let level = if w.is_clear() {
            Level::Info
        } else {
            Level::Warn
        };
        self.note(level, w.to_string());
        self.new_warnings.push((w, at));
    }

    fn on_event(&mut self, e: Event) {
        match &e {
            Event::Started { per_replica, .. } => {
                self.per_replica = *per_replica;
                if self.state == RunState::Starting {
                    self.state = RunState::Running;
                }
            }
            Event::Control { applied, .. } => match applied {
                Applied::Paused => {
                    self.detector.set_paused(true, self.now);
                    self.pending_pause = None;
                    if !matches!(self.state, RunState::Stopping) {
                        self.state = RunState::Paused;
                    }
                }
                Applied::Resumed => {
                    self.detector.set_paused(false, self.now);
                    self.pending_pause = None;
                    if self.state == RunState::Paused {
                        self.state = RunState::Running;
                    }
                }
                Applied::BatchSize { to, .. } => {
                    self.per_replica = *to;
                    self.split = None;
                    if self.pending_batch.is_some_and(|p| p.1 == *to) {
                        self.pending_batch = None;
                    }
                }
                Applied::Split(sizes) => self.split = Some(sizes.clone()),
            },
            Event::EpochDone {
                epoch,
                step,
                train_loss,
                val_loss,
                val_accuracy,
                ..
            } => self.epochs.push(EpochPoint {
                epoch: *epoch,
                step: *step,
                train_loss: *train_loss,
                val_loss: *val_loss,
                val_accuracy: *val_accuracy,
            }),
            Event::Checkpoint { path, .. } => self.last_checkpoint = Some(path.clone()),
            Event::Failed { rank, message, .. } => {
                self.state = RunState::Failed;
                if let Some(d) = self.devices.get_mut(*rank) {
                    d.alert = Some(message.clone());
                }
            }
            Event::Finished { step, stopped } => {
                if self.state != RunState::Failed {
                    self.state = RunState::Done;
                }
                self.pending_batch = None;
                self.pending_pause = None;
                self.summary = Some(self.summarize(*step, *stopped));
            }
        }
        if let Some(line) = event_line(&e, self.info.budget) {
            let level = match e {
                Event::Failed { .. } => Level::Error,
                _ => Level::Info,
            };
            self.push_log(level, line, matches!(e, Event::EpochDone { .. }));
        }
    }

    fn summarize(&self, steps: u64, stopped: bool) -> Summary {
        let share = |t: f64| (self.rank_time > 0.0).then(|| t / self.rank_time);
        let failed = self.log.iter().find(|l| l.level == Level::Error);
        Summary {
            steps,
            stopped,
            failed: (self.state == RunState::Failed)
                .then(|| failed.map(|l| l.text.clone()).unwrap_or_default()),
            best_val_accuracy: self
                .epochs
                .iter()
                .filter_map(|e| e.val_accuracy)
                .reduce(f32::max),
            wall: self.now,
            mean_samples_per_sec: (self.train_time > 0.0)
                .then(|| self.rows_samples as f64 / self.train_time),
            compute_share: share(self.compute_time),
            data_share: share(self.data_time),
            comm_share: share(self.comm_time),
            wait_share: share(self.wait_time),
            last_checkpoint: self.last_checkpoint.clone(),
        }
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
            let step = self
                .last_row
                .as_ref()
                .map_or(self.info.start_step, |r| r.step);
            if self.state != RunState::Failed {
                self.state = RunState::Done;
            }
            self.summary = Some(self.summarize(step, true));
        }
    }

    /// The newest validation accuracy and the best so far.
    pub fn val_accuracy(&self) -> (Option<f32>, Option<f32>) {
        let last = self.epochs.iter().rev().find_map(|e| e.val_accuracy);
        let best = self
            .epochs
            .iter()
            .filter_map(|e| e.val_accuracy)
            .reduce(f32::max);
        (last, best)
    }

    /// Answers one key; returns what the frontend loop must do.
    pub fn handle_key(&mut self, key: KeyEvent) -> Option<Action> {
        if key.kind != KeyEventKind::Press {
            return None;
        }
        self.flash = None;
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let ctrl_c = ctrl && key.code == KeyCode::Char('c');
        if ctrl && matches!(key.code, KeyCode::Char('l')) {
            return Some(Action::Redraw);
        }
        match self.popup {
            Some(Popup::Help) => {
                self.popup = None;
                return None;
            }
            Some(Popup::Quit) => return self.quit_popup_key(key.code, ctrl_c),
            None => {}
        }
        if self.state.ended() && (ctrl_c || matches!(key.code, KeyCode::Char('q'))) {
            return Some(Action::Quit);
        }
        if ctrl_c {
            return self.ask_quit();
        }
        match key.code {
            KeyCode::Char('q') => self.ask_quit(),
            KeyCode::Char('p') | KeyCode::Char(' ') => self.toggle_pause(),
            KeyCode::Char(']') | KeyCode::Char('+') => self.change_batch(true),
            KeyCode::Char('[') | KeyCode::Char('-') => self.change_batch(false),
            KeyCode::Char('s') => self.checked(|app| {
                app.note(
                    Level::Info,
                    format!("checkpoint requested at step {}", app.next_step()),
                );
                Some(Action::Control(Control::Checkpoint))
            }),
            KeyCode::Char(c @ '1'..='9') => {
                let i = c as usize - '1' as usize;
                if i < self.devices.len() {
                    self.focus = Some(i);
                } else {
                    self.flash = Some(format!(
                        "no device {c}: this run has {}",
                        self.devices.len()
                    ));
                }
                None
            }
            KeyCode::Char('0') | KeyCode::Esc => {
                if self.focus.is_none() && self.summary.is_some() {
                    self.summary_hidden = !self.summary_hidden;
                }
                self.focus = None;
                None
            }
            KeyCode::Tab => {
                self.view = self.view.step(1);
                None
            }
            KeyCode::BackTab => {
                self.view = self.view.step(-1);
                None
            }
            KeyCode::Char('w') => {
                self.window = self.window.next();
                None
            }
            KeyCode::Char('t') => Some(Action::NextTheme),
            KeyCode::Char('r') => Some(Action::Redraw),
            KeyCode::Char('?') | KeyCode::Char('h') => {
                self.popup = Some(Popup::Help);
                None
            }
            _ => None,
        }
    }

    /// Runs `f` unless the UI is read-only or the run is over.
    fn checked(&mut self, f: impl FnOnce(&mut App) -> Option<Action>) -> Option<Action> {
        if self.readonly {
            self.flash = Some("read-only: keys that change the run are disabled".into());
            return None;
        }
        if self.state.ended() || self.state == RunState::Stopping {
            self.flash = Some(format!("the run is {}", self.state.label().to_lowercase()));
            return None;
        }
        f(self)
    }

    fn ask_quit(&mut self) -> Option<Action> {
        if self.readonly {
            self.flash = Some(
                "read-only: quitting would stop the run; it ends by itself, or with SIGTERM".into(),
            );
            return None;
        }
        if self.state == RunState::Stopping {
            self.flash = Some("already stopping: finishing the step".into());
            return None;
        }
        self.popup = Some(Popup::Quit);
        None
    }

    fn quit_popup_key(&mut self, code: KeyCode, ctrl_c: bool) -> Option<Action> {
        let stop = |app: &mut App, checkpoint: bool| {
            app.popup = None;
            app.quitting = true;
            app.state = RunState::Stopping;
            app.note(
                Level::Warn,
                if checkpoint {
                    "stopping: finishing the step and writing a checkpoint".into()
                } else {
                    "stopping now, without a checkpoint".into()
                },
            );
            Some(Action::Control(Control::Stop { checkpoint }))
        };
        match code {
            _ if ctrl_c => stop(self, true),
            KeyCode::Char('s') | KeyCode::Char('y') | KeyCode::Enter => stop(self, true),
            KeyCode::Char('k') => stop(self, false),
            KeyCode::Char('c') | KeyCode::Char('n') | KeyCode::Char('q') | KeyCode::Esc => {
                self.popup = None;
                None
            }
            _ => None,
        }
    }

    fn toggle_pause(&mut self) -> Option<Action> {
        self.checked(|app| {
            let paused = app.pending_pause.unwrap_or(app.state == RunState::Paused);
            app.pending_pause = Some(!paused);
            Some(Action::Control(if paused {
                Control::Resume
            } else {
                Control::Pause
            }))
        })
    }

    fn change_batch(&mut self, up: bool) -> Option<Action> {
        self.checked(|app| {
            let from = app.pending_batch.map_or(app.per_replica, |p| p.1);
            let to = if up {
                (from * 2).min(MAX_BATCH)
            } else {
                (from / 2).max(1)
            };
            if to == from {
                app.flash = Some(format!("batch per replica is already {from}"));
                return None;
            }
            app.pending_batch =
                (to != app.per_replica).then(|| (app.per_replica, to, app.next_step()));
            Some(Action::Control(Control::SetBatch(to)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tui::demo;
    use ratatui::crossterm::event::KeyEventState;

    fn key(c: char) -> KeyEvent {
        KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
    }
    fn ctrl_c() -> KeyEvent {
        KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)
    }
    fn running(readonly: bool) -> App {
        let mut app = App::new(demo::info(2), readonly);
        app.apply(AppEvent::Engine(Event::Started {
            ranks: 2,
            per_replica: 32,
            params: 1,
            start_step: 0,
            start_epoch: 0,
        }));
        for s in 1..=5 {
            app.apply(AppEvent::Step(demo::step(0, 2, s)));
            app.apply(AppEvent::Step(demo::step(1, 2, s)));
        }
        app
    }
    fn control(app: &mut App, step: u64, applied: Applied) {
        app.apply(AppEvent::Engine(Event::Control { step, applied }));
    }

    #[test]
    fn steps_make_rows_and_curves_once_every_rank_reported() {
        let mut app = running(false);
        assert_eq!(app.state, RunState::Running);
        assert_eq!(app.last_row.as_ref().unwrap().step, 5);
        assert_eq!(app.loss.all().len(), 5);
        app.apply(AppEvent::Step(demo::step(0, 2, 6)));
        assert_eq!(
            app.last_row.as_ref().unwrap().step,
            5,
            "rank 1 has not reported"
        );
        assert_eq!(app.devices[0].last.as_ref().unwrap().step, 6);
        let split = app.devices[0].split().unwrap();
        assert!(split.compute > split.data && split.total() > 0.0);
        assert!(app.samples_per_sec.unwrap() > 0.0);
    }

    #[test]
    fn pause_key_sends_pause_then_resume_and_follows_what_the_ranks_applied() {
        let mut app = running(false);
        assert_eq!(
            app.handle_key(key('p')),
            Some(Action::Control(Control::Pause))
        );
        assert_eq!(app.pending_pause, Some(true));
        assert_eq!(
            app.state,
            RunState::Running,
            "not paused until the ranks apply it"
        );
        control(&mut app, 5, Applied::Paused);
        assert_eq!((app.state, app.pending_pause), (RunState::Paused, None));
        assert_eq!(
            app.handle_key(key(' ')),
            Some(Action::Control(Control::Resume))
        );
        control(&mut app, 5, Applied::Resumed);
        assert_eq!(app.state, RunState::Running);
        // a second press before the first is applied takes it back
        app.handle_key(key('p'));
        assert_eq!(
            app.handle_key(key('p')),
            Some(Action::Control(Control::Resume))
        );
        assert_eq!(app.pending_pause, Some(false));
    }

    #[test]
    fn batch_keys_double_and_halve_and_stay_pending_until_applied() {
        let mut app = running(false);
        assert_eq!(
            app.handle_key(key(']')),
            Some(Action::Control(Control::SetBatch(64)))
        );
        assert_eq!(app.pending_batch, Some((32, 64, 6)));
        assert_eq!(
            app.handle_key(key('+')),
            Some(Action::Control(Control::SetBatch(128)))
        );
        assert_eq!(app.pending_batch, Some((32, 128, 6)));
        control(
            &mut app,
            5,
            Applied::BatchSize {
                from: 32,
                to: 64,
                lr: 2e-3,
            },
        );
        assert_eq!(app.per_replica, 64);
        assert!(app.pending_batch.is_some(), "128 is still on its way");
        control(
            &mut app,
            6,
            Applied::BatchSize {
                from: 64,
                to: 128,
                lr: 4e-3,
            },
        );
        assert_eq!((app.per_replica, app.pending_batch), (128, None));
        assert_eq!(
            app.handle_key(key('[')),
            Some(Action::Control(Control::SetBatch(64)))
        );
        assert_eq!(
            app.handle_key(key('-')),
            Some(Action::Control(Control::SetBatch(32)))
        );
        let mut small = running(false);
        small.per_replica = 1;
        assert_eq!(small.handle_key(key('[')), None);
        assert!(small.flash.as_ref().unwrap().contains("already 1"));
    }

    #[test]
    fn quit_asks_first_and_each_answer_does_what_it_says() {
        let mut app = running(false);
        assert_eq!(app.handle_key(key('q')), None);
        assert_eq!(app.popup, Some(Popup::Quit));
        assert_eq!(
            app.handle_key(key('p')),
            None,
            "other keys do nothing under the popup"
        );
        assert_eq!(app.handle_key(key('c')), None);
        assert_eq!(app.popup, None);
        app.handle_key(key('q'));
        assert_eq!(
            app.handle_key(key('k')),
            Some(Action::Control(Control::Stop { checkpoint: false }))
        );
        assert!(app.quitting);
        assert_eq!(app.state, RunState::Stopping);

        let mut app = running(false);
        app.handle_key(key('q'));
        assert_eq!(
            app.handle_key(key('s')),
            Some(Action::Control(Control::Stop { checkpoint: true }))
        );

        // Ctrl-C opens the same popup; a second Ctrl-C stops with a checkpoint
        let mut app = running(false);
        assert_eq!(app.handle_key(ctrl_c()), None);
        assert_eq!(app.popup, Some(Popup::Quit));
        assert_eq!(
            app.handle_key(ctrl_c()),
            Some(Action::Control(Control::Stop { checkpoint: true }))
        );
        assert_eq!(app.handle_key(key('p')), None, "nothing more once stopping");
    }

    #[test]
    fn readonly_disables_every_key_that_changes_the_run() {
        let mut app = running(true);
        for c in ['p', ' ', ']', '[', '+', '-', 's', 'q'] {
            assert_eq!(app.handle_key(key(c)), None, "{c}");
            assert!(app.flash.as_ref().unwrap().contains("read-only"), "{c}");
        }
        assert_eq!(app.handle_key(ctrl_c()), None);
        assert_eq!(
            (app.popup, app.pending_batch, app.pending_pause),
            (None, None, None)
        );
        // looking around still works
        app.handle_key(key('2'));
        assert_eq!(app.focus, Some(1));
        assert_eq!(app.handle_key(key('t')), Some(Action::NextTheme));
    }

    #[test]
    fn navigation_keys_change_only_the_view() {
        let mut app = running(false);
        app.handle_key(key('2'));
        assert_eq!(app.focus, Some(1));
        app.handle_key(key('9'));
        assert_eq!(app.focus, Some(1), "no device 9");
        assert!(app.flash.as_ref().unwrap().contains("no device 9"));
        app.handle_key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE));
        assert_eq!(app.focus, None);
        app.handle_key(KeyEvent::new(KeyCode::Tab, KeyModifiers::NONE));
        assert_eq!(app.view, View::Training);
        app.handle_key(KeyEvent::new(KeyCode::BackTab, KeyModifiers::SHIFT));
        app.handle_key(KeyEvent::new(KeyCode::BackTab, KeyModifiers::SHIFT));
        assert_eq!(app.view, View::Log);
        app.handle_key(key('w'));
        assert_eq!(app.window, Window::TenMinutes);
        assert_eq!(app.handle_key(key('r')), Some(Action::Redraw));
        let ctrl_l = KeyEvent::new(KeyCode::Char('l'), KeyModifiers::CONTROL);
        assert_eq!(app.handle_key(ctrl_l), Some(Action::Redraw));
        app.handle_key(key('?'));
        assert_eq!(app.popup, Some(Popup::Help));
        assert_eq!(
            app.handle_key(key('q')),
            None,
            "a key closes help, nothing else"
        );
        assert_eq!(app.popup, None);
        // key releases (kitty protocol) are not presses
        let mut release = key('p');
        release.kind = KeyEventKind::Release;
        release.state = KeyEventState::NONE;
        assert_eq!(app.handle_key(release), None);
        assert_eq!(app.pending_pause, None);
    }

    #[test]
    fn the_end_of_the_run_gives_a_summary_and_q_quits_at_once() {
        let mut app = running(false);
        app.apply(AppEvent::Engine(Event::EpochDone {
            epoch: 1,
            step: 5,
            train_loss: 0.5,
            val_loss: Some(0.4),
            val_accuracy: Some(0.91),
            elapsed: Duration::from_millis(20),
        }));
        app.apply(AppEvent::Engine(Event::Finished {
            step: 5,
            stopped: false,
        }));
        assert_eq!(app.state, RunState::Done);
        let s = app.summary.clone().unwrap();
        assert_eq!(
            (s.steps, s.stopped, s.best_val_accuracy),
            (5, false, Some(0.91))
        );
        assert!(s.mean_samples_per_sec.unwrap() > 0.0);
        let share = s.compute_share.unwrap();
        assert!(share > 0.5 && share < 1.0, "{share}");
        assert_eq!(app.handle_key(key('p')), None);
        app.handle_key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE));
        assert!(
            app.summary_hidden,
            "Esc uncovers the panels under the summary"
        );
        assert_eq!(app.handle_key(key('q')), Some(Action::Quit));
    }

    #[test]
    fn a_failure_marks_the_device_and_the_state() {
        let mut app = running(false);
        app.apply(AppEvent::Engine(Event::Failed {
            rank: 1,
            step: 6,
            message: "boom".into(),
        }));
        assert_eq!(app.state, RunState::Failed);
        assert_eq!(app.devices[1].alert.as_deref(), Some("boom"));
        assert!(app.devices[0].alert.is_none());
        app.finish(Some("worker for rank 1 panicked".into()));
        assert_eq!(
            app.log.iter().filter(|l| l.level == Level::Error).count(),
            1
        );
        assert!(app.summary.unwrap().failed.unwrap().contains("boom"));
    }

    #[test]
    fn a_straggler_marks_its_device_logs_once_and_is_handed_to_the_metrics() {
        let app = demo::app_with_straggler(3, 10, 100, 1);
        assert_eq!(app.devices[1].warnings.len(), 1);
        assert!(app.devices[0].warnings.is_empty() && app.devices[2].warnings.is_empty());
        let warn: Vec<&LogEntry> = app.log.iter().filter(|l| l.level == Level::Warn).collect();
        assert_eq!(warn.len(), 1, "one warning at onset, not one per step");
        assert!(
            warn[0]
                .text
                .contains("straggler: rank 1 is 1.98x slower than rank 0"),
            "{}",
            warn[0].text
        );
        assert_eq!(app.new_warnings.len(), 1);
        assert_eq!(app.new_warnings[0].0.rank(), Some(1));
    }

    #[test]
    fn a_signal_means_stopping_and_leaving() {
        let mut app = running(false);
        app.apply(AppEvent::Signal);
        assert_eq!(app.state, RunState::Stopping);
        assert!(app.quitting);
        assert_eq!(app.log[0].level, Level::Warn);
    }

    #[test]
    fn epoch_lines_do_not_push_other_events_off_the_panel() {
        let mut app = running(false);
        control(
            &mut app,
            5,
            Applied::BatchSize {
                from: 32,
                to: 64,
                lr: 2e-3,
            },
        );
        for epoch in 1..=50 {
            app.apply(AppEvent::Engine(Event::EpochDone {
                epoch,
                step: epoch * 10,
                train_loss: 0.5,
                val_loss: None,
                val_accuracy: None,
                elapsed: Duration::ZERO,
            }));
        }
        assert_eq!(app.log.len(), 2);
        assert!(app.log[0].text.contains("epoch 50"));
        assert!(app.log[1].text.contains("batch per replica 32 -> 64"));
        assert_eq!(app.epochs.len(), 50, "every epoch is kept for the charts");
    }
}
