//! The measuring commands end to end: --calibrate, scale, selftest without a GPU.

mod common;

use common::cli::{bin, run_in, text};

#[test]
fn calibrate_measures_one_device_and_reports_speedup_and_efficiency() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_in(
        dir.path(),
        &[
            "--headless",
            "--devices",
            "cpu:2",
            "--steps",
            "200",
            "--log-every",
            "100",
            "--calibrate",
            "--metrics-out",
            "m.jsonl",
        ],
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("calibration: one device trains"), "{out}");
    let line = out.lines().find(|l| l.contains("step 200/200")).unwrap();
    assert!(
        line.contains("x one device, ") && line.contains("% efficiency"),
        "{line}"
    );
    let run: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(dir.path().join("m.jsonl"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert!(
        run["baseline_samples_per_s"].as_f64().unwrap() > 0.0,
        "{run}"
    );
}

#[test]
fn scale_measures_the_grid_and_writes_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_in(
        dir.path(),
        &[
            "scale",
            "--counts",
            "1,2",
            "--batches",
            "16",
            "--warmup-steps",
            "5",
            "--seconds",
            "0.2",
            "--repeat",
            "1",
            "--out",
            "scale.json",
            "--steps",
            "7",
            "--run-dir",
            "kept",
        ],
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    // training flags a measurement does not use are said, not dropped
    for flag in ["--steps/--epochs", "--run-dir"] {
        assert!(out.contains(&format!("note: {flag}: ")), "{flag}: {out}");
    }
    assert!(!dir.path().join("kept").exists());
    assert!(
        out.contains("[4/4]") && out.contains("samples/s  spread  speedup"),
        "{out}"
    );
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("scale.json")).unwrap())
            .unwrap();
    assert_eq!(rows.len(), 4, "2 counts x prefetch on/off");
    for r in &rows {
        let (devices, speedup, eff) = (
            r["devices"].as_f64().unwrap(),
            r["speedup"].as_f64().unwrap(),
            r["efficiency"].as_f64().unwrap(),
        );
        assert!(r["samples_per_sec"].as_f64().unwrap() > 0.0);
        assert!(r["spread"].is_null(), "one repeat has no spread: {r}");
        assert!((eff - speedup / devices).abs() < 1e-9, "{r}");
        if devices == 1.0 {
            assert_eq!(speedup, 1.0);
        }
        assert!(
            r["memory_access"].is_null() && r["mfu"].is_null(),
            "CPU workers have no memory-access counter, and no peak for an MFU"
        );
        assert!(r["final_loss"].as_f64().unwrap().is_finite());
    }
    // --resume is ignored: the flags' batch is measured, not the checkpoint's
    let o = run_in(
        dir.path(),
        &["--headless", "--steps", "3", "--batch-per-replica", "8"]
            .into_iter()
            .chain(["--model", "mlp:8", "--data", "synthetic:200,16,4"])
            .collect::<Vec<_>>(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = run_in(
        dir.path(),
        &["scale", "--counts", "1", "--prefetch-modes", "on"]
            .into_iter()
            .chain(["--seconds", "0.1", "--repeat", "1", "--resume", "runs"])
            .chain(["--out", "resumed.json"])
            .collect::<Vec<_>>(),
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("note: --resume: "), "{}", text(&o));
    assert!(
        text(&o).contains("workload: --model mlp:128 --data digits\n"),
        "{}",
        text(&o)
    );
    let rows: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("resumed.json")).unwrap())
            .unwrap();
    assert_eq!(rows[0]["per_replica"], 32, "{rows}");
    // a config file's resume is ignored alike, and said
    std::fs::write(dir.path().join("r.toml"), "resume = \"runs\"\n").unwrap();
    let o = run_in(
        dir.path(),
        &["scale", "--counts", "1", "--prefetch-modes", "on"]
            .into_iter()
            .chain(["--seconds", "0.1", "--repeat", "1", "--config", "r.toml"])
            .collect::<Vec<_>>(),
    );
    assert!(
        o.status.success()
            && text(&o).contains("note: --resume: ")
            && text(&o).contains("workload: --model mlp:128 --data digits\n"),
        "{}",
        text(&o)
    );
    let o = run_in(
        dir.path(),
        &["scale", "--counts", "1", "--out", "table.txt"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains(".csv or .json"), "{}", text(&o));
    // a point given twice, a fault on a rank no point has: refused before measuring
    for (args, says) in [
        (
            &["scale", "--counts", "1,1"][..],
            "--counts: 1 is given twice",
        ),
        (
            &["scale", "--counts", "1,2", "--slow-rank", "5:2"][..],
            "--slow-rank: there is no rank 5 in any point",
        ),
    ] {
        let o = run_in(dir.path(), args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(text(&o).contains(says), "{args:?}: {}", text(&o));
    }
}

#[test]
fn selftest_reports_the_cuda_path_and_exits_0_without_a_gpu() {
    let o = bin().arg("selftest").output().unwrap();
    let out = text(&o);
    if out.contains("GPU: none") {
        assert_eq!(o.status.code(), Some(0), "{out}");
        assert!(out.contains("no GPU: nothing to compare"), "{out}");
    }
    // with NVRTC on the library path every kernel is compiled and listed
    assert!(out.contains("NVRTC: "), "{out}");
    // which cuDNN convolves on GPUs, or why the own kernels do
    assert!(out.contains("cuDNN: "), "{out}");
    // (found: its version and the file loaded)
    if out.contains("(architectures") {
        assert!(out.contains("libnvrtc.so."), "{out}");
        assert!(
            out.contains("ok   optim.cu         sm_90") && !out.contains("FAIL"),
            "{out}"
        );
    }
    // the GPU benchmarks asked for alone fail, saying why nothing was measured (among the
    // other parts they are skipped with a line)
    if out.contains("GPU: none") {
        let o = bin().args(["bench", "--only", "gpu"]).output().unwrap();
        let out = text(&o);
        assert_eq!(o.status.code(), Some(1), "{out}");
        assert!(
            out.contains("bench --only gpu: nothing measured: no GPU ("),
            "{out}"
        );
    }
}

/// Ctrl-C during `scale` keeps what was measured: the run under way finishes, then the table
/// and `--out` of the points measured so far, exit 130.
#[test]
fn an_interrupted_scale_prints_and_writes_what_it_measured() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let mut child = common::cli::spawn_in(
        dir.path(),
        &[
            "scale",
            "--counts",
            "1,2",
            "--seconds",
            "0.3",
            "--warmup-steps",
            "2",
            "--repeat",
            "5",
            "--out",
            "s.json",
        ],
    );
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line.clone());
        }
    });
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l.starts_with("[1/")) {
        let line = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("a first measured run");
        seen.push(line);
    }
    common::cli::signal(&child, "INT");
    let status = child.wait().unwrap();
    reader.join().unwrap();
    seen.extend(rx.try_iter());
    let out = seen.join("\n");
    assert_eq!(status.code(), Some(130), "{out}");
    assert!(
        out.contains("interrupted after ") && out.contains(" of 20 runs"),
        "{out}"
    );
    assert!(out.contains("samples/s  spread  speedup"), "{out}");
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("s.json")).unwrap()).unwrap();
    assert!(!rows.is_empty() && rows.len() <= 4, "{rows:?}");
}

