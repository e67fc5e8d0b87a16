//! What `--resume PATH` resumes from: a checkpoint, the newest of a checkpoint directory's one
//! line of runs, a run directory's own checkpoints or those its metrics file says it wrote
//! elsewhere, or the one run of a directory of runs.

use std::fs;
use std::path::{Path, PathBuf};

use super::{end_status, is_live, is_run_dir, runs_under, CHECKPOINTS, METRICS};
use crate::engine::checkpoint;

/// How many runs a refusal lists.
const LISTED: usize = 10;

/// What a checkpoint is looked for to do: its messages say it in that command's words.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Purpose {
    /// `--resume PATH`
    Resume,
    /// `mgtop-train export PATH FILE`
    Export,
    /// `mgtop-train eval PATH`
    Eval,
}

impl Purpose {
    /// How the user asked: `--resume PATH`, `export PATH`.
    fn asked(self, path: &Path) -> String {
        match self {
            Purpose::Resume => format!("--resume {}", path.display()),
            Purpose::Export => format!("export {}", path.display()),
            Purpose::Eval => format!("eval {}", path.display()),
        }
    }

    /// The command that does it with `path`.
    fn command(self, path: &Path) -> String {
        match self {
            Purpose::Resume => format!("--resume {}", path.display()),
            Purpose::Export => format!("mgtop-train export {} FILE", path.display()),
            Purpose::Eval => format!("mgtop-train eval {}", path.display()),
        }
    }

    fn verb(self) -> &'static str {
        match self {
            Purpose::Resume => "continue",
            Purpose::Export => "export",
            Purpose::Eval => "evaluate",
        }
    }
}

/// What `--resume PATH` resumes from: the `step-N` checkpoint directory.
pub fn resume_point(path: &Path) -> Result<PathBuf, String> {
    checkpoint_for(path, Purpose::Resume)
}

/// The `step-N` checkpoint directory that `PATH` names, for `purpose`: a checkpoint, the
/// newest of a checkpoint directory's one line of runs, a run directory's, or the one run's of
/// a directory of runs.
pub fn checkpoint_for(path: &Path, purpose: Purpose) -> Result<PathBuf, String> {
    if !path.exists() {
        return Err(format!(
            "{}: no such file or directory; pass a run directory (runs/<name>/<time>), a checkpoint directory or a step-NNNNNNNN checkpoint",
            purpose.asked(path)
        ));
    }
    // absolute and without links: a `latest` link moves when this run starts
    let path = &fs::canonicalize(path).map_err(|e| format!("{}: {e}", purpose.asked(path)))?;
    if let Some(Err(e)) = path.is_dir().then(|| fs::read_dir(path)) {
        return Err(format!(
            "{}: cannot read that directory ({e}): a run directory is its owner's alone (mode 0700); {} it as the user who ran it",
            purpose.asked(path),
            purpose.verb()
        ));
    }
    if path.join("state.json").is_file() {
        return Ok(path.to_path_buf());
    }
    // a file of a checkpoint (its weights): the checkpoint is its folder
    if let Some(dir) = path
        .parent()
        .filter(|d| path.is_file() && d.join("state.json").is_file())
    {
        return Err(format!(
            "{}: a file of checkpoint {}; give the checkpoint's folder instead",
            purpose.asked(path),
            dir.display()
        ));
    }
    // a weights file of its own (an export, PyTorch's): no run's state to go on from
    if path.is_file() {
        let fix = match path.extension().is_some_and(|e| e == "safetensors") {
            true => format!(
                "; a weights file starts a training run from its weights: --init {}",
                path.display()
            ),
            false => "; pass a run directory (runs/<name>/<time>) or a checkpoint".into(),
        };
        return Err(format!(
            "{}: a file, not a checkpoint (a step-NNNNNNNN folder holding state.json and {}){fix}",
            purpose.asked(path),
            checkpoint::WEIGHTS,
        ));
    }
    if is_run_dir(path) {
        return match newest_of_one_run(&path.join(CHECKPOINTS), purpose) {
            Ok(p) => Ok(p),
            Err(Found::Error(e)) => Err(e),
            Err(Found::Nothing) => (last_written(path).or_else(|| in_recorded_dir(path)))
                .ok_or_else(|| no_checkpoint(path, purpose)),
        };
    }
    // a checkpoint directory, or a run directory that lost its metrics file
    for dir in [path.to_path_buf(), path.join(CHECKPOINTS)] {
        match newest_of_one_run(&dir, purpose) {
            Ok(p) => return Ok(p),
            Err(Found::Error(e)) => return Err(e),
            Err(Found::Nothing) => {}
        }
    }
    let mut runs = runs_under(path);
    match runs.len() {
        // a checkpoint's weights without the file that says where its run was
        0 if path.join(checkpoint::WEIGHTS).is_file() => Err(format!(
            "{}: a checkpoint's {} without its state.json (lost, or not copied), which says whose weights they are and where the run was; the weights alone can start a training run: --init {}",
            purpose.asked(path),
            checkpoint::WEIGHTS,
            path.join(checkpoint::WEIGHTS).display()
        )),
        0 => Err(format!(
            "{}: no checkpoint, run directory or checkpoint directory there{}",
            purpose.asked(path),
            best_left(path, purpose)
        )),
        1 => checkpoint_for(&runs.remove(0).0, purpose),
        n => Err(format!(
            "{} holds {n} runs; pass the one to {}:\n{}",
            purpose.asked(path),
            purpose.verb(),
            listing(&runs, purpose)
        )),
    }
}

