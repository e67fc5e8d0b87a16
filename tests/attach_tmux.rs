//! `attach` end to end in real terminals (tmux): a headless run in the background, a client
//! that shows it RUNNING with its loss, pauses it (the run's own log says so), changes its
//! batch on every rank, and detaches leaving it running; a second, read-only client at the
//! same time sees the same; a client that stops the run gets its checkpoint written. Skipped
//! where tmux is missing, unless MGTOP_REQUIRE_TMUX=1.

mod common;

use common::run::{Client, Run};
use common::tmux::{ended, start, tmux_available};
use serde_json::json;

fn header(s: &str) -> &str {
    s.lines().take(3).last().unwrap_or("")
}

#[test]
fn attach_shows_pauses_steers_and_detaches_leaving_the_run_going() {
    if !tmux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut run = Run::start(d, &["--steps", "100000000", "--name", "remote"]);
    let ui = tempfile::tempdir().unwrap();
    let run_dir = run.run_dir.display().to_string();
    let tmux = start("attach", ui.path(), &format!("attach '{run_dir}'"));
    tmux.wait("the run", |s| {
        s.contains("remote") && s.contains("RUNNING") && s.contains(" smoothed train ")
    });
    assert!(tmux.screen().contains(" ATTACHED "));

    tmux.keys(&["p"]);
    run.wait_log("the pause", |l| l.contains("paused before step"));
    tmux.wait("PAUSED", |s| {
        s.contains("PAUSED") && s.contains("paused before step")
    });

    // a second client, read-only, at the same time
    let ro_dir = tempfile::tempdir().unwrap();
    let ro = start(
        "attach-ro",
        ro_dir.path(),
        &format!("attach --readonly '{run_dir}'"),
    );
    ro.wait("the read-only client", |s| {
        s.contains("PAUSED") && s.contains("ATTACHED READ-ONLY")
    });
    ro.keys(&["p"]);
    ro.wait("the refusal", |s| s.contains("are disabled"));

    tmux.keys(&["]"]);
    tmux.wait("the pending batch", |s| {
        header(s).contains("32→64 next step")
    });
    tmux.keys(&["p"]);
    run.wait_log("the batch change", |l| {
        l.contains("batch per replica 32 -> 64")
    });
    for t in [&tmux, &ro] {
        t.wait("the new batch", |s| {
            s.contains("RUNNING") && header(s).contains("batch 64×2 = 128")
        });
    }

    tmux.keys(&["q"]);
    tmux.wait("the quit popup", |s| {
        s.contains("Detach, or stop training?")
    });
    tmux.keys(&["d"]);
    let s = tmux.wait("the shell", |s| s.contains("shell-back"));
    assert!(
        s.contains("detached at step") && s.contains("the run goes on"),
        "{s}"
    );
    assert_eq!(ended(ui.path()), ("EXIT=0".into(), true));
    // the run goes on: new steps after the detach
    let steps = run.log().lines().filter(|l| l.contains("| loss ")).count();
    run.wait_log("steps after the detach", |l| {
        l.lines().filter(|l| l.contains("| loss ")).count() > steps + 2
    });
    assert!(run.running());

    // the read-only client leaves at once
    ro.keys(&["q"]);
    ro.wait("the shell", |s| s.contains("shell-back"));
    assert_eq!(ended(ro_dir.path()), ("EXIT=0".into(), true));
    let mut c = Client::connect(&run.socket());
    assert_eq!(c.control("stop", json!({"checkpoint": false}))["ok"], true);
    assert!(run.wait_exit().success());
}

#[test]
fn a_client_that_stops_the_run_gets_its_checkpoint_and_its_summary() {
    if !tmux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut run = Run::start(dir.path(), &["--steps", "100000000"]);
    let ui = tempfile::tempdir().unwrap();
    // a directory of runs: its newest live one
    let tmux = start(
        "attach-stop",
        ui.path(),
        &format!("attach '{}'", dir.path().display()),
    );
    tmux.wait("the run", |s| s.contains("RUNNING"));
    tmux.keys(&["q"]);
    tmux.wait("the quit popup", |s| {
        s.contains("Detach, or stop training?")
    });
    tmux.keys(&["s"]);
    let s = tmux.wait("the shell", |s| s.contains("shell-back"));
    assert!(s.contains("stopped:") && s.contains("checkpoint: "), "{s}");
    assert_eq!(ended(ui.path()), ("EXIT=0".into(), true));
    assert!(run.wait_exit().success());
    assert_eq!(run.checkpoints(), 1);
    assert!(run.log().contains("checkpoint at step"));
}