/// `--version` says whether this build runs under mpirun (a build feature a user cannot see
/// otherwise until mpirun fails).
#[test]
fn the_version_says_whether_mpi_is_built_in() {
    let o = bin().arg("--version").output().unwrap();
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let said = match cfg!(feature = "mpi") {
        true => "(MPI: built in",
        false => "(MPI: not built in, for several processes build with --features mpi",
    };
    assert!(
        out.starts_with("mgtop-train ") && out.contains(said),
        "{out}"
    );
}

/// `bench`'s training table gives each point's spread over its repeats beside its median.
#[test]
fn bench_says_how_far_each_point_s_repeats_lie_apart() {
    let o = bin()
        .args([
            "bench",
            "--only",
            "train",
            "--workers",
            "1",
            "--batches",
            "16",
        ])
        .args(["--samples", "800", "--repeat", "2"])
        .output()
        .unwrap();
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let header = out.lines().find(|l| l.contains("workers")).expect(&out);
    assert!(header.contains("mgtop  spread"), "{out}");
    let row = (out.lines())
        .find(|l| l.split_whitespace().take(2).eq(["1", "16"]))
        .expect(&out);
    let spread = row.split_whitespace().nth(3).unwrap();
    assert!(
        spread.starts_with('±') && spread.ends_with('%'),
        "{row}\n{out}"
    );
}

/// `scale` refuses a bad training flag before its first point, as training does before it
/// starts: it failed at the first point that used it, an earlier `--out` replaced by the rows
/// measured before.
#[test]
fn scale_refuses_a_bad_training_flag_before_measuring() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("earlier.csv");
    std::fs::write(&out, "an earlier report\n").unwrap();
    let o = common::cli::run_in(
        dir.path(),
        &[
            "scale",
            "--counts",
            "1,2",
            "--seconds",
            "0.2",
            "--repeat",
            "1",
            "--slow-rank",
            "1:200",
            "--out",
            "earlier.csv",
        ],
    );
    let text = text(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains("--slow-rank factor 200 is out of range"),
        "{text}"
    );
    assert!(!text.contains("[1/"), "nothing measured: {text}");
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "an earlier report\n"
    );
}