/// Where the checkpoint directory `dir` holds only the best validation's checkpoint (never
/// taken unless named), that it is there and how to name it.
fn best_left(dir: &Path, purpose: Purpose) -> String {
    let best = dir.join(checkpoint::BEST);
    match best.join("state.json").is_file() {
        true => format!(
            "; only its best validation's checkpoint is left: {}",
            purpose.command(&best)
        ),
        false => String::new(),
    }
}

/// Why run `dir` has no checkpoint: still running without one yet, or ended without one.
fn no_checkpoint(dir: &Path, purpose: Purpose) -> String {
    let best = best_left(&dir.join(CHECKPOINTS), purpose);
    if !best.is_empty() {
        return format!("run {} has no step checkpoint{best}", dir.display());
    }
    if is_live(dir) {
        return format!(
            "run {} is still running and has written no checkpoint yet: have it write one (`s` in its terminal UI, or `mgtop-train attach {}` then `s`), or wait for it to end",
            dir.display(),
            dir.display()
        );
    }
    let verb = match purpose {
        Purpose::Resume => "resume from",
        Purpose::Export => "export",
        Purpose::Eval => "evaluate",
    };
    if let Some(newest) = recorded(dir).pop() {
        return format!(
            "run {} recorded checkpoints (the newest {}), and none is there now: moved or removed since; give the checkpoint where it is now, or start the run again",
            dir.display(),
            newest.display()
        );
    }
    if end_status(&dir.join(METRICS)).as_deref() == Some("stopped") {
        return format!(
            "run {} was stopped and has no checkpoint (it was stopped without one, q then k, or they were removed since), so none to {verb}; start it again",
            dir.display(),
        );
    }
    let why = "a run writes one when it ends, when stopped, on `s`, and with --checkpoint-every";
    match purpose {
        Purpose::Resume => format!(
            "run {} has no checkpoint to resume from that it recorded ({why}); one given --checkpoint-dir keeps them there: --resume that directory; else start it again",
            dir.display()
        ),
        Purpose::Export | Purpose::Eval => format!(
            "run {} has no checkpoint to {} that it recorded ({why}); one given --checkpoint-dir keeps them there: {} that directory; else train it again to have its weights",
            dir.display(),
            purpose.verb(),
            match purpose {
                Purpose::Export => "export",
                _ => "eval",
            }
        ),
    }
}

