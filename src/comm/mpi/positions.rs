//! Where each rank is, passed on to process 0 beside the collectives: every other process sends
//! its own ranks' positions (point to point, on a communicator of their own) whenever they
//! change, at most every `EVERY`; process 0 takes them onto its board. A stall seen there then
//! names the rank that holds the others up: a process waiting in an exchange has said so, one
//! stuck in its step (or stopped) has not. At the end every other process sends `END` after its
//! last position, and process 0 takes everything up to each `END`, so that no send is left
//! unmatched when MPI is finalized.

use std::ops::Range;
use std::os::raw::c_int;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mpi::ffi;

use crate::comm::processes::Board;
use crate::comm::samples::Samples;

/// How often a process passes its positions on, at most.
pub(super) const EVERY: Duration = Duration::from_millis(100);
/// How long the end waits for the other processes' last messages.
const DRAIN: Duration = Duration::from_secs(60);

const TAG_POSITIONS: c_int = 1;
const TAG_END: c_int = 2;
/// Another process's failure: its rank (`u64::MAX`: not known), then its error's text.
const TAG_FAILED: c_int = 3;
/// Another process's ranks' newest device samples (`comm::samples`).
const TAG_SAMPLES: c_int = 4;

/// A failure as words: the rank, then the text (`comm::words`).
fn failure_words(rank: Option<usize>, text: &str) -> Vec<u64> {
    let mut words = vec![rank.map_or(u64::MAX, |r| r as u64)];
    words.extend(crate::comm::words::text_words(text));
    words
}

/// The failure `failure_words` made (a message cut short or of another version: what it holds).
fn failure_of(words: &[u64]) -> (Option<usize>, String) {
    let rank = words
        .first()
        .filter(|&&r| r != u64::MAX)
        .map(|&r| r as usize);
    let text = crate::comm::words::text_of(words.get(1..).unwrap_or_default()).0;
    (rank, text)
}

/// A communicator of its own for the positions (a duplicate of the world's, made by every
/// process at start-up), so that their messages never meet anything else.
#[derive(Clone, Copy)]
pub(super) struct Channel(pub(super) ffi::MPI_Comm);

// SAFETY: an MPI handle, used by one thread at a time (the link's lock, MPI_THREAD_SERIALIZED)
unsafe impl Send for Channel {}

/// A send under way: its buffer lives until the request completes.
struct Sending {
    req: ffi::MPI_Request,
    _words: Vec<u64>,
}

// SAFETY: as `Channel`
unsafe impl Send for Sending {}

/// This process's side of passing positions on.
pub(super) struct Positions {
    channel: Channel,
    index: usize,
    count: usize,
    /// Where the positions are read (other processes) or taken (process 0).
    board: Option<(Arc<dyn Board>, Range<usize>)>,
    sending: Option<Sending>,
    /// The words of the last send (rank, word pairs).
    sent: Vec<u64>,
    last: Option<Instant>,
    /// Process 0: the processes whose `END` has come.
    ended: Vec<bool>,
    /// The device samples sent (other processes) or heard (process 0).
    samples: Option<Arc<Samples>>,
    /// The last tick sent samples: the next one is the positions'.
    samples_sent: bool,
}

impl Positions {
    pub(super) fn new(channel: Channel, index: usize, count: usize) -> Positions {
        Positions {
            channel,
            index,
            count,
            board: None,
            sending: None,
            sent: Vec::new(),
            last: None,
            ended: vec![false; count],
            samples: None,
            samples_sent: false,
        }
    }

    /// From now on the samples posted on `samples` are sent (other processes), or the others'
    /// heard there (process 0).
    pub(super) fn share_samples(&mut self, samples: Arc<Samples>) {
        self.samples = Some(samples);
    }

    /// From now on this process's `local` ranks' positions are on `board` (and, on process 0,
    /// the others' are taken onto it).
    pub(super) fn share(&mut self, board: Arc<dyn Board>, local: Range<usize>) {
        self.board = Some((board, local));
    }

    /// Passes positions on, or takes them, where `EVERY` has passed since the last time; on
    /// process 0, another process's failure it told of (its rank, where known, and its error).
    pub(super) fn tick(&mut self) -> Option<(Option<usize>, String)> {
        if self.last.is_some_and(|t| t.elapsed() < EVERY) {
            return None;
        }
        self.last = Some(Instant::now());
        if self.index == 0 {
            return self.take();
        }
        // (one send at a time: fresh samples take turns with the positions, which a stall's
        // naming of the rank behind it needs, however often samples come)
        self.samples_sent = !self.samples_sent && self.send_samples();
        if !self.samples_sent {
            self.send_changed();
        }
        None
    }

    /// Other processes: the samples posted since the last send, where that send is done;
    /// whether they went.
    fn send_samples(&mut self) -> bool {
        if self.samples.is_none() || !self.sent_done() {
            return false;
        }
        match self.samples.as_ref().and_then(|s| s.take_fresh()) {
            Some(words) => {
                self.send(words, TAG_SAMPLES);
                true
            }
            None => false,
        }
    }

