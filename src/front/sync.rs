//! Where local SGD's replicas are next one after a step: its schedule, and the averages the
//! run makes off it (before an epoch's validation, at its end), for the log and the header.

use crate::config::Budget;
use crate::engine::strategy::Strategy;
use crate::engine::RunInfo;

/// Where the replicas stand after step `step`, for strategies that are not one model each step:
/// `replicas diverge by design (loss: rank 0's shard); next sync at step 108`.
pub fn sync_note(strategy: &Strategy, step: u64, ahead: Ahead) -> Option<String> {
    SyncAhead::of(strategy, step, ahead).map(|s| s.full())
}

/// When local SGD's replicas are next one, after a step. The run also makes them one off the
/// schedule (`Ahead`): before an epoch's validation, where that comes first, and at its end,
/// where no scheduled sync is left.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SyncAhead {
    /// Synchronous warm-up steps to this one.
    Warmup(u64),
    /// A warm-up of this many steps, longer than the run.
    WarmupAllRun(u64),
    /// The scheduled average after this step.
    Next(u64),
    /// The average for the epoch's validation, after this step.
    Validation(u64),
    /// The average at the run's end, this step.
    End(u64),
    /// The run has ended (this step), averaged.
    Ended(u64),
}

impl SyncAhead {
    pub fn of(strategy: &Strategy, step: u64, ahead: Ahead) -> Option<SyncAhead> {
        let before = |at: Option<u64>, n: u64| at.is_some_and(|a| a < n);
        match *strategy {
            Strategy::LocalSgd { .. } if ahead.run_end.is_some_and(|end| step >= end) => {
                Some(SyncAhead::Ended(step))
            }
            Strategy::LocalSgd { warmup, .. } if step < warmup => {
                Some(match ahead.run_end.is_some_and(|end| end <= warmup) {
                    true => SyncAhead::WarmupAllRun(warmup),
                    false => SyncAhead::Warmup(warmup),
                })
            }
            _ => strategy.next_sync(step).map(|n| match ahead {
                // (an epoch's validation, where there is one, comes before the run's end)
                Ahead {
                    validation: Some(v),
                    ..
                } if before(Some(v), n) => SyncAhead::Validation(v),
                Ahead {
                    run_end: Some(end), ..
                } if before(Some(end), n) => SyncAhead::End(end),
                _ => SyncAhead::Next(n),
            }),
        }
    }

    /// In full, for the log and a wide header.
    pub fn full(self) -> String {
        let diverge = "replicas diverge by design (loss: rank 0's shard)";
        match self {
            SyncAhead::Warmup(w) => {
                format!("synchronous warm-up: replicas step alone after step {w}")
            }
            SyncAhead::WarmupAllRun(w) => {
                format!("synchronous warm-up for the whole run (its {w} steps outlast it)")
            }
            SyncAhead::Next(n) => format!("{diverge}; next sync at step {n}"),
            SyncAhead::Validation(v) => {
                format!("{diverge}; averaged for the epoch's validation after step {v}")
            }
            SyncAhead::End(n) => format!("{diverge}; averaged at the end, step {n}"),
            SyncAhead::Ended(n) => format!("replicas averaged at the end, step {n}"),
        }
    }

    /// In a few words, for a narrow header.
    pub fn brief(self) -> String {
        match self {
            SyncAhead::Warmup(w) => format!("synchronous to step {w}"),
            SyncAhead::WarmupAllRun(_) => "synchronous all run".into(),
            SyncAhead::Next(n) => format!("sync at step {n}"),
            SyncAhead::Validation(v) => format!("sync at step {v} (validation)"),
            SyncAhead::End(n) => format!("sync at step {n} (end)"),
            SyncAhead::Ended(_) => "averaged at the end".into(),
        }
    }
}

/// Steps after which the run makes its replicas one whatever its strategy's schedule, where
/// they are known.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Ahead {
    /// The run's last step.
    pub run_end: Option<u64>,
    /// The current epoch's last step, where the run validates then and it is not the last.
    pub validation: Option<u64>,
}

/// What it takes to know where a run's epochs and budget end from one of its step rows.
#[derive(Clone, Copy, Debug)]
pub struct Ends {
    budget: Budget,
    train: usize,
    ranks: usize,
    accum: usize,
    validates: bool,
}

