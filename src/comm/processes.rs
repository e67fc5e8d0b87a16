//! The processes of a multi-process run, as one link per process: MPI between machines
//! (feature `mpi`), or threads standing in for processes in tests.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use super::{CollectiveError, ReduceTiming};

/// Where each rank of a run is, one word per rank (the engine's heartbeats; opaque here), so
/// that the processes can tell process 0 where their ranks are.
pub trait Board: Send + Sync {
    /// Rank `rank`'s word as this process has it.
    fn word(&self, rank: usize) -> u64;
    /// Rank `rank` has been seen at `word` by its own process (the board keeps the later of
    /// this and what it had).
    fn seen(&self, rank: usize, word: u64);
}

/// One process's handle on the group of processes of a run. Every process makes the same
/// sequence of calls; within a process the calls come from one thread at a time (at start-up the
/// main thread, then the worker that leads the process's ranks).
pub trait Processes: Send + Sync {
    /// This process's index, 0-based (global rank 0 lives in process 0).
    fn index(&self) -> usize;
    fn count(&self) -> usize;
    /// Element-wise sum across processes, in place; every process gets the same bits. As
    /// `Collective::all_reduce_sum`, `buf` may come back another allocation of the same length.
    fn all_reduce_sum(&self, buf: &mut Vec<f32>) -> Result<ReduceTiming, CollectiveError>;
    /// Copies process `root`'s `buf` to every process (every process passes the same length).
    fn broadcast_bytes(&self, buf: &mut [u8], root: usize) -> Result<Duration, CollectiveError>;
    /// Every process's `mine` (all the same length), in process order, into `out`.
    fn all_gather_bytes(&self, mine: &[u8], out: &mut [u8]) -> Result<Duration, CollectiveError>;
    fn barrier(&self) -> Result<Duration, CollectiveError>;
    /// How long an exchange waits for the other processes before it takes them for lost
    /// (`CollectiveError::Lost`); unlimited until set.
    fn set_patience(&self, _patience: Duration) {}
    /// From now on this process's ranks (`local`) are on `board`, and process 0 learns where
    /// the other processes' ranks are onto its own, beside the exchanges and while they wait
    /// (so that a stall seen there names the rank behind it wherever it runs). Without this,
    /// process 0 knows only the steps the others have reported.
    fn share_positions(&self, _board: Arc<dyn Board>, _local: Range<usize>) {}
    /// From now on the device samples this process posts on `samples` go to process 0 beside
    /// the positions, which hears the others' there (once positions are shared).
    fn share_samples(&self, _samples: Arc<super::samples::Samples>) {}
    /// This process failed: its pending and later exchanges end with `Aborted(reason)`. The
    /// other processes learn of it when the launcher ends the job (`mpi::Cluster::fail`).
    fn abort(&self, reason: &str);
    fn abort_reason(&self) -> Option<String>;
}

/// Every process's bytes, of any lengths, in process order.
pub fn gather_vecs(p: &dyn Processes, mine: &[u8]) -> Result<Vec<Vec<u8>>, CollectiveError> {
    let n = p.count();
    let mut lens = vec![0u8; 8 * n];
    p.all_gather_bytes(&(mine.len() as u64).to_le_bytes(), &mut lens)?;
    let lens: Vec<usize> = lens
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")) as usize)
        .collect();
    let width = lens.iter().copied().max().unwrap_or(0);
    let mut padded = mine.to_vec();
    padded.resize(width, 0);
    let mut all = vec![0u8; width * n];
    p.all_gather_bytes(&padded, &mut all)?;
    Ok(all
        .chunks(width.max(1))
        .zip(&lens)
        .map(|(c, &l)| c[..l].to_vec())
        .collect())
}

/// Process `root`'s bytes (`mine` there; ignored elsewhere), on every process.
pub fn broadcast_vec(
    p: &dyn Processes,
    mine: Vec<u8>,
    root: usize,
) -> Result<Vec<u8>, CollectiveError> {
    let mut len = (mine.len() as u64).to_le_bytes();
    p.broadcast_bytes(&mut len, root)?;
    let mut buf = mine;
    buf.resize(u64::from_le_bytes(len) as usize, 0);
    p.broadcast_bytes(&mut buf, root)?;
    Ok(buf)
}

#[cfg(test)]
pub use simulated::ThreadProcesses;

#[cfg(test)]
mod simulated {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::Processes;
    use crate::comm::local::AbortHandle;
    use crate::comm::{Collective, CollectiveError, LocalCollective, ReduceTiming};

    /// Processes simulated by threads of this process (tests of everything above MPI).
    pub struct ThreadProcesses {
        inner: Mutex<LocalCollective>,
        aborter: AbortHandle,
        index: usize,
        count: usize,
    }

    impl ThreadProcesses {
        /// One handle per simulated process, in process order.
        pub fn group(n: usize) -> Vec<ThreadProcesses> {
            LocalCollective::group(n)
                .into_iter()
                .enumerate()
                .map(|(index, c)| ThreadProcesses {
                    aborter: c.abort_handle(),
                    inner: Mutex::new(c),
                    index,
                    count: n,
                })
                .collect()
        }

        fn with<T>(
            &self,
            f: impl FnOnce(&mut LocalCollective) -> Result<T, CollectiveError>,
        ) -> Result<T, CollectiveError> {
            let mut c = self
                .inner
                .lock()
                .map_err(|_| CollectiveError::Aborted("a simulated process panicked".into()))?;
            f(&mut c)
        }
    }

    impl Processes for ThreadProcesses {
        fn index(&self) -> usize {
            self.index
        }
        fn count(&self) -> usize {
            self.count
        }
        fn all_reduce_sum(&self, buf: &mut Vec<f32>) -> Result<ReduceTiming, CollectiveError> {
            self.with(|c| c.all_reduce_sum(buf))
        }
        fn broadcast_bytes(
            &self,
            buf: &mut [u8],
            root: usize,
        ) -> Result<Duration, CollectiveError> {
            self.with(|c| c.broadcast(buf, root))
        }
        fn all_gather_bytes(
            &self,
            mine: &[u8],
            out: &mut [u8],
        ) -> Result<Duration, CollectiveError> {
            self.with(|c| c.all_gather(mine, out))
        }
        fn barrier(&self) -> Result<Duration, CollectiveError> {
            self.with(|c| c.barrier())
        }
        fn abort(&self, reason: &str) {
            self.aborter.abort(reason)
        }
        fn abort_reason(&self) -> Option<String> {
            self.aborter.reason()
        }
    }
}
