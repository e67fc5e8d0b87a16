//! 2-D convolution over NCHW tensors, weights [OC, C, KH, KW] (PyTorch's layout).
//!
//! Odd square windows padded by k/2 with stride 1 or 2 (a ResNet's 3x3 layers and shortcuts,
//! pointwise layers over at least `DIRECT_POINTWISE_PIXELS` pixels) go to `nn::direct` where
//! the CPU has AVX-512: 2-4x the products below on ResNet-20's layers (`benches/direct_conv`). The rest by im2col and one
//! `sgemm` per image: out_n[OC, OH*OW] = w[OC, C*KH*KW] @ col_n[C*KH*KW, OH*OW] lands in NCHW
//! order directly. One product for the whole batch (columns of all images side by side) was
//! measured no faster at batch 32 and 1.1-2x slower at batch 128 on one thread (its wide
//! matrices leave the cache, and its output and dout must be copied between [OC, B*OH*OW] and
//! NCHW); see the `conv_compare` benchmark. Both ways run per group of images
//! (`nn::grouped` spreads the groups over a worker's threads).

use std::cell::RefCell;

use crate::nn::direct;
use crate::nn::gemm::sgemm;
use crate::nn::im2col::{col2im, im2col};
use crate::nn::simd::lane_sum;
use crate::nn::window::out_size;

/// Pointwise layers over fewer pixels than this take the products below: with every pointwise
/// layer direct, MobileNetV2 at 32x32 ran 30% slower (on 4x4 and 8x8 images a tile of 4
/// channels x 1-4 vectors of pixels loads more than it multiplies); from 16x16 up the direct
/// kernels are ahead (`benches/direct_conv`).
const DIRECT_POINTWISE_PIXELS: usize = 256;

/// A pointwise (1x1) convolution over images of at most this many pixels multiplies all its
/// images at once: per image, its product would be mostly the packing of the weights
/// (MobileNetV2's late 1x1 layers: 960 x 160 weights against 4 or 16 pixels).
const BATCH_POINTWISE_PIXELS: usize = 64;

thread_local! {
    /// The images side by side as [C, B*HW] and their output [OC, B*HW], for batched
    /// pointwise products (this thread's; grown as needed).
    static SIDE_BY_SIDE: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// dst[C, B*HW] = the images src[B, C, HW] side by side (`back`: the other way).
fn side_by_side(dst: &mut [f32], src: &[f32], b: usize, c: usize, hw: usize, back: bool) {
    for n in 0..b {
        for ch in 0..c {
            let (wide, img) = ((ch * b + n) * hw, (n * c + ch) * hw);
            match back {
                false => dst[wide..wide + hw].copy_from_slice(&src[img..img + hw]),
                true => dst[img..img + hw].copy_from_slice(&src[wide..wide + hw]),
            }
        }
    }
}

fn grow(v: &mut Vec<f32>, n: usize) {
    if v.len() < n {
        v.resize(n, 0.0);
    }
}

/// Floats of `col_scratch` the convolution needs: one image's columns, C*KH*KW x OH*OW, or none
/// where the direct path takes it.
pub fn conv2d_scratch_len(
    c: usize,
    (kh, kw): (usize, usize),
    (stride, pad): (usize, usize),
    (oh, ow): (usize, usize),
) -> usize {
    match Path::choose(kh, kw, stride, pad, oh * ow) {
        Path::Direct => 0,
        Path::Columns => columns_len(c, kh, kw, oh, ow),
    }
}

/// One image's column matrix, C*KH*KW x OH*OW.
fn columns_len(c: usize, kh: usize, kw: usize, oh: usize, ow: usize) -> usize {
    c * kh * kw * oh * ow
}

/// The output size, panicking with the reason on a bad geometry (callers validate the model
/// spec first, so this is a programming error), and the length checks every op does.
#[allow(clippy::too_many_arguments)]
fn geometry(
    b: usize,
    c: usize,
    h: usize,
    w_in: usize,
    oc: usize,
    kh: usize,
    kw: usize,
    stride: usize,
    pad: usize,
    lens: [(&str, usize); 3],
) -> (usize, usize) {
    let (oh, ow) = out_size(h, w_in, kh, kw, stride, pad).unwrap_or_else(|e| panic!("conv2d: {e}"));
    let need = [
        ("inp", b * c * h * w_in),
        ("w", oc * c * kh * kw),
        ("out", b * oc * oh * ow),
    ];
    for ((name, need), (_, have)) in need.iter().zip(lens) {
        assert!(
            have >= *need,
            "conv2d: {name} has {have} elements, need {need}"
        );
    }
    (oh, ow)
}

/// A 1x1 kernel with stride 1 and no padding reads the image as its own column matrix.
fn is_pointwise(kh: usize, kw: usize, stride: usize, pad: usize) -> bool {
    kh == 1 && kw == 1 && stride == 1 && pad == 0
}

/// How a convolution is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// `nn::direct`: odd square windows padded by k/2 with stride 1 or 2, on CPUs with AVX-512
    /// (not the smaller pointwise layers).
    Direct,
    /// im2col + GEMM per image (or one GEMM per group for small pointwise layers).
    Columns,
}

