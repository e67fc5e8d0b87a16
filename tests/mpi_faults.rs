//! Controls, signals and failures across processes under `mpirun` on this machine: every
//! process stops at the same step, and no failure leaves a hang. Built only with `--features
//! mpi`; skipped (loudly) where `mpirun` is missing, unless MGTOP_REQUIRE_MPI=1.
#![cfg(feature = "mpi")]

mod common;

use std::time::Duration;

use common::mpi::*;

/// A run long enough for a test, once it trains (a step logged); no periodic checkpoint comes
/// in the test's time: any checkpoint is a stop's.
fn training(dir: &std::path::Path) -> std::process::Child {
    let child = start_long_with(dir, 5.0, 1_000_000_007, &[]);
    let out = dir.join("out");
    common::run::wait_for("the run to be training", || {
        std::fs::read_to_string(&out)
            .ok()
            .filter(|l| l.contains("] step "))
    });
    child
}

#[test]
fn sigterm_to_mpirun_stops_every_process_with_a_checkpoint() {
    if !mpirun_found() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut child = training(tmp.path());
    // SAFETY: signalling our own child process
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = wait_exit(&mut child, Duration::from_secs(30));
    let err = std::fs::read_to_string(tmp.path().join("err")).unwrap();
    // mpirun's own exit status after a signal varies (0 or 1): the run ended, and it stopped
    // with a checkpoint (mpirun stops passing output on once signalled: the checkpoint itself
    // shows the stop)
    assert!(status.is_some(), "mpirun did not end\n{err}");
    weights(&tmp.path().join("run"));
    // process 0 speaks for the run; process 1 stays quiet
    assert_eq!(err.matches("stopping:").count(), 1, "{err}");
}

#[test]
fn sigterm_to_another_process_stops_the_run_as_one_to_process_0_does() {
    if !mpirun_found() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut child = training(tmp.path());
    let out = tmp.path().join("out");
    let victim = process_with_rank(tmp.path(), 1).expect("process 1 runs");
    // SAFETY: signalling a process this test started (through mpirun)
    unsafe { libc::kill(victim, libc::SIGTERM) };
    let status = wait_exit(&mut child, Duration::from_secs(30));
    let out = std::fs::read_to_string(&out).unwrap();
    assert!(status.is_some(), "mpirun did not end\n{out}");
    // the run stopped at a step with a checkpoint, said by process 0, which names who asked
    assert!(out.contains("stopped at step"), "{out}");
    assert!(
        out.contains("a signal to the process of rank 1 (or to the whole job")
            && out.contains("every process) asked to stop, with a checkpoint"),
        "{out}"
    );
    weights(&tmp.path().join("run"));
}

#[test]
fn a_failing_process_ends_the_run_with_its_error_and_no_hang() {
    if !mpirun_found() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut child = start_long(tmp.path(), &["--inject-panic", "1:500"]);
    let status = wait_exit(&mut child, Duration::from_secs(60));
    let err = std::fs::read_to_string(tmp.path().join("err")).unwrap();
    assert!(status.is_some_and(|s| !s.success()), "{status:?}\n{err}");
    assert!(
        err.contains("rank 1") && err.contains("injected fault"),
        "{err}"
    );
    // process 0's checkpoints are whole: the newest one reads back
    weights(&tmp.path().join("run"));
    // process 1 told process 0, which recorded it: the run is `failed`, its error in its file
    let metrics = std::fs::read_to_string(tmp.path().join("run/metrics.jsonl")).unwrap();
    let error = (metrics.lines())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["kind"] == "error");
    let error = error.expect("an error event in the metrics file");
    assert_eq!(error["rank"], 1, "{error}");
    let said = error["message"].as_str().unwrap_or_default();
    assert!(
        said.starts_with("process 1 failed: worker for rank 1 panicked at step 500"),
        "{error}"
    );
}

#[test]
fn a_killed_process_ends_the_run_without_a_hang() {
    if !mpirun_found() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut child = start_long(tmp.path(), &[]);
    wait_for_checkpoint(tmp.path());
    let victim = process_with_rank(tmp.path(), 1).expect("process 1 runs");
    // SAFETY: killing a process this test started (through mpirun)
    unsafe { libc::kill(victim, libc::SIGKILL) };
    let status = wait_exit(&mut child, Duration::from_secs(60));
    let err = std::fs::read_to_string(tmp.path().join("err")).unwrap();
    assert!(status.is_some_and(|s| !s.success()), "{status:?}\n{err}");
    weights(&tmp.path().join("run"));
    // mpirun's signal to process 0 is answered with where the run continues from, not only
    // with the promise of a checkpoint no step will reach
    assert!(err.contains("no checkpoint follows: --resume"), "{err}");
}

