//! Which steps the log and the metrics files keep (`--log-every`), decided once per row for
//! both: every Nth asked for; for `auto`, every 50th, or where those come faster than ten a
//! second, every 100th, 200th, 500th, 1000th, ... (the least that keeps a tenth of a second of
//! run time between two, at the pace of the last two kept: round steps, as few as a user reads);
//! and the run's last step whatever the rule.

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
        let kept =
            row.step.is_multiple_of(self.stride) || row.ends_at.is_some_and(|e| e.run == row.step);
        if !kept {
            return false;
        }
        if let (LogEvery::Auto, Some((step, at))) = (self.every, self.last) {
            let secs = row.at.saturating_sub(at).as_secs_f64();
            let steps = row.step.saturating_sub(step);
            if secs > 0.0 && steps > 0 {
                self.stride = stride_for(steps as f64 / secs);
            }
        }
        self.last = Some((row.step, row.at));
        true
    }
}

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
