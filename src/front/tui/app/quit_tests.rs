//! Leaving: the quit question and its answers, detaching, read-only and disconnected screens.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::tests::{ctrl_c, key, running};
use super::*;
use crate::engine::events::Ending;

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
    // a third Ctrl-C leaves without waiting for the workers
    assert_eq!(app.handle_key(ctrl_c()), Some(Action::Abandon));

    // q twice stops as Ctrl-C twice does
    let mut app = running(false);
    app.handle_key(key('q'));
    assert_eq!(
        app.handle_key(key('q')),
        Some(Action::Control(Control::Stop { checkpoint: true }))
    );
}

#[test]
fn ctrl_s_and_ctrl_q_out_of_a_terminal_s_habit_neither_checkpoint_nor_stop() {
    let chord = |c, m| KeyEvent::new(KeyCode::Char(c), m);
    let ctrl = KeyModifiers::CONTROL;
    let mut app = running(false);
    for k in [
        chord('s', ctrl),
        chord('q', ctrl),
        chord('k', ctrl),
        chord('p', ctrl),
    ] {
        assert_eq!(app.handle_key(k), None, "{k:?}");
        assert_eq!((app.popup, app.pending_checkpoint), (None, false), "{k:?}");
        assert_eq!(app.pending_pause, None, "{k:?}");
    }
    assert!(
        (app.flash.as_deref())
            .is_some_and(|f| f.contains("Ctrl-P does nothing here; ? lists the keys")),
        "{:?}",
        app.flash
    );
    app.handle_key(chord('s', ctrl));
    assert!(
        (app.flash.as_deref()).is_some_and(|f| f.contains("s writes a checkpoint, q quits")),
        "{:?}",
        app.flash
    );
    // under the quit question too: Ctrl-S is not its `s` (stop with a checkpoint)
    app.handle_key(key('q'));
    for k in [chord('s', ctrl), chord('k', ctrl), chord('y', ctrl)] {
        assert_eq!(app.handle_key(k), None, "{k:?}");
        assert_eq!(app.popup, Some(Popup::Quit), "{k:?}");
        assert!(!app.quitting, "{k:?}");
    }
    // the plain keys still do what they say (with Alt too: a terminal sends Esc and a key
    // typed right after it as Alt and the key)
    let alt_p = chord('p', KeyModifiers::ALT);
    assert_eq!(app.handle_key(key('c')), None);
    assert!(matches!(app.handle_key(alt_p), Some(Action::Control(_))));
    app.handle_key(key('q'));
    assert_eq!(
        app.handle_key(key('s')),
        Some(Action::Control(Control::Stop { checkpoint: true }))
    );
}

fn attached(readonly: bool) -> App {
    let mut app = running(readonly);
    app.mode = Mode::Attached;
    app
}

#[test]
fn an_attached_client_can_detach_or_stop_the_run_and_its_ctrl_c_only_detaches() {
    let mut app = attached(false);
    assert_eq!(app.handle_key(key('q')), None);
    assert_eq!(app.popup, Some(Popup::Quit));
    assert_eq!(app.handle_key(key('d')), Some(Action::Quit));
    assert!(!app.quitting, "detaching leaves the run going");
    let mut app = attached(false);
    app.handle_key(key('q'));
    assert_eq!(
        app.handle_key(key('s')),
        Some(Action::Control(Control::Stop { checkpoint: true }))
    );
    assert!(app.quitting && app.state == RunState::Stopping);
    // stopping: q still offers to detach rather than wait
    app.handle_key(key('q'));
    assert_eq!(app.handle_key(key('d')), Some(Action::Quit));
    let mut app = attached(false);
    app.handle_key(ctrl_c());
    assert_eq!(app.handle_key(ctrl_c()), Some(Action::Quit));
    assert!(!app.quitting);
    let mut app = attached(false);
    app.handle_key(key('q'));
    assert_eq!(
        app.handle_key(key('q')),
        Some(Action::Quit),
        "q twice detaches"
    );
    assert!(!app.quitting);
    // a local run's popup has no detach
    let mut local = running(false);
    local.handle_key(key('q'));
    assert_eq!(local.handle_key(key('d')), None);
    assert_eq!(local.popup, Some(Popup::Quit));
}

#[test]
fn a_read_only_or_disconnected_client_leaves_at_once_and_r_reconnects() {
    let mut app = attached(true);
    assert_eq!(app.handle_key(key('p')), None);
    assert!(app.flash.as_ref().unwrap().contains("disabled"));
    assert_eq!(app.handle_key(key('q')), Some(Action::Quit));
    let mut app = attached(false);
    app.disconnected = Some("the run closed the connection".into());
    assert_eq!(app.handle_key(key('p')), None);
    assert!(app.flash.as_ref().unwrap().contains("r reconnects"));
    assert_eq!(app.handle_key(key('r')), Some(Action::Reconnect));
    assert_eq!(app.handle_key(key('q')), Some(Action::Quit));
    app.disconnected = None;
    assert_eq!(app.handle_key(key('r')), Some(Action::Redraw));
}

#[test]
fn the_quit_question_after_the_run_ended_leaves_without_stopping_anything() {
    let mut app = running(false);
    app.handle_key(key('q'));
    app.apply(AppEvent::Engine(Event::Finished {
        step: 5,
        ending: Ending::Completed,
    }));
    assert_eq!(app.handle_key(key('q')), Some(Action::Quit));
    assert_eq!(app.state, RunState::Done, "not turned to stopping");
    // Alt-q is not `q` again
    let mut app = running(false);
    app.handle_key(key('q'));
    let alt_q = KeyEvent::new(KeyCode::Char('q'), KeyModifiers::ALT);
    assert_eq!(app.handle_key(alt_q), None);
}
