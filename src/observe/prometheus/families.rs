//! Registering the metric families this run serves.

use prometheus::core::Collector;
use prometheus::{CounterVec, GaugeVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

/// The `mgtop_bound` label of other work taking the machine's cores.
pub(super) const OUTSIDE_LOAD: &str = "outside-load";

/// The states `mgtop_run_state` has a series for (`starting`: loading the data and opening
/// the devices, before the run's other families are there).
pub(super) const STATES: [&str; 6] = [
    "starting",
    "running",
    "paused",
    "completed",
    "stopped",
    "failed",
];

/// `mgtop_run_state`'s name and help.
pub(super) const STATE: (&str, &str) = (
    "mgtop_run_state",
    "1 for the state the run is in: starting, running, paused, completed, stopped or failed.",
);

/// What a scrape before the run has started gets: `mgtop_run_state{state="starting"} 1`
/// (an empty answer read as a run without metrics; an `absent()` alert fired through a slow
/// start).
pub(super) fn starting() -> Vec<prometheus::proto::MetricFamily> {
    let r = Registry::new();
    match gauge_vec(&r, STATE.0, STATE.1, &["state"]) {
        Ok(state) => {
            state.with_label_values(&["starting"]).set(1.0);
            r.gather()
        }
        Err(_) => Vec::new(),
    }
}

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
