//! The live socket end to end, against the real binary: what a client is sent (the run record,
//! the history, live records), controls and their answers as the run's own log shows them,
//! several clients at once, and clients that misbehave (read nothing, send garbage or an
//! oversized line, hang half-open, die) never harming the run. Another user cannot connect.

mod common;

use std::net::Shutdown;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::run::{wait_for, Client, Run};
use serde_json::json;

/// Steps enough that a run lasts until a test stops it.
const FOREVER: &str = "100000000";

#[test]
fn a_client_gets_the_run_its_history_and_live_steps_and_steers_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = Run::start(dir.path(), &["--steps", FOREVER, "--name", "steered"]);
    let log = run.log();
    let live = log.lines().find(|l| l.starts_with("live: ")).unwrap();
    let socket = run.socket();
    assert!(live.contains(&socket.display().to_string()), "{live}");
    assert!(live.contains("mgtop-train attach "), "{live}");
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "owner-only socket");
    // some history to be sent
    run.wait_log("a few epochs", |l| l.contains("epoch 3 done"));

    let mut a = Client::connect(&socket);
    let first = a.line().unwrap();
    assert_eq!(
        (&first["type"], &first["schema"], &first["name"]),
        (&json!("run"), &json!("mgtop.metrics/1"), &json!("steered"))
    );
    let history: Vec<_> = std::iter::from_fn(|| a.line())
        .take_while(|v| v["type"] != "live")
        .map(|v| v["type"].clone())
        .collect();
    assert!(history.contains(&json!("epoch")), "{history:?}");
    // live steps follow, in order
    let steps: Vec<u64> = (0..3)
        .map(|_| {
            a.until("a live step", |v| v["type"] == "step")["step"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert!(steps.windows(2).all(|w| w[0] < w[1]), "{steps:?}");

    let r = a.control("pause", json!({}));
    assert_eq!(r["ok"], true, "{r}");
    a.until("the pause event", |v| v["action"] == "pause");
    run.wait_log("the pause in the run's log", |l| {
        l.contains("paused before step")
    });
    // the run's own log names who asked (this process)
    let asker = format!("an attached client (pid {}, ", std::process::id());
    let log = run.log();
    let asked = log.lines().find(|l| l.contains(&asker));
    assert!(
        asked.is_some_and(|l| l.ends_with(") asked to pause")),
        "{log}"
    );
    // a checkpoint asked while paused is written at once, of the step paused after
    assert_eq!(a.control("checkpoint", json!({}))["ok"], true);
    let log = run.wait_log("the checkpoint written while paused", |l| {
        l.contains("checkpoint at step")
    });
    let after = |what: &str| -> u64 {
        let rest = &log[log.find(what).unwrap() + what.len()..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().unwrap()
    };
    assert_eq!(
        after("checkpoint at step "),
        after("paused before step ") - 1,
        "{log}"
    );
    assert_eq!(run.checkpoints(), 1);
    // asked again at the same step: answered with the one written, none written twice
    assert_eq!(a.control("checkpoint", json!({}))["ok"], true);
    run.wait_log("the second answer", |l| {
        l.matches("checkpoint at step").count() == 2
    });
    assert_eq!(run.checkpoints(), 1);

    // a second client at the same time sees the same
    let mut b = Client::connect(&socket);
    b.until("b's live marker", |v| v["type"] == "live");
    let r = b.control("batch_size", json!({"per_replica": 0}));
    assert_eq!(r["ok"], false);
    assert!(
        r["message"].as_str().unwrap().contains("out of range"),
        "{r}"
    );
    assert_eq!(
        b.control("batch_size", json!({"per_replica": 64}))["ok"],
        true
    );
    assert_eq!(a.control("resume", json!({}))["ok"], true);
    for c in [&mut a, &mut b] {
        let ev = c.until("the batch change", |v| v["action"] == "batch_size");
        assert_eq!((&ev["from"], &ev["to"]), (&json!(32), &json!(64)));
        let s = c.until("a step at the new batch", |v| {
            v["type"] == "step" && v["per_replica"] == 64
        });
        // 1,600 training samples: at 2 x 64 each epoch is 12 full batches and a last one of
        // 64, which the first step at the new batch may be (then the next one is full)
        let s = match s["global_batch"] == 64 {
            true => c.until("the step after the epoch's end", |v| v["type"] == "step"),
            false => s,
        };
        assert_eq!(s["global_batch"], 128);
    }
    run.wait_log("the batch change in the log", |l| {
        l.contains("batch per replica 32 -> 64")
    });

    // a stop with a checkpoint, from b: both hear the end, the run writes its checkpoint
    assert_eq!(b.control("stop", json!({"checkpoint": true}))["ok"], true);
    for c in [&mut a, &mut b] {
        let end = c.until("the end", |v| v["type"] == "end");
        assert_eq!(end["status"], "stopped");
    }
    assert!(run.wait_exit().success());
    assert_eq!(run.checkpoints(), 2, "the one while paused, the stop's");
    let log = run.log();
    for what in [
        "for a batch of 64 per replica",
        "to stop, with a checkpoint",
    ] {
        let said = format!(") asked {what}");
        assert!(
            log.lines()
                .any(|l| l.contains(&asker) && l.ends_with(&said)),
            "{what}: {log}"
        );
    }
    // the stream ends with the run, and the socket is gone
    a.rest();
    assert!(!socket.exists());
}

#[test]
fn a_batch_the_memory_cannot_hold_is_refused_with_the_figures() {
    let dir = tempfile::tempdir().unwrap();
    // about 65 KB per sample per replica: a million per replica is far past any machine
    let mut run = Run::start(
        dir.path(),
        &["--steps", FOREVER, "--model", "mlp:4096,4096"],
    );
    let mut c = Client::connect(&run.socket());
    c.until("the live marker", |v| v["type"] == "live");
    let r = c.control("batch_size", json!({"per_replica": 1 << 20}));
    assert_eq!(r["ok"], false, "{r}");
    let msg = r["message"].as_str().unwrap();
    assert!(
        msg.contains("a batch of 1048576 per replica would need about")
            && msg.contains("(90% of what was available when it started): at most"),
        "{msg}"
    );
    // another run in its directory is told that it runs, not to resume it
    let o = Command::new(env!("CARGO_BIN_EXE_mgtop-train"))
        .current_dir(dir.path())
        .args(["--headless", "--steps", "3", "--run-dir", "run"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("holds a run that is running now")
            && err.contains("mgtop-train attach run")
            && !err.contains("--resume"),
        "{err}"
    );
    // the run goes on and stops as asked
    assert_eq!(c.control("stop", json!({"checkpoint": false}))["ok"], true);
    assert!(run.wait_exit().success());
}

/// Seconds a run of `steps` steps takes (the process, and its training as its log says),
/// with `client` doing its worst on the socket meanwhile.
fn timed_run(steps: &str, client: impl FnOnce(&Run) -> Option<UnixStream>) -> (f64, String) {
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let mut run = Run::start(dir.path(), &["--steps", steps]);
    let held = client(&run);
    assert!(run.wait_exit().success(), "{}", run.log());
    let secs = t0.elapsed().as_secs_f64();
    let log = run.log();
    let done = format!("finished: {steps} steps");
    let line = log.lines().find(|l| l.contains(&done));
    let stamp = line.and_then(|l| l.split(']').next()).unwrap_or("none");
    drop(held);
    (secs, format!("{stamp}]"))
}

#[test]
fn a_client_that_reads_nothing_does_not_hold_the_run_back() {
    let steps = "20000";
    let alone = timed_run(steps, |_| None);
    // connected and never reading: its socket buffer fills, then its queue; the run goes on
    let stuck = timed_run(steps, |run| {
        Some(UnixStream::connect(run.socket()).unwrap())
    });
    eprintln!(
        "{steps} steps: {:.2} s (training {}) alone, {:.2} s (training {}) with a client that reads nothing",
        alone.0, alone.1, stuck.0, stuck.1
    );
}

#[test]
fn a_probe_is_sent_nothing_and_a_silent_client_or_one_that_says_hello_everything() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = Run::start(dir.path(), &["--steps", FOREVER]);
    run.wait_log("a few epochs", |l| l.contains("epoch 2 done"));
    let socket = run.socket();
    // a probe (as `runs` and `attach` without a path make): connect, close its side, read
    for _ in 0..3 {
        let mut probe = UnixStream::connect(&socket).unwrap();
        probe.shutdown(Shutdown::Write).unwrap();
        probe
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut probe, &mut got).unwrap();
        assert!(got.is_empty(), "a probe was sent {} bytes", got.len());
    }
    // `runs` probes the same way, and lists the run as live
    let o = common::cli::run_in(dir.path(), &["runs", "."]);
    assert!(
        common::cli::text(&o).contains("live"),
        "{}",
        common::cli::text(&o)
    );
    // a client that says nothing is served all the same, and so is one that says hello
    let mut silent = Client::connect(&socket);
    assert_eq!(silent.line().unwrap()["type"], "run");
    let mut hello = Client::connect(&socket);
    hello.send_raw(b"{\"type\":\"hello\"}\n");
    assert_eq!(hello.line().unwrap()["type"], "run");
    let live = hello.until("the live marker", |v| v["type"] == "live");
    assert_eq!(live["clients"], 2, "the probes were never clients: {live}");
    // a first request that comes in two parts (a slow forward) is read whole
    let mut halting = Client::connect(&socket);
    halting.send_raw(br#"{"type":"control","id":7,"#);
    std::thread::sleep(Duration::from_millis(600));
    halting.send_raw(b"\"action\":\"checkpoint\"}\n");
    let reply = halting.until("the reply", |v| v["type"] == "reply");
    assert_eq!(
        (reply["id"].clone(), reply["ok"].clone()),
        (json!(7), json!(true)),
        "{reply}"
    );
    assert_eq!(hello.control("stop", json!({}))["ok"], true);
    assert!(run.wait_exit().success());
}

#[test]
fn a_paused_run_with_nothing_to_send_says_it_is_there_each_second() {
    let dir = tempfile::tempdir().unwrap();
    // (telemetry once a minute: nothing else to send while paused)
    let args = ["--steps", FOREVER, "--sample-interval", "60"];
    let mut run = Run::start(dir.path(), &args);
    let mut c = Client::connect(&run.socket());
    let first = c.until("the live marker", |v| v["type"] == "live");
    assert_eq!(c.control("pause", json!({}))["ok"], true);
    c.until("the pause event", |v| v["action"] == "pause");
    // two markers, a second or so apart, the run's clock moving on
    let t0 = Instant::now();
    let a = c.until("a live marker while paused", |v| v["type"] == "live");
    let b = c.until("another", |v| v["type"] == "live");
    let (ta, tb) = (a["t"].as_f64().unwrap(), b["t"].as_f64().unwrap());
    assert!(ta > first["t"].as_f64().unwrap() && tb > ta, "{a} {b}");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    // `runs` lists it paused (its file says so), and live again once resumed
    let listed = |state: &str| {
        (0..50).any(|_| {
            let l = common::cli::text(&common::cli::run_in(dir.path(), &["runs", "."]));
            std::thread::sleep(Duration::from_millis(100));
            l.lines().nth(1).is_some_and(|row| row.contains(state))
        })
    };
    assert!(listed(" paused "), "never listed paused");
    // (its event may come before the reply, which `control` reads up to)
    assert_eq!(c.control("resume", json!({}))["ok"], true);
    assert!(listed(" live "), "never listed live again");
    assert_eq!(c.control("stop", json!({}))["ok"], true);
    assert!(run.wait_exit().success());
}

/// A helper process for the test below: connects to the socket named by MGTOP_LIVE_HELPER
/// and waits to be killed. Does nothing in a normal test run.
#[test]
fn helper_client_that_waits_to_be_killed() {
    let Ok(socket) = std::env::var("MGTOP_LIVE_HELPER") else {
        return;
    };
    let mut c = Client::connect(std::path::Path::new(&socket));
    c.until("the live marker", |v| v["type"] == "live");
    println!("connected");
    std::thread::sleep(Duration::from_secs(600));
}

#[test]
fn garbage_an_oversized_line_a_half_open_and_a_killed_client_leave_the_run_unharmed() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = Run::start(dir.path(), &["--steps", FOREVER]);
    let socket = run.socket();

    // not JSON: answered, then that client is closed
    let mut g = Client::connect(&socket);
    g.send_raw(b"hello there\n");
    let r = g.until("the refusal", |v| v["type"] == "reply");
    assert_eq!(r["ok"], false);
    assert!(r["message"].as_str().unwrap().contains("not JSON"), "{r}");
    g.rest();

    // a line over the limit, never ended: refused without reading it all
    let mut big = Client::connect(&socket);
    big.send_raw(&vec![b'x'; 100 * 1024]);
    let r = big.until("the refusal", |v| v["type"] == "reply");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("longer than 64 KiB"),
        "{r}"
    );
    big.rest();

    // half-open: half a request and then silence, its reading side shut
    let half = UnixStream::connect(&socket).unwrap();
    (&half).write_all_bytes(b"{\"type\":\"control\",");
    let _ = half.shutdown(Shutdown::Read);

    // a client process killed with SIGKILL
    let mut helper = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "helper_client_that_waits_to_be_killed",
            "--nocapture",
        ])
        .env("MGTOP_LIVE_HELPER", &socket)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(helper.stdout.take().unwrap());
    wait_for("the helper to connect", || {
        let mut l = String::new();
        std::io::BufRead::read_line(&mut out, &mut l).ok()?;
        l.contains("connected").then_some(())
    });
    helper.kill().unwrap();
    helper.wait().unwrap();

    // the run goes on and still answers a well-behaved client
    let mut c = Client::connect(&socket);
    c.until("the live marker", |v| v["type"] == "live");
    let before = c.until("a step", |v| v["type"] == "step")["step"]
        .as_u64()
        .unwrap();
    let after = c.until("a later step", |v| {
        v["type"] == "step" && v["step"].as_u64().unwrap() > before + 10
    });
    assert!(after["loss"].is_number());
    assert!(run.running());
    assert_eq!(c.control("stop", json!({"checkpoint": false}))["ok"], true);
    c.until("the end", |v| v["type"] == "end");
    assert!(run.wait_exit().success());
    let log = run.log();
    assert!(!log.contains("panicked") && !log.contains("ERROR"), "{log}");
    drop(half);
}