    /// Another process: tells process 0 of this process's failure (`rank`'s where known, else
    /// its first rank's where its ranks are shared), so that the run's records say it; waits
    /// `wait` at most for the send.
    pub(super) fn tell_failure(&mut self, rank: Option<usize>, text: &str, wait: Duration) {
        // (a failure of no rank is its process's: the run's records show its first rank's)
        let rank = rank.or(self.board.as_ref().map(|(_, local)| local.start));
        let start = Instant::now();
        while !self.sent_done() && start.elapsed() < wait {
            std::thread::sleep(Duration::from_millis(1));
        }
        if self.index == 0 || self.sending.is_some() {
            return;
        }
        self.send(failure_words(rank, text), TAG_FAILED);
        while !self.sent_done() && start.elapsed() < wait {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Other processes: this process's positions, where they changed since the last send and
    /// that send is done.
    fn send_changed(&mut self) {
        if !self.sent_done() {
            return;
        }
        let Some((board, local)) = &self.board else {
            return;
        };
        let words: Vec<u64> = local
            .clone()
            .flat_map(|r| [r as u64, board.word(r)])
            .collect();
        if words == self.sent {
            return;
        }
        self.sent.clone_from(&words);
        self.send(words, TAG_POSITIONS);
    }

    fn send(&mut self, words: Vec<u64>, tag: c_int) {
        let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: MPI is initialized and this thread holds the link; `words` is kept with the
        // request until it completes
        unsafe {
            ffi::MPI_Isend(
                words.as_ptr().cast(),
                words.len() as c_int,
                ffi::RSMPI_UINT64_T,
                0,
                tag,
                self.channel.0,
                &mut req,
            );
        }
        self.sending = Some(Sending { req, _words: words });
    }

    /// Whether no send is under way (any that was has completed).
    fn sent_done(&mut self) -> bool {
        let Some(s) = &mut self.sending else {
            return true;
        };
        let mut done: c_int = 0;
        // SAFETY: a live request of this process; its buffer is held beside it
        unsafe { ffi::MPI_Test(&mut s.req, &mut done, ffi::RSMPI_STATUS_IGNORE) };
        if done != 0 {
            self.sending = None;
        }
        done != 0
    }

    /// Process 0: every message that has come, onto the board (`END`s noted); the first
    /// failure another process told of.
    fn take(&mut self) -> Option<(Option<usize>, String)> {
        let mut failed = None;
        loop {
            let mut there: c_int = 0;
            let mut status = empty_status();
            // SAFETY: MPI is initialized and this thread holds the link
            unsafe {
                ffi::MPI_Iprobe(
                    ffi::RSMPI_ANY_SOURCE,
                    ffi::RSMPI_ANY_TAG,
                    self.channel.0,
                    &mut there,
                    &mut status,
                );
            }
            if there == 0 {
                return failed;
            }
            let mut n: c_int = 0;
            // SAFETY: a status Iprobe filled
            unsafe { ffi::MPI_Get_count(&status, ffi::RSMPI_UINT64_T, &mut n) };
            let mut words = vec![0u64; n.max(0) as usize];
            // SAFETY: the probed message, received by this thread alone (it holds the link),
            // into a buffer of its length
            unsafe {
                ffi::MPI_Recv(
                    words.as_mut_ptr().cast(),
                    n.max(0),
                    ffi::RSMPI_UINT64_T,
                    status.MPI_SOURCE,
                    status.MPI_TAG,
                    self.channel.0,
                    ffi::RSMPI_STATUS_IGNORE,
                );
            }
            if status.MPI_TAG == TAG_END {
                if let Some(e) = self.ended.get_mut(status.MPI_SOURCE as usize) {
                    *e = true;
                }
            } else if status.MPI_TAG == TAG_SAMPLES {
                if let Some(s) = &self.samples {
                    s.heard(&words);
                }
            } else if status.MPI_TAG == TAG_FAILED {
                let (rank, text) = failure_of(&words);
                let said = format!("process {} failed: {text}", status.MPI_SOURCE);
                failed = failed.or(Some((rank, said)));
            } else if let Some((board, _)) = &self.board {
                for pair in words.chunks_exact(2) {
                    board.seen(pair[0] as usize, pair[1]);
                }
            }
        }
    }

    /// The end of the run (every process at the same point): the other processes send `END`
    /// and see their sends completed, process 0 takes every message up to each `END`; each
    /// waits at most `DRAIN` (then MPI's finalize is left to cope).
    pub(super) fn end(&mut self) {
        let start = Instant::now();
        if self.index == 0 {
            while (1..self.count).any(|p| !self.ended[p]) && start.elapsed() < DRAIN {
                let _ = self.take();
                std::thread::sleep(Duration::from_millis(1));
            }
            return;
        }
        while !self.sent_done() && start.elapsed() < DRAIN {
            std::thread::sleep(Duration::from_millis(1));
        }
        if self.sending.is_some() {
            return;
        }
        self.send(Vec::new(), TAG_END);
        while !self.sent_done() && start.elapsed() < DRAIN {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn empty_status() -> ffi::MPI_Status {
    // SAFETY: a plain C struct of integers; all zero is a valid value
    unsafe { std::mem::zeroed() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_goes_as_words_and_comes_back_whole() {
        let text = "worker for rank 3 panicked at step 500: naïve – ok";
        assert_eq!(
            failure_of(&failure_words(Some(3), text)),
            (Some(3), text.to_string())
        );
        assert_eq!(failure_of(&failure_words(None, "")), (None, String::new()));
        // a message cut short says what it holds
        let words = failure_words(Some(1), "abcdefghij");
        assert_eq!(failure_of(&words[..3]), (Some(1), "abcdefgh".to_string()));
        assert_eq!(failure_of(&[]), (None, String::new()));
    }
}
