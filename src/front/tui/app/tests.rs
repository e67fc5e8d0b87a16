//! App state tests without a terminal: engine events to state, keys to controls.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyEventState, KeyModifiers};

use super::*;
use crate::engine::events::{Applied, Ending};
use crate::engine::RunInfo;
use crate::front::tui::demo;

pub(super) fn key(c: char) -> KeyEvent {
    KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
}

pub(super) fn ctrl_c() -> KeyEvent {
    KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)
}

/// A 2-rank run 5 steps in, fed as a run in this process is.
fn run() -> demo::Demo {
    let mut run = demo::Demo::new(RunInfo::example(2));
    let started = Event::Started {
        ranks: 2,
        per_replica: 32,
        params: 1,
        start_step: 0,
        start_epoch: 0,
    };
    run.event(started, Duration::ZERO);
    for s in 1..=5 {
        run.step(demo::step(0, 2, s));
        run.step(demo::step(1, 2, s));
    }
    run
}

pub(super) fn running(readonly: bool) -> App {
    let mut app = run().app;
    app.readonly = readonly;
    app
}

pub(super) fn control(app: &mut App, step: u64, applied: Applied) {
    app.apply(AppEvent::Engine(Event::Control { step, applied }));
}

#[test]

fn steps_make_rows_and_curves_once_every_rank_reported() {
    let mut run = run();
    assert_eq!(run.app.state, RunState::Running);
    assert_eq!(run.app.last_row.as_ref().unwrap().step, 5);
    assert_eq!(run.app.loss.all().len(), 5);
    run.step(demo::step(0, 2, 6));
    let app = run.app;
    assert_eq!(
        app.last_row.as_ref().unwrap().step,
        5,
        "rank 1 has not reported"
    );
    // a device's own newest step is its row's (its waits split as the rows split them)
    assert_eq!(app.devices[0].last.as_ref().unwrap().step, 5);
    let split = app.devices[0].split().unwrap();
    assert!(split.compute > split.data && split.other > 0.0);
    // the step column is the steps' wall time, what its parts leave (other) in it
    let recent: Vec<f64> = app.devices[0].step_ms().collect();
    let mean_ms = recent.iter().sum::<f64>() / recent.len() as f64;
    assert!(
        (split.total() * 1e3 - mean_ms).abs() < 1e-9,
        "{split:?} vs {mean_ms}"
    );
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
fn what_answers_a_key_is_said_in_the_footer_and_nothing_else_is() {
    let mut app = running(false);
    app.handle_key(key('s'));
    assert_eq!(
        app.flash.as_deref(),
        Some("checkpoint requested: written after the step under way")
    );
    let written = |app: &mut App, step: u64| {
        app.apply(AppEvent::Engine(Event::Checkpoint {
            step,
            path: format!("runs/x/checkpoints/step-{step:08}").into(),
            best: None,
        }))
    };
    // a best validation's checkpoint (--checkpoint-best) answers no key and is no step's
    app.apply(AppEvent::Engine(Event::Checkpoint {
        step: 5,
        path: "runs/x/checkpoints/best".into(),
        best: Some(0.9),
    }));
    assert_eq!(
        app.flash.as_deref(),
        Some("checkpoint requested: written after the step under way")
    );
    assert_eq!(app.last_checkpoint, None);
    assert_eq!(
        app.best_checkpoint,
        Some(("runs/x/checkpoints/best".into(), 0.9))
    );
    written(&mut app, 6);
    let said = app.flash.take().unwrap();
    assert!(said.starts_with("checkpoint at step 6"), "{said}");
    // a checkpoint nobody here asked for (--checkpoint-every) is in the events only
    written(&mut app, 10);
    assert_eq!(app.flash, None);
    app.handle_key(key(']'));
    control(
        &mut app,
        7,
        Applied::BatchSize {
            from: 32,
            to: 64,
            lr: 1e-3,
        },
    );
    let said = app.flash.take().unwrap();
    assert!(said.contains("32 -> 64"), "{said}");
    app.handle_key(key('p'));
    control(&mut app, 8, Applied::Paused);
    let said = app.flash.take().unwrap();
    assert!(said.contains("paused"), "{said}");
    // another client's resume is not this screen's answer, nor the opposite of what it asked
    control(&mut app, 8, Applied::Resumed);
    assert_eq!(app.flash, None);
    app.handle_key(key('p'));
    control(&mut app, 9, Applied::Resumed);
    assert_eq!(app.flash, None);
}

#[test]

fn readonly_disables_every_key_that_changes_the_run() {
    let mut app = running(true);
    for c in ['p', ' ', ']', '[', '+', '-', 's', 'q'] {
        assert_eq!(app.handle_key(key(c)), None, "{c}");
        // the footer's READ-ONLY badge says the mode; the answer says what the key would do
        let why = app.flash.as_ref().unwrap();
        assert!(
            why.contains("are disabled") || why.contains("would stop the run"),
            "{c}: {why}"
        );
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
fn watching_a_recorded_run_disables_controls_and_q_leaves_at_once() {
    let mut app = App::watching(RunInfo::example(2));
    let row = |step| {
        let mut m = crate::observe::monitor::Monitor::new(2);
        m.on_step(demo::step(0, 2, step));
        m.on_step(demo::step(1, 2, step)).unwrap()
    };
    for step in [10, 20] {
        app.apply(AppEvent::Row {
            row: row(step),
            samples_per_sec: Some(1234.0),
        });
    }
    assert_eq!(app.state, RunState::Running);
    assert_eq!((app.step(), app.loss.all().len()), (20, 2));
    assert_eq!(app.samples_per_sec, Some(1234.0));
    assert!(app.devices[0].split().is_some());
    for c in ['p', ' ', ']', '[', 's'] {
        assert_eq!(app.handle_key(key(c)), None, "{c}");
        assert!(
            app.flash.as_ref().unwrap().contains("view only reads"),
            "{c}"
        );
    }
    assert_eq!(app.pending_pause, None);
    assert_eq!(app.handle_key(key('q')), Some(Action::Quit));
    assert_eq!(app.handle_key(ctrl_c()), Some(Action::Quit));
    assert_eq!(app.popup, None);
}

#[test]
fn the_footer_s_answer_goes_after_a_while_not_at_the_next_key() {
    let mut app = running(false);
    let t0 = std::time::Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    app.handle_key(key('9'));
    assert!(app.flash.as_ref().unwrap().contains("no device 9"));
    assert!(!app.age_flash(at(0)));
    assert!(!app.age_flash(at(10)), "still there 10 s on");
    assert!(app.flash.is_some());
    assert!(app.age_flash(at(15)), "gone 15 s after it was seen");
    assert_eq!(app.flash, None);
    // the same words again, from a key: their own 15 s
    app.handle_key(key('9'));
    assert!(!app.age_flash(at(20)));
    app.handle_key(key('9'));
    assert!(!app.age_flash(at(30)));
    assert!(!app.age_flash(at(44)));
    assert!(app.flash.is_some());
}

#[test]
fn arrows_reach_every_device_past_the_ninth() {
    let mut app = App::new(RunInfo::example(12), false);
    let arrow = |app: &mut App, code| app.handle_key(KeyEvent::new(code, KeyModifiers::NONE));
    arrow(&mut app, KeyCode::Left);
    assert_eq!(app.focus, Some(11), "from none, the last");
    arrow(&mut app, KeyCode::Right);
    assert_eq!(app.focus, Some(0), "round to the first");
    app.handle_key(key('9'));
    arrow(&mut app, KeyCode::Right);
    assert_eq!(app.focus, Some(9), "the tenth, which no digit names");
    arrow(&mut app, KeyCode::Left);
    assert_eq!(app.focus, Some(8));
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
    // the best validation within the epoch (--val-every) counts; the newest is the epoch's
    app.apply(AppEvent::Engine(Event::Validated {
        step: 3,
        epochs: 0.6,
        val_loss: 0.3,
        val_accuracy: 0.95,
        elapsed: Duration::from_millis(10),
    }));
    app.apply(AppEvent::Engine(Event::EpochDone {
        epoch: 1,
        step: 5,
        train_loss: 0.5,
        val_loss: Some(0.4),
        val_accuracy: Some(0.91),
        elapsed: Duration::from_millis(20),
    }));
    for (kind, step) in [("grad_spike", 2), ("straggler", 3), ("grad_spike", 4)] {
        app.apply(AppEvent::Warned {
            kind: kind.into(),
            rank: None,
            step: Some(step),
            spikes: Some(SaidFor::one(step)),
            message: format!("{kind}: words"),
        });
    }
    app.apply(AppEvent::Engine(Event::Finished {
        step: 5,
        ending: Ending::Completed,
    }));
    assert_eq!(app.state, RunState::Done);
    let s = app.summary.clone().unwrap();
    assert_eq!(
        (s.steps, s.ending, s.best_val_accuracy),
        (5, Ending::Completed, Some(0.95))
    );
    // (the steps of the spikes, as the run's log names them)
    let spikes = s.grad_spikes.text();
    assert_eq!(spikes.as_deref(), Some("gradient spikes at steps 2 and 4"));
    assert_eq!(app.val_accuracy(), (Some(0.91), Some(0.95)));
    assert!(s.mean_samples_per_sec.unwrap() > 0.0);
    let share = s.time_shares.unwrap()[0];
    assert!(share > 0.5 && share < 1.0, "{share}");
    assert_eq!(app.handle_key(key('p')), None);
    let esc = KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE);
    app.handle_key(esc);
    assert!(
        app.summary_hidden,
        "Esc uncovers the panels under the summary"
    );
    // from another view, as the footer says: the summary again
    app.handle_key(KeyEvent::new(KeyCode::Tab, KeyModifiers::NONE));
    assert_ne!(app.view, View::Overview);
    app.handle_key(esc);
    assert!(app.view == View::Overview && !app.summary_hidden);
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

fn a_straggler_marks_its_device_and_logs_once() {
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
}

#[test]
fn a_run_wide_limit_stays_in_the_header_until_cleared() {
    let mut app = running(false);
    let warned = |kind: &str| AppEvent::Warned {
        kind: kind.into(),
        rank: None,
        step: None,
        spikes: None,
        message: format!("{kind}: words"),
    };
    app.apply(warned("input_bound"));
    app.apply(warned("underused"));
    app.apply(warned("input_bound"));
    assert_eq!(
        app.limits.iter().map(|l| l.name()).collect::<Vec<_>>(),
        ["underused", "input-bound"]
    );
    app.apply(warned("input_bound_cleared"));
    assert_eq!(
        app.limits.iter().map(|l| l.name()).collect::<Vec<_>>(),
        ["underused"]
    );
    // a rank's warning is its device's, not the run's
    app.apply(warned("stall"));
    assert_eq!(
        app.limits.iter().map(|l| l.name()).collect::<Vec<_>>(),
        ["underused"]
    );
}

#[test]

fn a_signal_means_stopping_and_leaving() {
    let mut app = running(false);
    app.apply(AppEvent::Signal);
    assert_eq!(app.state, RunState::Stopping);
    assert!(app.quitting);
    assert_eq!(app.log[0].level, Level::Warn);
    // after the end (the summary on screen), the screen leaves at the first signal
    let mut app = running(false);
    app.finish(None);
    assert!(!app.quitting);
    app.apply(AppEvent::Signal);
    assert!(app.quitting && app.state == RunState::Done);
}

#[test]
fn a_held_s_asks_for_one_checkpoint_not_one_a_step() {
    let mut app = running(false);
    let s = |app: &mut App| app.handle_key(key('s'));
    assert_eq!(s(&mut app), Some(Action::Control(Control::Checkpoint)));
    // on its way: the key's repeats ask nothing more
    assert_eq!(s(&mut app), None);
    assert_eq!(
        app.flash.as_deref(),
        Some("a checkpoint is on its way already")
    );
    app.apply(AppEvent::Engine(Event::Checkpoint {
        step: 6,
        path: "runs/x/checkpoints/step-00000006".into(),
        best: None,
    }));
    // written just now: not another at the next step
    assert_eq!(s(&mut app), None);
    assert!(app
        .flash
        .as_ref()
        .unwrap()
        .starts_with("checkpoint of step 6 written 0.0 s ago"));
    // a second later, another
    app.apply(AppEvent::Tick(app.now + Duration::from_secs(1)));
    assert_eq!(s(&mut app), Some(Action::Control(Control::Checkpoint)));
}

#[test]
fn keys_of_a_screen_on_a_suspended_run_say_it_waits_for_its_process() {
    let mut app = running(false);
    app.silent = Some(Silent::Suspended);
    app.handle_key(key('s'));
    assert_eq!(
        app.flash.as_deref(),
        Some("checkpoint requested: written once the run's process continues (it is suspended)")
    );
    let (leaves, how) = app.detach_leaves();
    assert!(
        leaves == "the run stays suspended" && how.contains("kill -CONT"),
        "{leaves}{how}"
    );
}