/// Writes without caring whether the other end reads (for the half-open client).
trait WriteAll {
    fn write_all_bytes(self, b: &[u8]);
}

impl WriteAll for &UnixStream {
    fn write_all_bytes(mut self, b: &[u8]) {
        std::io::Write::write_all(&mut self, b).unwrap();
    }
}

/// Runs `args` as uid/gid 65534 (nobody) with setpriv, else su; `None` where neither can.
fn as_nobody(args: &[&str]) -> Option<std::process::Output> {
    let setpriv = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .args(args)
        .output();
    if let Ok(o) = setpriv {
        if o.status.code() != Some(127) && !String::from_utf8_lossy(&o.stderr).contains("setpriv:")
        {
            return Some(o);
        }
    }
    let line = args
        .iter()
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let su = Command::new("su")
        .args(["nobody", "-s", "/bin/sh", "-c", &line])
        .output()
        .ok()?;
    (!String::from_utf8_lossy(&su.stderr).starts_with("su:")).then_some(su)
}

#[test]
fn another_user_cannot_connect() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        common::skipped(
            "not root: cannot run a client as another user (run the tests as root, as CI does)",
        );
        return;
    }
    let bin = env!("CARGO_BIN_EXE_mgtop-train");
    match as_nobody(&[bin, "--version"]) {
        Some(o) if o.status.success() => {}
        _ => {
            common::skipped("neither setpriv nor su can run the binary as uid 65534 (nobody)");
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let run = Run::start(dir.path(), &["--steps", FOREVER]);
    let socket = run.socket().display().to_string();
    // the run directory keeps others out; opened up, the socket's own mode still does
    for dir_mode in [None, Some(0o711)] {
        if let Some(m) = dir_mode {
            for d in [dir.path(), &run.run_dir] {
                std::fs::set_permissions(d, std::fs::Permissions::from_mode(m)).unwrap();
            }
        }
        let o = as_nobody(&[bin, "attach", &socket]).unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains("permission denied") && err.contains("belongs to"),
            "{dir_mode:?}: {err}"
        );
    }
    // the owner still can
    let mut c = Client::connect(&run.socket());
    assert_eq!(c.line().unwrap()["type"], "run");
}

