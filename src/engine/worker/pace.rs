//! Where the run is and how the ranks share it: progress through the budget and the warm-up's
//! share of it (the LR schedule's measure), each rank's part of the global batch, `--rebalance`'s
//! decisions, and the replicas made one before a validation, a checkpoint or the end.

use std::sync::Arc;
use std::time::Duration;

use super::Worker;
use crate::backend::Replica;
use crate::config::Budget;
use crate::engine::events::{Applied, Event};
use crate::engine::rebalance;
use crate::engine::strategy::{Buffers, Moved};
use crate::engine::EngineError;

impl Worker {
    /// Fraction of the run done, by samples for epoch budgets (robust to batch changes).
    pub(super) fn progress(&self) -> f64 {
        match self.cfg.budget {
            Budget::Epochs(e) => {
                (self.cursor.epoch as f64 + self.cursor.offset as f64 / self.train.samples as f64)
                    / e as f64
            }
            Budget::Steps(s) => self.step as f64 / s as f64,
        }
    }

    /// The LR the next step's update takes: the base (rescaled for the batch) where the schedule
    /// and the warm-up have brought it by now.
    pub(super) fn lr_now(&self) -> f32 {
        let (cfg, step) = (&self.cfg, self.step);
        let (progress, warm) = (self.progress(), self.warm_share());
        crate::nn::schedule::lr_at(cfg.schedule, self.lr_base, cfg.warmup, step, progress, warm)
    }

    /// The share of the run its warm-up takes, in `progress`'s measure: for an epoch budget
    /// the warm-up's steps in samples at the batch size this worker started at (a resumed
    /// run's, its checkpoint's).
    pub(super) fn warm_share(&self) -> f64 {
        let warmup = self.cfg.warmup as f64;
        match self.cfg.budget {
            Budget::Epochs(e) => {
                let (n, accum) = (self.train.samples, self.cfg.grad_accum);
                let batch =
                    crate::config::step_samples(self.first_per_replica, self.ranks, accum, n);
                warmup * batch as f64 / (e as f64 * n.max(1) as f64)
            }
            Budget::Steps(s) => warmup / s.max(1) as f64,
        }
    }

    /// This rank's part of the global batch (`--rebalance`'s split, else an even one): how much
    /// its batch norm statistics weigh in the replicas' average.
    pub(super) fn share(&self) -> f32 {
        match self.split.as_deref() {
            Some(sizes) if sizes.iter().sum::<usize>() > 0 => {
                sizes[self.rank] as f32 / sizes.iter().sum::<usize>() as f32
            }
            _ => 1.0 / self.ranks.max(1) as f32,
        }
    }

    /// Every rank tells the others the largest micro-batch its device takes: `--rebalance` gives
    /// none more, and process 0's controller refuses a batch past the least of them.
    pub(super) fn tell_caps(&mut self) -> Result<(), EngineError> {
        let mut all = vec![0u64; self.ranks];
        self.coll
            .all_gather_u64(&[self.max_rows as u64], &mut all)?;
        self.caps = all.into_iter().map(|c| c as usize).collect();
        if self.rank == self.local.start {
            self.device_cap
                .tell_run(self.caps.iter().copied().min().unwrap_or_default());
        }
        Ok(())
    }

    /// Every rank shares its speed (one small all-reduce) and applies the same new split.
    pub(super) fn rebalance(&mut self) -> Result<(), EngineError> {
        // (a decision due a few steps after a resume or a batch change, whose first step is a
        // warm-up, waits for the next: every rank counts the same steps, so all wait)
        if self.step - self.rebalance_since < rebalance::MEASURED {
            return Ok(());
        }
        self.rebalance_since = self.step;
        let mut speeds = vec![0.0f32; self.ranks];
        let work = self.rebalance_work.as_secs_f64();
        if work > 0.0 {
            speeds[self.rank] = (self.rebalance_samples as f64 / work) as f32;
        }
        self.coll.all_reduce_sum(&mut speeds)?;
        self.rebalance_work = Duration::ZERO;
        self.rebalance_samples = 0;
        // (one noisy stretch, a build beside the run, does not swing the split on its own:
        // each decision goes by the mean of its speeds and the last decision's)
        let speeds = rebalance::smoothed(self.rebalance_speeds.as_deref(), &speeds);
        self.rebalance_speeds = Some(speeds.clone());
        let current = self
            .split
            .as_deref()
            .cloned()
            .unwrap_or_else(|| vec![self.per_replica; self.ranks]);
        // (2 a rank where one sample would make a batch norm its bias alone)
        let one_value =
            crate::engine::validate::one_value_batch_norm(&self.cfg, &self.model, self.ranks);
        let global = self.per_replica * self.ranks;
        let least = 1 + one_value.is_some() as usize;
        let Some(sizes) = rebalance::new_split(global, &speeds, &current, (least, &self.caps))
        else {
            return Ok(());
        };
        if self.rank == 0 {
            let _ = self.events.send(Event::Control {
                step: self.step,
                applied: Applied::Split(sizes.clone()),
            });
        }
        self.split = Some(Arc::new(sizes));
        self.loader.restart(self.cursor, self.sharding());
        Ok(())
    }

    /// The replicas made one model now (`Runner::sync_now`), batch norm's statistics weighted
    /// by each rank's `share`, left as `buffers` says.
    pub(super) fn sync_replicas(
        &mut self,
        replica: &mut dyn Replica,
        buffers: Buffers,
    ) -> Result<Moved, EngineError> {
        let share = self.share();
        let step = self.step;
        Ok((self.strategy).sync_now(replica, self.coll.as_mut(), step, (buffers, share))?)
    }
}
