//! The real binary in a real terminal (tmux): pause, change the batch size, quit with a
//! checkpoint, and find the terminal restored. Skipped where tmux is missing, unless
//! MGTOP_REQUIRE_TMUX=1 (as .ci/run sets) makes that a failure.

mod common;

use common::tmux::{ended, start, start_sized, start_with, tmux_available, Tmux};

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn header(s: &str) -> &str {
    s.lines().take(3).last().unwrap_or("")
}

/// The pids whose parent is `pid` (from /proc).
fn children(pid: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{name}/stat")).ok()?;
            // the parent is the second field after the parenthesised command name
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .to_string();
            (ppid == pid).then_some(name)
        })
        .collect()
}

/// A headless run in `d` with `args`, its metrics written to `d/run.jsonl` (for `view`).
fn record(d: &Path, args: &[&str]) {
    let run = Command::new(env!("CARGO_BIN_EXE_mgtop-train"))
        .current_dir(d)
        .arg("--headless")
        .args(args)
        .args(["--metrics-out", "run.jsonl"])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

/// The checkpoints (`step-*`) in a checkpoint directory.
fn checkpoints(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("step-"))
        .count()
}

#[test]
fn pause_batch_change_and_quit_in_a_real_terminal() {
    if !tmux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let args = format!(
        "--devices cpu:2 --steps 100000000 --checkpoint-dir '{}' --metrics-out '{}'",
        d.join("ck").display(),
        d.join("m.jsonl").display()
    );
    let tmux = start("keys", d, &args);
    tmux.wait("the UI", |s| {
        s.contains("RUNNING") && s.contains("samples/s")
    });
    assert_eq!(
        tmux.cmd(&["display", "-p", "-t", "t", "#{alternate_on}"])
            .trim(),
        "1"
    );
    // pasted text (bracketed, as terminals paste) is said and ignored: "quake" would open the
    // quit question with its q and stop the run without a checkpoint with its k
    tmux.cmd(&["set-buffer", "quake"]);
    tmux.cmd(&["paste-buffer", "-p", "-t", "t"]);
    let s = tmux.wait("the paste said", |s| s.contains("pasted text ignored"));
    assert!(
        s.contains("RUNNING") && !s.contains("Stop training?"),
        "{s}"
    );

    tmux.keys(&["p"]);
    tmux.wait("PAUSED", |s| {
        s.contains("PAUSED") && s.contains("paused before step")
    });
    tmux.keys(&["]"]);
    let s = tmux.wait("the pending batch", |s| {
        header(s).contains("32→64 next step")
    });
    assert!(header(&s).contains("batch 32×2 = 64"), "{s}");
    tmux.keys(&["p"]);
    tmux.wait("the new batch", |s| {
        s.contains("RUNNING") && header(s).contains("batch 64×2 = 128") && !header(s).contains('→')
    });
    assert!(tmux.screen().contains("batch per replica 32 -> 64"));
    // every rank trains on the new batch: each device's detail view says so
    for dev in ["1", "2"] {
        tmux.keys(&[dev]);
        tmux.wait("the device detail", |s| s.contains("(64 samples)"));
    }
    tmux.keys(&["0"]);

    tmux.keys(&["q"]);
    tmux.wait("the quit popup", |s| s.contains("Stop training?"));
    tmux.keys(&["s"]);
    let s = tmux.wait("the shell", |s| s.contains("shell-back"));
    assert!(
        s.contains("stopped:") && s.contains("resume with: --resume"),
        "{s}"
    );
    assert_eq!(
        ended(d),
        ("EXIT=0".into(), true),
        "exit status, terminal restored"
    );
    assert_eq!(
        tmux.cmd(&["display", "-p", "-t", "t", "#{alternate_on}"])
            .trim(),
        "0"
    );
    assert_eq!(
        checkpoints(&d.join("ck")),
        1,
        "one checkpoint, written on quit"
    );
    // the metrics file is written under the UI as in headless mode
    let records: Vec<serde_json::Value> = std::fs::read_to_string(d.join("m.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let has = |f: &dyn Fn(&serde_json::Value) -> bool| records.iter().any(f);
    assert!(has(&|r| r["action"] == "pause"));
    assert!(has(&|r| r["action"] == "batch_size"
        && r["from"] == 32
        && r["to"] == 64));
    assert!(has(&|r| r["type"] == "end" && r["status"] == "stopped"));
}

/// How many lines of the screen show device `label`'s row in the devices table.
fn device_rows(s: &str, label: &str) -> usize {
    s.lines()
        .filter(|l| l.starts_with(&format!("│{label} ")))
        .count()
}

#[test]
fn an_80x24_terminal_shows_what_a_new_user_looks_for() {
    if !tmux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let args = format!(
        "--devices cpu:2 --steps 100000000 --checkpoint-dir '{}'",
        d.join("ck").display()
    );
    let tmux = start_sized("small", d, &args, (80, 24));
    // the loss panel's title keeps the validation accuracy in 40 columns
    let s = tmux.wait("the accuracy", |s| {
        s.contains("RUNNING") && s.contains(" acc ")
    });
    let title = s.lines().find(|l| l.contains(" loss ")).unwrap();
    let title = &title[title.find(" loss ").unwrap()..];
    assert!(title.contains(" acc ") && title.contains('%'), "{s}");

    tmux.keys(&["t"]);
    tmux.wait("the theme's name", |s| s.contains("theme: light"));
    tmux.keys(&["t"]);
    tmux.wait("the next theme's name", |s| s.contains("theme: mono"));

    tmux.keys(&["q"]);
    let s = tmux.wait("the quit popup", |s| s.contains("Stop training?"));
    assert!(
        s.contains("q or Ctrl-C again: stop with a checkpoint"),
        "{s}"
    );
    tmux.keys(&["Escape"]);
    tmux.wait("the popup to close", |s| !s.contains("Stop training?"));

    // the stated minimum still shows every device of a 2-device run
    tmux.cmd(&["resize-window", "-t", "t", "-x", "60", "-y", "16"]);
    let s = tmux.wait("the devices at 60x16", |s| {
        s.lines().count() <= 16 && device_rows(s, "cpu0") == 1 && device_rows(s, "cpu1") == 1
    });
    assert!(!s.contains("too small"), "{s}");

    tmux.keys(&["C-c"]);
    tmux.wait("the quit popup", |s| s.contains("Stop training?"));
    tmux.keys(&["C-c"]);
    tmux.wait("the shell", |s| s.contains("shell-back"));
    assert_eq!(ended(d), ("EXIT=0".into(), true));
}

#[test]
fn sigterm_under_the_ui_checkpoints_and_restores_the_terminal() {
    if !tmux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let args = format!(
        "--devices cpu:2 --steps 100000000 --checkpoint-dir '{}'",
        d.join("ck").display()
    );
    let tmux = start("term", d, &args);
    tmux.wait("the UI", |s| s.contains("RUNNING"));
    // the binary is the shell's child
    let shell = tmux.cmd(&["display", "-p", "-t", "t", "#{pane_pid}"]);
    let child = children(shell.trim())
        .pop()
        .expect("the binary runs under the shell");
    Command::new("kill")
        .args(["-TERM", &child])
        .status()
        .unwrap();
    let s = tmux.wait("the shell", |s| s.contains("shell-back"));
    assert!(s.contains("resume with: --resume"), "{s}");
    assert_eq!(ended(d), ("EXIT=130".into(), true));
    assert_eq!(checkpoints(&d.join("ck")), 1);
}

/// Under `timeout` (a process group of its own, in the background of the terminal) the UI's
/// taking of the terminal would stop the run for good: it goes on headless and says why.
#[test]
fn a_run_in_the_background_of_its_terminal_goes_on_headless() {
    if !tmux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // (`start_with` puts its first text before the binary: here the command it runs under)
    let args = "--devices cpu:1 --steps 30";
    let tmux = start_with("bg", d, "timeout 60", args, (120, 40));
    let s = tmux.wait("the shell", |s| s.contains("shell-back"));
    assert!(
        s.contains("in the background of its terminal") && s.contains("finished: 30 steps"),
        "{s}"
    );
    assert_eq!(ended(d), ("EXIT=0".into(), true));
    // a terminal that says it draws nothing (TERM=dumb, Emacs' shell): the log, said why
    let dumb = start_with("dumb", d, "env TERM=dumb", args, (120, 40));
    let s = dumb.wait("the shell", |s| s.contains("shell-back"));
    assert!(
        s.contains("note: TERM=dumb: this terminal draws no screens")
            && s.contains("finished: 30 steps"),
        "{s}"
    );
}

#[test]
fn a_dropped_connection_sighup_finishes_the_step_and_checkpoints() {
    if !tmux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let tmux = Tmux {
        socket: format!("mgtop-test-hup-{}", std::process::id()),
    };
    let bin = env!("CARGO_BIN_EXE_mgtop-train");
    let ck = d.join("ck");
    let m = d.join("m.jsonl");
    tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "90",
        "-y",
        "26",
        "-c",
        d.to_str().unwrap(),
        bin,
        "--devices",
        "cpu:2",
        "--steps",
        "100000000",
        "--checkpoint-dir",
        ck.to_str().unwrap(),
        "--metrics-out",
        m.to_str().unwrap(),
    ]);
    tmux.wait("the UI", |s| s.contains("RUNNING"));
    let pid = tmux.cmd(&["display", "-p", "-t", "t", "#{pane_pid}"]);
    let pid = pid.trim().to_string();
    // closing the window hangs up the terminal, as a dropped SSH connection does
    tmux.cmd(&["kill-server"]);
    let t0 = Instant::now();
    while Command::new("kill")
        .args(["-0", &pid])
        .output()
        .unwrap()
        .status
        .success()
    {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "still running after SIGHUP"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(checkpoints(&ck), 1, "a checkpoint on hang-up");
    let text = std::fs::read_to_string(&m).unwrap();
    let end: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(
        (end["type"].as_str(), end["status"].as_str()),
        (Some("end"), Some("stopped"))
    );
}

#[test]
fn a_failed_worker_is_shown_and_q_leaves_with_the_error_and_a_clean_terminal() {
    if !tmux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let args = format!(
        "--devices cpu:2 --steps 100000 --checkpoint-dir '{}' --inject-panic 1:300",
        d.join("ck").display()
    );
    let tmux = start("fail", d, &args);
    let s = tmux.wait("the failure", |s| {
        s.contains("FAILED") && s.contains("run summary")
    });
    assert!(s.contains("rank 1 panicked at step 300"), "{s}");
    assert!(
        !s.contains("thread 'worker-1' panicked"),
        "the panic message scribbled on the UI: {s}"
    );
    tmux.keys(&["q"]);
    let s = tmux.wait("the shell", |s| s.contains("shell-back"));
    assert!(s.contains("error: worker for rank 1 panicked"), "{s}");
    assert_eq!(ended(d), ("EXIT=1".into(), true));
}

#[test]
fn ctrl_c_while_stopping_leaves_without_waiting_for_a_stuck_worker() {
    if !tmux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // rank 0 waits 10 s for every batch: a stop has to wait for that step to end
    let args = format!(
        "--devices cpu:2 --steps 1000 --slow-data 0:10000 --checkpoint-dir '{}' --run-dir '{}'",
        d.join("ck").display(),
        d.join("run").display()
    );
    let tmux = start("abandon", d, &args);
    tmux.wait("the UI", |s| s.contains("RUNNING"));
    tmux.keys(&["C-c"]);
    tmux.wait("the quit popup", |s| s.contains("Stop training?"));
    tmux.keys(&["C-c"]);
    tmux.wait("stopping", |s| s.contains("STOPPING"));
    let t0 = Instant::now();
    tmux.keys(&["C-c"]);
    let s = tmux.wait("the shell", |s| s.contains("shell-back"));
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "waited for the worker"
    );
    assert!(s.contains("left without waiting for the workers"), "{s}");
    // and what continues the run (this one wrote no checkpoint and resumed none)
    assert!(
        s.contains("the run has no checkpoint to continue from: start it again"),
        "{s}"
    );
    assert_eq!(
        ended(d),
        ("EXIT=1".into(), true),
        "exit status, terminal restored"
    );
    // as after a second signal: the records say how it ended, and the socket is gone
    let metrics = std::fs::read_to_string(d.join("run/metrics.jsonl")).unwrap();
    let last = metrics.lines().last().unwrap();
    assert!(last.contains(r#""status":"quit""#), "{last}");
    assert!(!d.join("run/live.sock").exists());
}

#[test]
fn view_shows_a_recorded_run_read_only_and_q_leaves_with_a_clean_terminal() {
    if !tmux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    record(
        d,
        &[
            "--devices",
            "cpu:2",
            "--epochs",
            "3",
            "--log-every",
            "10",
            "--name",
            "recorded-run",
        ],
    );
    // the file as a run still going has written it so far: up to the first epoch's end
    let text = std::fs::read_to_string(d.join("run.jsonl")).unwrap();
    // (with no run directory to ask: the recorded run's, ended, would make the cut file a
    // killed run's as soon as the view asks it)
    std::fs::remove_dir_all(d.join("runs")).unwrap();
    let cut = text.find("{\"epoch\":1").unwrap();
    let growing = d.join("growing.jsonl");
    std::fs::write(&growing, &text[..cut]).unwrap();
    let tmux = start("view", d, &format!("view '{}'", growing.display()));
    // (a big file is read over several frames: step 10 may show first)
    // (the footer, drawn last, says the frame is whole: tmux may show one half drawn)
    let s = tmux.wait("the run so far", |s| {
        s.contains("recorded-run")
            && s.contains("RUNNING")
            && s.contains("step 20")
            && s.contains("VIEW")
    });
    assert!(!s.contains("epoch 1/3 done"), "{s}");
    // the rest of the file arrives: read within the next poll
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&growing)
        .unwrap();
    std::io::Write::write_all(&mut f, &text.as_bytes()[cut..]).unwrap();
    let s = tmux.wait("the recorded run", |s| {
        s.contains("recorded-run") && s.contains("run summary")
    });
    assert!(s.contains("DONE") && s.contains("VIEW"), "{s}");
    assert!(s.contains(" smoothed train "), "{s}");
    assert!(s.contains("epoch 3/3 · step 69"), "{s}");
    // a key that would change the run says why it does nothing; q leaves at once
    tmux.keys(&["Escape", "p"]);
    tmux.wait("the read-only answer", |s| {
        s.contains(mgtop::front::tui::app::VIEW_ONLY)
    });
    tmux.keys(&["q"]);
    let s = tmux.wait("the shell", |s| s.contains("shell-back"));
    assert!(!s.contains("run summary"), "{s}");
    assert_eq!(ended(d), ("EXIT=0".into(), true));
}

#[test]
fn no_color_gives_mono_unless_a_theme_is_asked_for() {
    if !tmux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    record(d, &["--devices", "cpu:1", "--steps", "5"]);
    // dark paints its own background, colour 234; mono keeps the terminal's
    let dark_background = "48;5;234";
    for (name, theme, coloured) in [("nocolor", "", false), ("asked", "--theme dark", true)] {
        let tmux = start_with(
            name,
            d,
            "NO_COLOR=1",
            &format!("view run.jsonl {theme}"),
            (100, 30),
        );
        tmux.wait("the recorded run", |s| s.contains("run summary"));
        let styled = tmux.screen_styled();
        assert_eq!(
            styled.contains(dark_background),
            coloured,
            "{theme}: {styled}"
        );
        tmux.keys(&["q"]);
        tmux.wait("the shell", |s| s.contains("shell-back"));
    }
}
