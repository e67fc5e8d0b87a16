//! Where the UI's run comes from. The loop in `mod.rs` owns the terminal, the keys and the
//! drawing; a `Source` feeds the `App`: the engine in this process (here), a run recorded in
//! a metrics file (`replay.rs`) or a run in another process (`attach.rs`: its live socket).

use std::time::Instant;

use crossbeam_channel::Receiver;

use super::app::{App, AppEvent, Level};
use super::TuiOptions;
use crate::engine::control::{Control, Controller};
use crate::engine::{Engine, EngineError, RunResult};
use crate::front::watch::{Seen, Watch};
use crate::front::watcher::Watcher;
use crate::observe::metrics::Record;
use crate::observe::telemetry::Telemetry;
use crate::observe::Recorder;

/// What the UI loop watches besides the terminal. Each `on_*` returns whether to redraw.
pub trait Source {
    type Event;
    /// Messages handled as soon as they come (the engine's lifecycle events).
    fn events(&self) -> Receiver<Self::Event>;
    /// One message, or `None` once the channel has closed.
    fn on_event(&mut self, app: &mut App, ev: Option<Self::Event>) -> bool;
    /// A periodic timer (the engine's telemetry sampler, a file's poll), or a wake-up from the
    /// source's own threads (attach's reconnection).
    fn timer(&self) -> Receiver<Instant>;
    fn on_timer(&mut self, app: &mut App) -> bool;
    /// Every frame (at most 10 a second).
    fn on_frame(&mut self, app: &mut App) -> bool;
    /// A control a key asked for; `Err` says why the run cannot take it.
    fn control(&mut self, c: Control) -> Result<(), String>;
    /// `r` while the source is lost (a dropped connection): try again. Returns whether to
    /// redraw.
    fn reconnect(&mut self, _app: &mut App) -> bool {
        false
    }
    /// The screen is back from a suspend (Ctrl-Z, `fg`): the process was stopped a while.
    fn resumed(&mut self, _app: &mut App) {}
    /// SIGTERM / SIGHUP; returns whether the UI leaves at once.
    fn on_signal(&mut self, app: &mut App) -> bool;
    /// After every wake-up of the loop.
    fn settle(&mut self, app: &mut App) -> bool;
    /// Nothing more will come: the UI may leave.
    fn ended(&self) -> bool;
    /// Whether to go on when there is no terminal left to draw on (a run in this process
    /// trains to its end; a viewer has nothing left to do).
    fn outlives_screen(&self) -> bool;
}

/// What the watch of a run in this process saw, onto the screen: its records as `view` and
/// `attach` show a file's and a socket's.
pub(super) fn show(app: &mut App, seen: Vec<Seen>) {
    for s in seen {
        match s {
            Seen::Record(r) => app.apply_record(r),
            Seen::Unlogged { t, event } => app.apply_record(Record::Event { t, event }),
            // (had as it came)
            Seen::Late { .. } => {}
            Seen::Note(n) => app.apply(AppEvent::Notice(Level::Warn, n)),
            // (the screen keeps its own ETA, from the rows)
            Seen::Step {
                row, samples_per_s, ..
            } => app.apply_record(Record::Step { row, samples_per_s }),
        }
    }
}

/// The engine in this process; its watch (on its own thread) records the run (metrics files,
/// the live socket) whether or not the screen keeps up.
pub struct EngineSource {
    engine: Option<Engine>,
    controller: Controller,
    /// Until the watch has recorded the run's end (then the engine is joined).
    watcher: Option<Watcher>,
    result: Option<Result<RunResult, EngineError>>,
}