/// `attach` run by itself (no terminal: every error comes before the screen would open).
fn attach(dir: &std::path::Path, target: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_mgtop-train"))
        .current_dir(dir)
        .arg("attach")
        .args(target)
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_run_that_is_over_killed_or_missing_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (code, err) = attach(d, &[]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("no live run under") && err.contains("runs"),
        "{err}"
    );
    let (code, err) = attach(d, &["nowhere"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("nowhere: no such file or directory"), "{err}");

    // a run that ended: its socket is gone, its metrics stay
    let mut done = Run::start(d, &["--steps", "200"]);
    assert!(done.wait_exit().success());
    assert!(!done.socket().exists());
    let run = done.run_dir.display().to_string();
    let (code, err) = attach(d, &[&run]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("not live") && err.contains(&format!("mgtop-train view {run}")),
        "{err}"
    );

    // a run killed outright leaves its socket file behind: nobody listens there
    let killed_dir = tempfile::tempdir().unwrap();
    let mut killed = Run::start(killed_dir.path(), &["--steps", FOREVER]);
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();
    assert!(killed.socket().exists());
    let (code, err) = attach(d, &[&killed.socket().display().to_string()]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("not live") && err.contains("mgtop-train view"),
        "{err}"
    );
    // `view` given the dead socket says so
    let o = Command::new(env!("CARGO_BIN_EXE_mgtop-train"))
        .args(["view", "--headless"])
        .arg(killed.socket())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "a socket no run listens on (its run ended or was killed), not a metrics file"
        ),
        "{err}"
    );
    // a dead socket beside no metrics file `view` could read names none
    std::fs::write(killed.run_dir.join("metrics.jsonl"), "garbage\n").unwrap();
    let (_, err) = attach(d, &[&killed.socket().display().to_string()]);
    assert!(
        err.contains("not live") && err.contains("holds no metrics file `view` can read"),
        "{err}"
    );
    // a live one, given the wrong thing beside it
    let (code, err) = attach(d, &[&done.log.display().to_string()]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("neither a run directory nor a live socket"),
        "{err}"
    );
}

