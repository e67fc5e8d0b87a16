//! A resumed run's `best` begins as its line's. A run resumed into a checkpoint directory of
//! its own (a new run directory) from a checkpoint whose directory holds the best checkpoint
//! of their line (`--checkpoint-best`) takes that one along, so that its `best/` is the best
//! model of the line (what `export RUN_DIR/checkpoints/best` is for), which its own
//! validations must beat to replace.

use std::fs;
use std::path::{Path, PathBuf};

use super::{read_meta, BestVal, BEST, STATE, WEIGHTS};

/// Brings the best checkpoint beside `resumed` into `dir` as `best/`, where it is the one
/// `best` (the line's best validation before the resume, on the same validation set) names,
/// of line `line`, at or before the step resumed from, and `dir` is another directory without
/// a `best/` of its own. The files are linked where they can be (they are never changed in
/// place), else copied, and checked once there: the weights' CRC-32C as `state.json` records
/// it (a damaged best, or one a live run replaced between the two files, is not brought);
/// `best/` appears whole or not at all. Returns where it is now, or why it could not be
/// brought (a note: the run goes on with a best of its own).
pub fn carry_best(
    resumed: &Path,
    dir: &Path,
    line: Option<&str>,
    best: BestVal,
) -> Result<Option<PathBuf>, String> {
    let real = |p: &Path| fs::canonicalize(p).ok();
    let Some(beside) = resumed.parent().filter(|b| real(b) != real(dir)) else {
        return Ok(None);
    };
    let (from, to) = (beside.join(BEST), dir.join(BEST));
    if to.exists() {
        return Ok(None);
    }
    let Ok(meta) = read_meta(&from) else {
        return Ok(None);
    };
    let same = |m: &super::CheckpointMeta| {
        (m.val_accuracy, m.step, m.line()) == (Some(best.accuracy), best.step, line)
    };
    if !same(&meta) || meta.weights_crc32c.is_none() {
        return Ok(None);
    }
    let tmp = dir.join(format!(".tmp-{BEST}-{}", std::process::id()));
    let made = (|| {
        fs::create_dir_all(&tmp)?;
        for name in [WEIGHTS, STATE] {
            let (a, b) = (from.join(name), tmp.join(name));
            if fs::hard_link(&a, &b).is_err() {
                fs::copy(&a, &b)?;
                fs::File::open(&b)?.sync_all()?;
            }
        }
        // (what was linked is the checkpoint read above, whole)
        let linked = read_meta(&tmp).map_err(std::io::Error::other)?;
        let crc = super::tensor_file::crc32c_of(&tmp.join(WEIGHTS))?;
        if !same(&linked) || linked.weights_crc32c != Some(crc) {
            return Err(std::io::Error::other(
                "its weights are not the ones its state.json records (damaged, or replaced meanwhile)",
            ));
        }
        fs::File::open(&tmp)?.sync_all()?;
        fs::rename(&tmp, &to)?;
        fs::File::open(dir)?.sync_all()
    })();
    match made {
        Ok(()) => Ok(Some(to)),
        Err(e) => {
            let _ = fs::remove_dir_all(&tmp);
            Err(format!(
                "the best checkpoint of this run's line ({}) could not be brought into {} ({e}): this run's best/ holds its own best",
                from.display(),
                dir.display()
            ))
        }
    }
}
