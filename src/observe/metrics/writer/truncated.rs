//! A metrics file cut short under its run (logrotate's `copytruncate`, `: > FILE`): the run's
//! records went on at the offset they had reached, so the file began with a hole of zero bytes
//! where its run record was, and read as no metrics file.

use std::io::{Seek, SeekFrom, Write};

use std::path::Path;

use super::{Found, MetricsWriter};

/// Which newline of a stretch of a file [`line_end`] looks for.
#[derive(Clone, Copy)]
pub(super) enum Newline {
    First,
    Last,
}

/// Where the line ending at the first or last newline among the bytes `within` of the file at
/// `path` ends (one past that newline); `None` where there is no newline there or it cannot be
/// read.
pub(super) fn line_end(path: &Path, within: std::ops::Range<u64>, which: Newline) -> Option<u64> {
    use std::io::{Read, Seek, SeekFrom};
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|mut f| {
            f.seek(SeekFrom::Start(within.start))?;
            f.take(within.end.saturating_sub(within.start))
                .read_to_end(&mut bytes)
        })
        .ok()?;
    let at = match which {
        Newline::First => bytes.iter().position(|&b| b == b'\n'),
        Newline::Last => bytes.iter().rposition(|&b| b == b'\n'),
    };
    at.map(|at| within.start + at as u64 + 1)
}

impl MetricsWriter {
    /// Where the file is shorter than what was flushed to it, writing goes on at its end: after
    /// the run's record written again where it was cut to nothing, so it still reads as the
    /// run's metrics file (its totals ride on every step record). Told once in the run
    /// (`take_warning`). Looked at before each flush and each write the buffer cannot hold
    /// (one `fstat`). A file cut to some length goes on from its last whole record there.
    pub(super) fn follow_truncation(&mut self) {
        if !self.regular || self.pipe.is_some() {
            return;
        }
        let Ok(len) = self.out.get_ref().metadata().map(|m| m.len()) else {
            return;
        };
        if len >= self.flushed {
            return;
        }
        // (cut to some length: back to its last whole record there)
        let len = match len {
            0 => 0,
            len => {
                line_end(&self.path, len.saturating_sub(1 << 16)..len, Newline::Last).unwrap_or(0)
            }
        };
        let file = self.out.get_mut();
        if file.set_len(len).is_err() || file.seek(SeekFrom::Start(len)).is_err() {
            return;
        }
        let mut at = len;
        if let Some(first) = self.first.as_deref().filter(|_| len == 0) {
            if file.write_all(first).is_ok() {
                at = first.len() as u64;
            }
        }
        // (what is held in the buffer lands from `at` on)
        let flushed = self.flushed;
        let moved = |x: &mut u64| *x = *x - flushed + at;
        moved(&mut self.handed);
        self.ends.iter_mut().for_each(moved);
        self.flushed = at;
        if self.cut == Found::There {
            self.cut = Found::Gone;
        }
    }
}
