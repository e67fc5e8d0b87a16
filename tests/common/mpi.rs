//! Runs over several processes under Open MPI's `mpirun` on this machine: starting them,
//! their flags, and reading what they leave behind.
// each test crate that includes `common` uses some of these
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use mgtop::engine::checkpoint;
use mgtop::nn::model::Model;

pub const BIN: &str = env!("CARGO_BIN_EXE_mgtop-train");

pub fn mpirun_found() -> bool {
    let found = Command::new("mpirun")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("MGTOP_REQUIRE_MPI").is_none(),
            "MGTOP_REQUIRE_MPI is set but mpirun is missing: apt install openmpi-bin libopenmpi-dev"
        );
        super::skipped("mpirun not found (apt install openmpi-bin libopenmpi-dev)");
    }
    found
}

/// `mpirun` for processes on this machine (the benchmark's: as many as asked, root allowed,
/// shared memory without ptrace).
pub fn mpirun() -> Command {
    mgtop::cmd::bench_processes::local_mpirun()
}

/// Two processes started with the flags `first` and `second`, which must fail to start: what
/// they said on stderr.
pub fn refused_pair(first: &[String], second: &[String]) -> String {
    let out = mpirun()
        .args(["-np", "1", BIN])
        .args(first)
        .args([":", "-np", "1", BIN])
        .args(second)
        .output()
        .unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The flags every run here shares: a small MLP on synthetic data, 50 steps.
pub fn common_args(dir: &Path, optimizer: &str, accum: usize, steps: u64) -> Vec<String> {
    let lr = if optimizer == "sgd" { "0.1" } else { "1e-3" };
    [
        "--headless",
        "--data",
        "synthetic:301,12,4",
        "--model",
        "mlp:16,8",
        "--steps",
        &steps.to_string(),
        "--log-every",
        "25",
        "--optimizer",
        optimizer,
        "--lr",
        lr,
        "--grad-accum",
        &accum.to_string(),
        "--batch-per-replica",
        "8",
        "--run-dir",
        &dir.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Runs `mpirun` with one `-np 1` app per entry of `workers` (its --devices cpu:N).
pub fn run_processes(workers: &[usize], args: &[String]) -> Output {
    let mut c = mpirun();
    for (i, n) in workers.iter().enumerate() {
        if i > 0 {
            c.arg(":");
        }
        c.args(["-np", "1", BIN]).args(args);
        c.args(["--devices", &format!("cpu:{n}")]);
    }
    let out = c.output().expect("mpirun starts");
    assert!(
        out.status.success(),
        "mpirun {workers:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn run_alone(workers: usize, args: &[String]) -> Output {
    let out = Command::new(BIN)
        .args(args)
        .args(["--devices", &format!("cpu:{workers}")])
        .output()
        .expect("starts");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn weights(run_dir: &Path) -> Vec<f32> {
    let model = Model::mlp(12, &[16, 8], 4);
    let newest = newest_checkpoint(run_dir);
    let optimizer = checkpoint::read_meta(&newest).unwrap().optimizer;
    checkpoint::read(&newest, &model, &optimizer)
        .unwrap()
        .1
        .params
}

pub fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    None
}

/// A long run on two processes (stall timeout 5 s: a lost peer after 50 s), its output in
/// files.
pub fn start_long(dir: &Path, extra: &[&str]) -> Child {
    start_long_with(dir, 5.0, 200, extra)
}

/// `start_long` with a stall timeout and a checkpoint every `every` steps.
pub fn start_long_with(dir: &Path, stall_timeout: f64, every: u64, extra: &[&str]) -> Child {
    let mut args = common_args(&dir.join("run"), "adam", 1, 100_000_000);
    let (patience, every) = (stall_timeout.to_string(), every.to_string());
    args.extend(["--checkpoint-every", &every, "--stall-timeout", &patience].map(String::from));
    args.extend(extra.iter().map(|s| s.to_string()));
    let out = std::fs::File::create(dir.join("out")).unwrap();
    let err = std::fs::File::create(dir.join("err")).unwrap();
    let mut c = mpirun();
    // marks this test's processes (tests run side by side)
    c.env("MGTOP_TEST_TAG", dir).args(["-x", "MGTOP_TEST_TAG"]);
    c.args(["-np", "2", BIN]).args(&args);
    c.args(["--devices", "cpu:1"]);
    c.stdout(out).stderr(err).stdin(Stdio::null());
    c.spawn().expect("mpirun starts")
}

pub fn wait_for_checkpoint(dir: &Path) {
    super::run::wait_for("a first checkpoint", || {
        std::fs::read_dir(dir.join("run/checkpoints"))
            .ok()?
            .filter_map(|e| e.ok())
            .find(|e| e.path().join("state.json").is_file())
    });
}

pub fn newest_checkpoint(run_dir: &Path) -> PathBuf {
    std::fs::read_dir(run_dir.join("checkpoints"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("state.json").is_file())
        .max()
        .expect("a checkpoint")
}

/// The pid of the mgtop-train that `start_long(dir)` started as MPI process `rank`.
pub fn process_with_rank(dir: &Path, rank: usize) -> Option<i32> {
    let want = format!("OMPI_COMM_WORLD_RANK={rank}");
    let tag = format!("MGTOP_TEST_TAG={}", dir.display());
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let exe = std::fs::read_link(e.path().join("exe")).ok();
        if exe.as_deref() != Some(Path::new(BIN)) {
            continue;
        }
        let env = std::fs::read(e.path().join("environ")).unwrap_or_default();
        let has = |v: &str| env.split(|&b| b == 0).any(|e| e == v.as_bytes());
        if has(&want) && has(&tag) {
            return Some(pid);
        }
    }
    None
}
