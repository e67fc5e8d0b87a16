//! Checkpoints from the command line: another model's refused and kept, a --checkpoint-dir that
//! is a file or busy refused before anything is written, resuming's start-up lines.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use common::cli::{bin, run_in, text};

#[test]
fn checkpoint_of_another_model_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(run_in(
        d,
        &[
            "--headless",
            "--steps",
            "5",
            "--devices",
            "cpu:1",
            "--checkpoint-dir",
            "checkpoints"
        ]
    )
    .status
    .success());
    let state = d.join("checkpoints/step-00000005/state.json");
    let before = std::fs::read(&state).unwrap();
    let o = run_in(
        d,
        &[
            "--headless",
            "--steps",
            "10",
            "--model",
            "mlp:64",
            "--resume",
            "checkpoints",
        ],
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        out.contains("it was written for another model (--model mlp:128)")
            && out.contains("resume it with the --model it was trained with"),
        "{out}"
    );
    assert_eq!(std::fs::read(&state).unwrap(), before);
}

#[test]
fn a_checkpoint_dir_that_is_a_file_or_busy_is_refused_before_the_metrics_file_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let earlier = "{\"type\":\"run\"}\n";
    std::fs::write(d.join("earlier.jsonl"), earlier).unwrap();
    std::fs::write(d.join("afile"), "x").unwrap();
    let o = run_in(
        d,
        &[
            "--headless",
            "--checkpoint-dir",
            "afile",
            "--metrics-out",
            "earlier.jsonl",
        ],
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("afile") && out.contains("--checkpoint-dir"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("earlier.jsonl")).unwrap(),
        earlier,
        "a failed start truncated the metrics file"
    );
    // a second run into the directory a live run is writing
    let mut first = bin()
        .current_dir(d)
        .args([
            "--headless",
            "--steps",
            "100000000",
            "--checkpoint-dir",
            "ck",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(first.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let o = run_in(d, &["--headless", "--steps", "5", "--checkpoint-dir", "ck"]);
    let _ = first.kill();
    let _ = first.wait();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!("another run (pid {})", first.id()))
            && out.contains("--checkpoint-dir"),
        "{out}"
    );
}

#[test]
fn resuming_says_where_the_batch_size_and_lr_came_from_and_applies_the_flags() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let args = [
        "--headless",
        "--devices",
        "cpu:1",
        "--lr",
        "1e-3",
        "--steps",
        "5",
        "--checkpoint-dir",
        "checkpoints",
    ];
    assert!(run_in(d, &args).status.success());
    let o = run_in(
        d,
        &[
            "--headless",
            "--devices",
            "cpu:1",
            "--steps",
            "10",
            "--resume",
            "checkpoints",
            "--batch-per-replica",
            "64",
        ],
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("batch 64 per replica from --batch-per-replica (the checkpoint had 32)"),
        "{out}"
    );
    assert!(
        out.contains(
            "lr: 1.41e-3 (the checkpoint's 1.00e-3, sqrt scaling from a global batch of 32 to 64)"
        ),
        "{out}"
    );
    assert!(
        out.contains("batch: 64 per replica x 1 rank = 64 global"),
        "{out}"
    );
    // the same digits as a table, which is standardised: the weights go on from values made
    // otherwise, said as --init says it
    let csv = format!("csv:{}/data/digits.csv", env!("CARGO_MANIFEST_DIR"));
    let resume = ["--resume", "checkpoints", "--data", &csv];
    let o = run_in(
        d,
        &[
            &["--headless", "--devices", "cpu:1", "--steps", "12"],
            &resume[..],
        ]
        .concat(),
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("the checkpoint's weights learned on inputs scaled x*1/16 to [0,1], this run's are standardised per feature"),
        "{out}"
    );
}

