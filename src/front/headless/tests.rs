//! The log's lines: stamps, a stopped run's last step, fast epochs.

use super::*;
use crate::config::log_every::LogEvery;

#[test]
fn stamps_count_minutes_and_never_show_sixty_seconds() {
    let at = |ms| stamp(Duration::from_millis(ms));
    assert_eq!(at(0), "[00:00.00]");
    assert_eq!(at(59_999), "[00:59.99]");
    assert_eq!(at(60_000), "[01:00.00]");
    assert_eq!(at(754_321), "[12:34.32]");
    assert_eq!(at(6_000_000 + 1_500), "[100:01.50]");
}

/// The log of a run of `ranks` demo ranks stopped after step `last`, `events` at its end
/// (one logged step in four); `late`: the last rank's sample of the last step comes after
/// the events (its row completes after them).
fn stopped_log(ranks: usize, last: u64, events: &[Event], late: bool) -> Vec<String> {
    let lines = stamped_log(ranks, last, events, late);
    (lines.iter())
        .map(|l| l[l.find(' ').unwrap() + 1..].to_string())
        .collect()
}

/// `stopped_log`'s lines with their stamps.
fn stamped_log(ranks: usize, last: u64, events: &[Event], late: bool) -> Vec<String> {
    let mut out = Vec::new();
    let info = crate::engine::RunInfo::example(ranks);
    // (the samples come through `step`: no channel)
    let (_, steps) = crossbeam_channel::bounded(0);
    let metrics = Recorder::new(Vec::new(), None, LogEvery::Steps(4));
    let mut watch = Watch::new(&info, steps, metrics, Telemetry::of_steps(ranks));
    let mut log = Log::new(info, &mut out);
    let sample = |rank, step| crate::front::tui::demo::step(rank, ranks, step);
    for step in 1..=last {
        for rank in 0..ranks {
            if !(late && step == last && rank == ranks - 1) {
                watch.step(sample(rank, step));
            }
        }
    }
    let t = Duration::from_secs(60);
    for ev in events {
        watch.event(ev.clone(), t);
    }
    if late {
        watch.step(sample(ranks - 1, last));
    }
    let ending = crate::engine::events::Ending::Stopped;
    watch.event(Event::Finished { step: last, ending }, t);
    watch.end(t);
    log.show(watch.take());
    drop(log);
    let text = String::from_utf8(out).unwrap();
    text.lines().map(String::from).collect()
}

#[test]
fn stamps_never_go_back() {
    // (the last step's row completes after its checkpoint, stamped later, was said: the
    // row's line comes before the end, stamped no earlier than the checkpoint's)
    let checkpoint = Event::Checkpoint {
        step: 6,
        path: "ckpt".into(),
        best: None,
    };
    let lines = stamped_log(2, 6, &[checkpoint], true);
    let stamps: Vec<&str> = lines.iter().filter_map(|l| l.split(' ').next()).collect();
    assert!(stamps.windows(2).all(|w| w[0] <= w[1]), "{lines:#?}");
    assert!(lines.iter().any(|l| l.contains("] step 6 ")), "{lines:#?}");
}

#[test]
fn a_stopped_run_says_its_last_step_once_and_in_time_order() {
    let said = |lines: &[String]| -> Vec<String> {
        let words = |l: &String| l.split(" |").next().unwrap().to_string();
        lines.iter().map(words).collect()
    };
    // stopped between logged steps: the last step's line comes before the end
    let lines = stopped_log(2, 6, &[], false);
    assert_eq!(
        said(&lines)[..3],
        [
            "step 4 epoch 1/30",
            "step 6 epoch 1/30",
            "stopped at step 6"
        ]
    );
    // its checkpoint follows that line
    let path = std::path::PathBuf::from("ckpt");
    let checkpoint = Event::Checkpoint {
        step: 6,
        path,
        best: None,
    };
    let lines = stopped_log(2, 6, std::slice::from_ref(&checkpoint), false);
    assert_eq!(
        said(&lines)[1..3],
        ["step 6 epoch 1/30", "checkpoint at step 6: ckpt"]
    );
    // an epoch's end stands for its last step's line: none after it
    let epoch = Event::EpochDone {
        epoch: 1,
        step: 6,
        train_loss: 1.0,
        val_loss: None,
        val_accuracy: None,
        elapsed: Duration::from_secs(60),
    };
    for late in [false, true] {
        let lines = stopped_log(2, 6, &[epoch.clone(), checkpoint.clone()], late);
        let said = said(&lines);
        assert_eq!(said[0], "step 4 epoch 1/30");
        assert!(
            said[1].starts_with("epoch 1/30 done at step 6"),
            "{lines:?}"
        );
        assert_eq!(
            said[2..4],
            ["checkpoint at step 6: ckpt", "stopped at step 6"]
        );
    }
}

#[test]
fn fast_epochs_are_said_as_the_files_keep_them_and_the_last_before_the_end() {
    let mut out = Vec::new();
    let info = crate::engine::RunInfo::example(1);
    let (_, steps) = crossbeam_channel::bounded(0);
    let metrics = Recorder::new(Vec::new(), None, LogEvery::Auto);
    let mut watch = Watch::new(&info, steps, metrics, Telemetry::of_steps(1));
    let mut log = Log::new(info, &mut out);
    // an epoch a millisecond, each no better than the first; stopped after epoch 250
    let ms = Duration::from_millis;
    for epoch in 1..=250 {
        watch.event(Event::epoch_example(epoch, epoch * 2, 0.5), ms(epoch));
    }
    let ending = crate::engine::events::Ending::Stopped;
    watch.event(Event::Finished { step: 500, ending }, ms(251));
    watch.end(ms(251));
    log.show(watch.take());
    drop(log);
    let text = String::from_utf8(out).unwrap();
    let said: Vec<&str> = (text.lines())
        .filter_map(|l| l.split(" | ").next()?.split_once("] "))
        .map(|(_, words)| words)
        .collect();
    // (the first 100 all said)
    assert_eq!(
        said[98..103],
        [
            "epoch 99/30 done at step 198",
            "epoch 100/30 done at step 200",
            "epoch 200/30 done at step 400",
            "epoch 250/30 done at step 500",
            "stopped at step 500",
        ],
        "{text}"
    );
}
