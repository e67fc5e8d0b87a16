//! 1x1 stride-1 convolutions over channels-last activations as the matrix products they are:
//! with the B*H*W pixels as rows, inp[P, C] and out[P, OC] are row-major matrices and the
//! weights w[OC, C, 1, 1] are [OC, C], so
//!   forward          out[P, OC] = inp[P, C] w^T
//!   input gradient   dinp[P, C] = dout[P, OC] w
//!   weight gradient  dw[OC, C] += dout^T inp          (over every pixel of the batch)
//! through cuBLAS (`blas::gemm`: TF32 or strict fp32 as the handle's math mode; bf16 operands
//! with fp32 accumulation, the weight gradient accumulated straight into the fp32 gradients).
//! MobileNetV2's expansions and projections and ResNet-50's bottleneck ends are such layers.
//! Taken where `MGTOP_GPU_POINTWISE=gemm` asks (`asked`); cuDNN's convolutions are the default
//! until a GPU has measured the two side by side.

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaView, CudaViewMut};

use super::blas::gemm;
use super::elem::Elem;
use super::layout::Layout;
use super::{CudaError, Gpu};
use crate::nn::grouped::ConvGeom;

/// The pointwise convolutions' path, where cuDNN is in use: its convolutions (unset, `cudnn`) or
/// cuBLAS's products (`gemm`); another value is an error naming the choices.
pub fn asked(v: Option<&str>) -> Result<bool, String> {
    match v.map(str::to_ascii_lowercase).as_deref() {
        None | Some("") | Some("cudnn") => Ok(false),
        Some("gemm") => Ok(true),
        Some(other) => Err(format!(
            "MGTOP_GPU_POINTWISE={other} is not understood: use cudnn (the default) or gemm"
        )),
    }
}

/// Whether a convolution of `g` in `groups` over `layout` activations is a product here: 1x1,
/// stride 1, unpadded, ungrouped, channels last.
pub fn takes(layout: Layout, g: &ConvGeom, groups: usize) -> bool {
    layout == Layout::Nhwc && groups == 1 && g.k == 1 && g.stride == 1 && g.pad == 0
}

/// One row-major product C[m, n] = op(A) op(B): (A transposed, B transposed), (m, n, k).
type Product = ((bool, bool), (usize, usize, usize));

/// The three products over `b` images of `g` (see the top): forward, input gradient, weight
/// gradient.
fn products(b: usize, g: &ConvGeom) -> [Product; 3] {
    let p = b * g.h * g.w;
    [
        ((false, true), (p, g.oc, g.c)),
        ((false, false), (p, g.c, g.oc)),
        ((true, false), (g.oc, g.c, p)),
    ]
}

/// out[B*H*W, OC] = inp[B*H*W, C] w^T (`w` the weights of the activations' type).
pub fn forward<E: Elem>(
    gpu: &Gpu,
    blas: &CudaBlas,
    out: &mut CudaViewMut<'_, E>,
    inp: &CudaView<'_, E>,
    w: &CudaView<'_, E>,
    b: usize,
    g: &ConvGeom,
) -> Result<(), CudaError> {
    let [(t, mnk), _, _] = products(b, g);
    let run = gemm(blas, &gpu.stream, t, mnk, 1.0, inp, w, 0.0, out);
    run.map_err(|e| CudaError::new(gpu.index, "1x1 convolution forward", e.to_string()))
}

