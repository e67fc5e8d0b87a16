//! The MPI thread: it initializes MPI, makes every MPI call of the process (non-blocking
//! exchanges polled to completion, or given up after the patience), and finalizes MPI.

use std::ffi::c_void;
use std::os::raw::c_int;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use mpi::ffi;

use super::{Flags, Joined, Request, CHUNK, EAGER, HANDOVER};
use crate::comm::{CollectiveError, ReduceTiming};

/// The MPI thread: initializes, answers requests in order, finalizes when the channel closes.
pub(super) fn serve(
    rx: Receiver<Request>,
    ready: Sender<Result<Joined, String>>,
    flags: Arc<Flags>,
) {
    let Some((universe, _)) = mpi::initialize_with_threading(mpi::Threading::Funneled) else {
        let _ = ready.send(Err("MPI was already initialized".into()));
        return;
    };
    let mut link = Link {
        flags,
        broken: None,
        scratch: Vec::new(),
    };
    match link.start() {
        Ok(j) => {
            let _ = ready.send(Ok(j));
        }
        Err(e) => {
            let _ = ready.send(Err(format!("MPI start-up failed: {e}")));
            link.abort(1);
        }
    }
    while let Some(req) = next(&rx) {
        match req {
            Request::AllReduce(buf, reply) => {
                let _ = reply.send(link.all_reduce(buf));
            }
            Request::Broadcast(buf, root, reply) => {
                let _ = reply.send(link.broadcast(buf, root));
            }
            Request::AllGather(mine, count, reply) => {
                let _ = reply.send(link.all_gather(mine, count));
            }
            Request::Barrier(reply) => {
                let _ = reply.send(link.barrier());
            }
            Request::Native(len, iters, reply) => {
                let _ = reply.send(link.native(len, iters));
            }
            Request::Abort(code) => link.abort(code),
        }
    }
    if link.broken.is_some() {
        // a request is still in flight with the others: finalizing would wait for them
        link.abort(1);
    }
    drop(universe);
}

/// The next request: awake a little first (a step's exchanges follow each other closely), then
/// asleep. None once the channel has closed.
fn next(rx: &Receiver<Request>) -> Option<Request> {
    let t = Instant::now();
    while t.elapsed() < HANDOVER {
        match rx.try_recv() {
            Ok(r) => return Some(r),
            Err(crossbeam_channel::TryRecvError::Empty) => std::thread::yield_now(),
            Err(_) => return None,
        }
    }
    rx.recv().ok()
}

/// MPI calls, made only from the MPI thread.
struct Link {
    flags: Arc<Flags>,
    /// Why an exchange was abandoned: its buffers are leaked (MPI may still write them) and no
    /// later exchange is started.
    broken: Option<CollectiveError>,
    /// The all-reduce's output buffer, kept from call to call.
    scratch: Vec<f32>,
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
    fn start(&mut self) -> Result<Joined, String> {
        let (mut rank, mut size) = (0 as c_int, 0 as c_int);
        // SAFETY: MPI is initialized on this thread; the out-pointers are live locals
        unsafe {
            ffi::MPI_Comm_rank(world(), &mut rank);
            ffi::MPI_Comm_size(world(), &mut size);
        }
        // every process has reached MPI before any exchange of the run
        self.barrier().map_err(|e| e.to_string())?;
        Ok(Joined {
            index: rank as usize,
            count: size as usize,
        })
    }

    fn abort(&mut self, code: i32) {
        // SAFETY: MPI is initialized on this thread; MPI_Abort ends the job
        unsafe {
            ffi::MPI_Abort(world(), code);
        }
    }

