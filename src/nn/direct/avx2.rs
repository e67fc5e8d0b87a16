//! The direct kernels with AVX2 + FMA (16 registers of 8 floats): a vector of V = 16 positions
//! is two registers, so the tiles are smaller than `avx512`'s (the forward tile takes 24
//! positions at a time, the weight-gradient tile its taps three at a time, both 4 x 3 registers
//! of sums; the depthwise weight gradient its taps nine at a time). Those two 4 x 3 tiles are
//! written in assembly: twelve sums, three operands and one broadcast fill all 16 registers, and
//! LLVM, left to itself, spilled a sum on every iteration (store-to-load latency on the chain:
//! half the speed). The forward sums add the same terms in the same order as `avx512`'s; the
//! weight-gradient sums keep 8 lanes of partial sums instead of 16, so they differ from
//! `avx512`'s by rounding (each still in a fixed order). Same functions, same contracts as
//! `avx512`; the callers check the bounds.

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
/// and q < nj * V: three registers of positions at a time (OB x 3 registers of sums: each tap's
/// OB weights, broadcast once, serve 24 positions), then the one or two left over.
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
    let bias: &[f32; OB] = bias[..OB].try_into().expect("a tile has OB biases");
    let regs = nj * (V / H);
    let mut r = 0;
    while r + 3 <= regs {
        // SAFETY: registers r..r + 3 lie inside the caller's tile.
        unsafe { forward_regs3(out.add(r * H), stride, x.add(r * H), offs, w, bias) };
        r += 3;
    }
    // SAFETY: as above.
    unsafe {
        match regs - r {
            2 => forward_short::<2>(out.add(r * H), stride, x.add(r * H), offs, w, bias),
            1 => forward_short::<1>(out.add(r * H), stride, x.add(r * H), offs, w, bias),
            _ => {}
        }
    }
}

/// `forward_tile` over 3 registers of positions from `out` / `x`.
#[target_feature(enable = "avx2,fma")]
unsafe fn forward_regs3(
    out: *mut f32,
    stride: usize,
    x: *const f32,
    offs: &[usize],
    w: *const f32,
    bias: &[f32; OB],
) {
    let [mut a0, mut a1, mut a2, mut a3] = bias.map(|b| [_mm256_set1_ps(b); 3]);
    if !offs.is_empty() {
        // SAFETY: reads x[offs[t] .. offs[t] + 24] and w[t * OB .. t * OB + OB] for t < taps,
        // inside the caller's bounds; the twelve sums stay in ymm0..ymm11 (LLVM, left to
        // itself, spills one of them on every tap: 16 registers are exactly enough).
        unsafe {
            std::arch::asm!(
                "2:",
                "mov {o}, qword ptr [{offs}]",
                "vmovups ymm12, ymmword ptr [{x} + 4*{o}]",
                "vmovups ymm13, ymmword ptr [{x} + 4*{o} + 32]",
                "vmovups ymm14, ymmword ptr [{x} + 4*{o} + 64]",
                "vbroadcastss ymm15, dword ptr [{w}]",
                "vfmadd231ps ymm0, ymm15, ymm12",
                "vfmadd231ps ymm1, ymm15, ymm13",
                "vfmadd231ps ymm2, ymm15, ymm14",
                "vbroadcastss ymm15, dword ptr [{w} + 4]",
                "vfmadd231ps ymm3, ymm15, ymm12",
                "vfmadd231ps ymm4, ymm15, ymm13",
                "vfmadd231ps ymm5, ymm15, ymm14",
                "vbroadcastss ymm15, dword ptr [{w} + 8]",
                "vfmadd231ps ymm6, ymm15, ymm12",
                "vfmadd231ps ymm7, ymm15, ymm13",
                "vfmadd231ps ymm8, ymm15, ymm14",
                "vbroadcastss ymm15, dword ptr [{w} + 12]",
                "vfmadd231ps ymm9, ymm15, ymm12",
                "vfmadd231ps ymm10, ymm15, ymm13",
                "vfmadd231ps ymm11, ymm15, ymm14",
                "add {w}, 16",
                "add {offs}, 8",
                "cmp {offs}, {end}",
                "jne 2b",
                offs = inout(reg) offs.as_ptr() => _,
                end = in(reg) offs.as_ptr().add(offs.len()),
                x = in(reg) x,
                w = inout(reg) w => _,
                o = out(reg) _,
                inout("ymm0") a0[0], inout("ymm1") a0[1], inout("ymm2") a0[2],
                inout("ymm3") a1[0], inout("ymm4") a1[1], inout("ymm5") a1[2],
                inout("ymm6") a2[0], inout("ymm7") a2[1], inout("ymm8") a2[2],
                inout("ymm9") a3[0], inout("ymm10") a3[1], inout("ymm11") a3[2],
                out("ymm12") _, out("ymm13") _, out("ymm14") _, out("ymm15") _,
                options(nostack, readonly),
            );
        }
    }
    for (i, row) in [a0, a1, a2, a3].iter().enumerate() {
        for (u, a) in row.iter().enumerate() {
            // SAFETY: inside the tile the caller gave.
            unsafe { _mm256_storeu_ps(out.add(i * stride + u * H), *a) };
        }
    }
}

