//! Row-major single-precision matrix multiply: the one GEMM entry point of the CPU backend.
//!
//! Backed by `matrixmultiply` (single-threaded, so one worker thread is one core; see the
//! `gemm_compare` benchmark for why it was chosen). Transposes cost nothing: they are strides.

/// C[m,n] = alpha * op(A)[m,k] @ op(B)[k,n] + beta * C, all row-major.
/// `ta`: A is stored as [k,m] (so op(A) = A^T); `tb`: B is stored as [n,k].
#[allow(clippy::too_many_arguments)]
pub fn sgemm(
    ta: bool,
    tb: bool,
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: &[f32],
    b: &[f32],
    beta: f32,
    c: &mut [f32],
) {
    assert!(
        a.len() >= m * k,
        "gemm: A has {} elements, need {}",
        a.len(),
        m * k
    );
    assert!(
        b.len() >= k * n,
        "gemm: B has {} elements, need {}",
        b.len(),
        k * n
    );
    assert!(
        c.len() >= m * n,
        "gemm: C has {} elements, need {}",
        c.len(),
        m * n
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        c[..m * n].iter_mut().for_each(|x| *x *= beta);
        return;
    }
    let (rsa, csa) = if ta { (1, m as isize) } else { (k as isize, 1) };
    let (rsb, csb) = if tb { (1, k as isize) } else { (n as isize, 1) };
    let split = Split::choose(m, n, k, crate::nn::intraop::threads());
    let (pa, pb, pc) = (
        a.as_ptr() as usize,
        b.as_ptr() as usize,
        c.as_mut_ptr() as usize,
    );
    // Each part computes a block of C's rows (or columns): row i of op(A) starts at element
    // i*rsa, column j of op(B) at j*csb, and C[i][j] is element i*n + j.
    let part = |p: usize| {
        let (range, rows) = split.range(p, m, n);
        if range.is_empty() {
            return;
        }
        let (mm, nn, a0, b0, c0) = if rows {
            (
                range.len(),
                n,
                range.start as isize * rsa,
                0,
                range.start * n,
            )
        } else {
            (m, range.len(), 0, range.start as isize * csb, range.start)
        };
        // SAFETY: the asserts above guarantee every index reached through these strides,
        // (m-1)*rs + (k-1)*cs etc., lies inside the slices, and a part's block lies inside the
        // whole; the parts write disjoint blocks of C, which does not alias A or B (&mut), and
        // the slices outlive `intraop::run`.
        unsafe {
            matrixmultiply::sgemm(
                mm,
                k,
                nn,
                alpha,
                (pa as *const f32).offset(a0),
                rsa,
                csa,
                (pb as *const f32).offset(b0),
                rsb,
                csb,
                beta,
                (pc as *mut f32).add(c0),
                n as isize,
                1,
            );
        }
    };
    if split.parts == 1 {
        part(0);
    } else {
        crate::nn::intraop::run(split.parts, &part);
    }
}

/// Blocks of C's rows or columns are a multiple of this (the kernels' register tile size).
const ALIGN: usize = 16;
/// Products smaller than this many multiply-adds stay on one thread. Measured on the reference
/// model (2 cores): a split product is faster in isolation from ~3M multiply-adds, but in a
/// training step the halves of C then live in two cores' caches and the elementwise ops and
/// the optimizer pay to gather them; batch 32 lost 20% and batch 128 broke even, batch 512
/// (50M) gained 30-45%.
const MIN_SPLIT_WORK: usize = 1 << 24;

/// How a product is cut over intra-op threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Split {
    parts: usize,
    /// Along C's rows (each part packs all of B) or its columns (each part packs all of A):
    /// the larger side is cut, so the operand packed by every part is the smaller one.
    rows: bool,
    /// Rows or columns per part.
    block: usize,
}

impl Split {
    fn choose(m: usize, n: usize, k: usize, threads: usize) -> Split {
        let rows = m >= n;
        let side = if rows { m } else { n };
        let parts = if threads <= 1 || m * n * k < MIN_SPLIT_WORK {
            1
        } else {
            threads.min(side.div_ceil(ALIGN)).max(1)
        };
        let block = side.div_ceil(parts).next_multiple_of(ALIGN);
        Split { parts, rows, block }
    }

