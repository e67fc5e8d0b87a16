//! The processes of a run joined over MPI (feature `mpi`). MPI is initialized with
//! MPI_THREAD_SERIALIZED on a thread of its own, which also finalizes it (MPI wants both on one
//! thread); in between, whichever thread exchanges (the main thread at start-up, the worker
//! that leads the process's ranks during the run) makes its MPI calls itself, one thread at a
//! time behind a lock: no hand-over to another thread and back on a step's path. Every exchange
//! is non-blocking underneath and polled, so that a lost peer ends in an error after a deadline
//! instead of a hang. Beside the exchanges, the processes pass their ranks' positions on to
//! process 0 (`positions`), so that a stall there names the rank behind it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Sender};

mod link;
mod positions;

use super::processes::Board;
use super::{CollectiveError, Processes, ReduceTiming};
use link::Link;
use positions::{Channel, Positions};

/// Elements per MPI call (counts are C ints).
const CHUNK: usize = 1 << 28;
/// How long an exchange is polled without sleeping.
const EAGER: Duration = Duration::from_millis(50);
/// The positions thread's ticks in a row that may find the link taken before it waits for it.
const MISSED_MOST: u32 = 10;

struct Flags {
    aborted: AtomicBool,
    reason: Mutex<String>,
    /// How long one exchange may wait for the other processes, in ms.
    patience_ms: AtomicU64,
}

/// This process's place in a job of processes joined over MPI.
pub struct Cluster {
    link: Arc<Mutex<Link>>,
    flags: Arc<Flags>,
    /// The thread that passes positions on between exchanges, and its stop flag.
    sharing: Mutex<Option<(Arc<AtomicBool>, JoinHandle<()>)>>,
    /// The thread that initialized MPI: it finalizes MPI once the sender is dropped.
    owner: Option<(Sender<()>, JoinHandle<()>)>,
    index: usize,
    count: usize,
}

/// What the MPI thread learned at start-up.
struct Joined {
    index: usize,
    count: usize,
    channel: Channel,
}

/// How long another process that failed and told process 0 so waits for it to end the job
/// (with the failure in the run's records) before ending it itself.
const TOLD_WAIT: Duration = Duration::from_secs(3);

/// How long process 0 waits for the others to reach MPI before it says so (and again after as
/// long).
const JOIN_WAIT_SAID: Duration = Duration::from_secs(30);

