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
        if path.exists() {
            std::fs::OpenOptions::new()
                .append(true)
                .open(path)
                .map_err(err)?;
        }
        Ok(())
    }

    pub fn create(path: &Path) -> Result<MetricsWriter, MetricsError> {
        let f = File::create(path).map_err(|source| MetricsError {
            path: path.to_path_buf(),
            source,
        })?;
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
