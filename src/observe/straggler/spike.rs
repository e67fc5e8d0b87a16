//! A gradient spike: a step whose gradient norm is many times its recent median, the first
//! sign of a loss spike or a divergence, seen before the loss shows it. Judged on each step's
//! norm (before clipping) against the median of the last `WINDOW` steps once `SETTLE` steps
//! are in; said again only after `SETTLE` steps without one (a run going off the rails climbs
//! for many steps: one warning, not one per step; a bad sample met again an epoch later is
//! said again). A norm is of the batch its mean is over: steps of another batch size, an
//! epoch's short last step, and local SGD's own-rank steps are judged among their own kind
//! (`Detector::on_row` leaves out the short steps and starts afresh at the others). A norm a
//! hundred times under the run's earlier ones is not a spike, however far above its median
//! (`OF_PEAK`): it moves the weights too little to harm them.
//!
//! At most one spike is said a minute (`QUIET`, of run time): a small model whose norms are
//! heavy-tailed meets a spike every few hundred steps, which at thousands of steps a second
//! would bury the log. The spikes of the minute after one said are held; when it is over,
//! the largest of them is said for them all (and at the run's end, `finish`). One ten times
//! the largest of its minute is said at once (after those held): a divergence is not held back
//! behind noise.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

/// Steps the median is over.
const WINDOW: usize = 100;
/// The fewest steps a median is judged on, and the calm steps between two spikes said.
const SETTLE: usize = 20;
/// A spike is a norm at least this many times the median.
const FACTOR: f64 = 10.0;
/// ... and at least this share of the largest median the run has had: a run whose gradients
/// have all but vanished (a training set learnt by heart, norms of 3e-7) does not blow up on a
/// step a thousand times that, still a thousand times smaller than the steps of its start (a
/// run that started far above its later norms, from a poor initialisation, still hears of a
/// spike of a twentieth of its start).
const OF_PEAK: f64 = 1e-2;

/// The least run time between two spikes said.
const QUIET: Duration = Duration::from_secs(60);

/// The spikes a warning is said for: its own, and those of its minute held with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SaidFor {
    pub count: u64,
    /// The steps of the first and the last of them.
    pub first: u64,
    pub last: u64,
}

impl SaidFor {
    /// One spike, at `step`.
    pub fn one(step: u64) -> SaidFor {
        SaidFor {
            count: 1,
            first: step,
            last: step,
        }
    }
}

/// A step's gradient norm far above its recent median.
#[derive(Clone, Debug, PartialEq)]
pub struct Spike {
    /// The step it came at.
    pub step: u64,
    pub said_for: SaidFor,
    pub norm: f64,
    /// The median norm of the `steps` before it (up to `WINDOW`).
    pub median: f64,
    pub steps: usize,
    /// The run's `--clip-grad-norm` bound, where it clips.
    pub clip: Option<f64>,
    /// The `--clip-grad-norm` that would bound such steps: twice the median, or where the
    /// norms have all but vanished (a set learnt by heart), twice `OF_PEAK` of the run's
    /// largest median: a bound of twice a vanished median would stop training.
    pub bound: f64,
}

impl fmt::Display for Spike {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Spike {
            norm,
            median,
            steps,
            clip,
            bound,
            said_for,
            ..
        } = self;
        write!(
            f,
            "norm {}, {:.0}x the median {} of the last {steps} steps; ",
            sig(*norm, 3),
            norm / median,
            sig(*median, 3)
        )?;
        match clip {
            Some(c) if norm > c => write!(
                f,
                "clipped to {} by --clip-grad-norm; if the loss climbs, try a lower --lr or more --warmup",
                sig(*c, 3)
            ),
            // (twice the median clips few of the steps that train as they should)
            _ => write!(
                f,
                "a loss spike or divergence may follow: --clip-grad-norm {} would bound such steps",
                sig(*bound, 2)
            ),
        }?;
        if said_for.count > 1 {
            write!(
                f,
                "; the largest of {} spikes, at steps {} to {} (one spike warning a minute)",
                said_for.count, said_for.first, said_for.last
            )?;
        }
        Ok(())
    }
}

