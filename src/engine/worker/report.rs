//! A step's report: what the host knows once it has queued a step (`Queued`), joined with what
//! the replica reports of it (`Reported`: at once, or one step late where it reports late) into
//! the step's statistics, the run's losses and the epoch's tally; at an epoch's end, its
//! validation, and within one where `--val-every` asks.

use std::time::Duration;

use super::Worker;
use crate::backend::{BatchMetrics, DeviceTimes, Replica};
use crate::config::strategy::Strategy;
use crate::config::RunConfig;
use crate::engine::checkpoint::BestVal;
use crate::engine::events::{Event, StepStats};
use crate::engine::strategy::Moved;
use crate::engine::EngineError;

/// A step the host has queued: its statistics but for what the replica reports (loss,
/// accuracy, the device's times), what its update moved (local SGD's average), whether it
/// ended an epoch, and the epochs trained by it where a validation within an epoch falls due
/// after it (`--val-every`).
pub(in crate::engine) struct Queued {
    pub stats: StepStats,
    pub synced: Moved,
    pub epoch_end: bool,
    pub mid_validation: Option<f32>,
    /// The process was stopped and continued during the step (`clock::continues`).
    pub continued: bool,
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
    /// Rank 0: each step's loss and when it ended, of the last `STEP_HISTORY` steps at least
    /// (twice as many at most: a long run's memory stays bounded).
    pub losses: Vec<f32>,
    pub step_ends: Vec<Duration>,
    pub step_samples: Vec<usize>,
    pub best_val: Option<f32>,
    /// Rank 0, `--checkpoint-best`: the accuracy a validation must beat to be written as the
    /// best (that of the best checkpoint written, or of the line's found at the start).
    pub best_saved: Option<f32>,
}

/// The steps a run's result keeps at least (`RunResult::losses`): its tests' and
/// `--calibrate`'s runs, whole.
pub const STEP_HISTORY: usize = 1 << 16;

impl Tally {
    /// Rank 0: a step's loss, when it ended and the samples it trained.
    fn stepped(&mut self, loss: f32, at: Duration, samples: usize) {
        if self.losses.len() >= 2 * STEP_HISTORY {
            self.losses.drain(..STEP_HISTORY);
            self.step_ends.drain(..STEP_HISTORY);
            self.step_samples.drain(..STEP_HISTORY);
        }
        self.losses.push(loss);
        self.step_ends.push(at);
        self.step_samples.push(samples);
    }

    fn validated(&mut self, accuracy: f32) {
        self.best_val = Some(self.best_val.map_or(accuracy, |b| b.max(accuracy)));
    }
}

impl Worker {
    /// Step `q` joined with its report `r`: checked finite, its statistics sent, added to the
    /// tally; at an epoch's end, the validation and the epoch's line, and a validation within
    /// an epoch where one is due, each followed by `--checkpoint-best`'s checkpoint where it
    /// is the best (the replica then holds the model `q` left: such a step is
    /// reported before the next is queued).
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
            mid_validation,
            continued,
        } = q;
        let Reported { m, moved, device } = r;
        stats.loss = (m.loss_sum / m.samples.max(1.0)) as f32;
        if !stats.loss.is_finite() {
            return Err(self.non_finite(stats.step, stats.epoch));
        }
        stats.accuracy = (m.correct / m.samples.max(1.0)) as f32;
        stats.grad_norm = m.grad_norm;
        // done by now (on a device, possibly a while ago, but no sooner than it was queued)
        stats.at = self.t0.elapsed();
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
        stats.sync_wait += moved.wait;
        stats.transfer = moved.transfer;
        if continued {
            stats.fit_awake();
        }
        let (step, epoch, at, loss) = (stats.step, stats.epoch, stats.at, stats.loss);
        let global_samples = stats.global_samples;
        if self.local.len() < self.ranks {
            self.unsent.push_back(stats.clone());
            // (local SGD's longest intervals: the newest steps of one)
            if self.unsent.len() > self.report_slots() {
                self.unsent.pop_front();
            }
        }
        let _ = self.stats.try_send(stats);
        if self.rank == 0 {
            tally.stepped(loss, at, global_samples);
        }
        self.epoch_sum[0] += m.loss_sum;
        self.epoch_sum[1] += m.samples;
        let validated = if epoch_end {
            let (val_loss, val_acc) = self.validate(replica)?;
            if self.rank == 0 {
                let train_loss = (self.epoch_sum[0] / self.epoch_sum[1].max(1.0)) as f32;
                let _ = self.events.send(Event::EpochDone {
                    epoch,
                    step,
                    train_loss,
                    val_loss,
                    val_accuracy: val_acc,
                    elapsed: self.t0.elapsed(),
                });
            }
            self.epoch_sum = [0.0, 0.0];
            val_acc
        } else if let Some(epochs) = mid_validation {
            let (val_loss, val_acc) = self.validate(replica)?;
            if let (Some(val_loss), Some(val_accuracy), 0) = (val_loss, val_acc, self.rank) {
                let _ = self.events.send(Event::Validated {
                    step,
                    epochs,
                    val_loss,
                    val_accuracy,
                    elapsed: self.t0.elapsed(),
                });
            }
            val_acc
        } else {
            None
        };
        if let Some(a) = validated {
            tally.validated(a);
            self.line_best = Some(BestVal::with(self.line_best, a, step));
            self.save_best(replica, &mut tally.best_saved, a)?;
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
        let moved = Moved::from(replica.catch_up(&*self.coll)?);
        // (the replica's own metrics are the global ones: late reports are never central
        // storage's, whose exchange sums them on the host, `late`)
        let r = Reported {
            m: replica.batch_metrics(),
            moved,
            device: replica.device_times(),
        };
        self.report(q, r, replica, tally)
    }
}