/// A run suspended (Ctrl-Z in its terminal, `kill -STOP`) holds its socket and devices and
/// does nothing: `runs` and `attach` say it is suspended and how to wake it.
#[test]
fn a_suspended_run_is_said_suspended_with_how_to_wake_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut run = Run::start(d, &["--steps", FOREVER]);
    run.wait_log("an epoch", |l| l.contains("epoch 1 done"));
    common::cli::signal(&run.child, "STOP");
    let pid = run.child.id();
    // (a stop takes hold as the process's threads next run: asked until it shows)
    let listed = (0..50)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(100));
            common::cli::text(&common::cli::run_in(d, &["runs", "."]))
        })
        .find(|l| l.contains("suspended"));
    common::cli::signal(&run.child, "CONT");
    assert!(listed.is_some(), "never listed suspended");
    common::cli::signal(&run.child, "STOP");
    std::thread::sleep(Duration::from_millis(500));
    let (code, err) = attach(d, &[&run.run_dir.display().to_string()]);
    common::cli::signal(&run.child, "CONT");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!("the run's process (pid {pid}) is suspended"))
            && err.contains(&format!("kill -CONT {pid}")),
        "{err}"
    );
    // woken, it is live again
    let o = common::cli::run_in(d, &["runs", "."]);
    let listed = common::cli::text(&o);
    assert!(
        listed.contains(" live ") && !listed.contains("suspended"),
        "{listed}"
    );
    run.child.kill().unwrap();
    run.child.wait().unwrap();
}

