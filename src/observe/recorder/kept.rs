//! Which steps the log and the metrics files keep (`--log-every`), decided once per row for
//! both: every Nth asked for; for `auto`, every 50th at least a tenth of a second of run time
//! after the last one kept; and the run's last step whatever the rule.

use std::time::Duration;

use crate::config::log_every::{LogEvery, AUTO_GAP, AUTO_STEPS};
use crate::observe::monitor::StepRow;

pub struct Kept {
    every: LogEvery,
    /// When the newest step kept was taken (run time).
    last: Option<Duration>,
}

impl Kept {
    pub fn new(every: LogEvery) -> Kept {
        Kept { every, last: None }
    }

    /// Whether `row` (the newest, rows in step order) is kept.
    pub fn keep(&mut self, row: &StepRow) -> bool {
        let due = match self.every {
            LogEvery::Steps(n) => row.step.is_multiple_of(n.max(1)),
            LogEvery::Auto => {
                row.step.is_multiple_of(AUTO_STEPS)
                    && self
                        .last
                        .is_none_or(|t| row.at.saturating_sub(t) >= AUTO_GAP)
            }
        };
        let kept = due || row.ends_at.is_some_and(|e| e.run == row.step);
        if kept {
            self.last = Some(row.at);
        }
        kept
    }
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
    fn auto_keeps_every_50th_and_no_more_than_ten_a_second() {
        // a slow run: every 50th step
        assert_eq!(kept(LogEvery::Auto, 230, 10), [50, 100, 150, 200, 230]);
        // 50 000 steps a second for two seconds: 20 or so, each on a 50th step, and the last
        let fast = kept(LogEvery::Auto, 100_000, 50_000);
        assert!((19..=22).contains(&fast.len()), "{}", fast.len());
        assert!(fast.iter().all(|s| s % 50 == 0), "{fast:?}");
        assert_eq!(fast[..2], [50, 5050]);
        assert_eq!(fast.last(), Some(&100_000));
    }
}
