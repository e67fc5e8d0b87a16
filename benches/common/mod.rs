//! What the benchmarks share.

use std::time::Instant;

/// Seconds per call of `f`: once to warm up, then the best of 5 rounds of `reps` calls (the
/// least disturbed round on a noisy machine).
pub fn best_seconds(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..reps {
            f();
        }
        best = best.min(t.elapsed().as_secs_f64() / reps as f64);
    }
    best
}
