//! A `--metrics-out` file held from before its run starts to its first record (`Claim`).

use std::fs::File;
use std::path::{Path, PathBuf};

/// A `--metrics-out` file claimed before its run starts: its write lock held, so that of two
/// runs started together with one file the second is refused before it makes anything (its
/// run directory); the file made where there was none (removed again where the run does not
/// start); nothing in it emptied until the run has started (`MetricsWriter::claimed`).
pub struct Claim {
    pub(super) path: PathBuf,
    /// The regular file, locked (None: a FIFO, a device, a link to no file yet: opened at
    /// the start).
    pub(super) file: Option<File>,
    /// This claim made the file (and it has not been written).
    pub(super) made: bool,
    /// A made file's removal, should the process quit at once (Ctrl-C as the run starts).
    pub(super) _quit: Option<crate::quit_at_once::Armed>,
}

impl Claim {
    /// A claim of nothing held: a FIFO, a device, a link to no file yet (opened at the start).
    pub(super) fn unheld(path: &Path) -> Claim {
        Claim {
            path: path.to_path_buf(),
            file: None,
            made: false,
            _quit: None,
        }
    }

    /// The file made at `path` (`f`, locked): removed where the run does not start, by the
    /// claim's drop or, quitting at once, by the signal handler.
    pub(super) fn made(path: &Path, f: File) -> Claim {
        let id = f.metadata().ok().map(|m| file_id(&m));
        let at = path.to_path_buf();
        let quit = crate::quit_at_once::arm(move || {
            if id.is_some() && std::fs::symlink_metadata(&at).ok().map(|m| file_id(&m)) == id {
                let _ = std::fs::remove_file(&at);
            }
        });
        Claim {
            path: path.to_path_buf(),
            file: Some(f),
            made: true,
            _quit: Some(quit),
        }
    }
}

/// What tells one file from another whatever its path: its device and inode.
fn file_id(m: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino())
}

impl Drop for Claim {
    fn drop(&mut self) {
        // (the file this claim made, where the path still names it)
        let ours = (self.file.as_ref()).and_then(|f| f.metadata().ok());
        let ours = ours.map(|m| file_id(&m));
        let now = std::fs::symlink_metadata(&self.path)
            .ok()
            .map(|m| file_id(&m));
        if self.made && ours.is_some() && now == ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
