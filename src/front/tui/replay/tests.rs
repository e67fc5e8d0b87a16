//! Screens fed from records (`view`'s metrics file, `attach`'s socket) show what a screen fed
//! from the run itself shows.

use std::time::Duration;

use super::apply_record;
use crate::engine::events::{Ending, Event};
use crate::front::tui::app::{App, AppEvent, Summary};
use crate::front::tui::demo;
use crate::observe::metrics::{record_line, records, Record};
use crate::observe::monitor::{Monitor, StepRow};

#[test]
fn a_recorded_straggler_marks_its_device_in_view_and_attach_as_it_did_live() {
    let mut live = demo::app_with_straggler(3, 10, 100, 1);
    let recorded: Vec<_> = live.new_warnings.drain(..).collect();
    assert_eq!(recorded.len(), 1);
    // a screen fed from the file or the socket: no detector of its own
    let mut seen = App::new(demo::info(3), true);
    let line = |w: &crate::observe::straggler::Warning| {
        records::warning(w, Duration::from_secs(3)).to_string()
    };
    let rec = record_line(line(&recorded[0].0).as_bytes(), 3)
        .unwrap()
        .unwrap();
    apply_record(&mut seen, rec);
    assert_eq!(seen.devices[1].warnings, live.devices[1].warnings);
    assert!(seen.devices[0].warnings.is_empty() && seen.devices[2].warnings.is_empty());
    let cleared = crate::observe::straggler::Warning::StragglerCleared { rank: 1, step: 200 };
    let rec = record_line(line(&cleared).as_bytes(), 3).unwrap().unwrap();
    apply_record(&mut seen, rec);
    assert!(seen.devices[1].warnings.is_empty());
    assert!(seen
        .log
        .iter()
        .any(|l| l.text.contains("straggler: rank 1")));
}

#[test]
fn a_screen_given_only_some_rows_sums_the_whole_run_as_the_local_one_does() {
    // a run whose every 10th step is slow (as the steps that check the replicas are)
    let mut monitor = Monitor::new(2);
    let mut rows = Vec::new();
    for s in 1..=100 {
        for r in 0..2 {
            let mut st = demo::step(r, 2, s);
            if s % 10 == 0 {
                st.compute *= 5;
                st.step_time += st.compute;
            }
            rows.extend(monitor.on_step(st));
        }
    }
    assert_eq!(rows.len(), 100);
    let summary = |rows: &[StepRow]| {
        let mut app = App::new(demo::info(2), true);
        for row in rows {
            app.apply(AppEvent::Row {
                row: row.clone(),
                samples_per_sec: None,
            });
        }
        app.apply(AppEvent::Engine(Event::Finished {
            step: 100,
            ending: Ending::Completed,
        }));
        app.summary.unwrap()
    };
    let every = summary(&rows);
    // as a metrics file of --log-every 10 has them, through its records
    let logged: Vec<StepRow> = rows
        .iter()
        .filter(|r| r.step % 10 == 0)
        .map(|r| {
            let line = records::step(r, None, None).to_string();
            match record_line(line.as_bytes(), 2).unwrap() {
                Some(Record::Step { row, .. }) => row,
                other => panic!("{other:?}"),
            }
        })
        .collect();
    let some = summary(&logged);
    let close =
        |a: Option<f64>, b: Option<f64>| (a.unwrap() - b.unwrap()).abs() < 1e-6 * b.unwrap();
    let share = |s: &Summary, i: usize| s.time_shares.map(|s| s[i]);
    assert!(
        close(some.mean_samples_per_sec, every.mean_samples_per_sec),
        "{some:?} vs {every:?}"
    );
    assert!(close(share(&some, 0), share(&every, 0)));
    assert!(close(share(&some, 3), share(&every, 3)));
    // the old way, the logged rows alone, is far off
    let mut bare = logged.clone();
    bare.iter_mut().for_each(|r| r.totals = None);
    let off = summary(&bare).mean_samples_per_sec.unwrap();
    assert!(off < 0.7 * every.mean_samples_per_sec.unwrap());
}

#[test]
fn the_smoothed_loss_of_a_screen_given_every_50th_row_follows_the_run_as_the_local_one() {
    let mut monitor = Monitor::new(1);
    let mut rows = Vec::new();
    for s in 1..=1000 {
        rows.extend(monitor.on_step(demo::step(0, 1, s)));
    }
    // a loss falling steadily from 2.0 to 0.2
    rows.iter_mut()
        .for_each(|r| r.loss = 2.0 - 0.0018 * r.step as f32);
    let smoothed = |rows: &[StepRow]| {
        let mut app = App::new(demo::info(1), true);
        for row in rows {
            app.apply(AppEvent::Row {
                row: row.clone(),
                samples_per_sec: None,
            });
        }
        app.loss_smooth.last().unwrap().1
    };
    let every = smoothed(&rows);
    let logged: Vec<StepRow> = rows.iter().filter(|r| r.step % 50 == 0).cloned().collect();
    let some = smoothed(&logged);
    // (weighing each row as one step, the file's line lagged 1.7 behind: 0.43 for 0.23)
    assert!((some - every).abs() < 0.05, "{some} vs {every}");
}