/// The newest checkpoint run `dir` wrote outside its directory (`--checkpoint-dir`) that is
/// still its own (another run may have written the same step since), from the checkpoint
/// events of its metrics file. `dir` is canonical, as the run directories checkpoints record.
fn last_written(dir: &Path) -> Option<PathBuf> {
    let ours = dir.display().to_string();
    recorded(dir).into_iter().rev().find(|p| {
        checkpoint::read_meta(p).is_ok_and(|m| m.run_dir.as_deref() == Some(ours.as_str()))
    })
}

/// The checkpoints run `dir`'s metrics file says it wrote (absolute paths), oldest first,
/// whether they are there now or not.
fn recorded(dir: &Path) -> Vec<PathBuf> {
    use std::io::{BufRead, Read};
    // a metrics record is a few KiB; a longer line is not one of ours
    const MAX_LINE: u64 = 1 << 20;
    let Some(file) = super::open_metrics(&dir.join(METRICS)) else {
        return Vec::new();
    };
    let mut file = std::io::BufReader::new(file);
    let (mut written, mut line) = (Vec::new(), Vec::new());
    // line by line: a long run's metrics file can be large; only checkpoint events are parsed
    loop {
        line.clear();
        match (&mut file).take(MAX_LINE).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if line.last() != Some(&b'\n') && line.len() as u64 == MAX_LINE => {
                if file.skip_until(b'\n').is_err() {
                    break;
                }
                continue;
            }
            Ok(_) => {}
        }
        if !line.windows(12).any(|w| w == b"\"checkpoint\"") {
            continue;
        }
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&line) else {
            continue;
        };
        if v["type"] == "event" && v["kind"] == "checkpoint" {
            // relative paths (older metrics files) name nothing certain
            written.extend(
                v["path"]
                    .as_str()
                    .map(PathBuf::from)
                    .filter(|p| p.is_absolute()),
            );
        }
    }
    written
}

/// The newest checkpoint of run `dir` in the checkpoint directory its `run` record names
/// (`--checkpoint-dir`): where its metrics file lost the checkpoint events (a full disk).
fn in_recorded_dir(dir: &Path) -> Option<PathBuf> {
    use std::io::{BufRead, Read};
    let file = super::open_metrics(&dir.join(METRICS))?;
    let mut first = Vec::new();
    // (a run record is a few KiB)
    (std::io::BufReader::new(file).take(1 << 20))
        .read_until(b'\n', &mut first)
        .ok()?;
    let run: serde_json::Value = serde_json::from_slice(&first).ok()?;
    let recorded = PathBuf::from(run.get("checkpoint_dir")?.as_str()?);
    let ours = dir.display().to_string();
    (checkpoint::steps(&recorded).into_iter().rev())
        .map(|(_, p)| p)
        .find(|p| checkpoint::read_meta(p).is_ok_and(|m| m.run_dir.as_deref() == Some(&ours)))
}

enum Found {
    Nothing,
    Error(String),
}

/// The newest checkpoint in a checkpoint directory, refusing one that holds checkpoints of
/// several lines of runs (`checkpoint::lines`).
fn newest_of_one_run(dir: &Path, purpose: Purpose) -> Result<PathBuf, Found> {
    let mut steps = checkpoint::steps(dir);
    if steps.is_empty() {
        return Err(Found::Nothing);
    }
    // checkpoints from before run directories name no run: they go with any one run
    let named: Vec<_> = (checkpoint::lines(&steps).into_iter())
        .filter(|l| l.origin.is_some())
        .collect();
    if named.len() > 1 {
        let lines: Vec<String> = (named.iter())
            .map(|l| l.listed(purpose.verb(), &purpose.command(&l.newest)))
            .collect();
        return Err(Found::Error(format!(
            "{}: its checkpoints are of {} different runs; {} one with the command shown:\n{}",
            purpose.asked(dir),
            named.len(),
            purpose.verb(),
            lines.join("\n")
        )));
    }
    Ok(steps.pop().map(|(_, p)| p).expect("not empty"))
}

