//! Registering the metric families this run serves.

use prometheus::core::Collector;
use prometheus::{CounterVec, GaugeVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

/// The `mgtop_bound` label of other work taking the machine's cores.
pub(super) const OUTSIDE_LOAD: &str = "outside-load";

/// The states `mgtop_run_state` has a series for.
pub(super) const STATES: [&str; 5] = ["running", "paused", "completed", "stopped", "failed"];

/// The parts of a step `mgtop_step_time_seconds_total` counts, in the order of `parts`.
pub(super) const PARTS: [&str; 6] = [
    "data",
    "compute",
    "allreduce",
    "wait",
    "optimizer",
    "transfer",
];

/// A family without labels whose one series appears with its first value: nothing, not a 0,
/// is shown before a step has told it (a dashboard's line does not dip to 0 at every start).
pub(super) struct Newest(GaugeVec);

impl Newest {
    pub(super) fn new(r: &Registry, name: &str, help: &str) -> Result<Newest, String> {
        gauge_vec(r, name, help, &[]).map(Newest)
    }

    pub(super) fn set(&self, v: f64) {
        self.0.with_label_values::<&str>(&[]).set(v);
    }
}

/// `made`, registered with `r`: a family this run serves.
/// An f32 as the f64 its shortest decimal spells (1e-3 stays 0.001, not 0.0010000000474974513).
pub(super) fn wide(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(f64::from(x))
}

fn registered<M: Collector + Clone + 'static>(
    r: &Registry,
    made: prometheus::Result<M>,
) -> Result<M, String> {
    let m = made.map_err(|e| e.to_string())?;
    r.register(Box::new(m.clone())).map_err(|e| e.to_string())?;
    Ok(m)
}

pub(super) fn int_gauge(r: &Registry, name: &str, help: &str) -> Result<IntGauge, String> {
    registered(r, IntGauge::new(name, help))
}

pub(super) fn int_counter(r: &Registry, name: &str, help: &str) -> Result<IntCounter, String> {
    registered(r, IntCounter::new(name, help))
}

pub(super) fn gauge_vec(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<GaugeVec, String> {
    registered(r, GaugeVec::new(Opts::new(name, help), labels))
}

pub(super) fn counter_vec(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<CounterVec, String> {
    registered(r, CounterVec::new(Opts::new(name, help), labels))
}

pub(super) fn int_counter_vec(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntCounterVec, String> {
    registered(r, IntCounterVec::new(Opts::new(name, help), labels))
}
