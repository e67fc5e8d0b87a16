//! Where local SGD's replicas are next one after a step: its schedule, and the averages the
//! run makes off it (before an epoch's validation, at its end), for the log and the header.

use crate::config::Budget;
use crate::engine::events::EndsAt;
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
    validates: bool,
}

impl Ends {
    pub fn of(info: &RunInfo) -> Ends {
        Ends {
            budget: info.budget,
            validates: info.val_samples > 0,
        }
    }

    /// What is ahead, from a step row's `ends_at` (the engine's, at the batch of its step);
    /// without one (a file of before they were recorded), a step budget's end only.
    pub fn ahead(&self, ends_at: Option<EndsAt>) -> Ahead {
        match (ends_at, self.budget) {
            (Some(e), _) => Ahead {
                run_end: Some(e.run),
                // (the last epoch's validation is at the run's end)
                validation: (self.validates && e.epoch < e.run).then_some(e.epoch),
            },
            (None, Budget::Steps(last)) => Ahead {
                run_end: Some(last),
                validation: None,
            },
            (None, Budget::Epochs(_)) => Ahead::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_run_s_end_and_its_epochs_validation_are_where_the_replicas_meet() {
        use super::{Ahead, Budget, Ends, EndsAt};
        let ends = |budget, validates| Ends { budget, validates };
        let ahead = |run_end, validation| Ahead {
            run_end,
            validation,
        };
        let at = |epoch, run| Some(EndsAt { epoch, run });
        let e = ends(Budget::Epochs(3), true);
        assert_eq!(e.ahead(at(16, 48)), ahead(Some(48), Some(16)));
        let quiet = ends(Budget::Epochs(3), false);
        assert_eq!(quiet.ahead(at(16, 48)), ahead(Some(48), None));
        // the last epoch's end is the run's
        assert_eq!(e.ahead(at(48, 48)), ahead(Some(48), None));
        // a step budget validates at its epochs' ends too, those before its last step
        let steps = ends(Budget::Steps(300), true);
        assert_eq!(steps.ahead(at(32, 300)), ahead(Some(300), Some(32)));
        assert_eq!(steps.ahead(at(304, 300)), ahead(Some(300), None));
        // without a row's ends, a step budget's end is known; an epoch budget's is not
        assert_eq!(steps.ahead(None), ahead(Some(300), None));
        assert_eq!(e.ahead(None), Ahead::default());
        // local SGD whose next sync is past the end: the epoch's validation comes first
        use super::{Strategy, SyncAhead};
        let local = Strategy::LocalSgd {
            every: 64,
            warmup: 4,
            moments: false,
        };
        assert_eq!(
            SyncAhead::of(&local, 5, e.ahead(at(16, 48))),
            Some(SyncAhead::Validation(16))
        );
        assert_eq!(
            SyncAhead::of(&local, 40, e.ahead(at(48, 48))),
            Some(SyncAhead::End(48))
        );
        assert_eq!(
            SyncAhead::of(&local, 48, ahead(Some(48), None)),
            Some(SyncAhead::Ended(48))
        );
        // under a step budget, the same
        assert_eq!(
            SyncAhead::of(&local, 5, steps.ahead(at(16, 300))),
            Some(SyncAhead::Validation(16))
        );
    }
}
