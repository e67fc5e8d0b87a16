//! MPI calls: initializing and finalizing on the MPI thread (`own`), and the exchanges, made by
//! whichever thread holds the `Link` (non-blocking collectives polled to completion, or given up
//! after the patience).

use std::ffi::c_void;
use std::os::raw::c_int;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use mpi::ffi;

use super::positions::{Channel, Positions};
use super::{Flags, Joined, CHUNK, EAGER};

/// Sums shorter than this (floats) are "small": stats, speeds, evaluation sums.
const SMALL: usize = 4096;
use crate::comm::{CollectiveError, ReduceTiming};

/// The MPI thread: initializes MPI, says who this process is once every process has reached
/// MPI, then waits until `end` closes and finalizes it.
pub(super) fn own(ready: Sender<Result<Joined, String>>, end: Receiver<()>) {
    let Some((universe, threading)) = mpi::initialize_with_threading(mpi::Threading::Serialized)
    else {
        let _ = ready.send(Err("MPI was already initialized".into()));
        return;
    };
    if threading < mpi::Threading::Serialized {
        // every process meets this: each says so, and MPI is finalized together
        let _ = ready.send(Err(format!(
            "the MPI library offers only {threading:?} thread support; mgtop-train needs MPI_THREAD_SERIALIZED (Open MPI and MPICH builds give it)"
        )));
        return;
    }
    let (mut rank, mut size) = (0 as c_int, 0 as c_int);
    // SAFETY: MPI is initialized on this thread; the out-pointers are live locals
    unsafe {
        ffi::MPI_Comm_rank(world(), &mut rank);
        ffi::MPI_Comm_size(world(), &mut size);
    }
    // every process has reached MPI before any exchange of the run (no patience yet: a process
    // may be slow to start)
    let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: MPI is initialized; the request is waited for here
    unsafe {
        ffi::MPI_Ibarrier(world(), &mut req);
        ffi::MPI_Wait(&mut req, ffi::RSMPI_STATUS_IGNORE);
    }
    // the ranks' positions travel on a communicator of their own
    let mut channel = world();
    // SAFETY: MPI is initialized; every process makes this call here
    unsafe { ffi::MPI_Comm_dup(world(), &mut channel) };
    let _ = ready.send(Ok(Joined {
        index: rank as usize,
        count: size as usize,
        channel: Channel(channel),
    }));
    // the Cluster calls MPI from other threads meanwhile; it drops the sender at the end
    let _ = end.recv();
    drop(universe);
}

/// Ends the job (MPI_Abort).
///
/// # Safety
/// MPI is initialized; no other thread of this process is inside an MPI call (or the job must
/// end regardless).
pub(super) unsafe fn abort(code: i32) {
    ffi::MPI_Abort(world(), code);
}

/// The process's exchanges over MPI; the `Cluster` lends it to one thread at a time.
pub(super) struct Link {
    flags: Arc<Flags>,
    /// Why an exchange was abandoned: its buffers are leaked (MPI may still use them) and no
    /// later exchange is started.
    broken: Option<CollectiveError>,
    /// The all-reduce's output buffers, swapped with the caller's each call: [0] for gradients,
    /// [1] for small sums (so that these never take the gradients' allocation away).
    scratch: [Vec<f32>; 2],
    /// The ranks' positions, passed on to process 0 while exchanges wait (and between them,
    /// from the `Cluster`'s thread).
    pub(super) positions: Positions,
}

fn world() -> ffi::MPI_Comm {
    // SAFETY: a constant handle, read after MPI_Init
    unsafe { ffi::RSMPI_COMM_WORLD }
}

fn count(n: usize) -> c_int {
    debug_assert!(n <= CHUNK);
    n as c_int
}

impl Link {
    pub(super) fn new(flags: Arc<Flags>, positions: Positions) -> Link {
        Link {
            flags,
            broken: None,
            scratch: [Vec::new(), Vec::new()],
            positions,
        }
    }

