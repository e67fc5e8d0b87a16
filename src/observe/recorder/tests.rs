use super::*;
use crate::engine::events::Ending;
use crate::observe::live::hub::Next;

fn row(step: u64) -> StepRow {
    StepRow::example(step)
}

/// A recorder writing the metrics file `path` alone.
fn to_file(path: &std::path::Path, every: LogEvery) -> Recorder {
    Recorder::new(vec![MetricsWriter::create(path).unwrap()], None, every)
}

/// The `step` numbers of the step lines among `lines`.
fn steps(lines: &[String]) -> Vec<u64> {
    lines
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["type"] == "step")
        .map(|v| v["step"].as_u64().unwrap())
        .collect()
}

/// Each record of the metrics file `path`, in order: its event kind (its type where it has
/// none) and its step.
fn kinds_and_steps(path: &std::path::Path) -> Vec<(String, u64)> {
    let text = std::fs::read_to_string(path).unwrap();
    (text.lines())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|v| {
            let kind = v["kind"].as_str().or(v["type"].as_str()).unwrap();
            (kind.to_string(), v["step"].as_u64().unwrap())
        })
        .collect()
}

fn take(hub: &LiveHub, id: u64) -> Vec<String> {
    match hub.next(id, Duration::ZERO) {
        Next::Lines(v) => v.iter().map(|l| l.as_str().to_string()).collect(),
        _ => Vec::new(),
    }
}

#[test]
fn steps_go_to_files_every_log_every_and_to_clients_at_most_20_a_second_newest_last() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.jsonl");
    let hub = LiveHub::new(Instant::now());
    let mut r = Recorder::new(
        vec![MetricsWriter::create(&path).unwrap()],
        Some(hub.clone()),
        LogEvery::Steps(10),
    );
    let info = crate::observe::metrics::run_info(&serde_json::json!({
        "devices": ["cpu0", "cpu1"], "name": "t", "data": "d", "model": "m",
        "params": 1, "per_replica": 32,
    }))
    .unwrap();
    assert!(r.run_start(&info).is_empty());
    let id = hub.join().unwrap();
    take(&hub, id);
    let t0 = Instant::now();
    for s in 1..=1000 {
        assert!(r.step(&row(s), Some(1.0)).1.is_empty());
    }
    r.catch_up();
    let fast = t0.elapsed();
    let got = steps(&take(&hub, id));
    // one step per interval at most (a slow machine may take several intervals)
    let most = 2 + (fast.as_millis() / LIVE_STEP_INTERVAL.as_millis()) as usize;
    assert!(!got.is_empty() && got.len() <= most, "{got:?} in {fast:?}");
    // the newest step, held back, goes out once its time has come
    std::thread::sleep(LIVE_STEP_INTERVAL);
    r.catch_up();
    assert_eq!(steps(&take(&hub, id)), [1000]);
    // the end takes the step held back with it, before itself
    r.step(&row(1001), None);
    r.event(
        &Event::Finished {
            step: 1001,
            ending: Ending::Completed,
        },
        Duration::from_secs(1),
    );
    let last = take(&hub, id);
    assert_eq!(steps(&last), [1001]);
    assert!(last.last().unwrap().contains("\"end\""));
    assert!(r.flush().is_empty());
    let file = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<String> = file.lines().map(String::from).collect();
    // every tenth, and the last (whatever --log-every, the run's end logs it)
    let logged: Vec<u64> = (1..=100).map(|i| i * 10).chain([1001]).collect();
    assert_eq!(steps(&lines), logged);
    assert!(lines[0].contains("\"run\"") && lines.last().unwrap().contains("\"end\""));
}

#[test]
fn without_a_client_no_step_is_held_back() {
    let hub = LiveHub::new(Instant::now());
    let mut r = Recorder::new(Vec::new(), Some(hub.clone()), LogEvery::Steps(50));
    for s in 1..=100 {
        r.step(&row(s), None);
    }
    assert!(r.pending.is_none());
}