#[test]
fn a_checkpoint_of_the_same_convolutional_model_on_other_pictures_goes_on_where_its_weights_fit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = |model: &str, data: &str, extra: &[&str]| {
        let mut args = vec!["--headless", "--devices", "cpu:1", "--model", model];
        args.extend(["--data", data, "--checkpoint-dir", model]);
        args.extend(extra);
        run_in(d, &args)
    };
    // pooled globally before its head, every tensor is the same on larger pictures: it goes on
    // (progressive resizing)
    let small = "synthetic-images:64,3,8,8,3";
    let large = "synthetic-images:64,3,10,10,3";
    let pooled = "conv4k3p1,gap";
    assert!(run(pooled, small, &["--steps", "2"]).status.success());
    let o = run(pooled, large, &["--steps", "4", "--resume", pooled]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("at step 2 (")
            && out.contains(&format!("--data {large} (the checkpoint had {small})"))
            && out.contains("finished: 4 steps"),
        "{out}"
    );
    // nor is a stem the size chooses (resnet18's CIFAR stem at 64 pixels or less, ImageNet's
    // above): refused, naming it
    let r18 = |data: &str, extra: &[&str]| {
        let mut args = vec!["--batch-per-replica", "2"];
        args.extend(extra);
        run("resnet18", data, &args)
    };
    assert!(r18("synthetic-images:8,3,40,40,2", &["--steps", "1"])
        .status
        .success());
    let o = r18(
        "synthetic-images:8,3,72,72,2",
        &["--steps", "2", "--resume", "resnet18"],
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("or start without --resume: the model's layers are not the same at this picture size (here: ImageNet stem: 7x7 stride 2 conv"),
        "{out}"
    );
    // a stem whose stride the size chooses (mobilenetv2's first convolution) goes on, said
    let mb = "mobilenetv2:0.25";
    let args = ["--batch-per-replica", "2", "--steps"];
    let first = run(
        mb,
        "synthetic-images:8,3,40,40,2",
        &[&args[..], &["1"]].concat(),
    );
    assert!(first.status.success(), "{}", text(&first));
    let resumed = [&args[..], &["2", "--resume", mb]].concat();
    let o = run(mb, "synthetic-images:8,3,72,72,2", &resumed);
    let out = text(&o);
    assert!(
        o.status.success()
            && out.contains("the stem is not the checkpoint's at this picture size (this run's: the network's usual one; on the checkpoint's 3x40x40: small images: the stem conv has stride 1)"),
        "{out}"
    );
    // a dense layer over the pictures' pixels is not: refused, naming the inputs it had
    let flat = "conv4k3p1,pool2,dense5";
    assert!(run(flat, small, &["--steps", "2"]).status.success());
    let o = run(flat, large, &["--steps", "4", "--resume", flat]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!("it is --model {flat} trained on inputs of 192 values a sample, and this run's data gives 300: resume it with the --data and picture options it was trained with, or start without --resume")),
        "{out}"
    );
}