/// `forward_tile` over R < 3 registers of positions (OB x R sums: room enough for LLVM).
#[target_feature(enable = "avx2,fma")]
unsafe fn forward_short<const R: usize>(
    out: *mut f32,
    stride: usize,
    x: *const f32,
    offs: &[usize],
    w: *const f32,
    bias: &[f32; OB],
) {
    let mut acc = bias.map(|b| [_mm256_set1_ps(b); R]);
    for (t, &off) in offs.iter().enumerate() {
        // SAFETY (this block): the caller keeps every address read or written in bounds.
        unsafe {
            let src = x.add(off);
            let mut v = [_mm256_setzero_ps(); R];
            for (u, v) in v.iter_mut().enumerate() {
                *v = _mm256_loadu_ps(src.add(u * H));
            }
            let wt = w.add(t * OB);
            for (i, row) in acc.iter_mut().enumerate() {
                let s = _mm256_broadcast_ss(&*wt.add(i));
                for (a, v) in row.iter_mut().zip(&v) {
                    *a = _mm256_fmadd_ps(s, *v, *a);
                }
            }
        }
    }
    for (i, row) in acc.iter().enumerate() {
        for (u, a) in row.iter().enumerate() {
            // SAFETY: inside the tile the caller gave.
            unsafe { _mm256_storeu_ps(out.add(i * stride + u * H), *a) };
        }
    }
}

