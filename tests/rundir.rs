//! Run directories as a user meets them: `--resume` of a run directory, of a directory holding
//! several runs, of a checkpoint directory holding one line of runs or checkpoints of two runs,
//! of a run that reached its budget; a run refused another run's --checkpoint-dir;
//! a start that fails leaves no directory behind; `runs` lists each run's state.

mod common;

use std::path::{Path, PathBuf};

use common::cli::{run_in, text};

const QUICK: [&str; 6] = [
    "--headless",
    "--devices",
    "cpu:1",
    "--data",
    "synthetic:600,8,3",
    "--model=mlp:8",
];

/// A quick run with `more` flags; returns its run directory (from the log) and its output.
fn train(dir: &Path, more: &[&str]) -> (PathBuf, String) {
    let args: Vec<&str> = QUICK.iter().chain(more).copied().collect();
    let o = run_in(dir, &args);
    let out = text(&o);
    assert!(o.status.success(), "{args:?}: {out}");
    let run_dir = out
        .lines()
        .find_map(|l| l.strip_prefix("run dir: "))
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no run dir in: {out}"));
    (run_dir, out)
}

fn fails(dir: &Path, more: &[&str]) -> String {
    let args: Vec<&str> = QUICK.iter().chain(more).copied().collect();
    let o = run_in(dir, &args);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{args:?}: {out}");
    assert!(!out.contains("panicked"), "{out}");
    out
}

#[test]
fn resume_continues_a_run_directory_and_refuses_what_is_ambiguous() {
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    let (first, _) = train(d, &["--steps", "10"]);
    // its newest checkpoint, through the `latest` link, into a new run directory
    let (second, out) = train(
        d,
        &["--steps", "20", "--resume", "runs/synthetic-mlp_8/latest"],
    );
    assert_ne!(first, second);
    let want = format!(
        "resumed from {} at step 10",
        first.join("checkpoints/step-00000010").display()
    );
    assert!(out.contains(&want), "{out}");
    assert!(second.join("checkpoints/step-00000020").is_dir(), "{out}");

    // two runs of that name now: which one is not guessed
    let out = fails(d, &["--steps", "30", "--resume", "runs/synthetic-mlp_8"]);
    assert!(out.contains("holds 2 runs"), "{out}");
    for run in [&first, &second] {
        let name = run.file_name().unwrap().to_str().unwrap();
        assert!(out.contains(name), "{name} listed: {out}");
    }

    // a run directory whose metrics file is gone still leads to its checkpoints
    std::fs::remove_file(first.join("metrics.jsonl")).unwrap();
    let (_, out) = train(d, &["--steps", "12", "--resume", first.to_str().unwrap()]);
    assert!(out.contains("at step 10"), "{out}");

    // a run already at its budget
    let second_s = second.to_str().unwrap();
    let out = fails(d, &["--steps", "20", "--resume", second_s]);
    assert!(out.contains("is at step 20, and --steps is 20"), "{out}");
    assert!(out.contains("larger --steps"), "{out}");
}

/// `--resume RUN_DIR` alone continues a run as it was: its model, data, budget, schedule and
/// seed come from the checkpoint (the interrupted run and the uninterrupted one end on the same
/// loss), in a run directory of the same name; a flag given changes one, and the run says so.
#[test]
fn a_resumed_run_takes_the_settings_of_the_run_it_continues() {
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    let settings = [
        "--steps",
        "20",
        "--schedule",
        "cosine",
        "--seed",
        "3",
        "--checkpoint-every",
        "10",
        "--name",
        "sweep-7",
        "--log-every",
        "1",
    ];
    let (_, whole) = train(d, &[&settings[..], &["--run-dir", "whole"]].concat());
    // the same run, cut at step 15 (its checkpoint: step 10)
    let cut = [
        &QUICK[..],
        &settings,
        &["--run-dir", "cut", "--inject-panic", "0:15"],
    ]
    .concat();
    assert_eq!(run_in(d, &cut).status.code(), Some(1));
    let o = run_in(d, &["--headless", "--resume", "cut"]);
    let resumed = text(&o);
    assert!(o.status.success(), "{resumed}");
    let last = |log: &str| -> String {
        let line = log
            .lines()
            .find(|l| l.contains("step 20/20"))
            .unwrap_or_else(|| panic!("{log}"));
        line.split(" | ").nth(1).unwrap().to_string()
    };
    assert_eq!(last(&resumed), last(&whole), "{resumed}");
    assert!(
        resumed.contains("settings from the checkpoint: ")
            && resumed.contains("--schedule cosine")
            && resumed.contains("--seed 3"),
        "{resumed}"
    );
    assert!(
        resumed.contains(&format!("run dir: {}", d.join("runs/sweep-7").display())),
        "{resumed}"
    );
    // a flag given is the run's, and the start-up says what it changed
    let out = run_in(
        d,
        &[
            "--headless",
            "--resume",
            "cut",
            "--schedule",
            "constant",
            "--steps",
            "12",
        ],
    );
    let out = text(&out);
    assert!(
        out.contains("--schedule constant (the checkpoint had cosine)"),
        "{out}"
    );
    assert!(out.contains("--steps 12 (the checkpoint had 20)"), "{out}");
    assert!(
        !out.contains("settings from the checkpoint: --schedule"),
        "{out}"
    );
}

