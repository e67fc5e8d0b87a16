//! The batch keys: `]` doubles and `[` halves the batch, pending until the ranks apply it,
//! held to what fits, and a refusal said.

use super::tests::{control, key, running};
use super::*;
use crate::engine::events::Applied;

#[test]
fn a_refused_batch_change_is_not_pending_and_is_in_the_events() {
    let mut app = running(false);
    assert_eq!(
        app.handle_key(key(']')),
        Some(Action::Control(Control::SetBatch(64)))
    );
    let why = "a batch of 64 per replica is more than the training split's 100 samples over the run's ranks: at most 50 per replica";
    app.apply(AppEvent::Refused(Control::SetBatch(64), why.into()));
    assert_eq!(app.pending_batch, None);
    // refused again: counted on the same entry, not a second one
    let entries = app.log.len();
    app.handle_key(key(']'));
    app.apply(AppEvent::Refused(Control::SetBatch(64), why.into()));
    assert_eq!(app.log.len(), entries);
    assert!(app.log[0].shown().ends_with("at most 50 per replica (x2)"));
    assert!(app
        .log
        .iter()
        .any(|l| l.text.contains("at most 50 per replica")));
    // the next key starts from the batch in use, not the refused one
    assert_eq!(
        app.handle_key(key('[')),
        Some(Action::Control(Control::SetBatch(16)))
    );
}

#[test]
fn quick_presses_past_the_limit_keep_the_largest_batch_that_fits() {
    let mut app = running(false);
    let ask = |app: &mut App| match app.handle_key(key(']')) {
        Some(Action::Control(Control::SetBatch(b))) => b,
        other => panic!("{other:?}"),
    };
    // 64, 128, 256 accepted; 512 and the press after it (1024, sent before the refusal came)
    // refused: 256 is what the ranks apply and what the screen says is coming
    assert_eq!(
        [ask(&mut app), ask(&mut app), ask(&mut app)],
        [64, 128, 256]
    );
    assert_eq!([ask(&mut app), ask(&mut app)], [512, 1024]);
    let refuse = |app: &mut App, b| {
        let why = format!("a batch of {b} per replica is too large: at most 300 per replica");
        app.apply(AppEvent::Refused(Control::SetBatch(b), why));
    };
    refuse(&mut app, 512);
    refuse(&mut app, 1024);
    assert_eq!(app.pending_batch, Some((32, 256)));
    // a press after the refusals doubles the batch coming, and is refused again
    assert_eq!(ask(&mut app), 512);
    refuse(&mut app, 512);
    assert_eq!(app.pending_batch, Some((32, 256)));
    // the ranks apply 128 at one step and 256 at the next
    let applied = |app: &mut App, from, to| {
        control(app, 5, Applied::BatchSize { from, to, lr: 1e-3 });
    };
    applied(&mut app, 32, 128);
    assert_eq!(app.pending_batch, Some((128, 256)));
    applied(&mut app, 128, 256);
    assert_eq!(app.pending_batch, None);
    assert_eq!(ask(&mut app), 512);
}

#[test]
fn batch_keys_double_and_halve_and_stay_pending_until_applied() {
    let mut app = running(false);
    assert_eq!(
        app.handle_key(key(']')),
        Some(Action::Control(Control::SetBatch(64)))
    );
    assert_eq!(app.pending_batch, Some((32, 64)));
    assert_eq!(
        app.handle_key(key('+')),
        Some(Action::Control(Control::SetBatch(128)))
    );
    assert_eq!(app.pending_batch, Some((32, 128)));
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
fn a_batch_another_screen_asked_for_replaces_this_screen_s_ask() {
    let mut app = running(false);
    assert_eq!(
        app.handle_key(key(']')),
        Some(Action::Control(Control::SetBatch(64)))
    );
    // an attached screen asked for 16 after it: the ranks take 16, never 64
    let to = 16;
    control(
        &mut app,
        5,
        Applied::BatchSize {
            from: 32,
            to,
            lr: 5e-4,
        },
    );
    assert_eq!((app.per_replica, app.pending_batch), (16, None));
    // the next key doubles the batch in use
    assert_eq!(
        app.handle_key(key(']')),
        Some(Action::Control(Control::SetBatch(32)))
    );
}

/// Another client's batch change after ours was answered: the footer says the newer batch
/// (it kept saying ours, the header saying the other's).
#[test]
fn another_clients_change_replaces_the_footers_answer_to_ours() {
    let mut app = running(false);
    app.handle_key(key(']'));
    control(
        &mut app,
        5,
        Applied::BatchSize {
            from: 32,
            to: 64,
            lr: 1e-3,
        },
    );
    assert!(
        app.flash.as_ref().unwrap().contains("32 -> 64"),
        "{:?}",
        app.flash
    );
    control(
        &mut app,
        9,
        Applied::BatchSize {
            from: 64,
            to: 32,
            lr: 1e-3,
        },
    );
    assert!(
        app.flash.as_ref().unwrap().contains("64 -> 32"),
        "{:?}",
        app.flash
    );
}

/// The header's learning rate is a batch change's with its batch, before a step of it is
/// reported (the batch new, the rate old, a moment).
#[test]
fn a_batch_changes_learning_rate_comes_with_it() {
    let mut app = running(false);
    let before = app.lr();
    let lr = before * 2.0;
    control(
        &mut app,
        5,
        Applied::BatchSize {
            from: 32,
            to: 64,
            lr,
        },
    );
    assert_eq!((app.per_replica, app.lr()), (64, lr));
    // a step of it reported: its row's rate from then on (a schedule moves it)
    let mut m = crate::observe::monitor::Monitor::new(2);
    let mut row = |r| {
        let mut s = crate::front::tui::demo::step(r, 2, 6);
        s.lr = lr * 0.5;
        m.on_step(s)
    };
    row(0);
    let row = row(1).unwrap();
    app.apply(AppEvent::Row {
        row,
        samples_per_sec: None,
    });
    assert_eq!(app.lr(), lr * 0.5);
}
