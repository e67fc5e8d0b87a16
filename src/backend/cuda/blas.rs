//! Row-major matrix products through cuBLAS (column-major), in one helper.
//!
//! A row-major matrix X[r, c] is, read column-major, X^T with leading dimension c. So the
//! row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T: call cuBLAS with the
//! operands swapped, m and n swapped, and each operand's transpose flag taken from how it is
//! stored. `ColMajor::for_row_major` is that mapping; it is tested below against a reference
//! column-major GEMM written from the BLAS definition, so it is checked without a GPU.

use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasMath_t, cublasOperation_t};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::{CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut};

use super::elem::Elem;

use crate::nn::precision::Precision;

/// Ends a cuBLAS handle, whose drop panics after a sticky CUDA error: the failure is ignored
/// (nothing more can be done with it), and while the thread is already panicking the handle is
/// leaked instead (a second panic would abort the process).
pub fn close(blas: CudaBlas) {
    if std::thread::panicking() {
        std::mem::forget(blas);
    } else {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(blas)));
    }
}

/// cuBLAS's math mode for `p`: TF32 tensor cores for every fp32 product (inputs rounded to
/// TF32's 10-bit mantissa, fp32 accumulation), or strict fp32 (cuBLAS's default).
pub fn math_mode(p: Precision) -> cublasMath_t {
    match p {
        Precision::Tf32 => cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH,
        // bf16 products go through `gemm` with bf16 operands; the rest stays strict fp32
        Precision::Fp32 | Precision::Bf16 => cublasMath_t::CUBLAS_DEFAULT_MATH,
    }
}

/// Makes every product on `blas` compute in `p` (`math_mode`).
pub fn set_precision(
    blas: &CudaBlas,
    p: Precision,
) -> Result<(), cudarc::cublas::result::CublasError> {
    // SAFETY: the handle is alive (borrowed from its owner); setting its math mode touches no
    // buffer.
    unsafe { cudarc::cublas::sys::cublasSetMathMode(*blas.handle(), math_mode(p)) }.result()
}

/// The arguments of one column-major `sgemm` call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColMajor {
    /// Transpose the first operand (our B) / the second (our A).
    pub trans_first: bool,
    pub trans_second: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub ld_first: usize,
    pub ld_second: usize,
    pub ldc: usize,
}

