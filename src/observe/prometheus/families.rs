//! Registering the metric families this run serves.

use prometheus::{GaugeVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

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

pub(super) fn int_gauge(r: &Registry, name: &str, help: &str) -> Result<IntGauge, String> {
    let g = IntGauge::new(name, help).map_err(|e| e.to_string())?;
    r.register(Box::new(g.clone())).map_err(|e| e.to_string())?;
    Ok(g)
}

pub(super) fn int_counter(r: &Registry, name: &str, help: &str) -> Result<IntCounter, String> {
    let c = IntCounter::new(name, help).map_err(|e| e.to_string())?;
    r.register(Box::new(c.clone())).map_err(|e| e.to_string())?;
    Ok(c)
}

pub(super) fn gauge_vec(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<GaugeVec, String> {
    let g = GaugeVec::new(Opts::new(name, help), labels).map_err(|e| e.to_string())?;
    r.register(Box::new(g.clone())).map_err(|e| e.to_string())?;
    Ok(g)
}

pub(super) fn int_counter_vec(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntCounterVec, String> {
    let c = IntCounterVec::new(Opts::new(name, help), labels).map_err(|e| e.to_string())?;
    r.register(Box::new(c.clone())).map_err(|e| e.to_string())?;
    Ok(c)
}
