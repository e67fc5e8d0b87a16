//! The per-rank hook: where a step exchanges what it learned and updates the weights, by strategy.

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{central, local_sgd, Store, Strategy};
use crate::backend::{BatchMetrics, Replica, StepEnd, TrainState};
use crate::comm::{Collective, CollectiveError, ReduceTiming};

/// Where a step's exchange time went, on this rank.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Moved {
    /// Waiting for slower ranks (in the all-reduce or the store's barrier).
    pub wait: Duration,
    /// Moving and summing data between ranks.
    pub comm: Duration,
    /// Parameters and gradients copied between the device and the host.
    pub transfer: Duration,
}

impl From<ReduceTiming> for Moved {
    /// An all-reduce's time as what an exchange moved.
    fn from(r: ReduceTiming) -> Moved {
        let mut m = Moved::default();
        m.reduced(r);
        m
    }
}

impl Moved {
    pub(super) fn reduced(&mut self, r: ReduceTiming) {
        self.wait += r.wait;
        self.comm += r.transfer;
    }

    pub fn plus(self, o: Moved) -> Moved {
        Moved {
            wait: self.wait + o.wait,
            comm: self.comm + o.comm,
            transfer: self.transfer + o.transfer,
        }
    }
}

/// One rank's side of the strategy.
pub struct Runner {
    strategy: Strategy,
    /// Central storage: the host's copy of the model.
    store: Option<Arc<Store>>,
    /// Central storage: this rank's gradients on the host, and the end of the step they sum
    /// to; local SGD: its parameters.
    host: Vec<f32>,
    host_end: StepEnd,
    /// The step after which the ranks last held one model.
    synced_at: u64,
    /// Batch norm's running statistics averaged over the ranks, and the step after which they
    /// were: a validation gives them to every replica, a checkpoint only saves them (each
    /// replica goes on from its own, as a run that takes no checkpoint does).
    averaged: Option<(u64, Vec<f32>)>,
    /// The running statistics `--bn-stats` fixed: the same on every replica, kept out of the
    /// average (whose rounding would move them).
    fixed_buffers: Vec<Range<usize>>,
}

/// Where [`Runner::sync_now`] leaves the averaged running statistics.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Buffers {
    /// In every replica (a validation: every rank evaluates the one model).
    InPlace,
    /// Aside, for [`Runner::export`] (a checkpoint, the run's end).
    Aside,
}

impl Runner {
    /// A rank starting after step `start` (every rank starts from the same state), the running
    /// statistics in `fixed_buffers` never averaged.
    pub fn new(
        strategy: Strategy,
        store: Option<Arc<Store>>,
        start: u64,
        fixed_buffers: Vec<Range<usize>>,
    ) -> Runner {
        assert_eq!(
            store.is_some(),
            strategy == Strategy::CentralStorage,
            "central storage needs its store"
        );
        Runner {
            strategy,
            store,
            host: Vec::new(),
            host_end: StepEnd::default(),
            synced_at: start,
            averaged: None,
            fixed_buffers,
        }
    }

    /// Whether the ranks hold one model after step `step`: controls are agreed only then.
    pub fn in_sync(&self, step: u64) -> bool {
        self.synced_at == step
    }

    /// Whether the schedule makes the ranks one after step `step` (every step but local SGD's
    /// between averages): where the next boundary that takes controls can be.
    pub fn syncs_after(&self, step: u64) -> bool {
        self.strategy.synced_after(step)
    }

    /// Whether every rank sees the same (global) loss at step `step`: all but local SGD's
    /// steps after its warm-up.
    pub fn shares_loss(&self, step: u64) -> bool {
        !matches!(self.strategy, Strategy::LocalSgd { warmup, .. } if step > warmup)
    }

    /// After `compute_grads` of step `step`: the exchange, and the batch's metrics (global, but
    /// this rank's own between local SGD's averages) of the step the replica reports (this one,
    /// or the one before where reports are late).
    pub fn exchange(
        &mut self,
        replica: &mut dyn Replica,
        coll: &mut dyn Collective,
        step: u64,
    ) -> Result<(BatchMetrics, Moved), CollectiveError> {
        let timing = match (self.strategy, &self.store) {
            (Strategy::CentralStorage, Some(store)) => {
                let (end, moved) = central::exchange(store, replica, coll, &mut self.host)?;
                self.host_end = end;
                return Ok((end.metrics(), moved));
            }
            // (the step reported may be the one before, whose end followed an all-reduce)
            (Strategy::LocalSgd { warmup, .. }, _) if step > warmup => {
                replica.finish_local(coll)?
            }
            _ => replica.all_reduce_grads(coll)?,
        };
        Ok((replica.batch_metrics(), Moved::from(timing)))
    }

