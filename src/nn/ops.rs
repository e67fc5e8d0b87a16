//! CPU layers, llm.c style: each layer is a `x_forward` / `x_backward` pair with its shapes in
//! a comment; backward passes accumulate into parameter gradients.

use crate::nn::gemm::sgemm;
use crate::nn::rng::{counter_f32, mix64};
use crate::nn::simd::twice;

/// out[B,OC] = inp[B,C] @ w[OC,C]^T + bias[OC] (PyTorch's layout; no bias when empty).
pub fn linear_forward(
    out: &mut [f32],
    inp: &[f32],
    w: &[f32],
    bias: &[f32],
    b: usize,
    c: usize,
    oc: usize,
) {
    let beta = match bias.is_empty() {
        true => 0.0,
        false => {
            for row in out[..b * oc].chunks_exact_mut(oc) {
                row.copy_from_slice(&bias[..oc]);
            }
            1.0
        }
    };
    sgemm(false, true, b, oc, c, 1.0, inp, w, beta, out);
}

/// dinp[B,C] = dout[B,OC] @ w[OC,C] (overwritten; skipped when `None`),
/// dw[OC,C] += dout^T @ inp, dbias[OC] += column sums of dout (none when empty).
#[allow(clippy::too_many_arguments)]
pub fn linear_backward(
    dinp: Option<&mut [f32]>,
    dw: &mut [f32],
    dbias: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    w: &[f32],
    b: usize,
    c: usize,
    oc: usize,
) {
    if let Some(dinp) = dinp {
        sgemm(false, false, b, c, oc, 1.0, dout, w, 0.0, dinp);
    }
    sgemm(true, false, oc, c, b, 1.0, dout, inp, 1.0, dw);
    if dbias.is_empty() {
        return;
    }
    for row in dout[..b * oc].chunks_exact(oc) {
        for (g, d) in dbias[..oc].iter_mut().zip(row) {
            *g += d;
        }
    }
}

/// An activation fused onto an op's output (applied after it, masked first in backward).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    None,
    Relu,
    /// min(max(x, 0), 6), MobileNet's.
    Relu6,
}

impl Act {
    /// `+relu`, what the start-up table appends to the op's kind.
    pub fn suffix(self) -> &'static str {
        match self {
            Act::None => "",
            Act::Relu => "+relu",
            Act::Relu6 => "+relu6",
        }
    }

    /// x[N] = act(x), in place.
    pub fn forward(self, x: &mut [f32]) {
        match self {
            Act::None => {}
            Act::Relu => relu_forward(x),
            Act::Relu6 => relu6_forward(x),
        }
    }

    /// dx[N] *= act'(x) from its output `out`, in place.
    pub fn backward(self, dx: &mut [f32], out: &[f32]) {
        match self {
            Act::None => {}
            Act::Relu => relu_backward(dx, out),
            Act::Relu6 => relu6_backward(dx, out),
        }
    }
}

twice! {
    /// x[N] = max(x, 0), in place (the output is kept for the backward pass).
    pub fn relu_forward(x: &mut [f32]) {
        for v in x.iter_mut() {
            *v = v.max(0.0);
        }
    }
}

twice! {
    /// dx[N] *= (out > 0), in place; `out` is the ReLU's output.
    pub fn relu_backward(dx: &mut [f32], out: &[f32]) {
        // a select, not a branch: on real activations the sign is a coin toss, and mispredicted
        // branches made this 10x slower than the forward pass
        for (d, &o) in dx.iter_mut().zip(out) {
            *d = if o > 0.0 { *d } else { 0.0 };
        }
    }
}

twice! {
    /// x[N] = min(max(x, 0), 6), in place.
    pub fn relu6_forward(x: &mut [f32]) {
        for v in x.iter_mut() {
            *v = v.clamp(0.0, 6.0);
        }
    }
}

twice! {
    /// dx[N] *= (0 < out < 6), in place; `out` is the ReLU6's output.
    pub fn relu6_backward(dx: &mut [f32], out: &[f32]) {
        for (d, &o) in dx.iter_mut().zip(out) {
            *d = if o > 0.0 && o < 6.0 { *d } else { 0.0 };
        }
    }
}

twice! {
    /// out[N] = a + b.
    pub fn add_forward(out: &mut [f32], a: &[f32], b: &[f32]) {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            *o = x + y;
        }
    }
}

