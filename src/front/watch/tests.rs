use std::path::Path;
use std::time::Duration;

use super::{Seen, Watch};
use crate::config::log_every::LogEvery;
use crate::engine::events::{Applied, Ending, Event, StepStats};
use crate::engine::RunInfo;
use crate::front::tui::app::App;
use crate::front::tui::demo;
use crate::observe::metrics::{MetricsReader, MetricsWriter, Record};
use crate::observe::telemetry::Telemetry;
use crate::observe::Recorder;

/// A 3-rank run whose rank 1 works twice as long as the others from step 20 on, paused at
/// step 10, with an epoch's end at step 30, watched into the metrics file `path` (every step
/// in it); what the watch handed the frontend.
fn watched(path: &Path) -> Vec<Record> {
    let ranks = 3;
    let info = RunInfo::example(ranks);
    let (_, steps) = crossbeam_channel::bounded::<StepStats>(0);
    let recorder = Recorder::new(
        vec![MetricsWriter::create(path).unwrap()],
        None,
        LogEvery::Steps(1),
    );
    let mut watch = Watch::new(&info, steps, recorder, Telemetry::of_steps(ranks));
    let ms = |v: f64| Duration::from_secs_f64(v / 1e3);
    for s in 1..=120 {
        let at = ms(s as f64 * 20.5);
        for r in 0..ranks {
            let mut st = demo::step(r, ranks, s);
            let work = if r == 1 && s > 20 { 20.0 } else { 10.0 };
            st.compute = ms(work);
            st.sync_wait = ms(20.0 - work);
            st.step_time = ms(20.5);
            st.at = at;
            watch.step(st);
        }
        if s == 10 {
            for applied in [Applied::Paused, Applied::Resumed] {
                watch.event(Event::Control { step: 10, applied }, at);
            }
        }
        if s == 30 {
            let epoch = Event::EpochDone {
                epoch: 1,
                step: 30,
                train_loss: 0.5,
                val_loss: Some(0.4),
                val_accuracy: Some(0.9),
                elapsed: at,
            };
            watch.event(epoch, at);
        }
        if s % 25 == 0 {
            watch.sample(at);
        }
    }
    let end = Event::Finished {
        step: 120,
        ending: Ending::Completed,
    };
    watch.event(end, ms(2500.0));
    watch.end(ms(2600.0));
    let seen = taken(&mut watch);
    seen.into_iter()
        .map(|s| match s {
            Seen::Record(r) => r,
            Seen::Unlogged { t, event } => Record::Event { t, event },
            Seen::Note(n) => panic!("a note: {n}"),
            Seen::Late { event, .. } => panic!("every record is kept at once: {event:?}"),
            Seen::Step { .. } => unreachable!("made a record by `taken`"),
        })
        .collect()
}

/// What the watch saw, each row as the record a file holds.
fn taken(watch: &mut Watch) -> Vec<Seen> {
    let seen = watch.take().into_iter();
    seen.map(|s| match s {
        Seen::Step {
            row, samples_per_s, ..
        } => Seen::Record(Record::Step { row, samples_per_s }),
        other => other,
    })
    .collect()
}

fn kind(r: &Record) -> String {
    match r {
        Record::Step { row, .. } => format!("step {}", row.step),
        Record::Event { event, .. } => format!("{event:?}"),
        Record::Warning { kind, step, .. } => format!("{kind} at {step:?}"),
        Record::Telemetry { .. } => "telemetry".into(),
    }
}

#[test]
fn the_screen_of_a_run_shows_what_its_metrics_file_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.jsonl");
    let seen = watched(&path);
    let mut reader = MetricsReader::open(&path).unwrap();
    let mut read = Vec::new();
    while let Some(r) = reader.next().unwrap() {
        read.push(r);
    }
    // the same records in the same order (every step: --log-every 1), the straggler's
    // warning among them, the end last after a last telemetry sample
    let kinds: Vec<String> = seen.iter().map(kind).collect();
    assert_eq!(kinds, read.iter().map(kind).collect::<Vec<_>>());
    let said = |k: &str| kinds.iter().any(|x| x.starts_with(k));
    assert!(said("straggler at"), "{kinds:?}");
    assert_eq!(kinds[kinds.len() - 2], "telemetry");
    assert!(kinds.last().unwrap().starts_with("Finished"), "{kinds:?}");
    // a warning's words, its rank and step are the file's
    let warnings = |rs: &[Record]| -> Vec<Record> {
        let drop_t = |r: &Record| match r.clone() {
            Record::Warning {
                kind,
                rank,
                step,
                spikes,
                message,
                ..
            } => Some(Record::Warning {
                t: Duration::ZERO,
                kind,
                rank,
                step,
                spikes,
                message,
            }),
            _ => None,
        };
        rs.iter().filter_map(drop_t).collect()
    };
    assert_eq!(warnings(&seen), warnings(&read));
    // and a screen fed either way shows the same
    let screen = |rs: Vec<Record>| {
        let mut app = App::new(RunInfo::example(3), false);
        for r in rs {
            app.apply_record(r);
        }
        app
    };
    let (live, file) = (screen(seen), screen(read));
    assert_eq!(live.devices[1].warnings, file.devices[1].warnings);
    assert_eq!(live.devices[1].warnings.len(), 1);
    let texts = |app: &App| app.log.iter().map(|l| l.text.clone()).collect::<Vec<_>>();
    assert_eq!(texts(&live), texts(&file));
    let (a, b) = (live.summary.unwrap(), file.summary.unwrap());
    assert_eq!(
        (a.steps, a.best_val_accuracy),
        (b.steps, b.best_val_accuracy)
    );
}

