//! The Winograd kernels with AVX2 + FMA: a register holds 8 blocks (their transforms) or 8
//! block positions (the products). The callers check every bound; each kernel says what it
//! reads and writes.

use std::arch::x86_64::*;

use super::{L, RB, XI};

/// A row x[..w] split into its even and odd columns after shifting it right by `shift` columns
/// (0 or 1): even[m] = x[2m - shift], odd[m] = x[2m + 1 - shift] for m < limit, zero where that
/// is outside the row.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn split(
    even: *mut f32,
    odd: *mut f32,
    x: *const f32,
    w: usize,
    shift: usize,
    limit: usize,
) {
    // whole vectors: 16 columns to 8 even and 8 odd ones, which the shift swaps and moves
    let (to_even, to_odd) = match shift {
        0 => (even, odd),
        _ => (odd, even.wrapping_add(1)),
    };
    if shift == 1 && limit > 0 {
        // SAFETY: 0 < limit; the whole vectors below write even[1..] only.
        unsafe { *even = 0.0 };
    }
    let mut m = 0;
    while 2 * m + 2 * L <= w {
        // SAFETY: the caller's bounds: x[..w], even / odd [..limit] with m + 8 + shift <= limit
        // (2m + 16 <= w and limit covers the row).
        unsafe {
            let a = _mm256_loadu_ps(x.add(2 * m));
            let b = _mm256_loadu_ps(x.add(2 * m + L));
            // [a0 a2 b0 b2 | a4 a6 b4 b6] -> [a0 a2 a4 a6 b0 b2 b4 b6]
            let e = _mm256_shuffle_ps::<0b10_00_10_00>(a, b);
            let o = _mm256_shuffle_ps::<0b11_01_11_01>(a, b);
            let e = _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(e)));
            let o = _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(o)));
            _mm256_storeu_ps(to_even.add(m), e);
            _mm256_storeu_ps(to_odd.add(m), o);
        }
        m += L;
    }
    if 2 * m + L <= w {
        // SAFETY: as above, for 8 columns to 4 and 4.
        unsafe {
            let a = _mm_loadu_ps(x.add(2 * m));
            let b = _mm_loadu_ps(x.add(2 * m + 4));
            _mm_storeu_ps(to_even.add(m), _mm_shuffle_ps::<0b10_00_10_00>(a, b));
            _mm_storeu_ps(to_odd.add(m), _mm_shuffle_ps::<0b11_01_11_01>(a, b));
        }
        m += 4;
    }
    let at = |i: usize| match i.checked_sub(shift) {
        // SAFETY: i - shift < w.
        Some(i) if i < w => unsafe { *x.add(i) },
        _ => 0.0,
    };
    for m in m..limit {
        // SAFETY: m < limit.
        unsafe {
            *even.add(m) = at(2 * m);
            *odd.add(m) = at(2 * m + 1);
        }
    }
}

/// The input transform V = B^T d B of one row of `tw` blocks: rows[r] (r < 4) are the four
/// padded input rows the blocks read, each as its even and odd columns (`rows[r]` and
/// `rows[r] + half`; block j reads columns 2j..2j + 3 = even[j], odd[j], even[j + 1],
/// odd[j + 1]). Entry xi of block j goes to v[xi * xs + j], in whole vectors of 8 blocks (up to
/// 7 lanes past tw are written).
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn input_row(
    v: *mut f32,
    xs: usize,
    rows: [*const f32; 4],
    half: usize,
    tw: usize,
) {
    for j in (0..tw).step_by(L) {
        // each row along x: (d0 - d2, d1 + d2, d2 - d1, d1 - d3)
        // SAFETY: the caller's bounds: even / odd [j..j + 9] of each row.
        let q: [[__m256; 4]; 4] = rows.map(|r| unsafe {
            let (e0, e1) = (_mm256_loadu_ps(r.add(j)), _mm256_loadu_ps(r.add(j + 1)));
            let (o0, o1) = (
                _mm256_loadu_ps(r.add(half + j)),
                _mm256_loadu_ps(r.add(half + j + 1)),
            );
            [
                _mm256_sub_ps(e0, e1),
                _mm256_add_ps(o0, e1),
                _mm256_sub_ps(e1, o0),
                _mm256_sub_ps(o0, o1),
            ]
        });
        // then along y, column by column
        let [q0s, q1s, q2s, q3s] = q;
        for (b, (((q0, q1), q2), q3)) in q0s.into_iter().zip(q1s).zip(q2s).zip(q3s).enumerate() {
            let out = [
                _mm256_sub_ps(q0, q2),
                _mm256_add_ps(q1, q2),
                _mm256_sub_ps(q2, q1),
                _mm256_sub_ps(q1, q3),
            ];
            for (a, o) in out.into_iter().enumerate() {
                // SAFETY: the caller's bounds: v[xi * xs + j..+8] for xi < 16.
                unsafe { _mm256_storeu_ps(v.add((a * 4 + b) * xs + j), o) };
            }
        }
    }
}