impl Path {
    fn choose(kh: usize, kw: usize, stride: usize, pad: usize, ohw: usize) -> Path {
        let small_pointwise = kh == 1 && kw == 1 && ohw < DIRECT_POINTWISE_PIXELS;
        match direct::dense::applies(kh, kw, stride, pad) && !small_pointwise {
            true => Path::Direct,
            false => Path::Columns,
        }
    }
}

/// out[B,OC,OH,OW] = inp[B,C,H,W] (*) w[OC,C,KH,KW] + bias[OC], zero padding `pad` on each side;
/// col_scratch[>= conv2d_scratch_len(..)] is overwritten.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_forward(
    out: &mut [f32],
    inp: &[f32],
    w: &[f32],
    bias: &[f32],
    b: usize,
    c: usize,
    h: usize,
    w_in: usize,
    oc: usize,
    kh: usize,
    kw: usize,
    stride: usize,
    pad: usize,
    col_scratch: &mut [f32],
) {
    let ohw = out_size(h, w_in, kh, kw, stride, pad).map_or(0, |(oh, ow)| oh * ow);
    let path = Path::choose(kh, kw, stride, pad, ohw);
    forward_on(
        path,
        out,
        inp,
        w,
        bias,
        b,
        c,
        h,
        w_in,
        oc,
        kh,
        kw,
        stride,
        pad,
        col_scratch,
    );
}

#[allow(clippy::too_many_arguments)]
fn forward_on(
    path: Path,
    out: &mut [f32],
    inp: &[f32],
    w: &[f32],
    bias: &[f32],
    b: usize,
    c: usize,
    h: usize,
    w_in: usize,
    oc: usize,
    kh: usize,
    kw: usize,
    stride: usize,
    pad: usize,
    col_scratch: &mut [f32],
) {
    let lens = [("inp", inp.len()), ("w", w.len()), ("out", out.len())];
    let (oh, ow) = geometry(b, c, h, w_in, oc, kh, kw, stride, pad, lens);
    assert!(
        bias.len() >= oc,
        "conv2d: bias has {}, need {oc}",
        bias.len()
    );
    if path == Path::Direct {
        return direct::dense::forward(out, inp, w, bias, b, c, oc, (h, w_in, kh, stride));
    }
    let (ckk, ohw, chw) = (c * kh * kw, oh * ow, c * h * w_in);
    let pointwise = is_pointwise(kh, kw, stride, pad);
    if pointwise && b > 1 && ohw <= BATCH_POINTWISE_PIXELS {
        return SIDE_BY_SIDE.with(|s| {
            let (x, y) = &mut *s.borrow_mut();
            grow(x, c * b * ohw);
            grow(y, oc * b * ohw);
            let (x, y) = (&mut x[..c * b * ohw], &mut y[..oc * b * ohw]);
            side_by_side(x, inp, b, c, ohw, false);
            for (row, &bv) in y.chunks_exact_mut(b * ohw).zip(bias) {
                row.fill(bv);
            }
            sgemm(false, false, oc, b * ohw, c, 1.0, &w[..oc * c], x, 1.0, y);
            side_by_side(out, y, b, oc, ohw, true);
        });
    }
    for n in 0..b {
        let img = &inp[n * chw..(n + 1) * chw];
        let o = &mut out[n * oc * ohw..(n + 1) * oc * ohw];
        for (row, &bv) in o.chunks_exact_mut(ohw).zip(bias) {
            row.fill(bv);
        }
        let col: &[f32] = if pointwise {
            img
        } else {
            let col = &mut col_scratch[..ckk * ohw];
            im2col(col, ohw, img, c, h, w_in, kh, kw, stride, pad, oh, ow);
            col
        };
        sgemm(false, false, oc, ohw, ckk, 1.0, &w[..oc * ckk], col, 1.0, o);
    }
}

