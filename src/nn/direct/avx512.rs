//! The direct kernels with AVX-512 (32 registers of 16 floats): a vector of positions is one
//! register. Same functions, same contracts as `avx2`; the callers (`dense`, `depthwise`, `mod`)
//! state what each reads and writes and check its bounds.

use std::arch::x86_64::*;

use super::dense::{J, OB, TB};
use super::depthwise::MAX_TAPS;
use super::V;

/// out[i * stride + q] = bias[i] + sum_t w[t * OB + i] * x[offs[t] + q] for the tile's OB rows
/// and q < nj * V (nj <= J).
#[target_feature(enable = "avx512f,avx512vl")]
pub(super) unsafe fn forward_tile(
    out: *mut f32,
    stride: usize,
    x: *const f32,
    offs: &[usize],
    w: *const f32,
    bias: &[f32],
    nj: usize,
) {
    // SAFETY: the caller's bounds, for nj vectors.
    unsafe {
        match nj {
            1 => tile::<1>(out, stride, x, offs, w, bias),
            2 => tile::<2>(out, stride, x, offs, w, bias),
            3 => tile::<3>(out, stride, x, offs, w, bias),
            4 => tile::<4>(out, stride, x, offs, w, bias),
            5 => tile::<5>(out, stride, x, offs, w, bias),
            _ => tile::<J>(out, stride, x, offs, w, bias),
        }
    }
}

#[target_feature(enable = "avx512f,avx512vl")]
unsafe fn tile<const NJ: usize>(
    out: *mut f32,
    stride: usize,
    x: *const f32,
    offs: &[usize],
    w: *const f32,
    bias: &[f32],
) {
    let mut acc = [[_mm512_setzero_ps(); NJ]; OB];
    for (row, &b) in acc.iter_mut().zip(bias) {
        *row = [_mm512_set1_ps(b); NJ];
    }
    for (t, &off) in offs.iter().enumerate() {
        // SAFETY (this block): the caller keeps every address read or written in bounds.
        unsafe {
            let src = x.add(off);
            let mut v = [_mm512_setzero_ps(); NJ];
            for (j, v) in v.iter_mut().enumerate() {
                *v = _mm512_loadu_ps(src.add(j * V));
            }
            let wt = w.add(t * OB);
            for (i, row) in acc.iter_mut().enumerate() {
                let s = _mm512_set1_ps(*wt.add(i));
                for (a, v) in row.iter_mut().zip(&v) {
                    *a = _mm512_fmadd_ps(s, *v, *a);
                }
            }
        }
    }
    for (i, row) in acc.iter().enumerate() {
        for (j, a) in row.iter().enumerate() {
            // SAFETY: inside the tile the caller gave.
            unsafe { _mm512_storeu_ps(out.add(i * stride + j * V), *a) };
        }
    }
}

/// tile[i][j] = sum over images n < `images` and q < positions of
/// dout[n * dout_image + i * dout_row + q] * planes[n * plane_image + offs[j] + q].
#[target_feature(enable = "avx512f,avx512vl")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn weight_tile(
    tile: &mut [[f32; TB]; OB],
    images: usize,
    dout: *const f32,
    dout_image: usize,
    dout_row: usize,
    planes: *const f32,
    plane_image: usize,
    offs: &[usize; TB],
    positions: usize,
) {
    let mut acc = [[_mm512_setzero_ps(); TB]; OB];
    for n in 0..images {
        // SAFETY (this block): the caller keeps every address read in bounds.
        unsafe {
            let d = dout.add(n * dout_image);
            let x = planes.add(n * plane_image);
            for q in (0..positions).step_by(V) {
                let mut dv = [_mm512_setzero_ps(); OB];
                for (i, dv) in dv.iter_mut().enumerate() {
                    *dv = _mm512_loadu_ps(d.add(i * dout_row + q));
                }
                for (j, &off) in offs.iter().enumerate() {
                    let xv = _mm512_loadu_ps(x.add(off + q));
                    for (row, dv) in acc.iter_mut().zip(&dv) {
                        row[j] = _mm512_fmadd_ps(*dv, xv, row[j]);
                    }
                }
            }
        }
    }
    for (out, row) in tile.iter_mut().zip(&acc) {
        for (o, a) in out.iter_mut().zip(row) {
            *o = _mm512_reduce_add_ps(*a);
        }
    }
}

/// outq[q] = bias + sum_t w[t] * plane[offs[t] + q] for q < positions (a multiple of V).
#[target_feature(enable = "avx512f,avx512vl")]
pub(super) unsafe fn sweep(
    outq: *mut f32,
    plane: *const f32,
    offs: &[usize],
    w: &[f32; MAX_TAPS],
    bias: f32,
    positions: usize,
) {
    // SAFETY: the caller's bounds.
    unsafe {
        match offs.len() {
            9 => sweep_taps::<9>(outq, plane, offs, w, bias, positions),
            _ => sweep_taps::<MAX_TAPS>(outq, plane, offs, w, bias, positions),
        }
    }
}