    /// Polls a started request to completion, or gives up after the patience (or once this
    /// process is aborted), leaking `keep` (the request's buffers) when it does.
    fn finish<K>(&mut self, mut req: ffi::MPI_Request, keep: K) -> Result<K, CollectiveError> {
        let start = Instant::now();
        let patience = Duration::from_millis(self.flags.patience_ms.load(Ordering::Relaxed));
        let mut polls = 0u32;
        loop {
            let mut done: c_int = 0;
            // SAFETY: `req` is a live request of this thread; the buffers it uses are in `keep`
            unsafe {
                ffi::MPI_Test(&mut req, &mut done, ffi::RSMPI_STATUS_IGNORE);
            }
            if done != 0 {
                return Ok(keep);
            }
            let why = if self.flags.aborted.load(Ordering::Acquire) {
                let r = self
                    .flags
                    .reason
                    .lock()
                    .map(|r| r.clone())
                    .unwrap_or_default();
                Some(CollectiveError::Aborted(r))
            } else if start.elapsed() > patience {
                Some(CollectiveError::Lost(format!(
                    "no answer for {:.0} s (10 x --stall-timeout): a process died or hangs, its network is gone, or the processes disagree on what to exchange",
                    patience.as_secs_f64()
                )))
            } else {
                None
            };
            if let Some(e) = why {
                std::mem::forget(keep);
                self.broken = Some(e.clone());
                return Err(e);
            }
            // Open MPI moves data only inside its calls: poll eagerly while a transfer may be
            // under way (yielding now and then, so that a shared core's other threads run),
            // lazily once this has waited long enough to be waiting for a slower process
            polls += 1;
            if start.elapsed() < EAGER {
                match polls % 16 {
                    0 => std::thread::yield_now(),
                    _ => std::hint::spin_loop(),
                }
            } else {
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

    fn barrier(&mut self) -> Result<Duration, CollectiveError> {
        self.check()?;
        let t = Instant::now();
        // SAFETY: MPI is initialized on this thread; the request is polled to completion
        let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
        unsafe {
            ffi::MPI_Ibarrier(world(), &mut req);
        }
        self.finish(req, ())?;
        Ok(t.elapsed())
    }

    /// Sum across processes with MPI_Iallreduce. Open MPI's algorithms give every process the
    /// same bits (each pairwise sum is computed the same on both sides, or by one process and
    /// sent on), which the replica check confirms every --log-every steps. A barrier first splits
    /// waiting for the others from moving data.
    fn all_reduce(&mut self, buf: Vec<f32>) -> Result<(Vec<f32>, ReduceTiming), CollectiveError> {
        let wait = self.barrier()?;
        let t = Instant::now();
        // the result lands in the scratch buffer, which the input then becomes
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        out.resize(buf.len(), 0.0);
        let mut done = 0;
        let (mut buf, mut out) = (buf, out);
        while done < buf.len() {
            let n = (buf.len() - done).min(CHUNK);
            let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
            // SAFETY: both buffers hold at least done+n floats and outlive the request (kept by
            // `finish`, leaked if it is abandoned)
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
            (buf, out) = self.finish(req, (buf, out))?;
            done += n;
        }
        self.scratch = buf;
        Ok((
            out,
            ReduceTiming {
                wait,
                transfer: t.elapsed(),
            },
        ))
    }

    /// `iters` blocking MPI_Allreduce calls on `len` floats, after a barrier: their time.
    fn native(&mut self, len: usize, iters: usize) -> Result<Duration, CollectiveError> {
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

    fn broadcast(
        &mut self,
        mut buf: Vec<u8>,
        root: usize,
    ) -> Result<(Vec<u8>, Duration), CollectiveError> {
        self.check()?;
        let t = Instant::now();
        let mut done = 0;
        while done < buf.len() {
            let n = (buf.len() - done).min(CHUNK);
            let mut part = buf[done..done + n].to_vec();
            let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
            // SAFETY: `part` holds n bytes and outlives the request
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
            let part = self.finish(req, part)?;
            buf[done..done + n].copy_from_slice(&part);
            done += n;
        }
        Ok((buf, t.elapsed()))
    }

    fn all_gather(
        &mut self,
        mine: Vec<u8>,
        processes: usize,
    ) -> Result<(Vec<u8>, Duration), CollectiveError> {
        self.check()?;
        let t = Instant::now();
        if mine.len() * processes > CHUNK {
            return Err(CollectiveError::Aborted(format!(
                "an all-gather of {} bytes per process is too large",
                mine.len()
            )));
        }
        let mut all = vec![0u8; mine.len() * processes];
        let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: `mine` holds len bytes, `all` len*processes; both outlive the request
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
        let (all, _) = self.finish(req, (all, mine))?;
        Ok((all, t.elapsed()))
    }
}
