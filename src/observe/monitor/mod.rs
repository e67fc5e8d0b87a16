//! Turns per-rank step samples into per-step rows and throughput: the analysis both frontends
//! share, so the TUI and the log always say the same thing.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use crate::engine::events::{EndsAt, StepStats};

/// One step as all ranks saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct StepRow {
    pub step: u64,
    pub epoch: u64,
    pub loss: f32,
    pub accuracy: f32,
    /// The mean gradient's L2 norm, before `--clip-grad-norm` (NaN where not recorded).
    pub grad_norm: f32,
    pub lr: f32,
    pub per_replica: usize,
    pub global_samples: usize,
    /// When the slowest rank finished, since the start.
    pub at: Duration,
    /// Fraction of the run's budget done.
    pub progress: f64,
    /// Where the next step's epoch and the run end (the engine's, at this step's batch).
    pub ends_at: Option<EndsAt>,
    /// Indexed by rank.
    pub ranks: Vec<StepStats>,
    /// The run so far, this step included; `None` in rows of files written before they were
    /// recorded.
    pub totals: Option<Totals>,
}

/// What every complete step of a run adds up to, from its start (a resumed run's, from its
/// resume). Each row carries them, so a reader given only some rows (the metrics file's every
/// `--log-every`th, an attached screen's newest) still sums the whole run, not a sample of it
/// (the logged steps are the ones that check the replicas, the newest are the slow ones).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Totals {
    pub steps: u64,
    pub samples: u64,
    /// The ranks' mean step time, summed: training time, pauses left out.
    pub train_s: f64,
    /// Summed over ranks and steps: step time and its parts (compute with the optimizer).
    pub rank_s: f64,
    pub compute_s: f64,
    pub data_s: f64,
    pub comm_s: f64,
    pub wait_s: f64,
    /// Host transfers (central storage's every step, local SGD's at its averages), summed.
    pub transfer_s: f64,
    /// The loader threads' time building the steps' batches (`StepStats::loader_busy`),
    /// summed over ranks and steps; `None` where no row said it (files from before it was
    /// recorded).
    pub loader_s: Option<f64>,
    /// The train loss smoothed over every step (the mean of the last `LOSS_WINDOW`, which the
    /// monitor keeps): a screen given only some rows draws the run's, not one of the rows it
    /// got.
    pub smoothed_loss: Option<f64>,
}

/// The last `LOSS_WINDOW` steps' train losses, a ring (`len` of them filled).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RecentLosses {
    losses: [f32; LOSS_WINDOW],
    len: usize,
    next: usize,
}

impl RecentLosses {
    /// Adds a step's loss (the oldest of a full window goes); their mean.
    pub fn push(&mut self, loss: f32) -> f64 {
        self.losses[self.next] = loss;
        self.next = (self.next + 1) % LOSS_WINDOW;
        self.len = (self.len + 1).min(LOSS_WINDOW);
        let kept = &self.losses[..self.len];
        kept.iter().map(|&l| f64::from(l)).sum::<f64>() / self.len as f64
    }
}

/// A loader threads' busy share from which they can hardly keep up: the screen's column
/// warns, and a rank waiting for its input is told that only more of them help.
pub const LOADERS_FULL: f64 = 0.9;

/// How busy the ranks' loader threads were building a step's batches, as a share of their
/// time: the ranks' mean (`None` where a rank did not say).
pub fn loader_share(ranks: &[StepStats]) -> Option<f64> {
    let busy: Option<f64> = (ranks.iter())
        .map(|r| r.loader_busy.map(|b| b.as_secs_f64()))
        .sum();
    let time: f64 = ranks.iter().map(|r| r.step_time.as_secs_f64()).sum();
    busy_share(busy?, time)
}

/// Loader threads' busy time (`StepStats::loader_busy`, summed) over the steps' time it is of:
/// held to 1 (batches built while the ranks validated or paused count in the steps that take
/// them); `None` for no time.
pub fn busy_share(busy: f64, time: f64) -> Option<f64> {
    (time > 0.0).then(|| (busy / time).min(1.0))
}

