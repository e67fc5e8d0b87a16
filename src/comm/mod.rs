//! Collectives, per rank: the interface every implementation follows, the deterministic
//! in-process one used by CPU workers, the hierarchical one of a multi-process run (threads in
//! memory, then one exchange per process), how a launcher started this process, and (feature
//! `mpi`) the processes joined over MPI.

mod hier;
pub mod launch;
mod local;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod processes;
pub mod samples;
pub mod words;

pub use hier::HierCollective;
pub use local::LocalCollective;
#[cfg(test)]
pub use processes::ThreadProcesses;
pub use processes::{Board, Processes};

use std::time::Duration;

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum CollectiveError {
    #[error("collective aborted: {0}")]
    Aborted(String),
    #[error("the other processes of this run stopped answering: {0}")]
    Lost(String),
    /// Another process failed and said why (its rank's, where it knew which) before the job
    /// ended: process 0 records it as the run's failure.
    #[error("{message}")]
    PeerFailed {
        rank: Option<usize>,
        message: String,
    },
    #[error("collective misuse: rank {rank} passed {got} elements, rank 0 passed {want}")]
    LengthMismatch {
        rank: usize,
        got: usize,
        want: usize,
    },
}

/// Where the time of one all-reduce went: waiting for the other ranks to arrive, then moving
/// and summing data.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReduceTiming {
    pub wait: Duration,
    pub transfer: Duration,
}

/// One rank's handle on a group of `world_size` ranks. Every rank must make the same sequence of
/// calls; results are identical on every rank.
pub trait Collective: Send {
    fn rank(&self) -> usize;
    fn world_size(&self) -> usize;
    /// Element-wise sum across ranks, in place, in fixed rank order (deterministic). A `Vec` so
    /// that an exchange between processes can swap memory instead of copying it: afterwards
    /// `buf` may be another allocation of the same length (after an error, of unspecified
    /// contents).
    fn all_reduce_sum(&mut self, buf: &mut Vec<f32>) -> Result<ReduceTiming, CollectiveError>;
    /// Copies `root`'s `buf` to every rank; returns the time spent waiting.
    fn broadcast_u64(&mut self, buf: &mut [u64], root: usize) -> Result<Duration, CollectiveError>;
    /// Every rank's `mine` (all the same length), in rank order, into `out`
    /// (`world_size * mine.len()` words); returns the time spent waiting.
    fn all_gather_u64(
        &mut self,
        mine: &[u64],
        out: &mut [u64],
    ) -> Result<Duration, CollectiveError>;
    fn barrier(&mut self) -> Result<Duration, CollectiveError>;
    /// Wakes every rank blocked (now or later) in this group with `Aborted(reason)`.
    fn abort(&self, reason: &str);
    /// Why the group was aborted, once it has been (a rank that waits elsewhere, e.g. on a GPU
    /// all-reduce, polls this so that a peer's failure ends its wait).
    fn abort_reason(&self) -> Option<String>;
}
