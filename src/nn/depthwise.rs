//! Depthwise 2-D convolution over NCHW tensors (groups = channels), weights [C, 1, K, K]: each
//! channel convolved with its own kernel, directly (it is not a matrix product: im2col would
//! copy K*K times the image for K*K multiply-adds per output): windows padded by K/2 with stride
//! 1 or 2 by whole planes in `nn::direct::depthwise` where the CPU has AVX-512 or AVX2, the
//! others row by row here. Channels spread over the worker's intra-op threads; each channel's weight
//! gradient summed over images in order, so results do not depend on the thread count.

use std::ops::Range;

use crate::nn::direct;
use crate::nn::grouped::ConvGeom;
use crate::nn::intraop::{self, Disjoint};
use crate::nn::simd::{axpy, dot, lane_sum};

/// The output columns `ox` whose input column `ox * stride - pad + kx` lies inside 0..w.
fn valid(kx: usize, stride: usize, pad: usize, w: usize, ow: usize) -> Range<usize> {
    // ox * stride + kx >= pad  and  ox * stride + kx < pad + w
    let lo = pad.saturating_sub(kx).div_ceil(stride);
    let hi = if pad + w > kx {
        ((pad + w - kx - 1) / stride + 1).min(ow)
    } else {
        0
    };
    lo..hi.max(lo)
}

/// For each kernel row ky the output rows whose input row is inside the image, and for each
/// kernel column kx the output columns likewise with the first one's input column: worked out
/// once per call, not per row (they hold for every plane).
struct Taps {
    rows: Vec<Range<usize>>,
    cols: Vec<(Range<usize>, usize)>,
}

impl Taps {
    fn new(g: &ConvGeom) -> Taps {
        let rows = (0..g.k)
            .map(|ky| valid(ky, g.stride, g.pad, g.h, g.oh))
            .collect();
        let cols = (0..g.k)
            .map(|kx| {
                let r = valid(kx, g.stride, g.pad, g.w, g.ow);
                let first = r.start * g.stride + kx - g.pad;
                (r, first)
            })
            .collect();
        Taps { rows, cols }
    }
}

/// out[B,C,OH,OW] = inp[B,C,H,W] (*) w[C,1,K,K] per channel (+ bias[C] when given).
pub fn dwconv_forward(
    out: &mut [f32],
    inp: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    b: usize,
    g: &ConvGeom,
) {
    let (hw, ohw, kk) = (g.h * g.w, g.oh * g.ow, g.k * g.k);
    assert!(inp.len() >= b * g.c * hw && out.len() >= b * g.c * ohw && w.len() >= g.c * kk);
    let outs = Disjoint::new(out);
    let taps = Taps::new(g);
    let direct = direct::depthwise::applies(g.k, g.stride, g.pad);
    let win = (g.h, g.w, g.k, g.stride);
    intraop::each(g.c, &|ch| {
        let wk = &w[ch * kk..(ch + 1) * kk];
        let bv = bias.map_or(0.0, |bs| bs[ch]);
        let src = |i: usize| &inp[(i * g.c + ch) * hw..(i * g.c + ch + 1) * hw];
        // SAFETY: plane (i, ch) is this task's alone
        let dst = |i: usize| unsafe { outs.range((i * g.c + ch) * ohw, ohw) };
        if direct {
            let srcs: Vec<&[f32]> = (0..b).map(src).collect();
            let mut dsts: Vec<&mut [f32]> = (0..b).map(dst).collect();
            direct::depthwise::forward_channel(&mut dsts, &srcs, wk, bv, win);
            return;
        }
        for i in 0..b {
            let (src, o) = (src(i), dst(i));
            o.fill(bv);
            for (ky, rows) in taps.rows.iter().enumerate() {
                for oy in rows.clone() {
                    let iy = oy * g.stride + ky - g.pad;
                    let orow = &mut o[oy * g.ow..(oy + 1) * g.ow];
                    let irow = &src[iy * g.w..(iy + 1) * g.w];
                    for (kx, (r, first)) in taps.cols.iter().enumerate() {
                        let (wv, first) = (wk[ky * g.k + kx], *first);
                        if g.stride == 1 {
                            axpy(&mut orow[r.clone()], wv, &irow[first..first + r.len()]);
                        } else {
                            for (j, o) in orow[r.clone()].iter_mut().enumerate() {
                                *o += wv * irow[first + j * g.stride];
                            }
                        }
                    }
                }
            }
        }
    });
}

