//! 2-D max pooling over NCHW tensors, without padding; a partial window at the bottom or right
//! edge is dropped (PyTorch's default floor mode). The forward pass records which input won
//! each window, so the backward pass is a scatter.

use crate::nn::simd::lane_sum;
use crate::nn::window::{out_size, Window};

/// (OH, OW), panicking with the reason on a bad geometry (the spec is validated first), after
/// checking the buffers' lengths.
#[allow(clippy::too_many_arguments)]
fn geometry(
    b: usize,
    c: usize,
    h: usize,
    w: usize,
    k: usize,
    stride: usize,
    img: (&str, usize),
    outs: [(&str, usize); 2],
) -> (usize, usize) {
    let (oh, ow) = out_size(h, w, k, k, stride, 0).unwrap_or_else(|e| panic!("maxpool2d: {e}"));
    assert!(
        u32::try_from(h * w).is_ok(),
        "maxpool2d: a {h}x{w} plane is too large for u32 argmax"
    );
    let (name, have) = img;
    assert!(
        have >= b * c * h * w,
        "maxpool2d: {name} has {have}, need {}",
        b * c * h * w
    );
    for (name, have) in outs {
        assert!(
            have >= b * c * oh * ow,
            "maxpool2d: {name} has {have}, need {}",
            b * c * oh * ow
        );
    }
    (oh, ow)
}

/// out[B,C,OH,OW] = max of inp[B,C,H,W] over each KxK window moved by `stride`;
/// argmax[B,C,OH,OW] = the winner's index iy*W + ix inside its HxW plane (the first maximum in
/// row-major order on ties; a NaN wins, so it propagates as in PyTorch).
#[allow(clippy::too_many_arguments)]
pub fn maxpool2d_forward(
    out: &mut [f32],
    argmax: &mut [u32],
    inp: &[f32],
    b: usize,
    c: usize,
    h: usize,
    w: usize,
    k: usize,
    stride: usize,
) {
    let outs = [("out", out.len()), ("argmax", argmax.len())];
    let (oh, ow) = geometry(b, c, h, w, k, stride, ("inp", inp.len()), outs);
    let (hw, ohw) = (h * w, oh * ow);
    for plane in 0..b * c {
        let src = &inp[plane * hw..(plane + 1) * hw];
        let o = &mut out[plane * ohw..(plane + 1) * ohw];
        let a = &mut argmax[plane * ohw..(plane + 1) * ohw];
        // a NaN must win its window; looking for one costs a vectorized pass, while handling
        // it inside the comparisons made the common case 4x slower
        // (the sum is NaN where a value is, or where +inf meets -inf: then the careful path
        // runs needlessly, and still gets it right)
        let has_nan = lane_sum(src).is_nan();
        if k == 2 && stride == 2 && !has_nan {
            pool_2x2(o, a, src, w, oh, ow);
            continue;
        }
        for oy in 0..oh {
            for ox in 0..ow {
                let first = oy * stride * w + ox * stride;
                let (mut best, mut at) = (src[first], first);
                for ky in 0..k {
                    let row = first + ky * w;
                    // selects over a row slice, not branches: which one wins is a coin toss
                    // on real data, and a branchy loop ran 6-10x slower
                    for (kx, &v) in src[row..row + k].iter().enumerate() {
                        let take = if has_nan {
                            (v > best || v.is_nan()) && !best.is_nan()
                        } else {
                            v > best
                        };
                        best = if take { v } else { best };
                        at = if take { row + kx } else { at };
                    }
                }
                o[oy * ow + ox] = best;
                a[oy * ow + ox] = at as u32;
            }
        }
    }
}

/// The common 2x2 window with stride 2 on one NaN-free plane: the maximum of four, then the
/// first position holding it, all as selects the compiler vectorizes (3x the general loop; its AVX2 copy,
/// with gathers, was 2x slower, so this one is compiled once).
fn pool_2x2(o: &mut [f32], a: &mut [u32], src: &[f32], w: usize, oh: usize, ow: usize) {
    for oy in 0..oh {
        let top = 2 * oy * w;
        let (r0, r1) = (&src[top..top + 2 * ow], &src[top + w..top + w + 2 * ow]);
        let (o, a) = (
            &mut o[oy * ow..(oy + 1) * ow],
            &mut a[oy * ow..(oy + 1) * ow],
        );
        for ox in 0..ow {
            let (p, q, r, s) = (r0[2 * ox], r0[2 * ox + 1], r1[2 * ox], r1[2 * ox + 1]);
            let m = p.max(q).max(r.max(s));
            let at = top + 2 * ox;
            let at = if p == m {
                at
            } else if q == m {
                at + 1
            } else if r == m {
                at + w
            } else {
                at + w + 1
            };
            o[ox] = m;
            a[ox] = at as u32;
        }
    }
}

