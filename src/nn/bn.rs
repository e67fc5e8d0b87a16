//! Batch norm over NCHW tensors (a flat [B, C] input is C channels of one position), fused per
//! channel: the statistics, the normalisation and the backward sums of one channel in one task,
//! channels spread over the worker's intra-op threads (each channel's sums in a fixed order, so
//! results do not depend on the thread count). PyTorch's definition: biased variance to
//! normalise, unbiased for the running variance, momentum 0.1, eps 1e-5.

use crate::nn::intraop::{self, Disjoint};
use crate::nn::simd::{dot_dev, lane_sum, sq_dev_sum};

/// One batch norm's geometry: `b` samples of `c` channels of `hw` positions.
#[derive(Clone, Copy, Debug)]
pub struct BnGeom {
    pub b: usize,
    pub c: usize,
    pub hw: usize,
}

/// Per-channel sums of x (`dev` None) or of (x - dev[c])^2, plane by plane in order, in f64.
pub fn channel_sums(x: &[f32], g: BnGeom, dev: Option<&[f64]>) -> Vec<f64> {
    let mut out = vec![0.0f64; g.c];
    let sums = Disjoint::new(&mut out);
    intraop::each(g.c, &|ch| {
        let plane = |i: usize| &x[(i * g.c + ch) * g.hw..(i * g.c + ch + 1) * g.hw];
        let s = match dev {
            None => (0..g.b).map(|i| lane_sum(plane(i)) as f64).sum::<f64>(),
            Some(m) => {
                let m = m[ch] as f32;
                (0..g.b).map(|i| sq_dev_sum(plane(i), m)).sum()
            }
        };
        // SAFETY: entry `ch` is this task's alone
        unsafe { sums.range(ch, 1)[0] = s };
    });
    out
}

/// The per-channel statistics of a batch: means, biased variances and the count they are over.
#[derive(Clone, Debug)]
pub struct BnStats {
    pub mean: Vec<f64>,
    pub var: Vec<f64>,
    pub n: f64,
}

impl BnStats {
    /// This batch's own statistics (two passes: the mean, then the squared deviations).
    pub fn of(x: &[f32], g: BnGeom) -> BnStats {
        let n = (g.b * g.hw) as f64;
        let mean: Vec<f64> = channel_sums(x, g, None).iter().map(|s| s / n).collect();
        let var = channel_sums(x, g, Some(&mean))
            .iter()
            .map(|s| s / n)
            .collect();
        BnStats { mean, var, n }
    }
}

/// Training, with the batch's statistics `st` (this replica's, or the global batch's):
/// out = (x - mean) / sqrt(var + eps) * weight + bias; saved[2C] = mean, 1/sqrt(var + eps)
/// per channel (for backward); running[2C] = running mean, running variance (unbiased),
/// moved toward the batch's by `momentum`.
#[allow(clippy::too_many_arguments)]
pub fn bn_forward_train(
    out: &mut [f32],
    saved: &mut [f32],
    running: &mut [f32],
    x: &[f32],
    weight: &[f32],
    bias: &[f32],
    g: BnGeom,
    st: &BnStats,
    eps: f32,
    momentum: f32,
) {
    let n = g.b * g.hw;
    assert!(x.len() >= n * g.c && out.len() >= n * g.c && saved.len() >= 2 * g.c);
    let outs = Disjoint::new(out);
    for ch in 0..g.c {
        let invstd = 1.0 / (st.var[ch] + eps as f64).sqrt();
        saved[ch] = st.mean[ch] as f32;
        saved[g.c + ch] = invstd as f32;
        let unbiased = if st.n > 1.0 {
            st.var[ch] * st.n / (st.n - 1.0)
        } else {
            st.var[ch]
        };
        running[ch] = (1.0 - momentum) * running[ch] + momentum * st.mean[ch] as f32;
        running[g.c + ch] = (1.0 - momentum) * running[g.c + ch] + momentum * unbiased as f32;
    }
    let saved = &*saved;
    intraop::each(g.c, &|ch| {
        let (m, invstd) = (saved[ch], saved[g.c + ch]);
        let scale = invstd * weight[ch];
        let shift = bias[ch] - m * scale;
        for i in 0..g.b {
            let at = (i * g.c + ch) * g.hw;
            // SAFETY: channel `ch`'s planes are this task's alone
            let o = unsafe { outs.range(at, g.hw) };
            for (o, &v) in o.iter_mut().zip(&x[at..at + g.hw]) {
                *o = v * scale + shift;
            }
        }
    });
}
/// Inference: out = (x - running mean) / sqrt(running var + eps) * weight + bias.
pub fn bn_forward_eval(
    out: &mut [f32],
    running: &[f32],
    x: &[f32],
    weight: &[f32],
    bias: &[f32],
    g: BnGeom,
    eps: f32,
) {
    for i in 0..g.b {
        for ch in 0..g.c {
            let scale = weight[ch] / (running[g.c + ch] + eps).sqrt();
            let shift = bias[ch] - running[ch] * scale;
            let at = (i * g.c + ch) * g.hw;
            for (o, &v) in out[at..at + g.hw].iter_mut().zip(&x[at..at + g.hw]) {
                *o = v * scale + shift;
            }
        }
    }
}

/// Per-channel sums of dout and of dout * (x - mean), [2C], in f64: what the input gradient
/// needs from the whole batch (summed across replicas under sync batch norm).
pub fn bn_grad_sums(dout: &[f32], x: &[f32], saved: &[f32], g: BnGeom) -> Vec<f64> {
    let mut out = vec![0.0f64; 2 * g.c];
    let sums = Disjoint::new(&mut out);
    intraop::each(g.c, &|ch| {
        let mean = saved[ch];
        let (mut sdy, mut sdyx) = (0.0f64, 0.0f64);
        for i in 0..g.b {
            let at = (i * g.c + ch) * g.hw;
            let (d, xs) = (&dout[at..at + g.hw], &x[at..at + g.hw]);
            sdy += lane_sum(d) as f64;
            sdyx += dot_dev(d, xs, mean);
        }
        // SAFETY: entries `ch` and `C + ch` are this task's alone
        unsafe {
            sums.range(ch, 1)[0] = sdy;
            sums.range(g.c + ch, 1)[0] = sdyx;
        }
    });
    out
}

