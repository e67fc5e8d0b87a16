//! Depthwise 2-D convolution on a GPU (`kernels/depthwise.cu`), mirroring `nn::depthwise`
//! (NCHW, groups = channels, weights [C, 1, K, K], stride, zero padding, optional bias):
//! direct kernels, one thread per output forward and per input pixel for the input gradient (a
//! gather, no atomics); the weight gradient one block per (channel, tap) and the bias gradient
//! one block per channel (`conv_bias_grad_f32`), each a fixed-order reduction.

use cudarc::driver::{CudaView, CudaViewMut};

use super::elem::Elem;
use super::launch::{blocks_cfg, grid_stride_cfg};
use super::layout::Layout;
use super::shape::{fit_i32, need};
use super::{conv, fail, CudaError, Gpu};
use crate::nn::grouped::ConvGeom;

/// The kernels' ints [B, C, H, W, K, stride, pad, OH, OW], after checking the geometry (a
/// depthwise one: OC = C), every buffer's length (name, has, needs) and the 32-bit sizes.
fn ints(
    gpu: &Gpu,
    what: &str,
    b: usize,
    g: &ConvGeom,
    lens: &[(&str, usize, usize)],
) -> Result<[i32; 9], CudaError> {
    if g.oc != g.c || g.c == 0 || g.k == 0 || g.stride == 0 {
        let e = format!(
            "{}->{} channels, kernel {}, stride {}: not a depthwise geometry",
            g.c, g.oc, g.k, g.stride
        );
        return Err(fail(gpu, what, e));
    }
    need(what, lens).map_err(|e| fail(gpu, what, e))?;
    let sizes = [
        ("the batch", b),
        ("C", g.c),
        ("H", g.h),
        ("W", g.w),
        ("K", g.k),
        ("the stride", g.stride),
        ("the padding", g.pad),
        ("OH", g.oh),
        ("OW", g.ow),
        ("C*K*K", g.c * g.k * g.k),
    ];
    fit_i32(what, &sizes).map_err(|e| fail(gpu, what, e))?;
    Ok([b, g.c, g.h, g.w, g.k, g.stride, g.pad, g.oh, g.ow].map(|v| v as i32))
}

/// out[B,C,OH,OW] = inp[B,C,H,W] (*) w[C,1,K,K] per channel (+ bias[C] when given). As
/// `nn::depthwise::dwconv_forward`.
pub fn dwconv_forward<E: Elem>(
    gpu: &Gpu,
    out: &mut CudaViewMut<'_, E>,
    inp: &CudaView<'_, E>,
    w: &CudaView<'_, f32>,
    bias: Option<&CudaView<'_, f32>>,
    b: usize,
    g: &ConvGeom,
) -> Result<(), CudaError> {
    let (n_in, n_out) = (b * g.c * g.h * g.w, b * g.c * g.oh * g.ow);
    let lens = [
        ("out", out.len(), n_out),
        ("inp", inp.len(), n_in),
        ("w", w.len(), g.c * g.k * g.k),
        ("bias", bias.map_or(g.c, |v| v.len()), g.c),
    ];
    let [bi, c, h, wd, k, s, p, oh, ow] = ints(gpu, "depthwise conv forward", b, g, &lens)?;
    if n_out == 0 {
        return Ok(());
    }
    // without a bias the kernel reads none: any valid buffer stands in
    let (bias, has_bias) = match bias {
        Some(v) => (v, 1i32),
        None => (w, 0),
    };
    let cfg = grid_stride_cfg(n_out);
    try_launch!(
        gpu,
        named!(E, "dwconv_forward"),
        cfg,
        &mut *out,
        inp,
        w,
        bias,
        &has_bias,
        &bi,
        &c,
        &h,
        &wd,
        &k,
        &s,
        &p,
        &oh,
        &ow
    )
}

/// dinp[B,C,H,W] = d/dinp (overwritten; skipped when `None`), dw[C,1,K,K] += d/dw, and
/// dbias[C] += the sums of dout per channel when given. As `nn::depthwise::dwconv_backward`.
#[allow(clippy::too_many_arguments)]
pub fn dwconv_backward<E: Elem>(
    gpu: &Gpu,
    dinp: Option<&mut CudaViewMut<'_, E>>,
    dw: &mut CudaViewMut<'_, f32>,
    dbias: Option<&mut CudaViewMut<'_, f32>>,
    dout: &CudaView<'_, E>,
    inp: &CudaView<'_, E>,
    w: &CudaView<'_, f32>,
    b: usize,
    g: &ConvGeom,
) -> Result<(), CudaError> {
    let (n_in, n_out, kk) = (b * g.c * g.h * g.w, b * g.c * g.oh * g.ow, g.c * g.k * g.k);
    let lens = [
        ("dinp", dinp.as_ref().map_or(n_in, |d| d.len()), n_in),
        ("dw", dw.len(), kk),
        ("dbias", dbias.as_ref().map_or(g.c, |d| d.len()), g.c),
        ("dout", dout.len(), n_out),
        ("inp", inp.len(), n_in),
        ("w", w.len(), kk),
    ];
    let [bi, c, h, wd, k, s, p, oh, ow] = ints(gpu, "depthwise conv backward", b, g, &lens)?;
    if n_out == 0 {
        return Ok(());
    }
    if let Some(db) = dbias {
        conv::bias_grad(gpu, db, dout, b, g.c, g.oh * g.ow, Layout::Nchw)?;
    }
    try_launch!(
        gpu,
        named!(E, "dwconv_backward_weight"),
        blocks_cfg(kk),
        &mut *dw,
        dout,
        inp,
        &bi,
        &c,
        &h,
        &wd,
        &k,
        &s,
        &p,
        &oh,
        &ow
    )?;
    if let Some(d) = dinp {
        try_launch!(
            gpu,
            named!(E, "dwconv_backward_input"),
            grid_stride_cfg(n_in),
            &mut *d,
            dout,
            w,
            &bi,
            &c,
            &h,
            &wd,
            &k,
            &s,
            &p,
            &oh,
            &ow
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::kernels::{HEADERS, SOURCES};
    use super::super::launch::THREADS;

    /// The block-per-item reductions size their shared memory for a fixed block; `blocks_cfg`
    /// launches THREADS per block: they must agree or items lose terms.
    #[test]
    fn the_reduction_blocks_are_the_launch_block() {
        for (file, define) in [
            ("depthwise.cu", "#define DW_BLOCK "),
            ("bn.cuh", "#define BN_BLOCK "),
        ] {
            let (_, src) = (SOURCES.iter().chain(HEADERS))
                .find(|(f, _)| *f == file)
                .unwrap();
            let block: u32 = src
                .lines()
                .find_map(|l| l.strip_prefix(define))
                .unwrap_or_else(|| panic!("{file} defines {define}"))
                .trim()
                .parse()
                .unwrap();
            assert_eq!(block, THREADS, "{file}");
            assert!(block.is_power_of_two(), "the tree reduction halves it");
        }
    }
}