/// Shares of the ranks' step time (`Totals::shares`): compute, data, comm, wait, transfer,
/// other.
pub type Shares = [f64; 6];

/// The steps `Totals::smoothed_loss` is the mean of: a window, so that a spike (a loss of 1e16
/// among ones of 1e5) is gone from it after as many steps (an exponential average with a
/// weight of 1/20 held it off by decades for hundreds).
pub const LOSS_WINDOW: usize = 20;

/// The weight of a row's loss in a screen's own smoothing of a file whose rows carry no
/// smoothed loss (written before they did).
pub const LOSS_EMA: f64 = 0.05;

impl StepRow {
    /// Whether this is the run's last step (at its batch size then).
    pub fn is_last(&self) -> bool {
        self.ends_at.is_some_and(|e| e.run == self.step)
    }
}

/// The global batch a run trains at, from its steps: an epoch's last step, cut short, keeps
/// the one before (a chart of it dipped once an epoch); a batch change is the new one.
#[derive(Clone, Copy, Debug, Default)]
pub struct GlobalBatch {
    per_replica: usize,
    global: usize,
}

impl GlobalBatch {
    /// The global batch at `row` (rows in step order; some may be left out).
    pub fn at(&mut self, row: &StepRow) -> usize {
        let cut_short = row.per_replica == self.per_replica && row.global_samples < self.global;
        if !cut_short {
            (self.per_replica, self.global) = (row.per_replica, row.global_samples);
        }
        self.global
    }
}

#[cfg(test)]
impl StepRow {
    /// A step of 64 samples (32 a replica) with no rank's sample, `step` ms into the run.
    pub fn example(step: u64) -> StepRow {
        StepRow {
            step,
            epoch: 1,
            loss: 1.0,
            accuracy: 0.5,
            grad_norm: 1.0,
            lr: 1e-3,
            per_replica: 32,
            global_samples: 64,
            at: Duration::from_millis(step),
            progress: 0.0,
            ends_at: None,
            ranks: Vec::new(),
            totals: None,
        }
    }
}

impl Totals {
    /// Counts one complete step: its samples and every rank's sample of it.
    pub fn add(&mut self, global_samples: usize, ranks: &[StepStats]) {
        let secs = |d: Duration| d.as_secs_f64();
        self.steps += 1;
        self.samples += global_samples as u64;
        // (the ranks' mean: each rank's steps add up to its time training, the same for all of
        // them over a run; a step's slowest would count twice under local SGD, whose ranks are
        // in step only at its averages, the slow one's steps and the fast one's wait there)
        let sum: f64 = ranks.iter().map(|r| secs(r.step_time)).sum();
        self.train_s += sum / ranks.len().max(1) as f64;
        for r in ranks {
            self.rank_s += secs(r.step_time);
            self.compute_s += secs(r.compute + r.optimizer);
            self.data_s += secs(r.data_wait);
            self.comm_s += secs(r.comm);
            self.wait_s += secs(r.sync_wait);
            self.transfer_s += secs(r.transfer);
            if let Some(b) = r.loader_busy {
                *self.loader_s.get_or_insert(0.0) += secs(b);
            }
        }
    }

    /// What the steps after `earlier` (these totals as of an earlier step) add up to (the
    /// smoothed loss: this one's).
    pub fn since(&self, earlier: &Totals) -> Totals {
        Totals {
            steps: self.steps.saturating_sub(earlier.steps),
            samples: self.samples.saturating_sub(earlier.samples),
            train_s: self.train_s - earlier.train_s,
            rank_s: self.rank_s - earlier.rank_s,
            compute_s: self.compute_s - earlier.compute_s,
            data_s: self.data_s - earlier.data_s,
            comm_s: self.comm_s - earlier.comm_s,
            wait_s: self.wait_s - earlier.wait_s,
            transfer_s: self.transfer_s - earlier.transfer_s,
            loader_s: (self.loader_s).map(|s| s - earlier.loader_s.unwrap_or(0.0)),
            ..*self
        }
    }

