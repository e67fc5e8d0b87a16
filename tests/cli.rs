//! The binary end to end: a headless run and its JSONL, every bad input's message, how a run
//! ends (divergence, a panicking worker, SIGTERM, a closed stdout).

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use common::cli::{bin, run_in, signal, spawn_in, text};

#[test]
fn headless_run_on_two_workers_logs_plain_lines_and_writes_the_documented_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_in(
        dir.path(),
        &[
            "--headless",
            "--devices",
            "cpu:2",
            "--epochs",
            "3",
            "--log-every",
            "10",
            "--metrics-out",
            "run.jsonl",
        ],
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        !out.contains('\r') && !out.contains('\x1b'),
        "escape codes in log: {out}"
    );
    assert!(out.contains("batch 32x2=64"), "{out}");
    assert!(out.contains("devices: cpu0 cpu1 (2 ranks, "), "{out}");
    // each step line says where step time went: waiting for data, moving gradients and waiting
    // for other ranks
    let step_line = out.lines().find(|l| l.contains("| work ms r0 ")).unwrap();
    let wait: f64 = step_line
        .rsplit_once("wait ")
        .and_then(|(_, w)| w.split('%').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no wait share: {step_line}"));
    assert!(
        step_line.contains("| data ")
            && step_line.contains(" comm ")
            && (0.0..=100.0).contains(&wait),
        "{step_line}"
    );
    assert!(
        out.contains("epoch 3/3 done") && out.contains("val loss") && out.contains("samples/s"),
        "{out}"
    );
    assert!(
        out.contains("scaled x*1/16"),
        "normalisation is stated: {out}"
    );
    // the run's directory: named (absolute) at the start, owner-only, `latest` points at it, and
    // it holds the metrics file (a copy of --metrics-out's) and the checkpoints
    let run_dir = std::path::PathBuf::from(
        out.lines()
            .find_map(|l| l.strip_prefix("run dir: "))
            .expect("the run dir is named"),
    );
    assert!(run_dir.is_absolute(), "{out}");
    assert!(
        run_dir.starts_with(
            dir.path()
                .canonicalize()
                .unwrap()
                .join("runs/digits-mlp_128")
        ),
        "{out}"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&run_dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "{run_dir:?}");
    assert_eq!(
        std::fs::read_link(dir.path().join("runs/digits-mlp_128/latest")).unwrap(),
        run_dir.file_name().unwrap()
    );
    assert!(
        run_dir
            .join("checkpoints/step-00000069/state.json")
            .is_file(),
        "{out}"
    );
    assert_eq!(
        std::fs::read(run_dir.join("metrics.jsonl")).unwrap(),
        std::fs::read(dir.path().join("run.jsonl")).unwrap()
    );
    assert!(
        out.contains(&format!("run dir: {} (mgtop-train view", run_dir.display())),
        "the end names it too: {out}"
    );

    let jsonl = std::fs::read_to_string(dir.path().join("run.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is JSON"))
        .collect();
    assert_eq!(lines[0]["type"], "run");
    assert_eq!(lines[0]["schema"], "mgtop.metrics/1");
    assert_eq!(lines[0]["ranks"], 2);
    let steps: Vec<_> = lines.iter().filter(|l| l["type"] == "step").collect();
    // every 10th, and the run's last
    let numbers: Vec<u64> = steps.iter().map(|s| s["step"].as_u64().unwrap()).collect();
    assert_eq!(numbers, [10, 20, 30, 40, 50, 60, 69], "steps of 69");
    assert_eq!(steps[6]["run_ends_at"], 69);
    for s in &steps {
        // (the last, step 69, is the epoch's short batch: 1438 - 22 x 64 = 30)
        assert!(s["global_batch"] == 64 || s["step"] == 69, "{s}");
        let ranks = s["per_rank"].as_array().unwrap();
        assert_eq!(ranks.len(), 2);
        for (i, r) in ranks.iter().enumerate() {
            assert_eq!(r["rank"], i);
            for k in [
                "step_ms",
                "data_wait_ms",
                "compute_ms",
                "comm_ms",
                "sync_wait_ms",
                "optimizer_ms",
            ] {
                assert!(r[k].as_f64().unwrap() >= 0.0, "{k} in {r}");
            }
        }
    }
    let epochs: Vec<_> = lines.iter().filter(|l| l["type"] == "epoch").collect();
    assert_eq!(epochs.len(), 3);
    assert!(epochs[2]["val_accuracy"].as_f64().unwrap() > 0.5);
    assert!(lines
        .iter()
        .any(|l| l["type"] == "event" && l["kind"] == "checkpoint"));
    // device telemetry: CPU workers report their busy share; what they cannot measure is null
    let telemetry: Vec<_> = lines.iter().filter(|l| l["type"] == "telemetry").collect();
    assert!(!telemetry.is_empty(), "no telemetry record");
    for t in &telemetry {
        let devices = t["devices"].as_array().unwrap();
        assert_eq!(devices.len(), 2, "{t}");
        for d in devices {
            let util = d["util"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&util), "{d}");
            assert!(d["mem_access"].is_null() && d["temp_c"].is_null(), "{d}");
        }
    }
    // the last, at the end, measures no process memory: the ranks' was given back by then (a
    // finished run's memory read as what was left, under half of what it took)
    assert!(
        telemetry.last().unwrap()["process_rss"].is_null(),
        "{telemetry:?}"
    );
    assert_eq!(lines.last().unwrap()["type"], "end");
    assert_eq!(lines.last().unwrap()["status"], "completed");
}

