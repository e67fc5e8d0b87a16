//! Which records the log and the metrics files keep (`--log-every`), decided once for both.
//!
//! Steps: every Nth asked for; for `auto`, every 50th, or where those come faster than ten a
//! second, every 100th, 200th, 500th, 1000th, ... (the least that keeps a tenth of a second of
//! run time between two, at the pace of the last two kept: round steps, as few as a user reads;
//! a smaller stride only once the pace has halved, so a pace near a boundary keeps one), or
//! where 50 steps take more than ten seconds, every 20th, 10th, 5th, 2nd or every step (the
//! most that keeps within ten seconds: a slow model speaks every few seconds, from its start).
//! A step a second or more after the last kept, where the pace since then has halved, is kept
//! where it is a multiple of the stride that pace wants, so a run that slowed (or a slow run's
//! start) is not silent until the next multiple of its old stride. The run's last step is kept
//! whatever the rule.
//!
//! Epochs' ends and `--val-every`'s validations (`Scores`): under `auto` thinned alike where
//! they come faster than ten a second (a small data set trains thousands of epochs a second):
//! every epoch, or every 2nd, 5th, 10th, 20th, ..., and every one with the best validation
//! accuracy so far; the run's last the recorder keeps at its end. A number asked for keeps
//! them all.

use std::cmp::Ordering;
use std::time::Duration;

use crate::config::log_every::{LogEvery, AUTO_GAP};
use crate::engine::events::Event;
use crate::observe::monitor::StepRow;

/// Which steps are kept.
pub struct Kept {
    every: LogEvery,
    steps: Ladder,
}

impl Kept {
    pub fn new(every: LogEvery) -> Kept {
        Kept {
            every,
            steps: Ladder::new(every.steps().max(1)),
        }
    }

    /// Whether `row` (the newest, rows in step order) is kept.
    pub fn keep(&mut self, row: &StepRow) -> bool {
        let last = row.ends_at.is_some_and(|e| e.run == row.step);
        match self.every {
            LogEvery::Auto => self.steps.keep(row.step, row.at, last),
            LogEvery::Steps(n) => row.step.is_multiple_of(n) || last,
        }
    }
}

/// Which epochs' ends and validations are kept.
pub struct Scores {
    thin: bool,
    epochs: Ladder,
    validations: Ladder,
    /// The validations within epochs heard of (they are numbered so).
    validated: u64,
    /// The best validation accuracy heard of (an epoch's or one within an epoch).
    best: Option<f32>,
}

impl Scores {
    pub fn new(every: LogEvery) -> Scores {
        Scores {
            thin: every == LogEvery::Auto,
            epochs: Ladder::new(1),
            validations: Ladder::new(1),
            validated: 0,
            best: None,
        }
    }