#[test]
fn a_checkpoint_dir_holds_one_line_of_runs() {
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    let (a, _) = train(d, &["--steps", "5", "--checkpoint-dir", "shared"]);
    // another run there would replace a's checkpoints: refused before it trains
    let out = fails(d, &["--steps", "5", "--checkpoint-dir", "shared"]);
    assert!(
        out.contains("--checkpoint-dir shared holds checkpoints of another run"),
        "{out}"
    );
    // the other run's newest checkpoint, as a ready --resume
    assert!(
        out.contains(&format!(
            "{}: step 5, continue it with --resume shared/step-00000005",
            a.display(),
        )),
        "{out}"
    );
    let written = |dir: &str| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(d.join(dir))
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("step-"))
            .collect();
        names.sort();
        names
    };
    assert_eq!(written("shared"), ["step-00000005"]);
    // a run resumed into the same directory continues its line
    let (b, out) = train(
        d,
        &[
            "--steps",
            "9",
            "--checkpoint-dir",
            "shared",
            "--resume",
            "shared",
        ],
    );
    assert!(out.contains("at step 5"), "{out}");
    let (_, out) = train(d, &["--steps", "11", "--resume", "shared"]);
    assert!(out.contains("at step 9"), "{out}");
    // going back to step 5 in the same directory would fork the line beside step 9
    let out = fails(
        d,
        &[
            "--steps",
            "9",
            "--checkpoint-dir",
            "shared",
            "--resume",
            "shared/step-00000005",
        ],
    );
    assert!(out.contains("past step 5, the one resumed from"), "{out}");
    assert!(
        out.contains("give this run its own --checkpoint-dir"),
        "{out}"
    );
    // a run directory leads to the checkpoints its run wrote elsewhere
    let (_, out) = train(d, &["--steps", "11", "--resume", b.to_str().unwrap()]);
    assert!(
        out.contains(&format!(
            "{} at step 9",
            d.join("shared/step-00000009").display()
        )),
        "{out}"
    );
    let (_, out) = train(d, &["--steps", "11", "--resume", a.to_str().unwrap()]);
    assert!(out.contains("at step 5"), "{out}");
}

#[test]
fn another_run_s_line_is_continued_from_its_newest_step_not_its_best() {
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    // its best validation at its last step: `best` and step 5 are of one step
    let (a, _) = train(
        d,
        &[
            "--steps",
            "5",
            "--checkpoint-dir",
            "ck",
            "--checkpoint-best",
        ],
    );
    assert!(d.join("ck/best").is_dir() && d.join("ck/step-00000005").is_dir());
    let out = fails(d, &["--steps", "5", "--checkpoint-dir", "ck"]);
    assert!(
        out.contains(&format!(
            "{}: step 5, continue it with --resume ck/step-00000005",
            a.display(),
        )),
        "{out}"
    );
}

#[test]
fn a_checkpoint_dir_two_runs_wrote_into_is_not_guessed() {
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    let (a, _) = train(d, &["--steps", "5"]);
    let (b, _) = train(d, &["--steps", "7"]);
    // checkpoints of two runs gathered by hand into one directory
    let mixed = d.join("mixed");
    std::fs::create_dir(&mixed).unwrap();
    for (run, step) in [(&a, "step-00000005"), (&b, "step-00000007")] {
        let from = run.join("checkpoints").join(step);
        std::fs::create_dir(mixed.join(step)).unwrap();
        for f in std::fs::read_dir(&from).unwrap() {
            let f = f.unwrap();
            std::fs::copy(f.path(), mixed.join(step).join(f.file_name())).unwrap();
        }
    }
    let out = fails(d, &["--steps", "30", "--resume", "mixed"]);
    assert!(out.contains("checkpoints are of 2 different runs"), "{out}");
    // (--resume reads a directory by its absolute path)
    let mixed = mixed.canonicalize().unwrap();
    for (run, step) in [(&a, 5), (&b, 7)] {
        let want = format!(
            "{}: step {step}, continue it with --resume {}",
            run.display(),
            mixed.join(format!("step-{step:08}")).display()
        );
        assert!(out.contains(&want), "{out}");
    }
    // one checkpoint of it is not ambiguous
    let (_, out) = train(d, &["--steps", "30", "--resume", "mixed/step-00000005"]);
    assert!(out.contains("at step 5"), "{out}");
}

