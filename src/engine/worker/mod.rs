//! One device's training loop: agree on controls, take a batch, compute, all-reduce, update.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use super::heartbeat::{Heartbeats, Phase};
use super::thread_cpu_time;
use super::{EngineError, RunResult};
use crate::backend::Replica;
use crate::comm::Collective;
use crate::config::{Budget, RunConfig};
use crate::data::Dataset;
use crate::engine::control::Decider;
use crate::engine::events::{Applied, Ending, Event, StepStats};
use crate::engine::loader::{Cursor, RankLoader, Sharding};
use crate::engine::resume::TrainSplit;
use crate::engine::strategy::Buffers;
use crate::nn::model::Model;
use report::{Queued, Reported, Tally};

use super::rebalance;

mod boundary;
mod failed;
mod gpu;
mod in_sync;
mod pace;
mod pictures;
pub(super) mod report;
mod save;
mod validation;

pub(super) use failed::{panicked, stop_all};
pub(super) use gpu::{open_gpu, ALL_REDUCE_TIMEOUT_FACTOR};
pub(super) use report::{late, pools_bn};

pub(super) struct Worker {
    /// This worker's global rank, of `ranks` in the run.
    pub rank: usize,
    pub ranks: usize,
    /// The global ranks of this process (all of them in a run of one process).
    pub local: std::ops::Range<usize>,
    /// The steps this rank reported and has not yet told process 0, oldest first (runs over
    /// several processes; told at the next boundary, `report_slots` at most kept).
    pub unsent: std::collections::VecDeque<StepStats>,
    /// Every rank's steps told at the last boundary as words, and the newest step process 0
    /// has passed on per rank.
    pub reports: Vec<u64>,
    pub forwarded: Vec<u64>,
    /// Rank 0 has told of a first replica check.
    pub said_in_sync: bool,
    /// The parameters a replica check hashes, on the host (kept between checks: a check
    /// every step would otherwise map and fault in a fresh buffer each time).
    pub check_params: Vec<f32>,
    pub cfg: Arc<RunConfig>,
    pub model: Model,
    /// The training split, as a checkpoint records it.
    pub train: TrainSplit,
    /// The training set's class names, output by output (empty where its labels are numbers).
    pub classes: Vec<String>,
    pub val: Arc<Dataset>,
    /// This process's picture sets: rank 0 tells of the files that did not decode.
    pub picture_sets: Vec<Arc<crate::data::ImageSet>>,
    /// The training split's classes none of whose pictures decode (a picture set's): every
    /// rank stops at one (it would train on blank samples).
    pub train_lost: Option<Arc<crate::data::LostClasses>>,
    pub coll: Box<dyn Collective>,
    pub loader: RankLoader,
    pub decider: Option<Decider>,
    pub events: Sender<Event>,
    pub stats: Sender<StepStats>,
    pub t0: Instant,
    pub step: u64,
    /// The step this run started at (0, or its resume's): its next step's loss comes before
    /// any update of the run.
    pub started_at: u64,
    pub cursor: Cursor,
    pub per_replica: usize,
    /// The batch per replica this worker started at (`warm_share`'s).
    pub first_per_replica: usize,
    pub lr_base: f32,
    /// The newest checkpoint of this run (or the one it resumed from), and its step.
    pub last_checkpoint: Option<(u64, PathBuf)>,
    /// The tensors that began training late, for checkpoints (`checkpoint::began`).
    pub optimizer_began: std::collections::BTreeMap<String, u64>,
    /// The checkpoints this run wrote and keeps, oldest first (`--keep-checkpoints`).
    pub written: std::collections::VecDeque<PathBuf>,
    /// The epoch's loss summed over its samples, and the samples, so far (a resumed run's
    /// from its checkpoint, so its first epoch's train loss is the whole epoch's).
    pub epoch_sum: [f64; 2],
    /// The best validation of the run's line so far (a resumed run's from its checkpoint),
    /// for checkpoints.
    pub line_best: Option<crate::engine::checkpoint::BestVal>,
    pub beats: Heartbeats,
    /// Uneven per-rank batch sizes chosen by `--rebalance` (`None`: even).
    pub split: Option<Arc<Vec<usize>>>,
    /// This rank's work time and samples since the last rebalancing decision, measured from
    /// step `rebalance_since` (the run's start or resume, a batch change, the last decision).
    pub rebalance_work: Duration,
    pub rebalance_samples: usize,
    pub rebalance_since: u64,
    /// The ranks' speeds the last rebalancing decision went by, smoothed across decisions.
    pub rebalance_speeds: Option<Vec<f32>>,
    /// How this rank exchanges gradients and updates (`--strategy`).
    pub strategy: super::strategy::Runner,
    /// Where a GPU rank tells the largest micro-batch it can take (`Controller` checks it).
    pub device_cap: Arc<super::control::DeviceCap>,
    /// The largest micro-batch this rank's device takes (a CPU rank's: any the run allows).
    pub max_rows: usize,
    /// Every rank's `max_rows`, told to each other before the first step (`--rebalance` keeps
    /// to them).
    pub caps: Vec<usize>,
    /// The run's other processes on this machine: their ranks and process ids.
    pub peers_here: Vec<crate::pids::Peer>,
    /// Whether this rank's replica reports its steps late (`late`), and the last step queued
    /// then, not yet reported.
    pub late: bool,
    pub queued: Option<report::Queued>,
    /// The time spent on the last step after its measured end (its report, a replica check:
    /// a model's hash each step under `--log-every 1`), counted into the next step's `other`;
    /// none after a step that validates (validation is left out, as pauses are).
    pub after_step: Duration,
    /// Whether the training passes pool batch norm's statistics across the ranks (`pools_bn`).
    pub pools_bn: bool,
}

