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
    /// out[N] = max(a + b, 0): a residual add and its ReLU in one pass (`add_forward`, then
    /// `relu_forward`, to the bit).
    pub fn add_relu_forward(out: &mut [f32], a: &[f32], b: &[f32]) {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            *o = (x + y).max(0.0);
        }
    }
}

twice! {
    /// `relu_backward` on dx, and the masked dx added to acc, in one pass.
    pub fn relu_backward_accumulate(dx: &mut [f32], acc: &mut [f32], out: &[f32]) {
        for ((d, a), &o) in dx.iter_mut().zip(acc.iter_mut()).zip(out) {
            *d = if o > 0.0 { *d } else { 0.0 };
            *a += *d;
        }
    }
}

twice! {
    /// `relu_backward` on dx, and the masked dx copied to `to`, in one pass.
    pub fn relu_backward_copy(dx: &mut [f32], to: &mut [f32], out: &[f32]) {
        for ((d, t), &o) in dx.iter_mut().zip(to.iter_mut()).zip(out) {
            *d = if o > 0.0 { *d } else { 0.0 };
            *t = *d;
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

pub mod par;
#[cfg(test)]
mod tests;