#[test]
fn attaching_to_a_run_still_starting_says_so() {
    // a run directory made, its data still loading or its model being built: its process
    // holds the checkpoint lock open and there is no socket yet (a live run stands for it
    // here, given the lock file open as it starts)
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("elsewhere");
    let starting = d.join("runs/big/20261203-101500");
    std::fs::create_dir_all(starting.join("checkpoints")).unwrap();
    let lock = starting.join("checkpoints/.lock");
    let held = std::fs::File::create(&lock).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&held);
    // SAFETY: the descriptor is open for the call; clearing close-on-exec lets the run's
    // process inherit it
    assert_eq!(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }, 0);
    let mut run = Run::start(dir.path(), &["--steps", FOREVER]);
    drop(held);
    let pid = run.child.id();
    std::fs::write(&lock, pid.to_string()).unwrap();
    let shown = starting.display().to_string();
    for target in [vec!["runs/big"], vec![shown.as_str()], vec![]] {
        let (code, err) = attach(&d, &target);
        assert_eq!(code, Some(1));
        assert!(
            err.contains(&format!("its run is starting (pid {pid})"))
                && err.contains("try again in a moment"),
            "{target:?}: {err}"
        );
    }
    // one with a metrics file is past its start (its socket failed, or it ended): not starting
    std::fs::write(starting.join("metrics.jsonl"), "").unwrap();
    let (_, err) = attach(&d, &["runs/big"]);
    assert!(err.contains("none live"), "{err}");
    std::fs::remove_file(starting.join("metrics.jsonl")).unwrap();
    // a lock file of the same pid that the process does not hold open (a copy's): not starting
    std::fs::remove_file(&lock).unwrap();
    std::fs::write(&lock, pid.to_string()).unwrap();
    let (_, err) = attach(&d, &["runs/big"]);
    assert!(err.contains("no live run under runs/big"), "{err}");
    run.child.kill().unwrap();
    run.child.wait().unwrap();
}

