//! Which records the log and the metrics files keep (`--log-every`), decided once for both.
//!
//! Steps: every Nth asked for; for `auto`, every 50th, or where those come faster than ten a
//! second, every 100th, 200th, 500th, 1000th, ... (the least that keeps a tenth of a second of
//! run time between two, at the pace of the last two kept: round steps, as few as a user reads;
//! a smaller stride only once the pace has halved, so a pace near a boundary keeps one), or
//! where 50 steps take more than ten seconds, every 20th, 10th, 5th, 2nd or every step (the
//! most that keeps within ten seconds: a slow model speaks every few seconds, from its start).
//! A step a second or more after the last kept, where the pace since then wants a smaller
//! stride (`Ladder::changed`), is kept where it is a multiple of that stride, so a run that slowed (or a slow run's
//! start) is not silent until the next multiple of its old stride. A step due that was cut
//! short (an epoch's last batch) is put off to the next: where the epochs' steps divide the
//! stride every kept step would be a short one. The run's last step is kept whatever the rule.
//!
//! Epochs' ends and `--val-every`'s validations (`Scores`): under `auto`, past a run's first
//! 100, thinned alike where they come faster than ten a second (a small data set trains
//! thousands of epochs a second): every epoch, or every 2nd, 5th, 10th, 20th, ..., and every
//! one with the best validation accuracy of its kind so far (at most one for each record
//! written: see `Verdict::Best`); the run's last the recorder keeps at its end. A number asked
//! for keeps them all.

use std::cmp::Ordering;
use std::time::Duration;

use crate::config::log_every::{LogEvery, AUTO_GAP};
use crate::engine::events::Event;
use crate::observe::monitor::StepRow;

/// Which steps are kept.
pub struct Kept {
    every: LogEvery,
    steps: Ladder,
    /// `auto` put the step due off to this one: the due one was an epoch's short last batch.
    put_off: bool,
    /// The global batch of the step before (0: none yet).
    last_global: usize,
}

impl Kept {
    pub fn new(every: LogEvery) -> Kept {
        Kept {
            every,
            steps: Ladder::new(every.steps().max(1)),
            put_off: false,
            last_global: 0,
        }
    }

    /// Whether `row` (the newest, rows in step order) is kept. Under `auto` a step cut short
    /// (an epoch's last batch: fewer samples than the step before), where one is due, puts it
    /// off to the step after (once, and where that one is not due anyway): where the epochs'
    /// steps divide the stride every kept step would be one, and a reader (the log, `view`'s
    /// step times) would see none of the run's whole steps.
    pub fn keep(&mut self, row: &StepRow) -> bool {
        let last = row.is_last();
        let short =
            row.global_samples < std::mem::replace(&mut self.last_global, row.global_samples);
        match self.every {
            LogEvery::Auto => {
                let due = self.steps.keep(row.step, row.at, last) || self.put_off;
                let next_due = self.steps.stride == 1;
                self.put_off = due && short && !last && !self.put_off && !next_due;
                due && !self.put_off
            }
            LogEvery::Steps(n) => row.step.is_multiple_of(n) || last,
        }
    }
}

/// What the files do with an epoch's end or a validation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Written now.
    Kept,
    /// The best of its kind so far, come within `AUTO_GAP` of the last kept: written before
    /// the next record, unless a better one comes first.
    Best,
    /// Left out (written at the run's end where it is the last of its kind).
    Thinned,
}

/// Which epochs' ends and validations are kept.
pub struct Scores {
    thin: bool,
    epochs: Scored,
    validations: Scored,
    /// The validations within epochs heard of (they are numbered so).
    validated: u64,
}

/// One kind's thinning, and its best validation accuracy heard of.
struct Scored {
    ladder: Ladder,
    best: Option<f32>,
    /// The number of the first heard of (a resumed run's first epoch is not 1).
    first: Option<u64>,
}

/// The epochs' ends (and validations) a run keeps every one of before it thins them: a short
/// run's are all said, and a long one's first, its steepest stretch.
const WHOLE: u64 = 100;

impl Scores {
    pub fn new(every: LogEvery) -> Scores {
        let scored = || Scored {
            ladder: Ladder::new(1),
            best: None,
            first: None,
        };
        Scores {
            thin: every == LogEvery::Auto,
            epochs: scored(),
            validations: scored(),
            validated: 0,
        }
    }