    pub(super) fn broken(&self) -> bool {
        self.broken.is_some()
    }

    /// Passes positions on or takes them (`Positions::tick`); another process's failure told
    /// of breaks the link with it (the next exchange fails with it, or this one): `Some` then.
    pub(super) fn tick(&mut self) -> Option<CollectiveError> {
        let (rank, message) = self.positions.tick()?;
        let e = CollectiveError::PeerFailed { rank, message };
        self.broken = Some(e.clone());
        Some(e)
    }

    /// Polls a started request to completion, or gives up after the patience (or once this
    /// process is aborted). A request given up on may still use its buffers: the caller must
    /// leak them.
    fn finish(&mut self, mut req: ffi::MPI_Request) -> Result<(), CollectiveError> {
        let start = Instant::now();
        let patience = Duration::from_millis(self.flags.patience_ms.load(Ordering::Relaxed));
        let mut polls = 0u32;
        loop {
            let mut done: c_int = 0;
            // SAFETY: `req` is a live request of this process; its buffers outlive it
            unsafe {
                ffi::MPI_Test(&mut req, &mut done, ffi::RSMPI_STATUS_IGNORE);
            }
            if done != 0 {
                return Ok(());
            }
            let why = if self.flags.aborted.load(Ordering::Acquire) {
                let r = self
                    .flags
                    .reason
                    .lock()
                    .map(|r| r.clone())
                    .unwrap_or_default();
                Some(CollectiveError::Aborted(r))
            } else if crate::clock::awake(start.elapsed()) > patience {
                Some(CollectiveError::Lost(format!(
                    "no answer for {:.0} s (10 x --stall-timeout): a process died or hangs, its network is gone, or the processes disagree on what to exchange",
                    patience.as_secs_f64()
                )))
            } else {
                None
            };
            if let Some(e) = why {
                self.broken = Some(e.clone());
                return Err(e);
            }
            // Open MPI moves data only inside its calls: poll eagerly while a transfer may be
            // under way (yielding now and then, so that a shared core's other threads run),
            // lazily once this has waited long enough to be waiting for a slower process (and
            // then says where this process's ranks are, or takes the others' positions)
            polls += 1;
            if start.elapsed() < EAGER {
                match polls % 16 {
                    0 => std::thread::yield_now(),
                    _ => std::hint::spin_loop(),
                }
            } else {
                if let Some(e) = self.tick() {
                    return Err(e);
                }
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    }

    fn check(&self) -> Result<(), CollectiveError> {
        match &self.broken {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    pub(super) fn barrier(&mut self) -> Result<Duration, CollectiveError> {
        self.check()?;
        let t = Instant::now();
        let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: MPI is initialized and this thread holds the link; the request is polled
        unsafe {
            ffi::MPI_Ibarrier(world(), &mut req);
        }
        self.finish(req)?;
        Ok(t.elapsed())
    }

    /// Sum across processes with MPI_Iallreduce. Open MPI's algorithms give every process the
    /// same bits (each pairwise sum is computed the same on both sides, or by one process and
    /// sent on), which the replica check confirms every --log-every steps. A barrier first splits
    /// waiting for the others from moving data. No copies: the sum lands in a scratch buffer,
    /// which is then swapped with `buf` (small sums have a scratch of their own, so that they
    /// never take the gradients' allocation away). An exchange given up on keeps both buffers
    /// (leaked, MPI may still write them) and leaves `buf` a new one of the same length.
    pub(super) fn all_reduce(
        &mut self,
        buf: &mut Vec<f32>,
    ) -> Result<ReduceTiming, CollectiveError> {
        let wait = self.barrier()?;
        let t = Instant::now();
        let slot = usize::from(buf.len() < SMALL);
        let mut out = std::mem::take(&mut self.scratch[slot]);
        if out.len() != buf.len() {
            out.clear();
            out.resize(buf.len(), 0.0);
        }
        let mut done = 0;
        while done < buf.len() {
            let n = (buf.len() - done).min(CHUNK);
            let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
            // SAFETY: both buffers hold at least done+n floats and outlive the request (leaked
            // below if it is given up on)
            unsafe {
                ffi::MPI_Iallreduce(
                    buf[done..].as_ptr().cast::<c_void>(),
                    out[done..].as_mut_ptr().cast::<c_void>(),
                    count(n),
                    ffi::RSMPI_FLOAT,
                    ffi::RSMPI_SUM,
                    world(),
                    &mut req,
                );
            }
            if let Err(e) = self.finish(req) {
                let len = buf.len();
                std::mem::forget(std::mem::replace(buf, vec![0.0; len]));
                std::mem::forget(out);
                return Err(e);
            }
            done += n;
        }
        std::mem::swap(buf, &mut out);
        self.scratch[slot] = out;
        Ok(ReduceTiming {
            wait,
            transfer: t.elapsed(),
        })
    }

    /// `iters` blocking MPI_Allreduce calls on `len` floats, after a barrier: their time.
    pub(super) fn native(&mut self, len: usize, iters: usize) -> Result<Duration, CollectiveError> {
        self.barrier()?;
        let send = vec![1.0f32; len.min(CHUNK)];
        let mut recv = vec![0.0f32; send.len()];
        let t = Instant::now();
        for _ in 0..iters {
            // SAFETY: both buffers hold `len` floats and live across the blocking call
            unsafe {
                ffi::MPI_Allreduce(
                    send.as_ptr().cast::<c_void>(),
                    recv.as_mut_ptr().cast::<c_void>(),
                    count(send.len()),
                    ffi::RSMPI_FLOAT,
                    ffi::RSMPI_SUM,
                    world(),
                );
            }
        }
        Ok(t.elapsed())
    }

    /// Process `root`'s `buf` into every process's, through buffers of this link's own (small
    /// messages: start-up state, control words).
    pub(super) fn broadcast(
        &mut self,
        buf: &mut [u8],
        root: usize,
    ) -> Result<Duration, CollectiveError> {
        self.check()?;
        let t = Instant::now();
        let mut done = 0;
        while done < buf.len() {
            let n = (buf.len() - done).min(CHUNK);
            let mut part = buf[done..done + n].to_vec();
            let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
            // SAFETY: `part` holds n bytes and outlives the request (leaked if given up on)
            unsafe {
                ffi::MPI_Ibcast(
                    part.as_mut_ptr().cast::<c_void>(),
                    count(n),
                    ffi::RSMPI_UINT8_T,
                    root as c_int,
                    world(),
                    &mut req,
                );
            }
            if let Err(e) = self.finish(req) {
                std::mem::forget(part);
                return Err(e);
            }
            buf[done..done + n].copy_from_slice(&part);
            done += n;
        }
        Ok(t.elapsed())
    }

    /// Every process's `mine` (all the same length), in process order, into `out`.
    pub(super) fn all_gather(
        &mut self,
        mine: &[u8],
        out: &mut [u8],
    ) -> Result<Duration, CollectiveError> {
        self.check()?;
        let t = Instant::now();
        if out.len() > CHUNK {
            return Err(CollectiveError::Aborted(format!(
                "an all-gather of {} bytes per process is too large",
                mine.len()
            )));
        }
        let mine = mine.to_vec();
        let mut all = vec![0u8; out.len()];
        let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: `mine` holds len bytes, `all` len x processes; both outlive the request
        // (leaked if given up on)
        unsafe {
            ffi::MPI_Iallgather(
                mine.as_ptr().cast::<c_void>(),
                count(mine.len()),
                ffi::RSMPI_UINT8_T,
                all.as_mut_ptr().cast::<c_void>(),
                count(mine.len()),
                ffi::RSMPI_UINT8_T,
                world(),
                &mut req,
            );
        }
        if let Err(e) = self.finish(req) {
            std::mem::forget((mine, all));
            return Err(e);
        }
        out.copy_from_slice(&all);
        Ok(t.elapsed())
    }
}
