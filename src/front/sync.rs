//! Where local SGD's replicas are next one after a step: its schedule, and the averages the
//! run makes off it (before a validation, at its end), for the log and the header.

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
/// schedule (`Ahead`): before an epoch's validation or one of `--val-every`, where that comes
/// first, and at its end, where no scheduled sync is left.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SyncAhead {
    /// Synchronous warm-up steps to this one.
    Warmup(u64),
    /// A warm-up of this many steps, longer than the run.
    WarmupAllRun(u64),
    /// The scheduled average after this step.
    Next(u64),
    /// The replicas are one after this step (a scheduled average, or the warm-up's last step);
    /// the next scheduled average after this step.
    Synced(u64),
    /// The average for the epoch's validation, after this step.
    Validation(u64),
    /// The average for a validation within the epoch (`--val-every`), after this step.
    ValEvery(u64),
    /// The average at the run's end, this step.
    End(u64),
    /// The run has ended (this step), averaged.
    Ended(u64),
}

impl SyncAhead {
    pub fn of(strategy: &Strategy, step: u64, ahead: Ahead) -> Option<SyncAhead> {
        let before = |at: Option<u64>, n: u64| at.is_some_and(|a| a < n);
        match *strategy {
            // (to its last step: never averaged, as it never stepped alone)
            Strategy::LocalSgd { warmup, .. } if ahead.run_end.is_some_and(|end| end <= warmup) => {
                Some(SyncAhead::WarmupAllRun(warmup))
            }
            Strategy::LocalSgd { .. } if ahead.run_end.is_some_and(|end| step >= end) => {
                Some(SyncAhead::Ended(step))
            }
            Strategy::LocalSgd { warmup, .. } if step < warmup => Some(SyncAhead::Warmup(warmup)),
            _ => strategy.next_sync(step).map(|n| {
                // the first average off the schedule before it (at one step, an epoch's
                // validation is said before --val-every's and the run's end)
                let off = [
                    ahead.validation.map(|v| (v, SyncAhead::Validation(v))),
                    ahead.val_every.map(|v| (v, SyncAhead::ValEvery(v))),
                    ahead.run_end.map(|e| (e, SyncAhead::End(e))),
                ];
                let first_off = (off.into_iter().flatten())
                    .filter(|&(at, _)| before(Some(at), n))
                    .min_by_key(|&(at, _)| at);
                // (a step that averages says so, whatever average comes next)
                match (strategy.synced_after(step), first_off) {
                    (true, off) => SyncAhead::Synced(off.map_or(n, |(at, _)| at)),
                    (false, Some((_, s))) => s,
                    (false, None) => SyncAhead::Next(n),
                }
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
            SyncAhead::Synced(n) => {
                format!(
                    "replicas one after this step; they step alone to the next sync at step {n}"
                )
            }
            SyncAhead::Validation(v) => {
                format!("{diverge}; averaged for the epoch's validation after step {v}")
            }
            SyncAhead::ValEvery(v) => {
                format!("{diverge}; averaged for the --val-every validation after step {v}")
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
            SyncAhead::Next(n) | SyncAhead::Synced(n) => format!("sync at step {n}"),
            SyncAhead::Validation(v) | SyncAhead::ValEvery(v) => {
                format!("sync at step {v} (validation)")
            }
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
    /// The next step `--val-every` validates after, where it comes before the run's last.
    pub val_every: Option<u64>,
}

/// What it takes to know where a run's epochs and budget end from one of its step rows.
#[derive(Clone, Copy, Debug)]
pub struct Ends {
    budget: Budget,
    validates: bool,
    val_every: Option<u64>,
}

impl Ends {
    pub fn of(info: &RunInfo) -> Ends {
        Ends {
            budget: info.budget,
            validates: info.val_samples > 0,
            val_every: info.val_every,
        }
    }

    /// What is ahead after `step`, from its row's `ends_at` (the engine's, at the batch of its
    /// step); without one (a file of before they were recorded), a step budget's end only, and
    /// `--val-every`'s validations.
    pub fn ahead(&self, step: u64, ends_at: Option<EndsAt>) -> Ahead {
        let mut ahead = match (ends_at, self.budget) {
            (Some(e), _) => Ahead {
                run_end: Some(e.run),
                // (the last epoch's validation is at the run's end)
                validation: (self.validates && e.epoch < e.run).then_some(e.epoch),
                val_every: None,
            },
            (None, Budget::Steps(last)) => Ahead {
                run_end: Some(last),
                ..Ahead::default()
            },
            (None, Budget::Epochs(_)) => Ahead::default(),
        };
        if let Some(n) = self.val_every.filter(|_| self.validates) {
            let next = (step / n + 1) * n;
            ahead.val_every = ahead.run_end.is_none_or(|end| next < end).then_some(next);
        }
        ahead
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_run_s_end_and_its_epochs_validation_are_where_the_replicas_meet() {
        use super::{Ahead, Budget, Ends, EndsAt};
        let ends = |budget, validates| Ends {
            budget,
            validates,
            val_every: None,
        };
        let ahead = |run_end, validation| Ahead {
            run_end,
            validation,
            val_every: None,
        };
        let at = |epoch, run| Some(EndsAt { epoch, run });
        let e = ends(Budget::Epochs(3), true);
        assert_eq!(e.ahead(0, at(16, 48)), ahead(Some(48), Some(16)));
        let quiet = ends(Budget::Epochs(3), false);
        assert_eq!(quiet.ahead(0, at(16, 48)), ahead(Some(48), None));
        // the last epoch's end is the run's
        assert_eq!(e.ahead(0, at(48, 48)), ahead(Some(48), None));
        // a step budget validates at its epochs' ends too, those before its last step
        let steps = ends(Budget::Steps(300), true);
        assert_eq!(steps.ahead(0, at(32, 300)), ahead(Some(300), Some(32)));
        assert_eq!(steps.ahead(0, at(304, 300)), ahead(Some(300), None));
        // without a row's ends, a step budget's end is known; an epoch budget's is not
        assert_eq!(steps.ahead(0, None), ahead(Some(300), None));
        assert_eq!(e.ahead(0, None), Ahead::default());
        // local SGD whose next sync is past the end: the epoch's validation comes first
        use super::{Strategy, SyncAhead};
        let local = Strategy::LocalSgd {
            every: 64,
            warmup: 4,
            moments: false,
        };
        assert_eq!(
            SyncAhead::of(&local, 5, e.ahead(0, at(16, 48))),
            Some(SyncAhead::Validation(16))
        );
        assert_eq!(
            SyncAhead::of(&local, 40, e.ahead(0, at(48, 48))),
            Some(SyncAhead::End(48))
        );
        assert_eq!(
            SyncAhead::of(&local, 48, ahead(Some(48), None)),
            Some(SyncAhead::Ended(48))
        );
        // a scheduled average's step, and the warm-up's last: the replicas are one there
        assert_eq!(
            SyncAhead::of(&local, 68, ahead(Some(300), None)),
            Some(SyncAhead::Synced(132))
        );
        assert_eq!(
            SyncAhead::of(&local, 4, ahead(Some(300), None)),
            Some(SyncAhead::Synced(68))
        );
        assert_eq!(
            SyncAhead::of(&local, 5, ahead(Some(300), None)),
            Some(SyncAhead::Next(68))
        );
        // a scheduled average's step before a validation's or the end's: one there too
        assert_eq!(
            SyncAhead::of(&local, 68, ahead(Some(100), Some(80))),
            Some(SyncAhead::Synced(80))
        );
        assert_eq!(
            SyncAhead::of(&local, 4, ahead(Some(60), None)),
            Some(SyncAhead::Synced(60))
        );
        // a warm-up to the run's end or past it: synchronous to the last step, never averaged
        for warmup in [4, 10] {
            let all_run = Strategy::LocalSgd {
                every: 64,
                warmup,
                moments: false,
            };
            assert_eq!(
                SyncAhead::of(&all_run, 4, ahead(Some(4), None)),
                Some(SyncAhead::WarmupAllRun(warmup))
            );
        }
        // under a step budget, the same
        assert_eq!(
            SyncAhead::of(&local, 5, steps.ahead(0, at(16, 300))),
            Some(SyncAhead::Validation(16))
        );
    }

    #[test]
    fn val_every_s_validations_are_where_the_replicas_meet_too() {
        use super::{Budget, Ends, EndsAt, Strategy, SyncAhead};
        let local = Strategy::LocalSgd {
            every: 64,
            warmup: 4,
            moments: false,
        };
        let ends = Ends {
            budget: Budget::Epochs(3),
            validates: true,
            val_every: Some(10),
        };
        let at = |epoch, run| Some(EndsAt { epoch, run });
        let after = |step, e| SyncAhead::of(&local, step, ends.ahead(step, e));
        // the next multiple of 10, unless the epoch's validation or the run's end comes first
        assert_eq!(after(5, at(16, 48)), Some(SyncAhead::ValEvery(10)));
        assert_eq!(after(12, at(16, 48)), Some(SyncAhead::Validation(16)));
        assert_eq!(after(20, at(32, 48)), Some(SyncAhead::ValEvery(30)));
        assert_eq!(after(20, at(30, 48)), Some(SyncAhead::Validation(30)));
        assert_eq!(after(41, at(48, 48)), Some(SyncAhead::End(48)));
        // without a validation set, none
        let quiet = Ends {
            validates: false,
            ..ends
        };
        assert_eq!(quiet.ahead(5, at(16, 48)).val_every, None);
        assert!(SyncAhead::ValEvery(10)
            .full()
            .contains("--val-every validation after step 10"));
    }
}