/// dweight += this replica's sum(dout * xhat), dbias += sum(dout) (from `local`, its own
/// `bn_grad_sums`); dx (overwritten; skipped when `None`) from `total`, the sums over the batch
/// the statistics were taken over (this replica's, or the global batch's), of `n` values per
/// channel.
#[allow(clippy::too_many_arguments)]
pub fn bn_backward(
    dx: Option<&mut [f32]>,
    dweight: &mut [f32],
    dbias: &mut [f32],
    dout: &[f32],
    x: &[f32],
    saved: &[f32],
    weight: &[f32],
    g: BnGeom,
    (local, total, n): (&[f64], &[f64], f64),
) {
    for ch in 0..g.c {
        let invstd = saved[g.c + ch] as f64;
        dweight[ch] += (local[g.c + ch] * invstd) as f32;
        dbias[ch] += local[ch] as f32;
    }
    let Some(dx) = dx else {
        return;
    };
    let dxs = Disjoint::new(dx);
    let n = n as f32;
    intraop::each(g.c, &|ch| {
        let (mean, invstd) = (saved[ch], saved[g.c + ch]);
        let sdy = total[ch] as f32;
        let sdyxhat = (total[g.c + ch] * invstd as f64) as f32;
        let k = weight[ch] * invstd / n;
        for i in 0..g.b {
            let at = (i * g.c + ch) * g.hw;
            // SAFETY: channel `ch`'s planes are this task's alone
            let dx = unsafe { dxs.range(at, g.hw) };
            for ((o, &d), &v) in dx
                .iter_mut()
                .zip(&dout[at..at + g.hw])
                .zip(&x[at..at + g.hw])
            {
                let xhat = (v - mean) * invstd;
                *o = k * (n * d - sdy - xhat * sdyxhat);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::gradcheck::{check, dot, randn};
    use crate::nn::rng::Rng;

    #[test]
    fn training_statistics_and_running_updates_are_pytorchs() {
        // one channel, values 1..=4 over 2 samples of 2 positions
        let g = BnGeom { b: 2, c: 1, hw: 2 };
        let x = [1.0, 2.0, 3.0, 4.0];
        let (mut out, mut saved, mut run) = ([0.0; 4], [0.0; 2], [0.0, 1.0]);
        let st = BnStats::of(&x, g);
        bn_forward_train(
            &mut out,
            &mut saved,
            &mut run,
            &x,
            &[2.0],
            &[0.5],
            g,
            &st,
            1e-5,
            0.1,
        );
        // mean 2.5, biased variance 1.25, unbiased 5/3
        assert!((saved[0] - 2.5).abs() < 1e-6);
        let inv = 1.0 / (1.25f32 + 1e-5).sqrt();
        assert!((saved[1] - inv).abs() < 1e-5);
        assert!((out[0] - ((1.0 - 2.5) * inv * 2.0 + 0.5)).abs() < 1e-5);
        assert!((run[0] - 0.25).abs() < 1e-6, "{run:?}");
        assert!((run[1] - (0.9 + 0.1 * 5.0 / 3.0)).abs() < 1e-6, "{run:?}");
        // inference reads the running statistics
        let mut e = [0.0; 4];
        bn_forward_eval(&mut e, &run, &x, &[2.0], &[0.5], g, 1e-5);
        assert!((e[3] - ((4.0 - run[0]) / (run[1] + 1e-5).sqrt() * 2.0 + 0.5)).abs() < 1e-5);
    }

    #[test]
    fn backward_matches_finite_differences() {
        let g = BnGeom { b: 3, c: 2, hw: 5 };
        let n = g.b * g.c * g.hw;
        let mut r = Rng::new(3);
        let mut x = randn(&mut r, n);
        let mut w = randn(&mut r, 2);
        let mut bias = randn(&mut r, 2);
        let dout = randn(&mut r, n);
        let fwd = |x: &[f32], w: &[f32], bias: &[f32]| {
            let (mut out, mut saved, mut run) = (vec![0.0; n], vec![0.0; 4], vec![0.0; 4]);
            let st = BnStats::of(x, g);
            bn_forward_train(
                &mut out, &mut saved, &mut run, x, w, bias, g, &st, 1e-5, 0.1,
            );
            (out, saved)
        };
        let (_, saved) = fwd(&x, &w, &bias);
        let (mut dx, mut dw, mut db) = (vec![0.0; n], vec![0.0; 2], vec![0.0; 2]);
        let sums = bn_grad_sums(&dout, &x, &saved, g);
        let n = (g.b * g.hw) as f64;
        bn_backward(
            Some(&mut dx),
            &mut dw,
            &mut db,
            &dout,
            &x,
            &saved,
            &w,
            g,
            (&sums, &sums, n),
        );
        let (w0, b0, x0) = (w.clone(), bias.clone(), x.clone());
        check("bn dx", &mut x, &dx, &mut |x| {
            dot(&fwd(x, &w0, &b0).0, &dout)
        });
        check("bn dweight", &mut w, &dw, &mut |w| {
            dot(&fwd(&x0, w, &b0).0, &dout)
        });
        check("bn dbias", &mut bias, &db, &mut |b| {
            dot(&fwd(&x0, &w0, b).0, &dout)
        });
    }
}