twice! {
    /// acc[N] += x.
    pub fn accumulate(acc: &mut [f32], x: &[f32]) {
        for (a, &v) in acc.iter_mut().zip(x) {
            *a += v;
        }
    }
}

twice! {
    /// out[N] = x * mask (dropout's forward with its mask of 0 or 1/(1-p), and its backward).
    pub fn mul(out: &mut [f32], x: &[f32], mask: &[f32]) {
        for ((o, &v), &m) in out.iter_mut().zip(x).zip(mask) {
            *o = v * m;
        }
    }
}

/// Softmax cross-entropy over logits[B,C] with integer labels[B].
/// Returns (sum of per-sample losses, number of correct argmax predictions). When `dlogits`
/// is given it receives d(sum of losses)/dlogits = softmax - onehot; the caller divides by
/// the global sample count after the all-reduce, so shards of any size combine exactly.
pub fn softmax_xent(
    dlogits: Option<&mut [f32]>,
    logits: &[f32],
    labels: &[u32],
    b: usize,
    c: usize,
) -> (f64, usize) {
    softmax_xent_smoothed(dlogits, logits, labels, b, c, 0.0)
}

/// `softmax_xent` against labels smoothed by `eps` (PyTorch's `label_smoothing`): the target
/// is 1 - eps on the label plus eps / C on every class, so the loss is
/// (1 - eps) * CE + eps * (logsumexp - mean logit) and dlogits = softmax - target.
pub fn softmax_xent_smoothed(
    dlogits: Option<&mut [f32]>,
    logits: &[f32],
    labels: &[u32],
    b: usize,
    c: usize,
    eps: f32,
) -> (f64, usize) {
    let mut loss = 0.0f64;
    let mut correct = 0usize;
    let mut dl = dlogits;
    for i in 0..b {
        let row = &logits[i * c..(i + 1) * c];
        let y = labels[i] as usize;
        let mut max = f32::NEG_INFINITY;
        let mut arg = 0;
        for (j, &v) in row.iter().enumerate() {
            if v > max {
                max = v;
                arg = j;
            }
        }
        if arg == y {
            correct += 1;
        }
        let mut sum = 0.0f32;
        for &v in row {
            sum += (v - max).exp();
        }
        let log_sum = sum.ln();
        let ce = log_sum - (row[y] - max);
        loss += match eps {
            0.0 => ce as f64,
            _ => {
                let mean = row.iter().map(|&v| (v - max) as f64).sum::<f64>() / c as f64;
                (1.0 - eps) as f64 * ce as f64 + eps as f64 * (log_sum as f64 - mean)
            }
        };
        if let Some(d) = dl.as_deref_mut() {
            let drow = &mut d[i * c..(i + 1) * c];
            let inv = 1.0 / sum;
            let spread = eps / c as f32;
            for (g, &v) in drow.iter_mut().zip(row) {
                *g = (v - max).exp() * inv - spread;
            }
            drow[y] -= 1.0 - eps;
        }
    }
    (loss, correct)
}

/// The key of dropout's mask for node `node` in training pass `pass` of a replica whose
/// dropout seed is `seed`.
pub fn dropout_key(seed: u64, pass: u64, node: usize) -> u64 {
    mix64(mix64(seed) ^ pass.wrapping_mul(4096).wrapping_add(node as u64))
}

/// mask[i] = 0 with probability `p`, else 1/(1-p): element i's draw is `rng::counter_f32(key,
/// i)`, so it does not depend on how the mask is cut up, and
/// `kernels/eltwise.cu` (`dropout_mask_f32`) draws the same: both backends drop the same
/// elements.
pub fn dropout_mask(mask: &mut [f32], key: u64, p: f32) {
    let keep = 1.0 / (1.0 - p);
    for (i, m) in mask.iter_mut().enumerate() {
        *m = if counter_f32(key, i as u64) < p {
            0.0
        } else {
            keep
        };
    }
}

