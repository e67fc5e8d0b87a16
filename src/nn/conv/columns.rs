//! Convolution by im2col and one `sgemm` per image: out_n[OC, OH*OW] = w[OC, C*KH*KW] @
//! col_n[C*KH*KW, OH*OW] lands in NCHW order directly (a pointwise layer multiplies the image
//! itself; over small images, all of a group's images side by side). One product for the whole
//! batch (columns of all images side by side) was measured no faster at batch 32 and 1.1-2x
//! slower at batch 128 on one thread (its wide matrices leave the cache, and its output and dout
//! must be copied between [OC, B*OH*OW] and NCHW); see the `conv_compare` benchmark.

use crate::nn::grow;
use std::cell::RefCell;

use super::Shape;
use crate::nn::gemm::sgemm;
use crate::nn::im2col::{col2im, im2col};

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

/// One image's column matrix, C*KH*KW x OH*OW.
pub(super) fn len(c: usize, kh: usize, kw: usize, oh: usize, ow: usize) -> usize {
    c * kh * kw * oh * ow
}

/// A 1x1 kernel with stride 1 and no padding reads the image as its own column matrix.
fn is_pointwise(s: &Shape) -> bool {
    s.kh == 1 && s.kw == 1 && s.stride == 1 && s.pad == 0
}

/// `conv2d_forward` this way; col_scratch[>= len(..)] is overwritten.
pub(super) fn forward(
    out: &mut [f32],
    inp: &[f32],
    w: &[f32],
    bias: &[f32],
    s: &Shape,
    col_scratch: &mut [f32],
) {
    let Shape {
        b,
        c,
        h,
        w: w_in,
        oc,
        kh,
        kw,
        stride,
        pad,
        oh,
        ow,
    } = *s;
    let (ckk, ohw, chw) = (s.ckk(), s.ohw(), s.chw());
    let pointwise = is_pointwise(s);
    if pointwise && b > 1 && ohw <= BATCH_POINTWISE_PIXELS {
        return SIDE_BY_SIDE.with(|sb| {
            let (x, y) = &mut *sb.borrow_mut();
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

/// `conv2d_backward` this way, but for the bias gradient.
pub(super) fn backward(
    mut dinp: Option<&mut [f32]>,
    dw: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    w: &[f32],
    s: &Shape,
    col_scratch: &mut [f32],
) {
    let Shape {
        b,
        c,
        h,
        w: w_in,
        oc,
        kh,
        kw,
        stride,
        pad,
        oh,
        ow,
    } = *s;
    let (ckk, ohw, chw) = (s.ckk(), s.ohw(), s.chw());
    let pointwise = is_pointwise(s);
    if pointwise && b > 1 && ohw <= BATCH_POINTWISE_PIXELS {
        return SIDE_BY_SIDE.with(|sb| {
            let (x, y) = &mut *sb.borrow_mut();
            grow(x, c * b * ohw);
            grow(y, oc * b * ohw);
            let (x, d) = (&mut x[..c * b * ohw], &mut y[..oc * b * ohw]);
            side_by_side(x, inp, b, c, ohw, false);
            side_by_side(d, dout, b, oc, ohw, false);
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