impl ColMajor {
    /// Row-major C[m,n] = op(A)[m,k] op(B)[k,n], with `ta` (A stored [k,m]) and `tb` (B stored
    /// [n,k]) as in `gemm::sgemm`, as a column-major call computing C^T = op(B)^T op(A)^T whose
    /// first operand is B and second is A.
    pub fn for_row_major(ta: bool, tb: bool, m: usize, n: usize, k: usize) -> ColMajor {
        ColMajor {
            // B stored [k,n] reads column-major as op(B)^T already (ld n); stored [n,k] it reads
            // as op(B) and needs a transpose (ld k). Likewise A.
            trans_first: tb,
            trans_second: ta,
            m: n,
            n: m,
            k,
            ld_first: if tb { k } else { n },
            ld_second: if ta { m } else { k },
            ldc: n,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cuBLAS sgemm {m}x{n}x{k} failed: {source:?}")]
pub struct GemmError {
    m: usize,
    n: usize,
    k: usize,
    source: cudarc::cublas::result::CublasError,
}

fn op(t: bool) -> cublasOperation_t {
    if t {
        cublasOperation_t::CUBLAS_OP_T
    } else {
        cublasOperation_t::CUBLAS_OP_N
    }
}

/// C[m,n] = alpha * op(A) op(B) + beta * C, all row-major device buffers (see `gemm::sgemm`).
#[allow(clippy::too_many_arguments)]
pub fn sgemm(
    blas: &CudaBlas,
    ta: bool,
    tb: bool,
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: &CudaView<'_, f32>,
    b: &CudaView<'_, f32>,
    beta: f32,
    c: &mut CudaViewMut<'_, f32>,
) -> Result<(), GemmError> {
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    if m == 0 || n == 0 {
        return Ok(());
    }
    let cm = ColMajor::for_row_major(ta, tb, m, n, k);
    let int = |v: usize| i32::try_from(v).expect("matrix dimension above i32::MAX");
    let cfg = GemmConfig {
        transa: op(cm.trans_first),
        transb: op(cm.trans_second),
        m: int(cm.m),
        n: int(cm.n),
        k: int(cm.k),
        alpha,
        // cuBLAS requires ld >= 1 even for an empty inner dimension
        lda: int(cm.ld_first.max(1)),
        ldb: int(cm.ld_second.max(1)),
        beta,
        ldc: int(cm.ldc),
    };
    // SAFETY: the assert above and `ColMajor` (tested below) keep every access cuBLAS makes
    // inside the three buffers; they live on this handle's stream's context.
    unsafe { blas.gemm(cfg, b, a, c) }.map_err(|source| GemmError { m, n, k, source })
}

/// C[m,n] = alpha * op(A) op(B) + beta * C, row-major as in `sgemm`, with A and B of element
/// type `E` and C of `O`: all f32 through `sgemm`; bf16 x bf16 into bf16 or into f32 through
/// `cublasGemmEx` with fp32 accumulation (`CUBLAS_COMPUTE_32F`, the bf16 tensor cores).
/// `stream` is the handle's.
#[allow(clippy::too_many_arguments)]
pub fn gemm<E: Elem, O: Elem>(
    blas: &CudaBlas,
    stream: &CudaStream,
    (ta, tb): (bool, bool),
    (m, n, k): (usize, usize, usize),
    alpha: f32,
    a: &CudaView<'_, E>,
    b: &CudaView<'_, E>,
    beta: f32,
    c: &mut CudaViewMut<'_, O>,
) -> Result<(), GemmError> {
    // all fp32: cuBLAS's sgemm, in the handle's math mode (TF32 or strict), as it always was
    if let (Some(a), Some(b), Some(c)) = (E::f32_view(a), E::f32_view(b), O::f32_view_mut(c)) {
        return sgemm(blas, ta, tb, m, n, k, alpha, a, b, beta, c);
    }
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    if m == 0 || n == 0 {
        return Ok(());
    }
    let cm = ColMajor::for_row_major(ta, tb, m, n, k);
    let int = |v: usize| i32::try_from(v).expect("matrix dimension above i32::MAX");
    let (pa, _ra) = a.device_ptr(stream);
    let (pb, _rb) = b.device_ptr(stream);
    let (pc, _rc) = c.device_ptr_mut(stream);
    // SAFETY: as `sgemm`: the assert and `ColMajor` keep every access inside the buffers, whose
    // element types are the ones named to cuBLAS; alpha and beta are f32 as COMPUTE_32F wants.
    unsafe {
        cudarc::cublas::result::gemm_ex(
            *blas.handle(),
            op(cm.trans_first),
            op(cm.trans_second),
            int(cm.m),
            int(cm.n),
            int(cm.k),
            (&alpha) as *const f32 as *const _,
            pb as *const _,
            E::CUDA,
            int(cm.ld_first.max(1)),
            pa as *const _,
            E::CUDA,
            int(cm.ld_second.max(1)),
            (&beta) as *const f32 as *const _,
            pc as *mut _,
            O::CUDA,
            int(cm.ldc),
            cublasComputeType_t::CUBLAS_COMPUTE_32F,
            cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(|source| GemmError { m, n, k, source })
}

/// For each i < batch: C_i[m,n] = alpha * op(A_i) op(B_i) + beta * C_i, row-major as in `sgemm`,
/// where X_i starts at X + i*stride_x (a stride of 0 shares one matrix among all: the weights
/// of a convolution over a batch of images). One cuBLAS call; outputs must not overlap.
#[allow(clippy::too_many_arguments)]
pub fn sgemm_strided_batched(
    blas: &CudaBlas,
    ta: bool,
    tb: bool,
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    (a, stride_a): (&CudaView<'_, f32>, usize),
    (b, stride_b): (&CudaView<'_, f32>, usize),
    beta: f32,
    (c, stride_c): (&mut CudaViewMut<'_, f32>, usize),
    batch: usize,
) -> Result<(), GemmError> {
    let reach = |stride: usize, len: usize| (batch.max(1) - 1) * stride + len;
    assert!(
        a.len() >= reach(stride_a, m * k)
            && b.len() >= reach(stride_b, k * n)
            && c.len() >= reach(stride_c, m * n)
    );
    assert!(batch <= 1 || stride_c >= m * n, "overlapping outputs");
    if m == 0 || n == 0 || batch == 0 {
        return Ok(());
    }
    let strides = (stride_a, stride_b, stride_c);
    let cfg = batched_config(ta, tb, m, n, k, alpha, beta, strides, batch);
    // SAFETY: the asserts above and `ColMajor` (tested below) keep every access of every
    // batch member inside the three buffers; they live on this handle's stream's context.
    unsafe { blas.gemm_strided_batched(cfg, b, a, c) }.map_err(|source| GemmError {
        m,
        n,
        k,
        source,
    })
}

/// The cuBLAS call for `sgemm_strided_batched`: `ColMajor`'s mapping, and each operand's batch
/// stride moved with it (cuBLAS's first operand is our B, its second our A).
#[allow(clippy::too_many_arguments)]
fn batched_config(
    ta: bool,
    tb: bool,
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    beta: f32,
    (stride_a, stride_b, stride_c): (usize, usize, usize),
    batch: usize,
) -> StridedBatchedConfig<f32> {
    let cm = ColMajor::for_row_major(ta, tb, m, n, k);
    let int = |v: usize| i32::try_from(v).expect("matrix dimension above i32::MAX");
    let long = |v: usize| i64::try_from(v).expect("stride above i64::MAX");
    StridedBatchedConfig {
        gemm: GemmConfig {
            transa: op(cm.trans_first),
            transb: op(cm.trans_second),
            m: int(cm.m),
            n: int(cm.n),
            k: int(cm.k),
            alpha,
            lda: int(cm.ld_first.max(1)),
            ldb: int(cm.ld_second.max(1)),
            beta,
            ldc: int(cm.ldc),
        },
        batch_size: int(batch),
        stride_a: long(stride_b),
        stride_b: long(stride_a),
        stride_c: long(stride_c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::gemm::sgemm_naive;
    use crate::nn::rng::Rng;

    /// Column-major sgemm from the BLAS definition: C = alpha op(X) op(Y) + beta C, where X is
    /// m x k after op (stored with leading dimension ldx), Y is k x n after op.
    #[allow(clippy::too_many_arguments)]
    fn blas_sgemm(
        tx: bool,
        ty: bool,
        m: usize,
        n: usize,
        k: usize,
        alpha: f32,
        x: &[f32],
        ldx: usize,
        y: &[f32],
        ldy: usize,
        beta: f32,
        c: &mut [f32],
        ldc: usize,
    ) {
        let at = |buf: &[f32], ld: usize, r: usize, col: usize| buf[r + col * ld];
        for j in 0..n {
            for i in 0..m {
                let mut acc = 0.0f64;
                for p in 0..k {
                    let xv = if tx {
                        at(x, ldx, p, i)
                    } else {
                        at(x, ldx, i, p)
                    };
                    let yv = if ty {
                        at(y, ldy, j, p)
                    } else {
                        at(y, ldy, p, j)
                    };
                    acc += xv as f64 * yv as f64;
                }
                c[i + j * ldc] = alpha * acc as f32 + beta * c[i + j * ldc];
            }
        }
    }

    #[test]
    fn swapped_column_major_call_is_the_row_major_product() {
        let mut r = Rng::new(3);
        for &(m, n, k) in &[(1, 1, 1), (3, 5, 7), (8, 2, 5), (6, 9, 1)] {
            for ta in [false, true] {
                for tb in [false, true] {
                    let a: Vec<f32> = (0..m * k).map(|_| r.normal()).collect();
                    let b: Vec<f32> = (0..k * n).map(|_| r.normal()).collect();
                    let c0: Vec<f32> = (0..m * n).map(|_| r.normal()).collect();
                    let mut want = c0.clone();
                    sgemm_naive(ta, tb, m, n, k, 0.5, &a, &b, 2.0, &mut want);
                    let cm = ColMajor::for_row_major(ta, tb, m, n, k);
                    let mut got = c0.clone();
                    blas_sgemm(
                        cm.trans_first,
                        cm.trans_second,
                        cm.m,
                        cm.n,
                        cm.k,
                        0.5,
                        &b,
                        cm.ld_first,
                        &a,
                        cm.ld_second,
                        2.0,
                        &mut got,
                        cm.ldc,
                    );
                    for (g, w) in got.iter().zip(&want) {
                        assert!(
                            (g - w).abs() < 1e-4,
                            "{m}x{n}x{k} ta={ta} tb={tb}: {g} vs {w}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn strided_batches_move_each_stride_with_its_operand() {
        let mut r = Rng::new(4);
        let (m, n, k, batch) = (4, 3, 5, 3);
        for ta in [false, true] {
            for tb in [false, true] {
                // A shared by every batch member (stride 0, as a convolution's weights), B and
                // C strided with a gap
                let (sa, sb, sc) = (0, k * n + 2, m * n + 1);
                let a: Vec<f32> = (0..m * k).map(|_| r.normal()).collect();
                let b: Vec<f32> = (0..sb * batch).map(|_| r.normal()).collect();
                let c0: Vec<f32> = (0..sc * batch).map(|_| r.normal()).collect();
                let cfg = batched_config(ta, tb, m, n, k, 0.5, 2.0, (sa, sb, sc), batch);
                let g = cfg.gemm;
                let tr = |o| o == cublasOperation_t::CUBLAS_OP_T;
                let mut got = c0.clone();
                for i in 0..cfg.batch_size as usize {
                    let first = &b[i * cfg.stride_a as usize..];
                    let second = &a[i * cfg.stride_b as usize..];
                    let c = &mut got[i * cfg.stride_c as usize..];
                    blas_sgemm(
                        tr(g.transa),
                        tr(g.transb),
                        g.m as usize,
                        g.n as usize,
                        g.k as usize,
                        g.alpha,
                        first,
                        g.lda as usize,
                        second,
                        g.ldb as usize,
                        g.beta,
                        c,
                        g.ldc as usize,
                    );
                }
                let mut want = c0.clone();
                for i in 0..batch {
                    let bi = &b[i * sb..i * sb + k * n];
                    let ci = &mut want[i * sc..i * sc + m * n];
                    sgemm_naive(ta, tb, m, n, k, 0.5, &a, bi, 2.0, ci);
                }
                for (g, w) in got.iter().zip(&want) {
                    assert!((g - w).abs() < 1e-4, "ta={ta} tb={tb}: {g} vs {w}");
                }
            }
        }
    }
}
