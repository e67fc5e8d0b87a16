//! One run per checkpoint directory: an advisory lock (`DIR/.lock`, flock) held while a run may
//! write there, taken before any output is opened; taking it clears what an interrupted run left.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::Path;

use super::{CheckpointError, STATE};

pub const LOCK_FILE: &str = ".lock";

/// This process's hold on a checkpoint directory, released when dropped.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

/// Creates `dir` if needed, takes its lock (refusing a directory another live run holds) and
/// clears what an interrupted earlier run left: unfinished `.tmp-step-*` (`.tmp-best-*`)
/// directories, and `.old-step-*` (`.old-best-*`) ones (put back where the checkpoint they held
/// is missing).
pub fn lock(dir: &Path) -> Result<DirLock, CheckpointError> {
    let werr = |source| CheckpointError::Write {
        path: dir.to_path_buf(),
        source,
        last: None,
    };
    let unfit = |why: String| CheckpointError::Unfit {
        path: dir.to_path_buf(),
        why,
    };
    if dir.exists() && !dir.is_dir() {
        return Err(unfit(
            "it is a file, not a directory: choose another --checkpoint-dir".into(),
        ));
    }
    fs::create_dir_all(dir).map_err(werr)?;
    let path = dir.join(LOCK_FILE);
    if fs::symlink_metadata(&path).is_ok_and(|m| !m.file_type().is_file()) {
        return Err(unfit(format!(
            "{} is not a regular file (a run writes its pid there): remove it",
            path.display()
        )));
    }
    let mut file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(werr)?;
    if !try_lock(&file).map_err(werr)? {
        let mut text = String::new();
        let _ = (&file).take(32).read_to_string(&mut text);
        return Err(CheckpointError::Locked {
            path: dir.to_path_buf(),
            pid: text.trim().parse().ok(),
        });
    }
    // (a lock file linked to another name: writing the pid would change that file too; said
    // once no live run holds it)
    if std::os::unix::fs::MetadataExt::nlink(&file.metadata().map_err(werr)?) > 1 {
        return Err(werr(std::io::Error::other(format!(
            "{} has other names (hard links) and a run writes its pid there: remove it",
            path.display()
        ))));
    }
    file.set_len(0).map_err(werr)?;
    write!(file, "{}", std::process::id()).map_err(werr)?;
    clear_leftovers(dir).map_err(werr)?;
    Ok(DirLock { _file: file })
}

/// Clears what an interrupted run left in checkpoint directory `dir` where no run holds it
/// now: for a run resumed from there that writes elsewhere (its own run directory), so the
/// directory it leaves behind is tidy too. A directory without a lock file is left as it is.
pub fn tidy_if_free(dir: &Path) {
    let Ok(file) = File::open(dir.join(LOCK_FILE)) else {
        return;
    };
    if try_lock(&file).unwrap_or(false) {
        let _ = clear_leftovers(dir);
    }
}

/// Unfinished `.tmp-step-*` directories and half-removed `.removed-step-*` ones go, and
/// `.old-step-*` ones are removed, or put back where the checkpoint they held is missing (the
/// best one's, `.tmp-best-*`, `.old-best-*`, alike). The caller holds `dir`'s lock.
fn clear_leftovers(dir: &Path) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)?.filter_map(|e| e.ok()) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours = |prefix: &str| {
            (name.strip_prefix(prefix))
                .is_some_and(|r| r.starts_with("step-") || r.starts_with("best-"))
        };
        if ours(".tmp-") || ours(".removed-") {
            let _ = fs::remove_dir_all(entry.path());
        } else if let Some((kept, _pid)) = (name.strip_prefix(".old-"))
            .filter(|_| ours(".old-"))
            .and_then(|rest| rest.rsplit_once('-'))
        {
            // `.old-step-NNNNNNNN-PID` (or `.old-best-PID`): that checkpoint, moved aside
            // while replaced
            let done = dir.join(kept);
            if done.join(STATE).is_file() {
                let _ = fs::remove_dir_all(entry.path());
            } else {
                let _ = fs::remove_dir_all(&done);
                let _ = fs::rename(entry.path(), &done);
            }
        }
    }
    Ok(())
}

/// The process that wrote `dir`'s lock, if it is still running and is this program (a pid
/// reused by another program, or by a container's every first process, is not taken for the
/// run) and holds the lock file open (`holds_open`: not a copy of a live run's directory, nor a
/// lock file whose pid a later run of this program reuses). Read without touching the lock, so
/// it can never get in a starting run's way.
pub fn holder(dir: &Path) -> Option<u32> {
    let text = crate::files::read::read_note(&dir.join(LOCK_FILE), 64)?;
    let pid: u32 = text.parse().ok()?;
    let alive = !crate::pids::gone(pid);
    let name = |p: &str| fs::read_to_string(format!("/proc/{p}/comm")).ok();
    let same_program = match (name(&pid.to_string()), name("self")) {
        (Some(theirs), Some(ours)) => theirs == ours,
        // no /proc: the pid alone
        _ => true,
    };
    let held = || holds_open(pid, &dir.join(LOCK_FILE)).unwrap_or(true);
    (alive && same_program && pid != std::process::id() && held()).then_some(pid)
}

/// Whether process `pid` holds the file at `path` open (as a run holds its lock file the
/// whole run): one of its descriptors (`/proc/PID/fd`) is that file, by device and inode, so a
/// copy of the file or a pid reused is told apart on any filesystem; None where that cannot
/// be read (not Linux, another user's process).
fn holds_open(pid: u32, path: &Path) -> Option<bool> {
    use std::os::unix::fs::MetadataExt;
    let file = fs::metadata(path).ok()?;
    let fds = fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(
        fds.filter_map(|e| fs::metadata(e.ok()?.path()).ok())
            .any(|m| (m.dev(), m.ino()) == (file.dev(), file.ino())),
    )
}

/// An exclusive, non-blocking advisory lock; false when another open file holds it.
fn try_lock(file: &File) -> std::io::Result<bool> {
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor is open for the duration of the call; flock only reads it.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            Ok(false)
        } else {
            Err(e)
        }
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_is_held_by_the_process_that_has_it_open_not_in_a_copy_of_its_file() {
        let d = tempfile::tempdir().unwrap();
        let (dir, copy) = (d.path().join("ckpt"), d.path().join("copy"));
        let held = lock(&dir).unwrap();
        fs::create_dir(&copy).unwrap();
        fs::copy(dir.join(LOCK_FILE), copy.join(LOCK_FILE)).unwrap();
        let me = std::process::id();
        if holds_open(me, &dir.join(LOCK_FILE)).is_none() {
            eprintln!("skipped: no /proc/PID/fd");
            return;
        }
        assert_eq!(holds_open(me, &dir.join(LOCK_FILE)), Some(true));
        assert_eq!(holds_open(me, &copy.join(LOCK_FILE)), Some(false));
        drop(held);
        assert_eq!(holds_open(me, &dir.join(LOCK_FILE)), Some(false));
    }
}