    /// How busy the ranks' loader threads were building batches, as a share of their time
    /// (the ranks' mean); `None` before any step or where not recorded.
    pub fn loader_share(&self) -> Option<f64> {
        busy_share(self.loader_s?, self.rank_s)
    }

    /// Where the ranks' step time went, as shares of it: compute, data, comm, wait, host
    /// transfers (central storage, local SGD), and what those leave of the step (its own
    /// bookkeeping);
    /// `None` before any step.
    pub fn shares(&self) -> Option<Shares> {
        (self.rank_s > 0.0).then(|| {
            let [c, d, m, w, t] = [
                self.compute_s,
                self.data_s,
                self.comm_s,
                self.wait_s,
                self.transfer_s,
            ];
            let other = self.rank_s - (c + d + m + w + t);
            [c, d, m, w, t, other].map(|p| p / self.rank_s)
        })
    }
}

/// Rows older than this many steps behind the newest complete one are given up on (a sample
/// of theirs was dropped because the frontend lagged).
const PENDING_STEPS: u64 = 256;
/// Throughput is measured over roughly this much recent time.
const RATE_WINDOW: Duration = Duration::from_secs(2);
/// The ETA's pace is measured over a longer time, so an epoch's validation or a slow step
/// moves it little; one point is kept per `PACE_EVERY` of it.
const PACE_WINDOW: Duration = Duration::from_secs(30);
const PACE_EVERY: Duration = Duration::from_millis(250);

pub struct Monitor {
    ranks: usize,
    pending: BTreeMap<u64, Vec<Option<StepStats>>>,
    /// (finish time, cumulative samples, progress) of recent complete rows.
    recent: VecDeque<(Duration, u64, f64)>,
    /// (finish time, progress) over the ETA's window, a point per `PACE_EVERY`.
    paced: VecDeque<(Duration, f64)>,
    /// The batch per replica of the newest complete row: a change restarts the pace.
    per_replica: usize,
    total_samples: u64,
    totals: Totals,
    /// The losses of the last steps, `totals.smoothed_loss` their mean.
    losses: RecentLosses,
}

impl Monitor {
    pub fn new(ranks: usize) -> Monitor {
        Monitor {
            ranks,
            pending: BTreeMap::new(),
            recent: VecDeque::new(),
            paced: VecDeque::new(),
            per_replica: 0,
            total_samples: 0,
            totals: Totals::default(),
            losses: RecentLosses::default(),
        }
    }

    /// Adds one rank's sample; returns the step's row once every rank has reported it.
    pub fn on_step(&mut self, s: StepStats) -> Option<StepRow> {
        let step = s.step;
        let rank = s.rank;
        if rank >= self.ranks {
            return None;
        }
        let slot = self
            .pending
            .entry(step)
            .or_insert_with(|| vec![None; self.ranks]);
        slot[rank] = Some(s);
        if slot.iter().any(Option::is_none) {
            while self.pending.len() > PENDING_STEPS as usize {
                self.pending.pop_first();
            }
            return None;
        }
        let mut ranks: Vec<StepStats> = self.pending.remove(&step)?.into_iter().flatten().collect();
        split_device_waits(&mut ranks);
        self.pending.retain(|&k, _| k + PENDING_STEPS > step);
        let first = &ranks[0];
        let at = ranks.iter().map(|r| r.at).max().unwrap_or_default();
        self.count(at, first);
        self.totals.add(first.global_samples, &ranks);
        self.totals.smoothed_loss = Some(self.losses.push(first.loss));
        Some(StepRow {
            step,
            epoch: first.epoch,
            loss: first.loss,
            accuracy: first.accuracy,
            grad_norm: first.grad_norm,
            lr: first.lr,
            per_replica: first.per_replica,
            global_samples: first.global_samples,
            at,
            progress: first.progress,
            ends_at: first.ends_at,
            ranks,
            totals: Some(self.totals),
        })
    }

    /// A row already put together (read back from a metrics file): counted for the ETA.
    pub fn on_row(&mut self, row: &StepRow) {
        if let Some(first) = row.ranks.first() {
            self.count(row.at, first);
        }
    }