    /// What becomes of event `ev`, at run time `at` (every event but an epoch's end and a
    /// validation is kept).
    pub fn keep(&mut self, ev: &Event, at: Duration) -> Verdict {
        let (of, n, accuracy) = match *ev {
            Event::EpochDone {
                epoch,
                val_accuracy,
                ..
            } => (&mut self.epochs, epoch, val_accuracy),
            Event::Validated { val_accuracy, .. } => {
                self.validated += 1;
                (&mut self.validations, self.validated, Some(val_accuracy))
            }
            _ => return Verdict::Kept,
        };
        let best = accuracy
            .filter(|a| a.is_finite() && of.best.is_none_or(|b| *a > b))
            .inspect(|a| of.best = Some(*a))
            .is_some();
        let first = *of.first.get_or_insert(n);
        if !self.thin || of.ladder.keep(n, at, n.saturating_sub(first) < WHOLE) {
            Verdict::Kept
        } else if !best {
            Verdict::Thinned
        } else if of.ladder.since_last(at) >= AUTO_GAP {
            of.ladder.keep(n, at, true);
            Verdict::Kept
        } else {
            Verdict::Best
        }
    }
}

/// `auto`'s rule for one kind of record numbered in order (steps; epochs; validations): every
/// `base`th, or a rounder stride that keeps `AUTO_GAP` between two, or a smaller one that
/// keeps within `AUTO_SLOW`.
struct Ladder {
    base: u64,
    stride: u64,
    /// The newest number kept, and when it came (run time).
    last: Option<(u64, Duration)>,
    /// The number before the first heard of, at the run's start (0): `last` till one is kept.
    start: Option<u64>,
}

impl Ladder {
    fn new(base: u64) -> Ladder {
        Ladder {
            base,
            stride: base,
            last: None,
            start: None,
        }
    }

    /// Whether number `n`, at run time `at`, is kept (`must`: whatever the stride).
    fn keep(&mut self, n: u64, at: Duration, must: bool) -> bool {
        let start = *self.start.get_or_insert(n.saturating_sub(1));
        let (m, t) = self.last.unwrap_or((start, Duration::ZERO));
        let secs = at.saturating_sub(t).as_secs_f64();
        let count = n.saturating_sub(m);
        let pace = (secs > 0.0 && count > 0).then(|| count as f64 / secs);
        // (past a second, at a pace that wants a smaller stride: a multiple of that)
        let late = secs >= LATE.as_secs_f64()
            && (pace.and_then(|p| self.changed(p)))
                .is_some_and(|s| s < self.stride && n.is_multiple_of(s));
        if !(n.is_multiple_of(self.stride) || late || must) {
            return false;
        }
        // (not from the start: its pace counts the start-up)
        if let Some(s) = pace
            .filter(|_| self.last.is_some())
            .and_then(|p| self.changed(p))
        {
            self.stride = s;
        }
        self.last = Some((n, at));
        true
    }

    /// The run time since the last kept (all of it before the first).
    fn since_last(&self, at: Duration) -> Duration {
        at.saturating_sub(self.last.map_or(Duration::ZERO, |(_, t)| t))
    }

    /// The stride at `per_s` a second, where it should change: at once where the records would
    /// come too fast (above `base`) or too seldom (below it); the other way only once the pace
    /// has halved or doubled, so a pace near a boundary keeps one stride.
    fn changed(&self, per_s: f64) -> Option<u64> {
        let wanted = stride_for(per_s, self.base);
        let change = match wanted.cmp(&self.stride) {
            Ordering::Greater => {
                self.stride >= self.base || stride_for(per_s / 2.0, self.base) > self.stride
            }
            Ordering::Less => {
                self.stride <= self.base || stride_for(2.0 * per_s, self.base) < self.stride
            }
            Ordering::Equal => false,
        };
        change.then_some(wanted)
    }
}

/// The run time after which `auto` keeps a multiple of the stride of the pace since the last
/// kept, whatever its stride.
const LATE: Duration = Duration::from_secs(1);

/// The most run time `auto` leaves between two kept where `base` take longer (ten seconds).
const AUTO_SLOW: Duration = Duration::from_secs(10);

/// At `per_s` a second: the least of `base` and the round numbers above it (1, 2, 5, 10, 20,
/// 50, 100, ...) that take `AUTO_GAP`, or where `base` take longer than `AUTO_SLOW`, the
/// largest round number below it that does not (at least 1). For steps (base 50): ..., 5, 10,
/// 20, 50, 100, 200, 500, 1000, ...
fn stride_for(per_s: f64, base: u64) -> u64 {
    let decades = std::iter::successors(Some(1u64), |d| d.checked_mul(10));
    let round = decades.flat_map(|d| [d, d.saturating_mul(2), d.saturating_mul(5)]);
    let most = per_s * AUTO_SLOW.as_secs_f64();
    if most < base as f64 {
        let below = round.take_while(|&s| s < base && s as f64 <= most);
        return below.last().unwrap_or(1);
    }
    let least = per_s * AUTO_GAP.as_secs_f64();
    (std::iter::once(base).chain(round.filter(|&s| s > base)))
        .find(|&s| s as f64 >= least)
        .unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
