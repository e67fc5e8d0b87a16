//! Writes a metrics file as a run goes: the lines `records` builds, in order. The `Recorder`
//! flushes lifecycle records and telemetry as they are written, so a reader of a running run's
//! file (`view`) lags at most `--sample-interval`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::records::Line;

#[derive(Debug, thiserror::Error)]
#[error("cannot write metrics file {path}: {source}; pick a writable path for --metrics-out")]
pub struct MetricsError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

pub struct MetricsWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

/// Whether the file's first line is a metrics file's run record (what a run may replace).
fn holds_a_run(path: &Path) -> bool {
    use std::io::{BufRead, Read};
    let Ok(f) = File::open(path) else {
        return false;
    };
    let mut first = Vec::new();
    let read = std::io::BufReader::new(f.take(1 << 16)).read_until(b'\n', &mut first);
    read.is_ok()
        && serde_json::from_slice::<serde_json::Value>(&first)
            .is_ok_and(|v| v.get("type").and_then(|t| t.as_str()) == Some("run"))
}

impl MetricsWriter {
    /// Checks that `path` can be written, without creating or truncating anything, so a run
    /// can refuse a bad path before it starts.
    pub fn preflight(path: &Path) -> Result<(), MetricsError> {
        let err = |source| MetricsError {
            path: path.to_path_buf(),
            source,
        };
        let parent = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !parent.is_dir() {
            return Err(err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("directory {} does not exist", parent.display()),
            )));
        }
        let Ok(meta) = std::fs::metadata(path) else {
            return Ok(());
        };
        if meta.is_file() && meta.len() > 0 && !holds_a_run(path) {
            return Err(err(std::io::Error::other(
                "it holds something other than a metrics file (its first line is not a run record), which the run would replace; give another path or remove it",
            )));
        }
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_fifo() {
            // (a FIFO is checked as it is opened: opening it here would end its reader's input)
            std::fs::OpenOptions::new()
                .append(true)
                .open(path)
                .map_err(err)?;
        }
        Ok(())
    }

    /// Creates (or replaces) the file. A FIFO is opened without waiting for a reader: one
    /// that no process reads is an error, not a start held forever.
    pub fn create(path: &Path) -> Result<MetricsWriter, MetricsError> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
        let err = |source| MetricsError {
            path: path.to_path_buf(),
            source,
        };
        let fifo = std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo());
        let f = match fifo {
            false => File::create(path).map_err(err)?,
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
                // then written as a file: a slow reader slows the writer, loses nothing
                // SAFETY: fcntl on a descriptor this function owns, clearing one status flag
                unsafe {
                    let flags = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
                    libc::fcntl(f.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
                }
                f
            }
        };
        Ok(MetricsWriter {
            path: path.to_path_buf(),
            out: BufWriter::new(f),
        })
    }

    /// The file written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One record (buffered; `flush` makes it visible to readers).
    pub fn write(&mut self, line: &Line) -> Result<(), MetricsError> {
        self.out
            .write_all(line.as_bytes())
            .map_err(|source| MetricsError {
                path: self.path.clone(),
                source,
            })
    }

    pub fn flush(&mut self) -> Result<(), MetricsError> {
        self.out.flush().map_err(|source| MetricsError {
            path: self.path.clone(),
            source,
        })
    }
}