/// `x` to `digits` significant digits, a whole number whole (scientific where very large or
/// small).
fn sig(x: f64, digits: i32) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let magnitude = x.abs().log10().floor() as i32;
    if !(-4..6).contains(&magnitude) {
        return format!("{:.*e}", (digits - 1) as usize, x);
    }
    format!("{:.*}", (digits - 1 - magnitude).max(0) as usize, x)
}

/// The recent norms and the steps since the last spike.
#[derive(Debug, Default)]
pub struct SpikeDetector {
    /// When the newest spike said was (run time), and the largest norm said or held since.
    said: Option<(Duration, f64)>,
    /// The spikes held since the last one said: the largest, standing for them all.
    held: Option<Spike>,
    recent: VecDeque<f64>,
    clip: Option<f64>,
    /// Steps since a norm last was a spike, said or not (`None`: none yet).
    calm: Option<usize>,
    /// Local SGD's synchronous warm-up: after it, a step's norm is rank 0's own batch's.
    local_after: Option<u64>,
    /// The largest median the run has had (kept when the norms are judged afresh).
    peak: f64,
}

impl SpikeDetector {
    /// For a run clipping at `clip`, whose steps after `local_after` are local SGD's own.
    pub fn new(clip: Option<f32>, local_after: Option<u64>) -> SpikeDetector {
        SpikeDetector {
            clip: clip.map(f64::from),
            local_after,
            ..SpikeDetector::default()
        }
    }

    /// Judges the norms from here on afresh (another batch size).
    pub fn rebase(&mut self) {
        self.recent.clear();
        self.calm = None;
    }

    /// Step `step`'s norm (NaN where the step had none) at `at` (run time); the spikes to
    /// say: the held ones' once their minute is over, this step's.
    pub fn on_norm(&mut self, step: u64, at: Duration, norm: f32) -> Vec<Spike> {
        let mut out = Vec::new();
        if self
            .said
            .is_some_and(|(t, _)| at.saturating_sub(t) >= QUIET)
        {
            self.said = None;
        }
        if let Some(spike) = self.judge(step, norm) {
            match self.said {
                Some((t, largest)) if spike.norm < FACTOR * largest => {
                    self.said = Some((t, largest.max(spike.norm)));
                    self.hold(spike);
                }
                // (far larger than its minute's: said at once, after those held, in step order)
                Some(_) => {
                    self.said = Some((at, spike.norm));
                    out.extend(self.held.take());
                    out.push(spike);
                }
                // (said below, with those held from the minute before)
                None => self.hold(spike),
            }
        }
        if self.said.is_none() {
            if let Some(held) = self.held.take() {
                self.said = Some((at, held.norm));
                out.push(held);
            }
        }
        out
    }

    /// Adds `spike` to those held: the largest stands for them all.
    fn hold(&mut self, spike: Spike) {
        self.held = Some(match self.held.take() {
            None => spike,
            Some(h) => Spike {
                said_for: SaidFor {
                    count: h.said_for.count + 1,
                    first: h.said_for.first,
                    last: spike.step,
                },
                ..if spike.norm > h.norm { spike } else { h }
            },
        });
    }

    /// The spikes held, said for them all by their largest (at the run's end).
    pub fn finish(&mut self) -> Option<Spike> {
        self.held.take()
    }

