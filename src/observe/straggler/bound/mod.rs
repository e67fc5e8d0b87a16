//! What holds the whole run back when no one rank does (a straggler is slower than its peers;
//! here every rank is held alike):
//! - its input: every rank waits for batches a large share of each step;
//! - on GPUs, the host: the GPUs are busy (NVML utilization) only part of the time while no
//!   rank waits for input, so kernel launches and per-step host work set the pace;
//! - on GPUs, small work: the GPUs are busy all the time at a few percent of their peak (MFU),
//!   the most common waste, which utilization alone hides.
//!
//! Judged as stragglers are: every `every` rows after `warmup`, on the medians of the last
//! `window` rows (and the newest telemetry), said after `consecutive` evaluations past the
//! line and cleared after as many back on the right side of a second line (hysteresis).

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use super::{Context, DetectorConfig};
use crate::engine::events::StepStats;
use crate::observe::mfu::Mfu;
use crate::observe::monitor::StepRow;
use crate::stats::median;

/// Input-bound at this share of a step spent waiting for data; cleared below the second.
const INPUT_SHARE: (f64, f64) = (0.25, 0.15);
/// Launch-bound below this GPU utilization (with little data wait); cleared above the second.
const LAUNCH_UTIL: (f64, f64) = (0.5, 0.6);
/// What "little data wait" is, for calling a run launch-bound or underused rather than input-bound.
const LAUNCH_DATA_MAX: f64 = 0.1;
/// NVML's utilization is the busy share of a past window (up to a second): the readings taken
/// before this many came in after the first step may still be of the idle start-up.
const UTIL_SETTLE: u32 = 3;
/// Underused: busy at least the first share of the time at an MFU below the second; cleared at
/// an MFU above the third or once busy under the fourth.
const UNDERUSED: (f64, f64, f64, f64) = (0.8, 0.05, 0.07, 0.7);

/// Which limit a run is against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    Input,
    Launch,
    Underused,
}

impl Limit {
    pub const ALL: [Limit; 3] = [Limit::Input, Limit::Launch, Limit::Underused];

    /// As its warning's kind names it in the metrics file (`input_bound`; cleared: `_cleared`).
    pub fn kind(self) -> &'static str {
        match self {
            Limit::Input => "input_bound",
            Limit::Launch => "launch_bound",
            Limit::Underused => "underused",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Limit::Input => "input-bound",
            Limit::Launch => "launch-bound",
            Limit::Underused => "underused",
        }
    }
}

/// What the run spends its steps on (medians over the window; mean over ranks).
#[derive(Clone, Debug, PartialEq)]
pub struct Bound {
    pub limit: Limit,
    /// A rank's own step (without waiting for slower peers, mean over ranks) in ms; the wait
    /// for input of the rank that waits the least share of its own step: that share, and the
    /// wait and the own step it is of, in ms (one step's figures, the median step's by share).
    pub step_ms: f64,
    pub data_ms: f64,
    pub data_step_ms: f64,
    pub data_share: f64,
    /// How busy the ranks' loader threads are building batches, as a share of their time
    /// (the median step's, mean over ranks; `None` where not recorded).
    pub loaders: Option<f64>,
    /// The GPUs' mean utilization (0-1) and MFU (0-1), where known.
    pub util: Option<f64>,
    pub mfu: Option<f64>,
    pub per_replica: usize,
    /// What an input-bound run is told to do (or the fault injected that explains it).
    pub input_fix: String,
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pct = |v: f64| format!("{:.0}%", v * 100.0);
        // (a share "at least" so much is never rounded up: 99.6% is not 100%)
        let at_least = |v: f64| format!("{:.0}%", (v * 100.0).floor());
        let b = self.per_replica;
        match self.limit {
            Limit::Input => write!(
                f,
                "input-bound: every rank waits for its input at least {} of each step ({:.1} of {:.1} ms{}); {}",
                at_least(self.data_share),
                self.data_ms,
                self.data_step_ms,
                self.loaders.map_or(String::new(), |l| format!(
                    "; its loader threads busy {} of the time",
                    pct(l)
                )),
                self.input_fix
            ),
            Limit::Launch => write!(
                f,
                "launch-bound: the GPUs are busy {} of the time and no rank waits for input, so the host's kernel launches and per-step work set the pace ({:.2} ms per step); a larger --batch-per-replica (now {b}) gives each launch more work",
                pct(self.util.unwrap_or(0.0)),
                self.step_ms
            ),
            Limit::Underused => write!(
                f,
                "underused: the GPUs are busy {} of the time but at {} MFU: their kernels are too small to fill them; a larger --batch-per-replica (now {b}) or a larger model uses them better",
                pct(self.util.unwrap_or(0.0)),
                match self.mfu {
                    Some(m) if m < 0.001 => "<0.1%".to_string(),
                    Some(m) => format!("{:.1}%", m * 100.0),
                    None => "an unknown".into(),
                }
            ),
        }
    }
}

/// One step over every rank: its own step in ms (mean over ranks); the least share of its own
/// step any rank waited for input, with that rank's wait and own step in ms; the MFU (mean
/// over the ranks that have one).
struct Sample {
    mean_own: f64,
    share: f64,
    data: f64,
    own: f64,
    mfu: Option<f64>,
    /// The ranks' loader threads' busy share in this step, mean over ranks.
    loaders: Option<f64>,
}

pub struct BoundDetector {
    mfu: Mfu,
    recent: VecDeque<Sample>,
    rows: u64,
    /// The GPU ranks' newest utilization (telemetry), mean over them, once settled.
    util: Option<f64>,
    /// Utilization readings since the first step.
    readings: u32,
    /// Per limit: evaluations in a row past its line, and back from it; whether it is said.
    past: [u32; 3],
    back: [u32; 3],
    flagged: [bool; 3],
    /// What it knows of the run's input, for what an input-bound run is told.
    ctx: Context,
}

