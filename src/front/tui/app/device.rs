//! One device as the UI keeps it: recent step-time splits, samples, histories, warnings.

use std::collections::VecDeque;

use crate::engine::events::StepStats;
use crate::observe::history::History;
use crate::observe::sample::DeviceSample;

use super::{HISTORY_POINTS, RECENT_STEPS, SPARK_STEPS};

/// Where one rank's step time went, averaged over recent steps, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Split {
    pub data: f64,
    /// Forward, backward and optimizer.
    pub compute: f64,
    pub comm: f64,
    /// Waiting in the all-reduce for slower ranks.
    pub wait: f64,
    /// Parameters and gradients between the device and the host (central storage).
    pub transfer: f64,
    /// What the parts above leave of the step: its own bookkeeping (the step time is the wall
    /// time from its start to its end).
    pub other: f64,
    /// Not a part of the step: the rank's loader threads' time building its batch
    /// (`StepStats::loader_busy`), as busy as `loader / total()` of their time; `None` where
    /// not recorded.
    pub loader: Option<f64>,
}

impl Split {
    fn of(s: &StepStats) -> Split {
        let mut split = Split {
            data: s.data_wait.as_secs_f64(),
            compute: (s.compute + s.optimizer).as_secs_f64(),
            comm: s.comm.as_secs_f64(),
            wait: s.sync_wait.as_secs_f64(),
            transfer: s.transfer.as_secs_f64(),
            other: 0.0,
            loader: s.loader_busy.map(|b| b.as_secs_f64()),
        };
        split.other = (s.step_time.as_secs_f64() - split.total()).max(0.0);
        split
    }

    /// A rank's own work in the step, as the straggler detector counts it: waiting for its data
    /// and computing (with the optimizer); not moving gradients or waiting for the others.
    pub fn work(&self) -> f64 {
        self.data + self.compute
    }

    /// The step's time: its parts and what they leave.
    pub fn total(&self) -> f64 {
        self.data + self.compute + self.comm + self.wait + self.transfer + self.other
    }

    /// How busy the rank's loader threads were building its batches, as a share of their time.
    pub fn loader_share(&self) -> Option<f64> {
        crate::observe::monitor::busy_share(self.loader?, self.total())
    }
}

/// A detector's warning about one device, as its row and detail view show it.
#[derive(Clone, Debug, PartialEq)]
pub struct Flag {
    /// As the metrics file names it (`straggler`, `degraded`).
    pub kind: String,
    pub message: String,
}

pub struct DeviceState {
    pub label: String,
    /// The newest `SPARK_STEPS` steps: their split of the step time, and the step time (ms).
    recent: VecDeque<(Split, f64)>,
    pub last: Option<StepStats>,
    pub sample: DeviceSample,
    /// Whether a telemetry sample came yet (before it, its counters are not yet known, not
    /// `n/a`).
    pub sampled: bool,
    pub util: History,
    pub mem_access: History,
    /// Why this device's row is highlighted: its worker failed.
    pub alert: Option<String>,
    /// The detector's current warnings about this device (straggler, degraded), one a kind.
    pub warnings: Vec<Flag>,
}

impl DeviceState {
    /// Raises the warning of `kind` (replacing one of its kind), or with `X_cleared` lowers X.
    pub(super) fn flag(&mut self, kind: &str, message: String) {
        let (kind, cleared) = match kind.strip_suffix("_cleared") {
            Some(k) => (k, true),
            None => (kind, false),
        };
        self.warnings.retain(|f| f.kind != kind);
        if !cleared {
            self.warnings.push(Flag {
                kind: kind.to_string(),
                message,
            });
        }
    }

    pub(super) fn new(label: String) -> DeviceState {
        DeviceState {
            label,
            recent: VecDeque::with_capacity(SPARK_STEPS),
            last: None,
            sample: DeviceSample::default(),
            sampled: false,
            util: History::new(HISTORY_POINTS),
            mem_access: History::new(HISTORY_POINTS),
            alert: None,
            warnings: Vec::new(),
        }
    }

    pub(super) fn on_step(&mut self, s: &StepStats) {
        if self.recent.len() == SPARK_STEPS {
            self.recent.pop_front();
        }
        self.recent
            .push_back((Split::of(s), s.step_time.as_secs_f64() * 1e3));
        self.last = Some(s.clone());
    }

    /// Mean split of the recent steps (the newest `RECENT_STEPS`).
    pub fn split(&self) -> Option<Split> {
        let newest = self.recent.iter().rev().take(RECENT_STEPS);
        let n = newest.len() as f64;
        (n > 0.0).then(|| {
            // (the loaders' where every step said it)
            let mut s = Split {
                loader: Some(0.0),
                ..Split::default()
            };
            for (p, _) in newest {
                s.data += p.data / n;
                s.compute += p.compute / n;
                s.comm += p.comm / n;
                s.wait += p.wait / n;
                s.transfer += p.transfer / n;
                s.other += p.other / n;
                s.loader = s.loader.zip(p.loader).map(|(a, l)| a + l / n);
            }
            s
        })
    }

    /// Recent step times in milliseconds, oldest first.
    pub fn step_ms(&self) -> impl Iterator<Item = f64> + '_ {
        self.recent.iter().map(|(_, ms)| *ms)
    }
}
