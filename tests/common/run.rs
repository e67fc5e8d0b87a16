//! A training run of the real binary in the background (headless, a small synthetic workload,
//! its own run directory), and a raw client of its live socket. Every wait polls for what it
//! waits for, with limits generous enough for a loaded 2-core machine.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long any one thing may take before a test gives up.
pub const LIMIT: Duration = Duration::from_secs(60);

/// Polls `ok` until it holds; panics saying `what` after `LIMIT`.
pub fn wait_for<T>(what: &str, mut ok: impl FnMut() -> Option<T>) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = ok() {
            return v;
        }
        assert!(t0.elapsed() < LIMIT, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub struct Run {
    pub child: Child,
    pub dir: PathBuf,
    pub run_dir: PathBuf,
    pub log: PathBuf,
}

impl Run {
    /// `--headless` training into `dir/run` of a small workload, with `args` after it (a
    /// `--model` there replaces the workload's); stdout and stderr in `dir/log`.
    pub fn start(dir: &Path, args: &[&str]) -> Run {
        let run_dir = dir.join("run");
        let log = dir.join("log");
        let out = std::fs::File::create(&log).unwrap();
        let model: &[&str] = if args.contains(&"--model") {
            &[]
        } else {
            &["--model", "mlp:16"]
        };
        let child = Command::new(env!("CARGO_BIN_EXE_mgtop-train"))
            .current_dir(dir)
            .args(["--headless", "--devices", "cpu:2"])
            .args(["--data", "synthetic:2000,32,4"])
            .args(model)
            .arg("--run-dir")
            .arg(&run_dir)
            .args(args)
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .unwrap();
        let run = Run {
            child,
            dir: dir.to_path_buf(),
            run_dir,
            log,
        };
        run.wait_log("the live line", |l| l.contains("live: "));
        run
    }

    pub fn socket(&self) -> PathBuf {
        self.run_dir.join("live.sock")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the run's log satisfies `ok`; returns it.
    pub fn wait_log(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let t0 = Instant::now();
        loop {
            let l = self.log();
            if ok(&l) {
                return l;
            }
            let tail: String = l.lines().rev().take(5).collect::<Vec<_>>().join("\n");
            assert!(
                t0.elapsed() < LIMIT,
                "timed out waiting for {what} in the run's log; its end:\n{tail}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for the process to end.
    pub fn wait_exit(&mut self) -> ExitStatus {
        wait_for("the run to end", || self.child.try_wait().unwrap())
    }

    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// The checkpoints (`step-*`) the run wrote.
    pub fn checkpoints(&self) -> usize {
        std::fs::read_dir(self.run_dir.join("checkpoints"))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter(|e| e.file_name().to_string_lossy().starts_with("step-"))
                    .count()
            })
            .unwrap_or(0)
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A raw connection to a live socket, reading JSON lines.
pub struct Client {
    r: BufReader<UnixStream>,
    w: UnixStream,
    next_id: u64,
}

impl Client {
    pub fn connect(socket: &Path) -> Client {
        let w = UnixStream::connect(socket).unwrap();
        w.set_read_timeout(Some(LIMIT)).unwrap();
        Client {
            r: BufReader::new(w.try_clone().unwrap()),
            w,
            next_id: 1,
        }
    }

    /// The next line as JSON; `None` at the end of the stream.
    pub fn line(&mut self) -> Option<Value> {
        let mut s = String::new();
        match self.r.read_line(&mut s) {
            Ok(0) => None,
            Ok(_) => Some(serde_json::from_str(&s).unwrap_or_else(|e| panic!("{e}: {s}"))),
            Err(e) => panic!("reading the socket: {e}"),
        }
    }

    /// Reads until a line satisfies `ok` (panics at the end of the stream).
    pub fn until(&mut self, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
        let t0 = Instant::now();
        loop {
            let v = self
                .line()
                .unwrap_or_else(|| panic!("the stream ended before {what}"));
            if ok(&v) {
                return v;
            }
            assert!(t0.elapsed() < LIMIT, "timed out waiting for {what}");
        }
    }

    /// Reads to the end of the stream; the lines.
    pub fn rest(&mut self) -> Vec<Value> {
        std::iter::from_fn(|| self.line()).collect()
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.w.write_all(bytes).unwrap();
    }

    /// Sends a control request (`action` and its fields) and returns its answer.
    pub fn control(&mut self, action: &str, fields: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut req = serde_json::json!({"type": "control", "id": id, "action": action});
        if let (Some(r), Some(f)) = (req.as_object_mut(), fields.as_object()) {
            r.extend(f.clone());
        }
        self.send_raw(format!("{req}\n").as_bytes());
        self.until("the reply", |v| v["type"] == "reply" && v["id"] == id)
    }
}
