//! How `selftest` judges a GPU result against the CPU's: one `Check` a line of its table,
//! passing when |gpu - cpu| <= tol + eps*|cpu| for every element.

use super::CudaError;

/// One line of the selftest table.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    pub name: String,
    /// Largest |gpu - cpu| / (tol + eps*|cpu|): at most 1 passes. None: the check could not run.
    pub worst: Option<f64>,
    pub max_abs: f64,
    pub note: String,
}

impl Check {
    pub fn passed(&self) -> bool {
        self.worst.is_some_and(|w| w <= 1.0)
    }
}

/// (largest |a-b|, largest |a-b| / (tol + eps*|b|)) over two equally long slices.
pub fn compare(got: &[f32], want: &[f32], tol: f64, eps: f64) -> (f64, f64) {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .fold((0.0f64, 0.0f64), |(abs, rel), (&g, &w)| {
            let d = (g as f64 - w as f64).abs();
            let d = if d.is_nan() { f64::INFINITY } else { d };
            (abs.max(d), rel.max(d / (tol + eps * (w as f64).abs())))
        })
}

pub(super) fn check(name: String, r: Result<(f64, f64), CudaError>) -> Check {
    match r {
        Ok((max_abs, worst)) => Check {
            name,
            worst: Some(worst),
            max_abs,
            note: String::new(),
        },
        Err(e) => Check {
            name,
            worst: None,
            max_abs: f64::NAN,
            note: e.to_string(),
        },
    }
}

/// `check`, with `note` (where the error is largest) shown when it fails.
pub(super) fn noted(name: String, r: Result<((f64, f64), String), CudaError>) -> Check {
    match r {
        Ok((v, note)) => {
            let mut c = check(name, Ok(v));
            if !c.passed() {
                c.note = note;
            }
            c
        }
        Err(e) => check(name, Err(e)),
    }
}

/// Compares what two steps *changed* (against the CPU's change), not the parameters: a step
/// moves them by ~lr, so a comparison of the parameters themselves passes even when no update
/// is applied at all. The limit is 0.1% of the largest change plus 1% of each element's.
pub fn compare_changes(init: &[f32], got: &[f32], want: &[f32]) -> (f64, f64) {
    compare_changes_within(init, got, want, (1e-3, 1e-2))
}

/// `compare_changes` with the limit (share of the largest change, share of each element's).
pub fn compare_changes_within(
    init: &[f32],
    got: &[f32],
    want: &[f32],
    (largest_share, each): (f64, f64),
) -> (f64, f64) {
    let delta = |v: &[f32]| -> Vec<f32> { v.iter().zip(init).map(|(a, b)| a - b).collect() };
    let (dg, dw) = (delta(got), delta(want));
    let largest = dw.iter().fold(0.0f64, |m, x| m.max((*x as f64).abs()));
    compare(&dg, &dw, largest_share * largest.max(1e-12), each)
}
