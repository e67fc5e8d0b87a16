//! Where this program writes, and how: files written whole (exported weights, `scale --out`
//! results) beside the target, synced, then renamed over it, so a full disk or a crash leaves the
//! earlier file whole, never a truncated one; and its cache folders.

use std::io::Write;
use std::path::{Path, PathBuf};

/// This user's cache folder `name` of mgtop's: `$XDG_CACHE_HOME/mgtop/<name>`,
/// `~/.cache/mgtop/<name>`, else one under the temporary directory named for the user.
pub fn cache_dir(name: &str) -> PathBuf {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    env("XDG_CACHE_HOME")
        .or_else(|| env("HOME").map(|h| h.join(".cache")))
        .map(|c| c.join("mgtop").join(name))
        // SAFETY: getuid cannot fail.
        .unwrap_or_else(|| {
            std::env::temp_dir()
                .join(format!("mgtop-{}", unsafe { libc::getuid() }))
                .join(name)
        })
}

/// The folder above `path` that is there as something other than a directory (a file where
/// a folder of the path is asked for: no `mkdir -p` can make it).
pub fn file_in_the_way(path: &Path) -> Option<&Path> {
    (path.ancestors().skip(1))
        .filter(|a| !a.as_os_str().is_empty())
        .find(|a| a.metadata().is_ok_and(|m| !m.is_dir()))
}

/// Whether this process can make a file in `dir`: one made and removed, as permissions alone do
/// not tell (root may write in a folder its bits refuse; no one may in `/proc` or on a
/// read-only mount). Lets a run refuse an output it could not write before it trains.
pub fn can_write_in(dir: &Path) -> std::io::Result<()> {
    // (a name of its own: a probe a killed process left, or another machine's process of the
    // same pid on a shared disk, is passed over)
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut attempt = 0u32;
    loop {
        let name = format!(".mgtop-probe-{}-{nanos}-{attempt}", std::process::id());
        let probe = dir.join(name);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe)
        {
            Ok(_) => {
                let _ = std::fs::remove_file(&probe);
                return Ok(());
            }
            // (names taken again and again: said, not taken for a yes)
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 3 => attempt += 1,
            Err(e) => return Err(e),
        }
    }
}

/// Writes `bytes` to `path` by way of a temporary file beside it; the temporary file is removed
/// when any step fails. A file replaced keeps its permissions (a report shared with a group
/// stays shared).
pub fn replace_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    replace_files(&[(path, bytes)]).map_err(|(_, e)| e)
}

/// Writes files that go together (weights and the module that loads them) as `replace_file`
/// writes one, each renamed over its path only once all are written: a failure to write one (a
/// full disk) leaves every path as it was and no temporary file (a rename that fails after
/// another succeeded, a folder's permissions changed between them, is not undone). The error
/// names the path.
pub fn replace_files(files: &[(&Path, &[u8])]) -> Result<(), (PathBuf, std::io::Error)> {
    let temporary = |path: &Path| {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let pid = std::process::id();
        path.with_file_name(format!(".{}.tmp-{pid}", name.unwrap_or_default()))
    };
    let tmps: Vec<PathBuf> = files.iter().map(|(p, _)| temporary(p)).collect();
    let write = |path: &Path, bytes: &[u8], tmp: &Path| {
        let mut f = std::fs::File::create(tmp)?;
        // (a file system without permissions, vfat, takes the file without them)
        if let Ok(was) = std::fs::metadata(path) {
            let _ = f.set_permissions(was.permissions());
        }
        f.write_all(bytes)?;
        f.sync_all()
    };
    let written = (|| {
        for ((path, bytes), tmp) in files.iter().zip(&tmps) {
            write(path, bytes, tmp).map_err(|e| (path.to_path_buf(), e))?;
        }
        for ((path, _), tmp) in files.iter().zip(&tmps) {
            std::fs::rename(tmp, path).map_err(|e| (path.to_path_buf(), e))?;
        }
        Ok(())
    })();
    if written.is_err() {
        for tmp in &tmps {
            let _ = std::fs::remove_file(tmp);
        }
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_whole_or_left_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("out.csv");
        std::fs::write(&f, "old").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
        replace_file(&f, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "new");
        let mode = std::fs::metadata(&f).unwrap().permissions().mode();
        assert_eq!(
            mode & 0o777,
            0o640,
            "the replaced file's permissions are kept"
        );
        // a target that cannot be replaced (a directory) keeps what it was, no temp file left
        let d = dir.path().join("sub");
        std::fs::create_dir(&d).unwrap();
        assert!(replace_file(&d, b"x").is_err());
        assert!(d.is_dir());
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 2, "{left:?}");
    }

    /// Files that go together are replaced together: one that cannot be written leaves the
    /// others as they were, and no temporary file.
    #[test]
    fn files_written_together_are_replaced_all_or_none() {
        let dir = tempfile::tempdir().unwrap();
        let (weights, module) = (dir.path().join("m.safetensors"), dir.path().join("m.py"));
        std::fs::write(&weights, "old weights").unwrap();
        std::fs::write(&module, "old module").unwrap();
        let nowhere = dir.path().join("no/such.py");
        let e = replace_files(&[(&weights, b"new weights"), (&nowhere, b"x")]).unwrap_err();
        assert_eq!(e.0, nowhere);
        assert_eq!(std::fs::read_to_string(&weights).unwrap(), "old weights");
        let left = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(left, 2, "no temporary file left");
        replace_files(&[(&weights, b"new weights"), (&module, b"new module")]).unwrap();
        let read = |p: &Path| std::fs::read_to_string(p).unwrap();
        assert_eq!(
            (read(&weights), read(&module)),
            ("new weights".into(), "new module".into())
        );
    }
}
