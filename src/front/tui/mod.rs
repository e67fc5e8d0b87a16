//! The terminal UI: `App` state, pure render functions, themes, and the loop that feeds a
//! source's news (the engine's events, a metrics file's records) and the user's keys into the
//! state and draws it at most 10 times a second.

pub mod app;
pub mod attach;
#[doc(hidden)]
pub mod demo;
pub mod render;
pub mod replay;
pub mod source;
pub mod term;
pub mod theme;

use std::time::{Duration, Instant};

use crossbeam_channel::{never, select, tick, Receiver};
use ratatui::backend::Backend;
use ratatui::crossterm::event::KeyEvent;
use ratatui::Terminal;

use crate::engine::{Engine, EngineError, RunResult};
use crate::observe::Recorder;
use app::{Action, App, AppEvent, Level};
use source::{EngineSource, Source};
use theme::Theme;

/// What the user did at the terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    Key(KeyEvent),
    /// Text pasted (bracketed paste): ignored, said so; its letters are not keys.
    Paste,
    /// Ctrl-Z.
    Suspend,
    Resize,
}

#[derive(Clone, Debug)]
pub struct TuiOptions {
    pub theme: Theme,
    pub readonly: bool,
    /// Leave as soon as the run ends instead of showing the summary until `q`.
    pub exit_when_done: bool,
    pub sample_interval: Duration,
    /// Lines for the events panel at the start (where the run can be attached from).
    pub notes: Vec<String>,
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
/// the signal handler has already asked the engine to stop. `metrics` records the run.
pub fn drive<B: Backend>(
    terminal: &mut Terminal<B>,
    engine: Engine,
    opts: &TuiOptions,
    inputs: Receiver<Input>,
    signals: Receiver<()>,
    metrics: Recorder,
) -> TuiEnd {
    let mut app = App::new(engine.info().clone(), opts.readonly);
    for note in &opts.notes {
        app.apply(AppEvent::Notice(Level::Info, note.clone()));
    }
    let mut source = EngineSource::new(engine, opts, metrics, &mut app);
    let screen = Screen {
        theme: opts.theme.clone(),
        exit_when_done: opts.exit_when_done,
    };
    let (mut app, abandoned) = run(terminal, app, &mut source, screen, inputs, signals);
    TuiEnd {
        result: source.finish(&mut app, abandoned),
        app,
    }
}

/// How the loop draws and when it leaves by itself.
pub struct Screen {
    pub theme: Theme,
    /// Leave as soon as the source has ended instead of waiting for `q`.
    pub exit_when_done: bool,
}

/// Clears the screen and has the next frame written whole (`r`, Ctrl-L: after something else
/// wrote on the terminal). Not `Terminal::clear`: that first asks the terminal where its cursor
/// is and waits for the answer, which the input thread (blocked reading keys) never passes on,
/// so it stalled the screen two seconds and then failed without clearing.
fn repaint<B: Backend>(terminal: &mut Terminal<B>) {
    let _ = terminal
        .backend_mut()
        .clear_region(ratatui::backend::ClearType::All);
    // a blank frame: the next one differs from it wherever it writes anything
    let _ = terminal.draw(|f| f.render_widget(ratatui::widgets::Clear, f.area()));
}

/// Ctrl-Z, SIGTSTP: the process stopped with the terminal given back (`term::suspend`), then
/// the whole screen drawn anew; always something to draw.
fn suspend<B: Backend, S: Source>(
    terminal: &mut Terminal<B>,
    app: &mut App,
    source: &mut S,
) -> bool {
    if let Err(e) = term::suspend() {
        let why = format!("could not take the terminal back after a suspend: {e}");
        app.apply(AppEvent::Notice(Level::Error, why));
    }
    source.resumed(app);
    repaint(terminal);
    true
}

/// The UI loop over any source: feeds `app` from `source` and the user's keys, draws it at
/// most 10 times a second, and returns it when the user (or the source's end with
/// `exit_when_done`, a stop request, or a lost terminal) lets it go; and whether the user left
/// without waiting for the source (a third Ctrl-C while stopping).
pub fn run<B: Backend, S: Source>(
    terminal: &mut Terminal<B>,
    mut app: App,
    source: &mut S,
    screen: Screen,
    inputs: Receiver<Input>,
    signals: Receiver<()>,
) -> (App, bool) {
    let mut theme = screen.theme;
    let first = theme.clone();
    let mut abandoned = false;
    let (mut events, timer) = (source.events(), source.timer());
    let (mut inputs, mut signals) = (inputs, signals);
    let frames = tick(FRAME);
    let mut last_draw: Option<Instant> = None;
    let mut drawable = true;
    let mut dirty = true;
    loop {
        select! {
            recv(events) -> e => {
                if e.is_err() {
                    events = never();
                }
                dirty |= source.on_event(&mut app, e.ok());
            },
            recv(inputs) -> i => match i {
                Ok(Input::Key(k)) => {
                    dirty = true;
                    match app.handle_key(k) {
                        Some(Action::Control(c)) => {
                            if let Err(why) = source.control(c) {
                                app.apply(AppEvent::Refused(c, why));
                            }
                        }
                        Some(Action::Reconnect) => dirty |= source.reconnect(&mut app),
                        Some(Action::Quit) => break,
                        Some(Action::Abandon) => {
                            abandoned = true;
                            break;
                        }
                        Some(Action::NextTheme) => {
                            theme = theme.next(&first);
                            app.apply(AppEvent::Theme(theme.name.clone()));
                        }
                        Some(Action::Redraw) => {
                            repaint(terminal);
                        }
                        None => {}
                    }
                }
                Ok(Input::Paste) => {
                    dirty = true;
                    app.apply(AppEvent::Flash("pasted text ignored: keys act one at a time, as typed".into()));
                }
                Ok(Input::Suspend) => dirty |= suspend(terminal, &mut app, source),
                Ok(Input::Resize) => dirty = true,
                Err(_) => inputs = never(),
            },
            recv(signals) -> s => match s {
                Ok(()) => {
                    dirty = true;
                    if source.on_signal(&mut app) {
                        break;
                    }
                }
                Err(_) => signals = never(),
            },
            recv(timer) -> _ => dirty |= source.on_timer(&mut app),
            recv(frames) -> _ => dirty |= source.on_frame(&mut app),
        }
        if term::stop_asked() {
            dirty |= suspend(terminal, &mut app, source);
        }
        dirty |= source.settle(&mut app);
        dirty |= app.age_flash(Instant::now());
        let ended = source.ended();
        if ended && (app.quitting || screen.exit_when_done || !drawable) {
            break;
        }
        if !drawable && !source.outlives_screen() {
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
    (app, abandoned)
}

/// What stays on the normal screen once the UI has closed.
pub fn summary_lines(app: &App) -> Vec<String> {
    let Some(s) = &app.summary else {
        return vec![format!("left the UI at step {}", app.next_step() - 1)];
    };
    s.lines(&app.info)
}

#[cfg(test)]
mod tests {
    use ratatui::backend::TestBackend;
    use ratatui::buffer::Cell;
    use ratatui::widgets::Paragraph;

    use super::*;

    #[test]
    fn a_repaint_writes_over_what_else_wrote_on_the_screen() {
        let mut terminal = Terminal::new(TestBackend::new(12, 2)).unwrap();
        let frame = |t: &mut Terminal<TestBackend>| {
            t.draw(|f| f.render_widget(Paragraph::new("step 5\nloss"), f.area()))
                .unwrap();
        };
        frame(&mut terminal);
        let drawn = terminal.backend().buffer().clone();
        // another program writes over the screen
        let junk = Cell::new("X");
        let cells: Vec<(u16, u16, &Cell)> = (0..12).map(|x| (x, 0, &junk)).collect();
        terminal.backend_mut().draw(cells.into_iter()).unwrap();
        frame(&mut terminal);
        assert_ne!(
            terminal.backend().buffer(),
            &drawn,
            "a frame alone writes what changed"
        );
        repaint(&mut terminal);
        frame(&mut terminal);
        assert_eq!(terminal.backend().buffer(), &drawn);
    }
}
