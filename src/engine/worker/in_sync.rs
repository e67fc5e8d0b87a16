//! Every `--log-every` steps (every 50th for `auto`) the ranks compare hashes of their parameters: synchronous data
//! parallelism keeps every replica bit-identical, so any difference is a fault (a bug, a
//! device's memory, a process that trained on something else), caught within one period.

use super::Worker;
use crate::backend::Replica;
use crate::engine::events::Event;
use crate::engine::fingerprint::fingerprint;
use crate::engine::EngineError;

/// A fingerprint of the parameters' bits.
fn hash(params: &[f32]) -> u64 {
    fingerprint(params.iter().map(|p| p.to_bits() as u64))
}

impl Worker {
    /// Whether the step just taken is a check step (`check_in_sync`): every `--log-every`
    /// steps, with several ranks holding one model.
    pub(super) fn check_due(&self) -> bool {
        let every = self.cfg.log_every.steps().max(1);
        // local SGD's replicas differ between its averages by design
        self.ranks >= 2 && self.step.is_multiple_of(every) && self.strategy.in_sync(self.step)
    }

    /// After an update: at a check step (`due`: `check_due` after the update), every rank's
    /// hash goes to every rank; all equal is told the first time (rank 0), a difference stops
    /// every rank naming the ranks that differ.
    pub(super) fn check_in_sync(
        &mut self,
        replica: &mut dyn Replica,
        due: bool,
    ) -> Result<(), EngineError> {
        if self.cfg.inject_desync == Some((self.rank, self.step)) {
            let mut state = replica.export();
            state.params[0] += 1e-3;
            replica.import(&state);
        }
        if !due {
            return Ok(());
        }
        // (the parameters alone: the optimizer's state, twice their size under Adam, is not
        // compared)
        replica.params_to_host(&mut self.check_params);
        let mine = hash(&self.check_params);
        let mut all = vec![0u64; self.ranks];
        self.coll.all_gather_u64(&[mine], &mut all)?;
        let odd: Vec<usize> = (0..self.ranks).filter(|&r| all[r] != all[0]).collect();
        if !odd.is_empty() {
            return Err(EngineError::OutOfSync {
                step: self.step,
                ranks: odd,
            });
        }
        // told once: events are never dropped, and a fast run checks many times a second
        if self.rank == 0 && !self.said_in_sync {
            let _ = self.events.send(Event::InSync {
                step: self.step,
                ranks: self.ranks,
            });
            self.said_in_sync = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::hash;

    #[test]
    fn the_hash_sees_one_changed_bit() {
        let a = vec![0.5f32, -1.25, 3.0];
        let mut b = a.clone();
        b[1] = f32::from_bits(b[1].to_bits() ^ 1);
        assert_ne!(hash(&a), hash(&b));
        assert_eq!(hash(&a), hash(&a.clone()));
    }
}
