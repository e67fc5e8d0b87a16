//! What each key does: `App::handle_key` and the controls it asks for.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::{Action, App, Level, Mode, Popup, RunState, Silent, View};

use crate::engine::control::{Control, MAX_BATCH};

/// What a key that would change the run says under `view` (short: the footer's, at 80 columns).
pub const VIEW_ONLY: &str = "view only reads the run's record: attach changes a live run";

/// How long after a checkpoint was written `s` waits before it asks for another (a held key
/// writes one, not one a step).
const CHECKPOINTS_APART: std::time::Duration = std::time::Duration::from_secs(1);

/// What a Ctrl chord is told: nothing here (Ctrl-S and Ctrl-Q, a terminal's flow control, with
/// what the plain keys do).
fn chord_words(key: KeyEvent, steers: bool) -> String {
    let KeyCode::Char(c) = key.code else {
        return String::new();
    };
    let keys = match steers {
        true => "s writes a checkpoint, q quits",
        false => "q quits",
    };
    match c.to_ascii_uppercase() {
        c @ ('S' | 'Q') => {
            format!("Ctrl-{c} does nothing here (this screen does not freeze output): {keys}")
        }
        c => format!("Ctrl-{c} does nothing here; ? lists the keys"),
    }
}

impl App {
    /// Answers one key; returns what the frontend loop must do.
    pub fn handle_key(&mut self, key: KeyEvent) -> Option<Action> {
        if key.kind != KeyEventKind::Press {
            return None;
        }
        self.flash = None;
        // (a key's answer starts its time afresh, though its words be the last answer's)
        self.flash_since = None;
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let ctrl_c = ctrl && key.code == KeyCode::Char('c');
        if ctrl && matches!(key.code, KeyCode::Char('l')) {
            return Some(Action::Redraw);
        }
        // a Ctrl chord is none of the plain keys: Ctrl-S and Ctrl-Q, a terminal's flow control
        // out of habit, must not write a checkpoint nor stop the run (an Alt chord is: a
        // terminal sends Esc and a key typed quickly after it as one)
        let chord = ctrl && !ctrl_c && matches!(key.code, KeyCode::Char(_));
        match self.popup {
            Some(Popup::Help) => {
                self.popup = None;
                return None;
            }
            Some(Popup::Quit) if chord => {
                self.flash = Some(chord_words(key, false));
                return None;
            }
            Some(Popup::Quit) => {
                let plain_q = key.code == KeyCode::Char('q') && !ctrl;
                let again = ctrl_c || (plain_q && !key.modifiers.contains(KeyModifiers::ALT));
                return self.quit_popup_key(key.code, again);
            }
            None => {}
        }
        if chord {
            let steers = self.mode != Mode::File && !self.readonly && !self.state.ended();
            self.flash = Some(chord_words(key, steers));
            return None;
        }
        let quit_key = ctrl_c || matches!(key.code, KeyCode::Char('q'));
        if quit_key && self.leaves_at_once() {
            return Some(Action::Quit);
        }
        if ctrl_c && self.state == RunState::Stopping && !self.readonly {
            // an attached screen has no workers of its own to wait for: it detaches
            return Some(if self.mode == Mode::Attached {
                Action::Quit
            } else {
                Action::Abandon
            });
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
                // (a held key asks once: one checkpoint on its way, none within a second of
                // the last one written)
                if app.pending_checkpoint {
                    app.flash = Some("a checkpoint is on its way already".into());
                    return None;
                }
                if let Some((step, at)) = app.checkpoint_written {
                    let ago = app.now.saturating_sub(at);
                    if ago < CHECKPOINTS_APART {
                        app.flash = Some(format!(
                            "checkpoint of step {step} written {:.1} s ago: s again in a moment writes another",
                            ago.as_secs_f64()
                        ));
                        return None;
                    }
                }
                // (the ranks write it at the step they are at when it reaches them: this one
                // where paused, a later one where running)
                let asked = match (app.state, app.silent) {
                    (_, Some(Silent::Suspended)) => "checkpoint requested: written once the run's process continues (it is suspended)".to_string(),
                    (RunState::Paused, _) => format!("checkpoint requested at step {}", app.step()),
                    _ => "checkpoint requested: written after the step under way".to_string(),
                };
                app.note(Level::Info, asked.clone());
                app.flash = Some(asked);
                app.pending_checkpoint = true;
                Some(Action::Control(Control::Checkpoint))
            }),
            KeyCode::Char(c @ '1'..='9') => {
                let i = c as usize - '1' as usize;
                if i < self.devices.len() {
                    // a device's detail is part of the overview
                    self.focus = Some(i);
                    self.view = View::Overview;
                } else {
                    self.flash = Some(format!(
                        "no device {c}: this run has {}",
                        self.devices.len()
                    ));
                }
                None
            }
            // (past the ninth device too: ← → walk them all)
            KeyCode::Right | KeyCode::Left if !self.devices.is_empty() => {
                let n = self.devices.len();
                self.focus = Some(match (self.focus, key.code == KeyCode::Right) {
                    (Some(i), true) => (i + 1) % n,
                    (Some(i), false) => (i + n - 1) % n,
                    (None, true) => 0,
                    (None, false) => n - 1,
                });
                self.view = View::Overview;
                None
            }
            KeyCode::Char('0') | KeyCode::Esc => {
                // an ended run's summary: brought back from any view (the overview's, where
                // it is drawn), hidden again where it is shown
                if self.summary.is_some() {
                    let shown =
                        self.view == View::Overview && self.focus.is_none() && !self.summary_hidden;
                    self.summary_hidden = shown;
                    self.view = View::Overview;
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
            // the events view scrolls back through the run's events
            KeyCode::Up | KeyCode::Char('k') if self.view == View::Log => {
                self.scroll_log_to(self.log_scroll.saturating_sub(1))
            }
            KeyCode::Down | KeyCode::Char('j') if self.view == View::Log => {
                self.scroll_log_to(self.log_scroll + 1)
            }
            KeyCode::PageUp if self.view == View::Log => {
                self.scroll_log_to(self.log_fit.get().above)
            }
            KeyCode::PageDown if self.view == View::Log => {
                let fit = self.log_fit.get();
                self.scroll_log_to(self.log_scroll + fit.shown.max(1))
            }
            KeyCode::Home if self.view == View::Log => self.scroll_log_to(0),
            KeyCode::End if self.view == View::Log => self.scroll_log_to(usize::MAX),
            KeyCode::Char('t') => Some(Action::NextTheme),
            KeyCode::Char('r') if self.disconnected.is_some() => Some(Action::Reconnect),
            KeyCode::Char('r') => Some(Action::Redraw),
            KeyCode::Char('?') | KeyCode::Char('h') => {
                self.popup = Some(Popup::Help);
                None
            }
            _ => None,
        }
    }