    /// Whether event `ev`, at run time `at`, is kept (every event but an epoch's end and a
    /// validation is).
    pub fn keep(&mut self, ev: &Event, at: Duration) -> bool {
        let (ladder, n, accuracy) = match *ev {
            Event::EpochDone {
                epoch,
                val_accuracy,
                ..
            } => (&mut self.epochs, epoch, val_accuracy),
            Event::Validated { val_accuracy, .. } => {
                self.validated += 1;
                (&mut self.validations, self.validated, Some(val_accuracy))
            }
            _ => return true,
        };
        let best = accuracy
            .filter(|a| a.is_finite() && self.best.is_none_or(|b| *a > b))
            .inspect(|a| self.best = Some(*a))
            .is_some();
        !self.thin || ladder.keep(n, at, best)
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
mod tests {
    use super::*;
    use crate::config::log_every::AUTO_STEPS;
    use crate::engine::events::EndsAt;

    /// Steps 1..=`steps`, `per_s` a second, the run ending at the last; the ones kept.
    fn kept(every: LogEvery, steps: u64, per_s: u64) -> Vec<u64> {
        kept_at(every, steps, per_s as f64)
    }

    /// `kept` at a pace of any fraction.
    fn kept_at(every: LogEvery, steps: u64, per_s: f64) -> Vec<u64> {
        let mut k = Kept::new(every);
        (1..=steps)
            .filter(|&step| {
                let row = StepRow {
                    step,
                    at: Duration::from_secs_f64(step as f64 / per_s),
                    ends_at: Some(EndsAt {
                        epoch: steps,
                        run: steps,
                    }),
                    ..StepRow::example(step)
                };
                k.keep(&row)
            })
            .collect()
    }

    #[test]
    fn a_number_asked_for_is_kept_to_the_step_however_fast() {
        let every_20: Vec<u64> = (1..=10).map(|i| i * 20).chain([205]).collect();
        assert_eq!(kept(LogEvery::Steps(20), 205, 100_000), every_20);
        assert_eq!(kept(LogEvery::Steps(1), 5, 1_000_000), [1, 2, 3, 4, 5]);
    }

    #[test]
    fn auto_keeps_every_50th_and_round_steps_no_more_than_ten_a_second() {
        // a slow run: every 50th step
        assert_eq!(kept(LogEvery::Auto, 230, 10), [50, 100, 150, 200, 230]);
        // 50 000 steps a second for two seconds: the 50th and 100th, then every 5000th
        let fast = kept(LogEvery::Auto, 100_000, 50_000);
        let every_5000: Vec<u64> = [50, 100]
            .into_iter()
            .chain((1..=20).map(|i| i * 5000))
            .collect();
        assert_eq!(fast, every_5000);
        // 2000 a second: every 200th
        let mid = kept(LogEvery::Auto, 1000, 2000);
        assert_eq!(mid, [50, 100, 200, 400, 600, 800, 1000]);
    }

    #[test]
    fn auto_keeps_its_stride_near_a_boundary_and_speaks_within_a_second_of_a_slowdown() {
        let kept = |paces: &mut dyn Iterator<Item = (u64, f64)>| -> Vec<u64> {
            let mut k = Kept::new(LogEvery::Auto);
            paces
                .filter(|&(step, t)| {
                    let row = StepRow {
                        step,
                        at: Duration::from_secs_f64(t),
                        ..StepRow::example(step)
                    };
                    k.keep(&row)
                })
                .map(|(step, _)| step)
                .collect()
        };
        // a pace wavering about 20 000 a second (the 2000th / 5000th boundary) from one stretch
        // of 20 000 steps to the next: one stride
        let mut at = 0.0;
        let wavering = (1..=200_000u64).map(|step| {
            at += match (step / 20_000) % 2 {
                0 => 1.0 / 26_000.0,
                _ => 1.0 / 19_000.0,
            };
            (step, at)
        });
        let steps = kept(&mut wavering.collect::<Vec<_>>().into_iter());
        let gaps: std::collections::BTreeSet<u64> =
            steps.windows(2).skip(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(gaps.len(), 1, "{steps:?}");
        // about five a second (the 20th / 50th boundary, ten seconds apart) alike
        let mut at = 0.0;
        let wavering = (1..=2000u64).map(|step| {
            at += match (step / 100) % 2 {
                0 => 1.0 / 4.5,
                _ => 1.0 / 5.5,
            };
            (step, at)
        });
        let steps = kept(&mut wavering.collect::<Vec<_>>().into_iter());
        let gaps: std::collections::BTreeSet<u64> =
            steps.windows(2).skip(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(gaps, [20].into(), "{steps:?}");
        // 10 000 a second for a second, then 50 a second: the next 50th step a second on is
        // kept, and every 50th after
        let mut slowing = (1..=10_000u64)
            .map(|s| (s, s as f64 / 10_000.0))
            .chain((10_001..=10_400).map(|s| (s, 1.0 + (s - 10_000) as f64 / 50.0)));
        let steps = kept(&mut slowing);
        let after: Vec<u64> = steps.into_iter().filter(|&s| s > 10_000).collect();
        assert_eq!(after[..3], [10_050, 10_100, 10_150], "{after:?}");
    }

    #[test]
    fn strides_go_50_100_200_500_and_on_by_tens_and_down_to_1_for_slow_steps() {
        let paces = [5.0, 500.0, 501.0, 1500.0, 4000.0, 9000.0, 3e5, 1e12];
        let strides = paces.map(|per_s| stride_for(per_s, AUTO_STEPS));
        assert_eq!(
            strides,
            [50, 50, 100, 200, 500, 1000, 50_000, 100_000_000_000]
        );
        // where 50 steps take more than ten seconds: the most round steps within ten
        let slow = [4.9, 2.0, 1.0, 0.3, 0.05].map(|per_s| stride_for(per_s, AUTO_STEPS));
        assert_eq!(slow, [20, 20, 10, 2, 1]);
        // (epochs, base 1: never below 1)
        assert_eq!(stride_for(0.01, 1), 1);
    }

    #[test]
    fn auto_speaks_within_ten_seconds_from_a_slow_runs_start() {
        // a step every two seconds, the first after 20 s of start-up: the first (late), then
        // every 5th
        let mut k = Kept::new(LogEvery::Auto);
        let kept: Vec<u64> = (1..=40)
            .filter(|&step| {
                let at = Duration::from_secs(18 + 2 * step);
                k.keep(&StepRow {
                    at,
                    ..StepRow::example(step)
                })
            })
            .collect();
        assert_eq!(kept[..3], [1, 5, 10], "{kept:?}");
        assert!(kept[1..].windows(2).all(|w| w[1] - w[0] == 5), "{kept:?}");
        // three steps a second: every 20th (within ten seconds), not every 50th
        assert_eq!(kept_at(LogEvery::Auto, 100, 3.0), [20, 40, 60, 80, 100]);
    }

    /// Epochs 1..=`epochs`, `per_s` a second, with validation accuracy `accuracy(epoch)`; the
    /// ones kept.
    fn scores(every: LogEvery, epochs: u64, per_s: f64, accuracy: fn(u64) -> f32) -> Vec<u64> {
        let mut k = Scores::new(every);
        (1..=epochs)
            .filter(|&epoch| {
                let done = Event::EpochDone {
                    epoch,
                    step: epoch * 23,
                    train_loss: 0.5,
                    val_loss: Some(0.5),
                    val_accuracy: Some(accuracy(epoch)),
                    elapsed: Duration::ZERO,
                };
                k.keep(&done, Duration::from_secs_f64(epoch as f64 / per_s))
            })
            .collect()
    }

    #[test]
    fn auto_keeps_every_epoch_but_where_they_come_faster_than_ten_a_second() {
        let flat = |_| 0.9;
        assert_eq!(
            scores(LogEvery::Auto, 30, 2.0, flat),
            (1..=30).collect::<Vec<_>>()
        );
        // a thousand epochs a second: the first two, then every 100th
        let fast = scores(LogEvery::Auto, 1000, 1000.0, flat);
        let every_100: Vec<u64> = [1, 2]
            .into_iter()
            .chain((1..=10).map(|i| i * 100))
            .collect();
        assert_eq!(fast, every_100);
        // a number asked for keeps them all
        assert_eq!(scores(LogEvery::Steps(50), 1000, 1000.0, flat).len(), 1000);
    }

    #[test]
    fn auto_keeps_every_epoch_with_the_best_accuracy_so_far() {
        // a new best at epochs 150, 333 and 777 (else worse), a NaN at 550
        let accuracy = |epoch| match epoch {
            150 => 0.95,
            333 => 0.96,
            550 => f32::NAN,
            777 => 0.97,
            _ => 0.5,
        };
        let kept = scores(LogEvery::Auto, 1000, 1000.0, accuracy);
        for best in [150, 333, 777] {
            assert!(kept.contains(&best), "{best} in {kept:?}");
        }
        let every_100 = (1..=10).map(|i| i * 100);
        let want: Vec<u64> = [1, 2, 150, 333, 777].into_iter().chain(every_100).collect();
        assert_eq!(
            kept.iter()
                .copied()
                .collect::<std::collections::BTreeSet<_>>(),
            want.into_iter().collect()
        );
    }

    #[test]
    fn other_events_are_all_kept_and_validations_are_thinned_apart() {
        let mut k = Scores::new(LogEvery::Auto);
        let at = |ms: u64| Duration::from_millis(ms);
        let checkpoint = Event::Checkpoint {
            step: 5,
            path: "c".into(),
            best: None,
        };
        assert!((0..100).all(|i| k.keep(&checkpoint, at(i))));
        // a validation every millisecond, none better than the first: the first two, then
        // every 100th
        let validated = |step| Event::Validated {
            step,
            epochs: step as f32 / 100.0,
            val_loss: 0.5,
            val_accuracy: 0.8,
            elapsed: Duration::ZERO,
        };
        let kept: Vec<u64> = (1..=300)
            .filter(|&i| k.keep(&validated(i), at(i)))
            .collect();
        assert_eq!(kept, [1, 2, 100, 200, 300]);
    }
}
