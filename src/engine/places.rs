//! Where a run keeps what it writes: its run directory and its checkpoint directory. Checked
//! before the data loads (another run's are refused), settled once the run directory is made.

use std::path::PathBuf;

use super::checkpoint::{self, CheckpointMeta};
use super::{rundir, EngineError};
use crate::config::RunConfig;

/// What `check` found of a run's places.
pub(super) struct Places {
    /// The checkpoints go in the run directory's `checkpoints/` (and follow it where it is
    /// made under another name).
    in_run_dir: bool,
    /// This process writes checkpoints (process 0 of a run that checkpoints).
    pub checkpoints: bool,
}

/// Refuses a `--run-dir` that holds a run, and a checkpoint directory holding another line of
/// runs' checkpoints or this line's past the step `resumed` is at (a fresh run begins a line of
/// its own: every named line there is another's). Only process 0 (`lead`) keeps anything.
pub(super) fn check(
    cfg: &RunConfig,
    lead: bool,
    resumed: Option<&CheckpointMeta>,
) -> Result<Places, EngineError> {
    // a default run directory (`runs/<name>/<time>`) is made fresh: `<time>-2` where another
    // run of the same name took `<time>`
    let numbered = cfg.link_latest;
    let in_run_dir =
        (cfg.run_dir.as_ref()).is_some_and(|d| cfg.checkpoint_dir == d.join(rundir::CHECKPOINTS));
    if let Some(d) = cfg.run_dir.as_deref().filter(|_| lead && !numbered) {
        rundir::unused(d, cfg.resume.is_some()).map_err(EngineError::Config)?;
    }
    let checkpoints =
        lead && (cfg.final_checkpoint || cfg.checkpoint_every.is_some() || cfg.checkpoint_best);
    // (a fresh numbered directory holds nothing yet)
    if checkpoints && !(numbered && in_run_dir) {
        checkpoint::refuse_others(&cfg.checkpoint_dir, resumed)?;
    }
    Ok(Places {
        in_run_dir,
        checkpoints,
    })
}

/// `path` absolute, with its `.` and `..` worked out by name (`runs/../ck` is `ck`: a path the
/// log prints and a user copies).
pub(crate) fn tidy_absolute(path: &std::path::Path) -> PathBuf {
    use std::path::Component;
    let full = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let (mut out, mut kept) = (PathBuf::new(), false);
    for c in full.components() {
        match c {
            Component::CurDir => {}
            // a `..` after a link goes elsewhere in the file system than by name: it, and
            // every `..` after it, stays as written
            Component::ParentDir if kept || out.is_symlink() || !out.pop() => {
                kept = true;
                out.push(c);
            }
            Component::ParentDir => {}
            c => out.push(c),
        }
    }
    out
}

impl Places {
    /// The checkpoint directory's lock, for a run that checkpoints (`cfg` settled), with
    /// `check`'s refusal of others' checkpoints made again under it: a run started at the same
    /// moment may have taken the lock, written there and let go since `check` looked. A run
    /// directory whose checkpoints another run holds is that run's (started at the same
    /// moment, with the same `--run-dir`).
    pub(super) fn lock(
        &self,
        cfg: &RunConfig,
        resumed: Option<&CheckpointMeta>,
    ) -> Result<Option<(checkpoint::DirLock, PathBuf)>, EngineError> {
        if !self.checkpoints {
            return Ok(None);
        }
        let dir = &cfg.checkpoint_dir;
        let lock = match (checkpoint::lock(dir), &cfg.run_dir) {
            (Err(checkpoint::CheckpointError::Locked { pid, .. }), Some(run))
                if self.in_run_dir =>
            {
                let by = pid.map_or(String::new(), |p| format!(" (pid {p})"));
                return Err(EngineError::Config(format!(
                    "run directory {} holds a run that is running now{by}, started as this one was: pick a new --run-dir (watch that one with: mgtop-train attach {})",
                    run.display(),
                    run.display()
                )));
            }
            (lock, _) => lock?,
        };
        // (a fresh numbered directory held nothing, and no other run takes it)
        if !(cfg.link_latest && self.in_run_dir) {
            checkpoint::refuse_others(dir, resumed)?;
        }
        Ok(Some((lock, dir.clone())))
    }

    /// `cfg` with the run directory made (`run_dir`, absolute), the checkpoint directory
    /// following it or made absolute (the metrics file's checkpoint events lead `--resume
    /// RUN_DIR` to them), and the line of runs its checkpoints continue, with the `--init` file
    /// it began from: the resumed checkpoint's, or one this run begins.
    pub(super) fn settle(
        &self,
        cfg: RunConfig,
        run_dir: Option<PathBuf>,
        resumed: Option<&CheckpointMeta>,
    ) -> RunConfig {
        let checkpoint_dir = match &run_dir {
            Some(d) if self.in_run_dir => d.join(rundir::CHECKPOINTS),
            _ => tidy_absolute(&cfg.checkpoint_dir),
        };
        let origin = (resumed.and_then(CheckpointMeta::line).map(str::to_string))
            .or_else(|| run_dir.as_ref().map(|d| d.display().to_string()));
        let line_init = match resumed {
            Some(meta) => (meta.config.get("init").and_then(|i| i.as_str())).map(str::to_string),
            None => (cfg.init.as_deref()).map(|i| tidy_absolute(i).display().to_string()),
        };
        RunConfig {
            checkpoint_dir,
            origin,
            line_init,
            run_dir,
            ..cfg
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tidy_absolute;
    use std::path::Path;

    #[test]
    fn a_checkpoint_directory_is_said_without_dots() {
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(tidy_absolute(Path::new("runs/../ck/./a")), cwd.join("ck/a"));
        assert_eq!(tidy_absolute(Path::new("/x/y/../z")), Path::new("/x/z"));
        // a `..` after a link is kept: by name it would be somewhere else
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("link");
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), &link).unwrap();
        assert_eq!(tidy_absolute(&link.join("../ck")), link.join("../ck"));
        assert_eq!(tidy_absolute(&link.join("../../ck")), link.join("../../ck"));
        assert_eq!(tidy_absolute(&link.join("a/../../ck")), link.join("../ck"));
    }
}
