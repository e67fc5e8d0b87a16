use std::path::PathBuf;
use std::time::Duration;

use super::{device, figures, report};
use crate::engine::eval::{Evaluation, Tally};

/// An evaluation of `classes` classes over `rows` (label, logits).
fn evaluation(names: &[&str], rows: &[(u32, Vec<f32>)]) -> Evaluation {
    let mut tally = Tally::new(names.len());
    for (y, logits) in rows {
        tally.add(logits, &[*y], 0.5);
    }
    Evaluation {
        checkpoint: PathBuf::from("runs/cats/1/checkpoints/step-00000040"),
        step: 40,
        model: "mlp:16".into(),
        data: "images cats: 4 images".into(),
        notes: Vec::new(),
        own: true,
        classes: names.iter().map(|s| s.to_string()).collect(),
        tally,
        elapsed: Duration::from_secs(2),
        device: "2 CPU threads, fp32".into(),
    }
}

fn one_hot(c: usize, of: usize) -> Vec<f32> {
    (0..of).map(|j| if j == c { 1.0 } else { 0.0 }).collect()
}

#[test]
fn the_report_gives_the_accuracy_and_each_class_with_what_it_was_taken_for() {
    let e = evaluation(
        &["cat", "dog"],
        &[
            (0, one_hot(0, 2)),
            (0, one_hot(1, 2)),
            (1, one_hot(1, 2)),
            (1, one_hot(1, 2)),
        ],
    );
    let text = report(&e).join("\n");
    assert!(
        text.contains("(step 40, --model mlp:16) on the run's validation set"),
        "{text}"
    );
    assert!(
        text.contains("loss 0.5000   accuracy 75.00% (3 of 4)\n"),
        "{text}"
    );
    // two classes: no top-5
    assert!(!text.contains("top-5"), "{text}");
    // a loss too small for four places is said as the run's lines say it, not as 0.0000
    let mut sure = evaluation(&["cat", "dog"], &[]);
    sure.tally.add(&one_hot(0, 2), &[0], 3.95e-5);
    let said = report(&sure).join("\n");
    assert!(said.contains("loss 3.95e-5   accuracy 100.00%"), "{said}");
    let cat = text.lines().find(|l| l.starts_with("cat ")).unwrap();
    assert_eq!(
        cat.split_whitespace().collect::<Vec<_>>(),
        ["cat", "2", "50.00%", "100.00%", "dog", "(1)"]
    );
    let dog = text.lines().find(|l| l.starts_with("dog ")).unwrap();
    assert!(dog.ends_with("66.67%  -"), "{dog}");
    assert!(text.contains("2 samples/s"), "{text}");
}

#[test]
fn many_classes_list_the_lowest_accuracies_and_a_top5() {
    let names: Vec<String> = (0..30).map(|c| format!("c{c}")).collect();
    let names: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
    // class c's samples: c = 3 taken for class 4, every other one right
    let rows: Vec<(u32, Vec<f32>)> = (0..30)
        .map(|c| match c {
            3 => (3, one_hot(4, 30)),
            c => (c as u32, one_hot(c, 30)),
        })
        .collect();
    let e = evaluation(&names, &rows);
    let lines = report(&e);
    let text = lines.join("\n");
    assert!(text.contains("top-5 "), "{text}");
    assert!(
        text.contains("the 10 classes of lowest accuracy (of 30; --json FILE has every class):"),
        "{text}"
    );
    let rows: Vec<&String> = (lines.iter())
        .filter(|l| l.starts_with('c') && l[1..].starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    assert_eq!(rows.len(), 10, "{text}");
    assert!(
        rows[0].starts_with("c3 ") && rows[0].ends_with("c4 (1)"),
        "{text}"
    );
}

#[test]
fn class_names_are_printed_harmless() {
    let e = evaluation(&["a\u{1b}[2J", "b"], &[(0, one_hot(0, 2))]);
    let text = report(&e).join("\n");
    assert!(!text.contains('\u{1b}'), "{text:?}");
}

#[test]
fn the_json_has_every_class_and_confusion() {
    let e = evaluation(
        &["cat", "dog", "fox"],
        &[(0, one_hot(1, 3)), (0, one_hot(1, 3)), (2, one_hot(0, 3))],
    );
    let j = figures(&e);
    assert_eq!(j["format"], "mgtop.eval/1");
    assert_eq!(j["classes"].as_array().unwrap().len(), 3);
    assert_eq!(j["classes"][1]["predicted"], 2);
    assert_eq!(j["classes"][1]["precision"], 0.0);
    assert_eq!(j["classes"][1]["accuracy"], serde_json::Value::Null);
    assert_eq!(
        j["confusions"],
        serde_json::json!([
            {"label": 0, "prediction": 1, "count": 2},
            {"label": 2, "prediction": 0, "count": 1}
        ])
    );
    assert_eq!(j["accuracy"], 0.0);
}

/// `--device` takes training's spellings of one device (`cpu:N`, a GPU's number) and refuses a
/// list or `auto` naming the forms it takes.
#[test]
fn the_device_is_one_of_trainings_spellings() {
    use crate::engine::eval::On;
    let on = |d: Option<&str>, t: Option<usize>| device(d, t).map_err(|e| e.to_string());
    assert_eq!(on(Some("cpu:3"), None), Ok(On::Cpu(3)));
    assert_eq!(on(Some("cpu"), Some(5)), Ok(On::Cpu(5)));
    assert_eq!(on(None, Some(2)), Ok(On::Cpu(2)));
    let flag = "--device";
    assert_eq!(on(Some("1"), None), Ok(On::Gpu { index: 1, flag }));
    for (d, t, said) in [
        ("0,1", None, "eval runs on one device: give cpu, cpu:N"),
        ("auto", None, "eval runs on one device"),
        ("cpu:0", None, "give cpu:N with N threads from 1 to 4096"),
        ("cpu:2", Some(3), "say two thread counts"),
        ("0", Some(3), "--threads is for the CPU"),
        ("tpu", None, "use cpu (this machine's cores), cpu:N"),
    ] {
        let e = on(Some(d), t).unwrap_err();
        assert!(
            e.starts_with(&format!("--device {d}")) || e.contains(said),
            "{d}: {e}"
        );
        assert!(e.contains(said), "{d}: {e}");
    }
}