    /// The spike step `step`'s norm is, where one to say (`SETTLE` calm steps since the last).
    fn judge(&mut self, step: u64, norm: f32) -> Option<Spike> {
        if self.local_after.is_some_and(|w| step > w) {
            self.local_after = None;
            self.rebase();
        }
        let norm = f64::from(norm);
        if !norm.is_finite() {
            return None;
        }
        let median = (self.recent.len() >= SETTLE)
            .then(|| crate::stats::median(self.recent.iter().copied().collect()));
        self.peak = self.peak.max(median.unwrap_or(0.0));
        let high = median.filter(|&m| m > 0.0 && norm >= FACTOR * m && norm >= OF_PEAK * self.peak);
        let said = self.calm.is_none_or(|c| c >= SETTLE);
        self.calm = match high {
            Some(_) => Some(0),
            None => self.calm.map(|c| c + 1),
        };
        let spike = high.filter(|_| said).map(|median| Spike {
            step,
            said_for: SaidFor::one(step),
            norm,
            median,
            steps: self.recent.len(),
            clip: self.clip,
            bound: 2.0 * median.max(OF_PEAK * self.peak),
        });
        if self.recent.len() == WINDOW {
            self.recent.pop_front();
        }
        self.recent.push_back(norm);
        spike
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Norms around 1 (0.8 to 1.2), step after step.
    fn steady(d: &mut SpikeDetector, steps: usize) -> usize {
        (0..steps)
            .filter(|i| {
                d.judge(0, 0.8 + 0.4 * ((*i * 7) % 10) as f32 / 10.0)
                    .is_some()
            })
            .count()
    }

    #[test]
    fn a_norm_ten_times_its_median_is_a_spike_and_noise_is_not() {
        let mut d = SpikeDetector::new(None, None);
        assert_eq!(steady(&mut d, 300), 0);
        assert_eq!(d.judge(0, 9.0), None, "9x is within what a noisy run does");
        let s = d.judge(0, 14.0).expect("a spike");
        assert!((s.median - 1.0).abs() < 0.21, "{s:?}");
        let said = s.to_string();
        assert!(
            said.starts_with("norm 14.0, 14x the median 1.00 of the last 100 steps;"),
            "{said}"
        );
        assert!(said.contains("--clip-grad-norm 2"), "{said}");
    }

    #[test]
    fn a_norm_far_under_the_run_s_earlier_ones_is_no_spike() {
        let mut d = SpikeDetector::new(None, None);
        steady(&mut d, 100);
        // the training set learnt by heart: norms a millionth of the start's
        let vanished = |d: &mut SpikeDetector, steps| {
            (0..steps).filter(|_| d.judge(0, 2e-8).is_some()).count()
        };
        assert_eq!(vanished(&mut d, 200), 0);
        assert_eq!(
            d.judge(0, 2e-6),
            None,
            "100x its median, 2e-6 of the start's"
        );
        // a run's whole last stretch at 3e-7 with steps a thousand times that (seen on digits
        // after 36000 steps: 112 warnings naming a bound that would have stopped training)
        assert_eq!(vanished(&mut d, 100), 0);
        assert_eq!(d.judge(0, 4e-4), None, "a 2500th of the start's");
        // one a twentieth of the start's is a spike all the same, and the bound it is told
        // leaves the steps a hundredth of the start's (not twice the vanished median: that
        // would stop training)
        vanished(&mut d, SETTLE);
        let said = d.judge(0, 5e-2).expect("a spike").to_string();
        assert!(
            said.contains("--clip-grad-norm 0.020 would bound"),
            "{said}"
        );
        // judged afresh (another batch size), the run's start still counts
        d.rebase();
        vanished(&mut d, 100);
        assert_eq!(d.judge(0, 2e-6), None);
    }

    #[test]
    fn nothing_is_judged_before_the_median_settles() {
        let mut d = SpikeDetector::new(None, None);
        assert_eq!(steady(&mut d, SETTLE - 1), 0);
        assert_eq!(d.judge(0, 100.0), None);
        // nor on steps without a norm (older files, NaN)
        assert_eq!(d.judge(0, f32::NAN), None);
    }

    #[test]
    fn a_divergence_is_said_once_not_once_per_step() {
        let mut d = SpikeDetector::new(Some(1.0), None);
        steady(&mut d, 50);
        let climbing: Vec<usize> = (0..200)
            .filter(|&i| d.judge(0, 20.0 * 1.05f32.powi(i as i32)).is_some())
            .collect();
        // (a climb of 5% a step stays 10x above the median of the 100 steps before it)
        assert_eq!(climbing, [0]);
    }

    #[test]
    fn a_spike_met_again_after_calm_steps_is_said_again() {
        let mut d = SpikeDetector::new(None, None);
        steady(&mut d, 40);
        assert!(d.judge(0, 30.0).is_some());
        assert_eq!(steady(&mut d, 5), 0);
        assert_eq!(d.judge(0, 30.0), None, "too soon: part of the first");
        assert_eq!(steady(&mut d, SETTLE), 0);
        let again = d.judge(0, 30.0).expect("said again");
        assert_eq!(again.steps, WINDOW.min(40 + 1 + 5 + 1 + SETTLE));
    }

    /// `steps` steps from `from`, one a millisecond, norms around 1 and a norm of `spike`
    /// every 50th; the spikes said, as (step, the spikes each is said for).
    fn noisy(d: &mut SpikeDetector, from: u64, steps: u64, spike: f32) -> Vec<(u64, u64)> {
        (from..from + steps)
            .flat_map(|s| {
                let norm = if s % 50 == 0 {
                    spike
                } else {
                    0.8 + 0.4 * ((s * 7) % 10) as f32 / 10.0
                };
                d.on_norm(s, Duration::from_millis(s), norm)
            })
            .map(|s| (s.step, s.said_for.count))
            .collect()
    }

    #[test]
    fn spikes_of_a_minute_are_said_once_for_them_all_by_their_largest() {
        let mut d = SpikeDetector::new(None, None);
        // a spike every 50 steps for 100 s: one is said at once, then one a minute
        let said = noisy(&mut d, 1, 100_000, 20.0);
        assert_eq!(said[0], (50, 1));
        assert_eq!(said.len(), 2, "{said:?}");
        // (steps 100 to 60050: said at the minute's end, step 60050, with its own)
        assert_eq!(said[1].1, 1200, "{said:?}");
        // the rest at the end, with their first and last steps
        let rest = d.finish().expect("held spikes");
        let text = rest.to_string();
        assert!(
            text.contains("; the largest of 799 spikes, at steps 60100 to 100000 (one spike warning a minute)"),
            "{text}"
        );
        assert_eq!(d.finish(), None, "said once");
        // a quiet minute: the next spike is said at once, alone
        let mut d = SpikeDetector::new(None, None);
        assert_eq!(noisy(&mut d, 1, 80, 20.0), [(50, 1)]);
        assert_eq!(noisy(&mut d, 100_000, 100, 20.0), [(100_000, 1)]);
    }

    #[test]
    fn a_spike_ten_times_the_largest_of_its_minute_is_said_at_once() {
        let mut d = SpikeDetector::new(None, None);
        assert_eq!(noisy(&mut d, 1, 200, 20.0), [(50, 1)]);
        // (a divergence: not held back behind the minute's noise)
        // (the ones held before it, steps 100 to 200, said first: in step order)
        assert_eq!(noisy(&mut d, 201, 60, 300.0), [(100, 3), (250, 1)]);
        // those after it, a minute after it (steps 300 to 60250)
        let said = noisy(&mut d, 261, 70_000, 20.0);
        assert_eq!(said[0], (300, 1200), "{said:?}");
    }

    #[test]
    fn a_clipped_run_is_told_the_bound_held_it() {
        let mut d = SpikeDetector::new(Some(0.5), None);
        steady(&mut d, 40);
        let said = d.judge(0, 50.0).unwrap().to_string();
        assert!(
            said.contains("clipped to 0.500 by --clip-grad-norm"),
            "{said}"
        );
        assert!(said.contains("lower --lr"), "{said}");
        // a bound above the spike did not hold it: not said to have
        let mut d = SpikeDetector::new(Some(100.0), None);
        steady(&mut d, 40);
        let said = d.judge(0, 50.0).unwrap().to_string();
        assert!(said.contains("--clip-grad-norm 2.0 would bound"), "{said}");
    }

    #[test]
    fn local_sgd_s_own_rank_norms_are_judged_among_themselves() {
        // (one rank's batch of 8 has a noisier mean gradient than the global batch)
        let mut d = SpikeDetector::new(None, Some(100));
        assert_eq!(steady(&mut d, 100), 0);
        assert_eq!(
            d.judge(101, 12.0),
            None,
            "the first local step starts afresh"
        );
    }

    #[test]
    fn numbers_show_their_significant_digits_and_whole_numbers_whole() {
        assert_eq!(sig(14.04, 3), "14.0");
        assert_eq!(sig(0.012345, 2), "0.012");
        assert_eq!(sig(2345.6, 2), "2346");
        assert_eq!(sig(1.5e-7, 2), "1.5e-7");
        assert_eq!(sig(3.2e9, 3), "3.20e9");
    }
}
