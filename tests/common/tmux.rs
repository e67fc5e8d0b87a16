//! tmux for the end-to-end tests: a tmux server of the test's own, a shell running the binary
//! in it, the screen as text, keys, and waiting for what the screen should show. A test that
//! needs tmux where it is missing is skipped (SKIPPED on stderr), unless MGTOP_REQUIRE_TMUX=1
//! (as .ci/run sets) makes that a failure.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

pub struct Tmux {
    pub socket: String,
}

impl Tmux {
    pub fn cmd(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tmux");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
    pub fn screen(&self) -> String {
        self.cmd(&["capture-pane", "-p", "-t", "t"])
    }
    /// The screen with its colours and attributes as escape sequences.
    pub fn screen_styled(&self) -> String {
        self.cmd(&["capture-pane", "-p", "-e", "-t", "t"])
    }
    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend_from_slice(keys);
        self.cmd(&args);
    }
    /// Waits until the screen satisfies `ok`; panics with the screen after 30 s.
    pub fn wait(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let t0 = Instant::now();
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            if t0.elapsed() > Duration::from_secs(30) {
                panic!("timed out waiting for {what}; the screen:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

pub fn tmux_available() -> bool {
    let found = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("MGTOP_REQUIRE_TMUX").as_deref() != Ok("1"),
            "MGTOP_REQUIRE_TMUX=1 but tmux is not installed"
        );
        super::skipped("tmux not found (apt-get install tmux)");
    }
    found
}

/// A shell in a fresh 100x30 tmux session running the binary with `args` in the foreground,
/// then recording its exit status (`exit`) and the terminal's mode (`stty`) in `dir` and
/// saying `shell-back`.
pub fn start(name: &str, dir: &Path, args: &str) -> Tmux {
    start_sized(name, dir, args, (100, 30))
}

/// `start` in a terminal of `(columns, rows)`.
pub fn start_sized(name: &str, dir: &Path, args: &str, size: (u16, u16)) -> Tmux {
    start_with(name, dir, "", args, size)
}

/// `start_sized` with environment assignments (`NO_COLOR=1`) before the command.
pub fn start_with(name: &str, dir: &Path, env: &str, args: &str, (w, h): (u16, u16)) -> Tmux {
    let tmux = Tmux {
        socket: format!("mgtop-test-{name}-{}", std::process::id()),
    };
    let script = format!(
        "{env} '{bin}' {args}; echo EXIT=$? > '{exit}'; stty -a > '{stty}'; echo shell-back; sleep 60",
        bin = env!("CARGO_BIN_EXE_mgtop-train"),
        exit = dir.join("exit").display(),
        stty = dir.join("stty").display(),
    );
    tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        &w.to_string(),
        "-y",
        &h.to_string(),
        // the run's directory (runs/...) goes under the test's own directory
        "-c",
        &dir.display().to_string(),
        &script,
    ]);
    tmux
}

/// The exit line the shell recorded, and whether the terminal is back out of raw mode.
pub fn ended(dir: &Path) -> (String, bool) {
    let exit = std::fs::read_to_string(dir.join("exit")).unwrap();
    let stty = std::fs::read_to_string(dir.join("stty")).unwrap();
    (
        exit.trim().to_string(),
        stty.contains(" icanon") && !stty.contains("-icanon"),
    )
}