#[test]
fn nothing_follows_an_end_record_nor_a_second_end() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.jsonl");
    let mut r = to_file(&path, LogEvery::Steps(1));
    let end = Event::Finished {
        step: 7,
        ending: Ending::Stopped,
    };
    r.event(&end, Duration::from_secs(1));
    // a second signal as the run ends, and a sample the UI records after
    files::Files::quit(&r.files);
    r.telemetry(Duration::from_secs(2), &[], None);
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.contains(r#""status":"stopped""#), "{text}");
    // a process quitting first: its end, then nothing, not the run's
    let path = dir.path().join("q.jsonl");
    let mut r = to_file(&path, LogEvery::Steps(1));
    r.step(&row(3), None);
    files::Files::quit(&r.files);
    r.event(&end, Duration::from_secs(1));
    let text = std::fs::read_to_string(&path).unwrap();
    let last = text.lines().last().unwrap();
    assert!(
        last.contains(r#""status":"quit""#) && last.contains(r#""step":3"#),
        "{text}"
    );
}

#[test]
fn a_file_lost_to_a_full_disk_ends_with_the_gap_named_the_best_validation_and_the_newest_step() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.jsonl");
    let mut r = to_file(&path, LogEvery::Steps(1));
    let validated = |step, val_accuracy| Event::Validated {
        step,
        epochs: 1.0,
        val_loss: 0.5,
        val_accuracy,
        elapsed: Duration::from_secs(step),
    };
    let t = Duration::from_secs;
    for s in 1..=10 {
        r.step(&row(s), None);
    }
    r.event(&validated(5, 0.6), t(5));
    r.flush();
    // a write fails at step 11 (the disk is full): the file is written no more
    {
        let mut files = r.files();
        let w = files.writers.pop().unwrap();
        files.lost.push(w);
    }
    for s in 11..=20 {
        r.step(&row(s), None);
        if s == 15 || s == 18 {
            r.event(&validated(s, if s == 15 { 0.8 } else { 0.7 }), t(s));
        }
        if s == 16 {
            let epoch = Event::EpochDone {
                epoch: 1,
                step: s,
                train_loss: 0.4,
                val_loss: Some(0.5),
                val_accuracy: Some(0.75),
                elapsed: t(s),
            };
            r.event(&epoch, t(s));
        }
    }
    r.event(
        &Event::Finished {
            step: 20,
            ending: Ending::Completed,
        },
        t(20),
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<serde_json::Value> = (text.lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let n = lines.len();
    assert_eq!(
        steps(&text.lines().map(String::from).collect::<Vec<_>>())[9..],
        [10, 20]
    );
    let gap = &lines[n - 5];
    assert_eq!(gap["kind"], "warning", "{text}");
    let message = gap["message"].as_str().unwrap();
    assert!(
        message.contains("lost the records after step 10")
            && message.contains("epochs, best validation and newest step follow"),
        "{message}"
    );
    // the best of the lost validations, the epoch, the newest step, in step order; the end
    let kind_step =
        |v: &serde_json::Value| (v["type"].as_str().unwrap().to_string(), v["step"].as_u64());
    let back: Vec<_> = lines[n - 4..].iter().map(kind_step).collect();
    let want = [("validation", 15), ("epoch", 16), ("step", 20), ("end", 20)];
    assert_eq!(back, want.map(|(k, s)| (k.to_string(), Some(s))));
    assert_eq!(lines[n - 1]["status"], "completed");
    // every line reads back as the views read it (the rows of `row`: no ranks)
    for l in text.lines().skip(1) {
        crate::observe::metrics::record_line(l.as_bytes(), 0).unwrap();
    }
}

#[test]
fn a_file_lost_early_in_a_run_of_very_many_epochs_gets_the_newest_back_said_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.jsonl");
    let mut r = to_file(&path, LogEvery::Steps(1));
    r.step(&row(1), None);
    r.flush();
    {
        let mut files = r.files();
        let w = files.writers.pop().unwrap();
        files.lost.push(w);
    }
    let epochs = 3 * super::files::EPOCHS_KEPT as u64;
    for epoch in 1..=epochs {
        let done = Event::EpochDone {
            epoch,
            step: 1 + epoch,
            train_loss: 0.4,
            val_loss: None,
            val_accuracy: None,
            elapsed: Duration::from_millis(epoch),
        };
        r.event(&done, Duration::from_millis(epoch));
    }
    let end = Event::Finished {
        step: 1 + epochs,
        ending: Ending::Completed,
    };
    r.event(&end, Duration::from_secs(9));
    let text = std::fs::read_to_string(&path).unwrap();
    let epoch_steps: Vec<u64> = (text.lines())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["type"] == "epoch")
        .map(|v| v["step"].as_u64().unwrap())
        .collect();
    let kept = super::files::EPOCHS_KEPT as u64;
    assert_eq!(
        epoch_steps,
        (epochs - kept + 2..=epochs + 1).collect::<Vec<_>>()
    );
    assert!(
        text.contains("the run's newest epochs follow"),
        "{}",
        &text[..text.len().min(2000)]
    );
}

