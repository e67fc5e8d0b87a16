//! Reads a metrics file back into the engine's types: the `run` record into a `RunInfo`, `step`
//! records into rows of every rank's `StepStats`, the rest into events, warnings and device
//! samples. A file still being written is read as it grows: `next` returns `None` at the end of
//! what is there, and a last line without its newline is left for a later call (read once its
//! writer is known gone: `writer_gone`).
//!
//! Bounded: a line is read only up to `MAX_LINE` bytes and a run of at most `MAX_RANKS` ranks
//! is accepted, so a huge or hostile file costs bounded memory. A complete line that is not a
//! record (bad JSON, a missing field) is an error naming the file and the line: the file is
//! damaged, and showing a run with a hole in it would mislead. What follows the `end` record is
//! left unread (`past_end` says where it starts): the run is whole before it. Blank lines, records of a type
//! this version does not know and event kinds without a message are skipped (newer writers may
//! add them within version 1).

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use super::parse::{record_line, run_line, Record};
use crate::engine::events::Event;
use crate::engine::RunInfo;

/// The longest line read (a `step` record of 1024 ranks is about 200 KiB).
pub const MAX_LINE: usize = 1 << 20;
/// What the file is called inside a run directory.
pub use crate::engine::rundir::METRICS as FILE_NAME;
const CHUNK: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read metrics file {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: line {line}: {what}")]
    Line {
        path: PathBuf,
        line: u64,
        what: String,
    },
    #[error("{path}: {what}")]
    File { path: PathBuf, what: String },
}

/// What an empty metrics file is told (`ReadError::File`).
pub const EMPTY: &str =
    "empty: no `run` record (a run writes it first; if it has just started, try again)";

pub struct MetricsReader {
    lines: Lines,
    info: RunInfo,
    /// The `end` record was read: what follows is no part of the run.
    ended: bool,
    /// The first line after `end` that is not blank (left unread), once looked for.
    past_end: Option<u64>,
    looked_past_end: bool,
    /// The line a gone writer left cut off mid-record, where it was read (`writer_gone`).
    cut_off: Option<u64>,
    /// `skimming`: the newest step record passed over and not yet given, and a record read
    /// after it, given next.
    skim: Option<Skim>,
}

/// What a skimming reader holds back (`MetricsReader::skimming`).
#[derive(Default)]
struct Skim {
    /// The held step record's line number and text.
    step: Option<(u64, Vec<u8>)>,
    next: Option<Result<Record, ReadError>>,
}

impl MetricsReader {
    /// Opens a metrics file, or the `metrics.jsonl` of a run directory, and reads its `run`
    /// record (which must be complete and of this schema).
    pub fn open(path: &Path) -> Result<MetricsReader, ReadError> {
        let path = if path.is_dir() {
            let inner = path.join(FILE_NAME);
            // (one that is there but no file is refused below, by what it is; a directory this
            // user may not read is said so: a run directory is its owner's alone)
            if let Err(e) = std::fs::read_dir(path) {
                return Err(ReadError::File {
                    path: path.to_path_buf(),
                    what: format!("a directory this user cannot read ({e}): a run directory is its owner's alone (mode 0700); view it as the user who ran it"),
                });
            }
            if std::fs::symlink_metadata(&inner).is_err() {
                let what = match crate::engine::rundir::run_of_checkpoints(path) {
                    Some(run) => format!(
                        "a run's checkpoints, not its record: view the run, mgtop-train view {}",
                        run.display()
                    ),
                    None => format!(
                        "a directory without a {FILE_NAME} nor runs under it: give a metrics file, a run directory or a directory of runs"
                    ),
                };
                let path = path.to_path_buf();
                return Err(ReadError::File { path, what });
            }
            inner
        } else {
            path.to_path_buf()
        };
        use std::os::unix::fs::FileTypeExt;
        if std::fs::metadata(&path).is_ok_and(|m| m.file_type().is_socket()) {
            let live = crate::observe::live::socket::listened(&path);
            let what = match live {
                true => format!(
                    "a run's live socket, not a metrics file: watch the run with `mgtop-train attach {}`, or view the run directory beside it",
                    path.display()
                ),
                false => "a socket no run listens on (its run ended or was killed), not a metrics file: view the run directory beside it".to_string(),
            };
            return Err(ReadError::File { what, path });
        }
        // a FIFO or a device in a metrics file's place is refused, not waited on or read
        // without end (a metrics file may be of any length: it is read a line at a time)
        let expect = crate::files::read::Expect {
            what: "a metrics file",
            flag: "view/attach",
            max: u64::MAX,
            fix: "",
        };
        let file = match crate::files::read::open(&path, &expect) {
            Ok((file, _)) => file,
            Err(crate::files::read::ReadError::Io { path, source }) => {
                return Err(ReadError::Io { path, source })
            }
            Err(crate::files::read::ReadError::Refused { path, problem }) => {
                return Err(ReadError::File {
                    path,
                    what: problem,
                })
            }
        };
        let mut lines = Lines {
            path,
            file,
            buf: Vec::new(),
            start: 0,
            line: 0,
            read: 0,
            whole: false,
            tail: false,
        };
        let Some((a, b)) = lines.next_line()? else {
            return Err(lines.file_error(if lines.read == 0 {
                EMPTY
            } else {
                "no complete first line: not a metrics file, or its run has just started"
            }));
        };
        let info = run_line(&lines.buf[a..b]).map_err(|w| lines.line_error(w))?;
        Ok(MetricsReader {
            lines,
            info,
            ended: false,
            past_end: None,
            looked_past_end: false,
            cut_off: None,
            skim: None,
        })
    }