    /// The optimizer step of step `step` (then local SGD's average, at its sync points); returns
    /// the optimizer's time and what was moved.
    pub fn update(
        &mut self,
        replica: &mut dyn Replica,
        coll: &mut dyn Collective,
        lr: f32,
        step: u64,
    ) -> Result<(Duration, Moved), CollectiveError> {
        let out = match (self.strategy, &self.store) {
            (Strategy::CentralStorage, Some(store)) => {
                central::update(store, replica, coll, (&self.host, &self.host_end), lr)?
            }
            (s, _) => {
                let t = Instant::now();
                replica.apply_update(lr);
                let optimizer = t.elapsed();
                let moved = match s {
                    Strategy::LocalSgd {
                        warmup, moments, ..
                    } if step > warmup && s.synced_after(step) => {
                        local_sgd::average(replica, coll, moments, &mut self.host)?
                    }
                    _ => Moved::default(),
                };
                (optimizer, moved)
            }
        };
        if self.strategy.synced_after(step) {
            self.synced_at = step;
        }
        Ok(out)
    }

    /// Makes the ranks one model now, off the schedule (local SGD before a checkpoint, a
    /// validation or the end of the run), batch norm's running statistics averaged too, each
    /// replica's weighted by `share`, its part of the global batch (left as `buffers` says);
    /// every rank must call it at the same step.
    pub fn sync_now(
        &mut self,
        replica: &mut dyn Replica,
        coll: &mut dyn Collective,
        step: u64,
        (buffers, share): (Buffers, f32),
    ) -> Result<Moved, CollectiveError> {
        let mut moved = Moved::default();
        if let Strategy::LocalSgd { moments, .. } = self.strategy {
            if self.synced_at != step {
                moved = local_sgd::average(replica, coll, moments, &mut self.host)?;
            }
        }
        self.synced_at = step;
        let averaged = match self.averaged.take() {
            Some((at, b)) if at == step => b,
            _ => {
                let own = replica.buffers();
                let fixed = &self.fixed_buffers;
                let kept: Vec<Vec<f32>> = fixed.iter().map(|r| own[r.clone()].to_vec()).collect();
                let mut averaged = average_buffers(own, coll, share)?;
                for (r, k) in fixed.iter().zip(kept) {
                    averaged[r.clone()].copy_from_slice(&k);
                }
                averaged
            }
        };
        if buffers == Buffers::InPlace && coll.world_size() > 1 && !averaged.is_empty() {
            replica.set_buffers(&averaged);
        }
        self.averaged = Some((step, averaged));
        Ok(moved)
    }

    /// The model as one state after `sync_now` at `step`: the parameters and optimizer state
    /// (the host's under central storage; else this replica's, which every rank shares once in
    /// sync) with the running statistics averaged then.
    pub fn export(&self, replica: &dyn Replica, step: u64) -> TrainState {
        let averaged = match &self.averaged {
            Some((at, b)) if *at == step => Some(b.clone()),
            _ => None,
        };
        match &self.store {
            Some(store) => store.export(averaged.unwrap_or_else(|| replica.buffers())),
            None => {
                let mut state = replica.export();
                if let Some(b) = averaged {
                    state.buffers = b;
                }
                state
            }
        }
    }
}

/// Batch norm's running statistics averaged over the replicas, each weighted by `share`, its
/// part of the global batch (each has normalised its own batches since the last time, and a
/// larger batch's statistics are the surer under `--rebalance`'s uneven split; with
/// `--sync-bn` they are the same already).
pub(super) fn average_buffers(
    mut buffers: Vec<f32>,
    coll: &mut dyn Collective,
    share: f32,
) -> Result<Vec<f32>, CollectiveError> {
    if !buffers.is_empty() && coll.world_size() > 1 {
        buffers.iter_mut().for_each(|b| *b *= share);
        coll.all_reduce_sum(&mut buffers)?;
    }
    Ok(buffers)
}