/// The validations' accuracies and steps in a run's log (epoch ends and others).
fn validations(log: &str) -> Vec<(String, u64)> {
    let step = |l: &str, after: &str| {
        let rest = &l[l.find(after).unwrap() + after.len()..];
        rest.split([' ', ':'])
            .next()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    log.lines()
        .filter_map(|l| {
            let accuracy = l.split(" acc ").nth(1)?.split_whitespace().next()?;
            let at = match l.contains("validated at step ") {
                true => step(l, "validated at step "),
                false => step(l, " done at step "),
            };
            Some((accuracy.to_string(), at))
        })
        .collect()
}

fn percent(a: &str) -> f32 {
    a.trim_end_matches('%').parse().unwrap()
}

/// The best of `validations`, the first of equals.
fn best_of(v: &[(String, u64)]) -> Option<&(String, u64)> {
    (v.iter()).fold(None, |b, x| match b {
        Some(b) if percent(&b.0) >= percent(&x.0) => Some(b),
        _ => Some(x),
    })
}

/// A resumed run's summary gives the best validation of its line of runs, before the resume
/// too: a checkpoint carries it on to the next resume.
#[test]
fn a_resumed_runs_summary_gives_the_best_validation_of_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let common = ["--headless", "--devices", "cpu:2", "--lr", "0.01"];
    let mut seen: Vec<(String, u64)> = Vec::new();
    for (i, (budget, resume)) in [
        (["--epochs", "10"], None),
        (["--steps", "240"], Some("r0")),
        (["--steps", "250"], Some("r1")),
    ]
    .into_iter()
    .enumerate()
    {
        let run_dir = format!("r{i}");
        let mut args = [&common[..], &budget[..], &["--run-dir", &run_dir]].concat();
        if let Some(r) = resume {
            args.extend(["--resume", r]);
        }
        let o = run_in(d, &args);
        let out = text(&o);
        assert!(o.status.success(), "{out}");
        let ours = validations(&out);
        assert!(!ours.is_empty(), "{out}");
        let own = best_of(&ours).unwrap();
        let said = out.lines().find(|l| l.contains(" summary: ")).unwrap();
        let expected = match best_of(&seen) {
            Some(before) if percent(&before.0) > percent(&own.0) => format!(
                "best val accuracy {} at step {}, before the resume ({} since) |",
                before.0, before.1, own.0
            ),
            _ => format!("best val accuracy {} |", own.0),
        };
        assert!(said.contains(&expected), "{expected}\n{out}");
        // as `view` of its run directory says it
        let viewed = text(&run_in(d, &["view", "--headless", &run_dir]));
        assert!(viewed.contains(&expected), "{expected}\n{viewed}");
        // and the metrics file's run record says the best before it
        let metrics = std::fs::read_to_string(d.join(&run_dir).join("metrics.jsonl")).unwrap();
        let run: serde_json::Value = serde_json::from_str(metrics.lines().next().unwrap()).unwrap();
        match best_of(&seen) {
            Some((a, step)) => {
                let b = &run["best_before"];
                assert_eq!(b["step"], *step, "{b}");
                let got = b["accuracy"].as_f64().unwrap() as f32 * 100.0;
                assert!((got - percent(a)).abs() < 0.006, "{b} {a}");
            }
            None => assert!(run["best_before"].is_null(), "{run}"),
        }
        seen.extend(ours);
    }
    // `runs` lists the last of the line with the line's best
    let listed = text(&run_in(d, &["runs", "."]));
    let r2 = (listed.lines()).find(|l| l.starts_with("./r2 "));
    let r2 = r2.unwrap_or_else(|| panic!("{listed}"));
    assert!(r2.contains(&best_of(&seen).unwrap().0), "{listed}");
    // validated on another set, the line's best before says nothing of this one's
    let other_set = ["--val-split", "0.3", "--steps", "260", "--resume", "r2"];
    let o = run_in(
        d,
        &[&common[..], &other_set[..], &["--run-dir", "r3"]].concat(),
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let said = out.lines().find(|l| l.contains(" summary: ")).unwrap();
    assert!(
        said.contains("best val accuracy ") && !said.contains("before the resume"),
        "{out}"
    );
    let metrics = std::fs::read_to_string(d.join("r3/metrics.jsonl")).unwrap();
    let run: serde_json::Value = serde_json::from_str(metrics.lines().next().unwrap()).unwrap();
    assert!(run["best_before"].is_null(), "{run}");
}

/// A checkpoint written further into an epoch than a resumed run's (smaller) training split
/// holds: that epoch is taken as done, said, and the run trains on.
#[test]
fn a_resume_on_a_smaller_training_split_goes_on_from_the_next_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 20 steps of 2 x 32: 1280 samples into the 1438 of digits' first epoch
    let first = ["--headless", "--devices", "cpu:2", "--steps", "20"];
    assert!(run_in(d, &[&first[..], &["--run-dir", "r1"]].concat())
        .status
        .success());
    let o = run_in(
        d,
        &[
            "--headless",
            "--steps",
            "30",
            "--resume",
            "r1",
            "--val-split",
            "0.3",
        ],
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("its data position (1280) is past the end of this training set (1258 samples), so epoch 1 is taken as done and the run goes on from the start of epoch 2"),
        "{out}"
    );
    assert!(out.contains("finished: 30 steps"), "{out}");
    // where that epoch was the budget's last, there is nothing to train: said, not "goes on"
    let o = run_in(
        d,
        &[
            "--headless",
            "--epochs",
            "1",
            "--resume",
            "r1",
            "--val-split",
            "0.3",
        ],
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("nothing to resume: the checkpoint's data position (1280) is past the end")
            && out.contains("and the run has finished 1 epoch, and --epochs is 1"),
        "{out}"
    );
}