#[test]
fn a_stall_names_the_rank_behind_it_whichever_process_it_is_in() {
    if !mpirun_found() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut args = common_args(&tmp.path().join("run"), "adam", 1, 3);
    // process 1's second rank waits 1.5 s for each batch: its first rank waits for it inside
    // the process, process 0's ranks at the exchange between the processes
    let slow = ["--slow-data", "3:1500", "--stall-timeout", "0.5"];
    args.extend(slow.map(String::from));
    let out = run_processes(&[2, 2], &args);
    let log = String::from_utf8_lossy(&out.stdout);
    let stalls: Vec<&str> = log.lines().filter(|l| l.contains("stall:")).collect();
    assert!(!stalls.is_empty(), "{log}");
    for s in stalls {
        // before, process 0 knew only the other process's reported steps, and named both;
        // the fault injected there is named beside it
        assert!(
            s.ends_with(
                "rank(s) 3 did not reach the all-reduce (fault injected: --slow-data 3:1500)"
            ),
            "{log}"
        );
    }
}

#[test]
fn a_hung_process_is_taken_for_lost_after_its_patience() {
    if !mpirun_found() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // --stall-timeout 0.3: a peer is lost after 5 s (ten times that, but at least 5 s)
    let mut child = start_long_with(tmp.path(), 0.3, 200, &[]);
    wait_for_checkpoint(tmp.path());
    // a process that stops answering (a hang, or its network gone) without dying
    let victim = process_with_rank(tmp.path(), 1).expect("process 1 runs");
    // SAFETY: stopping a process this test started (through mpirun)
    unsafe { libc::kill(victim, libc::SIGSTOP) };
    let status = wait_exit(&mut child, Duration::from_secs(60));
    // SAFETY: as above; a stopped process the launcher failed to end would linger
    unsafe { libc::kill(victim, libc::SIGKILL) };
    let err = std::fs::read_to_string(tmp.path().join("err")).unwrap();
    assert!(status.is_some_and(|s| !s.success()), "{status:?}\n{err}");
    assert!(
        err.contains("error (process 0 on") && err.contains("stopped answering"),
        "{err}"
    );
    // on one machine process 0 sees why
    assert!(
        err.contains(&format!(
            "the process of rank(s) 1 (pid {victim}) is suspended on this machine"
        )),
        "{err}"
    );
    weights(&tmp.path().join("run"));
}

#[test]
fn controls_reach_every_process_and_a_long_pause_is_no_lost_peer() {
    if !mpirun_found() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut child = start_long_with(tmp.path(), 0.3, 200, &[]);
    wait_for_checkpoint(tmp.path());
    let mut c = common::run::Client::connect(&tmp.path().join("run/live.sock"));
    assert_eq!(c.control("pause", serde_json::json!({}))["ok"], true);
    c.until("the pause", |v| v["action"] == "pause");
    // paused for longer than a peer's patience (5 s): the processes keep answering each other
    std::thread::sleep(Duration::from_secs(6));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the run ended while paused"
    );
    assert_eq!(c.control("resume", serde_json::json!({}))["ok"], true);
    let r = c.control("batch_size", serde_json::json!({"per_replica": 16}));
    assert_eq!(r["ok"], true, "{r}");
    let applied = c.until("the new batch size", |v| v["action"] == "batch_size");
    // every rank of both processes trains at the new size from that step on
    let from = applied["step"].as_u64().unwrap();
    c.until("a step at the new size from both processes", |v| {
        v["type"] == "step"
            && v["step"].as_u64() > Some(from + 1)
            && v["per_rank"]
                .as_array()
                .is_some_and(|r| r.len() == 2 && r.iter().all(|s| s["samples"] == 16))
    });
    assert_eq!(
        c.control("stop", serde_json::json!({"checkpoint": true}))["ok"],
        true
    );
    let status = wait_exit(&mut child, Duration::from_secs(30));
    let out = std::fs::read_to_string(tmp.path().join("out")).unwrap();
    assert!(status.is_some_and(|s| s.success()), "{status:?}\n{out}");
    assert!(out.contains("stopped at step"), "{out}");
}