#[test]
fn a_start_that_fails_leaves_no_run_directory() {
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    let (_, _) = train(d, &["--steps", "5"]);
    // a checkpoint of another model (other input width): refused after the data is loaded
    let args: Vec<&str> = QUICK
        .iter()
        .map(|a| {
            if *a == "synthetic:600,8,3" {
                "synthetic:600,6,3"
            } else {
                a
            }
        })
        .chain(["--steps", "9", "--resume", "runs/synthetic-mlp_8/latest"])
        .collect();
    let o = run_in(d, &args);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("trained on inputs of 8 values a sample, and this run's data gives 6"),
        "{out}"
    );
    let runs: Vec<_> = std::fs::read_dir(d.join("runs/synthetic-mlp_8"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name() != "latest")
        .collect();
    assert_eq!(runs.len(), 1);
    // a --run-dir that already holds a run
    train(d, &["--steps", "5", "--run-dir", "mine"]);
    let out = fails(d, &["--steps", "5", "--run-dir", "mine"]);
    assert!(
        out.contains("already holds a run: pick a new --run-dir, or --resume mine"),
        "{out}"
    );
    // resuming it into itself: not told to --resume what it resumes
    let out = fails(
        d,
        &["--steps", "9", "--resume", "mine", "--run-dir", "mine"],
    );
    assert!(
        out.contains("a resumed run writes a directory of its own: leave out --run-dir"),
        "{out}"
    );
}

/// Two runs of one name started in the same second (a sweep launched at once): the second's
/// default directory becomes `<time>-2`, and its checkpoints go there, not to the first's.
#[test]
fn a_run_whose_default_directory_was_taken_keeps_its_checkpoints_in_its_own() {
    use mgtop::config::{Budget, DeviceSpec, RunConfig};
    use mgtop::engine::{checkpoint, Engine};
    let d = tempfile::tempdir().unwrap();
    let taken = d.path().join("runs/x/20261128-094400");
    // the first run, live: its metrics file and its checkpoint lock
    std::fs::create_dir_all(&taken).unwrap();
    std::fs::write(taken.join("metrics.jsonl"), "").unwrap();
    let _first = checkpoint::lock(&taken.join("checkpoints")).unwrap();
    let cfg = RunConfig {
        devices: DeviceSpec::Cpu(1),
        model: "mlp:8".parse().unwrap(),
        data: "synthetic:64,4,2".parse().unwrap(),
        inputs: mgtop::data::DataOptions::no_validation(),
        budget: Budget::Steps(2),
        batch_per_replica: 8,
        run_dir: Some(taken.clone()),
        link_latest: true,
        checkpoint_dir: taken.join("checkpoints"),
        final_checkpoint: true,
        ..RunConfig::default()
    };
    let result = Engine::run(cfg).expect("the second run starts beside the first");
    let second = d.path().join("runs/x/20261128-094400-2");
    let written = second
        .canonicalize()
        .unwrap()
        .join("checkpoints/step-00000002");
    assert_eq!(result.last_checkpoint, Some(written));
    assert!(checkpoint::steps(&taken.join("checkpoints")).is_empty());
}