/// Each bad input: non-zero exit, a message naming the problem (and the fix).
#[test]
fn bad_inputs_get_one_clear_error_and_a_nonzero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("ragged.csv"), "1,2,0\n3,4,1\n5,1\n").unwrap();
    std::fs::write(d.join("labels.csv"), "1,2,0\n3,4,-3\n").unwrap();
    std::fs::write(d.join("words.csv"), "1,2,0\n3,abc,1\n").unwrap();
    std::fs::write(
        d.join("trunc-images"),
        [0u8, 0, 8, 3, 0, 0, 0, 10, 0, 0, 0, 2, 0, 0, 0, 2, 1, 2, 3],
    )
    .unwrap();
    std::fs::write(
        d.join("labels-idx"),
        [0u8, 0, 8, 1, 0, 0, 0, 10, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
    )
    .unwrap();
    let cases: &[(&[&str], &[&str])] = &[
        (&["--optimizer", "lion"], &["--optimizer", "adamw"]),
        (
            &["--batch-per-replica", "0"],
            &["--batch-per-replica 0", "use 1 to 1048576"],
        ),
        (&["--devices", "0,1"], &["0,1", "no GPU", "cpu:N"]),
        (&["--devices", "cpu:0"], &["1 to 256"]),
        (&["--data", "csv:missing.csv"], &["missing.csv", "--data"]),
        (
            &["--data", "csv:ragged.csv"],
            &["ragged.csv", "line 3 has 2 fields"],
        ),
        (&["--data", "csv:labels.csv"], &["line 2", "label `-3`"]),
        (&["--data", "csv:words.csv"], &["line 2, column 1", "abc"]),
        (
            &["--data", "idx:trunc-images,labels-idx"],
            &["trunc-images", "10x2x2 = 40 bytes", "3 follow"],
        ),
        (
            &["--resume", "nowhere"],
            &["--resume nowhere: no such file or directory"],
        ),
        (&["--model", "mlp:abc"], &["--model", "abc"]),
        (
            &["--stall-timeout", "1e-300"],
            &["--stall-timeout 1e-300 is invalid", "0.001 to 1000000"],
        ),
        (
            &["--stall-timeout", "0"],
            &["--stall-timeout 0 is invalid", "0.001 to 1000000"],
        ),
        (
            &["--data", "synthetic:100,8,3", "--model", "conv8k3"],
            &["layer 1 `conv8k3`", "flat vector", "--data"],
        ),
        (
            &["--model", "conv8k3,pool2,pool2,pool2"],
            &["on 1x8x8 inputs", "layer 4 `pool2`"],
        ),
        (&["--model", "conv8x3"], &["layer 1 `conv8x3`", "conv32k3"]),
        (
            &["--model", "resnet19"],
            &["resnet19", "resnet20", "mobilenetv2"],
        ),
        (
            &["--model", "resnet20", "--data", "synthetic:100,8,3"],
            &["resnet20 needs images", "flat vectors"],
        ),
        (
            &["--model", "conv8k3,bn,basic8s2,dropout2"],
            &["layer 4 `dropout2`", "more than 0 and less than 1"],
        ),
        (
            &["--optimizer", "momentum", "--momentum", "1.5"],
            &["--momentum 1.5 is out of range", "0.9"],
        ),
        (
            &["--optimizer", "nesterov", "--momentum", "0"],
            &["nesterov with --momentum 0", "--momentum 0.9"],
        ),
        // (a subnormal LR would be 0 once scaled)
        (&["--lr", "1e-38"], &["--lr 1e-38", "from 1.2e-38"]),
        // a layer list no data makes whole: the model alone is to change
        (
            &["--model", "relu,dense8"],
            &["layer 1 `relu`", "; change --model\n"],
        ),
        (
            &["--model", "conv8k3s8,conv8k3s8,conv8k3s8"],
            &["larger pictures; change --model, or --data to data of that shape"],
        ),
        (&["--label-smoothing", "1"], &["--label-smoothing 1", "0.1"]),
        (
            &["--clip-grad-norm", "-1"],
            &["--clip-grad-norm -1", "1.0", "0 turns clipping off"],
        ),
        (&["--clip-grad-norm", "nan"], &["--clip-grad-norm NaN"]),
        // past what a float32 holds: said as given, not as what it would round to
        (
            &["--clip-grad-norm", "1e-46"],
            &["--clip-grad-norm 1e-46", "from 1.2e-38"],
        ),
        (
            &["--clip-grad-norm", "1e39"],
            &["--clip-grad-norm 1e39", "to 3e38"],
        ),
        (
            &["--precision", "fp16"],
            &["`fp16`", "auto, fp32, tf32 or bf16"],
        ),
        (
            &["--cuda-graph", "yes"],
            &["--cuda-graph", "`yes`", "auto, on or off"],
        ),
        (&["--schedule", "multistep:0.8,0.2"], &["must increase"]),
        (&["--frobnicate"], &["--frobnicate"]),
        (&["--epochs", "0"], &["--epochs 0"]),
        (
            &["--theme", "solarized"],
            &["solarized", "dark, light, mono"],
        ),
        (
            &["--theme", "bad-theme.toml"],
            &["bad-theme.toml", "`text`", "256-colour"],
        ),
        (&["--sample-interval", "0"], &["--sample-interval"]),
        (
            &["--threads-per-worker", "0"],
            &["--threads-per-worker", "1 to 256"],
        ),
        (&["--threads-per-worker", "many"], &["`many`", "auto"]),
        (
            &["--metrics-out", "no/such/dir/run.jsonl"],
            &["no/such/dir/run.jsonl", "--metrics-out"],
        ),
        (
            &[
                "--data",
                "csv:missing.csv",
                "--metrics-out",
                "earlier.jsonl",
            ],
            &["missing.csv"],
        ),
        // a folder no file can be made in (as root too): refused before the run starts
        (
            &["--metrics-out", "/proc/m.jsonl"],
            &["/proc/m.jsonl", "pick a writable path for --metrics-out"],
        ),
        // (a link to no file yet: where it points is what is written)
        (
            &["--metrics-out", "dangling.jsonl"],
            &["dangling.jsonl", "pick a writable path for --metrics-out"],
        ),
        (
            &["--export", "/proc/w.safetensors"],
            &[
                "--export /proc/w.safetensors",
                "cannot make a file in /proc",
            ],
        ),
        (
            &["--metrics-out", "notes.txt"],
            &[
                "notes.txt",
                "something other than a metrics file",
                "another path",
            ],
        ),
        (
            &["--model", "mlp:1,,2"],
            &["mlp:1,,2", "empty hidden width"],
        ),
        (&["--name", "a\x1b[31mred"], &["--name", "escape sequences"]),
        (
            &["--name", " "],
            &["--name \" \" names nothing", "leave --name out"],
        ),
        (
            &["--epochs", "1.5"],
            &["'--epochs <EPOCHS>': not a whole number"],
        ),
        (
            &["--steps=-5"],
            &["'--steps <STEPS>': negative: use 1 or more"],
        ),
        // (where 0 is refused too, the least value it takes)
        (
            &["--keep-checkpoints=-1"],
            &["'--keep-checkpoints <N>': negative: use 1 or more"],
        ),
        (
            &["--image-size=-1"],
            &["'--image-size <N>': negative: use 8 or more"],
        ),
        // (a range said in words of its own: `use 1 (no accumulation) to 65536 ...`)
        (
            &["--grad-accum=-1"],
            &["'--grad-accum <GRAD_ACCUM>': negative: use 1 or more"],
        ),
        // a number past the type: the range where the flag has one
        (
            &["--batch-per-replica", "99999999999999999999"],
            &["too large: use 1 to 1048576"],
        ),
        // a decimal past its type's largest, in the words typed (it was taken for infinity)
        (
            &["--momentum", "1e308"],
            &["'--momentum <MOMENTUM>': 1e308 is beyond the numbers the flag holds (±3.4e38)"],
        ),
        // a range's least value, said as one (clap says `0 is not in 1..18446744073709551615`)
        (
            &["--keep-checkpoints", "0"],
            &["'--keep-checkpoints <N>': below 1: use 1 or more"],
        ),
        (
            &["--devices", "cpu:2", "--name", "-dash"],
            &["goes after `=`: --name=-dash"],
        ),
        (
            &["--prefetch", "100000000"],
            &["--prefetch 100000000", "0 (no prefetch) to 1024"],
        ),
        (
            &["--grad-accum", "100000000"],
            &["--grad-accum 100000000", "to 65536"],
        ),
        (
            &["--model", "mlp:65536,65536,65536", "--devices", "cpu:3"],
            &["GiB of memory", "per CPU rank x 3", "available", "--model"],
        ),
    ];
    for (args, needles) in [
        (
            &["bench", "--workers", "0"][..],
            "out of range: use 1 to 256",
        ),
        (&["bench", "--batches", "32,0"], "out of range: use 1 to "),
        (&["bench", "--samples", "0"], "out of range: use 1 to "),
        (&["bench", "--repeat", "0"], "out of range: use 1 to 100"),
        (&["scale", "--repeat", "0"], "out of range: use 1 to 100"),
    ] {
        let o = run_in(d, args);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {out}");
        assert!(out.contains(needles), "{args:?}: {out}");
    }
    let earlier = "{\"type\":\"run\",\"name\":\"earlier\"}\n";
    std::fs::write(d.join("earlier.jsonl"), earlier).unwrap();
    std::fs::write(d.join("notes.txt"), "hello\n").unwrap();
    std::os::unix::fs::symlink("/proc/m.jsonl", d.join("dangling.jsonl")).unwrap();
    std::fs::write(d.join("bad-theme.toml"), "text = \"#ffffff\"\n").unwrap();
    for (args, needles) in cases {
        let mut a = vec!["--headless", "--checkpoint-dir", "ck"];
        a.extend_from_slice(args);
        let o = run_in(d, &a);
        let out = text(&o);
        assert_eq!(
            o.status.code(),
            Some(1),
            "{args:?} should fail with 1: {out}"
        );
        for n in *needles {
            assert!(out.contains(n), "{args:?}: `{n}` missing from: {out}");
        }
        assert!(!out.contains("panicked"), "{args:?}: {out}");
    }
    let written = std::fs::read_dir(d.join("ck"))
        .map(|r| r.filter_map(|e| e.ok()).count())
        .unwrap_or(0);
    assert_eq!(written, 0, "a failed start wrote into the checkpoint dir");
    assert_eq!(
        std::fs::read_to_string(d.join("earlier.jsonl")).unwrap(),
        earlier,
        "a failed start truncated the metrics file"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("notes.txt")).unwrap(),
        "hello\n"
    );
    // the kernels' switches misspelt are refused, not taken for their defaults (a GPU
    // profile `off` profiled)
    for (var, value, said) in [
        ("MGTOP_DIRECT", "OFF", "MGTOP_DIRECT=OFF: use off"),
        (
            "MGTOP_WINOGRAD",
            "maybe",
            "MGTOP_WINOGRAD=maybe: use on or off",
        ),
        ("MGTOP_GPU_PROFILE", "yes", "MGTOP_GPU_PROFILE=yes: use 1"),
        ("MGTOP_KERNEL_CACHE", "no", "MGTOP_KERNEL_CACHE=no: use off"),
    ] {
        let o = bin()
            .current_dir(d)
            .env(var, value)
            .args(["--headless", "--steps", "1", "--checkpoint-dir", "ck"])
            .output()
            .unwrap();
        let out = text(&o);
        assert_eq!(o.status.code(), Some(1), "{out}");
        assert!(out.contains(said), "{out}");
    }
}

