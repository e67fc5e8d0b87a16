//! The direct kernels with AVX2 + FMA (16 registers of 8 floats): a vector of V = 16 positions
//! is two registers, so the tiles are smaller than `avx512`'s (the forward tile takes its
//! vectors one after another, the weight-gradient tile its taps two at a time, the depthwise
//! weight gradient its taps nine at a time). The forward sums add the same terms in the same
//! order as `avx512`'s; the weight-gradient sums keep 8 lanes of partial sums instead of 16, so
//! they differ from `avx512`'s by rounding (each still in a fixed order). Same functions, same
//! contracts as `avx512`; the callers check the bounds.

use std::arch::x86_64::*;

use super::dense::{OB, TB};
use super::depthwise::MAX_TAPS;
use super::V;

/// Floats per register.
const H: usize = 8;

/// The sum of the eight lanes.
#[target_feature(enable = "avx2,fma")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// out[i * stride + q] = bias[i] + sum_t w[t * OB + i] * x[offs[t] + q] for the tile's OB rows
/// and q < nj * V: one vector of positions at a time (OB x 2 registers of sums).
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn forward_tile(
    out: *mut f32,
    stride: usize,
    x: *const f32,
    offs: &[usize],
    w: *const f32,
    bias: &[f32],
    nj: usize,
) {
    for j in 0..nj {
        let mut acc = [[_mm256_setzero_ps(); 2]; OB];
        for (row, &b) in acc.iter_mut().zip(bias) {
            *row = [_mm256_set1_ps(b); 2];
        }
        for (t, &off) in offs.iter().enumerate() {
            // SAFETY (this block): the caller keeps every address read or written in bounds.
            unsafe {
                let src = x.add(off + j * V);
                let v = [_mm256_loadu_ps(src), _mm256_loadu_ps(src.add(H))];
                let wt = w.add(t * OB);
                for (i, row) in acc.iter_mut().enumerate() {
                    let s = _mm256_broadcast_ss(&*wt.add(i));
                    row[0] = _mm256_fmadd_ps(s, v[0], row[0]);
                    row[1] = _mm256_fmadd_ps(s, v[1], row[1]);
                }
            }
        }
        for (i, row) in acc.iter().enumerate() {
            // SAFETY: inside the tile the caller gave.
            unsafe {
                let o = out.add(i * stride + j * V);
                _mm256_storeu_ps(o, row[0]);
                _mm256_storeu_ps(o.add(H), row[1]);
            }
        }
    }
}

/// tile[i][j] = sum over images n < `images` and q < positions of
/// dout[n * dout_image + i * dout_row + q] * planes[n * plane_image + offs[j] + q]: two taps
/// at a time (OB x 2 registers of sums).
#[target_feature(enable = "avx2,fma")]
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
    for j in (0..TB).step_by(2) {
        let mut acc = [[_mm256_setzero_ps(); 2]; OB];
        for n in 0..images {
            // SAFETY (this block): the caller keeps every address read in bounds.
            unsafe {
                let d = dout.add(n * dout_image);
                let x = planes.add(n * plane_image);
                for q in (0..positions).step_by(H) {
                    let x0 = _mm256_loadu_ps(x.add(offs[j] + q));
                    let x1 = _mm256_loadu_ps(x.add(offs[j + 1] + q));
                    for (i, row) in acc.iter_mut().enumerate() {
                        let dv = _mm256_loadu_ps(d.add(i * dout_row + q));
                        row[0] = _mm256_fmadd_ps(dv, x0, row[0]);
                        row[1] = _mm256_fmadd_ps(dv, x1, row[1]);
                    }
                }
            }
        }
        for (out, row) in tile.iter_mut().zip(&acc) {
            out[j] = hsum(row[0]);
            out[j + 1] = hsum(row[1]);
        }
    }
}

/// outq[q] = bias + sum_t w[t] * plane[offs[t] + q] for q < positions (a multiple of V).
#[target_feature(enable = "avx2,fma")]
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

