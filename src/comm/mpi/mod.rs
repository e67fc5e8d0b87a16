//! The processes of a run joined over MPI (feature `mpi`): one thread of this process owns MPI
//! (it initializes it, makes every call and finalizes it), and the rest of the program hands it
//! requests. Every exchange is non-blocking underneath and polled, so that a lost peer ends in
//! an error after a deadline instead of a hang.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded, Sender};

mod link;

use super::{CollectiveError, Processes, ReduceTiming};

/// Elements per MPI call (counts are C ints).
const CHUNK: usize = 1 << 28;
/// How long a hand-over between the MPI thread and the others is waited for awake.
const HANDOVER: Duration = Duration::from_micros(300);
/// How long an exchange is polled without sleeping.
const EAGER: Duration = Duration::from_millis(50);

enum Request {
    AllReduce(
        Vec<f32>,
        Sender<Result<(Vec<f32>, ReduceTiming), CollectiveError>>,
    ),
    Broadcast(
        Vec<u8>,
        usize,
        Sender<Result<(Vec<u8>, Duration), CollectiveError>>,
    ),
    AllGather(
        Vec<u8>,
        usize,
        Sender<Result<(Vec<u8>, Duration), CollectiveError>>,
    ),
    Barrier(Sender<Result<Duration, CollectiveError>>),
    /// Open MPI's own MPI_Allreduce of this many floats, this many times (benchmarks).
    Native(usize, usize, Sender<Result<Duration, CollectiveError>>),
    Abort(i32),
}

struct Flags {
    aborted: AtomicBool,
    reason: Mutex<String>,
    /// How long one exchange may wait for the other processes, in ms.
    patience_ms: AtomicU64,
}

/// This process's place in a job of processes joined over MPI.
pub struct Cluster {
    tx: Option<Sender<Request>>,
    thread: Option<JoinHandle<()>>,
    flags: Arc<Flags>,
    /// The all-reduce's buffer on its way to the MPI thread and back.
    staging: Mutex<Vec<f32>>,
    index: usize,
    count: usize,
}

/// What the MPI thread learned at start-up.
struct Joined {
    index: usize,
    count: usize,
}

impl Cluster {
    /// Initializes MPI on a thread of its own (this process was started by a launcher).
    pub fn join() -> Result<Cluster, String> {
        let (tx, rx) = unbounded();
        let (ready_tx, ready_rx) = bounded(1);
        let flags = Arc::new(Flags {
            aborted: AtomicBool::new(false),
            reason: Mutex::new(String::new()),
            patience_ms: AtomicU64::new(u64::MAX),
        });
        let f = flags.clone();
        let thread = std::thread::Builder::new()
            .name("mpi".into())
            .spawn(move || link::serve(rx, ready_tx, f))
            .map_err(|e| format!("cannot start the MPI thread: {e}"))?;
        let joined = ready_rx
            .recv()
            .map_err(|_| "MPI did not start (its thread ended)".to_string())??;
        Ok(Cluster {
            tx: Some(tx),
            thread: Some(thread),
            flags,
            staging: Mutex::new(Vec::new()),
            index: joined.index,
            count: joined.count,
        })
    }

    /// Ends the whole job after a failure of this process (MPI_Abort): the launcher stops the
    /// other processes, which would otherwise wait for this one. Does not return.
    pub fn fail(&self, code: i32) -> ! {
        // an exchange still in flight gives up at once, so that the MPI thread takes this next
        self.abort("this process failed");
        if let Some(tx) = &self.tx {
            let _ = tx.send(Request::Abort(code));
        }
        // the MPI thread ends the process; should it not, end it here
        std::thread::sleep(Duration::from_secs(10));
        std::process::exit(code)
    }

    /// Open MPI's own MPI_Allreduce of `len` floats, `iters` times: the time (benchmarks).
    pub fn native_all_reduce(&self, len: usize, iters: usize) -> Result<Duration, CollectiveError> {
        self.ask(|r| Request::Native(len, iters, r))
    }

    fn ask<T>(
        &self,
        make: impl FnOnce(Sender<Result<T, CollectiveError>>) -> Request,
    ) -> Result<T, CollectiveError> {
        if let Some(why) = self.abort_reason() {
            return Err(CollectiveError::Aborted(why));
        }
        let (reply, answer) = bounded(1);
        self.tx
            .as_ref()
            .and_then(|tx| tx.send(make(reply)).ok())
            .ok_or_else(|| CollectiveError::Aborted("MPI has ended in this process".into()))?;
        // the answer usually comes within microseconds: wait for it awake a little first
        let t = Instant::now();
        while t.elapsed() < HANDOVER {
            match answer.try_recv() {
                Ok(r) => return r,
                Err(crossbeam_channel::TryRecvError::Empty) => std::thread::yield_now(),
                Err(_) => break,
            }
        }
        answer
            .recv()
            .map_err(|_| CollectiveError::Aborted("the MPI thread ended".into()))?
    }
}

impl Drop for Cluster {
    /// A run that ended normally: MPI is finalized (every process does it at the same point).
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Processes for Cluster {
    fn index(&self) -> usize {
        self.index
    }

    fn count(&self) -> usize {
        self.count
    }

    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<ReduceTiming, CollectiveError> {
        // the buffer handed to the MPI thread keeps its memory from call to call
        let mut staged = self
            .staging
            .lock()
            .map(|mut s| std::mem::take(&mut *s))
            .unwrap_or_default();
        staged.clear();
        staged.extend_from_slice(buf);
        let (out, t) = self.ask(|r| Request::AllReduce(staged, r))?;
        buf.copy_from_slice(&out);
        if let Ok(mut s) = self.staging.lock() {
            *s = out;
        }
        Ok(t)
    }

    fn broadcast_bytes(&self, buf: &mut [u8], root: usize) -> Result<Duration, CollectiveError> {
        let (out, t) = self.ask(|r| Request::Broadcast(buf.to_vec(), root, r))?;
        buf.copy_from_slice(&out);
        Ok(t)
    }

    fn all_gather_bytes(&self, mine: &[u8], out: &mut [u8]) -> Result<Duration, CollectiveError> {
        if out.len() != mine.len() * self.count {
            return Err(CollectiveError::LengthMismatch {
                rank: self.index,
                got: out.len(),
                want: mine.len() * self.count,
            });
        }
        let (all, t) = self.ask(|r| Request::AllGather(mine.to_vec(), self.count, r))?;
        out.copy_from_slice(&all);
        Ok(t)
    }

    fn barrier(&self) -> Result<Duration, CollectiveError> {
        self.ask(Request::Barrier)
    }

    fn set_patience(&self, d: Duration) {
        let ms = d.as_millis().min(u64::MAX as u128) as u64;
        self.flags.patience_ms.store(ms, Ordering::Relaxed);
    }

    fn abort(&self, reason: &str) {
        if let Ok(mut r) = self.flags.reason.lock() {
            if r.is_empty() {
                *r = reason.to_string();
            }
        }
        self.flags.aborted.store(true, Ordering::Release);
    }

    fn abort_reason(&self) -> Option<String> {
        self.flags.aborted.load(Ordering::Acquire).then(|| {
            self.flags
                .reason
                .lock()
                .map(|r| r.clone())
                .unwrap_or_default()
        })
    }
}
