//! A run's end in a few figures, one way for every frontend: the log's `summary:` line, the
//! lines the screen leaves when it closes, and the figures of its summary panel.

use std::path::PathBuf;
use std::time::Duration;

use crate::engine::checkpoint::BestVal;
use crate::engine::events::Ending;
use crate::engine::RunInfo;
use crate::front::units::{ranks_time, si, took};
use crate::observe::monitor::{Shares, Totals};
use crate::observe::straggler::{Limit, SaidFor};

/// Shown when the run has ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub steps: u64,
    pub ending: Ending,
    pub failed: Option<String>,
    pub best_val_accuracy: Option<f32>,
    pub wall: Duration,
    /// Of `wall`, the time in steps (the ranks' mean, summed): start-up, validations,
    /// checkpoints and pauses left out.
    pub train_s: f64,
    /// Samples per second of training time (pauses excluded).
    pub mean_samples_per_sec: Option<f64>,
    /// Shares of step time over all ranks and steps (`Totals::shares`: compute, data,
    /// all-reduce, waiting for other ranks, host transfers, other).
    pub time_shares: Option<Shares>,
    /// How busy the ranks' loader threads were building batches (`Totals::loader_share`).
    pub loader_share: Option<f64>,
    pub last_checkpoint: Option<PathBuf>,
    /// `--checkpoint-best`: the best validation's checkpoint and its accuracy.
    pub best_checkpoint: Option<(PathBuf, f32)>,
    /// Gradient spikes said during the run.
    pub grad_spikes: Spikes,
    /// Stragglers and the run's limits said during the run.
    pub flags: Flags,
}

/// The stragglers, slowed ranks and the run's limits (input-bound, ...) the detectors said
/// during a run: what, from which step, whether and when it cleared, how often it came.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Flags {
    items: Vec<Flag>,
}

#[derive(Clone, Debug, PartialEq)]
struct Flag {
    what: String,
    /// Each time it was said: its step, and `None` while it holds, else the step it cleared
    /// at (where told).
    spans: Vec<(Option<u64>, Option<Option<u64>>)>,
}

/// The most spans of one flag the summary line gives.
const SPANS_SAID: usize = 3;

/// The most flags the summary line names.
const FLAGS_SAID: usize = 3;

impl Flags {
    /// A detector's warning of `kind` (a clearing's ends in `_cleared`) about the rank named
    /// `who`, where it is a rank's, at `step`.
    pub fn add(&mut self, kind: &str, who: Option<String>, step: Option<u64>) {
        let (base, cleared) = match kind.strip_suffix("_cleared") {
            Some(b) => (b, true),
            None => (kind, false),
        };
        let who = who.unwrap_or_default();
        let what = match base {
            "straggler" => format!("straggler {who}"),
            "degraded" => format!("{who} slowed"),
            // (`who` of another machine than process 0's: a rank there, `host/gpu0`)
            "outside_load" => match who.split_once('/') {
                Some((host, _)) => format!("outside-load on {host}"),
                None => "outside-load".into(),
            },
            // (the run's limits, as the detector names them)
            _ => match Limit::ALL.into_iter().find(|l| l.kind() == base) {
                Some(l) => l.name().to_string(),
                None => return,
            },
        };
        let Some(f) = self.items.iter_mut().find(|f| f.what == what) else {
            if !cleared {
                self.items.push(Flag {
                    what,
                    spans: vec![(step, None)],
                });
            }
            return;
        };
        match (f.spans.last_mut(), cleared) {
            // (cleared once: a second clearing says nothing new)
            (Some(last), true) if last.1.is_none() => last.1 = Some(step),
            (Some(last), false) if last.1.is_none() => {}
            (_, false) => f.spans.push((step, None)),
            (_, true) => {}
        }
    }

    /// `straggler cpu1 from step 50 to 80; input-bound from step 50`; `None` for none.
    pub fn text(&self) -> Option<String> {
        let step = |s: Option<u64>| s.map_or("?".to_string(), |s| s.to_string());
        let said: Vec<String> = (self.items.iter().take(FLAGS_SAID))
            .map(|f| match f.spans.as_slice() {
                [(from, to)] => {
                    let to = match to {
                        Some(Some(s)) => format!(" to {s}"),
                        Some(None) => " for a while".into(),
                        None => String::new(),
                    };
                    format!("{} from step {}{to}", f.what, step(*from))
                }
                spans => {
                    let listed: Vec<String> = (spans.iter().take(SPANS_SAID))
                        .map(|(from, to)| match to {
                            Some(to) => format!("{}-{}", step(*from), step(*to)),
                            None => format!("{} on", step(*from)),
                        })
                        .collect();
                    let more = match spans.len().saturating_sub(SPANS_SAID) {
                        0 => String::new(),
                        n => format!(" and {}", crate::text::counted(n, "more time")),
                    };
                    format!("{} at steps {}{more}", f.what, listed.join(", "))
                }
            })
            .collect();
        let more = self.items.len().saturating_sub(FLAGS_SAID);
        let more = (more > 0).then(|| format!("{more} more said during the run"));
        (!said.is_empty()).then(|| said.into_iter().chain(more).collect::<Vec<_>>().join("; "))
    }
}