#[test]
fn data_past_the_address_space_limit_is_refused_not_an_abort() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = common::cli::bin();
    cmd.current_dir(dir.path()).env("NO_COLOR", "1").args([
        "--headless",
        "--devices",
        "cpu:1",
        "--steps",
        "3",
        "--model",
        "mlp:8",
        "--data",
        "synthetic:1000000,1000,10",
    ]);
    // SAFETY: only getrlimit and setrlimit run in the child before exec, both async-signal-safe
    unsafe {
        cmd.pre_exec(|| {
            let mut l = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::getrlimit(libc::RLIMIT_AS, &mut l);
            l.rlim_cur = 2_000_000 * 1024;
            match libc::setrlimit(libc::RLIMIT_AS, &l) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    let o = cmd.output().unwrap();
    let said = text(&o);
    assert_eq!(o.status.code(), Some(1), "{said}");
    assert!(
        said.contains("needs about 11.2 GiB")
            && said.contains("left under this process's address-space limit (ulimit -v)"),
        "{said}"
    );
}

#[test]
fn divergence_and_worker_panics_exit_1_naming_the_step() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_in(
        dir.path(),
        &[
            "--headless",
            "--optimizer",
            "sgd",
            "--lr",
            "1e30",
            "--devices",
            "cpu:2",
        ],
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("not finite at step") && out.contains("--lr"),
        "{out}"
    );
    // its figures as far as it got, as a finished run's (a failed run's log had none)
    assert!(
        (out.lines()).any(|l| l.contains("] summary: ") && l.contains("samples/s of training")),
        "{out}"
    );
    let o = run_in(
        dir.path(),
        &["--headless", "--devices", "cpu:3", "--inject-panic", "2:4"],
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("rank 2 panicked at step 4"), "{out}");
}

#[test]
fn a_bad_row_of_data_is_warned_as_a_gradient_spike_each_epoch_and_summed_up() {
    let dir = tempfile::tempdir().unwrap();
    // 3 classes around 0, 1 and 2 on 4 features; one row of 1000s among them
    let rows: String = (0..4000u32)
        .map(|i| {
            let c = i % 3;
            let x = |k: u32| c as f32 + ((i * 7 + k * 13) % 17) as f32 / 17.0 - 0.5;
            match i {
                2500 => format!("1000,1000,1000,1000,{c}\n"),
                _ => format!("{},{},{},{},{c}\n", x(0), x(1), x(2), x(3)),
            }
        })
        .collect();
    std::fs::write(dir.path().join("rows.csv"), rows).unwrap();
    let o = run_in(
        dir.path(),
        &[
            "--headless",
            "--devices",
            "cpu:2",
            "--data",
            "csv:rows.csv,label=last",
            "--model",
            "mlp:16",
            "--epochs",
            "2",
            "--metrics-out",
            "m.jsonl",
        ],
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let said: Vec<&str> = (out.lines())
        .filter(|l| l.contains("WARN gradient spike at step"))
        .collect();
    assert_eq!(said.len(), 2, "once in each epoch: {out}");
    assert!(said[0].contains("--clip-grad-norm"), "{out}");
    assert!(out.contains("| gradient spikes at steps "), "{out}");
    let records = std::fs::read_to_string(dir.path().join("m.jsonl")).unwrap();
    assert_eq!(records.matches(r#""kind":"grad_spike""#).count(), 2);
}

#[test]
fn a_signal_after_the_run_ended_does_not_make_it_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    // a log nobody reads for now (its pipe fills): the run ends while its frontend waits to
    // write, as under `| less`
    let child = spawn_in(
        dir.path(),
        &[
            "--headless",
            "--devices",
            "cpu:1",
            "--data",
            "synthetic:500,16,4",
            "--model",
            "mlp:8",
            "--steps",
            "600",
            "--log-every",
            "1",
        ],
    );
    let run_dir = || {
        let runs = dir.path().join("runs");
        let name = std::fs::read_dir(&runs).ok()?.next()?.ok()?.path();
        std::fs::read_dir(name)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| !p.is_symlink())
    };
    // (the workers are done once the last step's checkpoint is there)
    let t0 = std::time::Instant::now();
    while !run_dir().is_some_and(|d| d.join("checkpoints/step-00000600").exists()) {
        assert!(t0.elapsed().as_secs() < 60, "no end checkpoint");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // (and its workers gone: microseconds after it)
    std::thread::sleep(std::time::Duration::from_millis(500));
    signal(&child, "TERM");
    let o = child.wait_with_output().unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("the run has ended: writing its last lines"),
        "{out}"
    );
    assert!(
        out.contains("finished: 600 steps") && !out.contains("stopping:"),
        "{out}"
    );
}

/// The child's log from its first step line on (read up to it: training is under way).
fn under_way(
    child: &mut std::process::Child,
) -> std::io::Lines<BufReader<std::process::ChildStdout>> {
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while !lines.next().expect("output").unwrap().contains("samples/s") {}
    lines
}

#[test]
fn sigterm_finishes_the_step_writes_a_checkpoint_and_exits_130() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_in(
        dir.path(),
        &[
            "--headless",
            "--devices",
            "cpu:2",
            "--data",
            "synthetic:20000,64,10",
            "--steps",
            "100000000",
            "--log-every",
            "100",
        ],
    );
    let lines = under_way(&mut child);
    // twice at once, as GNU `timeout` sends it (to the process, then to its group): one request
    signal(&child, "TERM");
    signal(&child, "TERM");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{rest:?}");
    let resume = rest
        .iter()
        .find(|l| l.starts_with("resume with: --resume "))
        .expect("says where the checkpoint is");
    // the run's directory, whose checkpoint a resume continues from
    let path = dir
        .path()
        .join(resume.trim_start_matches("resume with: --resume "));
    let ckpts: Vec<_> = std::fs::read_dir(path.join("checkpoints"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("model.safetensors").is_file())
        .collect();
    assert_eq!(ckpts.len(), 1, "{path:?}");
}

#[test]
fn a_second_signal_quits_at_once_and_the_run_s_records_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_in(
        dir.path(),
        &[
            "--headless",
            "--devices",
            "cpu:1",
            "--data",
            "synthetic:2000,16,4",
            "--steps",
            "1000",
            "--log-every",
            "1",
            // (steps of 3 s: the second signal comes while the stop waits for one)
            "--slow-data",
            "0:3000",
        ],
    );
    let lines = under_way(&mut child);
    signal(&child, "TERM");
    std::thread::sleep(std::time::Duration::from_millis(800));
    signal(&child, "TERM");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err} {rest:?}");
    // (the stop it cut short was to write the run's first checkpoint)
    assert!(
        err.contains("quit at once")
            && err.contains("the run has no checkpoint to continue from: start it again"),
        "{err}"
    );
    let runs = dir.path().join("runs");
    let name = std::fs::read_dir(&runs).unwrap().next().unwrap().unwrap();
    let run = std::fs::read_link(name.path().join("latest")).unwrap();
    let run = name.path().join(run);
    // the metrics file ends with the run's end, not where the process was cut
    let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let end: serde_json::Value = serde_json::from_str(metrics.lines().last().unwrap()).unwrap();
    assert_eq!(
        (&end["type"], &end["status"]),
        (&"end".into(), &"quit".into()),
        "{end}"
    );
    assert!(end["step"].as_u64().unwrap() >= 1, "{end}");
    assert!(!run.join("live.sock").exists(), "the live socket stays");
    let o = run_in(dir.path(), &["runs"]);
    let listed = text(&o);
    assert!(listed.contains(" quit "), "{listed}");
    let o = run_in(dir.path(), &["view", "--headless", run.to_str().unwrap()]);
    let viewed = text(&o);
    assert!(viewed.contains("quit at once: "), "{viewed}");
}