    /// Reads the file for its run's course, not its every step (`runs`' rows): telemetry is
    /// passed over, and of the step records only the last before each other record and the
    /// file's last are given; the others' JSON is checked, not read (several times faster on
    /// a long run's file).
    pub fn skimming(mut self) -> MetricsReader {
        self.skim = Some(Skim::default());
        self
    }

    /// The run as its `run` record describes it (fields older files lack get defaults).
    pub fn info(&self) -> &RunInfo {
        &self.info
    }

    /// The first line that follows the run's `end` record, where one does (an editor's or a
    /// copy's leftovers: the run ended there, so it is left unread rather than refused).
    pub fn past_end(&self) -> Option<u64> {
        self.past_end
    }

    /// Once after the end: whether anything but blank lines follows it (a line too long counts
    /// as something; none of it is read further). A file that shrank is still an error: a new
    /// run overwrote it.
    fn look_past_end(&mut self) -> Result<(), ReadError> {
        if self.looked_past_end {
            return Ok(());
        }
        loop {
            match self.lines.next_line() {
                Ok(Some((a, b))) if self.lines.buf[a..b].iter().all(u8::is_ascii_whitespace) => {}
                Ok(Some(_)) => break self.past_end = Some(self.lines.line),
                Err(e @ (ReadError::File { .. } | ReadError::Io { .. })) => return Err(e),
                Err(ReadError::Line { .. }) => break self.past_end = Some(self.lines.line + 1),
                // (nothing complete yet: looked at again next time)
                Ok(None) => return Ok(()),
            }
        }
        self.looked_past_end = true;
        Ok(())
    }

    /// The run that wrote the file is gone (killed, or ended with its last newline lost, as
    /// a copy or an editor may): a last line without its newline is read as a whole line,
    /// where it was left for a later call; one that is no record was cut off (`cut_off`).
    pub fn writer_gone(&mut self) {
        self.lines.whole = true;
    }

    /// The last line, where its writer left it cut off mid-record (killed while writing it):
    /// its number. Read up to it, the file is whole, not damaged.
    pub fn cut_off(&self) -> Option<u64> {
        self.cut_off
    }

    /// The file read (inside the run directory where one was given).
    pub fn path(&self) -> &Path {
        &self.lines.path
    }

    /// A checkpoint the file records, `path` under the run directory it recorded, where the
    /// run directory holding this file has it: the run directory was moved (or copied) since,
    /// and the copy read names its own checkpoints (resumed from, they leave the original be).
    fn moved(&self, path: PathBuf) -> PathBuf {
        let recorded = self.info.run_dir.as_deref();
        let inside = recorded.and_then(|r| path.strip_prefix(r).ok());
        // (a run directory's own file only, its links resolved: `latest` is the run it names
        // today, and a file elsewhere has no checkpoints of its run beside it)
        let real = |p: &Path| std::fs::canonicalize(p).ok();
        let own_file = self.lines.path.file_name() == Some(std::ffi::OsStr::new(FILE_NAME));
        let file = real(&self.lines.path).filter(|_| own_file);
        let own = (file.as_deref())
            .and_then(Path::parent)
            .filter(|d| recorded.and_then(real).as_deref() != Some(*d));
        match (own, inside) {
            (Some(own), Some(rest)) if own.join(rest).exists() => own.join(rest),
            _ => path,
        }
    }