/// `runs`' reading: no telemetry, of the steps the last before each other record and the
/// file's last; what the screen makes of it ends as the whole file's does.
#[test]
fn a_skimming_reader_gives_the_runs_course_and_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.jsonl");
    let seen = watched(&path);
    let read_with = |skim: bool| {
        let mut reader = MetricsReader::open(&path).unwrap();
        if skim {
            reader = reader.skimming();
        }
        let mut read = Vec::new();
        while let Some(r) = reader.next().unwrap() {
            read.push(r);
        }
        read
    };
    let (whole, skimmed) = (read_with(false), read_with(true));
    let kinds: Vec<String> = whole
        .iter()
        .map(kind)
        .filter(|k| k != "telemetry")
        .collect();
    let kept: Vec<String> = (kinds.iter().enumerate())
        .filter(|(i, k)| {
            !k.starts_with("step ") || kinds.get(i + 1).is_none_or(|n| !n.starts_with("step "))
        })
        .map(|(_, k)| k.clone())
        .collect();
    assert!(kept.len() < kinds.len() / 2, "{kinds:?}");
    assert_eq!(skimmed.iter().map(kind).collect::<Vec<_>>(), kept);
    let screen = |rs: Vec<Record>| {
        let mut app = App::watching(RunInfo::example(3));
        for r in rs {
            app.apply_record(r);
        }
        app
    };
    let (a, b) = (screen(whole), screen(skimmed));
    assert_eq!((a.step(), a.val_accuracy()), (b.step(), b.val_accuracy()));
    let (a, b) = (a.summary.unwrap(), b.summary.unwrap());
    assert_eq!((a.steps, a.ending), (b.steps, b.ending));
    drop(seen);
    // a file cut short mid-record (its writer gone), or damaged past some steps: the last of
    // those steps still comes, then where it stopped
    let text = std::fs::read_to_string(&path).unwrap();
    let last_step = |skim: bool| {
        let mut reader = MetricsReader::open(&path).unwrap();
        reader.writer_gone();
        if skim {
            reader = reader.skimming();
        }
        let read = std::iter::from_fn(|| reader.next().transpose());
        let steps = read.map_while(Result::ok).filter_map(|r| match r {
            Record::Step { row, .. } => Some(row.step),
            _ => None,
        });
        steps.last()
    };
    for cut in [
        text.len() - 20,
        text.rfind(r#""type":"telemetry""#).unwrap(),
    ] {
        std::fs::write(&path, &text[..cut]).unwrap();
        assert_eq!(last_step(true), last_step(false));
        assert!(last_step(true).is_some());
        let garbled = format!("{}{{garbage\n{}", &text[..cut], &text[cut..]);
        std::fs::write(&path, garbled).unwrap();
        assert_eq!(last_step(true), last_step(false));
    }
    // a line too long to be a record, after the steps
    let whole_lines = &text[..text[..text.len() - 1].rfind('\n').unwrap() + 1];
    std::fs::write(&path, format!("{whole_lines}{}\n", "x".repeat(2 << 20))).unwrap();
    assert_eq!(last_step(true), last_step(false));
    assert!(last_step(true).is_some());
    // a damaged step line is damage, as the whole reading finds it
    let cut = text.replacen(r#""type":"step"}"#, r#""type":"step""#, 1);
    assert_ne!(cut, text);
    std::fs::write(&path, cut).unwrap();
    let mut reader = MetricsReader::open(&path).unwrap().skimming();
    let damaged = std::iter::from_fn(|| reader.next().transpose()).find_map(Result::err);
    assert!(damaged.is_some());
}

/// The start of a run taken after its first steps' samples (a frontend slow to its first
/// event), then an epoch's end at step 1: step 2 comes after the epoch's end, as it ran.
#[test]
fn events_taken_late_come_between_the_steps_they_came_between() {
    let info = RunInfo::example(2);
    let (tx, steps) = crossbeam_channel::unbounded();
    let (events_tx, events) = crossbeam_channel::unbounded();
    let mut watch = Watch::new(&info, steps, Recorder::none(), Telemetry::of_steps(2));
    let started = Event::Started {
        ranks: 2,
        per_replica: 8,
        params: 10,
        start_step: 0,
        start_epoch: 0,
    };
    events_tx.send(started).unwrap();
    for r in 0..2 {
        tx.send(demo::step(r, 2, 1)).unwrap();
    }
    let epoch = Event::EpochDone {
        epoch: 1,
        step: 1,
        train_loss: 0.5,
        val_loss: None,
        val_accuracy: None,
        elapsed: Duration::from_secs(1),
    };
    events_tx.send(epoch).unwrap();
    for r in 0..2 {
        tx.send(demo::step(r, 2, 2)).unwrap();
    }
    // the frontend's event arm takes the start, its poll the rest
    let first = events.recv().unwrap();
    watch.event(first, Duration::from_secs(1));
    watch.collect(&events, Duration::from_secs(1));
    let order: Vec<String> = (taken(&mut watch).into_iter())
        .filter_map(|s| match s {
            Seen::Record(r) => Some(kind(&r)),
            _ => None,
        })
        .map(|k| k.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        order,
        ["Started {", "step 1", "EpochDone {", "step 2"],
        "{order:?}"
    );
}

#[test]
fn a_step_s_row_waits_for_every_rank_and_its_events_come_after_it() {
    let info = RunInfo::example(2);
    let (tx, steps) = crossbeam_channel::unbounded();
    let mut watch = Watch::new(&info, steps, Recorder::none(), Telemetry::of_steps(2));
    for s in 1..=3 {
        tx.send(demo::step(0, 2, s)).unwrap();
    }
    tx.send(demo::step(1, 2, 1)).unwrap();
    watch.collect(&crossbeam_channel::never(), Duration::ZERO);
    let steps = |seen: Vec<Seen>| -> Vec<u64> {
        (seen.into_iter())
            .filter_map(|s| match s {
                Seen::Record(Record::Step { row, .. }) => Some(row.step),
                _ => None,
            })
            .collect()
    };
    assert_eq!(steps(taken(&mut watch)), [1], "rank 1 has done step 1 only");
    // an event after step 2 comes after its row, not before (the samples waiting are taken
    // first), and the samples after it wait
    for s in 2..=3 {
        tx.send(demo::step(1, 2, s)).unwrap();
    }
    let path = std::path::PathBuf::from("c");
    watch.event(
        Event::Checkpoint {
            step: 2,
            path,
            best: None,
        },
        Duration::from_secs(1),
    );
    let seen = taken(&mut watch);
    assert!(
        matches!(&seen[..], [Seen::Record(Record::Step { row, .. }), Seen::Record(Record::Event { .. })] if row.step == 2)
    );
    watch.collect(&crossbeam_channel::never(), Duration::ZERO);
    assert_eq!(steps(taken(&mut watch)), [3]);
    // the end waits for the ranks' last samples
    let end = Event::Finished {
        step: 4,
        ending: Ending::Completed,
    };
    watch.event(end, Duration::from_secs(2));
    assert!(taken(&mut watch).is_empty(), "the end is kept back");
    tx.send(demo::step(0, 2, 4)).unwrap();
    tx.send(demo::step(1, 2, 4)).unwrap();
    drop(tx);
    watch.end(Duration::from_secs(3));
    let seen = taken(&mut watch);
    assert!(matches!(&seen[0], Seen::Record(Record::Step { row, .. }) if row.step == 4));
    // a last telemetry sample, stamped no later than the end it comes before
    assert!(
        matches!(&seen[1], Seen::Record(Record::Telemetry { t, .. }) if *t == Duration::from_secs(2))
    );
    assert!(matches!(
        &seen[2],
        Seen::Record(Record::Event {
            event: Event::Finished { .. },
            ..
        })
    ));
}

#[test]
fn a_stall_is_said_once_steps_stop_but_not_while_paused_nor_once_the_end_was_heard() {
    use crate::engine::heartbeat::{Beat, Phase};
    let mut info = RunInfo::example(2);
    info.stall_timeout = Duration::from_secs(5);
    let watch = || {
        let (_, steps) = crossbeam_channel::bounded::<StepStats>(0);
        Watch::new(&info, steps, Recorder::none(), Telemetry::of_steps(2))
    };
    let secs = Duration::from_secs;
    // rank 1 never reaches step 2's all-reduce
    let beat = |phase| Beat { step: 2, phase };
    let beats = [beat(Phase::Reduce), beat(Phase::Compute)];
    let stalls = |w: &mut Watch| -> Vec<String> {
        (w.take().into_iter())
            .filter_map(|s| match s {
                Seen::Record(Record::Warning { kind, message, .. }) if kind == "stall" => {
                    Some(message)
                }
                _ => None,
            })
            .collect()
    };
    let mut w = watch();
    let mut step = demo::step(0, 2, 1);
    step.at = secs(1);
    w.step(step.clone());
    w.step(StepStats { rank: 1, ..step });
    let control = |applied| Event::Control { step: 1, applied };
    w.event(control(Applied::Paused), secs(2));
    w.beats(secs(30), &beats);
    assert!(stalls(&mut w).is_empty(), "paused");
    w.event(control(Applied::Resumed), secs(30));
    w.beats(secs(33), &beats);
    assert!(
        stalls(&mut w).is_empty(),
        "the clock restarted at the resume"
    );
    w.beats(secs(36), &beats);
    let said = stalls(&mut w);
    assert_eq!(said.len(), 1);
    assert!(said[0].contains("rank(s) 1 did not reach"), "{said:?}");
    // a run whose end was heard is tearing down, not stalled
    let mut w = watch();
    let end = Event::Finished {
        step: 1,
        ending: Ending::Completed,
    };
    w.event(end, secs(2));
    w.beats(secs(60), &beats);
    w.sample(secs(60));
    assert!(w.take().is_empty());
}

#[test]
fn steps_whose_samples_were_dropped_are_said_once_and_counted_at_the_end() {
    let info = RunInfo::example(1);
    let (_, steps) = crossbeam_channel::bounded::<StepStats>(0);
    let mut watch = Watch::new(&info, steps, Recorder::none(), Telemetry::of_steps(1));
    let notes = |watch: &mut Watch| -> Vec<String> {
        (watch.take().into_iter())
            .filter_map(|s| match s {
                Seen::Note(n) => Some(n),
                _ => None,
            })
            .collect()
    };
    notes(&mut watch);
    for s in [1, 2, 3] {
        watch.step(demo::step(0, 1, s));
    }
    assert!(notes(&mut watch).is_empty(), "no step lost");
    for s in [6, 7, 10] {
        watch.step(demo::step(0, 1, s));
    }
    let said = notes(&mut watch);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].starts_with(
            "steps 4 to 5 have no row: the ranks stepped faster than this process could record them"
        ),
        "{said:?}"
    );
    watch.end(Duration::from_secs(1));
    assert_eq!(
        notes(&mut watch),
        ["4 steps in all have no row (their step samples were dropped: see above)"]
    );
}

