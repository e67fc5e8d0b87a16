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
    // SAFETY: the asserts above guarantee every index reached through these strides,
    // (m-1)*rs + (k-1)*cs etc., lies inside the slices; C does not alias A or B (&mut).
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            alpha,
            a.as_ptr(),
            rsa,
            csa,
            b.as_ptr(),
            rsb,
            csb,
            beta,
            c.as_mut_ptr(),
            n as isize,
            1,
        );
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
    use crate::rng::Rng;

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
}