/// `--resume run` of the run `Run::start` made in `dir`, refused: what it said.
fn resume_refused(dir: &std::path::Path) -> String {
    let args = [
        "--headless",
        "--data",
        "synthetic:2000,32,4",
        "--resume",
        "run",
    ];
    let o = common::cli::run_in(dir, &args);
    let err = common::cli::text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    err
}

#[test]
fn resuming_a_run_still_running_without_a_checkpoint_says_how_to_get_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = Run::start(dir.path(), &["--steps", FOREVER]);
    let resume = || resume_refused(dir.path());
    let err = resume();
    assert!(
        err.contains("is still running and has written no checkpoint yet")
            && err.contains("mgtop-train attach"),
        "{err}"
    );
    run.child.kill().unwrap();
    run.child.wait().unwrap();
    // killed: its socket file stays, nobody listens there
    let err = resume();
    assert!(err.contains("has no checkpoint to resume from"), "{err}");
}

#[test]
fn a_run_stopped_without_a_checkpoint_says_it_cannot_be_resumed_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = Run::start(dir.path(), &["--steps", FOREVER]);
    let mut a = Client::connect(&run.socket());
    a.until("the live marker", |v| v["type"] == "live");
    let r = a.control("stop", json!({"checkpoint": false}));
    assert_eq!(r["ok"], true, "{r}");
    assert!(run.wait_exit().success());
    let log = run.log();
    assert!(
        log.contains("no checkpoint: the run was stopped without one, so it cannot be resumed"),
        "{log}"
    );
    assert!(!log.contains("resume with"), "{log}");
    let err = resume_refused(dir.path());
    assert!(
        err.contains("was stopped and has no checkpoint") && err.contains("start it again"),
        "{err}"
    );
}

