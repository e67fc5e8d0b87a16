//! `mgtop-train eval`: a run's model on its own validation set gives the run's validation, on
//! another folder its classes matched by name; bad inputs are clear errors before any work.

mod common;

use std::path::Path;

use common::cli::{run_in, text};
use image::{ImageBuffer, Rgb};

/// A picture of `class`'s colour with some noise: classes a small MLP tells apart at once.
fn picture(path: &Path, class: usize, i: usize) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let colour = [[220u8, 40, 40], [40, 220, 40], [40, 40, 220]][class];
    let img = ImageBuffer::from_fn(8, 6, |x, y| {
        let noise = ((x * 7 + y * 13 + i as u32 * 29) % 40) as u8;
        Rgb(colour.map(|c| c.saturating_add(noise)))
    });
    img.save(path).unwrap();
}

/// `root/<part>/<class>/<i>.png` for each (part, classes, pictures per class).
fn folder(root: &Path, parts: &[(&str, &[usize], usize)]) {
    let names = ["ant", "bee", "cow"];
    for &(part, classes, n) in parts {
        for &c in classes {
            for i in 0..n {
                picture(&root.join(part).join(format!("{}/{i}.png", names[c])), c, i);
            }
        }
    }
}

/// A refusal's output (exit 1), None where the command succeeded.
fn text_of_refusal(o: &std::process::Output) -> Option<String> {
    (o.status.code() == Some(1)).then(|| text(o))
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The last validation record of the one run under `dir/runs`.
fn last_validation(dir: &Path) -> serde_json::Value {
    let runs = dir.join("runs");
    let name = std::fs::read_dir(&runs).unwrap().next().unwrap().unwrap();
    let metrics = std::fs::read_to_string(name.path().join("latest/metrics.jsonl")).unwrap();
    (metrics.lines().rev())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["type"] == "validation" || r["type"] == "epoch")
        .find(|r| r.get("val_accuracy").is_some_and(|a| !a.is_null()))
        .expect("a validation")
}

