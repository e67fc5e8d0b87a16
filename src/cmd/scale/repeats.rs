//! What a point's repeats make of it: the median run and their spread, and the warning for
//! points whose repeats disagree.

use super::Row;

/// Repeats that differ by more than this (relative to their median) make a figure noise.
pub const NOISY_SPREAD: f64 = 0.10;

/// The median run (of an even number, the slower of the middle two: a figure is never flattered,
/// and every field of the row is one run's), with the spread of all of them.
pub(super) fn median_by(rows: &mut [Row]) -> Row {
    rows.sort_by(|a, b| a.samples_per_sec.total_cmp(&b.samples_per_sec));
    let mut m = rows[(rows.len() - 1) / 2].clone();
    let (lo, hi) = (
        rows[0].samples_per_sec,
        rows[rows.len() - 1].samples_per_sec,
    );
    m.spread = (rows.len() > 1).then_some(if m.samples_per_sec > 0.0 {
        (hi - lo) / m.samples_per_sec
    } else {
        0.0
    });
    m
}

/// The warning for points whose repeats disagree (a speedup is only as good as both its
/// figures), or `None` when every figure holds.
pub fn noise_warning(rows: &[Row]) -> Option<String> {
    // (a grid of both prefetch settings names each point's)
    let both = rows.iter().any(|r| r.prefetch) && rows.iter().any(|r| !r.prefetch);
    let noisy: Vec<String> = rows
        .iter()
        .filter(|r| r.spread.is_some_and(|s| s > NOISY_SPREAD))
        .map(|r| {
            let prefetch = match (both, r.prefetch) {
                (false, _) => "",
                (true, true) => " prefetch on",
                (true, false) => " prefetch off",
            };
            match r.strategy.as_str() {
                "mirrored" => format!("{}x{}{prefetch}", r.devices, r.per_replica),
                s => format!("{s} {}x{}{prefetch}", r.devices, r.per_replica),
            }
        })
        .collect();
    if noisy.is_empty() {
        return None;
    }
    Some(format!(
        "WARN the repeats of {} point(s) ({}) differ by more than {:.0}% of their median: this machine is noisy or busy, so those figures and their speedups mean little; close other work and measure longer (--seconds) or more often (--repeat)",
        noisy.len(),
        noisy.join(", "),
        NOISY_SPREAD * 100.0
    ))
}
