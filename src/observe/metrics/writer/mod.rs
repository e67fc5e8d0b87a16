//! Writes a metrics file as a run goes: the lines `records` builds, in order. The `Recorder`
//! flushes lifecycle records and telemetry as they are written, so a reader of a running run's
//! file (`view`) lags at most `--sample-interval`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::records::Line;
use crate::engine::rundir::METRICS;

#[derive(Debug, thiserror::Error)]
#[error("cannot write metrics file {path}: {source}; {fix}")]
pub struct MetricsError {
    pub path: PathBuf,
    pub source: std::io::Error,
    /// What to do about it.
    pub fix: &'static str,
}

/// The usual fixes: where it cannot be opened, and where it cannot be written any more.
const WRITABLE: &str = "pick a writable path for --metrics-out";
const SPACE: &str = "check that its disk has space";
/// Where a pipe's reader went away (`--metrics-out >(...)`, a FIFO).
const READER: &str = "the program reading it (the other end of its pipe or FIFO) has gone";

/// The fix for a write that failed with `e`.
fn fix_for(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::BrokenPipe => READER,
        std::io::ErrorKind::FileTooLarge => LIMIT,
        _ => SPACE,
    }
}

/// Where the process's file-size limit stopped it (`ulimit -f`, a scheduler's).
const LIMIT: &str = "the process's file-size limit (ulimit -f) was reached: raise it";

pub struct MetricsWriter {
    path: PathBuf,
    out: BufWriter<File>,
    /// Bytes handed to `out` (every record a whole line), those known in the file (at the last
    /// flush that succeeded), and where each record handed since then ends: where a failed
    /// write cuts the file back to (`cut_back`).
    handed: u64,
    flushed: u64,
    ends: Vec<u64>,
    /// A regular file (a FIFO or device is never looked for), when it was last looked for, and
    /// what was found.
    regular: bool,
    looked: std::time::Instant,
    found: Found,
    /// The file's first record (the run's), written again where the file is cut to nothing
    /// under the run (`truncated`), and whether that was found (`Gone`) and told.
    first: Option<Vec<u8>>,
    cut: Found,
    /// Not a regular file (a FIFO, a pipe, a device): written by a thread of its own, so a
    /// reader that stalls holds nothing up (`out` unused).
    pipe: Option<pipe::Pipe>,
}

/// Whether the file written is still where it was written.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Found {
    There,
    /// Removed: to be told.
    Gone,
    /// Removed, and told (once is enough).
    Told,
}

/// How often a flush looks whether the file is still where it was written (a run directory
/// deleted under a running run would otherwise lose its records without a word).
const LOOK_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// The first line of the file, where it is a metrics file's run record (what a run may
/// replace).
fn run_record(path: &Path) -> Option<serde_json::Value> {
    use std::io::{BufRead, Read};
    let f = File::open(path).ok()?;
    let mut first = Vec::new();
    std::io::BufReader::new(f.take(1 << 16))
        .read_until(b'\n', &mut first)
        .ok()?;
    serde_json::from_slice::<serde_json::Value>(&first)
        .ok()
        .filter(|v| v.get("type").and_then(|t| t.as_str()) == Some("run"))
}

/// Takes the file's write lock (flock, held while `f` is open) for a run's writer: another
/// live run writing the same file is refused rather than the two interleaving their lines.
fn lock(f: &File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor the caller keeps open
    match unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } {
        0 => Ok(()),
        _ => match std::io::Error::last_os_error() {
            e if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Err(std::io::Error::other(
                "another run that is still going writes it",
            )),
            e => Err(e),
        },
    }
}

impl MetricsWriter {
    /// Checks that `path` can be written, without truncating anything, so a run can refuse a
    /// bad path before it starts: a file that can be made there (or beside where a link to
    /// none points), not a file of something else, not a run directory's own record, not a
    /// file a live run writes; and claims it (`Claim`) until the run has started.
    pub fn preflight(path: &Path) -> Result<Claim, MetricsError> {
        Self::preflight_once(path, true)
    }