impl Cluster {
    /// Initializes MPI on a thread of its own (this process was started by a launcher); where
    /// `lead` (process 0, by the launcher's word) waits long for the others to reach MPI, it
    /// says so every `JOIN_WAIT_SAID`: nothing else shows the run yet.
    pub fn join(lead: bool) -> Result<Cluster, String> {
        let (ready_tx, ready_rx) = bounded(1);
        let (end_tx, end_rx) = bounded::<()>(1);
        let thread = std::thread::Builder::new()
            .name("mpi".into())
            .spawn(move || link::own(ready_tx, end_rx))
            .map_err(|e| format!("cannot start the MPI thread: {e}"))?;
        let start = std::time::Instant::now();
        let said = |waited: Duration| {
            crate::tell!(
                "waiting for the run's other processes to start MPI ({:.0} s so far): every process waits until all have; one stopped (Ctrl-Z, kill -STOP: kill -CONT continues it) or that failed to start keeps them waiting (the launcher's output says why; Ctrl-C stops the run)",
                waited.as_secs_f64()
            )
        };
        let ready = loop {
            match ready_rx.recv_timeout(JOIN_WAIT_SAID) {
                Err(crossbeam_channel::RecvTimeoutError::Timeout) if lead => said(start.elapsed()),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                Ok(r) => break Ok(r),
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break Err(()),
            }
        };
        let joined = match ready {
            Ok(Ok(j)) => j,
            Ok(Err(e)) => {
                // it finalizes MPI on its way out: let it, before the process ends
                drop(end_tx);
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => return Err("MPI did not start (its thread ended)".into()),
        };
        let flags = Arc::new(Flags {
            aborted: AtomicBool::new(false),
            reason: Mutex::new(String::new()),
            patience_ms: AtomicU64::new(u64::MAX),
        });
        let positions = Positions::new(joined.channel, joined.index, joined.count);
        Ok(Cluster {
            link: Arc::new(Mutex::new(Link::new(flags.clone(), positions))),
            flags,
            sharing: Mutex::new(None),
            owner: Some((end_tx, thread)),
            index: joined.index,
            count: joined.count,
        })
    }

    /// Ends the whole job after a failure of this process (MPI_Abort): the launcher stops the
    /// other processes, which would otherwise wait for this one. Another process tells process 0
    /// `told` first (its rank's, where known, and its error), and gives it a moment to record it
    /// as the run's failure and end the job itself. Does not return.
    pub fn fail(&self, code: i32, told: Option<(Option<usize>, &str)>) -> ! {
        // an exchange still in flight gives up at once and lets go of MPI
        self.abort("this process failed");
        let t = Instant::now();
        let mut held = loop {
            match self.link.try_lock() {
                Ok(l) => break Some(l),
                Err(std::sync::TryLockError::Poisoned(p)) => break Some(p.into_inner()),
                Err(_) if t.elapsed() > Duration::from_secs(5) => break None,
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        };
        if let (Some(l), Some((rank, text))) = (held.as_mut(), told.filter(|_| self.index != 0)) {
            l.positions.tell_failure(rank, text, Duration::from_secs(2));
            std::thread::sleep(TOLD_WAIT);
        }
        // SAFETY: MPI is initialized; MPI_Abort ends the job (after 5 s without the lock it is
        // called regardless: ending the job matters more than serializing this last call)
        unsafe { link::abort(code) };
        drop(held);
        // should MPI_Abort return, end this process here
        std::thread::sleep(Duration::from_secs(10));
        std::process::exit(code)
    }

    /// Open MPI's own MPI_Allreduce of `len` floats, `iters` times: the time (benchmarks).
    pub fn native_all_reduce(&self, len: usize, iters: usize) -> Result<Duration, CollectiveError> {
        self.lock()?.native(len, iters)
    }

    /// MPI, for this thread alone, unless this process has failed.
    fn lock(&self) -> Result<MutexGuard<'_, Link>, CollectiveError> {
        if let Some(why) = self.abort_reason() {
            return Err(CollectiveError::Aborted(why));
        }
        self.link
            .lock()
            .map_err(|_| CollectiveError::Aborted("a thread failed inside an MPI call".into()))
    }
}

impl Drop for Cluster {
    /// A run that ended normally: the positions still on their way are taken (no send is left
    /// unmatched), then MPI is finalized (every process does both at the same point). After an abandoned exchange the others are still inside it: finalizing would wait for
    /// them, so the job is ended instead.
    fn drop(&mut self) {
        let sharing = self.sharing.get_mut().ok().and_then(|s| s.take());
        if let Some((stop, thread)) = sharing {
            stop.store(true, Ordering::Relaxed);
            let _ = thread.join();
        }
        let aborted = self.flags.aborted.load(Ordering::Acquire);
        let broken = match self.link.lock() {
            Ok(mut l) if !l.broken() => {
                if !aborted {
                    l.positions.end();
                }
                false
            }
            _ => true,
        };
        if broken {
            // SAFETY: MPI is initialized, and no other thread of this process calls it any more
            unsafe { link::abort(1) };
        }
        if let Some((end, thread)) = self.owner.take() {
            drop(end);
            let _ = thread.join();
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

    fn all_reduce_sum(&self, buf: &mut Vec<f32>) -> Result<ReduceTiming, CollectiveError> {
        self.lock()?.all_reduce(buf)
    }

    fn broadcast_bytes(&self, buf: &mut [u8], root: usize) -> Result<Duration, CollectiveError> {
        self.lock()?.broadcast(buf, root)
    }

    fn all_gather_bytes(&self, mine: &[u8], out: &mut [u8]) -> Result<Duration, CollectiveError> {
        if out.len() != mine.len() * self.count {
            return Err(CollectiveError::LengthMismatch {
                rank: self.index,
                got: out.len(),
                want: mine.len() * self.count,
            });
        }
        self.lock()?.all_gather(mine, out)
    }

    fn barrier(&self) -> Result<Duration, CollectiveError> {
        self.lock()?.barrier()
    }

    fn share_samples(&self, samples: Arc<crate::comm::samples::Samples>) {
        if let Ok(mut l) = self.link.lock() {
            l.positions.share_samples(samples);
        }
    }

    fn share_positions(&self, board: Arc<dyn Board>, local: std::ops::Range<usize>) {
        let Ok(mut l) = self.link.lock() else {
            return;
        };
        l.positions.share(board, local);
        drop(l);
        let Ok(mut sharing) = self.sharing.lock() else {
            return;
        };
        if self.count < 2 || sharing.is_some() {
            return;
        }
        // between exchanges (a rank stuck in its step, a process waiting for its own ranks),
        // whenever MPI is free
        let (link, stop) = (self.link.clone(), Arc::new(AtomicBool::new(false)));
        let halt = stop.clone();
        let flags = self.flags.clone();
        let thread = std::thread::Builder::new()
            .name("positions".into())
            .spawn(move || {
                // (a process whose exchanges hold the link nearly all the time, waiting for a
                // slower one within their eager polls, which do not pass positions on: after
                // a second of misses this waits for the link between two exchanges, each tick
                // until the link is found free again)
                let mut missed = 0;
                while !halt.load(Ordering::Relaxed) && !flags.aborted.load(Ordering::Acquire) {
                    std::thread::sleep(positions::EVERY);
                    let held = match link.try_lock() {
                        Ok(l) => {
                            missed = 0;
                            Some(l)
                        }
                        Err(std::sync::TryLockError::WouldBlock) if missed >= MISSED_MOST => {
                            link.lock().ok()
                        }
                        Err(_) => {
                            missed += 1;
                            None
                        }
                    };
                    if let Some(mut l) = held.filter(|l| !l.broken()) {
                        let _ = l.tick();
                    }
                }
            });
        // without the thread, positions still pass on while exchanges wait
        if let Ok(thread) = thread {
            *sharing = Some((stop, thread));
        }
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
