//! The terminal UI: `App` state, pure render functions, themes, and the loop that feeds the
//! engine's events and the user's keys into the state and draws it at most 10 times a second.

pub mod app;
#[doc(hidden)]
pub mod demo;
pub mod render;
pub mod term;
pub mod theme;

use std::time::{Duration, Instant};

use crossbeam_channel::{never, select, tick, Receiver, TryRecvError};
use ratatui::backend::Backend;
use ratatui::crossterm::event::KeyEvent;
use ratatui::Terminal;

use crate::engine::events::Event;
use crate::engine::{Engine, EngineError, RunResult};
use crate::observe::metrics::{MetricsWriter, Recorder};
use crate::observe::telemetry::{process_memory, Telemetry};
use app::{Action, App, AppEvent, Level};
use theme::Theme;

/// What the user did at the terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    Key(KeyEvent),
    Resize,
}

#[derive(Clone, Debug)]
pub struct TuiOptions {
    pub theme: Theme,
    pub readonly: bool,
    /// Leave as soon as the run ends instead of showing the summary until `q`.
    pub exit_when_done: bool,
    pub sample_interval: Duration,
    /// Steps between metrics-file step records.
    pub log_every: u64,
}

/// The shortest time between two frames.
const FRAME: Duration = Duration::from_millis(100);

/// How the UI ended.
pub struct TuiEnd {
    pub result: Result<RunResult, EngineError>,
    /// The state as last shown (for the lines printed after the terminal is restored).
    pub app: App,
}

/// Runs the UI on `terminal` until the run has ended and the user (or `exit_when_done`, a
/// stop request, or a lost terminal) lets it go. `signals` carries SIGTERM/SIGHUP notices;
/// the signal handler has already asked the engine to stop.
pub fn drive<B: Backend>(
    terminal: &mut Terminal<B>,
    engine: Engine,
    opts: &TuiOptions,
    inputs: Receiver<Input>,
    signals: Receiver<()>,
    metrics: Option<MetricsWriter>,
) -> TuiEnd {
    let info = engine.info().clone();
    let controller = engine.controller();
    let mut app = App::new(info.clone(), opts.readonly);
    if let Some(note) = &info.device_note {
        app.apply(AppEvent::Notice(Level::Info, format!("note: {note}")));
    }
    let mut theme = opts.theme.clone();
    let mut telemetry = Telemetry::new(&info.devices, opts.sample_interval);
    let mut metrics = Recorder::new(metrics);
    let warn = |app: &mut App, w: Option<String>| {
        if let Some(w) = w {
            app.apply(AppEvent::Notice(Level::Warn, w));
        }
    };
    warn(&mut app, metrics.record(|w| w.run_start(&info)));

    // step samples are collected once a frame rather than as they come: a worker's
    // `try_send` then never has to wake this thread, which keeps the UI's cost off the steps
    let (mut events, steps) = (engine.events().clone(), engine.steps().clone());
    let (mut events_open, mut steps_open) = (true, true);
    let mut engine = Some(engine);
    let mut end_record = None;
    let mut result = None;
    let mut abandoned = false;
    let (mut inputs, mut signals) = (inputs, signals);
    let frames = tick(FRAME);
    let sampler = tick(opts.sample_interval);
    let mut last_draw: Option<Instant> = None;
    let mut drawable = true;
    let mut dirty = true;
    loop {
        select! {
            recv(events) -> e => match e {
                Ok(ev) => {
                    // the steps before this event come first (in the metrics file too)
                    if steps_open {
                        steps_open = drain_steps(&steps, &mut app, &mut telemetry, &mut metrics, opts.log_every);
                    }
                    let at = engine.as_ref().map_or(app.now, |e| e.elapsed());
                    app.apply(AppEvent::Tick(at));
                    if matches!(ev, Event::Finished { .. }) {
                        // written last, after the final step samples
                        end_record = Some((ev.clone(), at));
                    } else {
                        warn(&mut app, metrics.record(|w| w.event(&ev, at)));
                    }
                    app.apply(AppEvent::Engine(ev));
                    dirty = true;
                }
                Err(_) => {
                    events = never();
                    events_open = false;
                    steps_open = drain_steps(&steps, &mut app, &mut telemetry, &mut metrics, opts.log_every);
                }
            },
            recv(inputs) -> i => match i {
                Ok(Input::Key(k)) => {
                    dirty = true;
                    match app.handle_key(k) {
                        Some(Action::Control(c)) if controller.send(c).is_err() => {
                            app.apply(AppEvent::Flash("the run has already ended".into()));
                        }
                        Some(Action::Quit) => break,
                        Some(Action::Abandon) => {
                            abandoned = true;
                            break;
                        }
                        Some(Action::NextTheme) => {
                            theme = theme.next();
                            app.apply(AppEvent::Theme(theme.name.clone()));
                        }
                        Some(Action::Redraw) => {
                            let _ = terminal.clear();
                        }
                        Some(Action::Control(_)) | None => {}
                    }
                }
                Ok(Input::Resize) => dirty = true,
                Err(_) => inputs = never(),
            },
            recv(signals) -> s => match s {
                Ok(()) => {
                    app.apply(AppEvent::Signal);
                    dirty = true;
                }
                Err(_) => signals = never(),
            },
            recv(sampler) -> _ => {
                let at = engine.as_ref().map_or(app.now, |e| e.elapsed());
                let devices = telemetry.sample(at);
                if let Some(e) = &engine {
                    let process_memory = process_memory();
                    warn(&mut app, metrics.record(|m| m.telemetry(at, &devices, process_memory)));
                    app.apply(AppEvent::Telemetry { at, devices, process_memory });
                    app.apply(AppEvent::Beats(at, e.heartbeats()));
                }
            },
            recv(frames) -> _ => {
                if steps_open {
                    steps_open = drain_steps(&steps, &mut app, &mut telemetry, &mut metrics, opts.log_every);
                }
                if let Some(e) = &engine {
                    app.apply(AppEvent::Tick(e.elapsed()));
                    dirty = true;
                }
            },
        }
        let warnings: Vec<_> = app.new_warnings.drain(..).collect();
        for (w, at) in warnings {
            let r = metrics.record(|m| m.warning(&w, at));
            warn(&mut app, r);
        }
        if engine.is_some() && !events_open && !steps_open {
            // a last sample covers the part of the interval since the previous one
            if let Some(e) = &engine {
                let at = e.elapsed();
                let devices = telemetry.sample(at);
                let process_memory = process_memory();
                warn(
                    &mut app,
                    metrics.record(|m| m.telemetry(at, &devices, process_memory)),
                );
                app.apply(AppEvent::Telemetry {
                    at,
                    devices,
                    process_memory,
                });
            }
            let r = engine.take().map(Engine::join);
            app.finish(
                r.as_ref()
                    .and_then(|r| r.as_ref().err())
                    .map(ToString::to_string),
            );
            result = r;
            if let Some((ev, at)) = end_record.take() {
                warn(&mut app, metrics.record(|w| w.event(&ev, at)));
            }
            warn(&mut app, metrics.record(|w| w.flush()));
            dirty = true;
        }
        let ended = engine.is_none();
        if ended && (app.quitting || opts.exit_when_done || !drawable) {
            break;
        }
        let due = last_draw.is_none_or(|t| t.elapsed() >= FRAME) || ended;
        if drawable && dirty && due {
            if terminal.draw(|f| render::render(f, &app, &theme)).is_err() {
                // the terminal is gone (SSH dropped): keep training, stop drawing
                drawable = false;
            }
            last_draw = Some(Instant::now());
            dirty = false;
        }
    }
    let result = match (result, engine) {
        (Some(r), _) => r,
        // the workers are left to the process's exit
        (None, Some(_)) if abandoned => Err(EngineError::Config(
            "left without waiting for the workers (Ctrl-C while stopping); this stop wrote no checkpoint".into(),
        )),
        (None, Some(e)) => {
            let _ = e.controller().stop(true);
            e.join()
        }
        (None, None) => unreachable!("the engine is joined exactly once"),
    };
    TuiEnd { result, app }
}

