//! Which runs wrote a checkpoint directory's checkpoints. Each checkpoint names the run
//! directory that wrote it and the one its line of runs began in (`origin`: a run resumed into
//! the same `--checkpoint-dir` continues the line of the run it resumed). One directory holds one
//! line: `--resume DIR` takes its newest checkpoint, and a run of another line is refused there
//! rather than mixing its checkpoints in (and replacing those of the same steps).

use std::fs;
use std::path::{Path, PathBuf};

use super::{read_meta, CheckpointError, CheckpointMeta, STATE};

/// The checkpoints of one line of runs in a directory.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    /// The run directory the line began in; None for checkpoints from before run directories,
    /// which go with any line.
    pub origin: Option<String>,
    pub first: u64,
    pub last: u64,
    /// The checkpoint of step `last`: where the line continues.
    pub newest: PathBuf,
}

impl Line {
    /// `  RUN: steps A to B, continue it with --resume DIR/step-B`, a listing's line: the line's
    /// newest checkpoint as a ready `--resume`.
    /// The line's listing, with what `verb`s it (`continue it with --resume DIR`).
    pub fn listed(&self, verb: &str, command: &str) -> String {
        let steps = match self.first == self.last {
            true => format!("step {}", self.last),
            false => format!("steps {} to {}", self.first, self.last),
        };
        format!(
            "  {}: {steps}, {verb} it with {command}",
            self.origin
                .as_deref()
                .unwrap_or("(a run from before run directories)"),
        )
    }
}

/// The `step-N` directories in `dir`, oldest first (by number, not by name: step-100000000
/// is newer than step-99999999).
fn numbered(dir: &Path) -> Vec<(u64, PathBuf)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut steps: Vec<(u64, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter_map(|p| Some((step_of(&p)?, p)))
        .collect();
    steps.sort_by_key(|(step, _)| *step);
    steps
}

/// The step of checkpoint directory `dir`, as its name `step-N` says.
pub fn step_of(dir: &Path) -> Option<u64> {
    dir.file_name()?
        .to_str()?
        .strip_prefix("step-")?
        .parse()
        .ok()
}

/// ` (its checkpoint of step S: the N steps trained after it are not in it)`: what a resume from
/// the checkpoint of step `saved` leaves out of a run that ended (stopped, failed, killed) at
/// `stopped`; nothing where it leaves nothing or the checkpoint's step is not known (0).
pub fn steps_lost(saved: u64, stopped: u64) -> String {
    match stopped.saturating_sub(saved) {
        n if n == 0 || saved == 0 => String::new(),
        1 => {
            format!(" (its checkpoint of step {saved}: the step trained after it is not in it)")
        }
        n => format!(
            " (its checkpoint of step {saved}: the {n} steps trained after it are not in it)"
        ),
    }
}

/// The finished `step-N` checkpoints in `dir` (those with a `state.json`), oldest first.
pub fn steps(dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut steps = numbered(dir);
    steps.retain(|(_, p)| p.join(STATE).is_file());
    steps
}

/// The `step-N` directories beside checkpoint `dir` of steps after `step` that are not
/// checkpoints (no `state.json`: damaged, or put there by something else), which a resume from
/// `dir` passed over.
pub fn passed_over(dir: &Path, step: u64) -> Vec<PathBuf> {
    let beside = dir.parent().map(numbered).unwrap_or_default();
    (beside.into_iter())
        .filter(|(n, p)| *n > step && !p.join(STATE).is_file())
        .map(|(_, p)| p)
        .collect()
}

/// The lines of runs `steps`' checkpoints belong to, in the order they first appear. A
/// checkpoint whose `state.json` cannot be read counts as one from before run directories:
/// reading it is `--resume`'s business, with its own message.
pub fn lines(steps: &[(u64, PathBuf)]) -> Vec<Line> {
    let mut lines: Vec<Line> = Vec::new();
    for (step, p) in steps {
        let origin = read_meta(p).ok().and_then(|m| m.line().map(str::to_string));
        match lines.iter_mut().find(|l| l.origin == origin) {
            Some(l) => {
                l.last = *step;
                l.newest = p.clone();
            }
            None => lines.push(Line {
                origin,
                first: *step,
                last: *step,
                newest: p.clone(),
            }),
        }
    }
    lines
}

/// Refuses to let a run write its checkpoints into `dir` where they would mix with others:
/// checkpoints of another line of runs there (a fresh run's line is new, a resumed run's is
/// that of `resumed`, the checkpoint it resumed from), or its own line's checkpoints past the
/// step it resumed from (a second future beside them, which `--resume DIR` would then take
/// for the newest).
pub fn refuse_others(dir: &Path, resumed: Option<&CheckpointMeta>) -> Result<(), CheckpointError> {
    let ours = resumed.and_then(CheckpointMeta::line);
    // (the best validation's checkpoint too: another line's must not be replaced, nor this
    // line's of a step past the one resumed from be left to beat)
    let mut all = steps(dir);
    let best = dir.join(super::BEST);
    if let Ok(meta) = super::read_meta(&best) {
        // (before a step checkpoint of its step: that one is the line's newest, as --resume
        // DIR takes it, never `best`)
        all.insert(0, (meta.step, best));
        all.sort_by_key(|(step, _)| *step);
    }
    let lines = lines(&all);
    // checkpoints that name no line go with any
    let (mine, others): (Vec<&Line>, Vec<&Line>) =
        (lines.iter()).partition(|l| l.origin.is_none() || l.origin.as_deref() == ours);
    if !others.is_empty() {
        return Err(CheckpointError::Taken {
            path: dir.to_path_buf(),
            runs: others
                .iter()
                .map(|l| l.listed("continue", &format!("--resume {}", l.newest.display())))
                .collect::<Vec<_>>()
                .join("\n"),
        });
    }
    let past = |meta: &CheckpointMeta| {
        (mine.iter())
            .filter(|l| l.last > meta.step)
            .max_by_key(|l| l.last)
            .map(|l| (meta.step, l.newest.clone()))
    };
    match resumed.and_then(past) {
        Some((step, newest)) => Err(CheckpointError::Ahead {
            path: dir.to_path_buf(),
            step,
            newest,
        }),
        None => Ok(()),
    }
}
