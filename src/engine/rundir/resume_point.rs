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
        let shown = path.display();
        let fix = match (path.extension().is_some_and(|e| e == "safetensors"), purpose) {
            (true, Purpose::Resume) => {
                format!("; a weights file starts a training run from its weights: --init {shown}")
            }
            (true, Purpose::Export) => format!(
                "; it is weights already: copy it (cp {shown} NEW.safetensors), or export the run directory it came from"
            ),
            (true, Purpose::Eval) => "; eval reads a checkpoint, the model and data settings beside its weights: give the run directory the weights came from (or train from them, --init, and evaluate that run)".into(),
            (false, _) => "; pass a run directory (runs/<name>/<time>) or a checkpoint".into(),
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
        // (a copy of a run directory: its checkpoints elsewhere say they are the original's)
        return match checkpoint::is_checkpoint(&newest) {
            true => format!(
                "run {} recorded checkpoints outside its directory (the newest {}) that say they are another run's (this is a copy of its directory, or another run wrote there since): name it to {verb} it: {}",
                dir.display(),
                newest.display(),
                purpose.command(&newest)
            ),
            false => format!(
                "run {} recorded checkpoints (the newest {}), and none is there now: moved or removed since; give the checkpoint where it is now, or start the run again",
                dir.display(),
                newest.display()
            ),
        };
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
    let run = super::run_record(dir)?;
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
            // (as taking it would find it: in its directory, or where it recorded them)
            let none = match checkpoint_for(p, purpose) {
                Ok(_) => "",
                Err(_) => "   (no checkpoint to take)",
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
mod tests;