pub(super) struct WorkerEnd {
    pub rank: usize,
    pub result: RunResult,
}

/// Runs the loop; on any failure (error or panic) aborts the collective so that no other rank
/// waits forever, and reports the root cause once.
pub(super) fn run(mut w: Worker, mut replica: Box<dyn Replica>) -> Result<WorkerEnd, EngineError> {
    let outcome = catch_unwind(AssertUnwindSafe(|| w.train(replica.as_mut())));
    let result = outcome.unwrap_or_else(|panic| Err(panicked(&w, panic)));
    match result {
        Ok(result) => Ok(WorkerEnd {
            rank: w.rank,
            result,
        }),
        Err(e) => stop_all(w, e),
    }
}

/// Where worker `w`'s dropout masks are drawn from: its own seed (the run's seed and its rank),
/// and the training passes made before its first step (`--grad-accum` a step: every
/// micro-batch counts, an empty one too), so a resumed run draws the masks the run it continues
/// would have drawn.
pub(super) fn dropout_stream(w: &Worker) -> (u64, u64) {
    let seed = w.cfg.seed.wrapping_mul(1_000_003) ^ w.rank as u64;
    (seed, w.step * w.cfg.grad_accum as u64)
}

impl Worker {
    fn done(&self) -> bool {
        match self.cfg.budget {
            Budget::Epochs(e) => self.cursor.epoch >= e,
            Budget::Steps(s) => self.step >= s,
        }
    }

    /// The run's stop at a loss (or weights) not finite at `step` of `epoch`: where that is
    /// the run's first step, no update made it so, and what it started from is named.
    fn non_finite(&self, step: u64, epoch: u64) -> EngineError {
        let pictures = self.val.pictures.is_some() || self.train_lost.is_some();
        let scaled = match pictures {
            true => " (--normalize scales pictures' values)",
            false => "",
        };
        let started_from = (step == self.started_at + 1).then(|| {
            match (&self.cfg.resume, &self.cfg.init) {
                (Some(point), _) => format!("the weights of the checkpoint it resumed from ({}) give outputs that overflow (NaN or infinity) on its data: was its run diverging as it saved them? resume from an earlier checkpoint of the run, with a lower --lr", point.display()),
                (None, Some(init)) => format!("the weights of --init {} or the data's values give outputs that overflow (NaN or infinity): start from other weights, or check the data's values{scaled}", init.display()),
                (None, None) => format!("the data's values make the seeded initial weights' outputs overflow (NaN or infinity): check them{scaled}"),
            }
        });
        EngineError::NonFinite {
            step,
            epoch,
            checkpoint: self.last_checkpoint_path(),
            started_from,
        }
    }

    fn sharding(&self) -> Sharding {
        Sharding {
            per_replica: self.per_replica,
            ranks: self.ranks,
            accum: self.cfg.grad_accum,
            split: self.split.clone(),
        }
    }