fn listing(runs: &[(PathBuf, std::time::SystemTime)], purpose: Purpose) -> String {
    let mut lines: Vec<String> = runs
        .iter()
        .take(LISTED)
        .map(|(p, _)| {
            // (one whose directory holds none, which only a --checkpoint-dir elsewhere may have)
            let none = checkpoint::steps(&p.join(CHECKPOINTS)).is_empty()
                && !checkpoint::is_checkpoint(&p.join(CHECKPOINTS).join(checkpoint::BEST));
            let none = if none {
                "   (no checkpoint in its directory)"
            } else {
                ""
            };
            format!("  {}{none}", purpose.command(p))
        })
        .collect();
    if runs.len() > LISTED {
        lines.push(format!("  ... and {} older", runs.len() - LISTED));
    }
    lines.join("\n")
}

/// What `--resume` takes to continue from `checkpoint`: the run's directory where the
/// checkpoint is in it (`--resume RUN_DIR` finds it; named as it is, not through a `latest`
/// link that moves on), else the checkpoint itself.
pub fn resume_arg(run_dir: Option<&Path>, checkpoint: &Path) -> PathBuf {
    let run_dir = run_dir.and_then(|d| fs::canonicalize(d).ok());
    let inside = run_dir
        .filter(|d| fs::canonicalize(checkpoint).is_ok_and(|p| p.starts_with(d.join(CHECKPOINTS))));
    inside.unwrap_or_else(|| checkpoint.to_path_buf())
}