#[target_feature(enable = "avx512f,avx512vl")]
unsafe fn sweep_taps<const N: usize>(
    outq: *mut f32,
    plane: *const f32,
    offs: &[usize],
    w: &[f32; MAX_TAPS],
    bias: f32,
    positions: usize,
) {
    let n = offs.len().min(N);
    let mut wv = [_mm512_setzero_ps(); N];
    for (v, &x) in wv.iter_mut().zip(w) {
        *v = _mm512_set1_ps(x);
    }
    let mut q = 0;
    // four vectors of positions at a time, then one
    while q + 4 * V <= positions {
        let mut acc = [_mm512_set1_ps(bias); 4];
        for t in 0..n {
            // SAFETY: inside the plane and the output (the caller's bounds).
            unsafe {
                let src = plane.add(offs[t] + q);
                for (u, a) in acc.iter_mut().enumerate() {
                    *a = _mm512_fmadd_ps(wv[t], _mm512_loadu_ps(src.add(u * V)), *a);
                }
            }
        }
        for (u, a) in acc.iter().enumerate() {
            // SAFETY: as above.
            unsafe { _mm512_storeu_ps(outq.add(q + u * V), *a) };
        }
        q += 4 * V;
    }
    while q < positions {
        let mut acc = _mm512_set1_ps(bias);
        for t in 0..n {
            // SAFETY: as above.
            acc = _mm512_fmadd_ps(
                wv[t],
                unsafe { _mm512_loadu_ps(plane.add(offs[t] + q)) },
                acc,
            );
        }
        // SAFETY: as above.
        unsafe { _mm512_storeu_ps(outq.add(q), acc) };
        q += V;
    }
}

/// sums[t] = sum_q dout[q] * plane[offs[t] + q] over q < positions (a multiple of V).
#[target_feature(enable = "avx512f,avx512vl")]
pub(super) unsafe fn tap_sums(
    sums: &mut [f32; MAX_TAPS],
    dout: *const f32,
    plane: *const f32,
    offs: &[usize],
    positions: usize,
) {
    // SAFETY: the caller's bounds.
    unsafe {
        match offs.len() {
            9 => tap_sums_of::<9>(sums, dout, plane, offs, positions),
            _ => tap_sums_of::<MAX_TAPS>(sums, dout, plane, offs, positions),
        }
    }
}

#[target_feature(enable = "avx512f,avx512vl")]
unsafe fn tap_sums_of<const N: usize>(
    sums: &mut [f32; MAX_TAPS],
    dout: *const f32,
    plane: *const f32,
    offs: &[usize],
    positions: usize,
) {
    let n = offs.len().min(N);
    let mut acc = [_mm512_setzero_ps(); N];
    for q in (0..positions).step_by(V) {
        // SAFETY: inside both planes (the caller's bounds).
        unsafe {
            let d = _mm512_loadu_ps(dout.add(q));
            for t in 0..n {
                acc[t] = _mm512_fmadd_ps(d, _mm512_loadu_ps(plane.add(offs[t] + q)), acc[t]);
            }
        }
    }
    for (s, a) in sums.iter_mut().zip(&acc[..n]) {
        *s = _mm512_reduce_add_ps(*a);
    }
}

/// even[..ceil(n/2)] = src[0, 2, 4, ..], odd[..floor(n/2)] = src[1, 3, ..] (src[..n]).
#[target_feature(enable = "avx512f,avx512vl")]
pub(super) unsafe fn deinterleave(even: *mut f32, odd: *mut f32, src: *const f32, n: usize) {
    let lanes = |m: usize| if m >= V { u16::MAX } else { (1u16 << m) - 1 };
    let pick_even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let pick_odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for x in (0..n).step_by(2 * V) {
        let left = n - x;
        // SAFETY: masked-off lanes are neither read nor written; the others lie below n
        // (reads) and below ceil(n/2) / floor(n/2) (writes).
        unsafe {
            let a = _mm512_maskz_loadu_ps(lanes(left), src.add(x));
            let b = _mm512_maskz_loadu_ps(lanes(left.saturating_sub(V)), src.wrapping_add(x + V));
            let (e, o) = (
                _mm512_permutex2var_ps(a, pick_even, b),
                _mm512_permutex2var_ps(a, pick_odd, b),
            );
            _mm512_mask_storeu_ps(even.add(x / 2), lanes(left.div_ceil(2)), e);
            _mm512_mask_storeu_ps(odd.add(x / 2), lanes(left / 2), o);
        }
    }
}

/// `avx2::interleave` (a store-bound copy: AVX-512 would not make it faster).
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn interleave(dst: *mut f32, even: *const f32, odd: *const f32, n: usize) {
    // SAFETY: as the caller's (an AVX-512 CPU has AVX2 and FMA)
    unsafe { super::avx2::interleave(dst, even, odd, n) }
}