#[test]
fn resuming_a_checkpoint_of_a_run_still_running_says_the_two_train_apart() {
    let dir = tempfile::tempdir().unwrap();
    let run = Run::start(
        dir.path(),
        &["--steps", FOREVER, "--checkpoint-every", "20"],
    );
    wait_for("a checkpoint", || (run.checkpoints() > 0).then_some(()));
    let args = [
        "--headless",
        "--devices",
        "cpu:2",
        "--model",
        "mlp:16",
        "--data",
        "synthetic:2000,32,4",
        "--steps",
        "1000000000",
        "--resume",
        "run",
        "--run-dir",
        "second",
    ];
    let mut second = common::cli::spawn_in(dir.path(), &args);
    let mut line = String::new();
    let mut out = std::io::BufReader::new(second.stdout.take().unwrap());
    let resumed = loop {
        line.clear();
        let n = std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        assert!(n > 0, "the second run ended before its resumed line");
        if line.starts_with("resumed from ") {
            break line.clone();
        }
    };
    second.kill().unwrap();
    second.wait().unwrap();
    let run_dir = std::fs::canonicalize(&run.run_dir).unwrap();
    assert!(
        resumed.contains(&format!(
            "its run {} is still running (and may be past step ",
            run_dir.display()
        )) && resumed.contains("this run trains apart from it"),
        "{resumed}"
    );
}