/// What continues a run quit at once, as it stands now: its newest checkpoint in
/// `checkpoints`, or else the one it was resumed from.
pub fn continuing(
    run_dir: Option<&Path>,
    checkpoints: Option<&Path>,
    resumed_from: Option<&Path>,
) -> String {
    let newest = checkpoints.and_then(|d| crate::engine::checkpoint::steps(d).pop());
    match (newest, resumed_from) {
        (Some((step, p)), _) => format!(
            "--resume {} continues the run from its checkpoint of step {step}",
            resume_arg(run_dir, &p).display()
        ),
        (None, Some(from)) => format!(
            "this run wrote no checkpoint: --resume {} starts again where it did",
            from.display()
        ),
        (None, None) => "the run has no checkpoint to continue from: start it again".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_checkpoints_elsewhere_are_found_from_its_metrics_file() {
        let root = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(root.path()).unwrap();
        let (run, ck) = (root.join("run"), root.join("ck"));
        fs::create_dir(&run).unwrap();
        // a checkpoint's state.json, written by run `by`
        let state = |step: &str, by: &Path| {
            fs::create_dir_all(ck.join(step)).unwrap();
            let meta = serde_json::json!({
                "format": checkpoint::FORMAT, "step": 1, "epoch": 0, "offset": 0,
                "per_replica": 8, "ranks": 1, "lr": 1e-3, "optimizer": "adam",
                "optimizer_steps": 1, "dims": [4, 2], "seed": 0, "data": "digits",
                "config": {}, "run_dir": by.display().to_string(),
            });
            fs::write(ck.join(step).join("state.json"), meta.to_string()).unwrap();
        };
        state("step-00000005", &run);
        state("step-00000009", &run);
        // the same step written since by another run (resumed into the same directory)
        state("step-00000011", &root.join("another"));
        let event = |path: &Path| {
            format!(
                "{{\"type\":\"event\",\"kind\":\"checkpoint\",\"step\":1,\"path\":\"{}\"}}\n",
                path.display()
            )
        };
        // an overlong line, ending in a whole event for a checkpoint of the run: passed over
        let long = format!(
            "{}{}",
            " ".repeat(2 << 20),
            event(&ck.join("step-00000009"))
        );
        let lines = [
            event(&ck.join("step-00000005")),
            long.clone(),
            // a relative path, a checkpoint since removed, another run's: passed over
            event(Path::new("ck/step-00000009")),
            event(&ck.join("step-00000012")),
            event(&ck.join("step-00000011")),
        ];
        fs::write(run.join(METRICS), lines.concat()).unwrap();
        assert_eq!(last_written(&run), Some(ck.join("step-00000005")));
        fs::write(
            run.join(METRICS),
            [long, event(&ck.join("step-00000009"))].concat(),
        )
        .unwrap();
        assert_eq!(last_written(&run), Some(ck.join("step-00000009")));
        fs::write(run.join(METRICS), &lines[2]).unwrap();
        assert_eq!(last_written(&run), None);
        assert!(no_checkpoint(&run, Purpose::Resume).contains("has no checkpoint to resume from"));
        // checkpoints it recorded, moved or removed since: said so, the newest named
        fs::write(run.join(METRICS), event(&ck.join("step-00000012"))).unwrap();
        let e = no_checkpoint(&run, Purpose::Resume);
        assert!(
            e.contains("recorded checkpoints (the newest ")
                && e.contains("step-00000012), and none is there now: moved or removed"),
            "{e}"
        );
        fs::write(run.join(METRICS), &lines[2]).unwrap();
        // only best/ left: said, with how to name it (never taken unasked)
        let best = run.join(CHECKPOINTS).join("best");
        fs::create_dir_all(&best).unwrap();
        fs::write(best.join("state.json"), "{}").unwrap();
        let e = no_checkpoint(&run, Purpose::Resume);
        assert!(
            e.contains(&format!(
                "only its best validation's checkpoint is left: --resume {}",
                best.display()
            )),
            "{e}"
        );
        fs::remove_dir_all(&best).unwrap();
        // no checkpoint event left (lost on a full disk): the run record's --checkpoint-dir
        // has its newest, not another run's newer one
        let record = serde_json::json!({"type": "run", "checkpoint_dir": ck.display().to_string()});
        fs::write(run.join(METRICS), format!("{record}\n")).unwrap();
        assert_eq!(last_written(&run), None);
        let found = checkpoint_for(&run, Purpose::Resume).unwrap();
        assert_eq!(found, ck.join("step-00000009"));
    }

    #[test]
    fn export_is_answered_in_its_own_words() {
        let root = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(root.path()).unwrap();
        let runs = root.join("runs");
        for name in ["a", "b"] {
            let run = runs.join(name);
            fs::create_dir_all(&run).unwrap();
            fs::write(run.join(METRICS), "").unwrap();
        }
        let e = checkpoint_for(&runs, Purpose::Export).unwrap_err();
        let a = runs.join("a").display().to_string();
        assert!(
            e.starts_with(&format!(
                "export {} holds 2 runs; pass the one to export:",
                runs.display()
            )) && e.contains(&format!("  mgtop-train export {a} FILE"))
                && !e.contains("--resume"),
            "{e}"
        );
        let e = checkpoint_for(&runs.join("a"), Purpose::Export).unwrap_err();
        assert!(
            e.contains("has no checkpoint to export") && !e.contains("resume"),
            "{e}"
        );
        let e = checkpoint_for(&runs, Purpose::Resume).unwrap_err();
        assert!(
            e.contains("pass the one to continue") && e.contains(&format!("  --resume {a}")),
            "{e}"
        );
        // a run with a checkpoint is listed as it is, one without says so
        let ck = runs.join("b/checkpoints/step-00000001");
        fs::create_dir_all(&ck).unwrap();
        fs::write(ck.join("state.json"), "{}").unwrap();
        let e = checkpoint_for(&runs, Purpose::Resume).unwrap_err();
        let b = runs.join("b").display().to_string();
        assert!(
            e.contains(&format!(
                "  --resume {a}   (no checkpoint in its directory)"
            )) && e.lines().any(|l| l == format!("  --resume {b}")),
            "{e}"
        );
    }

    #[test]
    fn a_checkpoint_that_lost_its_state_is_named_so() {
        let dir = tempfile::tempdir().unwrap();
        let step = fs::canonicalize(dir.path()).unwrap().join("step-00000010");
        fs::create_dir(&step).unwrap();
        fs::write(step.join(checkpoint::WEIGHTS), b"weights").unwrap();
        let e = checkpoint_for(&step, Purpose::Resume).unwrap_err();
        let init = step.join(checkpoint::WEIGHTS).display().to_string();
        assert!(
            e.contains("model.safetensors without its state.json")
                && e.ends_with(&format!("--init {init}")),
            "{e}"
        );
    }
}
