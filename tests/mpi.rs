//! Runs over several processes, started by Open MPI's `mpirun` on this machine (loopback, and
//! two network namespaces as two hosts): exact data parallelism across topologies, the metrics
//! file, checkpoints that move between topologies, strategies and `scale` over processes. Built
//! only with `--features mpi`; skipped (loudly) where `mpirun` is missing, unless
//! MGTOP_REQUIRE_MPI=1 (CI) makes that a failure. Failures and signals: tests/mpi_faults.rs.
#![cfg(feature = "mpi")]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::compare::max_rel_diff;
use common::mpi::*;

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
        // process 0 speaks for the run, naming every rank with its host (CPU workers numbered
        // in their host's order)
        let text = String::from_utf8_lossy(&log.stdout);
        let host = mgtop::pids::hostname();
        assert!(
            text.contains(&format!(
                "devices: {host}/cpu0 {host}/cpu1 {host}/cpu2 {host}/cpu3 (4 ranks on 1 host, 2 processes"
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
fn two_processes_record_what_one_process_records() {
    if !mpirun_found() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let records = |dir: &std::path::Path| -> Vec<(String, u64, String)> {
        let text = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
        text.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|v| !matches!(v["type"].as_str(), Some("telemetry" | "run")))
            .map(|v| {
                let what = format!("{} {}", v["kind"], v["status"]);
                (
                    v["type"].as_str().unwrap_or("").to_string(),
                    v["step"].as_u64().unwrap_or(0),
                    what,
                )
            })
            .collect()
    };
    let (alone, procs) = (tmp.path().join("alone"), tmp.path().join("procs"));
    let args = |dir| {
        let mut a = common_args(dir, "adam", 1, 60);
        let at = a.iter().position(|x| x == "--log-every").unwrap();
        a[at + 1] = "10".into();
        a
    };
    run_alone(2, &args(&alone));
    run_processes(&[1, 1], &args(&procs));
    // (other processes' steps reach process 0 a step later: the order may differ, not the records)
    let sorted = |mut v: Vec<(String, u64, String)>| {
        v.sort_by(|x, y| (x.1, &x.0, &x.2).cmp(&(y.1, &y.0, &y.2)));
        v
    };
    let (a, p) = (sorted(records(&alone)), sorted(records(&procs)));
    assert_eq!(a, p, "one process:\n{a:?}\ntwo processes:\n{p:?}");
    assert!(a.iter().any(|r| r.0 == "step" && r.1 == 60), "{a:?}");
}

/// 50 steps on 1 process x 4 workers (`straight`), and the first 30 of them on 2 processes x
/// 2 workers (`first`), their run directories.
fn straight_and_first_30(dir: &std::path::Path) -> (PathBuf, PathBuf) {
    let straight = dir.join("straight");
    run_alone(4, &common_args(&straight, "adam", 1, 50));
    let first = dir.join("first");
    run_processes(&[2, 2], &common_args(&first, "adam", 1, 30));
    (straight, first)
}

#[test]
fn a_checkpoint_from_two_processes_resumes_in_one() {
    if !mpirun_found() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // the same 50 steps, the first 30 on 2 processes x 2 workers, the rest on 1 x 4
    let (straight, first) = straight_and_first_30(tmp.path());
    let second = tmp.path().join("second");
    let mut args = common_args(&second, "adam", 1, 50);
    args.extend(["--resume".into(), first.display().to_string()]);
    let out = run_alone(4, &args);
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(log.contains("finished: 50 steps"), "{log}");
    let d = max_rel_diff(&weights(&straight), &weights(&second));
    assert!(d <= 1e-5, "resumed weights differ by {d:e}");
    // resumed in one process on the recorded flags (process 0's `--devices cpu:2`): 2 ranks of
    // the 4, said with how to keep them
    let out = Command::new(BIN)
        .args([
            "--headless",
            "--steps",
            "50",
            "--resume",
            &first.display().to_string(),
        ])
        .args(["--run-dir", &tmp.path().join("third").display().to_string()])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("2 ranks (the checkpoint's run had 4: a global batch of 16 where it had 32: its batches and so its losses differ from the uninterrupted run's; --batch-per-replica 16 keeps its global batch of 32)"),
        "{log}"
    );
}

/// `--resume` alone over several processes: process 0 reads the checkpoint's settings and
/// sends them to the others (they took the defaults, and the processes refused to meet).
#[test]
fn a_run_resumed_over_processes_takes_its_settings_from_process_0s_checkpoint() {
    if !mpirun_found() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (straight, first) = straight_and_first_30(tmp.path());
    let second = tmp.path().join("second");
    let args: Vec<String> = [
        "--headless",
        "--steps",
        "50",
        "--resume",
        &first.display().to_string(),
        "--run-dir",
        &second.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let out = run_processes(&[2, 2], &args);
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(log.contains("finished: 50 steps"), "{log}");
    let d = max_rel_diff(&weights(&straight), &weights(&second));
    assert!(d <= 1e-5, "resumed weights differ by {d:e}");
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
        // (each of this process's pairs a name and subnet of its own: tests run side by side)
        static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let made = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = (std::process::id() + 97 * made) % 250;
        let hosts = TwoHosts {
            names: [format!("mgt{id}a"), format!("mgt{id}b")],
            subnet: format!("10.213.{id}"),
        };
        let [a, b] = &hosts.names;
        // left behind by a killed run of this test: taken back first
        for n in [a, b] {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
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

impl TwoHosts {
    /// Two hosts where mpirun and network namespaces are at hand (else said skipped: None).
    fn here() -> Option<TwoHosts> {
        if !mpirun_found() {
            return None;
        }
        TwoHosts::create()
            .map_err(|why| common::skipped(&format!("no network namespaces here: {why}")))
            .ok()
    }

    /// `mpirun` of one process on each host, each given `args`, 2 CPU workers each (`tmp`: a
    /// folder for the launcher's agent). Its output once it ends.
    fn run(&self, tmp: &Path, args: &[String]) -> std::process::Output {
        // mpirun starts each host's daemon through this agent: inside the namespace named like
        // the host, with that name as its host name
        let agent = tmp.join("agent");
        std::fs::write(
            &agent,
            "#!/bin/sh\nns=\"$1\"; shift\nexec ip netns exec \"$ns\" unshare --uts sh -c \"hostname $ns && exec $*\"\n",
        )
        .unwrap();
        let executable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        std::fs::set_permissions(&agent, executable).unwrap();
        let net = format!("{}.0/24", self.subnet);
        let [a, b] = &self.names;
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
            .args(args)
            .args(["--devices", "cpu:2"])
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        c.output().expect("mpirun starts")
    }
}

#[test]
fn two_hosts_over_a_real_network_train_like_one_process() {
    let Some(hosts) = TwoHosts::here() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let alone = tmp.path().join("alone");
    run_alone(4, &common_args(&alone, "adam", 1, 50));
    let apart = tmp.path().join("apart");
    let out = hosts.run(tmp.path(), &common_args(&apart, "adam", 1, 50));
    let [a, b] = &hosts.names;
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
fn another_machines_device_samples_reach_process_0s_records() {
    let Some(hosts) = TwoHosts::here() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let mut args = common_args(&run, "adam", 1, 400);
    // process 1 (the other host's, ranks 2 and 3) reports its ranks at 42 degrees, as it would
    // what NVML reads of its GPUs; a slow input keeps the run going for a few samples (6 s:
    // under a loaded CI machine's debug build, process 1's sampling thread, on one bound core
    // beside its workers, got too few loads across for three in a row within 3 s)
    let made_up = ["--inject-peer-sample", "42", "--sample-interval", "0.1"];
    args.extend(
        made_up
            .into_iter()
            .chain(["--slow-data", "0:15"])
            .map(String::from),
    );
    let out = hosts.run(tmp.path(), &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let temps: Vec<Vec<Option<f64>>> = (metrics.lines())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["type"] == "telemetry")
        .map(|v| {
            let devices = v["devices"].as_array().unwrap().clone();
            devices.iter().map(|d| d["temp_c"].as_f64()).collect()
        })
        .collect();
    // process 0's own CPU workers have no temperature; the other host's ranks say theirs
    let heard = [None, None, Some(42.0), Some(42.0)];
    assert!(temps.iter().any(|t| t[..] == heard), "{temps:?}");
    assert!(
        temps.iter().all(|t| t[0].is_none() && t[1].is_none()),
        "{temps:?}"
    );
    // and its machine's load (made up: its two cores taken by other work), said as that
    // machine's in the log, the summary and the records
    let log = String::from_utf8_lossy(&out.stdout);
    let [_, b] = &hosts.names;
    assert!(
        log.contains(&format!("WARN outside load on {b}: other work took 2.0 of its 2 cores (2.0 of them made-up (pid 1)) beside this run's 0.0")),
        "{log}"
    );
    let summary = log.lines().find(|l| l.contains(" summary: ")).unwrap();
    assert!(
        summary.contains(&format!("outside-load on {b} from step")),
        "{summary}"
    );
    // (process 0's machine may be said too: the other host's process runs on its cores)
    let said = (metrics.lines())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["kind"] == "outside_load" && v["host"] == **b)
        .expect("an outside_load record of the other host");
    assert_eq!(
        (&said["rank"], &said["others_cores"]),
        (&2.into(), &2.0.into()),
        "{said}"
    );
    // samples as often as they may come still leave the positions their turns: a stall names
    // the one rank behind it, not the other host's ranks waiting at the all-reduce too
    let mut args = common_args(&tmp.path().join("stall"), "adam", 1, 2);
    let stall = ["--slow-data", "0:2500", "--stall-timeout", "1"];
    let often = ["--inject-peer-sample", "42", "--sample-interval", "0.05"];
    args.extend(stall.into_iter().chain(often).map(String::from));
    let out = hosts.run(tmp.path(), &args);
    let log = String::from_utf8_lossy(&out.stdout);
    let stalls: Vec<&str> = log.lines().filter(|l| l.contains("stall:")).collect();
    assert!(!stalls.is_empty(), "{log}");
    for s in stalls {
        assert!(
            s.contains("rank(s) 0 did not reach the all-reduce"),
            "{log}"
        );
    }
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

#[test]
fn scale_measures_device_counts_over_processes() {
    if !mpirun_found() {
        return;
    }
    let scale = |counts: &str| {
        mpirun()
            .args(["-np", "2", BIN, "scale", "--data", "synthetic:301,12,4"])
            .args(["--model", "mlp:16,8", "--counts", counts, "--batches", "8"])
            .args(["--repeat", "1", "--seconds", "0.3", "--warmup-steps", "5"])
            .args(["--prefetch-modes", "on"])
            .output()
            .unwrap()
    };
    let out = scale("1,2,4");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // process 0 alone prints: one header, one table with a row per count
    assert_eq!(text.matches("scale: ").count(), 1, "{text}");
    assert!(
        text.contains("2 processes, each point's devices shared evenly"),
        "{text}"
    );
    for devices in ["1", "2", "4"] {
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().take(2).eq(["mirrored", devices])),
            "no row for {devices}:\n{text}"
        );
    }
    let out = scale("3");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("cannot be shared evenly by 2 processes"),
        "{err}"
    );
    // a grid the processes are given otherwise: refused before a point, by process 0 (the
    // first point one has and the other has not waited for ever)
    let one = |counts: &str| {
        [
            "scale",
            "--data",
            "synthetic:301,12,4",
            "--model",
            "mlp:16,8",
        ]
        .into_iter()
        .chain(["--counts", counts, "--batches", "8", "--repeat", "1"])
        .chain([
            "--seconds",
            "0.3",
            "--warmup-steps",
            "5",
            "--prefetch-modes",
            "on",
        ])
        .map(String::from)
        .collect::<Vec<String>>()
    };
    let started = std::time::Instant::now();
    let err = refused_pair(&one("2,4"), &one("2"));
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    assert!(
        err.contains("process 1 measures --counts 2, process 0 --counts 2,4")
            && err.matches("process 1 measures").count() == 1,
        "{err}"
    );
}

#[test]
fn processes_started_with_different_flags_are_refused_naming_the_flag() {
    if !mpirun_found() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let args = common_args(&tmp.path().join("run"), "sgd", 1, 50);
    // the second process checks its replicas at other steps: the exchanges would not match
    let other: Vec<String> = args
        .iter()
        .map(|a| if a == "25" { "10".into() } else { a.clone() })
        .collect();
    let with = |args: &[String], more: &[&str]| -> Vec<String> {
        (args.iter().cloned())
            .chain(more.iter().map(|s| s.to_string()))
            .collect()
    };
    let one = with(&args, &["--devices", "cpu:1"]);
    let err = refused_pair(&one, &with(&other, &["--devices", "cpu:1"]));
    assert!(
        err.contains("process 1 (on")
            && err.contains("with --log-every 10, process 0 (on")
            && err.contains("with --log-every 25"),
        "{err}"
    );
    // a flag only process 0 acts on (the run's name, directory, files, resume), given to
    // another process alone, would be silently not done
    let err = refused_pair(
        &one,
        &with(&args, &["--devices", "cpu:1", "--name", "mine"]),
    );
    assert!(
        err.contains("process 1 was started with --name mine, process 0 with --name not given"),
        "{err}"
    );
    // other data: what each process read is named beside the counts
    let other_data: Vec<String> = (args.iter())
        .map(|a| match a.as_str() {
            "synthetic:301,12,4" => "synthetic:300,12,4".into(),
            _ => a.clone(),
        })
        .collect();
    let err = refused_pair(&one, &with(&other_data, &["--devices", "cpu:1"]));
    assert!(
        err.contains(
            "(process 1 read --data synthetic:300,12,4, process 0 --data synthetic:301,12,4"
        ),
        "{err}"
    );
}

#[test]
fn a_process_that_cannot_start_says_which_process_and_host_it_is() {
    if !mpirun_found() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let args = common_args(&tmp.path().join("run"), "sgd", 1, 50);
    // the second process asks for more intra-op threads than a process may have
    let mut one = args.clone();
    one.extend(["--devices".into(), "cpu:1".into()]);
    let mut other = args;
    other.extend(["--devices", "cpu:8", "--threads-per-worker", "200"].map(String::from));
    let err = refused_pair(&one, &other);
    assert!(
        err.contains("error (process 1 on ") && err.contains("asks for 1600 threads"),
        "{err}"
    );
}

/// A picture of process 1's machine that does not decode is said by process 1 (process 0
/// cannot see it), as a run of one process says its own: a WARNING line naming the file, and a
/// count at the end. (A file of the same name and length whose header reads: the processes'
/// data agree at the start.)
#[test]
fn another_process_says_the_pictures_it_could_not_decode() {
    if !mpirun_found() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (mine, theirs) = (tmp.path().join("mine"), tmp.path().join("theirs"));
    for dir in [&mine, &theirs] {
        for (class, shade) in [("cat", 40u8), ("dog", 200)] {
            std::fs::create_dir_all(dir.join(class)).unwrap();
            for i in 0..8u8 {
                let img = image::RgbImage::from_fn(8, 8, |x, y| {
                    image::Rgb([shade, (x as u8) * 8 + i, (y as u8) * 8])
                });
                img.save(dir.join(class).join(format!("{i}.png"))).unwrap();
            }
        }
    }
    // (its header whole, so it is listed as the other process's is; its pixels damaged)
    let broken = theirs.join("dog/3.png");
    let mut bytes = std::fs::read(&broken).unwrap();
    let n = bytes.len();
    bytes[50..n - 16].fill(b'x');
    std::fs::write(&broken, bytes).unwrap();
    let args = |data: &Path| {
        let run = tmp.path().join("run").display().to_string();
        let data = format!("images:{}", data.display());
        ["--headless", "--devices", "cpu:1", "--model", "mlp:8"]
            .into_iter()
            .map(String::from)
            .chain(["--data".into(), data, "--val-split".into(), "0".into()])
            .chain(["--epochs", "2", "--batch-per-replica", "4"].map(String::from))
            .chain(["--run-dir".into(), run])
            .collect::<Vec<String>>()
    };
    let out = mpirun()
        .args(["-np", "1", BIN])
        .args(args(&mine))
        .args([":", "-np", "1", BIN])
        .args(args(&theirs))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let said = format!("skipped {}", broken.display());
    let warned = err
        .lines()
        .filter(|l| l.contains(&said))
        .collect::<Vec<_>>();
    assert!(
        warned.len() == 1
            && warned[0].starts_with("process 1 on ")
            && warned[0].contains("WARNING"),
        "{err}"
    );
    assert!(
        err.contains("note: 1 image file(s) of this machine could not be decoded"),
        "{err}"
    );
    // and process 0's records count it (they had nothing of it)
    let metrics = std::fs::read_to_string(tmp.path().join("run/metrics.jsonl")).unwrap();
    assert!(
        metrics.contains("the process of rank 1 could not decode 1 of its machine's picture files"),
        "{metrics}"
    );
}

/// A validation class none of whose pictures decode on one machine only is left out by every
/// process (the other's ranks counted it: figures over different classes, summed): the run's
/// last validation is `eval`'s over the damaged folder, which leaves the class out.
#[test]
fn a_validation_class_lost_on_one_machine_is_left_out_by_every_process() {
    if !mpirun_found() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (mine, theirs) = (tmp.path().join("mine"), tmp.path().join("theirs"));
    for dir in [&mine, &theirs] {
        for (split, class, shade, n) in [
            ("train", "cat", 40u8, 4u8),
            ("train", "dog", 200, 4),
            ("val", "cat", 40, 3),
            ("val", "dog", 200, 5),
        ] {
            let folder = dir.join(split).join(class);
            std::fs::create_dir_all(&folder).unwrap();
            for i in 0..n {
                let img = image::RgbImage::from_fn(8, 8, |x, y| {
                    image::Rgb([shade, (x as u8) * 8 + i, (y as u8) * 8 + 3 * i])
                });
                img.save(folder.join(format!("{i}.png"))).unwrap();
            }
        }
    }
    // (headers whole, so the processes' listings agree; every validation dog of process 1's
    // machine damaged)
    for i in 0..5 {
        let broken = theirs.join(format!("val/dog/{i}.png"));
        let mut bytes = std::fs::read(&broken).unwrap();
        let n = bytes.len();
        bytes[50..n - 16].fill(b'x');
        std::fs::write(&broken, bytes).unwrap();
    }
    let run = tmp.path().join("run");
    let args = |data: &Path| {
        let data = format!("images:{}", data.display());
        [
            "--headless",
            "--devices",
            "cpu:1",
            "--model",
            "mlp:8",
            "--steps",
            "4",
        ]
        .into_iter()
        .map(String::from)
        .chain([
            "--data".into(),
            data,
            "--batch-per-replica".into(),
            "2".into(),
        ])
        .chain(["--run-dir".into(), run.display().to_string()])
        .collect::<Vec<String>>()
    };
    let out = mpirun()
        .args(["-np", "1", BIN])
        .args(args(&mine))
        .args([":", "-np", "1", BIN])
        .args(args(&theirs))
        .output()
        .unwrap();
    let err = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{err}");
    assert!(err.contains("validation leaves the class out"), "{err}");
    let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    // process 0's records say it too (its own files decode)
    assert!(
        metrics.contains("no picture of class 1 decodes on another machine of the run"),
        "{metrics}"
    );
    let last = (metrics.lines())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .rfind(|r| r["val_accuracy"].is_number())
        .unwrap_or_else(|| panic!("no validation in {metrics}"));
    let o = Command::new(BIN)
        .args(["eval", &run.display().to_string(), "--data"])
        .arg(format!("images:{}", theirs.join("val").display()))
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{said}");
    // `loss L   accuracy A% (k of 3)`: the cats alone
    let line = (said.lines())
        .find(|l| l.starts_with("loss "))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(line.ends_with(" of 3)"), "{said}");
    let loss: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    let (k, _) = line.rsplit_once('(').unwrap().1.split_once(' ').unwrap();
    let accuracy = k.parse::<f64>().unwrap() / 3.0;
    assert!(
        (last["val_accuracy"].as_f64().unwrap() - accuracy).abs() < 1e-6
            && (last["val_loss"].as_f64().unwrap() - loss).abs() < 1e-3,
        "the run's last validation {last} is not eval's over the cats: {line}"
    );
}