    /// Part `p`'s rows (or columns) of C, and whether they are rows.
    fn range(&self, p: usize, m: usize, n: usize) -> (std::ops::Range<usize>, bool) {
        let side = if self.rows { m } else { n };
        let start = (p * self.block).min(side);
        (start..((p + 1) * self.block).min(side), self.rows)
    }
}

/// The naive triple loop: the test oracle for `sgemm`.
#[allow(clippy::too_many_arguments)]
pub fn sgemm_naive(
    ta: bool,
    tb: bool,
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: &[f32],
    b: &[f32],
    beta: f32,
    c: &mut [f32],
) {
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0.0f64;
            for p in 0..k {
                let av = if ta { a[p * m + i] } else { a[i * k + p] };
                let bv = if tb { b[j * k + p] } else { b[p * n + j] };
                acc += av as f64 * bv as f64;
            }
            c[i * n + j] = alpha * acc as f32 + beta * c[i * n + j];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::rng::Rng;

    #[test]
    fn matches_naive_for_all_transpose_combinations() {
        let mut r = Rng::new(11);
        for &(m, n, k) in &[
            (1, 1, 1),
            (3, 5, 7),
            (17, 9, 33),
            (64, 10, 128),
            (5, 0, 3),
            (4, 6, 0),
        ] {
            for ta in [false, true] {
                for tb in [false, true] {
                    let a: Vec<f32> = (0..m * k).map(|_| r.normal()).collect();
                    let b: Vec<f32> = (0..k * n).map(|_| r.normal()).collect();
                    let c0: Vec<f32> = (0..m * n).map(|_| r.normal()).collect();
                    let mut c1 = c0.clone();
                    let mut c2 = c0.clone();
                    sgemm(ta, tb, m, n, k, 0.7, &a, &b, 0.3, &mut c1);
                    sgemm_naive(ta, tb, m, n, k, 0.7, &a, &b, 0.3, &mut c2);
                    for (x, y) in c1.iter().zip(&c2) {
                        assert!(
                            (x - y).abs() <= 1e-4 + 1e-4 * y.abs(),
                            "{m}x{n}x{k} ta={ta} tb={tb}: {x} vs {y}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn split_over_intra_op_threads_matches_naive_and_repeats_bit_for_bit() {
        let mut r = Rng::new(12);
        for &(m, n, k) in &[
            (300, 260, 256),
            (784, 128, 200),
            (64, 784, 400),
            (9, 2048, 1024),
        ] {
            for ta in [false, true] {
                for tb in [false, true] {
                    let a: Vec<f32> = (0..m * k).map(|_| r.normal()).collect();
                    let b: Vec<f32> = (0..k * n).map(|_| r.normal()).collect();
                    let c0: Vec<f32> = (0..m * n).map(|_| r.normal()).collect();
                    let mut again = c0.clone();
                    let mut split = c0.clone();
                    let mut naive = c0.clone();
                    crate::nn::intraop::install(crate::nn::intraop::for_worker(3, "test").unwrap());
                    assert!(
                        Split::choose(m, n, k, 3).parts > 1,
                        "{m}x{n}x{k} is not split"
                    );
                    sgemm(ta, tb, m, n, k, 0.7, &a, &b, 0.3, &mut split);
                    sgemm(ta, tb, m, n, k, 0.7, &a, &b, 0.3, &mut again);
                    crate::nn::intraop::install(None);
                    sgemm_naive(ta, tb, m, n, k, 0.7, &a, &b, 0.3, &mut naive);
                    assert_eq!(split, again, "{m}x{n}x{k} ta={ta} tb={tb}");
                    for (x, y) in split.iter().zip(&naive) {
                        assert!((x - y).abs() <= 1e-3 + 1e-4 * y.abs(), "{x} vs {y}");
                    }
                }
            }
        }
    }
}