    /// `preflight`; `again`: a file another run made between looking and making may be
    /// looked at once more.
    fn preflight_once(path: &Path, again: bool) -> Result<Claim, MetricsError> {
        let err = |source, fix| MetricsError {
            path: path.to_path_buf(),
            source,
            fix,
        };
        let parent = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !parent.is_dir() {
            return Err(err(
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("directory {} does not exist", parent.display()),
                ),
                WRITABLE,
            ));
        }
        let Ok(meta) = std::fs::metadata(path) else {
            // none yet: one the run could make (a folder it may not write in, a read-only disk
            // would otherwise fail it after its run directory was made), where a link to none
            // points if it is one
            let target = std::fs::read_link(path).map(|t| parent.join(t));
            let folder = match &target {
                Ok(t) => t.parent().unwrap_or(Path::new(".")),
                Err(_) => parent,
            };
            crate::files::write::can_write_in(folder).map_err(|e| err(e, WRITABLE))?;
            // (a link to no file yet: made as the run starts)
            if target.is_ok() {
                return Ok(Claim::unheld(path));
            }
            let made = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path);
            return match made {
                // (locked before it is a claim: where another run locked it first, the file
                // is that run's, not this one's to remove)
                Ok(f) => match lock(&f) {
                    Ok(()) => Ok(Claim::made(path, f)),
                    Err(e) => Err(err(e, "give each run its own --metrics-out")),
                },
                // (another run made it just now: claimed as a file that is there)
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && again => {
                    Self::preflight_once(path, false)
                }
                Err(e) => Err(err(e, WRITABLE)),
            };
        };
        use std::os::unix::fs::FileTypeExt;
        if meta.file_type().is_fifo() {
            // (checked as it is opened: opening it here would end its reader's input)
            return Ok(Claim::unheld(path));
        }
        let record = run_record(path);
        if meta.is_file() && meta.len() > 0 && record.is_none() {
            return Err(err(
                std::io::Error::other("it holds something other than a metrics file (its first line is not a run record), which the run would replace"),
                "give --metrics-out another path, or remove the file",
            ));
        }
        // a run directory's own record: the history `view`, `runs` and `--resume` read, by
        // whatever name (a symbolic or hard link to it is the same file)
        use std::os::unix::fs::MetadataExt;
        let same_file = |m: std::fs::Metadata| (m.dev(), m.ino()) == (meta.dev(), meta.ino());
        let recorded =
            (record.as_ref()).and_then(|r| r.get("run_dir")?.as_str().map(PathBuf::from));
        // or that record where its run directory went (moved or copied whole: beside its
        // checkpoints, under its own name)
        let real = std::fs::canonicalize(path).ok();
        let moved = (real.as_ref())
            .filter(|r| r.file_name() == Some(std::ffi::OsStr::new(METRICS)))
            .and_then(|r| r.parent())
            .filter(|d| d.join(crate::engine::rundir::CHECKPOINTS).is_dir())
            .filter(|_| record.is_some())
            .map(Path::to_path_buf);
        let of_run = (recorded.filter(|d| std::fs::metadata(d.join(METRICS)).is_ok_and(same_file)))
            .or(moved);
        if let Some(d) = of_run {
            return Err(err(
                std::io::Error::other(format!("it is the record of the run in {}, which this run would replace", d.display())),
                "give --metrics-out another path (every run writes its own metrics.jsonl in its run directory)",
            ));
        }
        let f = std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| err(e, WRITABLE))?;
        match meta.is_file() {
            true => {
                lock(&f).map_err(|e| err(e, "give each run its own --metrics-out"))?;
                Ok(Claim {
                    path: path.to_path_buf(),
                    file: Some(f),
                    made: false,
                    _quit: None,
                })
            }
            // (a device such as /dev/null is neither emptied nor locked)
            false => Ok(Claim::unheld(path)),
        }
    }

    /// The writer of a file claimed before the run started (emptied now), or one opened now
    /// where the claim holds none.
    pub fn claimed(mut claim: Claim) -> Result<MetricsWriter, MetricsError> {
        let Some(f) = claim.file.take() else {
            return Self::create(&claim.path);
        };
        claim.made = false;
        claim._quit = None;
        f.set_len(0).map_err(|source| MetricsError {
            path: claim.path.clone(),
            source,
            fix: WRITABLE,
        })?;
        Ok(MetricsWriter::writing(&claim.path, f, true))
    }

    /// The writer of `f`, the file at `path` (`regular`: not a FIFO or device), from its start.
    fn writing(path: &Path, f: File, regular: bool) -> MetricsWriter {
        // (where no thread can be had, written here: a stalled reader holds the records up)
        let piped = (!regular).then(|| {
            f.try_clone()
                .and_then(|f| pipe::Pipe::new(path.to_path_buf(), f))
        });
        MetricsWriter {
            pipe: piped.and_then(Result::ok),
            path: path.to_path_buf(),
            regular,
            out: BufWriter::new(f),
            handed: 0,
            flushed: 0,
            ends: Vec::new(),
            looked: std::time::Instant::now(),
            found: Found::There,
            first: None,
            cut: Found::There,
        }
    }

    /// Creates (or replaces) the file. A FIFO is opened without waiting for a reader: one
    /// that no process reads is an error, not a start held forever.
    pub fn create(path: &Path) -> Result<MetricsWriter, MetricsError> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
        let err = |source| MetricsError {
            path: path.to_path_buf(),
            source,
            fix: WRITABLE,
        };
        let kind = std::fs::metadata(path).map(|m| m.file_type());
        let fifo = kind.as_ref().is_ok_and(|t| t.is_fifo());
        // a regular file, or none yet; a device such as /dev/null is written as it is
        let file = kind.as_ref().map_or(true, |t| t.is_file());
        let f = match fifo {
            false if !file => std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(err)?,
            false => {
                // locked before it is emptied: a live run's file is refused, not truncated
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(path)
                    .map_err(err)?;
                lock(&f).map_err(|source| MetricsError {
                    path: path.to_path_buf(),
                    source,
                    fix: "give each run its own --metrics-out",
                })?;
                f.set_len(0).map_err(err)?;
                f
            }
            true => {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(path)
                    .map_err(|e| match e.raw_os_error() {
                        Some(libc::ENXIO) => err(std::io::Error::other(
                            "a FIFO (named pipe) that no process reads; start its reader first",
                        )),
                        _ => err(e),
                    })?;
                // then written as a file, by a thread of its own (`pipe`): a slow reader holds
                // up none of the run's other records
                // SAFETY: fcntl on a descriptor this function owns, clearing one status flag
                unsafe {
                    let flags = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
                    libc::fcntl(f.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
                }
                f
            }
        };
        let regular = f.metadata().is_ok_and(|m| m.is_file());
        Ok(MetricsWriter::writing(path, f, regular))
    }

    /// Waits until `deadline` at most for a pipe's reader to take the records held for it (a
    /// process about to exit at once); a file is written already.
    pub fn drain(&self, deadline: std::time::Instant) {
        if let Some(p) = &self.pipe {
            p.drain(deadline);
        }
    }

    /// The file written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One record (buffered; `flush` makes it visible to readers).
    pub fn write(&mut self, line: &Line) -> Result<(), MetricsError> {
        if self.handed == 0 {
            self.first = Some(line.as_bytes().to_vec());
        }
        // (a write past the buffer goes out now, not at the next flush: looked at first)
        if self.out.buffer().len() + line.as_bytes().len() > self.out.capacity() {
            self.follow_truncation();
        }
        self.handed += line.as_bytes().len() as u64;
        self.ends.push(self.handed);
        let out: &mut dyn Write = match &mut self.pipe {
            Some(p) => p,
            None => &mut self.out,
        };
        out.write_all(line.as_bytes())
            .map_err(|source| MetricsError {
                path: self.path.clone(),
                fix: fix_for(&source),
                source,
            })
    }

    pub fn flush(&mut self) -> Result<(), MetricsError> {
        self.follow_truncation();
        let out: &mut dyn Write = match &mut self.pipe {
            Some(p) => p,
            None => &mut self.out,
        };
        out.flush().map_err(|source| MetricsError {
            path: self.path.clone(),
            fix: fix_for(&source),
            source,
        })?;
        self.flushed = self.handed;
        self.ends.clear();
        if self.regular && self.found == Found::There && self.looked.elapsed() >= LOOK_EVERY {
            self.looked = std::time::Instant::now();
            if self.removed() {
                self.found = Found::Gone;
            }
        }
        Ok(())
    }

    /// After a write that failed (a full disk): the file cut back to its last whole record, what
    /// was held back for it dropped, so that it reads as a file of whole records and a later
    /// record (the run's end, where space was freed meanwhile) follows them. A FIFO or device
    /// is left as it is.
    pub fn cut_back(&mut self) {
        let Ok(file) = self.out.get_ref().try_clone() else {
            return;
        };
        // (the records held back are dropped, not written: `into_parts` does not flush)
        let held = std::mem::replace(&mut self.out, BufWriter::new(file));
        drop(held.into_parts());
        let f = self.out.get_ref();
        let len = f.metadata().map_or(0, |m| m.len());
        let whole = (self.ends.iter().copied())
            .filter(|&e| e <= len)
            .fold(self.flushed, u64::max);
        if self.regular && len > whole && f.set_len(whole).is_ok() {
            use std::io::Seek;
            let _ = self.out.get_mut().seek(std::io::SeekFrom::Start(whole));
        }
        (self.handed, self.flushed) = (whole, whole);
        self.ends.clear();
    }

    /// Cuts the file back by `room` bytes or more, to a record's end (never its first record,
    /// the run's: a file shorter than `room` is cut to it): what a full disk gives back, so
    /// that the run's end record fits in place of its last few step records. Whether it was
    /// cut.
    pub fn make_room(&mut self, room: u64) -> bool {
        use std::io::{Seek, SeekFrom};
        let len = self.out.get_ref().metadata().map_or(0, |m| m.len());
        let want = len.saturating_sub(room);
        let first = line_end(&self.path, 0..len.min(1 << 16), Newline::First);
        let Some(cut) = line_end(
            &self.path,
            want.saturating_sub(1 << 16)..want,
            Newline::Last,
        )
        .max(first)
        .filter(|&cut| cut < len) else {
            return false;
        };
        if !self.regular || self.out.get_ref().set_len(cut).is_err() {
            return false;
        }
        let _ = self.out.get_mut().seek(SeekFrom::Start(cut));
        (self.handed, self.flushed) = (cut, cut);
        self.ends.clear();
        true
    }

    /// Whether the file written was removed: unlinked, or its path names nothing (a rename
    /// away or a file replaced is not: what is written still lands somewhere).
    fn removed(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        let unlinked = self.out.get_ref().metadata().is_ok_and(|m| m.nlink() == 0);
        let nothing = std::fs::symlink_metadata(&self.path)
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound);
        unlinked || nothing
    }

    /// The warning, once, that the file was found removed while written (writing goes on: a
    /// file moved away still takes the records).
    pub fn take_warning(&mut self) -> Option<String> {
        if let Some(n) = self.pipe.as_mut().and_then(|p| p.take_dropped()) {
            return Some(format!(
                "metrics file {}: its reader (of the FIFO or pipe) fell behind by more than the records held for it: {} dropped; the run and its other records go on",
                self.path.display(),
                crate::text::counted(n as usize, "record")
            ));
        }
        if self.cut == Found::Gone {
            self.cut = Found::Told;
            return Some(format!(
                "metrics file {} was cut short while the run writes it (logrotate's copytruncate, `: > FILE`): the records cut away are gone; it goes on from its last whole record (the run's, where nothing was left), so view still reads it",
                self.path.display()
            ));
        }
        match self.found {
            Found::Gone => {
                self.found = Found::Told;
                Some(format!(
                    "metrics file {} was removed or moved away while the run writes it: the records from here on are lost if it was deleted; the run goes on, and its checkpoints are still written",
                    self.path.display()
                ))
            }
            _ => None,
        }
    }
}

mod claim;
mod pipe;
mod truncated;

pub use claim::Claim;
use truncated::{line_end, Newline};
#[cfg(test)]
mod tests;