/// dinp[B,C,H,W] = 0, then dinp[plane, argmax] += dout[B,C,OH,OW] (overlapping windows, stride
/// < K, may route several gradients to one input).
#[allow(clippy::too_many_arguments)]
pub fn maxpool2d_backward(
    dinp: &mut [f32],
    dout: &[f32],
    argmax: &[u32],
    b: usize,
    c: usize,
    h: usize,
    w: usize,
    k: usize,
    stride: usize,
) {
    let outs = [("dout", dout.len()), ("argmax", argmax.len())];
    let (oh, ow) = geometry(b, c, h, w, k, stride, ("dinp", dinp.len()), outs);
    let (hw, ohw) = (h * w, oh * ow);
    for plane in 0..b * c {
        let d = &mut dinp[plane * hw..(plane + 1) * hw];
        d.fill(0.0);
        let g = &dout[plane * ohw..(plane + 1) * ohw];
        let a = &argmax[plane * ohw..(plane + 1) * ohw];
        for (&at, &gv) in a.iter().zip(g) {
            d[at as usize] += gv;
        }
    }
}

/// Max pooling with zero-free padding (padded positions never win): out[B,C,OH,OW] and
/// argmax (the winner's index in its HxW plane), for windows `nn::pool`'s unpadded fast path
/// does not take (ResNet's 3x3/2 stem pool with padding 1).
pub fn maxpool2d_padded_forward(
    out: &mut [f32],
    argmax: &mut [u32],
    inp: &[f32],
    b: usize,
    g: &Window,
) {
    let (hw, ohw) = (g.h * g.w, g.oh * g.ow);
    for plane in 0..b * g.c {
        let src = &inp[plane * hw..(plane + 1) * hw];
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                let (mut best, mut at) = (f32::NEG_INFINITY, usize::MAX);
                for (iy, ix) in taps(g, oy, ox) {
                    let v = src[iy * g.w + ix];
                    if at == usize::MAX || v > best || (v.is_nan() && !best.is_nan()) {
                        (best, at) = (v, iy * g.w + ix);
                    }
                }
                out[plane * ohw + oy * g.ow + ox] = best;
                argmax[plane * ohw + oy * g.ow + ox] = at as u32;
            }
        }
    }
}

/// The input positions (iy, ix) inside the image of output (oy, ox)'s window.
fn taps(g: &Window, oy: usize, ox: usize) -> impl Iterator<Item = (usize, usize)> {
    let span = |o: usize, n: usize| {
        let start = (o * g.stride) as isize - g.pad as isize;
        let lo = start.max(0) as usize;
        let hi = ((start + g.k as isize).max(0) as usize).min(n);
        lo..hi.max(lo)
    };
    let (ys, xs) = (span(oy, g.h), span(ox, g.w));
    ys.flat_map(move |y| xs.clone().map(move |x| (y, x)))
}

/// dinp[B,C,H,W] = 0, then each dout routed to its window's winner.
pub fn maxpool2d_padded_backward(
    dinp: &mut [f32],
    dout: &[f32],
    argmax: &[u32],
    b: usize,
    g: &Window,
) {
    let (hw, ohw) = (g.h * g.w, g.oh * g.ow);
    for plane in 0..b * g.c {
        let d = &mut dinp[plane * hw..(plane + 1) * hw];
        d.fill(0.0);
        for (&at, &gv) in argmax[plane * ohw..(plane + 1) * ohw]
            .iter()
            .zip(&dout[plane * ohw..])
        {
            d[at as usize] += gv;
        }
    }
}

/// out[B,C,OH,OW] = the sum of each KxK window / (K*K), padding counted as zeros (PyTorch's
/// `count_include_pad`).
pub fn avgpool2d_forward(out: &mut [f32], inp: &[f32], b: usize, g: &Window) {
    let (hw, ohw, inv) = (g.h * g.w, g.oh * g.ow, 1.0 / (g.k * g.k) as f32);
    for plane in 0..b * g.c {
        let src = &inp[plane * hw..(plane + 1) * hw];
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                let s: f32 = taps(g, oy, ox).map(|(y, x)| src[y * g.w + x]).sum();
                out[plane * ohw + oy * g.ow + ox] = s * inv;
            }
        }
    }
}

