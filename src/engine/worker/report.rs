//! A step's report: what the host knows once it has queued a step (`Queued`), joined with what
//! the replica reports of it (`Reported`: at once, or one step late where it reports late) into
//! the step's statistics, the run's losses and the epoch's tally; at an epoch's end, its
//! validation.

use std::time::Duration;

use super::Worker;
use crate::backend::{BatchMetrics, DeviceTimes, Replica};
use crate::engine::events::{Event, StepStats};
use crate::engine::strategy::Moved;
use crate::engine::EngineError;

/// A step the host has queued: its statistics but for what the replica reports (loss,
/// accuracy, the device's times), what its update moved (local SGD's average), and whether it
/// ended an epoch.
pub(in crate::engine) struct Queued {
    pub stats: StepStats,
    pub synced: Moved,
    pub epoch_end: bool,
}

/// What the replica reports of a step: the batch's global metrics, the exchange's time and the
/// device's own times.
pub(super) struct Reported {
    pub m: BatchMetrics,
    pub moved: Moved,
    pub device: Option<DeviceTimes>,
}

/// What the run adds up from its steps' reports.
#[derive(Default)]
pub(super) struct Tally {
    /// Rank 0: each step's loss and when it ended.
    pub losses: Vec<f32>,
    pub step_ends: Vec<Duration>,
    pub best_val: Option<f32>,
    epoch_loss: f64,
    epoch_samples: f64,
}

impl Worker {
    /// Step `q` joined with its report `r`: checked finite, its statistics sent, added to the
    /// tally; at an epoch's end, the validation and the epoch's line (the replica then holds the
    /// model `q` left: an epoch's last step is reported before the next is queued).
    pub(super) fn report(
        &mut self,
        q: Queued,
        r: Reported,
        replica: &mut dyn Replica,
        tally: &mut Tally,
    ) -> Result<(), EngineError> {
        let Queued {
            mut stats,
            synced,
            epoch_end,
        } = q;
        let Reported { m, moved, device } = r;
        stats.loss = (m.loss_sum / m.samples.max(1.0)) as f32;
        if !stats.loss.is_finite() {
            return Err(EngineError::NonFinite {
                step: stats.step,
                epoch: stats.epoch,
                checkpoint: self.last_checkpoint_path(),
            });
        }
        stats.accuracy = (m.correct / m.samples.max(1.0)) as f32;
        if let Some(dev) = device {
            // a GPU: the host only queued the work; the device says how long it took
            stats.compute = dev.compute;
            stats.compute_cpu = None;
            stats.device_timed = true;
            // timed on the device one step late (read after the next step's end): the host's
            // time of it is only the launch
            if let Some(o) = dev.optimizer {
                stats.optimizer = o;
            }
        }
        self.rebalance_work += stats.data_wait + stats.compute_cpu.unwrap_or(stats.compute);
        self.rebalance_samples += stats.samples;
        let moved = moved.plus(synced);
        stats.comm = moved.comm;
        stats.sync_wait = moved.wait;
        stats.transfer = moved.transfer;
        let (step, epoch, at, loss) = (stats.step, stats.epoch, stats.at, stats.loss);
        if self.local.len() < self.ranks {
            self.last_stats = Some(stats.clone());
        }
        let _ = self.stats.try_send(stats);
        if self.rank == 0 {
            tally.losses.push(loss);
            tally.step_ends.push(at);
        }
        tally.epoch_loss += m.loss_sum;
        tally.epoch_samples += m.samples;
        if epoch_end {
            let (val_loss, val_acc) = self.validate(replica)?;
            if let Some(a) = val_acc {
                tally.best_val = Some(tally.best_val.map_or(a, |b| b.max(a)));
            }
            if self.rank == 0 {
                let train_loss = (tally.epoch_loss / tally.epoch_samples.max(1.0)) as f32;
                let _ = self.events.send(Event::EpochDone {
                    epoch,
                    step,
                    train_loss,
                    val_loss,
                    val_accuracy: val_acc,
                    elapsed: self.t0.elapsed(),
                });
            }
            (tally.epoch_loss, tally.epoch_samples) = (0.0, 0.0);
        }
        Ok(())
    }

    /// Reports the step still queued, if any, once the replica has it (before anything that
    /// needs the model of the last step: a checkpoint, a validation, the end of the run).
    pub(super) fn catch_up(
        &mut self,
        replica: &mut dyn Replica,
        tally: &mut Tally,
    ) -> Result<(), EngineError> {
        let Some(q) = self.queued.take() else {
            return Ok(());
        };
        let timing = replica.catch_up(&*self.coll)?;
        let r = self.reported(replica, self.strategy.reduced(timing, q.stats.step));
        self.report(q, r, replica, tally)
    }

    /// What the replica reports now, with the exchange's time.
    pub(super) fn reported(&self, replica: &dyn Replica, moved: Moved) -> Reported {
        Reported {
            m: replica.batch_metrics(),
            moved,
            device: replica.device_times(),
        }
    }
}