/// `--metrics-out` never replaces another run's record: a run directory's own metrics.jsonl,
/// or a file a live run is writing (two runs of a sweep given the same one interleaved their
/// lines into a file `view` could not read).
#[test]
fn metrics_out_never_replaces_another_run_s_record() {
    use std::os::fd::AsRawFd;
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    let (a, _) = train(d, &["--steps", "5", "--run-dir", "a"]);
    let record = std::fs::read(a.join("metrics.jsonl")).unwrap();
    let out = fails(d, &["--steps", "5", "--metrics-out", "a/metrics.jsonl"]);
    assert!(out.contains("it is the record of the run in"), "{out}");
    assert_eq!(std::fs::read(a.join("metrics.jsonl")).unwrap(), record);
    // by another name: a symbolic link to it, a hard link
    std::os::unix::fs::symlink(a.join("metrics.jsonl"), d.join("soft.jsonl")).unwrap();
    std::fs::hard_link(a.join("metrics.jsonl"), d.join("hard.jsonl")).unwrap();
    for other_name in ["soft.jsonl", "hard.jsonl"] {
        let out = fails(d, &["--steps", "5", "--metrics-out", other_name]);
        assert!(out.contains("it is the record of the run in"), "{out}");
    }
    assert_eq!(std::fs::read(a.join("metrics.jsonl")).unwrap(), record);
    // a run directory moved away from where its record says it is
    std::fs::rename(&a, d.join("moved")).unwrap();
    let out = fails(d, &["--steps", "5", "--metrics-out", "moved/metrics.jsonl"]);
    assert!(out.contains("it is the record of the run in"), "{out}");
    assert_eq!(
        std::fs::read(d.join("moved/metrics.jsonl")).unwrap(),
        record
    );
    std::fs::rename(d.join("moved"), &a).unwrap();
    // a live run's file: it holds the file's lock while it writes
    let shared = d.join("shared.jsonl");
    std::fs::write(&shared, "").unwrap();
    let live = std::fs::File::open(&shared).unwrap();
    // SAFETY: flock on a descriptor held open below
    assert_eq!(unsafe { libc::flock(live.as_raw_fd(), libc::LOCK_EX) }, 0);
    let out = fails(d, &["--steps", "5", "--metrics-out", "shared.jsonl"]);
    assert!(
        out.contains("another run that is still going writes it"),
        "{out}"
    );
    drop(live);
    train(d, &["--steps", "5", "--metrics-out", "shared.jsonl"]);
    // the run directory's own file named again: written once
    let (b, _) = train(
        d,
        &[
            "--steps",
            "5",
            "--run-dir",
            "b",
            "--metrics-out",
            "b/metrics.jsonl",
        ],
    );
    let text = std::fs::read_to_string(b.join("metrics.jsonl")).unwrap();
    assert_eq!(text.matches("\"type\":\"run\"").count(), 1, "{text}");
}

