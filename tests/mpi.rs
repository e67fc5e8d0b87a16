//! Runs over several processes, started by Open MPI's `mpirun` on this machine (loopback):
//! exact data parallelism across topologies, checkpoints that move between topologies,
//! controls and failures across processes. Built only with `--features mpi`; the tests are
//! skipped (loudly) where `mpirun` is missing, unless MGTOP_REQUIRE_MPI=1 (CI) makes that a
//! failure.
#![cfg(feature = "mpi")]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::compare::max_rel_diff;
use mgtop::engine::checkpoint;
use mgtop::nn::model::Model;

const BIN: &str = env!("CARGO_BIN_EXE_mgtop-train");

fn mpirun_found() -> bool {
    let found = Command::new("mpirun")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("MGTOP_REQUIRE_MPI").is_none(),
            "MGTOP_REQUIRE_MPI is set but mpirun is missing: apt install openmpi-bin libopenmpi-dev"
        );
        common::skipped("mpirun not found (apt install openmpi-bin libopenmpi-dev)");
    }
    found
}

/// `mpirun` for processes on this machine: as many processes as asked whatever the cores, root
/// allowed (CI runs as root), shared memory without ptrace (containers forbid it).
fn mpirun() -> Command {
    let mut c = Command::new("mpirun");
    c.args([
        "--oversubscribe",
        "--mca",
        "btl_vader_single_copy_mechanism",
        "none",
    ])
    .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    .env("OMPI_MCA_rmaps_base_oversubscribe", "1");
    c
}

