//! A run directory made for a run that is starting, and taken back where the start fails.

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::{
    link_latest_to, pointer_of, started_order, unused, CHECKPOINTS, METRICS, SOCKET, TENSORBOARD,
};
use crate::engine::checkpoint;

/// A run directory made for a run that is starting: `keep` once the run has started; dropped
/// without it (the start failed), it takes back what the start made there, and nothing else.
pub struct Created {
    dir: PathBuf,
    /// The directories above it this start made, innermost first (`runs/<name>`, for a new
    /// name).
    made: Vec<PathBuf>,
    /// This start made the directory itself (else it is a `--run-dir` that existed).
    fresh: bool,
    kept: bool,
    /// The same taking back, should the process quit at once (Ctrl-C as the run starts).
    _quit: crate::quit_at_once::Armed,
}

impl Created {
    /// Creates the run directory, owner-only (it will hold the live socket), claiming it
    /// atomically: a default one (`numbered`) that another run of the same name took in the
    /// same second becomes `<time>-2`, `-3`...; a `--run-dir` that exists is used as it is
    /// (its permissions untouched) unless it already holds a run. `path` is then absolute.
    pub fn new(dir: &Path, numbered: bool) -> Result<Created, String> {
        let fail = |e: std::io::Error| {
            match crate::files::write::file_in_the_way(dir) {
            Some(f) => format!(
                "cannot create run directory {}: {} is a file, not a directory; pick another --run-dir",
                dir.display(),
                f.display()
            ),
            None => format!(
                "cannot create run directory {}: {e}; pick a writable --run-dir",
                dir.display()
            ),
        }
        };
        let parent = dir.parent().unwrap_or(Path::new(""));
        let made: Vec<PathBuf> = parent
            .ancestors()
            .take_while(|a| !a.as_os_str().is_empty() && !a.exists())
            .map(Path::to_path_buf)
            .collect();
        // armed before anything is made: a signal as the run starts (a launcher ending a job
        // whose other process failed) takes back what this start made, however far it got
        let making: Arc<Mutex<Option<(PathBuf, bool)>>> = Arc::default();
        let quit = {
            let (making, made) = (making.clone(), made.clone());
            crate::quit_at_once::arm(move || {
                let made_dir = making.lock().unwrap_or_else(|e| e.into_inner()).take();
                match made_dir {
                    Some((dir, fresh)) => take_back(&dir, &made, fresh),
                    None => take_back(Path::new(""), &made, false),
                }
            })
        };
        let mut making_now = making.lock().unwrap_or_else(|e| e.into_inner());
        if !parent.as_os_str().is_empty() {
            fs::create_dir_all(parent).map_err(fail)?;
        }
        let mut leaf = dir.to_path_buf();
        let mut fresh = false;
        // (a default name already numbered, `<stamp>-3`, goes on from its number)
        let name = dir.file_name().unwrap_or_default().to_string_lossy();
        let (stamp, first) = started_order(&name);
        let (mut n, mut lost) = (first + 1, 0);
        while n < first + 1000 {
            use std::io::ErrorKind::{AlreadyExists, NotFound};
            // (private from the start: a run directory is its owner's alone)
            match fs::DirBuilder::new().mode(0o700).create(&leaf) {
                Ok(()) => {
                    fresh = true;
                    break;
                }
                Err(e) if e.kind() == AlreadyExists && numbered => {
                    leaf = dir.with_file_name(format!("{stamp}-{n}"));
                    n += 1;
                }
                Err(e) if e.kind() == AlreadyExists => break,
                // (a parent taken back meanwhile by another run's failed start, which made it
                // too: made again)
                Err(e) if e.kind() == NotFound && lost < 100 && !parent.as_os_str().is_empty() => {
                    lost += 1;
                    fs::create_dir_all(parent).map_err(fail)?;
                }
                Err(e) => return Err(fail(e)),
            }
        }
        *making_now = Some((leaf.clone(), fresh));
        drop(making_now);
        if !leaf.is_dir() {
            return Err(format!(
                "--run-dir {}: it is a file, not a directory; pick another --run-dir",
                leaf.display()
            ));
        }
        if !fresh {
            unused(&leaf, false)?;
        }
        let dir = fs::canonicalize(&leaf).map_err(fail)?;
        Ok(Created {
            dir,
            made,
            fresh,
            kept: false,
            _quit: quit,
        })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The run started: its directory is kept, though a quit at once before the front has
    /// its signal handling in place (`Kept::settle`) still takes back what the start made
    /// there; `latest` is pointed at it (`link_latest`) once settled.
    pub fn keep(mut self, link_latest: bool) -> Kept {
        self.kept = true;
        let (dir, made, fresh) = (self.dir.clone(), std::mem::take(&mut self.made), self.fresh);
        let quit = crate::quit_at_once::arm({
            let dir = dir.clone();
            move || take_back(&dir, &made, fresh)
        });
        Kept {
            dir,
            link_latest,
            _quit: quit,
        }
    }
}

/// A started run's directory, until the front handles the process's signals: a signal in
/// between ends the process at once ("stopped during start-up"), and its files are taken
/// back, not left as a run of nothing that `latest` names.
#[must_use = "settle it once the front handles signals"]
pub struct Kept {
    dir: PathBuf,
    link_latest: bool,
    _quit: crate::quit_at_once::Armed,
}

impl Kept {
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The front handles signals now (a first one stops the run with a checkpoint): the
    /// directory is the run's for good, and for a default one `latest` points at it; a note
    /// where `latest` is something else, left as it is.
    pub fn settle(self) -> Option<String> {
        match self.link_latest {
            true => link_latest_to(&self.dir),
            false => None,
        }
    }
}

impl Drop for Created {
    fn drop(&mut self) {
        if !self.kept {
            take_back(&self.dir, &self.made, self.fresh);
        }
    }
}

/// What a start that failed (or quit at once) made: only that: in the directory `dir` the
/// checkpoint lock it took and the files a run starts with (its metrics file, its socket's
/// pointer; its TensorBoard folder where it made `dir`, `fresh`), then the directory, where
/// it made it and nothing else is left there (a checkpoint there keeps all of them), and
/// the empty parents it `made`. A lock another process wrote is left, and with it the
/// directory: runs given one `--run-dir` at once, the one that made it may lose the lock to
/// one that found it made.
pub(super) fn take_back(dir: &Path, made: &[PathBuf], fresh: bool) {
    let ckpts = dir.join(CHECKPOINTS);
    let lock = crate::files::read::read_note(&ckpts.join(checkpoint::LOCK_FILE), 64);
    let ours = match lock {
        Some(pid) => pid == std::process::id().to_string(),
        // (a directory this start made holds no other run's files: a run writes there only
        // once it holds the lock; one that existed may hold those of a run that takes none)
        None => fresh,
    };
    if ours && !dir.as_os_str().is_empty() {
        // (no checkpoints folder: nothing but what the start made)
        let only_lock = match fs::read_dir(&ckpts) {
            Ok(es) => (es.filter_map(|e| e.ok())).all(|e| e.file_name() == checkpoint::LOCK_FILE),
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        };
        // (checkpoints there: another run's, one given this --run-dir at the same moment that
        // trained and let go of the lock before this start took it and was refused; its
        // files stay)
        if only_lock {
            let _ = fs::remove_file(ckpts.join(checkpoint::LOCK_FILE));
            let _ = fs::remove_dir(&ckpts);
            let _ = fs::remove_file(dir.join(METRICS));
            let _ = fs::remove_file(dir.join(SOCKET));
            let _ = fs::remove_file(pointer_of(&dir.join(SOCKET)));
            if fresh {
                let _ = fs::remove_dir_all(dir.join(TENSORBOARD));
                let _ = fs::remove_dir(dir);
            }
        }
    }
    for d in made {
        let _ = fs::remove_dir(d);
    }
}
