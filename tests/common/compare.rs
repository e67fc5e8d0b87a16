//! Comparing the results of two runs.
#![allow(dead_code)]

/// The largest |a - b| over the largest |b| (the relative difference of two weight vectors).
pub fn max_rel_diff(a: &[f32], b: &[f32]) -> f64 {
    let scale = b
        .iter()
        .map(|x| x.abs() as f64)
        .fold(0.0, f64::max)
        .max(1e-12);
    a.iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - *y as f64).abs())
        .fold(0.0, f64::max)
        / scale
}
