//! Every file's header read at the start of a scan, on many threads, and the lines that say
//! how a long scan goes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::data::header;

/// Reads every file's header, on more threads than cores (a network file system answers each
/// in milliseconds: many are asked at once), saying how it goes where it takes a while.
pub(super) fn headers(
    progress: &mut Progress,
    files: &[PathBuf],
) -> Vec<Result<(usize, usize), String>> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // (a reader that panicked takes the scan with it: no file given another's size)
    crate::parallel::map_in_order(
        files,
        (cores * 4).clamp(8, 64),
        64,
        |f| header::dimensions(f),
        |done| progress.read(done, files.len()),
    )
}

/// A line every `Progress::EVERY` while a folder is scanned (a million files take a while on
/// a network file system).
pub(super) struct Progress {
    dir: PathBuf,
    start: Instant,
    next: Duration,
}

impl Progress {
    const EVERY: Duration = Duration::from_secs(10);

    pub(super) fn new(dir: &Path) -> Progress {
        Progress {
            dir: dir.to_path_buf(),
            start: Instant::now(),
            next: Progress::EVERY,
        }
    }

    /// The seconds so far, where a line is due.
    fn due(&mut self) -> Option<f64> {
        let now = self.start.elapsed();
        (now >= self.next).then(|| {
            self.next = now + Progress::EVERY;
            now.as_secs_f64()
        })
    }

    pub(super) fn listed(&mut self, files: usize) {
        if let Some(s) = self.due() {
            crate::tell!(
                "images {}: {} found so far ({s:.0} s)",
                self.dir.display(),
                crate::text::counted(files, "picture file")
            );
        }
    }

    fn read(&mut self, done: usize, of: usize) {
        if let Some(s) = self.due() {
            crate::tell!(
                "images {}: read the headers of {done} of {of} picture files ({s:.0} s)",
                self.dir.display()
            );
        }
    }
}