/// dinp[B,C,H,W] = d/dinp (overwritten; skipped when `None`), dw[C,1,K,K] += d/dw, and
/// dbias[C] += sums of dout per channel when given.
#[allow(clippy::too_many_arguments)]
pub fn dwconv_backward(
    dinp: Option<&mut [f32]>,
    dw: &mut [f32],
    dbias: Option<&mut [f32]>,
    dout: &[f32],
    inp: &[f32],
    w: &[f32],
    b: usize,
    g: &ConvGeom,
) {
    let (hw, ohw, kk) = (g.h * g.w, g.oh * g.ow, g.k * g.k);
    let dinps = dinp.map(Disjoint::new);
    let dws = Disjoint::new(dw);
    let dbs = dbias.map(Disjoint::new);
    let taps = Taps::new(g);
    let direct = direct::depthwise::applies(g.k, g.stride, g.pad);
    let win = (g.h, g.w, g.k, g.stride);
    intraop::each(g.c, &|ch| {
        let wk = &w[ch * kk..(ch + 1) * kk];
        // SAFETY: channel ch's kernel, bias and planes are this task's alone
        let dwk = unsafe { dws.range(ch * kk, kk) };
        // image i's plane of this channel: of the input, of dout, of the input gradient
        let src = |i: usize| &inp[(i * g.c + ch) * hw..(i * g.c + ch + 1) * hw];
        let dout_of = |i: usize| &dout[(i * g.c + ch) * ohw..(i * g.c + ch + 1) * ohw];
        let din_of = |i: usize| {
            let p = dinps.as_ref()?;
            // SAFETY: as above
            Some(unsafe { p.range((i * g.c + ch) * hw, hw) })
        };
        if let Some(dbs) = &dbs {
            let sum: f64 = (0..b).map(|i| lane_sum(dout_of(i)) as f64).sum();
            // SAFETY: as above
            unsafe { dbs.range(ch, 1)[0] += sum as f32 };
        }
        if direct {
            let srcs: Vec<&[f32]> = (0..b).map(src).collect();
            let douts: Vec<&[f32]> = (0..b).map(dout_of).collect();
            let mut dins: Option<Vec<&mut [f32]>> = (0..b).map(din_of).collect();
            let dins = dins.as_deref_mut();
            direct::depthwise::backward_channel(dins, dwk, &douts, &srcs, wk, win);
            return;
        }
        for i in 0..b {
            let (src, d, mut din) = (src(i), dout_of(i), din_of(i));
            if let Some(din) = din.as_deref_mut() {
                din.fill(0.0);
            }
            for (ky, rows) in taps.rows.iter().enumerate() {
                for oy in rows.clone() {
                    let iy = oy * g.stride + ky - g.pad;
                    let drow = &d[oy * g.ow..(oy + 1) * g.ow];
                    let irow = &src[iy * g.w..(iy + 1) * g.w];
                    for (kx, (r, first)) in taps.cols.iter().enumerate() {
                        let (r, first) = (r.clone(), *first);
                        let wv = wk[ky * g.k + kx];
                        let drow_in = din.as_deref_mut().map(|d| &mut d[iy * g.w..(iy + 1) * g.w]);
                        if g.stride == 1 {
                            let n = r.len();
                            dwk[ky * g.k + kx] += dot(&drow[r.clone()], &irow[first..first + n]);
                            if let Some(drow_in) = drow_in {
                                axpy(&mut drow_in[first..first + n], wv, &drow[r]);
                            }
                            continue;
                        }
                        let mut acc = 0.0f32;
                        for (j, &dv) in drow[r.clone()].iter().enumerate() {
                            acc += dv * irow[first + j * g.stride];
                        }
                        dwk[ky * g.k + kx] += acc;
                        if let Some(drow_in) = drow_in {
                            for (j, &dv) in drow[r].iter().enumerate() {
                                drow_in[first + j * g.stride] += wv * dv;
                            }
                        }
                    }
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::conv::{conv2d_forward, conv2d_scratch_len};
    use crate::nn::gradcheck::{check, dot, randn};
    use crate::nn::rng::Rng;
    use crate::nn::window::out_size;

    fn geom(c: usize, h: usize, w: usize, k: usize, stride: usize, pad: usize) -> ConvGeom {
        let (oh, ow) = out_size(h, w, k, k, stride, pad).unwrap();
        ConvGeom {
            c,
            h,
            w,
            oc: c,
            k,
            stride,
            pad,
            oh,
            ow,
        }
    }

    /// The same as a dense convolution whose weights are zero off each channel's own.
    #[test]
    fn forward_equals_a_dense_convolution_with_a_diagonal_kernel() {
        let cases = [
            (3, 1, 1, 7, 6),
            (3, 2, 1, 7, 6),
            (1, 1, 0, 7, 6),
            (5, 2, 2, 7, 6),
            (3, 3, 0, 7, 6),
            (5, 1, 2, 7, 6),
            (3, 1, 1, 9, 17),
            (3, 1, 1, 1, 1),
            (3, 2, 1, 9, 17),
            (3, 2, 1, 8, 8),
            (5, 2, 2, 1, 1),
        ];
        for (k, s, p, h, wd) in cases {
            let g = geom(3, h, wd, k, s, p);
            let mut r = Rng::new(k as u64 * 10 + s as u64);
            let b = 2;
            let x = randn(&mut r, b * 3 * h * wd);
            let w = randn(&mut r, 3 * k * k);
            let bias = randn(&mut r, 3);
            let n = b * 3 * g.oh * g.ow;
            let mut out = vec![0.0; n];
            dwconv_forward(&mut out, &x, &w, Some(&bias), b, &g);
            let mut dense = vec![0.0; 3 * 3 * k * k];
            for c in 0..3 {
                dense[(c * 3 + c) * k * k..(c * 3 + c + 1) * k * k]
                    .copy_from_slice(&w[c * k * k..(c + 1) * k * k]);
            }
            let mut want = vec![0.0; n];
            let mut col = vec![0.0; conv2d_scratch_len(3, (k, k), (s, p), (g.oh, g.ow))];
            conv2d_forward(
                &mut want, &x, &dense, &bias, b, 3, h, wd, 3, k, k, s, p, &mut col,
            );
            for (a, e) in out.iter().zip(&want) {
                assert!((a - e).abs() < 1e-5, "k{k} s{s} p{p} {h}x{wd}: {a} vs {e}");
            }
        }
    }

    /// Many images at once (stacked into shared planes where the direct path runs, several
    /// stacks per channel at 32x32) give each image what it gets alone.
    #[test]
    fn a_batch_equals_its_images_one_by_one() {
        for (k, s, h) in [(3, 1, 32), (3, 2, 32), (5, 2, 15), (3, 1, 4), (3, 2, 5)] {
            let (b, c) = (40, 2);
            let g = geom(c, h, h, k, s, k / 2);
            let (hw, ohw) = (h * h, g.oh * g.ow);
            let mut r = Rng::new(k as u64 + 3 * s as u64 + h as u64);
            let x = randn(&mut r, b * c * hw);
            let w = randn(&mut r, c * k * k);
            let dout = randn(&mut r, b * c * ohw);
            let mut out = vec![0.0; b * c * ohw];
            dwconv_forward(&mut out, &x, &w, None, b, &g);
            let (mut dx, mut dw) = (vec![0.0; x.len()], vec![0.0; w.len()]);
            dwconv_backward(Some(&mut dx), &mut dw, None, &dout, &x, &w, b, &g);
            let mut dw_sum = vec![0.0; w.len()];
            for i in 0..b {
                let (xi, di) = (&x[i * c * hw..][..c * hw], &dout[i * c * ohw..][..c * ohw]);
                let mut o = vec![0.0; c * ohw];
                dwconv_forward(&mut o, xi, &w, None, 1, &g);
                assert_eq!(o, out[i * c * ohw..][..c * ohw], "k{k} s{s} {h}: image {i}");
                let mut d = vec![0.0; c * hw];
                dwconv_backward(Some(&mut d), &mut dw_sum, None, di, xi, &w, 1, &g);
                assert_eq!(d, dx[i * c * hw..][..c * hw], "k{k} s{s} {h}: image {i}");
            }
            for (a, e) in dw.iter().zip(&dw_sum) {
                assert!(
                    (a - e).abs() < 1e-3 * (1.0 + e.abs()),
                    "k{k} s{s} {h}: {a} vs {e}"
                );
            }
        }
    }

    #[test]
    fn backward_matches_finite_differences() {
        for (k, s, p) in [(3, 1, 1), (3, 2, 1), (2, 2, 0), (5, 1, 2), (5, 2, 2)] {
            let g = geom(2, 5, 6, k, s, p);
            let b = 2;
            let mut r = Rng::new(5);
            let mut x = randn(&mut r, b * 2 * 30);
            let mut w = randn(&mut r, 2 * k * k);
            let mut bias = randn(&mut r, 2);
            let n = b * 2 * g.oh * g.ow;
            let dout = randn(&mut r, n);
            let fwd = |x: &[f32], w: &[f32], bias: &[f32]| {
                let mut out = vec![0.0; n];
                dwconv_forward(&mut out, x, w, Some(bias), b, &g);
                out
            };
            let (mut dx, mut dw, mut db) = (vec![0.0; x.len()], vec![0.0; w.len()], vec![0.0; 2]);
            dwconv_backward(Some(&mut dx), &mut dw, Some(&mut db), &dout, &x, &w, b, &g);
            let (x0, w0, b0) = (x.clone(), w.clone(), bias.clone());
            check("dw dx", &mut x, &dx, &mut |x| dot(&fwd(x, &w0, &b0), &dout));
            check("dw dw", &mut w, &dw, &mut |w| dot(&fwd(&x0, w, &b0), &dout));
            check("dw db", &mut bias, &db, &mut |bb| {
                dot(&fwd(&x0, &w0, bb), &dout)
            });
        }
    }
}
