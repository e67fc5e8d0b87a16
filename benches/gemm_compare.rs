//! Why the CPU backend uses `matrixmultiply`: both well-kept GEMM crates, single-threaded (one
//! worker = one core), on the three products of the reference model's training step
//! (784-128-10 MLP: forward X@W, weight gradient X^T@dY, input gradient dY@W^T).
//! Run: `cargo bench --bench gemm_compare`

mod common;

use mgtop::nn::gemm::sgemm;

/// gemm crate, row-major, same convention as `mgtop::nn::gemm::sgemm` with beta = 0.
#[allow(clippy::too_many_arguments)]
fn gemm_crate(
    ta: bool,
    tb: bool,
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
) {
    let (a_rs, a_cs) = if ta { (1, m as isize) } else { (k as isize, 1) };
    let (b_rs, b_cs) = if tb { (1, k as isize) } else { (n as isize, 1) };
    // SAFETY: the strides address only elements inside a (m*k), b (k*n) and c (m*n), whose
    // lengths the caller sized exactly; c does not alias a or b.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            a_cs,
            a_rs,
            b.as_ptr(),
            b_cs,
            b_rs,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

fn time(f: impl FnMut()) -> f64 {
    common::best_seconds(50, f)
}

type Shape = (&'static str, bool, bool, usize, usize, usize);

fn main() {
    println!(
        "{:<22} {:>5} {:>16} {:>16}",
        "product", "batch", "matrixmultiply", "gemm"
    );
    for batch in [32usize, 128, 512] {
        let shapes: [Shape; 3] = [
            ("forward  X@W", false, false, batch, 128, 784),
            ("grad W   X^T@dY", true, false, 784, 128, batch),
            ("grad X   dY@W^T", false, true, batch, 784, 128),
        ];
        for (name, ta, tb, m, n, k) in shapes {
            let a = vec![0.5f32; m * k];
            let b = vec![0.25f32; k * n];
            let mut c = vec![0.0f32; m * n];
            let flops = 2.0 * (m * n * k) as f64;
            let t1 = time(|| sgemm(ta, tb, m, n, k, 1.0, &a, &b, 0.0, &mut c));
            let t2 = time(|| gemm_crate(ta, tb, m, n, k, &a, &b, &mut c));
            println!(
                "{name:<22} {batch:>5} {:>11.1} GF/s {:>11.1} GF/s",
                flops / t1 / 1e9,
                flops / t2 / 1e9
            );
        }
    }
}