/// A run directory whose run died before its first record is said to be one, not a run that
/// "has just started".
#[test]
fn viewing_a_run_that_died_before_writing_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("runs/dead");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("metrics.jsonl"), "").unwrap();
    let o = run_in(dir.path(), &["view", "--headless", "runs/dead"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("empty, and no run is running there: it ended before it wrote anything")
            && !out.contains("try again"),
        "{out}"
    );
}

#[test]
fn a_closed_stdout_loses_lines_not_the_checkpoint_or_the_exit_code() {
    // as after a dropped SSH session: the log has nowhere to go, then a signal stops the run
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_in(
        dir.path(),
        &[
            "--headless",
            "--devices",
            "cpu:1",
            "--steps",
            "100000000",
            "--checkpoint-dir",
            "ck",
        ],
    );
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    drop(out);
    std::thread::sleep(std::time::Duration::from_millis(300));
    signal(&child, "HUP");
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let saved = std::fs::read_dir(dir.path().join("ck"))
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| e.path().join("model.safetensors").is_file());
    assert!(saved, "no checkpoint written");
}

#[test]
fn a_run_started_under_nohup_or_a_script_s_ampersand_survives_hang_up_and_interrupt() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = bin();
    cmd.current_dir(dir.path()).args([
        "--headless",
        "--devices",
        "cpu:2",
        "--data",
        "synthetic:20000,64,10",
        "--steps",
        "6000",
        "--log-every",
        "100",
        "--checkpoint-dir",
        "ck",
    ]);
    // SAFETY: only async-signal-safe calls between fork and exec: what nohup does, and a
    // non-interactive shell to a job started with `&`
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = under_way(&mut child);
    signal(&child, "HUP");
    signal(&child, "INT");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err} {rest:?}");
    assert!(
        rest.iter().any(|l| l.contains("finished: 6000 steps")),
        "{rest:?}"
    );
    assert!(err.contains("SIGHUP is ignored (nohup)"), "{err}");
    assert!(err.contains("SIGINT is ignored (inherited so"), "{err}");
}

