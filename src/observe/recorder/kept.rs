//! Which steps the log and the metrics files keep (`--log-every`), decided once per row for
//! both: every Nth asked for; for `auto`, every 50th, or where those come faster than ten a
//! second, every 100th, 200th, 500th, 1000th, ... (the least that keeps a tenth of a second of
//! run time between two, at the pace of the last two kept: round steps, as few as a user reads;
//! a smaller stride only once the pace has halved, so a pace near a boundary keeps one; a 50th
//! step a second or more after the last kept is kept, so a run that slowed is not silent until
//! the next multiple of its old stride); and the run's last step whatever the rule.

use std::time::Duration;

use crate::config::log_every::{LogEvery, AUTO_GAP, AUTO_STEPS};
use crate::observe::monitor::StepRow;

pub struct Kept {
    every: LogEvery,
    /// `auto`'s steps between two kept.
    stride: u64,
    /// The newest step kept, and when it was taken (run time).
    last: Option<(u64, Duration)>,
}

impl Kept {
    pub fn new(every: LogEvery) -> Kept {
        Kept {
            every,
            stride: every.steps().max(1),
            last: None,
        }
    }

    /// Whether `row` (the newest, rows in step order) is kept.
    pub fn keep(&mut self, row: &StepRow) -> bool {
        let late = self.every == LogEvery::Auto
            && row.step.is_multiple_of(AUTO_STEPS)
            && (self.last).is_some_and(|(_, at)| row.at.saturating_sub(at) >= LATE);
        let kept = row.step.is_multiple_of(self.stride)
            || late
            || row.ends_at.is_some_and(|e| e.run == row.step);
        if !kept {
            return false;
        }
        if let (LogEvery::Auto, Some((step, at))) = (self.every, self.last) {
            let secs = row.at.saturating_sub(at).as_secs_f64();
            let steps = row.step.saturating_sub(step);
            if secs > 0.0 && steps > 0 {
                let pace = steps as f64 / secs;
                let wanted = stride_for(pace);
                if wanted > self.stride || stride_for(2.0 * pace) < self.stride {
                    self.stride = wanted;
                }
            }
        }
        self.last = Some((row.step, row.at));
        true
    }
}

/// The run time after which `auto` keeps the next 50th step, whatever its stride.
const LATE: Duration = Duration::from_secs(1);

/// The least of 50, 100, 200, 500, 1000, 2000, 5000, ... steps that take `AUTO_GAP` at
/// `per_s` steps a second.
fn stride_for(per_s: f64) -> u64 {
    let least = per_s * AUTO_GAP.as_secs_f64();
    let decades = std::iter::successors(Some(100u64), |d| d.checked_mul(10));
    let ladder = decades.flat_map(|d| [d, d.saturating_mul(2), d.saturating_mul(5)]);
    (std::iter::once(AUTO_STEPS).chain(ladder))
        .find(|&s| s as f64 >= least)
        .unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::events::EndsAt;

    /// Steps 1..=`steps`, `per_s` a second, the run ending at the last; the ones kept.
    fn kept(every: LogEvery, steps: u64, per_s: u64) -> Vec<u64> {
        let mut k = Kept::new(every);
        (1..=steps)
            .filter(|&step| {
                let row = StepRow {
                    step,
                    at: Duration::from_secs_f64(step as f64 / per_s as f64),
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
    fn strides_go_50_100_200_500_and_on_by_tens() {
        let strides: Vec<u64> = [1.0, 500.0, 501.0, 1500.0, 4000.0, 9000.0, 3e5, 1e12]
            .map(stride_for)
            .to_vec();
        assert_eq!(
            strides,
            [50, 50, 100, 200, 500, 1000, 50_000, 100_000_000_000]
        );
    }
}