/// Gradient spikes said during a run: how many, the steps of the first few, the newest's.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Spikes {
    pub count: u64,
    /// The steps of the first `SPIKE_STEPS`, and the newest's.
    first: Vec<u64>,
    last: u64,
    /// One came without its step (a file from before warnings recorded it): none are named.
    unknown: bool,
}

/// The most spikes whose steps the summary lists.
const SPIKE_STEPS: usize = 5;

impl Spikes {
    /// A warning said for `said` (`None`: one spike of an unknown step). Of the spikes of a
    /// warning said for several, the first and the last have their steps known: a run with
    /// such a warning is summed up by its count and its first and last steps.
    pub fn add(&mut self, said: Option<SaidFor>) {
        let Some(s) = said else {
            self.count += 1;
            self.unknown = true;
            return;
        };
        self.count += s.count;
        let steps = if s.count == 1 {
            &[s.first][..]
        } else {
            &[s.first, s.last]
        };
        for &step in steps {
            if self.first.len() < SPIKE_STEPS {
                self.first.push(step);
            }
        }
        self.last = self.last.max(s.last);
    }

    /// `a gradient spike at step 22`, `gradient spikes at steps 22, 80 and 138`, `7 gradient
    /// spikes, at steps 22 to 900`; `None` for none.
    pub fn text(&self) -> Option<String> {
        let counted = || crate::text::counted(self.count as usize, "gradient spike");
        let n = self.count as usize;
        let last = self.last;
        Some(match (n, self.first.as_slice()) {
            (0, _) => return None,
            _ if self.unknown => counted(),
            (1, [s]) => format!("a gradient spike at step {s}"),
            (_, first) if first.len() == n => format!(
                "gradient spikes at steps {} and {last}",
                (first[..n - 1].iter().map(u64::to_string))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            (_, [first, ..]) => format!("{}, at steps {first} to {last}", counted()),
            _ => counted(),
        })
    }
}

impl Summary {
    /// The summary of a run that ended at step `steps` after `wall`, from its totals.
    pub fn of(steps: u64, ending: Ending, wall: Duration, totals: &Totals) -> Summary {
        Summary {
            steps,
            ending,
            failed: None,
            best_val_accuracy: None,
            wall,
            train_s: totals.train_s,
            mean_samples_per_sec: (totals.train_s > 0.0)
                .then(|| totals.samples as f64 / totals.train_s),
            time_shares: totals.shares(),
            loader_share: totals.loader_share(),
            last_checkpoint: None,
            best_checkpoint: None,
            grad_spikes: Spikes::default(),
            flags: Flags::default(),
        }
    }

    /// How the run ended, in a word.
    fn word(&self) -> &'static str {
        match (&self.failed, self.ending) {
            (Some(_), _) => "failed",
            (None, Ending::Completed) => "finished",
            (None, Ending::Stopped) => "stopped",
            (None, Ending::Quit) => "quit at once",
        }
    }

    /// The best validation accuracy (`96.50%`); a resumed run's where it did not beat the best
    /// of its line before the resume, that one's (`96.50% at step 184, before the resume
    /// (95.80% since)`).
    pub fn best_val(&self, info: &RunInfo) -> Option<String> {
        let percent = |a: f32| format!("{:.2}%", a * 100.0);
        let own = self.best_val_accuracy;
        let Some(b) = BestVal::unbeaten(info.best_before, own) else {
            return own.map(percent);
        };
        let since = own.map_or(String::new(), |a| format!(" ({} since)", percent(a)));
        Some(format!(
            "{} at step {}, before the resume{since}",
            percent(b.accuracy),
            b.step
        ))
    }