/// The gradient's transform A dy A^T of one row of `tw` blocks of dout: rows[p] (p < 2) are
/// the block row's two rows of dout as their even and odd columns (`rows[p]`, `rows[p] +
/// half`). Entry xi of block j goes to y[xi * xs + j], in whole vectors as `input_row`.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn grad_row(
    y: *mut f32,
    xs: usize,
    rows: [*const f32; 2],
    half: usize,
    tw: usize,
) {
    for j in (0..tw).step_by(L) {
        // SAFETY: the caller's bounds: even / odd [j..j + 8] of both rows.
        let [[a, b], [c, d]] =
            rows.map(|r| unsafe { [_mm256_loadu_ps(r.add(j)), _mm256_loadu_ps(r.add(half + j))] });
        let zero = _mm256_setzero_ps();
        // along y: (r0, r0 + r1, r0 - r1, -r1), then the same along x
        let z = [
            [a, b],
            [_mm256_add_ps(a, c), _mm256_add_ps(b, d)],
            [_mm256_sub_ps(a, c), _mm256_sub_ps(b, d)],
            [_mm256_sub_ps(zero, c), _mm256_sub_ps(zero, d)],
        ];
        for (r, [p, q]) in z.into_iter().enumerate() {
            let out = [
                p,
                _mm256_add_ps(p, q),
                _mm256_sub_ps(p, q),
                _mm256_sub_ps(zero, q),
            ];
            for (s, o) in out.into_iter().enumerate() {
                // SAFETY: the caller's bounds: y[xi * xs + j..+8] for xi < 16.
                unsafe { _mm256_storeu_ps(y.add((r * 4 + s) * xs + j), o) };
            }
        }
    }
}

/// The output transform A^T m A + bias of one row of `tw` blocks: entry xi of block j is
/// m[xi * xs + j]; the block's 2 x 2 outputs go to columns 2j, 2j + 1 of out[0] and, where it
/// is given, out[1], the columns at or past `w` dropped.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn output_row(
    out: [*mut f32; 2],
    rows: usize,
    w: usize,
    m: *const f32,
    xs: usize,
    bias: f32,
    tw: usize,
) {
    let bias = _mm256_set1_ps(bias);
    for j in (0..tw).step_by(L) {
        // SAFETY: the caller's bounds: m[xi * xs + j..+8] for xi < 16.
        let mv: [__m256; XI] =
            std::array::from_fn(|xi| unsafe { _mm256_loadu_ps(m.add(xi * xs + j)) });
        // along y: s0 = m0 + m1 + m2, s1 = m1 - m2 - m3 (per column b)
        let s: [[__m256; 4]; 2] = [
            std::array::from_fn(|b| _mm256_add_ps(_mm256_add_ps(mv[b], mv[4 + b]), mv[8 + b])),
            std::array::from_fn(|b| _mm256_sub_ps(_mm256_sub_ps(mv[4 + b], mv[8 + b]), mv[12 + b])),
        ];
        for (p, &dst) in out.iter().enumerate().take(rows) {
            let [s0, s1, s2, s3] = s[p];
            let even = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), s2), bias);
            let odd = _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(s1, s2), s3), bias);
            let lo = _mm256_unpacklo_ps(even, odd);
            let hi = _mm256_unpackhi_ps(even, odd);
            let first = _mm256_permute2f128_ps::<0x20>(lo, hi);
            let second = _mm256_permute2f128_ps::<0x31>(lo, hi);
            let at = 2 * j;
            let keep = w.saturating_sub(at).min(2 * L);
            // SAFETY: the caller's bounds: out[p][..w]; only columns below w are written.
            unsafe {
                if keep == 2 * L {
                    _mm256_storeu_ps(dst.add(at), first);
                    _mm256_storeu_ps(dst.add(at + L), second);
                } else {
                    let mut tmp = [0.0f32; 2 * L];
                    _mm256_storeu_ps(tmp.as_mut_ptr(), first);
                    _mm256_storeu_ps(tmp.as_mut_ptr().add(L), second);
                    std::ptr::copy_nonoverlapping(tmp.as_ptr(), dst.add(at), keep);
                }
            }
        }
    }
}