    /// The next record, or `None` when no complete line follows yet.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Record>, ReadError> {
        if let Some(r) = self.skim.as_mut().and_then(|s| s.next.take()) {
            return r.map(Some);
        }
        if self.ended {
            self.look_past_end()?;
            return Ok(None);
        }
        loop {
            let (a, b) = match self.lines.next_line() {
                Ok(Some(line)) => line,
                Ok(None) => break,
                Err(e) => return self.held_first(Err(e)),
            };
            let text = &self.lines.buf[a..b];
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            if let Some(skim) = self.skim.as_mut() {
                let has = |what: &[u8]| memchr::memmem::find(text, what).is_some();
                let step = has(br#""type":"step""#);
                if step || has(br#""type":"telemetry""#) {
                    let json = serde_json::from_slice::<serde::de::IgnoredAny>(text);
                    match json {
                        Ok(_) if step => skim.step = Some((self.lines.line, text.to_vec())),
                        Ok(_) => {}
                        Err(_) if self.lines.tail => {
                            self.cut_off = Some(self.lines.line);
                            return self.skimmed_step();
                        }
                        Err(e) => {
                            let e = self.lines.line_error(format!("not JSON ({e})"));
                            return self.held_first(Err(e));
                        }
                    }
                    continue;
                }
            }
            let parsed = match record_line(text, self.info.ranks()) {
                // (a gone writer's last line, cut off mid-record: where it stopped, no damage)
                Err(_) if self.lines.tail => {
                    self.cut_off = Some(self.lines.line);
                    return self.skimmed_step();
                }
                Err(w) => {
                    let e = self.lines.line_error(w);
                    return self.held_first(Err(e));
                }
                Ok(parsed) => parsed,
            };
            if let Some(mut r) = parsed {
                if let Record::Event {
                    event: Event::Checkpoint { path, .. },
                    ..
                } = &mut r
                {
                    *path = self.moved(std::mem::take(path));
                }
                self.ended = matches!(
                    r,
                    Record::Event {
                        event: Event::Finished { .. },
                        ..
                    }
                );
                return self.held_first(Ok(r));
            }
        }
        self.skimmed_step()
    }

    /// `then`, after the step record a skimming reader passed over last where one waits (it
    /// came before).
    fn held_first(&mut self, then: Result<Record, ReadError>) -> Result<Option<Record>, ReadError> {
        match self.skimmed_step() {
            Ok(Some(step)) => {
                if let Some(s) = self.skim.as_mut() {
                    s.next = Some(then);
                }
                Ok(Some(step))
            }
            Ok(None) => then.map(Some),
            Err(e) => Err(e),
        }
    }

    /// The step record a skimming reader passed over last, where one waits.
    fn skimmed_step(&mut self) -> Result<Option<Record>, ReadError> {
        let Some((line, text)) = self.skim.as_mut().and_then(|s| s.step.take()) else {
            return Ok(None);
        };
        record_line(&text, self.info.ranks()).map_err(|what| ReadError::Line {
            path: self.lines.path.clone(),
            line,
            what,
        })
    }
}

/// The file's complete lines, read in chunks, at most `MAX_LINE` bytes each.
struct Lines {
    path: PathBuf,
    file: File,
    buf: Vec<u8>,
    /// Bytes of `buf` already taken as lines.
    start: usize,
    /// The number of the last line taken.
    line: u64,
    /// Bytes read from the file so far.
    read: u64,
    /// No writer adds to the file: a last line without its newline is a line.
    whole: bool,
    /// The line last taken was such a last line.
    tail: bool,
}

impl Lines {
    /// The byte range in `buf` of the next complete line (reading more of the file as needed).
    fn next_line(&mut self) -> Result<Option<(usize, usize)>, ReadError> {
        loop {
            let pending = &self.buf[self.start..];
            if let Some(i) = memchr::memchr(b'\n', pending) {
                self.line += 1;
                if i > MAX_LINE {
                    return Err(self.too_long());
                }
                let a = self.start;
                self.start += i + 1;
                return Ok(Some((a, a + i)));
            }
            if pending.len() > MAX_LINE {
                self.line += 1;
                return Err(self.too_long());
            }
            if self.fill()? == 0 {
                // (a writer gone: its last line, whatever it lacks, is all there will be)
                if self.whole && self.start < self.buf.len() {
                    self.tail = true;
                    self.line += 1;
                    let a = self.start;
                    self.start = self.buf.len();
                    return Ok(Some((a, self.start)));
                }
                return Ok(None);
            }
        }
    }

    /// Reads the next chunk of the file; 0 at its (current) end.
    fn fill(&mut self) -> Result<usize, ReadError> {
        self.buf.drain(..self.start);
        self.start = 0;
        let have = self.buf.len();
        self.buf.resize(have + CHUNK, 0);
        let n = self.file.read(&mut self.buf[have..]);
        self.buf.truncate(have + *n.as_ref().unwrap_or(&0));
        let n = n.map_err(|source| ReadError::Io {
            path: self.path.clone(),
            source,
        })?;
        self.read += n as u64;
        if n == 0 && self.file.metadata().is_ok_and(|m| m.len() < self.read) {
            return Err(self.file_error("shrank while being read: a new run overwrote it?"));
        }
        Ok(n)
    }

    fn too_long(&self) -> ReadError {
        self.line_error(format!(
            "longer than {} MiB: not a metrics file, or a damaged one",
            MAX_LINE >> 20
        ))
    }

    fn line_error(&self, what: String) -> ReadError {
        ReadError::Line {
            path: self.path.clone(),
            line: self.line,
            what,
        }
    }

    fn file_error(&self, what: &str) -> ReadError {
        ReadError::File {
            path: self.path.clone(),
            what: what.into(),
        }
    }
}
