//! The binary run as a user runs it: a command, a run in a directory, its whole output, a signal.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Output};

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

/// Sends SIGNAME (TERM, HUP, ...) to a running child.
pub fn signal(child: &Child, name: &str) {
    let sent = Command::new("kill")
        .args([format!("-{name}"), child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -{name} failed");
}
