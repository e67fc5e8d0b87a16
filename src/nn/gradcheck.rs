//! Test helpers: central finite differences of a scalar loss, compared with analytic gradients.

use crate::nn::rng::Rng;

pub fn randn(r: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| r.normal()).collect()
}

/// sum(out * g) in f64: a scalar loss whose gradient with respect to `out` is `g`.
pub fn dot(out: &[f32], g: &[f32]) -> f64 {
    out.iter().zip(g).map(|(a, b)| *a as f64 * *b as f64).sum()
}

/// Checks every element of `analytic` against the central difference of `loss` at `x`
/// (perturbed in place by +-1e-2 and restored); `what` names the tensor in the failure.
pub fn check(what: &str, x: &mut [f32], analytic: &[f32], loss: &mut dyn FnMut(&[f32]) -> f64) {
    assert_eq!(x.len(), analytic.len(), "{what}: gradient length");
    let h = 1e-2f32;
    for i in 0..x.len() {
        let x0 = x[i];
        x[i] = x0 + h;
        let fp = loss(x);
        x[i] = x0 - h;
        let fm = loss(x);
        x[i] = x0;
        let num = (fp - fm) / (2.0 * h as f64);
        let a = analytic[i] as f64;
        assert!(
            (a - num).abs() <= 2e-3 + 2e-3 * num.abs(),
            "{what}[{i}]: analytic {a} vs numeric {num}"
        );
    }
}