#[test]
fn a_report_cut_short_by_a_full_disk_fails() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("runs")).unwrap();
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full");
    let Ok(full) = full else {
        eprintln!("skipped: no /dev/full");
        return;
    };
    let o = bin()
        .current_dir(dir.path())
        .args(["runs"])
        .stdout(full)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error: standard output could not be written (No space left on device"),
        "{err}"
    );
    // a closed pipe (`| head` done reading) is no failure
    let mut child = bin()
        .current_dir(dir.path())
        .args(["runs"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn a_stop_while_the_data_loads_says_nothing_was_trained() {
    let dir = tempfile::tempdir().unwrap();
    let child = spawn_in(
        dir.path(),
        &[
            "--headless",
            "--data",
            "synthetic:1000000,128,10",
            "--steps",
            "1",
            "--metrics-out",
            "m.jsonl",
        ],
    );
    // the set takes seconds to make: the signal comes while it is made (the --metrics-out
    // file claimed by then)
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(dir.path().join("m.jsonl").is_file());
    signal(&child, "TERM");
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(
        err.contains("stopped during start-up: nothing was trained yet"),
        "{err}"
    );
    // the file made for a run that never started is taken back
    assert!(!dir.path().join("m.jsonl").exists());
}

/// A batch cut to a small training split rounds up (11 a rank x 3 = 33 of 32): a step takes
/// the 32, and the LR follows 32, not 33.
#[test]
fn a_batch_cut_to_a_small_split_scales_the_lr_to_the_samples_a_step_takes() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--headless",
        "--devices",
        "cpu:3",
        "--steps",
        "1",
        "--data",
        "synthetic:40,4,2",
    ];
    let o = run_in(dir.path(), &args);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    for said in [
        "batch: 11 per replica x 3 ranks = 32 global (the whole training split",
        "lr: 7.07e-4 (default: 1e-3 for a global batch of 64, sqrt scaling to 32)",
        "| batch 11/11/10=32 |",
    ] {
        assert!(out.contains(said), "{said}: {out}");
    }
}