    fn train(&mut self, replica: &mut dyn Replica) -> Result<RunResult, EngineError> {
        replica.report_late(self.late);
        self.tell_caps()?;
        let mut tally = Tally {
            best_saved: self.best_to_beat(),
            ..Tally::default()
        };
        // (a resumed run's split, its checkpoint's: said as a rebalancing from its first step)
        if let Some(sizes) = self.split.as_deref().filter(|_| self.rank == 0) {
            let _ = self.events.send(Event::Control {
                step: self.step,
                applied: Applied::Split(sizes.clone()),
            });
        }
        let mut stopped = false;
        // training stopped after the last step (an epoch's end and validation, a checkpoint):
        // the next one restarts the throughput windows, as after a pause
        let (mut held, mut first) = (false, true);
        while !self.done() {
            let met = Instant::now();
            let continues = crate::clock::continues();
            let d = if !self.strategy.in_sync(self.step) {
                Default::default() // local SGD agrees on controls at its averages only
            } else {
                self.boundary()?
            };
            // waiting there for another process is the step's; not a pause, the ranks' start,
            // nor rank 0 writing a checkpoint or validating alone after the step before
            let alone = d.was_paused || held || first;
            let agreeing = if alone { Duration::ZERO } else { met.elapsed() };
            first = false;
            if d.hold {
                // a checkpoint asked while paused: written now, and the run stays paused
                self.catch_up(replica, &mut tally)?;
                self.save(replica, true)?;
                continue;
            }
            if let Some(b) = d.batch.filter(|&b| b != self.per_replica) {
                self.change_batch(b);
            } else if self.cfg.rebalance
                && self.step > 0
                && self.step.is_multiple_of(rebalance::EVERY)
            {
                self.rebalance()?;
            }
            if d.checkpoint || d.stop.is_some() {
                self.catch_up(replica, &mut tally)?;
            }
            if d.checkpoint || d.stop == Some(true) {
                self.save(replica, d.checkpoint)?;
            }
            if d.stop.is_some() {
                stopped = true;
                break;
            }
            self.finishing_at_the_last_boundary();

            let next = self.step + 1;
            self.beats.beat(self.rank, next, Phase::Data);
            let t_start = Instant::now();
            let mut batch = self.loader.next_batch();
            debug_assert_eq!(batch.start, self.cursor);
            if let Some((_, delay)) = self.cfg.slow_data.filter(|f| f.0 == self.rank) {
                std::thread::sleep(delay);
            }
            let data_wait = t_start.elapsed();
            // a class none of whose pictures decode would train on blank samples
            self.pictures_usable()?;
            if self.cfg.inject_panic == Some((self.rank, self.step + 1)) {
                panic!(
                    "injected fault (--inject-panic {}:{})",
                    self.rank,
                    self.step + 1
                );
            }
            self.beats.beat(self.rank, next, Phase::Compute);
            let (t, cpu0) = (Instant::now(), thread_cpu_time());
            let sync: Option<&mut dyn Collective> = match self.pools_bn {
                true => Some(&mut *self.coll),
                false => None,
            };
            replica.compute_grads(&batch.micro, sync);
            for message in replica.take_notes() {
                let _ = self.events.send(Event::DeviceNote {
                    rank: self.rank,
                    message,
                });
            }
            self.loader.recycle(&mut batch.micro);
            if let Some((_, factor)) = self.cfg.slow_rank.filter(|f| f.0 == self.rank) {
                slow_down(cpu0, t, factor);
            }
            let compute = t.elapsed();
            let compute_cpu = thread_cpu_time()
                .zip(cpu0)
                .map(|(b, a)| b.saturating_sub(a));
            self.beats.beat(self.rank, next, Phase::Reduce);
            // (of this step, or of the one before where the replica reports late)
            let (m, moved) = self.strategy.exchange(replica, self.coll.as_mut(), next)?;
            let reported = Reported {
                m,
                moved,
                device: replica.device_times(),
            };
            if !self.late {
                // checked before this step's update, so a non-finite loss never reaches the
                // weights (`report` checks again, for late reports, which come after it)
                let loss = (m.loss_sum / m.samples.max(1.0)) as f32;
                if !loss.is_finite() {
                    return Err(self.non_finite(next, self.cursor.epoch + 1));
                }
            }
            self.beats.beat(self.rank, next, Phase::Update);
            let lr = self.lr_now();
            let (optimizer, synced) =
                self.strategy
                    .update(replica, self.coll.as_mut(), lr, next)?;
            // the process stopped (Ctrl-Z, kill -STOP) and continued during this step: its
            // time leaves the stop out, and the stop is a pause to the ETA's pace
            let continued = crate::clock::continues() != continues;
            let after_last = std::mem::take(&mut self.after_step);
            let step_time = match continued {
                true => crate::clock::awake(t_start.elapsed()),
                false => t_start.elapsed() + agreeing + after_last,
            };

            self.step += 1;
            let epoch = self.cursor.epoch;
            self.cursor = batch.next;
            let samples = batch.micro.iter().map(|mb| mb.n).sum();
            let queued = Queued {
                stats: StepStats {
                    rank: self.rank,
                    step: self.step,
                    epoch: epoch + 1,
                    samples,
                    global_samples: batch.global_samples,
                    per_replica: self.per_replica,
                    lr,
                    data_wait,
                    loader_busy: Some(self.loader.busy(&batch)),
                    compute,
                    compute_cpu,
                    optimizer,
                    step_time,
                    sync_wait: if continued { Duration::ZERO } else { agreeing },
                    after_pause: d.was_paused || held || continued,
                    paused: d.was_paused || continued,
                    progress: self.progress(),
                    ends_at: Some(self.sharding().ends_at(
                        self.step,
                        self.cursor,
                        self.train.samples,
                        self.cfg.budget,
                    )),
                    // the replica's report fills in the rest, and when it is known done (`at`)
                    ..StepStats::default()
                },
                synced,
                epoch_end: batch.epoch_end,
                mid_validation: self.validation_due(batch.epoch_end),
                continued,
            };
            let settle = batch.epoch_end || queued.mid_validation.is_some();
            self.say_skipped_pictures();
            // decided before the report: a validation in it makes local SGD's replicas one,
            // which a rank reporting late would only do after the check
            let check = self.check_due();
            let reporting = Instant::now();
            match self.late {
                true => {
                    if let Some(before) = self.queued.replace(queued) {
                        self.report(before, reported, replica, &mut tally)?;
                    }
                }
                false => self.report(queued, reported, replica, &mut tally)?,
            }
            if check {
                // reading the parameters waits for the device: through the last step's end
                // first, which a failed peer's abort can end (the read itself cannot)
                self.catch_up(replica, &mut tally)?;
            }
            self.check_in_sync(&mut *replica, check)?;
            // (a validation in the report is no step's: the next one counts as after a pause)
            self.after_step = match settle {
                true => Duration::ZERO,
                false => reporting.elapsed(),
            };
            let checkpoint =
                (self.cfg.checkpoint_every).is_some_and(|n| self.step.is_multiple_of(n));
            if settle || checkpoint {
                self.catch_up(replica, &mut tally)?;
            }
            if checkpoint {
                self.save(replica, false)?;
            }
            held = settle || checkpoint;
        }
        // (no control is taken from here on: one asked now hears that the run has ended)
        self.decider = None;
        self.catch_up(replica, &mut tally)?;
        self.last_reports()?;
        self.sync_replicas(replica, Buffers::Aside)?;
        if !stopped && self.cfg.final_checkpoint {
            self.save(replica, false)?;
        }
        if self.rank == 0 {
            let ending = match stopped {
                true => Ending::Stopped,
                false => Ending::Completed,
            };
            let _ = self.events.send(Event::Finished {
                step: self.step,
                ending,
            });
        }
        Ok(RunResult {
            steps: self.step,
            stopped,
            losses: tally.losses,
            step_ends: tally.step_ends,
            step_samples: tally.step_samples,
            state: self.strategy.export(replica, self.step),
            last_checkpoint: self.last_checkpoint_path(),
            best_val_accuracy: tally.best_val,
            data_skipped: self.picture_sets.iter().map(|s| s.failures()).sum(),
        })
    }

    fn last_checkpoint_path(&self) -> Option<PathBuf> {
        self.last_checkpoint.as_ref().map(|(_, p)| p.clone())
    }
}

/// `--slow-rank`: real extra work, so the compute this thread did since `cpu0` (wall `t0`
/// where CPU time is unknown) takes `factor` times as long.
fn slow_down(cpu0: Option<Duration>, t0: Instant, factor: f64) {
    match cpu0 {
        Some(c0) => {
            let target = (thread_cpu_time().unwrap_or(c0) - c0).mul_f64(factor - 1.0);
            let start = thread_cpu_time().unwrap_or(c0);
            while thread_cpu_time().is_some_and(|c| c - start < target) {
                std::hint::spin_loop();
            }
        }
        None => std::thread::sleep(t0.elapsed().mul_f64(factor - 1.0)),
    }
}
