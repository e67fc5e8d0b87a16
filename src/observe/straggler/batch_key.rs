//! What a rank's work per sample, and a step's gradient norm, depend on besides the device and
//! the model: the batch.

use crate::observe::monitor::StepRow;

/// The per-replica batch and each rank's samples of a whole step (`--rebalance` re-splits the
/// same global batch).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct BatchKey {
    pub per_replica: usize,
    pub global: usize,
    samples: Vec<usize>,
}

impl BatchKey {
    /// The key `row` starts, where it changes `current`. An epoch's last, shorter step keeps
    /// the key (fewer samples once an epoch, not another batch).
    pub fn of(row: &StepRow, current: Option<&BatchKey>) -> Option<BatchKey> {
        let key = BatchKey {
            per_replica: row.per_replica,
            global: row.global_samples,
            samples: row.ranks.iter().map(|s| s.samples).collect(),
        };
        match current {
            Some(c) if c.is_cut_short(row) => None,
            Some(c) if *c == key => None,
            _ => Some(key),
        }
    }

    /// Whether `row` is a step of this batch cut short (an epoch's last).
    pub fn is_cut_short(&self, row: &StepRow) -> bool {
        row.per_replica == self.per_replica && row.global_samples < self.global
    }
}
