//! Screens fed from records (`view`'s metrics file, `attach`'s socket) show what a screen fed
//! from the run itself shows.

use std::time::Duration;

use crate::engine::events::{Ending, Event};
use crate::engine::RunInfo;
use crate::front::tui::app::{App, AppEvent, Summary};
use crate::front::tui::demo;
use crate::observe::metrics::{record_line, records, Record};
use crate::observe::monitor::{Monitor, StepRow};

#[test]
fn a_recorded_clearing_lowers_the_straggler_s_flag() {
    let mut seen = demo::app_with_straggler(3, 10, 100, 1);
    assert_eq!(seen.devices[1].warnings.len(), 1);
    let cleared = crate::observe::straggler::Warning::StragglerCleared { rank: 1, step: 200 };
    let line = records::warning(&cleared, Duration::from_secs(3)).to_string();
    seen.apply_record(record_line(line.as_bytes(), 3).unwrap().unwrap());
    assert!(seen.devices[1].warnings.is_empty());
    assert!(seen
        .log
        .iter()
        .any(|l| l.text.contains("straggler: rank 1")));
}

#[test]
fn a_screen_given_only_some_rows_sums_the_whole_run_as_the_local_one_does() {
    // a run whose every 10th step is slow (as the steps that check the replicas are), with
    // central storage's host transfers
    let mut monitor = Monitor::new(2);
    let mut rows = Vec::new();
    for s in 1..=100 {
        for r in 0..2 {
            let mut st = demo::step(r, 2, s);
            st.transfer = st.compute / 4;
            st.step_time += st.transfer;
            if s % 10 == 0 {
                st.compute *= 5;
                st.step_time += st.compute;
            }
            rows.extend(monitor.on_step(st));
        }
    }
    assert_eq!(rows.len(), 100);
    let summary = |rows: &[StepRow]| {
        let mut app = App::new(RunInfo::example(2), true);
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
    // the transfers named apart, not in what the parts leave
    assert!(share(&every, 4).unwrap() > 0.1);
    assert!(close(share(&some, 4), share(&every, 4)));
    assert!(close(share(&some, 5), share(&every, 5)));
    // the old way, the logged rows alone, is far off
    let mut bare = logged.clone();
    bare.iter_mut().for_each(|r| r.totals = None);
    let off = summary(&bare).mean_samples_per_sec.unwrap();
    assert!(off < 0.7 * every.mean_samples_per_sec.unwrap());
}

/// Rows of a run of 1000 steps whose loss at step s is `loss(s)`, as its monitor makes them.
fn rows_of(loss: impl Fn(u64) -> f32) -> Vec<StepRow> {
    let mut monitor = Monitor::new(1);
    let mut rows = Vec::new();
    for s in 1..=1000 {
        let mut stats = demo::step(0, 1, s);
        stats.loss = loss(s);
        rows.extend(monitor.on_step(stats));
    }
    rows
}

#[test]
fn the_smoothed_loss_of_a_screen_given_every_50th_row_follows_the_run_as_the_local_one() {
    // a loss falling steadily from 2.0 to 0.2
    let mut rows = rows_of(|s| 2.0 - 0.0018 * s as f32);
    let smoothed = |rows: &[StepRow]| {
        let mut app = App::new(RunInfo::example(1), true);
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
    assert!((some - every).abs() < 1e-9, "{some} vs {every}");
    // a file from before rows carried the run's smoothed loss: each row weighs as the steps
    // since the one before would (weighing each as one step, the line lagged 1.7 behind: 0.43
    // for 0.23)
    rows.iter_mut().for_each(|r| {
        r.totals = r.totals.map(|t| crate::observe::monitor::Totals {
            smoothed_loss: None,
            ..t
        })
    });
    let logged: Vec<StepRow> = rows.iter().filter(|r| r.step % 50 == 0).cloned().collect();
    let (every, some) = (smoothed(&rows), smoothed(&logged));
    assert!((some - every).abs() < 0.05, "{some} vs {every}");
}

#[test]
fn an_attached_screen_s_smoothed_loss_is_the_run_s_whatever_rows_it_gets() {
    // a set learned by heart: losses near 0, a spike every 7th step
    let rows = rows_of(|s| if s % 7 == 0 { 1e-2 } else { 1e-9 });
    let shown = |rows: &mut dyn Iterator<Item = &StepRow>| {
        let mut app = App::new(RunInfo::example(1), true);
        for row in rows {
            // through the record, as the socket and the file carry it
            let line = records::step(row, None, None).to_string();
            app.apply_record(record_line(line.as_bytes(), 1).unwrap().unwrap());
        }
        app.loss_smooth.last().unwrap().1
    };
    let every = shown(&mut rows.iter());
    let sampled = shown(&mut rows.iter().filter(|r| r.step % 15 == 0 || r.step == 1000));
    assert_eq!(sampled, every);
    assert!(every > 1e-4, "{every}");
}
