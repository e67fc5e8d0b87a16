//! Writing a checkpoint whole or not at all (a temporary directory, fsynced, renamed or
//! swapped into place), and removing one so that one cut short is never taken for one.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, TensorView};

use super::{CheckpointError, CheckpointMeta, BEST, FORMAT, STATE, WEIGHTS};
use crate::backend::TrainState;
use crate::nn::model::Model;

fn to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The step (+1) of the checkpoint a process quitting at once removed half written (0: none).
static ABANDONED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The step of the checkpoint this process, quitting at once, removed half written.
pub fn abandoned() -> Option<u64> {
    ABANDONED
        .load(std::sync::atomic::Ordering::SeqCst)
        .checked_sub(1)
}

/// The step (+1) of the newest step checkpoint this process wrote whole (0: none).
static WRITTEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The step of the newest step checkpoint this process wrote whole (what a process quitting
/// at once after a stop's checkpoint leaves to resume from).
pub fn written() -> Option<u64> {
    WRITTEN
        .load(std::sync::atomic::Ordering::SeqCst)
        .checked_sub(1)
}

/// A step's checkpoint's name in its directory.
pub fn step_name(step: u64) -> String {
    format!("step-{step:08}")
}

/// Writes a checkpoint named `name` (`step_name`, or `BEST`) under `dir`, replacing one of that
/// name; returns its directory.
pub fn write(
    dir: &Path,
    name: &str,
    model: &Model,
    state: &TrainState,
    meta: &CheckpointMeta,
) -> Result<PathBuf, CheckpointError> {
    let final_dir = dir.join(name);
    let tmp = dir.join(format!(".tmp-{name}-{}", std::process::id()));
    let werr = |source| CheckpointError::Write {
        path: dir.to_path_buf(),
        source,
        last: None,
    };
    fs::create_dir_all(&tmp).map_err(werr)?;
    // a process quitting in the middle of this (a second signal) leaves no `.tmp-*` (and says
    // so of a step's checkpoint)
    let armed = crate::quit_at_once::arm({
        let (tmp, step) = (tmp.clone(), meta.step);
        let said = name != BEST;
        move || {
            // moved aside first: where the writer's rename into place came first, this finds
            // nothing and the checkpoint stays whole (removing in place could empty it)
            let aside = tmp.with_extension("abandoned");
            if fs::rename(&tmp, &aside).is_ok() {
                let _ = fs::remove_dir_all(aside);
                if said {
                    ABANDONED.store(step + 1, std::sync::atomic::Ordering::SeqCst);
                }
            }
        }
    });
    let result = (|| {
        let mut blobs: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
        for t in &model.tensors {
            let r = t.offset..t.offset + t.len;
            blobs.push((
                t.name.clone(),
                t.shape.clone(),
                to_bytes(&state.params[r.clone()]),
            ));
            if !state.opt.m.is_empty() {
                blobs.push((
                    format!("optim.m.{}", t.name),
                    t.shape.clone(),
                    to_bytes(&state.opt.m[r.clone()]),
                ));
            }
            if !state.opt.v.is_empty() {
                blobs.push((
                    format!("optim.v.{}", t.name),
                    t.shape.clone(),
                    to_bytes(&state.opt.v[r]),
                ));
            }
        }
        // batch norm's running statistics, by their PyTorch names
        for t in &model.buffers {
            blobs.push((
                t.name.clone(),
                t.shape.clone(),
                to_bytes(&state.buffers[t.range()]),
            ));
        }
        let views = blobs.iter().map(|(n, s, b)| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), b).expect("tensor sizes match shapes"),
            )
        });
        let info: HashMap<String, String> = [("format".to_string(), FORMAT.to_string())].into();
        let bytes = safetensors::serialize(views, &Some(info))
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        write_synced(&tmp.join(WEIGHTS), &bytes)?;
        let meta = CheckpointMeta {
            weights_crc32c: Some(crc32c::crc32c(&bytes)),
            ..meta.clone()
        };
        let json = serde_json::to_vec_pretty(&meta).map_err(std::io::Error::other)?;
        write_synced(&tmp.join(STATE), &json)?;
        File::open(&tmp)?.sync_all()?;
        // an older run's checkpoint of the same step (or the best so far) is replaced: moved
        // aside first (a directory cannot be renamed over a non-empty one), so a crash leaves
        // one of the two
        let old = dir.join(format!(".old-{name}-{}", std::process::id()));
        let replacing = final_dir.exists();
        if replacing && exchange(&tmp, &final_dir).is_ok() {
            // swapped at once (a reader of the best one, replaced often, finds it whole at
            // every moment): the old one is where the new one was written
            let _ = File::open(dir).and_then(|d| d.sync_all());
            let _ = fs::remove_dir_all(&tmp);
            return Ok(());
        }
        if replacing {
            fs::rename(&final_dir, &old)?;
        }
        if let Err(e) = fs::rename(&tmp, &final_dir) {
            if replacing {
                let _ = fs::rename(&old, &final_dir);
            }
            return Err(e);
        }
        // the checkpoint is in place: what follows is tidying, not a reason to fail the run
        let _ = File::open(dir).and_then(|d| d.sync_all());
        if replacing {
            let _ = fs::remove_dir_all(&old);
        }
        Ok(())
    })();
    drop(armed);
    if let Err(e) = result {
        let _ = fs::remove_dir_all(&tmp);
        return Err(werr(e));
    }
    if name != BEST {
        WRITTEN.fetch_max(meta.step + 1, std::sync::atomic::Ordering::SeqCst);
    }
    Ok(final_dir)
}

/// Swaps directories `a` and `b` at once (Linux's `renameat2(RENAME_EXCHANGE)`); an error
/// where the system or file system cannot, and the caller moves one aside instead.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c =
        |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(std::io::Error::other);
    let (a, b) = (c(a)?, c(b)?);
    // SAFETY: two NUL-terminated paths that outlive the call, relative to the working directory.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    match r {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn exchange(_: &Path, _: &Path) -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
}

/// Removes checkpoint `dir`: renamed out of the `step-*` names first, so that one interrupted
/// half-way is never taken for a checkpoint (a later start clears what is left of it). One
/// that cannot be removed is put back where it was, whole, where nothing of it went yet.
pub fn remove(dir: &Path) -> std::io::Result<()> {
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    let aside = dir.with_file_name(format!(".removed-{name}-{}", std::process::id()));
    fs::rename(dir, &aside)?;
    fs::remove_dir_all(&aside).inspect_err(|_| {
        if aside.join(STATE).is_file() && aside.join(WEIGHTS).is_file() {
            let _ = fs::rename(&aside, dir);
        }
    })
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = File::create(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}