/// Whether a rank reports its steps late (`Replica::report_late`): `MGTOP_METRICS_LATE`, else
/// on GPUs (so the host never waits inside a step) and not on CPU workers (whose host is their
/// device); never under central storage (its exchange reads the gradients on the host each step)
/// or where `--sync-bn` pools statistics (`pools_bn`: its passes exchange them through the host,
/// which waits inside the step anyway).
pub(crate) fn late(cfg: &RunConfig, gpu: bool, pools_bn: bool) -> bool {
    cfg.metrics_late.unwrap_or(gpu) && cfg.strategy != Strategy::CentralStorage && !pools_bn
}

/// Whether the run's training passes pool batch norm's statistics across its `ranks`:
/// `--sync-bn` over more than one, on a model with a batch norm on batch statistics (one whose
/// statistics are all fixed, or a run of one rank, has none to pool: its passes stay whole, in
/// CUDA graphs where they can be).
pub(crate) fn pools_bn(cfg: &RunConfig, model: &crate::nn::model::Model, ranks: usize) -> bool {
    cfg.sync_bn && ranks > 1 && model.has_batch_statistics()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_run_keeps_its_newest_steps_not_every_step() {
        let mut t = Tally::default();
        let steps = 2 * STEP_HISTORY + 5;
        for i in 0..steps {
            t.stepped(i as f32, Duration::from_millis(i as u64), i);
        }
        assert!((STEP_HISTORY..=2 * STEP_HISTORY).contains(&t.losses.len()));
        assert_eq!(t.losses.len(), t.step_ends.len());
        assert_eq!(t.losses.len(), t.step_samples.len());
        // the newest, in order, with their times and samples beside them
        let first = steps - t.losses.len();
        assert_eq!(t.losses.last(), Some(&((steps - 1) as f32)));
        assert_eq!(t.step_samples[0], first);
        assert_eq!(t.step_ends[0], Duration::from_millis(first as u64));
    }

    /// `--sync-bn` pools statistics only where there are some to pool: over 2 ranks or more, on
    /// a batch norm not fixed to its running statistics (a pass that pools none stays whole, so
    /// reports late and goes into CUDA graphs on GPUs).
    #[test]
    fn sync_bn_pools_only_batch_statistics_of_several_ranks() {
        use crate::nn::model::{Model, ModelSpec};
        use crate::nn::shape::Shape;
        let cfg = RunConfig {
            sync_bn: true,
            ..RunConfig::default()
        };
        let spec: ModelSpec = "conv4k3,bn,gap".parse().unwrap();
        let image = Shape::Image { c: 1, h: 8, w: 8 };
        let mut model = Model::new(image, &spec, 3).unwrap();
        assert!(pools_bn(&cfg, &model, 2));
        assert!(!pools_bn(&cfg, &model, 1), "one rank");
        let plain = RunConfig::default();
        assert!(!pools_bn(&plain, &model, 2), "no --sync-bn");
        model.fix_statistics(&model.batch_norms());
        assert!(!pools_bn(&cfg, &model, 2), "every batch norm fixed");
        assert!(late(&cfg, true, pools_bn(&cfg, &model, 2)));
    }
}