/// A picture folder whose two class folders swap names keeps its size, its classes and its file
/// names: a resume on it is told its training data changed.
#[test]
fn a_resume_on_a_picture_folder_whose_classes_swapped_says_the_data_changed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (class, seed) in [("cat", 0u32), ("dog", 7)] {
        std::fs::create_dir_all(d.join("pets").join(class)).unwrap();
        for i in 0..8u32 {
            // cat's pictures flat, dog's speckled: files of other lengths under the same names
            let img = image::RgbImage::from_fn(8, 8, |x, y| {
                let v = (x * 31 + y * 17 + i) * seed % 251;
                image::Rgb([v as u8, 40, 90])
            });
            img.save(d.join(format!("pets/{class}/{i}.png"))).unwrap();
        }
    }
    let run = |extra: &[&str]| {
        let args = ["--headless", "--devices", "cpu:1", "--model", "conv4k3,gap"];
        run_in(d, &[&args[..], &["--data", "images:pets"], extra].concat())
    };
    let o = run(&["--steps", "2", "--run-dir", "r1"]);
    assert!(o.status.success(), "{}", text(&o));
    // unchanged, a resume says nothing of it
    let o = run(&["--steps", "3", "--resume", "r1", "--run-dir", "r2"]);
    let out = text(&o);
    assert!(o.status.success() && !out.contains("data changed"), "{out}");
    for (from, to) in [("cat", "was-cat"), ("dog", "cat"), ("was-cat", "dog")] {
        std::fs::rename(d.join("pets").join(from), d.join("pets").join(to)).unwrap();
    }
    let o = run(&["--steps", "3", "--resume", "r1", "--run-dir", "r3"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("the training data changed"), "{out}");
    // a class folder renamed so that it sorts first: `cat` is output 1 now, not 0; the model's
    // outputs would answer for the other class: refused, with the classes it trained on
    std::fs::rename(d.join("pets/dog"), d.join("pets/ant")).unwrap();
    let o = run(&["--steps", "3", "--resume", "r1", "--run-dir", "r4"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("`cat` was its output 0 and is this data's 1")
            && out.contains("give the classes it trained on (cat, dog)"),
        "{out}"
    );
    assert!(!d.join("r4/checkpoints").exists(), "{out}");
    // its weights as a new run's start: said, and trained on
    let weights = std::fs::read_dir(d.join("r1/checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().path().join("model.safetensors"))
        .find(|p| p.exists())
        .unwrap();
    let o = run(&["--steps", "3", "--init", weights.to_str().unwrap()]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("the file's outputs were trained for classes at other places (`cat` was its output 0 and is this data's 1)"),
        "{out}"
    );
    // as many classes, none of them the file's: said too
    std::fs::rename(d.join("pets/ant"), d.join("pets/bee")).unwrap();
    std::fs::rename(d.join("pets/cat"), d.join("pets/wasp")).unwrap();
    let o = run(&["--steps", "3", "--init", weights.to_str().unwrap()]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains(
            "the file's head was trained for other classes (cat, dog) than this data's (bee, wasp)"
        ),
        "{out}"
    );
}

/// A checkpoint of a step --log-every leaves out is said after that step's line, not before it.
#[test]
fn a_checkpoint_line_follows_its_steps_line() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--headless",
        "--devices",
        "cpu:1",
        "--steps",
        "7",
        "--log-every",
        "5",
    ];
    let o = run_in(
        dir.path(),
        &[&args[..], &["--checkpoint-dir", "ck"]].concat(),
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let at = |what: &str| {
        out.find(what)
            .unwrap_or_else(|| panic!("no `{what}`:\n{out}"))
    };
    assert!(at("] step 7/7 |") < at("] checkpoint at step 7:"), "{out}");
}

/// The `step-*` checkpoints in `dir`, by name, in order.
fn step_dirs(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with(".lock"))
        .collect();
    names.sort();
    names
}

#[test]
fn keep_checkpoints_removes_the_older_ones_this_run_wrote_and_no_others() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let quick = [
        "--headless",
        "--devices",
        "cpu:2",
        "--checkpoint-every",
        "3",
    ];
    let o = run_in(
        d,
        &[&quick[..], &["--steps", "20", "--keep-checkpoints", "2"]].concat(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let first = (d.join("runs/digits-mlp_128/latest/checkpoints"))
        .canonicalize()
        .unwrap();
    assert_eq!(step_dirs(&first), ["step-00000018", "step-00000020"]);
    // a resumed run keeps its own newest, the run it resumed untouched
    let o = run_in(
        d,
        &["--headless", "--resume", "runs", "--steps", "26"]
            .into_iter()
            .chain(["--keep-checkpoints", "1"])
            .collect::<Vec<_>>(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let second = d.join("runs/digits-mlp_128/latest/checkpoints");
    assert_eq!(step_dirs(&second), ["step-00000026"]);
    assert_eq!(step_dirs(&first).len(), 2, "the resumed run's stay");
    // in one shared --checkpoint-dir: the checkpoint resumed from and the earlier run's stay
    let shared = [
        "--headless",
        "--checkpoint-dir",
        "ck",
        "--checkpoint-every",
        "3",
    ];
    let o = run_in(
        d,
        &[&shared[..], &["--steps", "20", "--keep-checkpoints", "2"]].concat(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = run_in(
        d,
        &[
            &shared[..],
            &["--resume", "ck", "--steps", "29", "--keep-checkpoints", "1"],
        ]
        .concat(),
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        step_dirs(&d.join("ck")),
        ["step-00000018", "step-00000020", "step-00000029"]
    );
    // none kept is refused, as a flag and in a config file
    let o = run_in(
        d,
        &["--headless", "--steps", "3", "--keep-checkpoints", "0"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("'--keep-checkpoints <N>': below 1: use 1 or more"),
        "{}",
        text(&o)
    );
    std::fs::write(d.join("keep.toml"), "keep-checkpoints = 0\n").unwrap();
    let o = run_in(d, &["--headless", "--steps", "3", "--config", "keep.toml"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("--keep-checkpoints 0 would keep none: use 1 or more"),
        "{}",
        text(&o)
    );
}

/// A resume into a new run directory begins its `best/` as its line's: the best checkpoint
/// beside the one resumed from comes along, and a part that never beats it (an LR that
/// leaves the model as it is) leaves it there, so `best/` is the line's best model.
#[test]
fn a_resumed_run_s_best_checkpoint_is_its_line_s_best() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let common = ["--headless", "--devices", "cpu:2", "--optimizer", "sgd"];
    let first = ["--steps", "60", "--val-every", "20", "--checkpoint-best"];
    let first = [&common[..], &first[..], &["--lr", "0.3", "--run-dir", "r0"]].concat();
    let o = run_in(d, &first);
    assert!(o.status.success(), "{}", text(&o));
    let state = |run: &str| -> serde_json::Value {
        let s = std::fs::read(d.join(run).join("checkpoints/best/state.json")).unwrap();
        serde_json::from_slice(&s).unwrap()
    };
    let best = state("r0");
    let step = best["step"].as_u64().unwrap();
    // (--checkpoint-best and --val-every from the checkpoint)
    let again = [
        "--steps",
        "100",
        "--lr",
        "1e-9",
        "--resume",
        "r0",
        "--run-dir",
        "r1",
    ];
    let o = run_in(d, &[&common[..], &again[..]].concat());
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let carried = d.join("r1/checkpoints/best");
    assert!(
        out.contains(&format!("best checkpoint at step {step} (val acc ")),
        "{out}"
    );
    assert!(out.contains(&carried.display().to_string()), "{out}");
    let ours = state("r1");
    assert_eq!(
        (&ours["step"], &ours["val_accuracy"]),
        (&best["step"], &best["val_accuracy"])
    );
    let weights =
        |run: &str| std::fs::read(d.join(run).join("checkpoints/best/model.safetensors")).unwrap();
    assert_eq!(weights("r1"), weights("r0"));
    // the line's first run keeps its own
    assert!(d.join("r0/checkpoints/best/state.json").is_file());
}
