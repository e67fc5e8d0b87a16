use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::{Outbox, BACKLOG};
use crate::engine::events::{Event, StepStats};
use crate::engine::RunInfo;
use crate::front::tui::demo;
use crate::front::watch::{Seen, Watch};
use crate::observe::metrics::Record;
use crate::observe::telemetry::Telemetry;
use crate::observe::Recorder;

/// What a 1-rank run's watch saw over `steps` steps (a row each), with a checkpoint
/// event after each step in `checkpoints`.
fn seen(steps: std::ops::RangeInclusive<u64>, checkpoints: &[u64]) -> Vec<Seen> {
    let info = RunInfo::example(1);
    let (_, rx) = crossbeam_channel::bounded::<StepStats>(0);
    let mut watch = Watch::new(&info, rx, Recorder::none(), Telemetry::of_steps(1));
    watch.take();
    for s in steps {
        watch.step(demo::step(0, 1, s));
        if checkpoints.contains(&s) {
            let path = "c".into();
            let at = Duration::from_secs(s);
            watch.event(
                Event::Checkpoint {
                    step: s,
                    path,
                    best: None,
                },
                at,
            );
        }
    }
    watch.take()
}

/// The steps of the rows in `seen`, events as `c<step>`, notes as `note`.
fn said(seen: &[Seen]) -> Vec<String> {
    let one = |s: &Seen| match s {
        Seen::Step { row, .. } => Some(row.step.to_string()),
        Seen::Record(Record::Event {
            event: Event::Checkpoint { step, .. },
            ..
        }) => Some(format!("c{step}")),
        Seen::Note(_) => Some("note".into()),
        _ => None,
    };
    seen.iter().filter_map(one).collect()
}

#[test]
fn a_display_that_keeps_up_gets_every_record_in_order() {
    let (out, taken) = crossbeam_channel::bounded(2);
    let mut outbox = Outbox::default();
    for part in [1..=3, 4..=6] {
        outbox.add(seen(part, &[2, 5]));
        outbox.offer(&out);
    }
    let got: Vec<Seen> = taken.try_iter().flatten().collect();
    assert_eq!(said(&got), ["1", "2", "c2", "3", "4", "5", "c5", "6"]);
}

/// An outbox whose display has not taken its first batch (step 1's row): the channel's one
/// slot is full, so what comes next waits in the backlog.
fn behind() -> (Outbox, Sender<Vec<Seen>>, Receiver<Vec<Seen>>) {
    let (out, taken) = crossbeam_channel::bounded(1);
    let mut outbox = Outbox::default();
    outbox.add(seen(1..=1, &[]));
    outbox.offer(&out);
    (outbox, out, taken)
}

#[test]
fn a_display_that_falls_behind_skips_rows_but_no_event_and_is_told_so() {
    let (mut outbox, out, taken) = behind();
    let steps = BACKLOG as u64;
    let checkpoints = [5, 1000, steps - 3];
    outbox.add(seen(2..=steps, &checkpoints));
    outbox.offer(&out);
    assert!(
        outbox.waiting.len() < 30,
        "thinned: {}",
        outbox.waiting.len()
    );
    assert_eq!(said(&taken.recv().unwrap()), ["1"]);
    // what it takes once it reads again: the note first, then the newest row before each event
    outbox.add(seen(steps + 1..=steps + 1, &[]));
    outbox.offer(&out);
    let got = taken.try_recv().unwrap();
    let last = steps.to_string();
    let c = steps - 3;
    assert_eq!(
        said(&got),
        [
            "note",
            "5",
            "c5",
            "1000",
            "c1000",
            &c.to_string(),
            &format!("c{c}"),
            &last,
            &(steps + 1).to_string()
        ]
    );
    let Seen::Note(note) = &got[0] else {
        unreachable!()
    };
    // (rows 2..=steps but 5, 1000, steps-3 and steps)
    let left_out = steps as usize - 1 - 4;
    assert!(
        note.starts_with(&format!(
            "{left_out} step rows not shown: this display fell behind"
        )),
        "{note}"
    );
    assert!(note.contains("the metrics file"), "{note}");
    // told once
    outbox.add(seen(steps + 2..=steps + 2, &[]));
    outbox.offer(&out);
    assert_eq!(said(&taken.try_recv().unwrap()), [(steps + 2).to_string()]);
}

#[test]
fn validations_piling_up_alone_are_thinned_but_the_best_and_every_checkpoint_stay() {
    let (mut outbox, _out, taken) = behind();
    // a validation every step (the best at step 7, long before the rest), a checkpoint at 9
    let steps = BACKLOG as u64 + 100;
    let mut all = seen(2..=steps, &[9]);
    for s in 2..=steps {
        let val_accuracy = if s == 7 { 0.99 } else { 0.5 };
        let v = Event::Validated {
            step: s,
            epochs: 1.0,
            val_loss: 1.0,
            val_accuracy,
            elapsed: Duration::ZERO,
        };
        all.push(Seen::Record(Record::Event {
            t: Duration::ZERO,
            event: v,
        }));
    }
    outbox.add(all);
    assert!(outbox.waiting.len() <= BACKLOG, "{}", outbox.waiting.len());
    assert!(outbox.left_out.others > 0);
    taken.recv().unwrap();
    // the run's end: the rest, however much, with the note first
    let (out, taken) = crossbeam_channel::bounded(1);
    outbox.hand_over(&out);
    let got = taken.recv().unwrap();
    assert!(
        matches!(&got[0], Seen::Note(n) if n.contains("epochs' ends and validations not shown"))
    );
    let best = got.iter().any(|s| {
        matches!(s, Seen::Record(Record::Event { event: Event::Validated { step: 7, val_accuracy, .. }, .. }) if *val_accuracy == 0.99)
    });
    assert!(best, "the best validation stays");
    assert!(
        said(&got).contains(&"c9".to_string()),
        "every checkpoint stays"
    );
}