    /// `115 steps in 0.02 s | best val accuracy 92.48% | 587k samples/s of training (1.93x one
    /// device, 96% efficiency) | a gradient spike at step 40 | ranks' time: compute 45%, ...`
    /// (a resumed run's steps: those since its resume).
    pub fn figures(&self, info: &RunInfo) -> String {
        let start = info.start_step.min(self.steps);
        let mut line = format!(
            "{} in {}",
            crate::text::counted((self.steps - start) as usize, "step"),
            took(self.wall)
        );
        // (where much of the time went elsewhere: start-up, validations, pauses)
        let wall = self.wall.as_secs_f64();
        if self.train_s > 0.0 && wall - self.train_s > (0.1 * wall).max(1.0) {
            line += &format!(
                ", {} of it in steps",
                took(Duration::from_secs_f64(self.train_s))
            );
        }
        if let Some(best) = self.best_val(info) {
            line += &format!(" | best val accuracy {best}");
        }
        if let Some(r) = self.mean_samples_per_sec {
            let scaling = super::words::scaling_note(Some(r), info.baseline, info.ranks());
            line += &format!(" | {} samples/s of training{scaling}", si(r));
            // (over a short run, its first steps' start-up weighs on its pace: no advice)
            let long = self.steps - start >= 1000;
            if long && info.baseline.is_some_and(|b| r < b) {
                line += " (fewer devices, or more work each a step: a larger --batch-per-replica, would train faster)";
            }
        }
        if let Some(s) = self.grad_spikes.text() {
            line += &format!(" | {s}");
        }
        if let Some(f) = self.flags.text() {
            line += &format!(" | {f}");
        }
        if self.time_shares.is_some() {
            line += &format!(" | ranks' time: {}", ranks_time(self.time_shares));
        }
        if info.loaders_said() {
            line += &super::words::loaders_busy(self.loader_share);
        }
        line
    }

