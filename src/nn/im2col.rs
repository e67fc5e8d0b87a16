//! im2col and its adjoint col2im: the patches of a zero-padded image laid out as the columns
//! of a matrix, so a convolution is one matrix product (Caffe's and PyTorch's CPU approach).
//!
//! Row r = (ci*KH + i)*KW + j of `col` (matching weights stored [OC, C, KH, KW]) holds, for
//! every output position (oy, ox) in row-major order, inp[ci, oy*stride + i - pad,
//! ox*stride + j - pad], or 0 where that falls in the padding. Rows are `ld` apart (`ld` >=
//! OH*OW), so several images' columns can sit side by side in one wide matrix.

/// Output positions o in 0..n_out whose input index o*stride + off - pad lies in 0..n_in.
fn valid(n_out: usize, n_in: usize, off: usize, stride: usize, pad: usize) -> (usize, usize) {
    let lo = if pad > off {
        (pad - off).div_ceil(stride)
    } else {
        0
    };
    let hi = if n_in + pad > off {
        (n_in + pad - off - 1) / stride + 1
    } else {
        0
    };
    let lo = lo.min(n_out);
    (lo, hi.min(n_out).max(lo))
}

#[allow(clippy::too_many_arguments)]
fn check(
    col_len: usize,
    ld: usize,
    img_len: usize,
    c: usize,
    h: usize,
    w: usize,
    kh: usize,
    kw: usize,
    stride: usize,
    oh: usize,
    ow: usize,
) {
    assert!(stride >= 1, "im2col: stride 0");
    assert!(ld >= oh * ow, "im2col: ld {ld} < OH*OW {}", oh * ow);
    let rows = c * kh * kw;
    let need = if rows == 0 {
        0
    } else {
        (rows - 1) * ld + oh * ow
    };
    assert!(col_len >= need, "im2col: col has {col_len}, need {need}");
    assert!(
        img_len >= c * h * w,
        "im2col: image has {img_len}, need {}",
        c * h * w
    );
}

/// col[C*KH*KW, ld] (first OH*OW columns of each row) = the patches of inp[C,H,W].
#[allow(clippy::too_many_arguments)]
pub fn im2col(
    col: &mut [f32],
    ld: usize,
    inp: &[f32],
    c: usize,
    h: usize,
    w: usize,
    kh: usize,
    kw: usize,
    stride: usize,
    pad: usize,
    oh: usize,
    ow: usize,
) {
    check(col.len(), ld, inp.len(), c, h, w, kh, kw, stride, oh, ow);
    for ci in 0..c {
        let plane = &inp[ci * h * w..(ci + 1) * h * w];
        for i in 0..kh {
            let (ylo, yhi) = valid(oh, h, i, stride, pad);
            for j in 0..kw {
                let (xlo, xhi) = valid(ow, w, j, stride, pad);
                let r = (ci * kh + i) * kw + j;
                let row = &mut col[r * ld..r * ld + oh * ow];
                row[..ylo * ow].fill(0.0);
                row[yhi * ow..].fill(0.0);
                for oy in ylo..yhi {
                    let dst = &mut row[oy * ow..(oy + 1) * ow];
                    dst[..xlo].fill(0.0);
                    dst[xhi..].fill(0.0);
                    if xlo == xhi {
                        continue;
                    }
                    let iy = oy * stride + i - pad;
                    let x0 = xlo * stride + j - pad;
                    let src = &plane[iy * w + x0..(iy + 1) * w];
                    let dst = &mut dst[xlo..xhi];
                    if stride == 1 {
                        dst.copy_from_slice(&src[..dst.len()]);
                    } else {
                        for (d, s) in dst.iter_mut().zip(src.iter().step_by(stride)) {
                            *d = *s;
                        }
                    }
                }
            }
        }
    }
}

