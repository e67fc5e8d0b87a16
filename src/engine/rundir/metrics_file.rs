//! What a run directory's metrics file says of the run without reading it whole: how it ended
//! and its last lines (for `runs`, `view`, `--resume` and a file cut short on a full disk).

use std::fs;
use std::path::Path;

/// The status of the `end` record the metrics file at `path` ends with (`completed`,
/// `stopped`, `quit`), read from its last 64 KiB; None where the run has not ended (a run that
/// ended, though its process, a UI on its summary, may still serve it) or the file is unread.
pub fn end_status(path: &Path) -> Option<String> {
    let v = serde_json::from_slice::<serde_json::Value>(&end_record(path)?).ok()?;
    Some((v.get("status").and_then(|s| s.as_str()).unwrap_or("")).to_string())
}

/// The `end` record the metrics file at `path` ends with, as written (read from its last
/// 64 KiB); None where it ends with another record or is unread.
pub fn end_record(path: &Path) -> Option<Vec<u8>> {
    let last = tail_lines(path).pop()?;
    let v = serde_json::from_slice::<serde_json::Value>(&last).ok()?;
    (v.get("type")?.as_str() == Some("end")).then_some(last)
}

/// The whole lines in the last 64 KiB of the metrics file at `path`, oldest first (none where
/// it is unread): where a run ended, where a file cut short on a full disk stops.
pub fn tail_lines(path: &Path) -> Vec<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL: u64 = 1 << 16;
    let Some(mut f) = open_metrics(path) else {
        return Vec::new();
    };
    let from = f.metadata().map_or(0, |m| m.len()).saturating_sub(TAIL);
    let mut tail = Vec::new();
    let read = (f.seek(SeekFrom::Start(from))).and_then(|_| f.take(TAIL).read_to_end(&mut tail));
    if read.is_err() {
        return Vec::new();
    }
    // (the first line read from within the file is the end of a record, not one)
    let whole = (tail.trim_ascii_end().split(|&b| b == b'\n')).skip(usize::from(from > 0));
    whole.map(<[u8]>::to_vec).collect()
}

/// The metrics file at `path`, opened where it is a regular file (a FIFO or a device in its
/// place is neither waited on nor read forever).
pub fn open_metrics(path: &Path) -> Option<fs::File> {
    let expect = crate::files::read::Expect {
        what: "a metrics file",
        flag: "view",
        max: u64::MAX,
        fix: "",
    };
    crate::files::read::open(path, &expect).ok().map(|(f, _)| f)
}