    /// What stays on the normal screen once the UI has closed: how the run ended with its
    /// figures, where it resumed from, its failure, its checkpoints.
    pub fn lines(&self, info: &RunInfo) -> Vec<String> {
        // (a resumed run's steps count from its first run's start)
        let at = match info.start_step.min(self.steps) {
            0 => String::new(),
            _ => format!(" at step {}", self.steps),
        };
        let mut lines = vec![format!("{}{at}: {}", self.word(), self.figures(info))];
        if let Some(p) = &info.resumed_from {
            lines.push(format!(
                "resumed from {} at step {}",
                p.display(),
                info.start_step
            ));
        }
        if let Some(f) = self.failed.as_ref().filter(|f| !f.is_empty()) {
            lines.push(f.clone());
        }
        if let Some(p) = &self.last_checkpoint {
            lines.push(format!("checkpoint: {}", p.display()));
        }
        if let Some((p, a)) = &self.best_checkpoint {
            let best = crate::front::words::best_checkpoint(p, *a);
            lines.push(format!("best checkpoint: {best}"));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spikes_are_named_by_their_steps_while_few_and_known() {
        let said = |steps: &[Option<u64>]| {
            let mut s = Spikes::default();
            steps.iter().for_each(|&x| s.add(x.map(SaidFor::one)));
            s.text()
        };
        assert_eq!(said(&[]), None);
        assert_eq!(said(&[Some(22)]).unwrap(), "a gradient spike at step 22");
        assert_eq!(
            said(&[Some(22), Some(80), Some(138)]).unwrap(),
            "gradient spikes at steps 22, 80 and 138"
        );
        let many: Vec<_> = (1..=7).map(|i| Some(i * 100)).collect();
        assert_eq!(
            said(&many).unwrap(),
            "7 gradient spikes, at steps 100 to 700"
        );
        // (a file from before warnings recorded their step)
        assert_eq!(said(&[None, None]).unwrap(), "2 gradient spikes");
        assert_eq!(said(&[None]).unwrap(), "1 gradient spike");
        assert_eq!(said(&[Some(3), None]).unwrap(), "2 gradient spikes");
        // a warning said for a minute's spikes counts them all, by their first and last steps
        let mut s = Spikes::default();
        s.add(Some(SaidFor::one(40)));
        s.add(Some(SaidFor {
            count: 2,
            first: 90,
            last: 95,
        }));
        assert_eq!(s.text().unwrap(), "gradient spikes at steps 40, 90 and 95");
        s.add(Some(SaidFor {
            count: 12,
            first: 200,
            last: 900,
        }));
        assert_eq!(s.text().unwrap(), "15 gradient spikes, at steps 40 to 900");
    }

    #[test]
    fn the_ranks_time_is_said_whole_with_what_its_parts_leave() {
        let t = |compute_s, comm_s| Totals {
            rank_s: 10.0,
            compute_s,
            data_s: 0.5,
            comm_s,
            wait_s: 0.2,
            ..Totals::default()
        };
        assert_eq!(
            ranks_time(t(6.9, 0.7).shares()),
            "compute 69%, data 5%, comm 7%, wait 2%, other 17%"
        );
        // a percent left is said; what is less than one is not a part (the parts add to 100)
        assert_eq!(
            ranks_time(t(8.6, 0.6).shares()),
            "compute 86%, data 5%, comm 6%, wait 2%, other 1%"
        );
        assert_eq!(
            ranks_time(t(8.66, 0.6).shares()),
            "compute 87%, data 5%, comm 6%, wait 2%"
        );
    }

    #[test]
    fn stragglers_and_limits_said_in_a_run_are_in_its_summary() {
        let mut f = Flags::default();
        assert_eq!(f.text(), None);
        let cpu1 = || Some("cpu1".to_string());
        f.add("straggler", cpu1(), Some(50));
        f.add("input_bound", None, Some(60));
        f.add("grad_spike", None, Some(70));
        f.add("straggler_cleared", cpu1(), Some(80));
        assert_eq!(
            f.text().unwrap(),
            "straggler cpu1 from step 50 to 80; input-bound from step 60"
        );
        // back again, and cleared again: each stretch
        f.add("straggler", cpu1(), Some(300));
        f.add("straggler_cleared", cpu1(), Some(400));
        f.add("degraded", Some("cpu0".into()), Some(500));
        f.add("underused", None, Some(600));
        assert_eq!(
            f.text().unwrap(),
            "straggler cpu1 at steps 50-80, 300-400; input-bound from step 60; cpu0 slowed from step 500; 1 more said during the run"
        );
    }

    #[test]
    fn a_resumed_runs_best_validation_is_its_lines_where_the_resumed_part_did_not_beat_it() {
        let best = |ours: Option<f32>, before: Option<(f32, u64)>| {
            let info = crate::engine::RunInfo {
                start_step: 230,
                best_before: before.map(|(accuracy, step)| BestVal { accuracy, step }),
                ..crate::engine::RunInfo::example(1)
            };
            let s = Summary {
                best_val_accuracy: ours,
                ..Summary::of(
                    276,
                    Ending::Completed,
                    Duration::from_secs(1),
                    &Totals::default(),
                )
            };
            let line = s.figures(&info);
            assert_eq!(
                line.contains("best val"),
                s.best_val(&info).is_some(),
                "{line}"
            );
            s.best_val(&info)
        };
        assert_eq!(best(None, None), None);
        assert_eq!(best(Some(0.961), None).unwrap(), "96.10%");
        // beaten since the resume (or equalled): the run's own
        assert_eq!(best(Some(0.961), Some((0.9554, 230))).unwrap(), "96.10%");
        assert_eq!(best(Some(0.961), Some((0.961, 184))).unwrap(), "96.10%");
        assert_eq!(
            best(Some(0.958), Some((0.965, 184))).unwrap(),
            "96.50% at step 184, before the resume (95.80% since)"
        );
        // nothing validated since
        assert_eq!(
            best(None, Some((0.965, 184))).unwrap(),
            "96.50% at step 184, before the resume"
        );
    }

    #[test]
    fn the_time_in_steps_is_said_where_much_went_elsewhere() {
        let info = crate::engine::RunInfo::example(1);
        let of = |wall: u64, train_s: f64| {
            let totals = Totals {
                samples: 8000,
                train_s,
                ..Totals::default()
            };
            Summary::of(3000, Ending::Completed, Duration::from_secs(wall), &totals).figures(&info)
        };
        // a pause of 9 s among 18.7 s of steps
        let said = of(27, 18.7);
        assert!(
            said.starts_with("3000 steps in 27.0 s, 18.7 s of it in steps |"),
            "{said}"
        );
        // nearly all of it in steps: nothing more
        let said = of(20, 19.5);
        assert!(said.starts_with("3000 steps in 20.0 s |"), "{said}");
    }

    #[test]
    fn a_calibrated_run_slower_than_one_device_is_told_what_would_do_better() {
        let mut info = crate::engine::RunInfo::example(2);
        let totals = Totals {
            samples: 8000,
            train_s: 10.0,
            ..Totals::default()
        };
        let s = Summary::of(1000, Ending::Completed, Duration::from_secs(10), &totals);
        info.baseline = Some(1000.0);
        let said = s.figures(&info);
        assert!(
            said.contains("800 samples/s of training (0.80x one device, 40% efficiency: slower than one device alone) (fewer devices"),
            "{said}"
        );
        info.baseline = Some(500.0);
        let said = s.figures(&info);
        assert!(
            said.ends_with("(1.60x one device, 80% efficiency)"),
            "{said}"
        );
    }
}