/// m[r * ms + q] = sum_i u[i * RB + r] * v[i * vs + q] for the RB rows r and q < nv * 8: the
/// products of one transform entry, three vectors of positions at a time (RB x 3 registers
/// of sums), then the one or two left over.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn product(
    m: *mut f32,
    ms: usize,
    u: *const f32,
    v: *const f32,
    vs: usize,
    inner: usize,
    nv: usize,
) {
    let mut q = 0;
    // SAFETY (all three): the caller's bounds: u[..inner * RB], v[i * vs + q..] and m[r * ms + q..]
    // for the vectors q covers.
    while q + 3 <= nv {
        unsafe { product3(m.add(q * L), ms, u, v.add(q * L), vs, inner) };
        q += 3;
    }
    match nv - q {
        2 => unsafe { product_n::<2>(m.add(q * L), ms, u, v.add(q * L), vs, inner) },
        1 => unsafe { product_n::<1>(m.add(q * L), ms, u, v.add(q * L), vs, inner) },
        _ => {}
    }
}

/// `product` over 3 vectors of positions: RB x 3 sums, three operands and one broadcast fill
/// the 16 registers exactly, which LLVM, left to itself, does not manage (it spills a sum on
/// every input: half the speed), so the loop is written out.
#[target_feature(enable = "avx2,fma")]
unsafe fn product3(m: *mut f32, ms: usize, u: *const f32, v: *const f32, vs: usize, inner: usize) {
    let zero = _mm256_setzero_ps();
    let [mut a0, mut a1, mut a2, mut a3] = [[zero; 3]; RB];
    if inner > 0 {
        // SAFETY: reads v[i * vs..+24] and u[i * RB..+RB] for i < inner, inside the caller's
        // bounds; the twelve sums stay in ymm0..ymm11.
        unsafe {
            std::arch::asm!(
                "2:",
                "vmovups ymm12, ymmword ptr [{v}]",
                "vmovups ymm13, ymmword ptr [{v} + 32]",
                "vmovups ymm14, ymmword ptr [{v} + 64]",
                "vbroadcastss ymm15, dword ptr [{u}]",
                "vfmadd231ps ymm0, ymm15, ymm12",
                "vfmadd231ps ymm1, ymm15, ymm13",
                "vfmadd231ps ymm2, ymm15, ymm14",
                "vbroadcastss ymm15, dword ptr [{u} + 4]",
                "vfmadd231ps ymm3, ymm15, ymm12",
                "vfmadd231ps ymm4, ymm15, ymm13",
                "vfmadd231ps ymm5, ymm15, ymm14",
                "vbroadcastss ymm15, dword ptr [{u} + 8]",
                "vfmadd231ps ymm6, ymm15, ymm12",
                "vfmadd231ps ymm7, ymm15, ymm13",
                "vfmadd231ps ymm8, ymm15, ymm14",
                "vbroadcastss ymm15, dword ptr [{u} + 12]",
                "vfmadd231ps ymm9, ymm15, ymm12",
                "vfmadd231ps ymm10, ymm15, ymm13",
                "vfmadd231ps ymm11, ymm15, ymm14",
                "add {u}, 16",
                "add {v}, {vstep}",
                "cmp {u}, {end}",
                "jne 2b",
                u = inout(reg) u => _,
                end = in(reg) u.add(inner * RB),
                v = inout(reg) v => _,
                vstep = in(reg) vs * 4,
                inout("ymm0") a0[0], inout("ymm1") a0[1], inout("ymm2") a0[2],
                inout("ymm3") a1[0], inout("ymm4") a1[1], inout("ymm5") a1[2],
                inout("ymm6") a2[0], inout("ymm7") a2[1], inout("ymm8") a2[2],
                inout("ymm9") a3[0], inout("ymm10") a3[1], inout("ymm11") a3[2],
                out("ymm12") _, out("ymm13") _, out("ymm14") _, out("ymm15") _,
                options(nostack, readonly),
            );
        }
    }
    for (r, row) in [a0, a1, a2, a3].iter().enumerate() {
        for (n, a) in row.iter().enumerate() {
            // SAFETY: the caller's bounds.
            unsafe { _mm256_storeu_ps(m.add(r * ms + n * L), *a) };
        }
    }
}

