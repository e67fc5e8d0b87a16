//! `mgtop-train eval RUN_DIR|CHECKPOINT [--data SPEC]`: a run's model on its validation set or
//! another labelled set; the report (loss, accuracy, top-5, per class) and `--json`'s figures.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::cli::EvalArgs;
use crate::data::DataSpec;
use crate::engine::eval::{self, Evaluation, Tally};
use crate::engine::output::Output;
use crate::engine::rundir::{checkpoint_for, Purpose};
use crate::text::printable;

/// Classes listed one by one up to this many; beyond, the lowest accuracies.
const LISTED: usize = 20;
/// How many of the lowest a set of more classes lists.
const LOWEST: usize = 10;
/// A progress line every this often, once an evaluation takes longer than it.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

pub fn command(args: &EvalArgs) -> anyhow::Result<()> {
    let point = checkpoint_for(&args.from, Purpose::Eval).map_err(anyhow::Error::msg)?;
    let opened = eval::open_checkpoint(&point)?;
    let meta = opened.meta().clone();
    // the run's settings as --resume takes them: its data, picture size, scaling, seed, model
    let cfg = crate::cli::resumed::of_checkpoint(opened.dir()).map_err(anyhow::Error::msg)?;
    // (a run still going: its newest checkpoint, not its end)
    let run_dir = meta.run_dir.as_deref().map(Path::new);
    if run_dir.is_some_and(crate::engine::rundir::is_live) {
        crate::tell!(
            "note: the run is still training: this is its checkpoint of step {}",
            meta.step
        );
    }
    let given = (args.data.as_deref())
        .map(|d| d.parse::<DataSpec>().map_err(|e| format!("--data: {e}")))
        .transpose()
        .map_err(anyhow::Error::msg)?;
    // a CSV given without options (as it reads back: nothing added, not even label=last): read
    // as the run read its own
    let read_as = match (&given, args.data.as_deref()) {
        (Some(spec), Some(raw)) if spec.to_string() == raw => {
            crate::data::held_out::as_the_run_read(spec, &cfg.data, &meta.classes)
        }
        _ => None,
    };
    let (data, read_note) = match read_as {
        Some((spec, note)) => (Some(spec), Some(note)),
        None => (given, None),
    };
    let to_stdout = args.json.as_deref() == Some(Path::new("-"));
    let json_target = (args.json.as_deref().filter(|_| !to_stdout))
        .map(|out| REPORT.target(out))
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let on = device(args.device.as_deref(), args.threads)?;
    let (started, mut shown) = (Instant::now(), Duration::ZERO);
    let progress = |done: usize, total: usize| {
        let now = started.elapsed();
        if now >= shown + PROGRESS_EVERY && done < total {
            shown = now;
            crate::tell!(
                "evaluated {done} of {total} samples ({:.0}%, {:.0} s)",
                100.0 * done as f64 / total as f64,
                now.as_secs_f64()
            );
        }
    };
    let mut e =
        eval::evaluate(&cfg, opened, data.as_ref(), on, progress).map_err(
            |err| match &read_note {
                Some(note) => anyhow::anyhow!("{err} ({note})"),
                None => err.into(),
            },
        )?;
    e.notes.splice(0..0, read_note);
    for line in report(&e) {
        match to_stdout {
            true => crate::tell!("{line}"),
            false => crate::say!("{line}"),
        }
    }
    let text = || serde_json::to_string_pretty(&figures(&e)).map(|t| t + "\n");
    if to_stdout {
        crate::say!("{}", text()?.trim_end());
    }
    if let (Some(target), Some(out)) = (json_target, &args.json) {
        crate::files::write::replace_file(&target, text()?.as_bytes())
            .map_err(|err| anyhow::anyhow!("--json {}: cannot write it ({err})", out.display()))?;
        crate::tell!("figures written to {}", out.display());
    }
    Ok(())
}

fn percent(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:.2}%", 100.0 * v))
}

/// Where `--device` (or `--devices`, as training spells it) evaluates: `cpu` on `--threads`
/// (this machine's cores), `cpu:N` on N threads, `N` on that GPU. One device: a list, or
/// `auto`, is refused with the form to give.
fn device(given: Option<&str>, threads: Option<usize>) -> anyhow::Result<eval::On> {
    let cores = || threads.unwrap_or_else(crate::engine::available_cores);
    let flag = device_flag();
    let Some(d) = given else {
        return Ok(eval::On::Cpu(cores()));
    };
    if d == "cpu" {
        return Ok(eval::On::Cpu(cores()));
    }
    if let Some(n) = d.strip_prefix("cpu:") {
        return match (n.parse::<usize>(), threads) {
            (Ok(n @ 1..=4096), None) => Ok(eval::On::Cpu(n)),
            (Ok(n @ 1..=4096), Some(t)) if t == n => Ok(eval::On::Cpu(n)),
            (Ok(1..=4096), Some(t)) => {
                anyhow::bail!("{flag} {d} and --threads {t} say two thread counts: give one")
            }
            _ => anyhow::bail!("{flag} {d}: give cpu:N with N threads from 1 to 4096"),
        };
    }
    match d.parse::<usize>() {
        Ok(index) if threads.is_none() => Ok(eval::On::Gpu { index, flag }),
        Ok(_) => anyhow::bail!("--threads is for the CPU; {flag} {d} evaluates on GPU {d}"),
        Err(_) if d.contains(',') || d == "auto" || d.starts_with("gpu") => anyhow::bail!(
            "{flag} {d}: eval runs on one device: give cpu, cpu:N (N threads) or one GPU's number (0, 1, ...)"
        ),
        Err(_) => anyhow::bail!(
            "{flag} {d}: use cpu (this machine's cores), cpu:N (N threads) or a GPU's number (0, 1, ...)"
        ),
    }
}

