//! Where the UI's run comes from. The loop in `mod.rs` owns the terminal, the keys and the
//! drawing; a `Source` feeds the `App`: the engine in this process (here), a run recorded in
//! a metrics file (`replay.rs`) or a run in another process (`attach.rs`: its live socket).

use std::time::Instant;

use crossbeam_channel::Receiver;

use super::app::{App, AppEvent, Level};
use super::TuiOptions;
use crate::engine::control::{Control, Controller};
use crate::engine::events::Event;
use crate::engine::{Engine, EngineError, RunResult};
use crate::front::steps::Steps;
use crate::observe::telemetry::{process_memory, Telemetry};
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

fn warn(app: &mut App, warnings: Vec<String>) {
    for w in warnings {
        app.apply(AppEvent::Notice(Level::Warn, w));
    }
}

/// The engine in this process; also records the run (metrics files, the live socket).
pub struct EngineSource {
    engine: Option<Engine>,
    controller: Controller,
    events: Receiver<Event>,
    steps: Steps,
    events_open: bool,
    telemetry: Telemetry,
    metrics: Recorder,
    sample_interval: std::time::Duration,
    /// The `end` record, written after the final step samples.
    end_record: Option<(Event, std::time::Duration)>,
    result: Option<Result<RunResult, EngineError>>,
}

impl EngineSource {
    /// Starts watching `engine`; records the `run` record.
    pub fn new(
        engine: Engine,
        opts: &TuiOptions,
        mut metrics: Recorder,
        app: &mut App,
    ) -> EngineSource {
        warn(app, metrics.run_start(engine.info()));
        EngineSource {
            controller: engine.controller(),
            events: engine.events().clone(),
            steps: Steps::new(engine.steps().clone()),
            events_open: true,
            telemetry: Telemetry::new(&engine.info().devices, opts.sample_interval),
            metrics,
            sample_interval: opts.sample_interval,
            end_record: None,
            result: None,
            engine: Some(engine),
        }
    }

    /// The run's result once the UI has closed: joined already, or stopped and joined now
    /// (`abandoned`: the workers are left to the process's exit).
    pub fn finish(self, abandoned: bool) -> Result<RunResult, EngineError> {
        match (self.result, self.engine) {
            (Some(r), _) => r,
            (None, Some(e)) if abandoned => {
                // as a second signal: the records end (`quit`), the socket and any half
                // written checkpoint go
                crate::quit_at_once::run();
                let info = e.info();
                let resume = crate::engine::rundir::continuing(
                    info.run_dir.as_deref(),
                    e.checkpoint_dir(),
                    info.resumed_from.as_deref(),
                );
                Err(EngineError::Config(format!(
                    "left without waiting for the workers (Ctrl-C while stopping); this stop wrote no checkpoint; {resume}"
                )))
            }
            (None, Some(e)) => {
                let _ = e.controller().stop(true);
                e.join()
            }
            (None, None) => unreachable!("the engine is joined exactly once"),
        }
    }

    fn at(&self, app: &App) -> std::time::Duration {
        self.engine.as_ref().map_or(app.now, |e| e.elapsed())
    }

    /// Takes every step sample waiting, up to step `until` where given (an event's: see
    /// `front::steps`). Step samples are collected once a frame rather than as they come: a
    /// worker's `try_send` then never has to wake this thread, which keeps the UI's cost off
    /// the steps.
    fn drain_steps(&mut self, app: &mut App, until: Option<u64>) {
        for s in self.steps.take(until) {
            self.telemetry.on_step(&s);
            let before = app.last_row.as_ref().map(|r| r.step);
            app.apply(AppEvent::Step(s));
            let Some(row) = app.last_row.as_ref().filter(|r| Some(r.step) != before) else {
                continue;
            };
            let w = self.metrics.step(row, app.samples_per_sec);
            warn(app, w);
        }
        self.metrics.catch_up();
    }
}

impl Source for EngineSource {
    type Event = Event;

    fn events(&self) -> Receiver<Event> {
        self.events.clone()
    }

    fn on_event(&mut self, app: &mut App, ev: Option<Event>) -> bool {
        let Some(ev) = ev else {
            self.events_open = false;
            self.drain_steps(app, None);
            return false;
        };
        // the steps up to this event's come first (in the metrics file too)
        self.drain_steps(app, ev.step());
        let at = self.at(app);
        app.apply(AppEvent::Tick(at));
        if matches!(ev, Event::Finished { .. }) {
            // written last, after the final step samples
            self.end_record = Some((ev.clone(), at));
        } else {
            warn(app, self.metrics.event(&ev, at));
        }
        app.apply(AppEvent::Engine(ev));
        true
    }

    fn timer(&self) -> Receiver<Instant> {
        crossbeam_channel::tick(self.sample_interval)
    }

    fn on_timer(&mut self, app: &mut App) -> bool {
        let at = self.at(app);
        let devices = self.telemetry.sample(at);
        if let Some(e) = &self.engine {
            let process_memory = process_memory();
            let heartbeats = e.heartbeats();
            warn(app, self.metrics.telemetry(at, &devices, process_memory));
            app.apply(AppEvent::Telemetry {
                at,
                devices,
                process_memory,
            });
            app.apply(AppEvent::Beats(at, heartbeats));
        }
        false
    }

    fn on_frame(&mut self, app: &mut App) -> bool {
        self.drain_steps(app, None);
        if let Some(e) = &self.engine {
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
        let warnings: Vec<_> = app.new_warnings.drain(..).collect();
        for (w, at) in warnings {
            let r = self.metrics.warning(&w, at);
            warn(app, r);
        }
        if self.engine.is_none() || self.events_open || self.steps.is_open() {
            return false;
        }
        // a last sample covers the part of the interval since the previous one
        if let Some(e) = &self.engine {
            let at = e.elapsed();
            let devices = self.telemetry.sample(at);
            let process_memory = process_memory();
            warn(app, self.metrics.telemetry(at, &devices, process_memory));
            app.apply(AppEvent::Telemetry {
                at,
                devices,
                process_memory,
            });
        }
        let r = self.engine.take().map(Engine::join);
        app.finish(
            r.as_ref()
                .and_then(|r| r.as_ref().err())
                .map(ToString::to_string),
        );
        self.result = r;
        if let Some((ev, at)) = self.end_record.take() {
            warn(app, self.metrics.event(&ev, at));
        }
        warn(app, self.metrics.flush());
        true
    }

    fn ended(&self) -> bool {
        self.engine.is_none()
    }

    fn outlives_screen(&self) -> bool {
        true
    }
}
