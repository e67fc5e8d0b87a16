//! Where each rank is within its step, published by the workers for the stall check.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Where a rank is within its step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Data = 0,
    Compute = 1,
    Reduce = 2,
    Update = 3,
    /// Validating after the step (every rank at once: a validation is collective).
    Validate = 4,
    /// Writing a checkpoint after the step (rank 0; the others go on to the next all-reduce).
    Checkpoint = 5,
}

/// A rank's last reported position: the step it is working on and the phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Beat {
    pub step: u64,
    pub phase: Phase,
}

/// Per-rank positions the workers publish (one relaxed atomic store per phase), so a stall can
/// name the ranks that never reached the all-reduce.
#[derive(Clone, Debug)]
pub struct Heartbeats(Arc<Vec<AtomicU64>>);

impl Heartbeats {
    pub fn new(ranks: usize) -> Heartbeats {
        Heartbeats(Arc::new((0..ranks).map(|_| AtomicU64::new(0)).collect()))
    }
    /// Rank `rank` is now in `phase` of step `step`.
    pub fn beat(&self, rank: usize, step: u64, phase: Phase) {
        self.0[rank].store(step << 3 | phase as u64, Ordering::Relaxed);
    }
    pub fn read(&self) -> Vec<Beat> {
        self.0
            .iter()
            .map(|a| {
                let v = a.load(Ordering::Relaxed);
                let phase = match v & 7 {
                    0 => Phase::Data,
                    1 => Phase::Compute,
                    2 => Phase::Reduce,
                    3 => Phase::Update,
                    4 => Phase::Validate,
                    _ => Phase::Checkpoint,
                };
                Beat {
                    step: v >> 3,
                    phase,
                }
            })
            .collect()
    }
}