impl EngineSource {
    /// Starts watching `engine`; records the `run` record.
    pub fn new(
        engine: Engine,
        opts: &TuiOptions,
        metrics: Recorder,
        app: &mut App,
    ) -> EngineSource {
        let info = engine.info();
        let telemetry = Telemetry::new(info, opts.sample_interval)
            .with_peers(engine.peer_samples(), opts.sample_interval);
        let mut watch = Watch::new(info, engine.steps().clone(), metrics, telemetry);
        show(app, watch.take());
        EngineSource {
            controller: engine.controller(),
            watcher: Some(Watcher::start(&engine, watch, opts.sample_interval)),
            result: None,
            engine: Some(engine),
        }
    }

    /// Whether the run's end was heard (what is left is the workers' teardown).
    fn ending(&self) -> bool {
        self.watcher.as_ref().is_none_or(Watcher::ending)
    }

    /// The run's result once the UI has closed (`app` takes what is seen of its end): joined
    /// already, or stopped, joined and recorded to its end now; `abandoned`: the workers are
    /// left to the process's exit, unless the run's end was heard (what is left is their
    /// teardown, waited for).
    pub fn finish(mut self, app: &mut App, abandoned: bool) -> Result<RunResult, EngineError> {
        let e = match (self.result.take(), self.engine.take()) {
            (Some(r), _) => return r,
            (None, Some(e)) => e,
            (None, None) => unreachable!("the engine is joined exactly once"),
        };
        if abandoned && !self.ending() {
            // as a second signal: the records end (`quit`), the socket and any half written
            // checkpoint go
            crate::quit_at_once::run();
            let info = e.info();
            let resume = crate::engine::rundir::continuing(
                info.run_dir.as_deref(),
                e.checkpoint_dir(),
                info.resumed_from.as_deref(),
            );
            return Err(EngineError::Config(format!(
                "left without waiting for the workers (Ctrl-C while stopping); this stop wrote no checkpoint; {resume}"
            )));
        }
        if !self.ending() {
            let _ = e.controller().stop(true);
        }
        let r = e.join();
        // what the stop said (its checkpoint, the end) after the samples before it
        if let Some(w) = self.watcher.take() {
            show(app, w.rest());
        }
        app.finish(r.as_ref().err().map(ToString::to_string));
        r
    }
}

impl Source for EngineSource {
    type Event = Vec<Seen>;

    fn events(&self) -> Receiver<Vec<Seen>> {
        self.watcher
            .as_ref()
            .map_or_else(crossbeam_channel::never, |w| w.seen().clone())
    }

    fn on_event(&mut self, app: &mut App, seen: Option<Vec<Seen>>) -> bool {
        match seen {
            Some(seen) => show(app, seen),
            // the run's end is recorded: `settle` joins the engine
            None => {
                if let Some(w) = self.watcher.take() {
                    show(app, w.rest());
                }
            }
        }
        true
    }

    fn timer(&self) -> Receiver<Instant> {
        // (the watch samples the devices on its own thread)
        crossbeam_channel::never()
    }

    fn on_timer(&mut self, _app: &mut App) -> bool {
        false
    }

    fn on_frame(&mut self, app: &mut App) -> bool {
        // (once the end was heard, the clock stops at it: the summary's wall time is the run's)
        if let Some(e) = self.engine.as_ref().filter(|_| !self.ending()) {
            app.apply(AppEvent::Tick(e.elapsed()));
            return true;
        }
        false
    }

    fn control(&mut self, c: Control) -> Result<(), String> {
        self.controller.send(c).map_err(|e| e.to_string())
    }

    fn on_signal(&mut self, app: &mut App) -> bool {
        app.apply(AppEvent::Signal);
        false
    }

    fn settle(&mut self, app: &mut App) -> bool {
        if self.watcher.is_some() {
            return false;
        }
        let Some(engine) = self.engine.take() else {
            return false;
        };
        let r = engine.join();
        app.finish(r.as_ref().err().map(ToString::to_string));
        self.result = Some(r);
        true
    }

    fn ended(&self) -> bool {
        self.engine.is_none()
    }

    fn outlives_screen(&self) -> bool {
        true
    }
}