impl BoundDetector {
    pub fn new(mfu: Mfu, ctx: Context) -> BoundDetector {
        BoundDetector {
            mfu,
            ctx,
            recent: VecDeque::new(),
            rows: 0,
            util: None,
            readings: 0,
            past: [0; 3],
            back: [0; 3],
            flagged: [false; 3],
        }
    }

    /// The GPU ranks' newest utilization (None for CPU workers and where NVML cannot tell),
    /// taken once `UTIL_SETTLE` readings came after the first step.
    pub fn on_util(&mut self, util: &[Option<f32>]) {
        let known: Vec<f64> = util.iter().flatten().map(|&u| u as f64).collect();
        if self.rows > 0 && !known.is_empty() {
            self.readings += 1;
        }
        self.util = (self.readings >= UTIL_SETTLE && !known.is_empty())
            .then(|| known.iter().sum::<f64>() / known.len() as f64);
    }

    /// Feeds one complete step; returns the limits said or cleared here, with the run's figures.
    pub fn on_row(&mut self, row: &StepRow, cfg: &DetectorConfig) -> Vec<(Bound, bool)> {
        if row.ranks.is_empty() {
            return Vec::new();
        }
        // a step after a pause measured the pause too
        if !row.ranks.iter().any(|r| r.after_pause) {
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            let own = |r: &StepStats| ms(r.step_time.saturating_sub(r.sync_wait));
            let n = row.ranks.len() as f64;
            let mean_own = row.ranks.iter().map(own).sum::<f64>() / n;
            let share_of = |r: &StepStats| match own(r) > 0.0 {
                true => ms(r.data_wait) / own(r),
                false => 0.0,
            };
            // (the rank that waits the least share: its figures go together)
            let least = (row.ranks.iter())
                .min_by(|a, b| share_of(a).total_cmp(&share_of(b)))
                .expect("a rank");
            let mfu: Vec<f64> = (row.ranks.iter())
                .filter_map(|r| self.mfu.of(r.rank, r.samples, r.step_time))
                .collect();
            let mfu = (!mfu.is_empty()).then(|| mfu.iter().sum::<f64>() / mfu.len() as f64);
            let loaders = (self.ctx.loaders_said())
                .then(|| crate::observe::monitor::loader_share(&row.ranks))
                .flatten();
            if self.recent.len() == cfg.window {
                self.recent.pop_front();
            }
            self.recent.push_back(Sample {
                mean_own,
                share: share_of(least),
                data: ms(least.data_wait),
                own: own(least),
                mfu,
                loaders,
            });
        }
        self.rows += 1;
        if self.rows <= cfg.warmup || !self.rows.is_multiple_of(cfg.every) || self.recent.is_empty()
        {
            return Vec::new();
        }
        let step_ms = median(self.recent.iter().map(|s| s.mean_own).collect());
        // (the median step by share, whose wait and own step are said with it)
        let mut by_share: Vec<&Sample> = self.recent.iter().collect();
        by_share.sort_by(|a, b| a.share.total_cmp(&b.share));
        // (the lower middle of an even count: the share is said as "at least")
        let mid = by_share[(by_share.len() - 1) / 2];
        let (share, data_ms, data_step_ms) = (mid.share, mid.data, mid.own);
        let mfus: Vec<f64> = self.recent.iter().filter_map(|s| s.mfu).collect();
        let mfu = (!mfus.is_empty()).then(|| median(mfus));
        let loaders: Vec<f64> = self.recent.iter().filter_map(|s| s.loaders).collect();
        let loaders = (!loaders.is_empty()).then(|| median(loaders));
        let bound = |limit| Bound {
            limit,
            step_ms,
            data_ms,
            data_step_ms,
            data_share: share,
            loaders,
            util: self.util,
            mfu,
            per_replica: row.ranks[0].per_replica,
            input_fix: self.ctx.input_fix(loaders, row.ranks[0].per_replica),
        };
        let quiet_input = share < LAUNCH_DATA_MAX;
        let mut out = Vec::new();
        for (i, limit) in Limit::ALL.into_iter().enumerate() {
            // (past the line, back from it): each counted in a row, reset otherwise
            let (past, back) = match (limit, self.util, mfu) {
                (Limit::Input, ..) => (
                    share >= INPUT_SHARE.0 && data_ms >= ms_floor(cfg),
                    share < INPUT_SHARE.1,
                ),
                (Limit::Launch, Some(u), _) => (
                    u < LAUNCH_UTIL.0 && quiet_input,
                    u >= LAUNCH_UTIL.1 || !quiet_input,
                ),
                (Limit::Underused, Some(u), Some(m)) => (
                    u >= UNDERUSED.0 && m < UNDERUSED.1 && quiet_input,
                    m >= UNDERUSED.2 || u < UNDERUSED.3,
                ),
                // no telemetry or MFU to judge by: whatever was said is no longer known
                _ => (false, true),
            };
            self.past[i] = if past { self.past[i] + 1 } else { 0 };
            self.back[i] = if back { self.back[i] + 1 } else { 0 };
            if !self.flagged[i] && self.past[i] >= cfg.consecutive {
                self.flagged[i] = true;
                out.push((bound(limit), true));
            } else if self.flagged[i] && self.back[i] >= cfg.consecutive {
                self.flagged[i] = false;
                out.push((bound(limit), false));
            }
        }
        out
    }
}

/// Data waits shorter than this are noise, however large their share (a 50 µs step).
fn ms_floor(cfg: &DetectorConfig) -> f64 {
    cfg.min_gap.as_secs_f64() * 1e3 / 4.0
}

#[cfg(test)]
mod tests;