/// A sink whose writes fail from step `from` on (a disk that filled).
struct FillsUp {
    from: u64,
}

impl Sink for FillsUp {
    fn step(&mut self, row: &StepRow, _: Option<f64>, _: bool) -> Result<(), String> {
        match row.step >= self.from {
            true => Err("cannot write tb/events (No space left on device)".into()),
            false => Ok(()),
        }
    }
    fn event(&mut self, _: &Event, _: Duration, _: bool) -> Result<(), String> {
        Ok(())
    }
    fn telemetry(
        &mut self,
        _: Duration,
        _: &[DeviceSample],
        _: Option<(u64, u64)>,
    ) -> Result<(), String> {
        Ok(())
    }
    fn flush(&mut self) -> Result<(), String> {
        Ok(())
    }
}

#[test]
fn a_sink_that_failed_is_said_again_at_the_end_with_where_it_stopped() {
    let mut r = Recorder::none().with(Box::new(FillsUp { from: 4 }));
    let said: Vec<String> = (1..=6).flat_map(|s| r.step(&row(s), None).1).collect();
    assert_eq!(
        said,
        ["warning: cannot write tb/events (No space left on device); no more will be written there"]
    );
    assert_eq!(
        r.flush(),
        ["warning: nothing was written there after step 3: cannot write tb/events (No space left on device)"]
    );
}

#[test]
fn auto_thins_fast_epochs_keeps_the_best_and_the_last_in_step_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.jsonl");
    let mut r = to_file(&path, LogEvery::Auto);
    // an epoch of 10 steps every millisecond; the best accuracy at epoch 333 (written with
    // the next record: it came too soon after epoch 300's); stopped at step 5015, mid-epoch
    // 502
    let ms = Duration::from_millis;
    for s in 1..=5015u64 {
        r.step(
            &StepRow {
                at: ms(s / 10),
                ..row(s)
            },
            None,
        );
        if s % 10 == 0 {
            let epoch = s / 10;
            let done = Event::epoch_example(epoch, s, if epoch == 333 { 0.9 } else { 0.5 });
            let logged = epoch <= 100 || epoch % 100 == 0;
            assert_eq!(r.event(&done, ms(epoch)).0, logged, "epoch {epoch}");
        }
    }
    let end = Event::Finished {
        step: 5015,
        ending: Ending::Stopped,
    };
    assert!(r.event(&end, ms(502)).0);
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<serde_json::Value> = (text.lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let epochs: Vec<u64> = (lines.iter())
        .filter(|v| v["type"] == "epoch")
        .map(|v| v["epoch"].as_u64().unwrap())
        .collect();
    let want: Vec<u64> = (1..=100).chain([200, 300, 333, 400, 500, 501]).collect();
    assert_eq!(epochs, want);
    // the last epoch's end (step 5010) before the last step's (5015), then the end
    let tail: Vec<(&str, u64)> = lines[lines.len() - 3..]
        .iter()
        .map(|v| (v["type"].as_str().unwrap(), v["step"].as_u64().unwrap()))
        .collect();
    assert_eq!(tail, [("epoch", 5010), ("step", 5015), ("end", 5015)]);
    let steps: Vec<u64> = (lines.iter().skip(1))
        .map(|v| v["step"].as_u64().unwrap())
        .collect();
    assert!(steps.is_sorted(), "{steps:?}");
}

