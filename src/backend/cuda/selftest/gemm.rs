//! `selftest`'s check of the GEMM helper: all four transpose combinations against the CPU
//! GEMM in strict fp32, and (Ampere and newer) one product with cuBLAS's TF32 math mode.

use super::compare::{check, compare, Check};
use crate::backend::cuda::{blas, on, CudaError, Gpu};
use crate::nn::gemm::sgemm;
use crate::nn::precision::Precision;
use crate::nn::rng::Rng;

pub fn checks(gpu: &Gpu) -> Vec<Check> {
    let index = gpu.index;
    let mut out = Vec::new();
    let mut rng = Rng::new(5);
    let (m, n, k) = (67, 45, 129);
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let a: Vec<f32> = (0..m * k).map(|_| rng.normal()).collect();
        let b: Vec<f32> = (0..k * n).map(|_| rng.normal()).collect();
        let c: Vec<f32> = (0..m * n).map(|_| rng.normal()).collect();
        let mut want = c.clone();
        sgemm(ta, tb, m, n, k, 0.7, &a, &b, 0.3, &mut want);
        let got = product_on(gpu, Precision::Fp32, ta, tb, m, n, k, &a, &b, &c);
        out.push(check(
            format!(
                "gpu{index} gemm {}{}",
                if ta { "T" } else { "N" },
                if tb { "T" } else { "N" }
            ),
            got.map(|g| compare(&g, &want, 1e-3, 1e-3)),
        ));
    }
    // TF32 (Ampere and newer): inputs rounded to a 10-bit mantissa, so within ~2^-10 of each
    // term (k = 129 terms of ~1), and measurably off fp32: an exact product means the math
    // mode did not take
    if gpu.has_tf32() {
        let a: Vec<f32> = (0..m * k).map(|_| rng.normal()).collect();
        let b: Vec<f32> = (0..k * n).map(|_| rng.normal()).collect();
        let c: Vec<f32> = (0..m * n).map(|_| rng.normal()).collect();
        let mut want = c.clone();
        sgemm(false, false, m, n, k, 0.7, &a, &b, 0.3, &mut want);
        let got = product_on(gpu, Precision::Tf32, false, false, m, n, k, &a, &b, &c);
        let judged = got.and_then(|g| {
            let off = (g.iter().zip(&want)).fold(0.0f64, |w, (x, y)| w.max((x - y).abs() as f64));
            match off > 1e-5 {
                true => Ok(compare(&g, &want, 0.1, 1e-2)),
                false => Err(CudaError::new(
                    index,
                    "gemm in TF32",
                    format!("the product is strict fp32 (largest difference {off:.1e}): cuBLAS's TF32 math mode did not take"),
                )),
            }
        });
        out.push(check(format!("gpu{index} gemm NN tf32"), judged));
    }
    out
}

/// Used by `selftest`: one product through the helper, for comparing with the CPU.
#[allow(clippy::too_many_arguments)]
fn product_on(
    gpu: &Gpu,
    precision: Precision,
    ta: bool,
    tb: bool,
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    b: &[f32],
    c: &[f32],
) -> Result<Vec<f32>, CudaError> {
    let s = &gpu.stream;
    let index = gpu.index;
    let handle =
        cudarc::cublas::CudaBlas::new(s.clone()).map_err(on(index, "create cuBLAS handle"))?;
    blas::set_precision(&handle, precision).map_err(on(index, "set cuBLAS's math mode"))?;
    let da = s.clone_htod(a).map_err(on(index, "upload"))?;
    let db = s.clone_htod(b).map_err(on(index, "upload"))?;
    let mut dc = s.clone_htod(c).map_err(on(index, "upload"))?;
    let (av, bv) = (da.slice(..), db.slice(..));
    blas::sgemm(
        &handle,
        ta,
        tb,
        m,
        n,
        k,
        0.7,
        &av,
        &bv,
        0.3,
        &mut dc.slice_mut(..),
    )
    .map_err(|e| CudaError::new(gpu.index, "sgemm", e))?;
    s.clone_dtoh(&dc).map_err(on(index, "download"))
}