#[test]
fn settings_that_change_nothing_in_this_run_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--headless",
        "--devices",
        "cpu:1",
        "--steps",
        "3",
        "--sync-bn",
        "--rebalance",
        "--warmup",
        "10",
        "--val-split",
        "0",
        "--val-every",
        "2",
        "--checkpoint-best",
        "--bn-stats",
        "running",
    ];
    let o = run_in(dir.path(), &args);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    for said in [
        "note: --sync-bn: the model has no batch norm; nothing changes",
        "note: --bn-stats running: the model has no batch norm; nothing changes",
        "note: --rebalance: one rank has no other to share the batch with; nothing changes",
        "note: --warmup 10: the run is 3 steps: the LR rises all run and never reaches ",
        "note: --val-every 2: no sample is held out for validation (--val-split, --val-data); nothing is validated",
        "note: --checkpoint-best: no sample is held out for validation (--val-split, --val-data); no best checkpoint is written",
    ] {
        assert!(out.contains(said), "{said}: {out}");
    }
    // more threads than this machine has cores, whatever its size
    let threads = (2 * std::thread::available_parallelism().map_or(2, |n| n.get())).to_string();
    let args = [
        "--headless",
        "--devices",
        "cpu:1",
        "--steps",
        "3",
        "--optimizer",
        "sgd",
        "--momentum",
        "0.9",
        "--no-decay-bn-bias",
        "--checkpoint-every",
        "10",
        "--val-every",
        "10",
        "--strategy",
        "local-sgd:4",
        "--threads-per-worker",
        &threads,
        "--readonly",
        "--model",
        "mlp",
    ];
    let o = run_in(dir.path(), &args);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    for said in [
        // (the default's value too: given, it was meant to do something)
        "note: --momentum 0.9: --optimizer sgd is plain SGD and takes no momentum; for SGD with momentum (PyTorch's SGD(momentum=0.9)) give --optimizer momentum",
        "note: --no-decay-bn-bias: --weight-decay is 0; nothing changes",
        "note: --checkpoint-every 10: the run is 3 steps: none falls due before its end",
        "note: --val-every 10: the run is 3 steps: none falls due before its end",
        "note: --strategy local-sgd:4: one rank has no other to share with; it trains as mirrored",
        &format!("note: --threads-per-worker {threads}: 1 rank x {threads} threads share "),
        "note: --readonly: there is no terminal UI here (it logs); nothing changes",
        "note: --model mlp: no hidden layer: a linear model (softmax regression)",
    ] {
        assert!(out.contains(said), "{said}: {out}");
    }
    // batch norm's statistics: fixed where nothing is frozen, or from random weights
    let bn = |extra: &[&str]| {
        let mut args = vec![
            "--headless",
            "--devices",
            "cpu:2",
            "--steps",
            "2",
            "--model",
            "conv4k3p1,bn,basic4,gap",
            "--data",
            "synthetic-images:64,3,8,8,3",
            "--sync-bn",
        ];
        args.extend(extra);
        let o = run_in(dir.path(), &args);
        let out = text(&o);
        assert!(o.status.success(), "{out}");
        out
    };
    let out = bn(&["--bn-stats", "frozen"]);
    assert!(
        out.contains("note: --bn-stats frozen: no --freeze leaves a batch norm; nothing changes"),
        "{out}"
    );
    let out = bn(&["--bn-stats", "frozen", "--freeze", "conv.0"]);
    assert!(
        out.contains("note: --bn-stats frozen: --freeze freezes no batch norm's weight and bias together; nothing changes")
            && out.contains("(batch norm's running statistics still follow the data, as in PyTorch's train mode)\n"),
        "{out}"
    );
    let out = bn(&["--bn-stats", "running"]);
    for said in [
        "note: --bn-stats running: the run starts from random weights (no --init or --resume), so the fixed batch norms keep PyTorch's starting statistics",
        "note: --sync-bn: --bn-stats running leaves no batch norm on the batch's statistics, so nothing is summed",
        "batch norm: 3 of 3 normalise by their running statistics in training and leave them as they are",
    ] {
        assert!(out.contains(said), "{said}: {out}");
    }
    // where they do something, nothing is said
    let o = run_in(
        dir.path(),
        &[
            "--headless",
            "--devices",
            "cpu:2",
            "--steps",
            "60",
            "--rebalance",
            "--warmup",
            "3",
        ],
    );
    let out = text(&o);
    assert!(
        o.status.success() && !out.contains("nothing changes") && !out.contains("never reaches"),
        "{out}"
    );
    // a rebalancing that cannot come (a run shorter than its first decision), said
    let o = run_in(
        dir.path(),
        &[
            "--headless",
            "--devices",
            "cpu:2",
            "--steps",
            "3",
            "--rebalance",
        ],
    );
    let out = text(&o);
    assert!(
        out.contains("note: --rebalance: the run is 3 steps: its first decision comes after step 50; nothing changes"),
        "{out}"
    );
    // local SGD whose synchronous warm-up outlasts the run: said at the start and in its lines
    let o = run_in(
        dir.path(),
        &[
            "--headless",
            "--devices",
            "cpu:2",
            "--epochs",
            "2",
            "--strategy",
            "local-sgd:8",
            "--log-every",
            "10",
        ],
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains(
            "note: --local-sgd-warmup 100: the run is 46 steps: its replicas never step alone"
        ) && out.contains("synchronous warm-up for the whole run (its 100 steps outlast it)")
            && !out.contains("step alone after step 100"),
        "{out}"
    );
}