#[test]
fn an_event_before_its_steps_row_waits_for_it_with_those_after_it() {
    // (another process's sample of step 2 comes after rank 0's check and checkpoint of it)
    let info = RunInfo::example(2);
    let (tx, steps) = crossbeam_channel::unbounded();
    let mut watch = Watch::new(&info, steps, Recorder::none(), Telemetry::of_steps(2));
    let t = Duration::from_secs;
    tx.send(demo::step(0, 2, 1)).unwrap();
    tx.send(demo::step(1, 2, 1)).unwrap();
    tx.send(demo::step(0, 2, 2)).unwrap();
    watch.collect(&crossbeam_channel::never(), t(1));
    watch.event(Event::InSync { step: 2, ranks: 2 }, t(1));
    let paused = Event::Control {
        step: 2,
        applied: Applied::Paused,
    };
    watch.event(paused, t(1));
    let said = |watch: &mut Watch| -> Vec<String> {
        (taken(watch).into_iter())
            .filter_map(|s| match s {
                Seen::Record(Record::Step { row, .. }) => Some(format!("step {}", row.step)),
                Seen::Record(Record::Event { event, .. }) => {
                    Some(format!("{event:?}").split(' ').next().unwrap().to_string())
                }
                _ => None,
            })
            .collect()
    };
    assert_eq!(said(&mut watch), ["step 1"]);
    tx.send(demo::step(1, 2, 2)).unwrap();
    watch.collect(&crossbeam_channel::never(), t(1));
    assert_eq!(said(&mut watch), ["step 2", "InSync", "Control"]);
    // one whose row never comes (rank 1's sample of step 3 dropped) before the next row
    tx.send(demo::step(0, 2, 3)).unwrap();
    watch.collect(&crossbeam_channel::never(), t(1));
    watch.event(Event::InSync { step: 3, ranks: 2 }, t(1));
    tx.send(demo::step(0, 2, 4)).unwrap();
    tx.send(demo::step(1, 2, 4)).unwrap();
    watch.collect(&crossbeam_channel::never(), t(1));
    assert_eq!(said(&mut watch), ["InSync", "step 4"]);
    // and two seconds at most where no row comes
    watch.event(Event::InSync { step: 9, ranks: 2 }, t(2));
    watch.sample(t(3));
    assert!(!said(&mut watch).contains(&"InSync".to_string()));
    watch.collect(&crossbeam_channel::never(), t(4));
    assert_eq!(said(&mut watch), ["InSync"]);
}