/// The flags every run here shares: a small MLP on synthetic data, 50 steps.
fn common_args(dir: &Path, optimizer: &str, accum: usize, steps: u64) -> Vec<String> {
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
fn run_processes(workers: &[usize], args: &[String]) -> Output {
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

fn run_alone(workers: usize, args: &[String]) -> Output {
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

fn weights(run_dir: &Path) -> Vec<f32> {
    let model = Model::mlp(12, &[16, 8], 4);
    let newest = newest_checkpoint(run_dir);
    let optimizer = checkpoint::read_meta(&newest).unwrap().optimizer;
    checkpoint::read(&newest, &model, &optimizer)
        .unwrap()
        .1
        .params
}

#[test]
fn every_topology_gives_the_weights_of_one_process() {
    if !mpirun_found() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = |name: &str| -> PathBuf { tmp.path().join(name) };
    for (optimizer, accum) in [("sgd", 2), ("adam", 1)] {
        let tag = format!("{optimizer}-{accum}");
        // 2 ranks: one process with two workers, two processes with one each
        let args = |name: &str| common_args(&dir(&format!("{tag}-{name}")), optimizer, accum, 50);
        run_alone(2, &args("1x2"));
        run_processes(&[1, 1], &args("2x1"));
        // 4 ranks: 1 x 4, 2 x 2 and an uneven 1 + 3 (the replica check runs every 25 steps)
        run_alone(4, &args("1x4"));
        let log = run_processes(&[2, 2], &args("2x2"));
        run_processes(&[1, 3], &args("1+3"));
        // three processes: Open MPI's all-reduce for a process count that is no power of two
        run_processes(&[2, 1, 1], &args("2+1+1"));
        let w = |name: &str| weights(&dir(&format!("{tag}-{name}")));
        for (a, b) in [
            ("2x1", "1x2"),
            ("2x2", "1x4"),
            ("1+3", "1x4"),
            ("2+1+1", "1x4"),
        ] {
            let d = max_rel_diff(&w(a), &w(b));
            assert!(d <= 1e-5, "{tag}: {a} and {b} differ by {d:e}");
        }
        // process 0 speaks for the run, naming every rank with its host
        let text = String::from_utf8_lossy(&log.stdout);
        let host = mgtop::engine::hostname();
        assert!(
            text.contains(&format!(
                "devices: {host}/cpu0 {host}/cpu1 {host}/cpu0 {host}/cpu1 (4 ranks on 1 host, 2 processes"
            )),
            "{text}"
        );
        assert_eq!(text.matches("finished: 50 steps").count(), 1, "{text}");
    }
}

#[test]
fn the_metrics_file_has_every_rank_of_every_process() {
    if !mpirun_found() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let run_dir = tmp.path().join("run");
    run_processes(&[1, 2], &common_args(&run_dir, "adam", 1, 50));
    let text = std::fs::read_to_string(run_dir.join("metrics.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let run = &lines[0];
    assert_eq!(run["ranks"], 3);
    assert_eq!(run["processes"], 2);
    assert_eq!(run["hosts"].as_array().map(Vec::len), Some(3));
    let steps: Vec<&serde_json::Value> = lines.iter().filter(|l| l["type"] == "step").collect();
    assert!(!steps.is_empty(), "{text}");
    // a step row of the middle of the run carries all three ranks' timings
    let mid = steps[steps.len() / 2];
    let ranks: Vec<u64> = mid["per_rank"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["rank"].as_u64())
        .collect();
    assert_eq!(ranks, [0, 1, 2], "{mid}");
}

#[test]
fn a_checkpoint_from_two_processes_resumes_in_one() {
    if !mpirun_found() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let straight = tmp.path().join("straight");
    run_alone(4, &common_args(&straight, "adam", 1, 50));
    // the same 50 steps, the first 30 on 2 processes x 2 workers, the rest on 1 x 4
    let first = tmp.path().join("first");
    run_processes(&[2, 2], &common_args(&first, "adam", 1, 30));
    let second = tmp.path().join("second");
    let mut args = common_args(&second, "adam", 1, 50);
    args.extend(["--resume".into(), first.display().to_string()]);
    let out = run_alone(4, &args);
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(log.contains("finished: 50 steps"), "{log}");
    let d = max_rel_diff(&weights(&straight), &weights(&second));
    assert!(d <= 1e-5, "resumed weights differ by {d:e}");
}

fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
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

/// A long run on two processes (stall timeout 5 s), its output in files.
fn start_long(dir: &Path, extra: &[&str]) -> Child {
    start_long_patient(dir, 5, extra)
}

fn start_long_patient(dir: &Path, stall_timeout: u64, extra: &[&str]) -> Child {
    let mut args = common_args(&dir.join("run"), "adam", 1, 100_000_000);
    let patience = stall_timeout.to_string();
    args.extend(["--checkpoint-every", "200", "--stall-timeout", &patience].map(String::from));
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

fn wait_for_checkpoint(dir: &Path) {
    common::run::wait_for("a first checkpoint", || {
        std::fs::read_dir(dir.join("run/checkpoints"))
            .ok()?
            .filter_map(|e| e.ok())
            .find(|e| e.path().join("state.json").is_file())
    });
}

#[test]
fn sigterm_to_mpirun_stops_every_process_with_a_checkpoint() {
    if !mpirun_found() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut child = start_long(tmp.path(), &[]);
    wait_for_checkpoint(tmp.path());
    let before = newest_checkpoint(&tmp.path().join("run"));
    // SAFETY: signalling our own child process
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = wait_exit(&mut child, Duration::from_secs(30));
    let err = std::fs::read_to_string(tmp.path().join("err")).unwrap();
    // mpirun's own exit status after a signal varies (0 or 1): the run ended, and it stopped
    // with a checkpoint (mpirun stops passing output on once signalled: the checkpoint itself
    // shows the stop)
    assert!(status.is_some(), "mpirun did not end\n{err}");
    let after = newest_checkpoint(&tmp.path().join("run"));
    assert!(after > before, "no checkpoint at the stop: {after:?}");
    weights(&tmp.path().join("run"));
    // process 0 speaks for the run; process 1 stays quiet
    assert_eq!(err.matches("stopping:").count(), 1, "{err}");
}

fn newest_checkpoint(run_dir: &Path) -> PathBuf {
    std::fs::read_dir(run_dir.join("checkpoints"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("state.json").is_file())
        .max()
        .expect("a checkpoint")
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
}

#[test]
fn a_hung_process_is_taken_for_lost_after_the_stall_timeout() {
    if !mpirun_found() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut child = start_long_patient(tmp.path(), 2, &[]);
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
    weights(&tmp.path().join("run"));
}

#[test]
fn controls_reach_every_process_and_a_long_pause_is_no_lost_peer() {
    if !mpirun_found() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut child = start_long_patient(tmp.path(), 2, &[]);
    wait_for_checkpoint(tmp.path());
    let mut c = common::run::Client::connect(&tmp.path().join("run/live.sock"));
    assert_eq!(c.control("pause", serde_json::json!({}))["ok"], true);
    c.until("the pause", |v| v["action"] == "pause");
    // paused for twice the stall timeout: the processes keep answering each other
    std::thread::sleep(Duration::from_secs(4));
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

/// The pid of the mgtop-train that `start_long(dir)` started as MPI process `rank`.
fn process_with_rank(dir: &Path, rank: usize) -> Option<i32> {
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

/// Two network namespaces joined by a veth pair: two "hosts" with a real network between them.
/// Dropping it deletes both (and with them the pair).
struct TwoHosts {
    names: [String; 2],
    subnet: String,
}

impl TwoHosts {
    fn create() -> Result<TwoHosts, String> {
        // SAFETY: a plain query
        if unsafe { libc::geteuid() } != 0 {
            return Err("needs root (network namespaces)".into());
        }
        let id = std::process::id() % 250;
        let hosts = TwoHosts {
            names: [format!("mgt{id}a"), format!("mgt{id}b")],
            subnet: format!("10.213.{id}"),
        };
        let [a, b] = &hosts.names;
        let (va, vb) = (format!("{a}v"), format!("{b}v"));
        let steps: Vec<Vec<String>> = [
            vec!["netns", "add", a],
            vec!["netns", "add", b],
            vec!["link", "add", &va, "type", "veth", "peer", "name", &vb],
            vec!["link", "set", &va, "netns", a],
            vec!["link", "set", &vb, "netns", b],
        ]
        .into_iter()
        .map(|v| v.into_iter().map(String::from).collect())
        .chain(
            [(a, &va, 1), (b, &vb, 2)]
                .into_iter()
                .flat_map(|(ns, dev, n)| {
                    let addr = format!("{}.{n}/24", hosts.subnet);
                    [
                        vec!["-n", ns, "addr", "add", &addr, "dev", dev],
                        vec!["-n", ns, "link", "set", dev, "up"],
                        vec!["-n", ns, "link", "set", "lo", "up"],
                    ]
                    .map(|v| v.into_iter().map(String::from).collect::<Vec<_>>())
                }),
        )
        .collect();
        for args in steps {
            let out = Command::new("ip")
                .args(&args)
                .output()
                .map_err(|e| e.to_string())?;
            if !out.status.success() {
                return Err(format!(
                    "`ip {}` failed: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
        Ok(hosts)
    }
}

impl Drop for TwoHosts {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
    }
}

#[test]
fn two_hosts_over_a_real_network_train_like_one_process() {
    if !mpirun_found() {
        return;
    }
    let hosts = match TwoHosts::create() {
        Ok(h) => h,
        Err(why) => return common::skipped(&format!("no network namespaces here: {why}")),
    };
    let tmp = tempfile::tempdir().unwrap();
    // mpirun starts each host's daemon through this agent: inside the namespace named like the
    // host, with that name as its host name
    let agent = tmp.path().join("agent");
    std::fs::write(
        &agent,
        "#!/bin/sh\nns=\"$1\"; shift\nexec ip netns exec \"$ns\" unshare --uts sh -c \"hostname $ns && exec $*\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let alone = tmp.path().join("alone");
    run_alone(4, &common_args(&alone, "adam", 1, 50));
    let apart = tmp.path().join("apart");
    let net = format!("{}.0/24", hosts.subnet);
    let [a, b] = &hosts.names;
    let mut c = Command::new("ip");
    c.args(["netns", "exec", a, "mpirun", "--mca", "plm_rsh_agent"])
        .arg(&agent)
        .args([
            "--mca",
            "btl",
            "tcp,self",
            "--mca",
            "btl_tcp_if_include",
            &net,
        ])
        .args([
            "--mca",
            "oob_tcp_if_include",
            &net,
            "-H",
            &format!("{a},{b}"),
        ])
        .args(["-np", "2", BIN])
        .args(common_args(&apart, "adam", 1, 50))
        .args(["--devices", "cpu:2"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    let out = c.output().expect("mpirun starts");
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{log}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        log.contains(&format!(
            "devices: {a}/cpu0 {a}/cpu1 {b}/cpu0 {b}/cpu1 (4 ranks on 2 hosts"
        )),
        "{log}"
    );
    let d = max_rel_diff(&weights(&alone), &weights(&apart));
    assert!(d <= 1e-5, "two hosts and one process differ by {d:e}");
}

#[test]
fn strategies_across_processes_local_sgd_runs_and_central_storage_is_refused() {
    if !mpirun_found() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // local SGD's averages go through the processes' all-reduce; the replica check runs only
    // where the ranks hold one model
    let mut args = common_args(&tmp.path().join("local"), "sgd", 1, 50);
    args.extend(["--strategy", "local-sgd:4", "--local-sgd-warmup", "10"].map(String::from));
    let out = run_processes(&[1, 1], &args);
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(log.contains("finished: 50 steps"), "{log}");
    let mut args = common_args(&tmp.path().join("central"), "sgd", 1, 50);
    args.extend(["--strategy", "central-storage"].map(String::from));
    let out = mpirun()
        .args(["-np", "2", BIN])
        .args(&args)
        .args(["--devices", "cpu:1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("central-storage") && err.contains("cannot span processes"),
        "{err}"
    );
}
