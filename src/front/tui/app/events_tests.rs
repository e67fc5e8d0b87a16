//! The events panel and view: what stays on it, how it scrolls, what is named there.

use super::tests::{control, key, running};
use super::*;
use crate::engine::events::Applied;
use ratatui::crossterm::event::{KeyCode, KeyEvent};

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

#[test]
fn a_run_of_very_many_epochs_keeps_bounded_points_the_newest_whole_and_the_best() {
    use super::events::POINTS;
    let mut app = running(false);
    let n = 10 * POINTS as u64;
    // the best validation early on, among the points thinned first
    let accuracy = |e: u64| if e == 2 { 0.99 } else { 0.5 };
    for epoch in 1..=n {
        app.apply(AppEvent::Engine(Event::EpochDone {
            epoch,
            step: epoch * 10,
            train_loss: 0.5,
            val_loss: Some(0.4),
            val_accuracy: Some(accuracy(epoch)),
            elapsed: Duration::ZERO,
        }));
    }
    assert!(app.epochs.len() < 2 * POINTS, "{}", app.epochs.len());
    assert!(app.validations.len() < 2 * POINTS);
    // the table's newest rows all there, in order; the chart's first and best still drawn
    let newest: Vec<u64> = app.epochs[app.epochs.len() - POINTS..]
        .iter()
        .map(|e| e.epoch)
        .collect();
    assert_eq!(newest, (n - POINTS as u64 + 1..=n).collect::<Vec<_>>());
    assert_eq!(app.epochs[0].epoch, 1);
    assert!(app.epochs.iter().any(|e| e.epoch == 2));
    assert_eq!(app.val_accuracy(), (Some(0.5), Some(0.99)));
    // a run at its best all along (100% on a small set): bounded all the same
    let mut app = running(false);
    for epoch in 1..=n {
        app.apply(AppEvent::Engine(Event::EpochDone {
            epoch,
            step: epoch,
            train_loss: 0.5,
            val_loss: Some(0.4),
            val_accuracy: Some(1.0),
            elapsed: Duration::ZERO,
        }));
    }
    assert!(app.epochs.len() < 2 * POINTS, "{}", app.epochs.len());
    assert!(app.validations.len() < 2 * POINTS);
}

#[test]
fn a_new_theme_is_named_until_the_next_key() {
    let mut app = running(false);
    assert_eq!(app.handle_key(key('t')), Some(Action::NextTheme));
    app.apply(AppEvent::Theme("light".into()));
    assert_eq!(app.flash.as_deref(), Some("theme: light"));
    app.handle_key(key('w'));
    assert_eq!(app.flash, None);
}

/// `running` as an attached client sees it.
#[test]
fn the_events_view_scrolls_back_and_stays_on_its_entries() {
    let mut app = running(false);
    for i in 0..50 {
        app.apply(AppEvent::Notice(Level::Info, format!("note {i}")));
    }
    let newest = app.log.len();
    // outside the events view the arrows do nothing
    app.handle_key(KeyEvent::from(KeyCode::Down));
    assert_eq!(app.log_scroll, 0);
    app.view = View::Log;
    // the view measures its pages as it draws them: 24 rows less the header, footer and
    // borders show 18 one-line entries
    let theme = crate::front::tui::theme::Theme::embedded("dark").unwrap();
    let draw = |app: &App, w: u16| {
        let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(w, 24)).unwrap();
        t.draw(|f| crate::front::tui::render::render(f, app, &theme))
            .unwrap();
        t.backend().to_string()
    };
    draw(&app, 80);
    app.handle_key(KeyEvent::from(KeyCode::Down));
    app.handle_key(key('j'));
    assert_eq!(app.log_scroll, 2);
    draw(&app, 80);
    app.handle_key(KeyEvent::from(KeyCode::PageDown));
    assert_eq!(app.log_scroll, 20);
    // a new event keeps the same entries on screen
    app.apply(AppEvent::Notice(Level::Info, "newer".into()));
    assert_eq!(app.log_scroll, 21);
    // the oldest page, its rows full; no further
    draw(&app, 80);
    app.handle_key(KeyEvent::from(KeyCode::End));
    assert_eq!(app.log_scroll, newest + 1 - 18);
    app.handle_key(key('j'));
    app.handle_key(KeyEvent::from(KeyCode::PageDown));
    assert_eq!(app.log_scroll, newest + 1 - 18);
    let screen = draw(&app, 80);
    assert!(screen.contains("newer above (↑ PgUp Home)"), "{screen}");
    // back a page, then to the newest
    app.handle_key(KeyEvent::from(KeyCode::PageUp));
    assert_eq!(app.log_scroll, newest + 1 - 36);
    let screen = draw(&app, 80);
    assert!(screen.contains("newer above, 18 older below"), "{screen}");
    app.handle_key(KeyEvent::from(KeyCode::Home));
    assert_eq!(app.log_scroll, 0);
    app.handle_key(KeyEvent::from(KeyCode::Up));
    assert_eq!(app.log_scroll, 0);
    let screen = draw(&app, 80);
    assert!(screen.contains("older below (↓ PgDn End)"), "{screen}");
    // entries of two lines: a page down shows the entry after the last shown, none skipped
    for i in 0..20 {
        app.apply(AppEvent::Notice(
            Level::Info,
            format!("long {i} | {}", "word ".repeat(12)),
        ));
    }
    draw(&app, 60);
    let shown = app.log_fit.get().shown;
    assert_eq!(shown, 9, "18 rows of two-line entries");
    app.handle_key(KeyEvent::from(KeyCode::PageDown));
    let screen = draw(&app, 60);
    assert_eq!(app.log_scroll, 9);
    assert!(
        screen.contains("long 10 |") && !screen.contains("long 11 |"),
        "{screen}"
    );
    // a device's number leaves for its detail in the overview
    app.handle_key(key('2'));
    assert_eq!((app.view, app.focus), (View::Overview, Some(1)));
}

#[test]
fn the_start_up_notes_are_events_here_and_on_a_screen_read_back_from_the_metrics() {
    let mut info = RunInfo::example(1);
    info.model_notes = vec!["classifier head re-initialised for 2 classes".into()];
    info.data_notes = vec!["3 classes (ant, bee, wasp)".into()];
    // (what `view` and `attach` rebuild from the run record)
    let record = crate::observe::metrics::records::run(&info);
    let read = crate::observe::metrics::run_info(&record).unwrap();
    for info in [info, read] {
        let app = App::new(info, false);
        let texts: Vec<&str> = app.log.iter().map(|l| l.text.as_str()).collect();
        for note in [
            "note: classifier head re-initialised for 2 classes",
            "note: 3 classes (ant, bee, wasp)",
        ] {
            assert!(texts.contains(&note), "{texts:?}");
        }
    }
}