#[cfg(test)]
// finite differences perturb x[i] in place while reading the analytic gradient at i
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;

    #[test]
    fn dropout_keys_differ_by_seed_pass_and_node() {
        let keys = [
            dropout_key(0, 1, 0),
            dropout_key(1, 1, 0),
            dropout_key(0, 2, 0),
            dropout_key(0, 1, 1),
        ];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(dropout_key(7, 3, 2), dropout_key(7, 3, 2));
    }

    #[test]
    fn a_dropout_mask_drops_about_p_and_each_element_is_its_own_draw() {
        let key = dropout_key(3, 1, 4);
        let mut long = vec![f32::NAN; 100_000];
        dropout_mask(&mut long, key, 0.3);
        let dropped = long.iter().filter(|&&m| m == 0.0).count() as f64 / long.len() as f64;
        assert!((dropped - 0.3).abs() < 0.01, "{dropped}");
        assert!(long.iter().all(|&m| m == 0.0 || m == 1.0 / 0.7));
        // element i's draw does not depend on the mask's length
        let mut short = vec![0.0; 100];
        dropout_mask(&mut short, key, 0.3);
        assert_eq!(short[..], long[..100]);
        // another key, other elements
        dropout_mask(&mut short, dropout_key(3, 2, 4), 0.3);
        assert_ne!(short[..], long[..100]);
    }
    use crate::nn::rng::Rng;

    fn randn(r: &mut Rng, n: usize) -> Vec<f32> {
        (0..n).map(|_| r.normal()).collect()
    }

    /// Central finite difference of a scalar function f at x[i], in f64 around f32 data.
    fn fd(x: &mut [f32], i: usize, f: &mut dyn FnMut(&[f32]) -> f64) -> f64 {
        let h = 1e-2f32;
        let x0 = x[i];
        x[i] = x0 + h;
        let fp = f(x);
        x[i] = x0 - h;
        let fm = f(x);
        x[i] = x0;
        (fp - fm) / (2.0 * h as f64)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 2e-3 + 2e-3 * b.abs()
    }

    #[test]
    fn linear_backward_matches_finite_differences() {
        let (b, c, oc) = (3, 4, 5);
        let mut r = Rng::new(1);
        let mut inp = randn(&mut r, b * c);
        let mut w = randn(&mut r, c * oc);
        let mut bias = randn(&mut r, oc);
        let g = randn(&mut r, b * oc); // loss = sum(out * g)
        let loss = |inp: &[f32], w: &[f32], bias: &[f32]| {
            let mut out = vec![0.0; b * oc];
            linear_forward(&mut out, inp, w, bias, b, c, oc);
            out.iter()
                .zip(&g)
                .map(|(o, g)| (*o as f64) * (*g as f64))
                .sum::<f64>()
        };
        let mut dinp = vec![0.0; b * c];
        let mut dw = vec![0.0; c * oc];
        let mut db = vec![0.0; oc];
        linear_backward(Some(&mut dinp), &mut dw, &mut db, &g, &inp, &w, b, c, oc);
        for i in 0..inp.len() {
            let (w2, b2) = (w.clone(), bias.clone());
            let num = fd(&mut inp, i, &mut |x| loss(x, &w2, &b2));
            assert!(close(dinp[i] as f64, num), "dinp[{i}] {} vs {num}", dinp[i]);
        }
        for i in 0..w.len() {
            let (i2, b2) = (inp.clone(), bias.clone());
            let num = fd(&mut w, i, &mut |x| loss(&i2, x, &b2));
            assert!(close(dw[i] as f64, num), "dw[{i}] {} vs {num}", dw[i]);
        }
        for i in 0..bias.len() {
            let (i2, w2) = (inp.clone(), w.clone());
            let num = fd(&mut bias, i, &mut |x| loss(&i2, &w2, x));
            assert!(close(db[i] as f64, num), "db[{i}] {} vs {num}", db[i]);
        }
    }

    #[test]
    fn linear_backward_accumulates_into_weight_gradients() {
        let (b, c, oc) = (2, 3, 2);
        let mut r = Rng::new(2);
        let inp = randn(&mut r, b * c);
        let w = randn(&mut r, c * oc);
        let g = randn(&mut r, b * oc);
        let mut dw1 = vec![0.0; c * oc];
        let mut db1 = vec![0.0; oc];
        linear_backward(None, &mut dw1, &mut db1, &g, &inp, &w, b, c, oc);
        let mut dw2 = dw1.clone();
        let mut db2 = db1.clone();
        linear_backward(None, &mut dw2, &mut db2, &g, &inp, &w, b, c, oc);
        for (a, b) in dw1.iter().zip(&dw2) {
            assert!((2.0 * a - b).abs() < 1e-5);
        }
        for (a, b) in db1.iter().zip(&db2) {
            assert!((2.0 * a - b).abs() < 1e-5);
        }
    }

    #[test]
    fn relu_backward_matches_finite_differences() {
        let mut r = Rng::new(3);
        // keep inputs away from the kink at 0, where the derivative is undefined
        let mut x: Vec<f32> = randn(&mut r, 20)
            .into_iter()
            .map(|v| if v.abs() < 0.1 { v + 0.5 } else { v })
            .collect();
        let g = randn(&mut r, 20);
        let loss = |x: &[f32]| {
            let mut y = x.to_vec();
            relu_forward(&mut y);
            y.iter()
                .zip(&g)
                .map(|(a, b)| (*a as f64) * (*b as f64))
                .sum::<f64>()
        };
        let mut out = x.clone();
        relu_forward(&mut out);
        let mut dx = g.clone();
        relu_backward(&mut dx, &out);
        for i in 0..x.len() {
            let num = fd(&mut x, i, &mut |v| loss(v));
            assert!(close(dx[i] as f64, num), "dx[{i}] {} vs {num}", dx[i]);
        }
    }

    #[test]
    fn softmax_xent_gradient_matches_finite_differences_and_loss_is_right() {
        let (b, c) = (4, 6);
        let mut r = Rng::new(4);
        let mut logits = randn(&mut r, b * c);
        let labels = [0u32, 5, 2, 2];
        let mut d = vec![0.0; b * c];
        let (loss, _) = softmax_xent(Some(&mut d), &logits, &labels, b, c);
        // direct formula for the first row
        let row = &logits[0..c];
        let lse = row.iter().map(|v| (*v as f64).exp()).sum::<f64>().ln();
        let mut expect = lse - row[0] as f64;
        for i in 1..b {
            let row = &logits[i * c..(i + 1) * c];
            let lse = row.iter().map(|v| (*v as f64).exp()).sum::<f64>().ln();
            expect += lse - row[labels[i] as usize] as f64;
        }
        assert!((loss - expect).abs() < 1e-4, "{loss} vs {expect}");
        for i in 0..logits.len() {
            let num = fd(&mut logits, i, &mut |x| {
                softmax_xent(None, x, &labels, b, c).0
            });
            assert!(close(d[i] as f64, num), "dlogits[{i}] {} vs {num}", d[i]);
        }
    }

    #[test]
    fn label_smoothing_matches_its_definition_and_finite_differences() {
        let (b, c, eps) = (3, 5, 0.1f32);
        let mut r = Rng::new(8);
        let mut logits = randn(&mut r, b * c);
        let labels = [4u32, 0, 2];
        let mut d = vec![0.0; b * c];
        let (loss, _) = softmax_xent_smoothed(Some(&mut d), &logits, &labels, b, c, eps);
        // -sum over classes of target * log softmax, target = (1 - eps) onehot + eps / C
        let mut expect = 0.0;
        for i in 0..b {
            let row = &logits[i * c..(i + 1) * c];
            let lse = row.iter().map(|v| (*v as f64).exp()).sum::<f64>().ln();
            for (j, &v) in row.iter().enumerate() {
                let t = eps as f64 / c as f64
                    + if j == labels[i] as usize {
                        1.0 - eps as f64
                    } else {
                        0.0
                    };
                expect -= t * (v as f64 - lse);
            }
        }
        assert!((loss - expect).abs() < 1e-4, "{loss} vs {expect}");
        for i in 0..logits.len() {
            let num = fd(&mut logits, i, &mut |x| {
                softmax_xent_smoothed(None, x, &labels, b, c, eps).0
            });
            assert!(close(d[i] as f64, num), "dlogits[{i}] {} vs {num}", d[i]);
        }
    }

    #[test]
    fn softmax_xent_is_stable_for_huge_logits_and_counts_correct() {
        let logits = [1000.0f32, 0.0, -1000.0, 0.0, 3.0, 1.0];
        let (loss, correct) = softmax_xent(None, &logits, &[0, 2], 2, 3);
        assert!(loss.is_finite());
        assert_eq!(correct, 1);
    }
}