#[test]
fn an_attached_screen_says_when_the_connection_drops_and_r_connects_again() {
    use mgtop::config::{Budget, DeviceSpec, RunConfig};
    use mgtop::engine::Engine;
    use mgtop::front::tui::app::Action;
    use mgtop::front::tui::attach::AttachSource;
    use mgtop::front::tui::source::Source;
    use mgtop::observe::live::{LiveHub, LiveServer, Target};
    use mgtop::observe::metrics::{records, Line};
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::start(RunConfig {
        devices: DeviceSpec::Cpu(1),
        budget: Budget::Steps(1),
        checkpoint_dir: dir.path().join("ck"),
        ..RunConfig::default()
    })
    .unwrap();
    let serve = || {
        let hub = LiveHub::new(Instant::now());
        hub.set_run(Line::new(&records::run(engine.info())));
        let socket = dir.path().join("live.sock");
        LiveServer::start(&socket, hub, engine.controller()).unwrap()
    };
    let server = serve();
    let target = Target {
        socket: server.path().to_path_buf(),
        run: dir.path().to_path_buf(),
    };
    let (mut source, mut app) = AttachSource::connect(target, false).unwrap();
    let events = source.events();
    let pump = |source: &mut AttachSource,
                app: &mut mgtop::front::tui::app::App,
                until: &dyn Fn(&mgtop::front::tui::app::App) -> bool| {
        wait_for("the screen's state", || {
            if let Ok(ev) = events.recv_timeout(Duration::from_millis(100)) {
                source.on_event(app, Some(ev));
            }
            until(app).then_some(())
        })
    };
    // the server goes away (the run's process ended without an end record)
    drop(server);
    pump(&mut source, &mut app, &|a| a.disconnected.is_some());
    let r = KeyEvent::new(KeyCode::Char('r'), KeyModifiers::NONE);
    assert_eq!(app.handle_key(r), Some(Action::Reconnect));
    // a reconnection runs on its own thread and wakes the loop with its answer
    let wake = source.timer();
    let answer = |source: &mut AttachSource, app: &mut mgtop::front::tui::app::App| {
        wake.recv_timeout(Duration::from_secs(15))
            .expect("the reconnection's answer");
        assert!(source.on_timer(app));
    };
    assert!(source.reconnect(&mut app));
    answer(&mut source, &mut app);
    assert!(app.disconnected.is_some(), "nothing to connect to yet");
    assert!(app.log.iter().any(|l| l.text.contains("cannot reconnect")));
    // a socket that accepts and never answers: the keys stay live while it is tried
    let silent = std::os::unix::net::UnixListener::bind(dir.path().join("live.sock")).unwrap();
    let t0 = Instant::now();
    assert!(source.reconnect(&mut app));
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "r blocked the screen"
    );
    assert!(source.reconnect(&mut app));
    assert_eq!(
        app.flash.as_deref(),
        Some("connecting already: wait for it")
    );
    answer(&mut source, &mut app);
    assert!(app.disconnected.is_some());
    drop(silent);
    std::fs::remove_file(dir.path().join("live.sock")).unwrap();
    // served again: r connects, the screen starts over from the run's history
    let _server = serve();
    assert!(source.reconnect(&mut app));
    answer(&mut source, &mut app);
    assert_eq!(app.disconnected, None);
    // (said where the history it brings ends)
    pump(&mut source, &mut app, &|a| {
        a.log.iter().any(|l| l.text.starts_with("reconnected to"))
    });
    assert!(source
        .control(mgtop::engine::control::Control::Checkpoint)
        .is_ok());
    engine.join().unwrap();
}

#[test]
fn a_read_only_client_cannot_change_the_run_whatever_it_sends() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = Run::start(dir.path(), &["--steps", FOREVER, "--name", "watched"]);
    let socket = run.socket();
    let mut ro = Client::connect(&socket);
    ro.until("the live marker", |v| v["type"] == "live");
    ro.send_raw(b"{\"type\":\"readonly\"}\n");
    for (action, fields) in [
        ("pause", json!({})),
        ("batch_size", json!({"per_replica": 64})),
        ("stop", json!({"checkpoint": false})),
    ] {
        let r = ro.control(action, fields);
        assert_eq!(r["ok"], false, "{action}: {r}");
        assert!(
            r["message"]
                .as_str()
                .unwrap()
                .contains("attached read-only"),
            "{r}"
        );
    }
    // another client steers it as before, and the read-only one sees it happen
    let mut rw = Client::connect(&socket);
    rw.until("the live marker", |v| v["type"] == "live");
    assert_eq!(rw.control("stop", json!({"checkpoint": false}))["ok"], true);
    let end = ro.until("the end", |v| v["type"] == "end");
    assert_eq!(end["status"], "stopped");
    assert!(run.wait_exit().success());
}

#[test]
fn a_run_directory_deleted_under_the_run_is_said_and_not_offered_to_view() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = Run::start(
        dir.path(),
        &["--steps", FOREVER, "--sample-interval", "0.1"],
    );
    std::fs::remove_dir_all(&run.run_dir).unwrap();
    run.wait_log("the warning", |l| {
        l.contains("was removed or moved away while the run writes it")
    });
    common::cli::signal(&run.child, "TERM");
    assert_eq!(run.wait_exit().code(), Some(130));
    let log = run.log();
    assert!(
        log.contains("the run goes on, and its checkpoints are still written")
            && log.contains("its metrics file was removed during the run: nothing to view")
            && !log.contains("(mgtop-train view"),
        "{log}"
    );
}
