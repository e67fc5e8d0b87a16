//! The measuring of a scale grid: every point, round after round, and the speedups of the
//! medians against their 1-device points.

use std::sync::Arc;

use crossbeam_channel::Receiver;

use super::held::Held;
use super::repeats::median_by;
use super::{measure_once, Plan, Point, Row};
use crate::comm::Processes;
use crate::config::RunConfig;
use crate::engine::EngineError;

/// What a grid measured: a row per point measured, and the point that failed, if one did.
#[derive(Default)]
pub struct Grid {
    pub rows: Vec<Row>,
    pub failed: Option<(Point, EngineError)>,
}

/// Measures every point, `repeat` rounds over the grid (`progress` is told each run as it
/// finishes), and fills in speedup and
/// efficiency against the 1-device point of the same series, where the grid has one.
/// With `procs` (run by every process of a launched job, in step): a point of one device runs
/// on process 0 alone, the others over every process; only process 0 gets rows back.
/// `stop` (one process): a word there ends the measuring after the run under way, the rows
/// then those of the points measured so far.
/// A point that fails (its run refused or ended by an error) ends the measuring: the rows are
/// then those measured before it, with the point and its error.
pub fn run(
    base: &RunConfig,
    plan: &Plan,
    procs: Option<&Arc<dyn Processes>>,
    stop: Option<&Receiver<()>>,
    mut progress: impl FnMut(usize, usize, &Row),
) -> Result<Grid, EngineError> {
    let lead = procs.is_none_or(|j| j.index() == 0);
    let points = plan.points();
    let val = Held::load(base)?;
    // round after round over every point, so that a busy spell of the machine hits every point
    // alike instead of all the repeats of one (what a side-by-side comparison needs)
    let repeat = plan.repeat.max(1);
    let mut runs: Vec<Vec<Row>> = vec![Vec::new(); points.len()];
    let mut failed = None;
    'grid: for round in 0..repeat {
        for (i, p) in points.iter().enumerate() {
            let over = procs.filter(|_| p.devices > 1);
            if over.is_none() && !lead {
                continue;
            }
            let row = match measure_once(base, plan, *p, &val, over) {
                Ok(row) => row,
                Err(e) => {
                    failed = Some((*p, e));
                    break 'grid;
                }
            };
            progress(round * points.len() + i + 1, repeat * points.len(), &row);
            runs[i].push(row);
            if stop.is_some_and(|s| s.try_recv().is_ok()) {
                break 'grid;
            }
        }
    }
    if !lead {
        return match failed {
            Some((_, e)) => Err(e),
            None => Ok(Grid::default()),
        };
    }
    let measured = runs.iter_mut().filter(|r| !r.is_empty());
    let mut rows: Vec<Row> = measured.map(|r| median_by(r)).collect();
    let baselines: Vec<Row> = rows.iter().filter(|r| r.devices == 1).cloned().collect();
    for r in &mut rows {
        if let Some(b) = baselines.iter().find(|b| {
            b.per_replica == r.per_replica && b.prefetch == r.prefetch && b.strategy == r.strategy
        }) {
            let s = r.samples_per_sec / b.samples_per_sec;
            r.speedup = Some(s);
            r.efficiency = Some(s / r.devices as f64);
        }
    }
    Ok(Grid { rows, failed })
}
