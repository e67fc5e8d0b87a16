use super::*;
use crate::engine::events::Ending;
use crate::observe::live::hub::Next;

fn row(step: u64) -> StepRow {
    StepRow {
        step,
        epoch: 1,
        loss: 1.0,
        accuracy: 0.5,
        grad_norm: 1.0,
        lr: 1e-3,
        per_replica: 32,
        global_samples: 64,
        at: Duration::from_millis(step),
        progress: 0.0,
        ends_at: None,
        ranks: Vec::new(),
        totals: None,
    }
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
        10,
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
        assert!(r.step(&row(s), Some(1.0)).is_empty());
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
    let mut r = Recorder::new(Vec::new(), Some(hub.clone()), 50);
    for s in 1..=100 {
        r.step(&row(s), None);
    }
    assert!(r.pending.is_none());
}

#[test]
fn nothing_follows_an_end_record_nor_a_second_end() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.jsonl");
    let mut r = Recorder::new(vec![MetricsWriter::create(&path).unwrap()], None, 1);
    let end = Event::Finished {
        step: 7,
        ending: Ending::Stopped,
    };
    r.event(&end, Duration::from_secs(1));
    // a second signal as the run ends, and a sample the UI records after
    Files::quit(&r.files);
    r.telemetry(Duration::from_secs(2), &[], None);
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.contains(r#""status":"stopped""#), "{text}");
    // a process quitting first: its end, then nothing, not the run's
    let path = dir.path().join("q.jsonl");
    let mut r = Recorder::new(vec![MetricsWriter::create(&path).unwrap()], None, 1);
    r.step(&row(3), None);
    Files::quit(&r.files);
    r.event(&end, Duration::from_secs(1));
    let text = std::fs::read_to_string(&path).unwrap();
    let last = text.lines().last().unwrap();
    assert!(
        last.contains(r#""status":"quit""#) && last.contains(r#""step":3"#),
        "{text}"
    );
}
