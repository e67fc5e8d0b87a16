//! The binary run as a user runs it: a command, a run in a directory, its whole output, a signal.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mgtop-train"))
}

/// Runs the binary in `dir` with `args` (no colours) and waits for it.
pub fn run_in(dir: &Path, args: &[&str]) -> Output {
    bin()
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .args(args)
        .output()
        .expect("binary runs")
}

/// Standard output then standard error.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Starts the binary in `dir` with `args` (no colours, no stdin), its stdout and stderr piped.
/// The child is killed when the test's thread ends (a test that fails half way leaves no run
/// going on beside the tests after it).
pub fn spawn_in(dir: &Path, args: &[&str]) -> Child {
    let mut cmd = bin();
    // SAFETY: prctl is async-signal-safe, and the closure touches nothing of the parent's
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.current_dir(dir)
        .env("NO_COLOR", "1")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary runs")
}

/// Sends SIGNAME (TERM, HUP, ...) to a running child.
pub fn signal(child: &Child, name: &str) {
    let sent = Command::new("kill")
        .args([format!("-{name}"), child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -{name} failed");
}

/// Runs the binary in `dir` with `args` and returns (exit code, stdout + stderr); a run that
/// takes more than 60 s is killed and fails the test (a FIFO that blocks, a file read without
/// end).
pub fn run_limited(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut child = spawn_in(dir, args);
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("{args:?} still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    (o.status.code(), text(&o))
}
