//! What a point's repeats make of it: the median run and their spread, and the warnings for
//! figures that mean little: points whose repeats disagree, or that other work slowed.

use super::Row;
use crate::observe::machine_load::Load;

/// Repeats that differ by more than this (relative to their median) make a figure noise.
pub const NOISY_SPREAD: f64 = 0.10;

/// The median run (of an even number, the slower of the middle two: a figure is never flattered,
/// and every field of the row is one run's), with the spread of all of them.
pub(super) fn median_by(rows: &mut [Row]) -> Row {
    rows.sort_by(|a, b| a.samples_per_sec.total_cmp(&b.samples_per_sec));
    let mut m = rows[(rows.len() - 1) / 2].clone();
    let rates: Vec<f64> = rows.iter().map(|r| r.samples_per_sec).collect();
    m.spread = spread_of(&rates, m.samples_per_sec);
    m
}

/// How far a point's repeats lie apart: their range over `median` (`None` for one run).
pub fn spread_of(runs: &[f64], median: f64) -> Option<f64> {
    let lo = runs.iter().copied().min_by(f64::total_cmp)?;
    let hi = runs.iter().copied().max_by(f64::total_cmp)?;
    (runs.len() > 1).then_some(if median > 0.0 {
        (hi - lo) / median
    } else {
        0.0
    })
}

/// A spread as the tables show it: ± half the range, of the median (`-` for one run).
pub fn spread_text(spread: Option<f64>) -> String {
    // (rounded up: a spread over the warning's ±5% never shows as ±5%; a whole percent, give
    // or take float rounding, stays one)
    spread.map_or("-".into(), |s| format!("±{:.0}%", (s * 50.0 - 1e-9).ceil()))
}

/// The warning for points whose repeats disagree (a speedup is only as good as both its
/// figures), or `None` when every figure holds.
pub fn noise_warning(rows: &[Row]) -> Option<String> {
    let spreads: Vec<(String, Option<f64>)> = (rows.iter())
        .map(|r| (point_name(r, rows), r.spread))
        .collect();
    noisy_points(&spreads, "--seconds")
}

/// The warning for the points (name, spread of their repeats over their median) whose repeats
/// disagree, or `None` when every figure holds; `longer` is the flag that measures longer.
pub fn noisy_points(points: &[(String, Option<f64>)], longer: &str) -> Option<String> {
    let noisy: Vec<&str> = (points.iter())
        .filter(|(_, s)| s.is_some_and(|s| s > NOISY_SPREAD))
        .map(|(name, _)| name.as_str())
        .collect();
    if noisy.is_empty() {
        return None;
    }
    Some(format!(
        "WARN the repeats of {} point(s) ({}) differ by more than {:.0}% of their median: this machine is noisy or busy, so those figures and their ratios mean little; close other work and measure longer ({longer}) or more often (--repeat)",
        noisy.len(),
        noisy.join(", "),
        NOISY_SPREAD * 100.0
    ))
}

/// The warning for points timed while other work took this machine's cores (their figures are
/// low, and their speedups off by as much), or `None` where none was.
pub fn outside_warning(rows: &[Row]) -> Option<String> {
    let loaded: Vec<(String, &Load)> = (rows.iter())
        .filter_map(|r| Some((point_name(r, rows), r.outside.as_ref()?)))
        .collect();
    loaded_points(&loaded)
}

/// The warning for the points (name, the load while they were timed) that other work slowed,
/// or `None` where `loaded` is empty.
pub fn loaded_points(loaded: &[(String, &Load)]) -> Option<String> {
    let (_, worst) = loaded
        .iter()
        .max_by(|a, b| a.1.others.total_cmp(&b.1.others))?;
    let points: Vec<String> = (loaded.iter())
        .map(|(name, l)| format!("{name} {:.1}", l.others))
        .collect();
    let top = (worst.top.as_ref()).map_or(String::new(), |(name, _)| format!("; most by {name}"));
    Some(format!(
        "WARN other work took this machine's cores while {} point(s) were timed (cores it took: {}, of the machine's {}{top}): those figures are low and their ratios mean little; measure on a quiet machine",
        loaded.len(),
        points.join(", "),
        worst.cores,
    ))
}

/// A point as the warnings name it: `2x32`, its strategy where not mirrored, its prefetch
/// setting where `rows` measure both.
fn point_name(r: &Row, rows: &[Row]) -> String {
    let both = rows.iter().any(|r| r.prefetch) && rows.iter().any(|r| !r.prefetch);
    let prefetch = match (both, r.prefetch) {
        (false, _) => "",
        (true, true) => " prefetch on",
        (true, false) => " prefetch off",
    };
    match r.strategy.as_str() {
        "mirrored" => format!("{}x{}{prefetch}", r.devices, r.per_replica),
        s => format!("{s} {}x{}{prefetch}", r.devices, r.per_replica),
    }
}