    /// Shows the events view from entry `first` (counted from the newest), no further than
    /// its oldest page, which it shows full.
    fn scroll_log_to(&mut self, first: usize) -> Option<Action> {
        self.log_scroll = first.min(self.log_fit.get().oldest);
        None
    }

    /// Whether `q` leaves without asking: nothing here can stop the run (it has ended, it is
    /// a file, the connection to it is lost, or an attached screen is read-only).
    pub fn leaves_at_once(&self) -> bool {
        self.state.ended()
            || match self.mode {
                Mode::Local => false,
                Mode::File => true,
                Mode::Attached => self.readonly || self.disconnected.is_some(),
            }
    }

    /// Runs `f` unless the UI is read-only or the run is over.
    fn checked(&mut self, f: impl FnOnce(&mut App) -> Option<Action>) -> Option<Action> {
        if self.mode == Mode::File {
            self.flash = Some(VIEW_ONLY.into());
            return None;
        }
        if self.disconnected.is_some() {
            self.flash = Some("not connected to the run: r reconnects".into());
            return None;
        }
        if self.readonly {
            self.flash = Some("keys that change the run are disabled".into());
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
            // (in the events too, whole)
            let how = format!(
                "read-only, q would stop the run: it ends by itself, or on `kill {}` (a checkpoint, then exit)",
                std::process::id()
            );
            self.note(Level::Info, how.clone());
            self.flash = Some(how);
            return None;
        }
        if self.state == RunState::Stopping && self.mode == Mode::Local {
            self.flash =
                Some("already stopping: finishing the step (Ctrl-C: leave without waiting)".into());
            return None;
        }
        self.popup = Some(Popup::Quit);
        None
    }

    /// A key under the quit popup; `again`: the key that opened it (`q`, Ctrl-C) once more.
    fn quit_popup_key(&mut self, code: KeyCode, again: bool) -> Option<Action> {
        // the run ended while the question was open: there is nothing left to stop
        if self.state.ended() {
            self.popup = None;
            return again.then_some(Action::Quit);
        }
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
        let attached = self.mode == Mode::Attached;
        // the key that opened the popup, pressed again, takes the safe answer
        match code {
            // a client's quit is about the client: it detaches, the run goes on
            _ if again && attached => Some(Action::Quit),
            KeyCode::Char('d') if attached => Some(Action::Quit),
            _ if again => stop(self, true),
            KeyCode::Char('s') | KeyCode::Char('y') | KeyCode::Enter => stop(self, true),
            KeyCode::Char('k') => stop(self, false),
            KeyCode::Char('c') | KeyCode::Char('n') | KeyCode::Esc => {
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
                let end = if up {
                    "the largest it takes"
                } else {
                    "the smallest"
                };
                app.flash = Some(format!("batch per replica is already {from}, {end}"));
                return None;
            }
            app.batch_asks.push(to);
            app.pending_batch = (to != app.per_replica).then_some((app.per_replica, to));
            Some(Action::Control(Control::SetBatch(to)))
        })
    }

    /// The ranks took batch `to`: the asks up to it are done, a later one still comes; a batch
    /// this screen did not ask for (another screen's, asked after this one's) replaces every
    /// ask (the ranks take the last one they were given).
    pub(super) fn batch_applied(&mut self, to: usize) {
        match self.batch_asks.iter().position(|&a| a == to) {
            Some(i) => drop(self.batch_asks.drain(..=i)),
            None => self.batch_asks.clear(),
        }
        self.batch_still_asked();
    }

    /// The run refused batch `b`: the newest ask before it is what comes (the ranks apply
    /// the last batch they accepted), and the next key press doubles or halves that.
    pub(super) fn batch_refused(&mut self, b: usize) {
        if let Some(i) = self.batch_asks.iter().rposition(|&a| a == b) {
            self.batch_asks.remove(i);
        }
        self.batch_still_asked();
    }

    fn batch_still_asked(&mut self) {
        let to = self.batch_asks.last().copied();
        self.pending_batch = to
            .filter(|&t| t != self.per_replica)
            .map(|t| (self.per_replica, t));
    }
}