/// Under mpirun the processes mostly share one command line: a flag error is said by the job's
/// first process at once, by another only a moment later (where the launcher has not ended it
/// as the first failed: its own command line); --help by the first alone.
#[test]
fn a_flag_error_of_an_mpi_job_is_said_once() {
    let dir = tempfile::tempdir().unwrap();
    let as_rank = |rank: &str, args: &[&str]| {
        let o = bin()
            .current_dir(dir.path())
            .env("OMPI_COMM_WORLD_SIZE", "2")
            .env("OMPI_COMM_WORLD_RANK", rank)
            .args(args)
            .output()
            .unwrap();
        (o.status.code(), text(&o))
    };
    let (code, said) = as_rank("0", &["--bogus"]);
    assert_eq!(code, Some(1));
    assert!(said.contains("unexpected argument '--bogus'"), "{said}");
    let (code, said) = as_rank("1", &["--bogus"]);
    assert_eq!(code, Some(1));
    assert!(said.contains("unexpected argument '--bogus'"), "{said}");
    assert_eq!(as_rank("1", &["--help"]), (Some(0), String::new()));
}

/// A headless log that cannot be written (a full disk) is said on stderr, the run's records
/// being whole; the run itself goes on and succeeds.
#[test]
fn a_log_that_cannot_be_written_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let Ok(full) = std::fs::File::create("/dev/full") else {
        return;
    };
    let o = bin()
        .current_dir(dir.path())
        .args(["--headless", "--steps", "20", "--devices", "cpu:1"])
        .stdout(Stdio::from(full))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(
            "warning: the log could not be written from some point on (No space left on device"
        ),
        "{err}"
    );
}