#[target_feature(enable = "avx2,fma")]
unsafe fn sweep_taps<const N: usize>(
    outq: *mut f32,
    plane: *const f32,
    offs: &[usize],
    w: &[f32; MAX_TAPS],
    bias: f32,
    positions: usize,
) {
    let n = offs.len().min(N);
    let mut wv = [_mm256_setzero_ps(); N];
    for (v, &x) in wv.iter_mut().zip(w) {
        *v = _mm256_set1_ps(x);
    }
    let mut q = 0;
    // four registers of positions at a time, then one
    while q + 4 * H <= positions {
        let mut acc = [_mm256_set1_ps(bias); 4];
        for t in 0..n {
            // SAFETY: inside the plane and the output (the caller's bounds).
            unsafe {
                let src = plane.add(offs[t] + q);
                for (u, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_fmadd_ps(wv[t], _mm256_loadu_ps(src.add(u * H)), *a);
                }
            }
        }
        for (u, a) in acc.iter().enumerate() {
            // SAFETY: as above.
            unsafe { _mm256_storeu_ps(outq.add(q + u * H), *a) };
        }
        q += 4 * H;
    }
    while q < positions {
        let mut acc = _mm256_set1_ps(bias);
        for t in 0..n {
            // SAFETY: as above.
            acc = _mm256_fmadd_ps(
                wv[t],
                unsafe { _mm256_loadu_ps(plane.add(offs[t] + q)) },
                acc,
            );
        }
        // SAFETY: as above.
        unsafe { _mm256_storeu_ps(outq.add(q), acc) };
        q += H;
    }
}

/// Taps whose sums one pass of `tap_sums` keeps in registers.
const PASS: usize = 9;

/// sums[t] = sum_q dout[q] * plane[offs[t] + q] over q < positions (a multiple of V), PASS taps
/// per pass over dout (a short last pass reads offset 0 for the missing taps and drops them).
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn tap_sums(
    sums: &mut [f32; MAX_TAPS],
    dout: *const f32,
    plane: *const f32,
    offs: &[usize],
    positions: usize,
) {
    for (p, chunk) in offs.chunks(PASS).enumerate() {
        let mut at = [0usize; PASS];
        at[..chunk.len()].copy_from_slice(chunk);
        let mut acc = [_mm256_setzero_ps(); PASS];
        for q in (0..positions).step_by(H) {
            // SAFETY: inside both planes (the caller's bounds; offset 0 is inside too).
            unsafe {
                let d = _mm256_loadu_ps(dout.add(q));
                for (a, &off) in acc.iter_mut().zip(&at) {
                    *a = _mm256_fmadd_ps(d, _mm256_loadu_ps(plane.add(off + q)), *a);
                }
            }
        }
        for (s, a) in sums[p * PASS..].iter_mut().zip(&acc[..chunk.len()]) {
            *s = hsum(*a);
        }
    }
}

/// even[..ceil(n/2)] = src[0, 2, 4, ..], odd[..floor(n/2)] = src[1, 3, ..] (src[..n]).
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn deinterleave(even: *mut f32, odd: *mut f32, src: *const f32, n: usize) {
    let mut x = 0;
    while x + 2 * H <= n {
        // SAFETY: reads src[x..x + 16] (x + 16 <= n), writes 8 floats at x/2 of each half
        // (x/2 + 8 <= floor(n/2)).
        unsafe {
            let (a, b) = (_mm256_loadu_ps(src.add(x)), _mm256_loadu_ps(src.add(x + H)));
            // per 128-bit lane: [a0 a2 b0 b2 | a4 a6 b4 b6], then the 64-bit pairs reordered
            let e = _mm256_shuffle_ps::<0b10_00_10_00>(a, b);
            let o = _mm256_shuffle_ps::<0b11_01_11_01>(a, b);
            let order = |v: __m256| {
                _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(v)))
            };
            _mm256_storeu_ps(even.add(x / 2), order(e));
            _mm256_storeu_ps(odd.add(x / 2), order(o));
        }
        x += 2 * H;
    }
    for i in x..n {
        // SAFETY: i < n; i/2 < ceil(n/2) for even i, < floor(n/2) for odd i.
        unsafe {
            let to = if i % 2 == 0 { even } else { odd };
            *to.add(i / 2) = *src.add(i);
        }
    }
}