impl Ends {
    pub fn of(info: &RunInfo) -> Ends {
        Ends {
            budget: info.budget,
            train: info.train_samples,
            ranks: info.ranks(),
            accum: info.grad_accum.max(1),
            validates: info.val_samples > 0,
        }
    }

    /// What is ahead of step `step`, from its row's `per_replica` batch and progress (epochs
    /// done over the budget's) where an epoch budget needs them; without a row, a step
    /// budget's end only. An epoch budget's end assumes the batch stays as it is.
    pub fn ahead(&self, step: u64, at: Option<(usize, f64)>) -> Ahead {
        let epochs = match self.budget {
            Budget::Steps(last) => {
                return Ahead {
                    run_end: Some(last),
                    validation: None,
                }
            }
            Budget::Epochs(e) => e,
        };
        let Some((per_replica, progress)) = at else {
            return Ahead::default();
        };
        let global = per_replica * self.ranks * self.accum;
        if global == 0 || self.train == 0 || !progress.is_finite() {
            return Ahead::default();
        }
        let done = progress.clamp(0.0, 1.0) * epochs as f64;
        // whole epochs done and samples into the next (rounded: a row's progress is a float)
        let mut whole = done.floor() as u64;
        let mut offset = ((done - done.floor()) * self.train as f64).round() as usize;
        if offset >= self.train {
            (whole, offset) = (whole + 1, 0);
        }
        if whole >= epochs {
            return Ahead {
                run_end: Some(step),
                validation: None,
            };
        }
        let epoch_end = step + (self.train - offset).div_ceil(global) as u64;
        let later = (epochs - whole - 1) * self.train.div_ceil(global) as u64;
        Ahead {
            run_end: Some(epoch_end + later),
            validation: (self.validates && later > 0).then_some(epoch_end),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_run_s_end_and_its_epochs_validation_are_where_the_replicas_meet() {
        use super::{Ahead, Budget, Ends};
        // 1000 samples, 2 ranks x 32 = 64 a step: 16 steps an epoch (15 of 64, one of 40)
        let ends = |budget, validates| Ends {
            budget,
            train: 1000,
            ranks: 2,
            accum: 1,
            validates,
        };
        let ahead = |run_end, validation| Ahead {
            run_end,
            validation,
        };
        let e = ends(Budget::Epochs(3), true);
        // 8 steps into the first epoch: 512 samples
        let p = 512.0 / 1000.0 / 3.0;
        assert_eq!(e.ahead(8, Some((32, p))), ahead(Some(48), Some(16)));
        let quiet = ends(Budget::Epochs(3), false);
        assert_eq!(quiet.ahead(8, Some((32, p))), ahead(Some(48), None));
        // the last epoch's end is the run's: 2 epochs and 640 samples done at step 42
        let p = (2.0 + 0.64) / 3.0;
        assert_eq!(e.ahead(42, Some((32, p))), ahead(Some(48), None));
        // just after an epoch's end, the next epoch is counted whole
        assert_eq!(
            e.ahead(16, Some((32, 1.0 / 3.0))),
            ahead(Some(48), Some(32))
        );
        assert_eq!(e.ahead(48, Some((32, 1.0))), ahead(Some(48), None));
        // a step budget is known without a row; an epoch budget is not
        let steps = ends(Budget::Steps(300), true);
        assert_eq!(steps.ahead(5, None), ahead(Some(300), None));
        assert_eq!(e.ahead(5, None), Ahead::default());
        // local SGD whose next sync is past the end: the epoch's validation comes first
        use super::{Strategy, SyncAhead};
        let local = Strategy::LocalSgd {
            every: 64,
            warmup: 4,
            moments: false,
        };
        let at5 = e.ahead(5, Some((32, 320.0 / 1000.0 / 3.0)));
        assert_eq!(
            SyncAhead::of(&local, 5, at5),
            Some(SyncAhead::Validation(16))
        );
        let at40 = e.ahead(40, Some((32, (2.0 + 0.512) / 3.0)));
        assert_eq!(SyncAhead::of(&local, 40, at40), Some(SyncAhead::End(48)));
        assert_eq!(
            SyncAhead::of(&local, 48, ahead(Some(48), None)),
            Some(SyncAhead::Ended(48))
        );
    }
}
