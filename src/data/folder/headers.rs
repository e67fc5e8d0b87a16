//! Every file's header read at the start of a scan, on many threads, and the lines that say
//! how a long scan goes.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::data::header;

/// Reads every file's header, on more threads than cores (a network file system answers each
/// in milliseconds: many are asked at once), saying how it goes where it takes a while.
pub(super) fn headers(
    progress: &mut Progress,
    files: &[PathBuf],
) -> Vec<Result<(usize, usize), String>> {
    const BLOCK: usize = 64;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = (cores * 4)
        .clamp(8, 64)
        .min(files.len().div_ceil(BLOCK))
        .max(1);
    let (next, done) = (AtomicUsize::new(0), AtomicUsize::new(0));
    std::thread::scope(|s| {
        let jobs: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut read = Vec::new();
                    loop {
                        let from = next.fetch_add(BLOCK, Ordering::Relaxed);
                        if from >= files.len() {
                            return read;
                        }
                        let block = &files[from..(from + BLOCK).min(files.len())];
                        read.push((from, block.iter().map(|f| header::dimensions(f)).collect()));
                        done.fetch_add(block.len(), Ordering::Relaxed);
                    }
                })
            })
            .collect();
        while !jobs.iter().all(|j| j.is_finished()) {
            std::thread::sleep(Duration::from_millis(20));
            progress.read(done.load(Ordering::Relaxed), files.len());
        }
        let mut blocks: Vec<(usize, Vec<_>)> = jobs
            .into_iter()
            // (a reader that panicked takes the scan with it: no file given another's size)
            .flat_map(|j| j.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect();
        blocks.sort_by_key(|b| b.0);
        blocks.into_iter().flat_map(|b| b.1).collect()
    })
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