/// The flag the device was given with, as typed: `--devices` (training's spelling) or
/// `--device`.
fn device_flag() -> &'static str {
    let typed = |a: &String| a == "--devices" || a.starts_with("--devices=");
    match std::env::args().any(|a| typed(&a)) {
        true => "--devices",
        false => "--device",
    }
}

/// The report, as printed.
pub fn report(e: &Evaluation) -> Vec<String> {
    let t = &e.tally;
    let name = |c: usize| printable(&e.classes[c]);
    let which = match e.own {
        true => " on the run's validation set",
        false => "",
    };
    let mut lines = vec![format!(
        "eval {} (step {}, --model {}){which}",
        e.checkpoint.display(),
        e.step,
        e.model
    )];
    lines.push(format!("data: {}", e.data));
    lines.extend(e.notes.iter().map(|n| format!("note: {n}")));
    let secs = e.elapsed.as_secs_f64();
    lines.push(format!(
        "evaluated {} in {} on {} ({:.0} samples/s)",
        crate::text::counted(t.samples as usize, "sample"),
        crate::front::units::took(e.elapsed),
        e.device,
        t.samples as f64 / secs.max(1e-9)
    ));
    let top5 = match t.top5_accuracy() {
        Some(a) => format!("   top-{} {}", eval::TOP_K, percent(Some(a))),
        None => String::new(),
    };
    lines.push(format!(
        "loss {}   accuracy {} ({} of {}){top5}",
        // (as the run's lines say it: a loss under 1e-4 in exponent form, not 0.0000)
        t.loss()
            .map_or("-".into(), |l| crate::front::units::loss_value(l, 4)),
        percent(t.accuracy()),
        t.correct,
        t.samples
    ));
    lines.extend(class_table(t, &name));
    lines
}

/// Per class: samples, accuracy, precision and what it was most often taken for; every class up
/// to `LISTED`, else the `LOWEST` accuracies.
fn class_table(t: &Tally, name: &dyn Fn(usize) -> String) -> Vec<String> {
    let mut shown: Vec<usize> = (0..t.classes()).collect();
    let mut lines = Vec::new();
    if t.classes() > LISTED {
        shown.retain(|&c| t.per_class[c].samples > 0);
        shown.sort_by(|&a, &b| {
            let acc = |c: usize| t.per_class[c].accuracy().unwrap_or(0.0);
            acc(a).total_cmp(&acc(b)).then(a.cmp(&b))
        });
        shown.truncate(LOWEST);
        lines.push(format!(
            "the {} classes of lowest accuracy (of {}; --json FILE has every class):",
            shown.len(),
            t.classes()
        ));
    }
    let width = (shown.iter().map(|&c| crate::text::columns(&name(c))))
        .chain([5])
        .max()
        .unwrap_or(5)
        .min(32);
    lines.push(format!(
        "{:<width$}  {:>8}  {:>8}  {:>9}  most often taken for",
        "class", "samples", "accuracy", "precision"
    ));
    for c in shown {
        let k = &t.per_class[c];
        let taken: Vec<String> = (t.taken_for(c, 2).into_iter())
            .map(|(p, n)| format!("{} ({n})", crate::text::in_columns(&name(p), 32).trim_end()))
            .collect();
        let n = crate::text::in_columns(&name(c), width);
        lines.push(format!(
            "{n}  {:>8}  {:>8}  {:>9}  {}",
            k.samples,
            percent(k.accuracy()),
            percent(k.precision()),
            match taken.is_empty() {
                true => "-".to_string(),
                false => taken.join(", "),
            }
        ));
    }
    lines
}

/// What `--json` writes: a new file, or an earlier report it replaces.
const REPORT: Output = Output {
    flag: "--json",
    kind: "an eval report (mgtop.eval/1)",
    example: "eval.json",
    ours: |p| {
        // (an object, read whole only then: a large file of something else is not)
        let start = crate::engine::output::head(p, 64);
        if !start.trim_ascii_start().starts_with(b"{") {
            return false;
        }
        let text = crate::engine::output::head(p, 256 << 20);
        let v = serde_json::from_slice::<serde_json::Value>(&text);
        v.is_ok_and(|v| v.get("format").and_then(|f| f.as_str()) == Some(FORMAT))
    },
};

/// `--json`'s schema.
const FORMAT: &str = "mgtop.eval/1";

/// Every figure, for `--json` (schema `mgtop.eval/1`).
pub fn figures(e: &Evaluation) -> serde_json::Value {
    let t = &e.tally;
    let classes: Vec<serde_json::Value> = (0..t.classes())
        .map(|c| {
            let k = &t.per_class[c];
            json!({
                "class": c,
                "name": e.classes[c],
                "samples": k.samples,
                "correct": k.correct,
                "predicted": k.predicted,
                "accuracy": k.accuracy(),
                "precision": k.precision(),
            })
        })
        .collect();
    let confusions: Vec<serde_json::Value> = (t.confusions().into_iter())
        .map(|(label, predicted, count)| {
            json!({"label": label, "prediction": predicted, "count": count})
        })
        .collect();
    json!({
        "format": FORMAT,
        "checkpoint": e.checkpoint,
        "step": e.step,
        "model": e.model,
        "data": e.data,
        "own_validation_set": e.own,
        "samples": t.samples,
        "loss": t.loss(),
        "accuracy": t.accuracy(),
        "top5_accuracy": t.top5_accuracy(),
        "seconds": e.elapsed.as_secs_f64(),
        "device": e.device,
        "classes": classes,
        "confusions": confusions,
    })
}

#[cfg(test)]
mod tests;