/// dinp = dout w (overwritten; skipped when `None`) and dw[OC, C] += dout^T inp, in fp32.
#[allow(clippy::too_many_arguments)]
pub fn backward<E: Elem>(
    gpu: &Gpu,
    blas: &CudaBlas,
    dinp: Option<&mut CudaViewMut<'_, E>>,
    dw: &mut CudaViewMut<'_, f32>,
    (dout, inp, w): (&CudaView<'_, E>, &CudaView<'_, E>, &CudaView<'_, E>),
    b: usize,
    g: &ConvGeom,
) -> Result<(), CudaError> {
    let [_, (td, mnk_d), (tw, mnk_w)] = products(b, g);
    let s = &gpu.stream;
    let failed = |e: super::blas::GemmError| {
        CudaError::new(gpu.index, "1x1 convolution backward", e.to_string())
    };
    gemm::<E, f32>(blas, s, tw, mnk_w, 1.0, dout, inp, 1.0, dw).map_err(failed)?;
    match dinp {
        Some(d) => gemm(blas, s, td, mnk_d, 1.0, dout, w, 0.0, d).map_err(failed),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cuda::layout::{laid, unlaid};
    use crate::backend::cuda::selftest::pointwise::by_definition;
    use crate::nn::gemm::sgemm_naive;
    use crate::nn::rng::Rng;

    #[test]
    fn pointwise_stays_with_cudnn_unless_gemm_is_asked_and_an_unknown_value_names_the_choices() {
        assert_eq!(asked(None), Ok(false));
        assert_eq!(asked(Some("cudnn")), Ok(false));
        assert_eq!(asked(Some("GEMM")), Ok(true));
        let e = asked(Some("blas")).unwrap_err();
        assert!(
            e.contains("MGTOP_GPU_POINTWISE=blas") && e.contains("cudnn (the default) or gemm")
        );
    }

    fn geom(
        c: usize,
        oc: usize,
        hw: (usize, usize),
        (k, stride, pad): (usize, usize, usize),
    ) -> ConvGeom {
        let out = |n: usize| (n + 2 * pad - k) / stride + 1;
        ConvGeom {
            c,
            h: hw.0,
            w: hw.1,
            oc,
            k,
            stride,
            pad,
            oh: out(hw.0),
            ow: out(hw.1),
        }
    }

    #[test]
    fn only_unpadded_ungrouped_1x1_stride_1_channels_last_convolutions_are_products() {
        let g = geom(24, 144, (56, 56), (1, 1, 0));
        assert!(takes(Layout::Nhwc, &g, 1));
        assert!(!takes(Layout::Nchw, &g, 1));
        assert!(!takes(Layout::Nhwc, &g, 2));
        assert!(!takes(Layout::Nhwc, &geom(24, 48, (56, 56), (1, 2, 0)), 1));
        assert!(!takes(Layout::Nhwc, &geom(24, 48, (56, 56), (1, 1, 1)), 1));
        assert!(!takes(Layout::Nhwc, &geom(24, 48, (56, 56), (3, 1, 1)), 1));
    }

    /// The three products, run by the CPU's row-major GEMM on channels-last tensors, against a
    /// 1x1 convolution written out over NCHW ones (selftest's definition): the same operands, transposes and sizes the
    /// GPU's cuBLAS calls get (`blas::gemm` maps row-major calls to cuBLAS, tested in blas.rs).
    #[test]
    fn the_products_are_the_convolution_forward_and_backward() {
        let (b, c, oc, hw) = (3, 5, 7, (4, 6));
        let g = geom(c, oc, hw, (1, 1, 0));
        let p = hw.0 * hw.1;
        let mut rng = Rng::new(5);
        let mut randn = |n: usize| (0..n).map(|_| rng.normal()).collect::<Vec<f32>>();
        let (x, w, dy, dw0) = (
            randn(b * c * p),
            randn(oc * c),
            randn(b * oc * p),
            randn(oc * c),
        );
        let [out, dx, dw] = by_definition(b, &g, (&x, &w, &dy), &dw0);
        let (xl, dyl) = (
            laid(Layout::Nhwc, &x, (b, c, p)),
            laid(Layout::Nhwc, &dy, (b, oc, p)),
        );
        let [((ta, tb), (m, n, k)), ((da, db), (dm, dn, dk)), ((wa, wb), (wm, wn, wk))] =
            products(b, &g);
        // (the oracle reads C even where beta is 0, as cuBLAS does not: zeros)
        let mut got = vec![0.0; b * oc * p];
        sgemm_naive(ta, tb, m, n, k, 1.0, &xl, &w, 0.0, &mut got);
        let mut got_dx = vec![0.0; b * c * p];
        sgemm_naive(da, db, dm, dn, dk, 1.0, &dyl, &w, 0.0, &mut got_dx);
        let mut got_dw = dw0.clone();
        sgemm_naive(wa, wb, wm, wn, wk, 1.0, &dyl, &xl, 1.0, &mut got_dw);
        let close = |a: &[f32], e: &[f32]| {
            a.iter()
                .zip(e)
                .all(|(a, e)| (a - e).abs() <= 1e-5 * (1.0 + e.abs()))
        };
        assert!(close(&unlaid(Layout::Nhwc, &got, (b, oc, p)), &out));
        assert!(close(&unlaid(Layout::Nhwc, &got_dx, (b, c, p)), &dx));
        assert!(close(&got_dw, &dw));
    }
}