/// dinp[B,C,H,W] = d/dinp (overwritten; skipped when `None`), dw[OC,C,KH,KW] += d/dw,
/// dbias[OC] += sums of dout[B,OC,OH,OW] over B, OH, OW; col_scratch as in the forward pass.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_backward(
    dinp: Option<&mut [f32]>,
    dw: &mut [f32],
    dbias: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    w: &[f32],
    b: usize,
    c: usize,
    h: usize,
    w_in: usize,
    oc: usize,
    kh: usize,
    kw: usize,
    stride: usize,
    pad: usize,
    col_scratch: &mut [f32],
) {
    let ohw = out_size(h, w_in, kh, kw, stride, pad).map_or(0, |(oh, ow)| oh * ow);
    let path = Path::choose(kh, kw, stride, pad, ohw);
    backward_on(
        path,
        dinp,
        dw,
        dbias,
        dout,
        inp,
        w,
        b,
        c,
        h,
        w_in,
        oc,
        kh,
        kw,
        stride,
        pad,
        col_scratch,
    );
}

#[allow(clippy::too_many_arguments)]
fn backward_on(
    path: Path,
    mut dinp: Option<&mut [f32]>,
    dw: &mut [f32],
    dbias: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    w: &[f32],
    b: usize,
    c: usize,
    h: usize,
    w_in: usize,
    oc: usize,
    kh: usize,
    kw: usize,
    stride: usize,
    pad: usize,
    col_scratch: &mut [f32],
) {
    let lens = [("inp", inp.len()), ("w", w.len()), ("dout", dout.len())];
    let (oh, ow) = geometry(b, c, h, w_in, oc, kh, kw, stride, pad, lens);
    let (ckk, ohw, chw) = (c * kh * kw, oh * ow, c * h * w_in);
    assert!(
        dw.len() >= oc * ckk,
        "conv2d: dw has {}, need {}",
        dw.len(),
        oc * ckk
    );
    assert!(
        dbias.len() >= oc,
        "conv2d: dbias has {}, need {oc}",
        dbias.len()
    );
    if let Some(d) = dinp.as_deref() {
        assert!(
            d.len() >= b * chw,
            "conv2d: dinp has {}, need {}",
            d.len(),
            b * chw
        );
    }
    if path == Path::Direct {
        let win = (h, w_in, kh, stride);
        return direct::dense::backward(dinp, dw, dbias, dout, inp, w, b, c, oc, win);
    }
    let pointwise = is_pointwise(kh, kw, stride, pad);
    if pointwise && b > 1 && ohw <= BATCH_POINTWISE_PIXELS {
        return SIDE_BY_SIDE.with(|s| {
            let (x, y) = &mut *s.borrow_mut();
            grow(x, c * b * ohw);
            grow(y, oc * b * ohw);
            let (x, d) = (&mut x[..c * b * ohw], &mut y[..oc * b * ohw]);
            side_by_side(x, inp, b, c, ohw, false);
            side_by_side(d, dout, b, oc, ohw, false);
            for (g, row) in dbias[..oc].iter_mut().zip(d.chunks_exact(b * ohw)) {
                *g += lane_sum(row);
            }
            // dw[OC, C] += dout[OC, B*HW] @ x^T
            sgemm(
                false,
                true,
                oc,
                c,
                b * ohw,
                1.0,
                d,
                x,
                1.0,
                &mut dw[..oc * c],
            );
            if let Some(dinp) = dinp {
                // dx[C, B*HW] = w^T @ dout, into x's place, then back to NCHW
                sgemm(true, false, c, b * ohw, oc, 1.0, &w[..oc * c], d, 0.0, x);
                side_by_side(dinp, x, b, c, ohw, true);
            }
        });
    }
    for n in 0..b {
        let img = &inp[n * chw..(n + 1) * chw];
        let dout_n = &dout[n * oc * ohw..(n + 1) * oc * ohw];
        for (g, row) in dbias[..oc].iter_mut().zip(dout_n.chunks_exact(ohw)) {
            *g += lane_sum(row);
        }
        // dw[OC, CKK] += dout_n[OC, OHW] @ col_n^T
        let col: &[f32] = if pointwise {
            img
        } else {
            let col = &mut col_scratch[..ckk * ohw];
            im2col(col, ohw, img, c, h, w_in, kh, kw, stride, pad, oh, ow);
            col
        };
        sgemm(
            false,
            true,
            oc,
            ckk,
            ohw,
            1.0,
            dout_n,
            col,
            1.0,
            &mut dw[..oc * ckk],
        );
        // dinp_n = col2im(w^T[CKK, OC] @ dout_n), straight into dinp_n when pointwise
        if let Some(d) = dinp.as_deref_mut() {
            let d = &mut d[n * chw..(n + 1) * chw];
            if pointwise {
                sgemm(true, false, ckk, ohw, oc, 1.0, w, dout_n, 0.0, d);
            } else {
                let dcol = &mut col_scratch[..ckk * ohw];
                sgemm(true, false, ckk, ohw, oc, 1.0, w, dout_n, 0.0, dcol);
                d.fill(0.0);
                col2im(d, dcol, ohw, c, h, w_in, kh, kw, stride, pad, oh, ow);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::gradcheck::{check, dot, randn};
    use crate::nn::rng::Rng;

    /// (b, c, h, w, oc, kh, kw, stride, pad)
    type Case = (
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
    );
    /// Among them, the windows of `nn::direct` (odd square kernels padded by k/2, stride 1 or
    /// 2): odd channel counts, widths and position counts that are not whole vectors, a 1x1
    /// image, more than one tile of positions, 5x5, pointwise layers over 272 pixels.
    const CASES: [Case; 16] = [
        (2, 3, 5, 7, 4, 3, 3, 1, 0),
        (2, 2, 7, 5, 3, 3, 3, 1, 1),
        (3, 5, 9, 17, 6, 3, 3, 1, 1),
        (2, 2, 1, 1, 3, 3, 3, 1, 1),
        (1, 2, 3, 100, 5, 3, 3, 1, 1),
        (2, 3, 6, 4, 9, 5, 5, 1, 2),
        (2, 5, 16, 17, 6, 1, 1, 1, 0),
        (2, 5, 8, 8, 6, 3, 3, 2, 1),
        (1, 3, 9, 17, 5, 5, 5, 2, 2),
        (2, 2, 1, 1, 3, 3, 3, 2, 1),
        (1, 3, 34, 32, 5, 1, 1, 2, 0),
        (3, 2, 7, 6, 2, 3, 3, 2, 0),
        (2, 3, 7, 7, 3, 3, 3, 2, 1),
        (2, 2, 6, 5, 3, 2, 3, 2, 1),
        (2, 3, 4, 5, 4, 1, 1, 1, 0),
        (1, 1, 3, 3, 2, 5, 5, 1, 2),
    ];

    /// The naive 7-loop convolution, accumulated in f64: the oracle.
    fn naive(inp: &[f32], w: &[f32], bias: &[f32], k: Case) -> Vec<f32> {
        let (b, c, h, wi, oc, kh, kw, s, p) = k;
        let (oh, ow) = out_size(h, wi, kh, kw, s, p).unwrap();
        let mut out = vec![0.0; b * oc * oh * ow];
        for n in 0..b {
            for o in 0..oc {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut acc = bias[o] as f64;
                        for ci in 0..c {
                            for i in 0..kh {
                                for j in 0..kw {
                                    let iy = (oy * s + i) as isize - p as isize;
                                    let ix = (ox * s + j) as isize - p as isize;
                                    if iy < 0 || ix < 0 || iy >= h as isize || ix >= wi as isize {
                                        continue;
                                    }
                                    let x =
                                        inp[((n * c + ci) * h + iy as usize) * wi + ix as usize];
                                    let wv = w[((o * c + ci) * kh + i) * kw + j];
                                    acc += x as f64 * wv as f64;
                                }
                            }
                        }
                        out[((n * oc + o) * oh + oy) * ow + ox] = acc as f32;
                    }
                }
            }
        }
        out
    }

    fn forward(inp: &[f32], w: &[f32], bias: &[f32], k: Case) -> Vec<f32> {
        let (b, c, h, wi, oc, kh, kw, s, p) = k;
        let (oh, ow) = out_size(h, wi, kh, kw, s, p).unwrap();
        let mut out = vec![f32::NAN; b * oc * oh * ow];
        let mut col = vec![f32::NAN; conv2d_scratch_len(c, (kh, kw), (s, p), (oh, ow))];
        conv2d_forward(
            &mut out, inp, w, bias, b, c, h, wi, oc, kh, kw, s, p, &mut col,
        );
        out
    }

    fn inputs(r: &mut Rng, k: Case) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let (b, c, h, wi, oc, kh, kw, _, _) = k;
        (
            randn(r, b * c * h * wi),
            randn(r, oc * c * kh * kw),
            randn(r, oc),
        )
    }

    #[test]
    fn forward_matches_the_naive_convolution() {
        let mut r = Rng::new(31);
        for k in CASES.iter().copied().chain([(4, 1, 28, 28, 8, 3, 3, 1, 0)]) {
            let (inp, w, bias) = inputs(&mut r, k);
            let got = forward(&inp, &w, &bias, k);
            let want = naive(&inp, &w, &bias, k);
            for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - e).abs() <= 1e-4 + 1e-4 * e.abs(),
                    "{k:?} out[{i}]: {g} vs {e}"
                );
            }
        }
    }

    #[test]
    fn backward_matches_finite_differences() {
        let mut r = Rng::new(32);
        for k in CASES {
            let (b, c, h, wi, oc, kh, kw, s, p) = k;
            let (oh, ow) = out_size(h, wi, kh, kw, s, p).unwrap();
            let (mut inp, mut w, mut bias) = inputs(&mut r, k);
            let g = randn(&mut r, b * oc * oh * ow); // loss = sum(out * g)
            let mut dinp = vec![f32::NAN; inp.len()]; // overwritten
            let mut dw = vec![0.0; w.len()];
            let mut db = vec![0.0; oc];
            let mut col = vec![f32::NAN; conv2d_scratch_len(c, (kh, kw), (s, p), (oh, ow))];
            conv2d_backward(
                Some(&mut dinp),
                &mut dw,
                &mut db,
                &g,
                &inp,
                &w,
                b,
                c,
                h,
                wi,
                oc,
                kh,
                kw,
                s,
                p,
                &mut col,
            );
            let (w0, b0) = (w.clone(), bias.clone());
            check(&format!("{k:?} dinp"), &mut inp, &dinp, &mut |x| {
                dot(&forward(x, &w0, &b0, k), &g)
            });
            let i0 = inp.clone();
            check(&format!("{k:?} dw"), &mut w, &dw, &mut |x| {
                dot(&forward(&i0, x, &b0, k), &g)
            });
            check(&format!("{k:?} dbias"), &mut bias, &db, &mut |x| {
                dot(&forward(&i0, &w0, x, k), &g)
            });
        }
    }

    /// Every output and gradient of both ways of computing a convolution, for the cases the
    /// direct path takes.
    #[test]
    fn direct_and_column_paths_agree() {
        if !direct::available() {
            eprintln!("skipped: this CPU has no AVX-512, so there is no direct path");
            return;
        }
        let mut r = Rng::new(34);
        let same = CASES
            .iter()
            .copied()
            .filter(|&(_, _, h, wi, _, kh, kw, s, p)| {
                let (oh, ow) = out_size(h, wi, kh, kw, s, p).unwrap();
                Path::choose(kh, kw, s, p, oh * ow) == Path::Direct
            });
        let mut checked = 0;
        for k in same.chain([(4, 16, 32, 32, 16, 3, 3, 1, 1)]) {
            let (b, c, h, wi, oc, kh, kw, s, p) = k;
            let (oh, ow) = out_size(h, wi, kh, kw, s, p).unwrap();
            let (inp, w, bias) = inputs(&mut r, k);
            let g = randn(&mut r, b * oc * oh * ow);
            assert_eq!(conv2d_scratch_len(c, (kh, kw), (s, p), (oh, ow)), 0);
            let mut col = vec![f32::NAN; columns_len(c, kh, kw, oh, ow)];
            let run = |path: Path, col: &mut [f32]| {
                let mut out = vec![f32::NAN; b * oc * oh * ow];
                forward_on(
                    path, &mut out, &inp, &w, &bias, b, c, h, wi, oc, kh, kw, s, p, col,
                );
                let mut dinp = vec![f32::NAN; inp.len()];
                let (mut dw, mut db) = (vec![0.5; w.len()], vec![0.5; oc]);
                backward_on(
                    path,
                    Some(&mut dinp),
                    &mut dw,
                    &mut db,
                    &g,
                    &inp,
                    &w,
                    b,
                    c,
                    h,
                    wi,
                    oc,
                    kh,
                    kw,
                    s,
                    p,
                    col,
                );
                [out, dinp, dw, db]
            };
            let direct = run(Path::Direct, &mut col);
            let columns = run(Path::Columns, &mut col);
            for (name, (d, e)) in ["out", "dinp", "dw", "dbias"]
                .iter()
                .zip(direct.iter().zip(&columns))
            {
                let scale = e.iter().fold(1.0f32, |m, v| m.max(v.abs()));
                for (i, (d, e)) in d.iter().zip(e).enumerate() {
                    assert!(
                        (d - e).abs() <= 1e-5 * scale,
                        "{k:?} {name}[{i}]: {d} vs {e}"
                    );
                }
            }
            checked += 1;
        }
        assert!(checked >= 11, "only {checked} cases took the direct path");
    }

    #[test]
    fn backward_accumulates_weight_gradients_and_may_skip_dinp() {
        let mut r = Rng::new(33);
        let k @ (b, c, h, wi, oc, kh, kw, s, p) = CASES[3];
        let (oh, ow) = out_size(h, wi, kh, kw, s, p).unwrap();
        let (inp, w, _) = inputs(&mut r, k);
        let g = randn(&mut r, b * oc * oh * ow);
        let mut col = vec![0.0; conv2d_scratch_len(c, (kh, kw), (s, p), (oh, ow))];
        let (mut dw1, mut db1) = (vec![0.0; w.len()], vec![0.0; oc]);
        let mut dinp = vec![0.0; inp.len()];
        conv2d_backward(
            Some(&mut dinp),
            &mut dw1,
            &mut db1,
            &g,
            &inp,
            &w,
            b,
            c,
            h,
            wi,
            oc,
            kh,
            kw,
            s,
            p,
            &mut col,
        );
        let (mut dw2, mut db2) = (dw1.clone(), db1.clone());
        conv2d_backward(
            None, &mut dw2, &mut db2, &g, &inp, &w, b, c, h, wi, oc, kh, kw, s, p, &mut col,
        );
        for (a, b) in dw1.iter().zip(&dw2).chain(db1.iter().zip(&db2)) {
            assert!((2.0 * a - b).abs() <= 1e-5 + 1e-5 * b.abs(), "{a} then {b}");
        }
    }

    #[test]
    #[should_panic(expected = "1x1 input is smaller than the 3x3 window")]
    fn refuses_an_image_smaller_than_the_kernel() {
        let (mut out, mut col) = (vec![0.0; 4], vec![0.0; 9]);
        conv2d_forward(
            &mut out,
            &[1.0],
            &[0.0; 9],
            &[0.0],
            1,
            1,
            1,
            1,
            1,
            3,
            3,
            1,
            0,
            &mut col,
        );
    }
}