    /// Counts a complete step that ended at `at` (`first` is one rank's sample of it).
    fn count(&mut self, at: Duration, first: &StepStats) {
        self.total_samples += first.global_samples as u64;
        if first.after_pause {
            // the pause (a validation, a checkpoint, the user's) is not training time: the
            // window's points before it move past it, so the rate keeps the steps before it
            let start = at.saturating_sub(first.step_time);
            let gap = start.saturating_sub(self.recent.back().map_or(start, |r| r.0));
            for r in &mut self.recent {
                r.0 += gap;
            }
            if first.paused {
                // the pace before the pause still counts: its points move past the pause
                let gap = start.saturating_sub(self.paced.back().map_or(start, |p| p.0));
                for p in &mut self.paced {
                    p.0 += gap;
                }
            }
        }
        self.recent
            .push_back((at, self.total_samples, first.progress));
        while self.recent.len() > 2 && at.saturating_sub(self.recent[1].0) >= RATE_WINDOW {
            self.recent.pop_front();
        }
        // another batch size (a key, the memory's limit) trains at another pace: the old one's
        // points go, from the end of the step before on
        if self.per_replica != 0 && first.per_replica != self.per_replica {
            let from = self.paced.pop_back();
            self.paced.clear();
            self.paced.extend(from);
        }
        self.per_replica = first.per_replica;
        // the newest point moves along while it is under PACE_EVERY after the one before
        let n = self.paced.len();
        if n >= 2 && self.paced[n - 1].0.saturating_sub(self.paced[n - 2].0) < PACE_EVERY {
            self.paced[n - 1] = (at, first.progress);
        } else {
            self.paced.push_back((at, first.progress));
        }
        while self.paced.len() > 2 && at.saturating_sub(self.paced[1].0) >= PACE_WINDOW {
            self.paced.pop_front();
        }
    }

    /// Leaves a pause from `from` to `to` out of the ETA's pace, for rows read back, which do
    /// not say which of them came after a pause (the run's pause and resume events do).
    pub fn leave_out(&mut self, from: Duration, to: Duration) {
        let gap = to.saturating_sub(from);
        for p in self.paced.iter_mut().filter(|p| p.0 <= from) {
            p.0 += gap;
        }
    }

    /// Training samples per second over the last couple of seconds.
    pub fn samples_per_sec(&self) -> Option<f64> {
        let (t0, s0, _) = *self.recent.front()?;
        let (t1, s1, _) = *self.recent.back()?;
        let dt = t1.saturating_sub(t0).as_secs_f64();
        (self.recent.len() >= 2 && dt > 0.0).then(|| (s1 - s0) as f64 / dt)
    }

    /// Time left to the end of the budget at the pace of the last half minute.
    pub fn eta(&self) -> Option<Duration> {
        let (t0, p0) = *self.paced.front()?;
        let (t1, p1) = *self.paced.back()?;
        let dt = t1.saturating_sub(t0).as_secs_f64();
        let rate = (p1 - p0) / dt;
        (self.paced.len() >= 2 && dt > 0.0 && rate > 0.0)
            .then(|| Duration::from_secs_f64(((1.0 - p1).max(0.0) / rate).min(1e9)))
    }

    /// Samples in every complete row so far.
    pub fn total_samples(&self) -> u64 {
        self.total_samples
    }
}

/// GPU ranks time their NCCL all-reduce on the device, and it includes waiting for slower
/// peers to arrive (they report no wait of their own): the fastest rank's
/// all-reduce is the transfer, the rest of each rank's is waiting. Without this, the others'
/// waiting for a straggler hides inside "comm" and the straggler rule never sees it.
fn split_device_waits(ranks: &mut [StepStats]) {
    if ranks.len() < 2 || !ranks.iter().all(|r| r.device_timed) {
        return;
    }
    let transfer = ranks.iter().map(|r| r.comm).min().unwrap_or_default();
    for r in ranks {
        r.sync_wait += r.comm - transfer;
        r.comm = transfer;
    }
}

#[cfg(test)]
mod tests;
