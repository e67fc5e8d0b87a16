//! Where each rank is within its step, published by the workers for the stall check.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::comm::Board;

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
        self.0[rank].store(word(step, phase), Ordering::Relaxed);
    }
    /// Another process's rank `rank` has reached at least `phase` of step `step` (what is
    /// learnt of it later may come out of order: the later position is kept).
    pub fn reached(&self, rank: usize, step: u64, phase: Phase) {
        self.seen(rank, word(step, phase));
    }
    /// Every rank's position.
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

fn word(step: u64, phase: Phase) -> u64 {
    step << 3 | phase as u64
}

impl Phase {
    fn doing(self) -> &'static str {
        match self {
            // (all another process's step reports tell: the step begun)
            Phase::Data => "at its start (its batch)",
            Phase::Compute => "computing",
            Phase::Reduce => "in the all-reduce",
            Phase::Update => "updating",
            Phase::Validate => "validating",
            Phase::Checkpoint => "writing a checkpoint",
        }
    }
}

/// The ranks furthest behind where others are further on (the ones a run that stopped
/// answering lost, as process 0's board has them), and that in words; none where all are at
/// one place.
pub fn behind(beats: &[Beat]) -> Option<(Vec<usize>, String)> {
    let at = |b: &Beat| word(b.step, b.phase);
    let last = beats.iter().map(at).min()?;
    let ranks: Vec<usize> = (0..beats.len())
        .filter(|&r| at(&beats[r]) == last)
        .collect();
    if ranks.len() == beats.len() {
        return None;
    }
    let b = beats.iter().find(|b| at(b) == last)?;
    let listed: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
    let said = format!(
        "rank(s) {} last seen at step {}, {}, while the others went further",
        listed.join(", "),
        b.step,
        b.phase.doing()
    );
    Some((ranks, said))
}

/// The processes of a run pass their ranks' positions on to process 0 as these words.
impl Board for Heartbeats {
    fn word(&self, rank: usize) -> u64 {
        self.0.get(rank).map_or(0, |a| a.load(Ordering::Relaxed))
    }
    fn seen(&self, rank: usize, word: u64) {
        if let Some(a) = self.0.get(rank) {
            a.fetch_max(word, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_another_process_says_never_moves_a_rank_back() {
        let beats = Heartbeats::new(3);
        beats.reached(1, 7, Phase::Reduce);
        // a step report that comes after it says no more than "step 7 started"
        beats.reached(1, 7, Phase::Data);
        beats.reached(2, 6, Phase::Update);
        beats.seen(2, Board::word(&beats, 1));
        // a word for a rank the run does not have is dropped
        beats.seen(9, u64::MAX);
        let at = |step, phase| Beat { step, phase };
        let want = [
            at(0, Phase::Data),
            at(7, Phase::Reduce),
            at(7, Phase::Reduce),
        ];
        assert_eq!(beats.read(), want);
        // a rank's own process sets it anywhere
        beats.beat(1, 7, Phase::Compute);
        assert_eq!(beats.read()[1], at(7, Phase::Compute));
    }

    #[test]
    fn the_ranks_furthest_behind_are_named_where_others_went_further() {
        let at = |step, phase| Beat { step, phase };
        let beats = [
            at(123, Phase::Reduce),
            at(123, Phase::Compute),
            at(123, Phase::Reduce),
            at(123, Phase::Compute),
        ];
        assert_eq!(
            behind(&beats).unwrap(),
            (
                vec![1, 3],
                "rank(s) 1, 3 last seen at step 123, computing, while the others went further"
                    .to_string()
            )
        );
        assert_eq!(behind(&[at(5, Phase::Reduce), at(5, Phase::Reduce)]), None);
        assert_eq!(behind(&[]), None);
    }
}