/// tile[i][j] = sum over images n < `images` and q < positions of
/// dout[n * dout_image + i * dout_row + q] * planes[n * plane_image + offs[j] + q]: three taps
/// at a time (OB x 3 registers of sums).
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
    const { assert!(TB.is_multiple_of(3) && OB == 4) };
    // the assembly loop ends on q == positions exactly
    assert!(
        positions.is_multiple_of(H),
        "weight tile: positions not whole registers"
    );
    for j in (0..TB).step_by(3) {
        let mut acc = [[_mm256_setzero_ps(); 3]; OB];
        if positions > 0 {
            for n in 0..images {
                // SAFETY: image n's dout rows i < OB and planes at offs[j..j + 3], each read
                // at q < positions (a multiple of H), inside the caller's bounds; the twelve
                // sums stay in ymm0..ymm11 (16 registers are exactly enough; LLVM, left to itself, spills one of them).
                unsafe {
                    let d = dout.add(n * dout_image);
                    let x = planes.add(n * plane_image);
                    let [a0, a1, a2, a3] = &mut acc;
                    std::arch::asm!(
                        "2:",
                        "vmovups ymm12, ymmword ptr [{x0} + {q}]",
                        "vmovups ymm13, ymmword ptr [{x1} + {q}]",
                        "vmovups ymm14, ymmword ptr [{x2} + {q}]",
                        "vmovups ymm15, ymmword ptr [{d0} + {q}]",
                        "vfmadd231ps ymm0, ymm15, ymm12",
                        "vfmadd231ps ymm1, ymm15, ymm13",
                        "vfmadd231ps ymm2, ymm15, ymm14",
                        "vmovups ymm15, ymmword ptr [{d1} + {q}]",
                        "vfmadd231ps ymm3, ymm15, ymm12",
                        "vfmadd231ps ymm4, ymm15, ymm13",
                        "vfmadd231ps ymm5, ymm15, ymm14",
                        "vmovups ymm15, ymmword ptr [{d2} + {q}]",
                        "vfmadd231ps ymm6, ymm15, ymm12",
                        "vfmadd231ps ymm7, ymm15, ymm13",
                        "vfmadd231ps ymm8, ymm15, ymm14",
                        "vmovups ymm15, ymmword ptr [{d3} + {q}]",
                        "vfmadd231ps ymm9, ymm15, ymm12",
                        "vfmadd231ps ymm10, ymm15, ymm13",
                        "vfmadd231ps ymm11, ymm15, ymm14",
                        "add {q}, 32",
                        "cmp {q}, {end}",
                        "jne 2b",
                        x0 = in(reg) x.add(offs[j]),
                        x1 = in(reg) x.add(offs[j + 1]),
                        x2 = in(reg) x.add(offs[j + 2]),
                        d0 = in(reg) d,
                        d1 = in(reg) d.add(dout_row),
                        d2 = in(reg) d.add(2 * dout_row),
                        d3 = in(reg) d.add(3 * dout_row),
                        q = inout(reg) 0usize => _,
                        end = in(reg) positions * 4,
                        inout("ymm0") a0[0], inout("ymm1") a0[1], inout("ymm2") a0[2],
                        inout("ymm3") a1[0], inout("ymm4") a1[1], inout("ymm5") a1[2],
                        inout("ymm6") a2[0], inout("ymm7") a2[1], inout("ymm8") a2[2],
                        inout("ymm9") a3[0], inout("ymm10") a3[1], inout("ymm11") a3[2],
                        out("ymm12") _, out("ymm13") _, out("ymm14") _, out("ymm15") _,
                        options(nostack, readonly),
                    );
                }
            }
        }
        for (out, row) in tile.iter_mut().zip(&acc) {
            for (u, a) in row.iter().enumerate() {
                out[j + u] = hsum(*a);
            }
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

/// dst[..n] = even[0], odd[0], even[1], odd[1], .. (`deinterleave`'s inverse: reads
/// even[..ceil(n/2)] and odd[..floor(n/2)]).
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn interleave(dst: *mut f32, even: *const f32, odd: *const f32, n: usize) {
    let mut x = 0;
    while x + 2 * H <= n {
        // SAFETY: reads 8 floats at x/2 of each half (x/2 + 8 <= floor(n/2)), writes
        // dst[x..x + 16] (x + 16 <= n).
        unsafe {
            let (e, o) = (
                _mm256_loadu_ps(even.add(x / 2)),
                _mm256_loadu_ps(odd.add(x / 2)),
            );
            // per 128-bit lane: [e0 o0 e1 o1 | e4 o4 e5 o5] and [e2 o2 e3 o3 | e6 o6 e7 o7]
            let (lo, hi) = (_mm256_unpacklo_ps(e, o), _mm256_unpackhi_ps(e, o));
            _mm256_storeu_ps(dst.add(x), _mm256_permute2f128_ps::<0x20>(lo, hi));
            _mm256_storeu_ps(dst.add(x + H), _mm256_permute2f128_ps::<0x31>(lo, hi));
        }
        x += 2 * H;
    }
    for i in x..n {
        // SAFETY: i < n; i/2 < ceil(n/2) for even i, < floor(n/2) for odd i.
        unsafe {
            let from = if i % 2 == 0 { even } else { odd };
            *dst.add(i) = *from.add(i / 2);
        }
    }
}
