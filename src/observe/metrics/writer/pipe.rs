//! A metrics file that is a pipe (a FIFO, `--metrics-out >(...)`): written by a thread of its
//! own, so that a reader that stalls holds up neither the run's other records (its run
//! directory's file, the log, Prometheus, TensorBoard) nor its end. What the reader has not
//! taken is held, up to `HELD_MOST` bytes; whole records past that are dropped and counted
//! (`take_dropped`), and at the end it is given `END_WAIT` to be read.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

/// The most bytes held for a reader that has not taken them.
const HELD_MOST: u64 = 64 << 20;

/// How long the records held at the run's end wait for the reader.
const END_WAIT: Duration = Duration::from_secs(5);

pub(super) struct Pipe {
    /// What it is (said where its reader left records unread at the end).
    path: PathBuf,
    /// Whole records to the writing thread (closed at the end).
    to_thread: Option<Sender<Vec<u8>>>,
    /// Bytes handed to the thread and not yet written.
    held: Arc<AtomicU64>,
    /// The write that failed (the reader gone), to be said by the next write.
    failed: Arc<Mutex<Option<std::io::Error>>>,
    /// Closed when the thread ends.
    ended: Receiver<()>,
    /// Bytes of a record not yet ended by its newline (records are handed on whole).
    partial: Vec<u8>,
    /// Records dropped for a reader that fell behind, and those of them said.
    dropped: u64,
    said: u64,
}

impl Pipe {
    pub(super) fn new(path: PathBuf, mut f: File) -> std::io::Result<Pipe> {
        let (to_thread, from_writer) = crossbeam_channel::unbounded::<Vec<u8>>();
        let (ended_tx, ended) = crossbeam_channel::bounded::<()>(0);
        let held = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(Mutex::new(None));
        let (held_t, failed_t) = (held.clone(), failed.clone());
        std::thread::Builder::new()
            .name("metrics-pipe".into())
            .spawn(move || {
                let _ended = ended_tx;
                for bytes in from_writer {
                    if let Err(e) = f.write_all(&bytes) {
                        *failed_t.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                        return;
                    }
                    held_t.fetch_sub(bytes.len() as u64, Ordering::Relaxed);
                }
            })?;
        Ok(Pipe {
            path,
            to_thread: Some(to_thread),
            held,
            failed,
            ended,
            partial: Vec::new(),
            dropped: 0,
            said: 0,
        })
    }

    /// The write that failed on the thread (the reader gone), once.
    fn failure(&self) -> std::io::Result<()> {
        match self.failed.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Waits until the reader has taken every record held, or `deadline`.
    pub(super) fn drain(&self, deadline: std::time::Instant) {
        while self.held.load(Ordering::Relaxed) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Records dropped for a reader that fell behind since the last call: how many.
    pub(super) fn take_dropped(&mut self) -> Option<u64> {
        let new = self.dropped - self.said;
        self.said = self.dropped;
        (new > 0).then_some(new)
    }
}

impl Write for Pipe {
    /// Takes `buf` whole: its whole records go to the thread, or are dropped where the reader
    /// holds too many back; the failure of an earlier write is said here.
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.failure()?;
        self.partial.extend_from_slice(buf);
        let Some(end) = self.partial.iter().rposition(|&b| b == b'\n') else {
            return Ok(buf.len());
        };
        let rest = self.partial.split_off(end + 1);
        let whole = std::mem::replace(&mut self.partial, rest);
        let len = whole.len() as u64;
        if self.held.load(Ordering::Relaxed) + len > HELD_MOST {
            self.dropped += whole.iter().filter(|&&b| b == b'\n').count() as u64;
            return Ok(buf.len());
        }
        self.held.fetch_add(len, Ordering::Relaxed);
        if let Some(tx) = &self.to_thread {
            // (the thread ends only on a failure, said by the next write)
            let _ = tx.send(whole);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.failure()
    }
}

impl Drop for Pipe {
    /// The records held are given `END_WAIT` to be read; a reader that has not taken them all
    /// by then does not keep the process from ending (said, with what it had not read; under
    /// the Terminal UI the line goes to its screen, which closes: the log's runs say it).
    fn drop(&mut self) {
        drop(self.to_thread.take());
        if let Err(crossbeam_channel::RecvTimeoutError::Timeout) = self.ended.recv_timeout(END_WAIT)
        {
            crate::tell!(
                "warning: metrics file {}: its reader (of the FIFO or pipe) had not taken the run's last {} after {} s: the run ends without waiting for it",
                self.path.display(),
                crate::text::bytes(self.held.load(Ordering::Relaxed)),
                END_WAIT.as_secs()
            );
        }
    }
}