/// dinp[B,C,H,W] = each dout / (K*K) spread over its window (overwritten).
pub fn avgpool2d_backward(dinp: &mut [f32], dout: &[f32], b: usize, g: &Window) {
    let (hw, ohw, inv) = (g.h * g.w, g.oh * g.ow, 1.0 / (g.k * g.k) as f32);
    for plane in 0..b * g.c {
        let d = &mut dinp[plane * hw..(plane + 1) * hw];
        d.fill(0.0);
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                let gv = dout[plane * ohw + oy * g.ow + ox] * inv;
                for (y, x) in taps(g, oy, ox) {
                    d[y * g.w + x] += gv;
                }
            }
        }
    }
}

/// out[B,C] = the mean of each of inp[B,C,HW]'s planes.
pub fn gap_forward(out: &mut [f32], inp: &[f32], planes: usize, hw: usize) {
    let inv = 1.0 / hw as f32;
    for (o, p) in out[..planes].iter_mut().zip(inp.chunks_exact(hw)) {
        *o = lane_sum(p) * inv;
    }
}

/// dinp[B,C,HW] = dout[B,C] / HW over each plane (overwritten).
pub fn gap_backward(dinp: &mut [f32], dout: &[f32], planes: usize, hw: usize) {
    let inv = 1.0 / hw as f32;
    for (p, &d) in dinp[..planes * hw].chunks_exact_mut(hw).zip(dout) {
        p.fill(d * inv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::gradcheck::{check, dot};
    use crate::nn::rng::Rng;

    /// (b, c, h, w, k, stride): divisible and not, overlapping (stride < k) and gapped (> k).
    const CASES: [(usize, usize, usize, usize, usize, usize); 6] = [
        (2, 3, 4, 6, 2, 2),
        (2, 2, 7, 5, 2, 2),
        (1, 3, 7, 7, 3, 2),
        (2, 1, 8, 9, 2, 3),
        (3, 2, 5, 5, 3, 3),
        (1, 1, 3, 4, 1, 1),
    ];

    /// Distinct values 0.1 apart in random order: no ties, and a +-0.01 nudge never changes a
    /// window's winner.
    fn distinct(r: &mut Rng, n: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..n).map(|i| i as f32 * 0.1 - n as f32 * 0.05).collect();
        r.shuffle(&mut v);
        v
    }

    fn forward(inp: &[f32], case: (usize, usize, usize, usize, usize, usize)) -> Vec<f32> {
        let (b, c, h, w, k, s) = case;
        let (oh, ow) = out_size(h, w, k, k, s, 0).unwrap();
        let mut out = vec![f32::NAN; b * c * oh * ow];
        let mut arg = vec![u32::MAX; out.len()];
        maxpool2d_forward(&mut out, &mut arg, inp, b, c, h, w, k, s);
        out
    }

    #[test]
    fn forward_matches_the_naive_max_and_records_the_winner() {
        let mut r = Rng::new(41);
        for case @ (b, c, h, w, k, s) in CASES {
            let (oh, ow) = out_size(h, w, k, k, s, 0).unwrap();
            let inp = distinct(&mut r, b * c * h * w);
            let mut out = vec![f32::NAN; b * c * oh * ow];
            let mut arg = vec![u32::MAX; out.len()];
            maxpool2d_forward(&mut out, &mut arg, &inp, b, c, h, w, k, s);
            for plane in 0..b * c {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut want = f32::NEG_INFINITY;
                        for i in 0..k {
                            for j in 0..k {
                                let v = inp[plane * h * w + (oy * s + i) * w + ox * s + j];
                                want = want.max(v);
                            }
                        }
                        let at = plane * oh * ow + oy * ow + ox;
                        assert_eq!(out[at], want, "{case:?} out[{at}]");
                        assert_eq!(inp[plane * h * w + arg[at] as usize], want, "{case:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn backward_matches_finite_differences() {
        let mut r = Rng::new(42);
        for case @ (b, c, h, w, k, s) in CASES {
            let (oh, ow) = out_size(h, w, k, k, s, 0).unwrap();
            let mut inp = distinct(&mut r, b * c * h * w);
            let g: Vec<f32> = (0..b * c * oh * ow).map(|_| r.normal()).collect();
            let mut out = vec![0.0; g.len()];
            let mut arg = vec![0; g.len()];
            maxpool2d_forward(&mut out, &mut arg, &inp, b, c, h, w, k, s);
            let mut dinp = vec![f32::NAN; inp.len()]; // overwritten
            maxpool2d_backward(&mut dinp, &g, &arg, b, c, h, w, k, s);
            check(&format!("{case:?} dinp"), &mut inp, &dinp, &mut |x| {
                dot(&forward(x, case), &g)
            });
        }
    }

    #[test]
    fn floor_mode_drops_the_partial_edge_and_nan_propagates() {
        // 3x5 plane, 2x2 windows: one row and one column of windows, the last column unused
        let inp = [
            1.0, 2.0, 3.0, 4.0, 99.0, //
            5.0, 0.0, 7.0, 8.0, 99.0, //
            99.0, 99.0, 99.0, 99.0, 99.0,
        ];
        let (mut out, mut arg) = ([0.0; 2], [0; 2]);
        maxpool2d_forward(&mut out, &mut arg, &inp, 1, 1, 3, 5, 2, 2);
        assert_eq!((out, arg), ([5.0, 8.0], [5, 8]));
        let nan = [1.0, f32::NAN, 3.0, 2.0];
        let (mut out, mut arg) = ([0.0; 1], [0; 1]);
        maxpool2d_forward(&mut out, &mut arg, &nan, 1, 1, 2, 2, 2, 2);
        assert!(out[0].is_nan());
        assert_eq!(arg, [1]);
    }

    #[test]
    #[should_panic(expected = "1x1 input is smaller than the 2x2 window")]
    fn refuses_a_plane_smaller_than_the_window() {
        let (mut out, mut arg) = ([0.0; 1], [0; 1]);
        maxpool2d_forward(&mut out, &mut arg, &[1.0], 1, 1, 1, 1, 2, 2);
    }

    #[test]
    fn padded_max_and_average_pooling_match_finite_differences() {
        use crate::nn::gradcheck::randn;
        let g = Window {
            c: 2,
            h: 5,
            w: 4,
            k: 3,
            stride: 2,
            pad: 1,
            oh: 3,
            ow: 2,
        };
        let b = 2;
        let mut r = Rng::new(11);
        // values 0.1 apart: no winner changes under the finite differences' nudge
        let mut x: Vec<f32> = (0..b * 2 * 20)
            .map(|i| ((i * 37) % 80) as f32 * 0.1 - 4.0)
            .collect();
        let dout = randn(&mut r, b * 2 * 6);
        let n = b * 2 * 6;
        // max: every window's winner inside the image
        let (mut out, mut arg) = (vec![0.0; n], vec![0u32; n]);
        maxpool2d_padded_forward(&mut out, &mut arg, &x, b, &g);
        assert_eq!(out[0], x[0].max(x[1]).max(x[4]).max(x[5]));
        let mut dx = vec![0.0; x.len()];
        maxpool2d_padded_backward(&mut dx, &dout, &arg, b, &g);
        let fwd = |x: &[f32]| {
            let (mut o, mut a) = (vec![0.0; n], vec![0u32; n]);
            maxpool2d_padded_forward(&mut o, &mut a, x, b, &g);
            o
        };
        check("padded max dx", &mut x, &dx, &mut |x| dot(&fwd(x), &dout));
        // average: zeros counted at the border
        avgpool2d_forward(&mut out, &x, b, &g);
        assert!((out[0] - (x[0] + x[1] + x[4] + x[5]) / 9.0).abs() < 1e-6);
        avgpool2d_backward(&mut dx, &dout, b, &g);
        let fwd = |x: &[f32]| {
            let mut o = vec![0.0; n];
            avgpool2d_forward(&mut o, x, b, &g);
            o
        };
        check("avg dx", &mut x, &dx, &mut |x| dot(&fwd(x), &dout));
        // global: the mean of each plane
        let mut m = vec![0.0; 4];
        gap_forward(&mut m, &x, 4, 20);
        assert!((m[1] - x[20..40].iter().sum::<f32>() / 20.0).abs() < 1e-5);
        let mut dg = vec![0.0; x.len()];
        gap_backward(&mut dg, &dout[..4], 4, 20);
        let fwd = |x: &[f32]| {
            let mut o = vec![0.0; 4];
            gap_forward(&mut o, x, 4, 20);
            o
        };
        check("gap dx", &mut x, &dg, &mut |x| dot(&fwd(x), &dout[..4]));
    }
}