#[test]
fn a_dropped_connection_is_said_and_q_leaves() {
    if !tmux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut run = Run::start(dir.path(), &["--steps", "100000000"]);
    let ui = tempfile::tempdir().unwrap();
    let target = run.run_dir.display().to_string();
    let tmux = start("attach-drop", ui.path(), &format!("attach '{target}'"));
    tmux.wait("the run", |s| s.contains("RUNNING"));
    run.child.kill().unwrap();
    run.child.wait().unwrap();
    tmux.wait("the lost connection", |s| {
        s.contains("DISCONNECTED") && s.contains("connection lost")
    });
    // the run is gone: r says why it cannot connect again
    tmux.keys(&["r"]);
    tmux.wait("the failed reconnect", |s| s.contains("cannot reconnect"));
    tmux.keys(&["q"]);
    let s = tmux.wait("the shell", |s| s.contains("shell-back"));
    assert!(s.contains("with the connection lost"), "{s}");
    // (killed on this machine: known not to run, not "may still be going")
    assert!(s.contains("the run is not running"), "{s}");
    // (a script waiting on the run through attach learns it was lost)
    assert_eq!(ended(ui.path()), ("EXIT=1".into(), true));
}

/// A screen suspended (Ctrl-Z) long enough for the run to let it go (it read nothing, its
/// socket filled) connects again by itself when it is continued, and says why.
#[test]
fn a_screen_suspended_past_the_run_s_patience_connects_again_by_itself() {
    if !tmux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut run = Run::start(dir.path(), &["--steps", "100000000", "--log-every", "1"]);
    let target = run.run_dir.display().to_string();
    // (an interactive shell: job control, Ctrl-Z and `fg` as a user has them)
    let tmux = common::tmux::Tmux {
        socket: format!("mgtop-test-attach-tstp-{}", std::process::id()),
    };
    let shell = ["new-session", "-d", "-s", "t", "-x", "200", "-y", "40"];
    tmux.cmd(&[&shell[..], &["bash --norc --noprofile -i"]].concat());
    let bin = env!("CARGO_BIN_EXE_mgtop-train");
    tmux.keys(&[&format!("'{bin}' attach '{target}'"), "Enter"]);
    tmux.wait("the run", |s| s.contains("RUNNING"));
    tmux.keys(&["C-z"]);
    tmux.wait("the shell", |s| s.contains("Stopped"));
    // the run lets go of a client whose writes block 10 s (or whose backlog overflows)
    std::thread::sleep(std::time::Duration::from_secs(14));
    tmux.keys(&["fg", "Enter"]);
    tmux.wait("the screen again", |s| s.contains("RUNNING"));
    // the reconnection's note, the newest event
    let s = tmux.wait("the reconnection", |s| s.contains("while it was suspended"));
    assert!(
        s.contains("reconnected to ") && !s.contains("DISCONNECTED"),
        "{s}"
    );
    tmux.keys(&["q"]);
    run.child.kill().unwrap();
    run.child.wait().unwrap();
}

/// A run whose own screen quits at once (Ctrl-C three times) ends its metrics file, not its
/// clients' stream: the client shows it QUIT, as it ended, not a connection lost.
#[test]
fn a_run_that_quits_at_once_is_shown_ended_not_lost() {
    if !tmux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = start(
        "quit-run",
        dir.path(),
        "--steps 100000000 --devices cpu:1 --model mlp:16 --run-dir run",
    );
    run.wait("the run", |s| s.contains("RUNNING"));
    let ui = tempfile::tempdir().unwrap();
    let target = dir.path().join("run");
    let client = start(
        "quit-client",
        ui.path(),
        &format!("attach '{}'", target.display()),
    );
    client.wait("the attached run", |s| s.contains("RUNNING"));
    run.keys(&["C-c", "C-c", "C-c"]);
    run.wait("the run's exit", |s| s.contains("shell-back"));
    let end = std::fs::read_to_string(target.join("metrics.jsonl")).unwrap();
    let s = client.wait("the end", |s| !s.contains("RUNNING"));
    // (three keys at once quit; one taken as the first of a stop's checkpoint stops)
    let status = end.lines().last().unwrap_or("");
    let shown = match status.contains("\"quit\"") {
        true => "QUIT",
        false => "STOPPED",
    };
    assert!(
        s.contains(shown) && !s.contains("DISCONNECTED"),
        "{status}\n{s}"
    );
}