#[test]
fn runs_lists_each_run_with_its_state() {
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    let (done, _) = train(d, &["--epochs", "2"]);
    let o = run_in(
        d,
        &[
            &QUICK[..],
            &["--steps", "50", "--inject-panic", "0:3", "--name", "broken"],
        ]
        .concat(),
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    // an epoch budget's run that ended before a step was logged: as far as its steps go
    let epochs = ["--epochs", "2", "--inject-panic", "0:3", "--name", "early"];
    let o = run_in(d, &[&QUICK[..], &epochs].concat());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let o = run_in(d, &["runs"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let line = |name: &str| {
        out.lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("{name} missing: {out}"))
            .to_string()
    };
    let done_name = format!(
        "runs/synthetic-mlp_8/{}",
        done.file_name().unwrap().to_str().unwrap()
    );
    let done_line = line(&done_name);
    assert!(done_line.contains(" done "), "{done_line}");
    assert!(done_line.contains("100%"), "{done_line}");
    assert!(done_line.contains('%'), "best accuracy shown: {done_line}");
    // failed in step 3 of 50, before any step was logged: 2 steps done, 4%
    let broken = line("runs/broken/");
    let cols: Vec<&str> = broken.split_whitespace().collect();
    assert_eq!(cols[1..4], ["failed", "2", "4%"], "{broken}");
    // 2 of 2 epochs of 15 steps (480 training samples, batch 32)
    let early = line("runs/early/");
    let cols: Vec<&str> = early.split_whitespace().collect();
    assert_eq!(cols[1..4], ["failed", "2", "7%"], "{early}");
    // FIFOs where the run's notes are (its socket's path, its checkpoints' lock): read as
    // nothing, never waited on
    for note in ["live.sock.path", "checkpoints/.lock"] {
        let p = std::ffi::CString::new(done.join(note).to_str().unwrap()).unwrap();
        let _ = std::fs::remove_file(done.join(note));
        // SAFETY: a valid C string; mkfifo only creates the node
        assert_eq!(unsafe { libc::mkfifo(p.as_ptr(), 0o600) }, 0, "{note}");
    }
    let (code, out) = common::cli::run_limited(d, &["runs"]);
    assert_eq!(code, Some(0), "{out}");
    // a run's own directory lists that run
    let o = run_in(d, &["runs", "runs/broken/latest"]);
    let out = text(&o);
    assert!(
        out.lines().count() == 2 && out.contains(" failed "),
        "{out}"
    );
    // ... and a folder of one, its checkpoints or one of them, that run
    for folder in [
        done.join("checkpoints"),
        done.join("checkpoints/step-00000030"),
    ] {
        assert!(folder.is_dir(), "{}", folder.display());
        let o = run_in(d, &["runs", folder.to_str().unwrap()]);
        let out = text(&o);
        assert!(out.lines().count() == 2 && out.contains(" done "), "{out}");
    }
    // a metrics file in the working directory (`--metrics-out metrics.jsonl`) is no run of
    // ./runs: they are listed still
    std::fs::copy(done.join("metrics.jsonl"), d.join("metrics.jsonl")).unwrap();
    let out = text(&run_in(d, &["runs"]));
    assert!(
        out.contains("runs/broken/") && out.contains("runs/early/"),
        "{out}"
    );
    std::fs::remove_file(d.join("metrics.jsonl")).unwrap();
    let o = run_in(d, &["ls", "elsewhere"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("no runs at elsewhere"), "{}", text(&o));
}

/// A log piped into something that does not read it (a pager nobody scrolls, a stalled
/// terminal) fills its pipe within a few hundred lines; the run goes on, and its metrics file
/// still gets every step and its end. The log, once read, says what it skipped.
#[test]
fn a_log_nobody_reads_loses_lines_never_records() {
    let dir = tempfile::tempdir().unwrap();
    let steps = 40_000;
    // (steps of some 50 us here, an epoch every 500, each recorded: slow enough for every one
    // to be recorded on a loaded machine too)
    let args = [
        "--model=mlp:256",
        "--data=synthetic:20000,8,3",
        "--steps",
        &steps.to_string(),
        "--batch-per-replica",
        "32",
        "--log-every",
        "1",
        "--run-dir",
        "run",
    ];
    let args: Vec<&str> = QUICK.iter().chain(&args).copied().collect();
    let child = common::cli::spawn_in(dir.path(), &args);
    let metrics = dir.path().join("run/metrics.jsonl");
    // (the pipe is read only once the run's end is recorded)
    common::run::wait_for("the run's end in its metrics file", || {
        let text = std::fs::read_to_string(&metrics).ok()?;
        text.contains("\"type\":\"end\"").then_some(())
    });
    let out = child.wait_with_output().unwrap();
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    let text = std::fs::read_to_string(&metrics).unwrap();
    let rows = text.lines().filter(|l| l.contains("\"type\":\"step\""));
    assert_eq!(rows.count(), steps, "every step recorded");
    assert!(
        log.contains("step rows not shown: this display fell behind"),
        "{log}"
    );
    assert!(log.contains(&format!("finished: {steps} steps")), "{log}");
}

/// The step records' (step, lr) of a run directory's metrics file.
fn lrs(run_dir: &Path) -> Vec<(u64, f64)> {
    std::fs::read_to_string(run_dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["type"] == "step")
        .map(|v| (v["step"].as_u64().unwrap(), v["lr"].as_f64().unwrap()))
        .collect()
}

#[test]
fn a_resumed_cosine_with_warm_up_gives_the_uninterrupted_run_s_lr() {
    // an epoch budget, a batch that is not the default: the warm-up's share of the run is the
    // run's, not the default batch's, after the resume
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--epochs",
        "3",
        "--batch-per-replica",
        "50",
        "--warmup",
        "5",
        "--schedule",
        "cosine",
        "--log-every",
        "1",
        "--val-split",
        "0",
    ];
    let whole: Vec<&str> = flags
        .iter()
        .copied()
        .chain(["--checkpoint-every", "10"])
        .collect();
    let (run, _) = train(dir.path(), &whole);
    let all = lrs(&run);
    assert_eq!(all.len(), 36, "{all:?}");
    // the LR peaks at --lr's 1e-3 (the default's, scaled to the batch) where the warm-up ends
    let peak = all.iter().map(|s| s.1).fold(0.0, f64::max);
    assert!(
        (all[4].1 - peak).abs() < 1e-9 && (all[5].1 - peak).abs() < 1e-9,
        "{all:?}"
    );
    let at10 = run.join("checkpoints/step-00000010");
    let (resumed, _) = train(
        dir.path(),
        &["--resume", at10.to_str().unwrap(), "--log-every", "1"],
    );
    let rest = lrs(&resumed);
    assert_eq!(rest.len(), 26, "{rest:?}");
    for ((s, a), (t, b)) in all[10..].iter().zip(&rest) {
        assert_eq!(s, t);
        assert!(
            (a - b).abs() <= 1e-9 * a.abs().max(1e-12),
            "step {s}: {a} then {b}"
        );
    }
}