/// `product` over N < 3 vectors of positions (RB x N sums: room enough for LLVM).
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn product_n<const N: usize>(
    m: *mut f32,
    ms: usize,
    u: *const f32,
    v: *const f32,
    vs: usize,
    inner: usize,
) {
    let mut acc = [[_mm256_setzero_ps(); N]; RB];
    for i in 0..inner {
        // SAFETY: `product`'s bounds.
        let x: [__m256; N] =
            std::array::from_fn(|n| unsafe { _mm256_loadu_ps(v.add(i * vs + n * L)) });
        for (r, row) in acc.iter_mut().enumerate() {
            // SAFETY: as above.
            let w = unsafe { _mm256_broadcast_ss(&*u.add(i * RB + r)) };
            for (a, x) in row.iter_mut().zip(x) {
                *a = _mm256_fmadd_ps(w, x, *a);
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        for (n, a) in row.iter().enumerate() {
            // SAFETY: as above.
            unsafe { _mm256_storeu_ps(m.add(r * ms + n * L), *a) };
        }
    }
}

/// s[c * ss + r] += sum_q y[r * ys + q] * v[c * vs + q] for the RB rows r, c < cols and q <
/// nv * 8 (the weight gradient's products of one transform entry): three columns at a time
/// (RB x 3 registers of sums), then the one or two left over; each column's RB sums are
/// reduced together (`sums4`) and added to s as one short vector.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn grad_product(
    s: *mut f32,
    ss: usize,
    y: *const f32,
    ys: usize,
    v: *const f32,
    vs: usize,
    cols: usize,
    nv: usize,
) {
    let mut c = 0;
    // SAFETY (all): the caller's bounds: y[r * ys..+nv*8], v[c * vs..+nv*8], s[c * ss..+RB].
    while c + 3 <= cols {
        unsafe { grad3(s.add(c * ss), ss, y, ys, v.add(c * vs), vs, nv) };
        c += 3;
    }
    match cols - c {
        2 => unsafe { grad_n::<2>(s.add(c * ss), ss, y, ys, v.add(c * vs), vs, nv) },
        1 => unsafe { grad_n::<1>(s.add(c * ss), ss, y, ys, v.add(c * vs), vs, nv) },
        _ => {}
    }
}

/// The four lane sums of a, b, c, d: [sum a, sum b, sum c, sum d].
#[target_feature(enable = "avx2,fma")]
fn sums4(a: __m256, b: __m256, c: __m256, d: __m256) -> __m128 {
    let ab = _mm256_hadd_ps(a, b);
    let cd = _mm256_hadd_ps(c, d);
    let abcd = _mm256_hadd_ps(ab, cd);
    _mm_add_ps(
        _mm256_castps256_ps128(abcd),
        _mm256_extractf128_ps::<1>(abcd),
    )
}

/// s[r] += the sums of acc[r] (RB = 4 rows of one column).
#[target_feature(enable = "avx2,fma")]
unsafe fn add_sums(s: *mut f32, acc: [__m256; RB]) {
    let [a, b, c, d] = acc;
    // SAFETY: the caller's bounds: s[..RB].
    unsafe { _mm_storeu_ps(s, _mm_add_ps(_mm_loadu_ps(s), sums4(a, b, c, d))) }
}

/// `grad_product` over 3 columns: RB x 3 sums, three operands and one row of y fill the 16
/// registers exactly (written out, as `product3`).
#[target_feature(enable = "avx2,fma")]
unsafe fn grad3(
    s: *mut f32,
    ss: usize,
    y: *const f32,
    ys: usize,
    v: *const f32,
    vs: usize,
    nv: usize,
) {
    let zero = _mm256_setzero_ps();
    let [mut a0, mut a1, mut a2, mut a3] = [[zero; 3]; RB];
    if nv > 0 {
        // SAFETY: reads v[c * vs + q..+8] for c < 3 and y[r * ys + q..+8] for r < RB, q <
        // nv * 8, inside the caller's bounds; the twelve sums stay in ymm0..ymm11.
        unsafe {
            std::arch::asm!(
                "2:",
                "vmovups ymm12, ymmword ptr [{v}]",
                "vmovups ymm13, ymmword ptr [{v} + {vs}]",
                "vmovups ymm14, ymmword ptr [{v} + 2*{vs}]",
                "vmovups ymm15, ymmword ptr [{y}]",
                "vfmadd231ps ymm0, ymm15, ymm12",
                "vfmadd231ps ymm1, ymm15, ymm13",
                "vfmadd231ps ymm2, ymm15, ymm14",
                "vmovups ymm15, ymmword ptr [{y} + {ys}]",
                "vfmadd231ps ymm3, ymm15, ymm12",
                "vfmadd231ps ymm4, ymm15, ymm13",
                "vfmadd231ps ymm5, ymm15, ymm14",
                "vmovups ymm15, ymmword ptr [{y} + 2*{ys}]",
                "vfmadd231ps ymm6, ymm15, ymm12",
                "vfmadd231ps ymm7, ymm15, ymm13",
                "vfmadd231ps ymm8, ymm15, ymm14",
                "vmovups ymm15, ymmword ptr [{y3}]",
                "vfmadd231ps ymm9, ymm15, ymm12",
                "vfmadd231ps ymm10, ymm15, ymm13",
                "vfmadd231ps ymm11, ymm15, ymm14",
                "add {v}, 32",
                "add {y}, 32",
                "add {y3}, 32",
                "cmp {v}, {end}",
                "jne 2b",
                v = inout(reg) v => _,
                end = in(reg) v.add(nv * L),
                vs = in(reg) vs * 4,
                y = inout(reg) y => _,
                y3 = inout(reg) y.add(3 * ys) => _,
                ys = in(reg) ys * 4,
                inout("ymm0") a0[0], inout("ymm1") a0[1], inout("ymm2") a0[2],
                inout("ymm3") a1[0], inout("ymm4") a1[1], inout("ymm5") a1[2],
                inout("ymm6") a2[0], inout("ymm7") a2[1], inout("ymm8") a2[2],
                inout("ymm9") a3[0], inout("ymm10") a3[1], inout("ymm11") a3[2],
                out("ymm12") _, out("ymm13") _, out("ymm14") _, out("ymm15") _,
                options(nostack, readonly),
            );
        }
    }
    for n in 0..3 {
        // SAFETY: the caller's bounds: s[n * ss..+RB].
        unsafe { add_sums(s.add(n * ss), [a0[n], a1[n], a2[n], a3[n]]) };
    }
}

/// `grad_product` over N < 3 columns (RB x N sums: room enough for LLVM).
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn grad_n<const N: usize>(
    s: *mut f32,
    ss: usize,
    y: *const f32,
    ys: usize,
    v: *const f32,
    vs: usize,
    nv: usize,
) {
    let mut acc = [[_mm256_setzero_ps(); RB]; N];
    for q in 0..nv {
        // SAFETY: `grad_product`'s bounds.
        let d: [__m256; RB] =
            std::array::from_fn(|r| unsafe { _mm256_loadu_ps(y.add(r * ys + q * L)) });
        for (n, col) in acc.iter_mut().enumerate() {
            // SAFETY: as above.
            let x = unsafe { _mm256_loadu_ps(v.add(n * vs + q * L)) };
            for (a, d) in col.iter_mut().zip(d) {
                *a = _mm256_fmadd_ps(d, x, *a);
            }
        }
    }
    for (n, col) in acc.into_iter().enumerate() {
        // SAFETY: as above.
        unsafe { add_sums(s.add(n * ss), col) };
    }
}
