//! Which runs wrote a checkpoint directory's checkpoints. Each checkpoint names the run
//! directory that wrote it and the one its line of runs began in (`origin`: a run resumed into
//! the same `--checkpoint-dir` continues the line of the run it resumed). One directory holds one
//! line: `--resume DIR` takes its newest checkpoint, and a run of another line is refused there
//! rather than mixing its checkpoints in (and replacing those of the same steps).

use std::fs;
use std::path::{Path, PathBuf};

use super::{read_meta, CheckpointError, STATE};

/// The checkpoints of one line of runs in a directory.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    /// The run directory the line began in; empty for checkpoints from before run directories,
    /// which go with any line.
    pub origin: String,
    pub first: u64,
    pub last: u64,
}

impl Line {
    /// `  RUN: steps A..B`, a listing's line.
    pub fn listed(&self) -> String {
        format!("  {}: steps {}..{}", self.origin, self.first, self.last)
    }
}

/// The finished `step-N` checkpoints in `dir` (those with a `state.json`), oldest first.
pub fn steps(dir: &Path) -> Vec<(u64, PathBuf)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut steps: Vec<(u64, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter_map(|p| {
            let step = p
                .file_name()?
                .to_str()?
                .strip_prefix("step-")?
                .parse()
                .ok()?;
            p.join(STATE).is_file().then_some((step, p))
        })
        .collect();
    steps.sort_by_key(|(step, _)| *step);
    steps
}

/// The lines of runs `steps`' checkpoints belong to, in the order they first appear. A
/// checkpoint whose `state.json` cannot be read counts as one from before run directories:
/// reading it is `--resume`'s business, with its own message.
pub fn lines(steps: &[(u64, PathBuf)]) -> Vec<Line> {
    let mut lines: Vec<Line> = Vec::new();
    for (step, p) in steps {
        let origin = read_meta(p)
            .ok()
            .and_then(|m| m.line().map(str::to_string))
            .unwrap_or_default();
        match lines.iter_mut().find(|l| l.origin == origin) {
            Some(l) => l.last = *step,
            None => lines.push(Line {
                origin,
                first: *step,
                last: *step,
            }),
        }
    }
    lines
}

/// The lines of `dir`'s checkpoints other than `ours` (and other than unnamed ones).
pub fn others(dir: &Path, ours: &str) -> Vec<Line> {
    lines(&steps(dir))
        .into_iter()
        .filter(|l| !l.origin.is_empty() && l.origin != ours)
        .collect()
}

/// Refuses to let a run of the line begun in `ours` write into `dir` when `dir` holds
/// checkpoints of another line.
pub fn refuse_others(dir: &Path, ours: &str) -> Result<(), CheckpointError> {
    let others = others(dir, ours);
    if others.is_empty() {
        return Ok(());
    }
    Err(CheckpointError::Taken {
        path: dir.to_path_buf(),
        runs: others
            .iter()
            .map(Line::listed)
            .collect::<Vec<_>>()
            .join("\n"),
    })
}