#[test]
fn thinned_epochs_are_written_before_a_checkpoint_the_last_step_and_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.jsonl");
    let mut r = to_file(&path, LogEvery::Auto);
    let ms = Duration::from_millis;
    let epoch = |epoch: u64| Event::epoch_example(epoch, epoch * 10, 0.5);
    // an epoch every millisecond (thinned to every 100th after the first 100)
    let mut said = Vec::new();
    for e in 1..=150 {
        r.event(&epoch(e), ms(e));
        said.extend(r.take_late());
    }
    assert!(said.is_empty(), "{said:?}");
    // a checkpoint at step 1505: epoch 150 (step 1500) before it, said as late
    let checkpoint = Event::Checkpoint {
        step: 1505,
        path: "c".into(),
        best: None,
    };
    r.event(&checkpoint, ms(151));
    let late: Vec<Option<u64>> = r.take_late().iter().map(|(e, _)| e.step()).collect();
    assert_eq!(late, [Some(1500)]);
    // the run's last step (known from its row): epoch 170 before it
    for e in 151..=170 {
        r.event(&epoch(e), ms(e));
    }
    let last = StepRow {
        ends_at: Some(crate::engine::events::EndsAt {
            epoch: 1710,
            run: 1705,
        }),
        ..row(1705)
    };
    r.step(&last, None);
    // a failure after: epoch 171's end (thinned) before its error
    r.event(&epoch(171), ms(171));
    let failed = Event::Failed {
        rank: 0,
        step: 1711,
        message: "non-finite loss".into(),
    };
    r.event(&failed, ms(172));
    let first_100 = (1..=100).map(|e| ("epoch", e * 10));
    let want = first_100.chain([
        ("epoch", 1500),
        ("checkpoint", 1505),
        ("epoch", 1700),
        ("step", 1705),
        ("epoch", 1710),
        ("error", 1711),
    ]);
    let want: Vec<(String, u64)> = want.map(|(k, s)| (k.to_string(), s)).collect();
    assert_eq!(kinds_and_steps(&path), want);
}

#[test]
fn a_stops_checkpoint_follows_the_record_of_the_step_it_saved() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.jsonl");
    let mut r = to_file(&path, LogEvery::Steps(10));
    for s in 1..=25 {
        r.step(&row(s), None);
    }
    // a periodic checkpoint of a logged step, then a stop at step 25, between logged steps
    let checkpoint = |step| Event::Checkpoint {
        step,
        path: "c".into(),
        best: None,
    };
    r.event(&checkpoint(20), Duration::from_millis(21));
    r.event(&checkpoint(25), Duration::from_millis(26));
    let end = Event::Finished {
        step: 25,
        ending: Ending::Stopped,
    };
    r.event(&end, Duration::from_millis(27));
    let want = [
        ("step", 10),
        ("step", 20),
        ("checkpoint", 20),
        ("step", 25),
        ("checkpoint", 25),
        ("end", 25),
    ];
    let want: Vec<(String, u64)> = want.iter().map(|(k, s)| (k.to_string(), *s)).collect();
    assert_eq!(kinds_and_steps(&path), want);
}