/// dinp[C,H,W] += the adjoint of `im2col`: each column entry added back to the pixel it was
/// copied from (entries that came from the padding are dropped). Does not zero `dinp`.
#[allow(clippy::too_many_arguments)]
pub fn col2im(
    dinp: &mut [f32],
    col: &[f32],
    ld: usize,
    c: usize,
    h: usize,
    w: usize,
    kh: usize,
    kw: usize,
    stride: usize,
    pad: usize,
    oh: usize,
    ow: usize,
) {
    check(col.len(), ld, dinp.len(), c, h, w, kh, kw, stride, oh, ow);
    for ci in 0..c {
        let plane = &mut dinp[ci * h * w..(ci + 1) * h * w];
        for i in 0..kh {
            let (ylo, yhi) = valid(oh, h, i, stride, pad);
            for j in 0..kw {
                let (xlo, xhi) = valid(ow, w, j, stride, pad);
                if xlo == xhi {
                    continue;
                }
                let r = (ci * kh + i) * kw + j;
                let x0 = xlo * stride + j - pad;
                for oy in ylo..yhi {
                    let src = &col[r * ld + oy * ow + xlo..r * ld + oy * ow + xhi];
                    let iy = oy * stride + i - pad;
                    let dst = &mut plane[iy * w + x0..(iy + 1) * w];
                    if stride == 1 {
                        for (d, s) in dst.iter_mut().zip(src) {
                            *d += s;
                        }
                    } else {
                        for (d, s) in dst.iter_mut().step_by(stride).zip(src) {
                            *d += s;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::rng::Rng;
    use crate::nn::window::out_size;

    /// (c, h, w, kh, kw, stride, pad)
    const CASES: [(usize, usize, usize, usize, usize, usize, usize); 8] = [
        (1, 5, 5, 3, 3, 1, 0),
        (2, 5, 7, 3, 3, 1, 1),
        (3, 7, 6, 3, 3, 2, 1),
        (2, 6, 5, 2, 3, 2, 0),
        (1, 4, 4, 5, 5, 1, 2),
        (2, 3, 5, 1, 1, 1, 0),
        (1, 9, 8, 3, 2, 3, 2),
        (1, 2, 2, 1, 1, 1, 3),
    ];

    #[test]
    fn columns_hold_the_padded_patches() {
        let mut r = Rng::new(21);
        for (c, h, w, kh, kw, s, p) in CASES {
            let (oh, ow) = out_size(h, w, kh, kw, s, p).unwrap();
            let inp: Vec<f32> = (0..c * h * w).map(|_| r.normal()).collect();
            let ld = oh * ow + 3; // a wider matrix: the extra columns stay untouched
            let mut col = vec![f32::NAN; c * kh * kw * ld];
            im2col(&mut col, ld, &inp, c, h, w, kh, kw, s, p, oh, ow);
            for ci in 0..c {
                for i in 0..kh {
                    for j in 0..kw {
                        let row = (ci * kh + i) * kw + j;
                        for oy in 0..oh {
                            for ox in 0..ow {
                                let iy = (oy * s + i) as isize - p as isize;
                                let ix = (ox * s + j) as isize - p as isize;
                                let inside =
                                    (0..h as isize).contains(&iy) && (0..w as isize).contains(&ix);
                                let want = if inside {
                                    inp[(ci * h + iy as usize) * w + ix as usize]
                                } else {
                                    0.0
                                };
                                assert_eq!(col[row * ld + oy * ow + ox], want);
                            }
                        }
                        assert!(col[row * ld + oh * ow..(row + 1) * ld]
                            .iter()
                            .all(|v| v.is_nan()));
                    }
                }
            }
        }
    }

    #[test]
    fn col2im_is_the_adjoint_of_im2col_and_accumulates() {
        let mut r = Rng::new(22);
        for (c, h, w, kh, kw, s, p) in CASES {
            let (oh, ow) = out_size(h, w, kh, kw, s, p).unwrap();
            let x: Vec<f32> = (0..c * h * w).map(|_| r.normal()).collect();
            let y: Vec<f32> = (0..c * kh * kw * oh * ow).map(|_| r.normal()).collect();
            let mut col = vec![0.0; y.len()];
            im2col(&mut col, oh * ow, &x, c, h, w, kh, kw, s, p, oh, ow);
            let base: Vec<f32> = (0..x.len()).map(|_| r.normal()).collect();
            let mut back = base.clone();
            col2im(&mut back, &y, oh * ow, c, h, w, kh, kw, s, p, oh, ow);
            // <im2col(x), y> == <x, col2im(y)>
            let lhs: f64 = col.iter().zip(&y).map(|(a, b)| (a * b) as f64).sum();
            let rhs: f64 = x
                .iter()
                .zip(back.iter().zip(&base))
                .map(|(a, (b, b0))| (a * (b - b0)) as f64)
                .sum();
            assert!((lhs - rhs).abs() < 1e-3, "{lhs} vs {rhs}");
        }
    }
}