#[test]
fn a_runs_own_validation_set_gives_its_last_validation_and_each_class() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // (label smoothing: the run's validation loss is smoothed, and so is eval's, said)
    let args = [
        "--headless",
        "--steps",
        "30",
        "--devices",
        "cpu:2",
        "--label-smoothing",
        "0.1",
    ];
    let o = run_in(d, &args);
    assert!(o.status.success(), "{}", text(&o));
    let o = run_in(d, &["eval", "runs", "--json", "e.json", "--threads", "2"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let (e, v) = (json(&d.join("e.json")), last_validation(d));
    assert_eq!(e["format"], "mgtop.eval/1");
    assert_eq!(e["step"], 30);
    assert_eq!(e["own_validation_set"], true);
    // the same model on the same samples made the same way: the run's figures
    let close = |a: &serde_json::Value, b: &serde_json::Value| {
        (a.as_f64().unwrap() - b.as_f64().unwrap()).abs() < 1e-5
    };
    assert!(close(&e["accuracy"], &v["val_accuracy"]), "{e} {v}");
    assert!(close(&e["loss"], &v["val_loss"]), "{e} {v}");
    let classes = e["classes"].as_array().unwrap();
    assert_eq!(classes.len(), 10);
    let samples: u64 = classes.iter().map(|c| c["samples"].as_u64().unwrap()).sum();
    let correct: u64 = classes.iter().map(|c| c["correct"].as_u64().unwrap()).sum();
    assert_eq!(samples, 359, "digits' seeded 20% split");
    assert_eq!(
        Some(correct),
        e["accuracy"].as_f64().map(|a| (a * 359.0).round() as u64)
    );
    // the report says the same, a line per digit
    let accuracy = format!("{:.2}%", 100.0 * e["accuracy"].as_f64().unwrap());
    assert!(
        out.contains(&format!("accuracy {accuracy} ({correct} of 359)")),
        "{out}"
    );
    assert!(out.contains("on the run's validation set"), "{out}");
    assert!(
        out.contains("the loss is with the run's --label-smoothing 0.1"),
        "{out}"
    );
    assert!(out.contains("figures written to e.json"), "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("9 ")).count(),
        1,
        "{out}"
    );
    // what only training reads of the recorded settings (--freeze) does not stop eval
    let state = std::fs::read_dir(d.join("runs"))
        .unwrap()
        .flat_map(|r| std::fs::read_dir(r.unwrap().path()).unwrap())
        .map(|t| {
            t.unwrap()
                .path()
                .join("checkpoints/step-00000030/state.json")
        })
        .find(|p| p.is_file())
        .unwrap();
    let mut meta = json(&state);
    meta["config"]["freeze"] = "no.such.tensor".into();
    std::fs::write(&state, meta.to_string()).unwrap();
    let o = run_in(d, &["eval", "runs", "--threads", "2"]);
    assert!(o.status.success(), "{}", text(&o));
    // a refusal names the flag as typed: training's --devices, taken by eval too
    for flag in ["--devices", "--device"] {
        let o = run_in(d, &["eval", "runs", flag, "0,1"]);
        let out = text(&o);
        assert!(
            !o.status.success() && out.contains(&format!("{flag} 0,1: eval runs on one device")),
            "{out}"
        );
    }
}

#[test]
fn another_folder_is_evaluated_with_its_classes_matched_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    folder(
        &d.join("pics"),
        &[("train", &[0, 1, 2], 12), ("val", &[0, 1, 2], 3)],
    );
    // a test folder without ants: its bees are class 1, its cows class 2
    folder(&d.join("test"), &[("", &[1, 2], 5)]);
    let args = [
        "--headless",
        "--steps",
        "40",
        "--devices",
        "cpu:1",
        "--data",
        "images:pics",
        "--model",
        "mlp:16",
        "--name",
        "pics",
    ];
    let o = run_in(d, &args);
    assert!(o.status.success(), "{}", text(&o));
    let o = run_in(
        d,
        &["eval", "runs/pics", "--data", "images:test", "--json", "-"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    // `--json -`: the figures alone on stdout, the report on stderr
    let e: serde_json::Value = serde_json::from_str(&stdout).expect("stdout is the JSON");
    assert_eq!(e["own_validation_set"], false);
    assert_eq!(e["samples"], 10);
    let samples: Vec<u64> = (e["classes"].as_array().unwrap().iter())
        .map(|c| c["samples"].as_u64().unwrap())
        .collect();
    assert_eq!(samples, [0, 5, 5]);
    assert_eq!(e["classes"][2]["name"], "cow");
    assert!(e["accuracy"].as_f64().unwrap() >= 0.9, "{e}");
    assert!(
        stderr.contains("data: images test: 10 images; inputs RGB pictures 8x6 as stored"),
        "{stderr}"
    );
    assert!(stderr.contains("no picture of 1 class (ant)"), "{stderr}");
    // a bee's row says what it was taken for, or `-`
    assert!(stderr.lines().any(|l| l.starts_with("bee ")), "{stderr}");
    // a picture cut short (its header whole): said, and left out of the figures, not counted
    // again through a picture of its class standing in for it
    let whole = std::fs::read(d.join("test/cow/0.png")).unwrap();
    std::fs::write(d.join("test/cow/9.png"), &whole[..whole.len() / 2]).unwrap();
    let o = run_in(
        d,
        &["eval", "runs/pics", "--data", "images:test", "--json", "-"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let e: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stdout is the JSON");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(e["samples"], 10, "{stderr}");
    assert_eq!(e["classes"][2]["samples"], 5, "{stderr}");
    assert!(
        stderr.contains("cow/9.png") && stderr.contains("left out of the figures"),
        "{stderr}"
    );
}

#[test]
fn bad_inputs_are_refused_with_the_fix_before_any_work() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    folder(
        &d.join("pics"),
        &[("train", &[0, 1], 6), ("val", &[0, 1], 2)],
    );
    let args = [
        "--headless",
        "--steps",
        "5",
        "--devices",
        "cpu:1",
        "--data",
        "images:pics",
        "--model",
        "mlp:8",
        "--name",
        "pics",
    ];
    assert!(run_in(d, &args).status.success());
    let refused = |args: &[&str], says: &str| {
        let o = run_in(d, args);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(1), "{out}");
        assert!(out.contains(says), "{args:?}: {out}");
        assert!(!out.contains("panicked"), "{out}");
    };
    refused(
        &["eval", "nowhere"],
        "eval nowhere: no such file or directory; pass a run directory",
    );
    refused(
        &["eval", "runs/pics", "--data", "csv:x.csv"],
        "--data csv:x.csv: is not a set of the same kind as the run's --data images:",
    );
    refused(
        &["eval", "runs/pics", "--data", "images:none"],
        "--data images:none: none does not exist",
    );
    // a GPU that is not there is said with the flag as typed (training's spelling here)
    refused(&["eval", "runs/pics", "--devices", "99"], "--devices 99: ");
    refused(
        &["eval", "runs/pics", "--devices", "99"],
        "; or evaluate on the CPU: --devices cpu",
    );
    std::fs::create_dir(d.join("out")).unwrap();
    refused(
        &["eval", "runs/pics", "--json", "out"],
        "--json out is a directory; give the file to write, e.g. out/eval.json",
    );
    refused(
        &["eval", "runs/pics", "--json", "no/e.json"],
        "--json no/e.json: the folder no does not exist; create it first (mkdir -p no)",
    );
    // nothing of the run's, nor a file holding something else, is written over
    std::fs::write(d.join("notes.txt"), "precious").unwrap();
    refused(
        &["eval", "runs/pics", "--json", "notes.txt"],
        "--json notes.txt exists and is not an eval report (mgtop.eval/1): remove it or give another name",
    );
    let run = std::fs::read_dir(d.join("runs/pics")).unwrap();
    let run = (run.map(|e| e.unwrap().path()))
        .find(|p| p.join("metrics.jsonl").is_file())
        .unwrap();
    let metrics = run.join("metrics.jsonl");
    let state = run.join("checkpoints/step-00000005/state.json");
    assert!(state.is_file(), "{}", state.display());
    for (file, says) in [
        (&metrics, "is a file of the run directory"),
        (&state, "is in the checkpoint"),
    ] {
        let before = std::fs::read(file).unwrap();
        refused(
            &["eval", "runs/pics", "--json", file.to_str().unwrap()],
            says,
        );
        assert_eq!(std::fs::read(file).unwrap(), before);
    }
    assert_eq!(
        std::fs::read_to_string(d.join("notes.txt")).unwrap(),
        "precious"
    );
    // the run's data moved away: its own validation set is gone, a held-out set is not
    std::fs::rename(d.join("pics"), d.join("moved")).unwrap();
    refused(
        &["eval", "runs/pics"],
        "put the run's data back where it read it",
    );
    let o = run_in(d, &["eval", "runs/pics", "--data", "images:moved/val"]);
    assert!(o.status.success(), "{}", text(&o));
    // its classes renamed: the run's validation split would be other samples of other labels
    for part in ["train", "val"] {
        let (from, to) = (format!("moved/{part}/ant"), format!("moved/{part}/zebra"));
        std::fs::rename(d.join(from), d.join(to)).unwrap();
    }
    std::fs::rename(d.join("moved"), d.join("pics")).unwrap();
    refused(
        &["eval", "runs/pics"],
        "changed since it trained: its training split has the 12 samples the checkpoint's run had, but other contents",
    );
    // ... and a held-out folder's are matched to the run's own names, not the folder's now
    refused(
        &["eval", "runs/pics", "--data", "images:pics"],
        "class folder",
    );
    // a state.json edited to settings the run could not have had: the checkpoint is to mend,
    // no flag of eval's replaces them
    let original = std::fs::read_to_string(&state).unwrap();
    for (from, to, says) in [
        (
            "\"schedule\": \"constant\"",
            "\"schedule\": \"sometimes\"",
            "--schedule: unknown schedule `sometimes`",
        ),
        (
            "\"warmup\": 0",
            "\"warmup\": \"soon\"",
            "records settings this version cannot read (invalid type: string \"soon\"",
        ),
    ] {
        assert!(original.contains(from), "{original}");
        std::fs::write(&state, original.replace(from, to)).unwrap();
        let o = run_in(d, &["eval", "runs/pics"]);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(1), "{out}");
        assert!(out.contains(says), "{out}");
        assert!(
            out.contains("its state.json was edited or damaged: mend it, or take another checkpoint of the run"),
            "{out}"
        );
        assert!(
            !out.contains("give the flag") && !out.contains("flags yourself"),
            "{out}"
        );
    }
}

/// A table's held-out rows are scaled as the run scaled its own, from the checkpoint: a changed
/// training file changes nothing of them, and is refused for the run's own validation set.
#[test]
fn a_tables_held_out_rows_take_the_runs_recorded_scaling() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // three classes far apart on five features of large, shifted values
    let rows = |n: usize, salt: usize| -> String {
        (0..n)
            .map(|i| {
                let y = (i * 7 + salt) % 3;
                let x: Vec<String> = (0..5)
                    .map(|j| {
                        // (another salt, other values: a held-out row is no training row)
                        let noise = ((i * 13 + j * 5 + salt) % 17) as f64 * 9.0 + salt as f64 * 0.5;
                        format!("{}", 1000.0 + 300.0 * y as f64 + noise)
                    })
                    .collect();
                format!("{},{y}\n", x.join(","))
            })
            .collect()
    };
    std::fs::write(d.join("train.csv"), rows(300, 0)).unwrap();
    std::fs::write(d.join("test.csv"), rows(60, 1)).unwrap();
    let args = [
        "--headless",
        "--steps",
        "30",
        "--devices",
        "cpu:1",
        "--data",
        "csv:train.csv",
        "--model",
        "mlp:16",
        "--name",
        "tab",
    ];
    assert!(run_in(d, &args).status.success());
    let held_out = |what: &str| {
        let o = run_in(
            d,
            &["eval", "runs/tab", "--data", "csv:test.csv", "--json", "-"],
        );
        assert!(o.status.success(), "{what}: {}", text(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let before = held_out("as trained");
    assert!(before["accuracy"].as_f64().unwrap() > 0.9, "{before}");
    // the training file as a held-out set: said to be it; another set is not
    let o = run_in(d, &["eval", "runs/tab", "--data", "csv:./train.csv"]);
    assert!(
        text(&o).contains("note: --data csv:./train.csv is, or holds, the data the run trained on"),
        "{}",
        text(&o)
    );
    // a copy of it under another name too
    std::fs::copy(d.join("train.csv"), d.join("copy.csv")).unwrap();
    let o = run_in(d, &["eval", "runs/tab", "--data", "csv:copy.csv"]);
    assert!(
        text(&o).contains("is, or holds, the data the run trained on"),
        "{}",
        text(&o)
    );
    let o = run_in(d, &["eval", "runs/tab", "--data", "csv:test.csv"]);
    assert!(!text(&o).contains("trained on"), "{}", text(&o));
    // a held-out file with rows of the training file among its own: how many, said
    let train_rows: String = rows(300, 0)
        .lines()
        .take(30)
        .map(|l| l.to_string() + "\n")
        .collect();
    std::fs::write(d.join("mixed.csv"), rows(60, 1) + &train_rows).unwrap();
    let o = run_in(d, &["eval", "runs/tab", "--data", "csv:mixed.csv"]);
    let out = text(&o);
    let shared = (24..=30).find(|k| out.contains(&format!("note: {k} of the 90 samples of --data csv:mixed.csv have the values of a sample the run trained on")));
    assert!(shared.is_some(), "{out}");
    // a validation row changed (the seeded split's are the run's to know: every row is tried
    // until one is among them), then the training file cut to half: the held-out figures stay,
    // the run's own set is refused
    let original = std::fs::read_to_string(d.join("train.csv")).unwrap();
    let changed = (0..300).find_map(|i| {
        let mut lines: Vec<String> = original.lines().map(String::from).collect();
        lines[i] = lines[i].replacen("1", "7", 1);
        std::fs::write(d.join("train.csv"), lines.join("\n") + "\n").unwrap();
        let o = run_in(d, &["eval", "runs/tab"]);
        text_of_refusal(&o).filter(|t| t.contains("its validation samples are not the ones"))
    });
    assert!(changed.is_some(), "no changed validation row was refused");
    std::fs::write(d.join("train.csv"), &original).unwrap();
    assert!(run_in(d, &["eval", "runs/tab"]).status.success());
    // the training file cut to half: the held-out figures stay, the run's own set is refused
    std::fs::write(d.join("train.csv"), rows(150, 0)).unwrap();
    let after = held_out("after the training file changed");
    assert_eq!(before["loss"], after["loss"]);
    // the run's training split is not known now: its rows are not counted among a held-out
    // set, said
    let o = run_in(d, &["eval", "runs/tab", "--data", "csv:mixed.csv"]);
    assert!(
        o.status.success()
            && !text(&o).contains("have the values of a sample the run trained on")
            && text(&o).contains("are ones the run trained on is not checked"),
        "{}",
        text(&o)
    );
    let o = run_in(d, &["eval", "runs/tab"]);
    assert_eq!(o.status.code(), Some(1));
    let out = text(&o);
    assert!(
        out.contains("its training split has 120 now, the checkpoint's run had 240"),
        "{out}"
    );
}

/// A table whose labels are class names (iris's species) trains on them in sorted order; a
/// held-out file of names in another order, and of some of the classes, is scored by name; a
/// class renamed so that the outputs move refuses a resume.
#[test]
fn a_table_of_named_classes_trains_and_is_evaluated_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let names = ["virginica", "setosa", "versicolor"];
    let rows = |n: usize, classes: &[usize]| -> String {
        let mut s = String::from("length,width,species\n");
        for i in 0..n {
            let c = classes[i % classes.len()];
            let wobble = (i % 7) as f64 * 0.1;
            s += &format!(
                "{},{},{}\n",
                2.0 * c as f64 + wobble,
                1.0 - wobble,
                names[c]
            );
        }
        s
    };
    std::fs::write(d.join("train.csv"), rows(240, &[0, 1, 2])).unwrap();
    // (setosa and virginica only, setosa first)
    std::fs::write(d.join("test.csv"), rows(40, &[1, 0])).unwrap();
    let train = |data: &str, extra: &[&str]| {
        let args = ["--headless", "--devices", "cpu:1", "--model", "mlp:16"];
        run_in(d, &[&args[..], &["--data", data], extra].concat())
    };
    let o = train(
        "csv:train.csv,header",
        &["--steps", "300", "--lr", "0.01", "--run-dir", "r1"],
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("3 classes (setosa, versicolor, virginica)"),
        "{out}"
    );
    let o = run_in(
        d,
        &["eval", "r1", "--data", "csv:test.csv,header", "--json", "-"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(report["accuracy"].as_f64().unwrap() > 0.9, "{report}");
    let per_class = |name: &str| {
        let classes = report["classes"].as_array().unwrap();
        let c = classes.iter().find(|c| c["name"] == name).unwrap();
        (c["class"].as_u64().unwrap(), c["samples"].as_u64().unwrap())
    };
    assert_eq!(per_class("setosa"), (0, 20));
    assert_eq!(per_class("virginica"), (2, 20));
    assert_eq!(per_class("versicolor"), (1, 0));
    // the file given without options: read as the run read its own (its header), said
    let o = run_in(d, &["eval", "r1", "--data", "csv:test.csv"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("read as the run read its CSV") && out.contains("as csv:test.csv,header ("),
        "{out}"
    );
    assert!(out.contains("csv test.csv: 40 samples"), "{out}");
    // one without a header (line 1 a sample): read whole, not its line 1 taken for the header
    let text_of = std::fs::read_to_string(d.join("test.csv")).unwrap();
    let bare = text_of.split_once('\n').unwrap().1;
    std::fs::write(d.join("bare.csv"), bare).unwrap();
    let o = run_in(d, &["eval", "r1", "--data", "csv:bare.csv"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        !out.contains("read as the run read") && out.contains("csv bare.csv: 40 samples"),
        "{out}"
    );
    // a header of numbered columns (pandas' for unnamed ones) is still the header
    std::fs::write(d.join("numbered.csv"), format!("0,1,species\n{bare}")).unwrap();
    let o = run_in(d, &["eval", "r1", "--data", "csv:numbered.csv"]);
    let out = text(&o);
    assert!(
        o.status.success() && out.contains("csv numbered.csv: 40 samples"),
        "{out}"
    );
    // the training file moved away: rows it shares are not counted, said (it was silent)
    std::fs::rename(d.join("train.csv"), d.join("moved.csv")).unwrap();
    let o = run_in(d, &["eval", "r1", "--data", "csv:bare.csv"]);
    std::fs::rename(d.join("moved.csv"), d.join("train.csv")).unwrap();
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("are ones the run trained on is not checked: the run's data (--data csv:")
            && out.contains("train.csv,header) does not read as the checkpoint recorded it"),
        "{out}"
    );
    // given any option of its own (the default's too), it is read as they say
    let o = run_in(d, &["eval", "r1", "--data", "csv:test.csv,label=last"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("if line 1 is a header, add ,header"), "{out}");
    // numbers where the run's classes are names, and a class it never had: refused, named
    std::fs::write(d.join("numbers.csv"), "1,2,0\n").unwrap();
    let o = run_in(d, &["eval", "r1", "--data", "csv:numbers.csv,label=last"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("its labels are class numbers and the run's model's classes are names (setosa, versicolor, virginica)"), "{out}");
    // a set of another width: said first, whatever its labels
    std::fs::write(d.join("wide.csv"), "1,2,3,4,daisy\n").unwrap();
    let o = run_in(d, &["eval", "r1", "--data", "csv:wide.csv,label=last"]);
    assert!(
        text(&o).contains("it has 4 features; the run's model takes 2"),
        "{}",
        text(&o)
    );
    std::fs::write(d.join("other.csv"), "1,2,daisy\n").unwrap();
    let o = run_in(d, &["eval", "r1", "--data", "csv:other.csv,label=last"]);
    assert!(
        text(&o).contains("its class `daisy` is not one of the run's model's classes"),
        "{}",
        text(&o)
    );
    // a class renamed in place (it sorts where it did): the run's own set evaluates, said
    let inplace = rows(240, &[0, 1, 2]).replace("virginica", "virginicum");
    std::fs::write(d.join("train.csv"), inplace).unwrap();
    let o = run_in(d, &["eval", "r1"]);
    assert!(
        text(&o).contains(
            "the data names output 2 `virginicum` where the checkpoint's run named it `virginica`"
        ),
        "{}",
        text(&o)
    );
    // a class renamed so that it sorts first: the outputs would answer for others
    let renamed = rows(240, &[0, 1, 2]).replace("virginica", "arvensis");
    std::fs::write(d.join("renamed.csv"), renamed).unwrap();
    let o = train(
        "csv:renamed.csv,header",
        &["--steps", "301", "--resume", "r1", "--run-dir", "r2"],
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("`setosa` was its output 0 and is this data's 1"),
        "{out}"
    );
}

/// `dir` as a CIFAR set of `files`, 4 records each: a label byte (CIFAR-100: coarse and fine)
/// and the pixels, each record's label `top` at most.
fn cifar(dir: &Path, files: &[&str], label_bytes: usize, top: u8) {
    std::fs::create_dir_all(dir).unwrap();
    for f in files {
        let bytes: Vec<u8> = (0..4u8)
            .flat_map(|k| {
                let labels = vec![top - k; label_bytes];
                labels.into_iter().chain(vec![40 * k; 3072])
            })
            .collect();
        std::fs::write(dir.join(f), bytes).unwrap();
    }
}

#[test]
fn a_cifar_set_of_other_labels_is_refused_not_scored() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let batches = ["data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin"];
    let ten = [
        &batches[..],
        &["data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"],
    ]
    .concat();
    cifar(&d.join("c10"), &ten, 1, 9);
    cifar(&d.join("c100"), &["train.bin", "test.bin"], 2, 99);
    let args = [
        "--headless",
        "--steps",
        "2",
        "--devices",
        "cpu:1",
        "--data",
        "cifar10:c10",
        "--model",
        "conv4k3,pool4,dense10",
        "--name",
        "c10",
    ];
    let o = run_in(d, &args);
    assert!(o.status.success(), "{}", text(&o));
    assert!(run_in(d, &["eval", "runs/c10"]).status.success());
    for (data, labels) in [
        ("cifar100:c100", "CIFAR-100's 100 fine classes"),
        (
            "cifar100:c100,labels=coarse",
            "CIFAR-100's 20 coarse classes",
        ),
    ] {
        let o = run_in(d, &["eval", "runs/c10", "--data", data]);
        let out = text_of_refusal(&o).unwrap_or_else(|| text(&o));
        assert!(
            out.contains(&format!("--data {data}: its labels are {labels}, not the outputs of the run's model, which trained on --data cifar10:"))
                && out.contains("(10 classes): evaluate it on CIFAR-10 (--data cifar10:DIR)"),
            "{out}"
        );
        assert!(!out.contains("panicked"), "{out}");
    }
}