/// Takes every step sample waiting; returns whether the channel is still open.
fn drain_steps(
    steps: &Receiver<crate::engine::events::StepStats>,
    app: &mut App,
    telemetry: &mut Telemetry,
    metrics: &mut Recorder,
    log_every: u64,
) -> bool {
    loop {
        let s = match steps.try_recv() {
            Ok(s) => s,
            Err(TryRecvError::Empty) => return true,
            Err(TryRecvError::Disconnected) => return false,
        };
        telemetry.on_step(&s);
        let before = app.last_row.as_ref().map(|r| r.step);
        app.apply(AppEvent::Step(s));
        let Some(row) = app
            .last_row
            .as_ref()
            .filter(|r| Some(r.step) != before && r.step.is_multiple_of(log_every))
        else {
            continue;
        };
        let rate = app.samples_per_sec;
        if let Some(w) = metrics.record(|w| w.step(row, rate)) {
            app.apply(AppEvent::Notice(Level::Warn, w));
        }
    }
}

/// What stays on the normal screen once the UI has closed.
pub fn summary_lines(app: &App) -> Vec<String> {
    let Some(s) = &app.summary else {
        return vec![format!("left the UI at step {}", app.next_step() - 1)];
    };
    let what = if s.failed.is_some() {
        "failed"
    } else if s.stopped {
        "stopped"
    } else {
        "finished"
    };
    let mut line = format!("{what}: {} steps in {}", s.steps, render::clock(s.wall));
    if let Some(a) = s.best_val_accuracy {
        line += &format!(" | best val accuracy {:.2}%", a * 100.0);
    }
    if let Some(r) = s.mean_samples_per_sec {
        line += &format!(" | {} samples/s", render::si(r));
    }
    let mut lines = vec![line];
    if let Some(p) = &s.last_checkpoint {
        lines.push(format!("checkpoint: {}", p.display()));
    }
    lines
}
