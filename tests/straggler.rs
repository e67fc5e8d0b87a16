//! Straggler warnings end to end: the real binary on 3 CPU workers (more than this machine's
//! cores, as in CI), with and without an injected slow rank or slow input. Runs one at a time:
//! in parallel they would be each other's stragglers.

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A compute-bound run (a few ms of compute per step, so a 2x slow rank is well above the
/// 2 ms noise floor); returns the log and the metrics records.
fn run(dir: &Path, extra: &[&str]) -> (String, Vec<serde_json::Value>) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let metrics = dir.join(format!("m{}.jsonl", extra.join("").replace(':', "_")));
    let o = Command::new(env!("CARGO_BIN_EXE_mgtop-train"))
        .current_dir(dir)
        .args([
            "--headless",
            "--devices",
            "cpu:3",
            "--model",
            "mlp:1024",
            "--data",
            "synthetic:6000,784,10",
            "--batch-per-replica",
            "128",
            "--steps",
            "100",
            "--log-every",
            "1000",
            "--checkpoint-dir",
            "ck",
            "--metrics-out",
        ])
        .arg(&metrics)
        .args(extra)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{log}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let records = std::fs::read_to_string(&metrics)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (log, records)
}

fn warnings(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains(" WARN ")).collect()
}

/// The straggler warnings, after checking that no warning of any kind names another rank.
fn straggler_warnings(log: &str, rank: usize) -> Vec<&str> {
    for w in warnings(log) {
        assert!(
            w.contains(&format!("rank {rank} ")),
            "a warning about another rank: {log}"
        );
    }
    warnings(log)
        .into_iter()
        .filter(|l| l.contains("WARN straggler:"))
        .collect()
}

#[test]
fn a_slow_rank_is_named_within_100_steps_and_nobody_else_is() {
    let dir = tempfile::tempdir().unwrap();
    let (log, records) = run(dir.path(), &["--slow-rank", "1:2.0"]);
    let w = straggler_warnings(&log, 1);
    assert_eq!(w.len(), 1, "exactly one warning, at onset: {log}");
    assert!(w[0].contains("straggler: rank 1 is"), "{log}");
    assert!(
        w[0].contains("likely cause: injected (--slow-rank 1:2)"),
        "{log}"
    );
    let events: Vec<_> = records
        .iter()
        .filter(|r| r["kind"] == "straggler")
        .collect();
    assert_eq!(events.len(), 1, "{records:?}");
    assert_eq!(events[0]["rank"], 1);
    assert!(events[0]["step"].as_u64().unwrap() <= 100);
    assert!(
        events[0]["slowdown"].as_f64().unwrap() > 1.3,
        "{:?}",
        events[0]
    );
}

#[test]
fn the_same_run_without_a_fault_warns_about_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let (log, records) = run(dir.path(), &[]);
    assert!(warnings(&log).is_empty(), "{log}");
    assert!(!records
        .iter()
        .any(|r| r["kind"] == "straggler" || r["kind"] == "degraded"));
}

#[test]
fn slow_input_on_one_rank_is_explained_as_data_bound() {
    let dir = tempfile::tempdir().unwrap();
    let (log, records) = run(dir.path(), &["--slow-data", "1:20"]);
    let w = straggler_warnings(&log, 1);
    assert_eq!(w.len(), 1, "{log}");
    assert!(
        w[0].contains("rank 1") && w[0].contains("likely cause: data-bound"),
        "{log}"
    );
    assert!(w[0].contains("--prefetch"), "the fix is suggested: {log}");
    let ev = records.iter().find(|r| r["kind"] == "straggler").unwrap();
    assert_eq!(
        (ev["rank"].as_u64(), ev["cause"].as_str()),
        (Some(1), Some("data-bound"))
    );
}

#[test]
fn bad_fault_flags_are_refused_with_the_fix() {
    for (args, needle) in [
        (["--slow-rank", "5:2"], "no rank 5"),
        (["--slow-rank", "1:0.5"], "use 1 to 100"),
        (["--slow-rank", "one"], "RANK:FACTOR"),
        (["--slow-data", "0:-3"], "0 or more milliseconds"),
        (["--stall-timeout", "0"], "--stall-timeout"),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_mgtop-train"))
            .args(["--headless", "--devices", "cpu:2", "--steps", "1"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// A run whose every rank waits for its input (one CPU worker, each batch 5 ms late): no rank
/// is slower than another, so no straggler, but the run is said input-bound once, in the log
/// and in the metrics file, naming the fix.
#[test]
fn a_run_whose_every_rank_waits_for_input_is_said_input_bound() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_mgtop-train"))
        .current_dir(dir.path())
        .args([
            "--headless",
            "--devices",
            "cpu:1",
            "--slow-data",
            "0:5",
            "--steps",
            "120",
            "--log-every",
            "1000",
            "--checkpoint-dir",
            "ck",
            "--metrics-out",
            "m.jsonl",
        ])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{log}");
    let said = warnings(&log);
    assert_eq!(said.len(), 1, "{log}");
    assert!(
        said[0].contains("WARN input-bound: every rank waits for its input")
            && said[0].contains("--loader-threads"),
        "{log}"
    );
    let kinds: Vec<String> = std::fs::read_to_string(dir.path().join("m.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["type"] == "event")
        .filter_map(|r| r["kind"].as_str().map(String::from))
        .collect();
    assert!(kinds.iter().any(|k| k == "input_bound"), "{kinds:?}");
}
