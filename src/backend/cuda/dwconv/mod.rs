//! Depthwise 2-D convolution on a GPU, mirroring `nn::depthwise` (groups = channels, weights
//! [C, 1, K, K], stride, zero padding, optional bias), in either activation layout: NCHW
//! (`nchw.rs`, `kernels/depthwise.cu`) or channels last (`nhwc.rs`,
//! `kernels/depthwise_nhwc.cu`). Direct kernels, one thread per output forward (channels last:
//! per output pixel and vector of channels) and per input pixel for the input gradient (a
//! gather, no atomics), the same sums in the same order in both layouts; the weight gradient
//! summed in parts of a channel's outputs into `scratch`, then the parts added in order; the
//! bias gradient one block per channel (`conv::bias_grad`); each a fixed-order reduction. Where
//! cuDNN is in use these run only when `MGTOP_GPU_DEPTHWISE=own` asks (`asked`): cuDNN's
//! grouped convolutions are the default until a GPU has measured the two side by side.

mod nchw;
mod nhwc;

use cudarc::driver::{CudaView, CudaViewMut};

use super::elem::Elem;
use super::launch::{grid_stride_cfg, start, SMALL};
use super::layout::Layout;
use super::shape::{fit_i32, need};
use super::{conv, fail, CudaError, Gpu};
use crate::nn::grouped::ConvGeom;

/// The depthwise convolutions' kernels, where cuDNN is in use: its grouped convolutions
/// (unset, `cudnn`) or the own kernels (`own`); another value is an error naming the choices.
pub fn asked(v: Option<&str>) -> Result<bool, String> {
    match v.map(str::to_ascii_lowercase).as_deref() {
        None | Some("") | Some("cudnn") => Ok(false),
        Some("own") => Ok(true),
        Some(other) => Err(format!(
            "MGTOP_GPU_DEPTHWISE={other} is not understood: use cudnn (the default) or own"
        )),
    }
}

/// Floats of the scratch `dwconv_backward` needs over `b` images of `g` in `layout`: the
/// weight gradient's partial sums (parts x C x K*K).
pub fn weight_scratch_len(b: usize, g: &ConvGeom, layout: Layout) -> usize {
    match layout {
        Layout::Nchw => nchw::weight_scratch_len(b, g),
        Layout::Nhwc => nhwc::weight_scratch_len(b, g),
    }
}

/// The kernels' ints [B, C, H, W, K, stride, pad, OH, OW], after checking the geometry (a
/// depthwise one: OC = C), every buffer's length (name, has, needs) and the 32-bit sizes (in
/// channels last also the pixel counts B*H*W and B*OH*OW, below `SMALL`).
fn ints(
    gpu: &Gpu,
    what: &str,
    (b, g, layout): (usize, &ConvGeom, Layout),
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
    // channels last walks the pixels in an int, a grid's stride past the last
    let pixels = [("B*H*W", b * g.h * g.w), ("B*OH*OW", b * g.oh * g.ow)];
    if let (Layout::Nhwc, Some((name, v))) = (layout, pixels.iter().find(|(_, v)| *v >= SMALL)) {
        let e = format!("{name} = {v} pixels is above the channels-last kernels' limit ({SMALL}): use a smaller batch");
        return Err(fail(gpu, what, e));
    }
    Ok([b, g.c, g.h, g.w, g.k, g.stride, g.pad, g.oh, g.ow].map(|v| v as i32))
}

/// out = inp (*) w[C,1,K,K] per channel (+ bias[C] when given), [B,C,OH,OW] from [B,C,H,W]
/// in NCHW, [B,OH,OW,C] from [B,H,W,C] channels last. As `nn::depthwise::dwconv_forward`.
#[allow(clippy::too_many_arguments)]
pub fn dwconv_forward<E: Elem>(
    gpu: &Gpu,
    out: &mut CudaViewMut<'_, E>,
    inp: &CudaView<'_, E>,
    w: &CudaView<'_, f32>,
    bias: Option<&CudaView<'_, f32>>,
    b: usize,
    g: &ConvGeom,
    layout: Layout,
) -> Result<(), CudaError> {
    let (n_in, n_out) = (b * g.c * g.h * g.w, b * g.c * g.oh * g.ow);
    let lens = [
        ("out", out.len(), n_out),
        ("inp", inp.len(), n_in),
        ("w", w.len(), g.c * g.k * g.k),
        ("bias", bias.map_or(g.c, |v| v.len()), g.c),
    ];
    let what = "depthwise conv forward";
    let ints = ints(gpu, what, (b, g, layout), &lens)?;
    if n_out == 0 {
        return Ok(());
    }
    // without a bias the kernel reads none: any valid buffer stands in
    let (bias, has_bias) = bias.map_or((w, 0i32), |v| (v, 1));
    let (name, cfg) = match layout {
        Layout::Nchw => nchw::forward::<E>(b, g),
        Layout::Nhwc => nhwc::forward::<E>(b, g, [start(gpu, out), start(gpu, inp)]),
    };
    let [bi, c, h, wd, k, s, p, oh, ow] = ints;
    try_launch!(
        gpu, name, cfg, &mut *out, inp, w, bias, &has_bias, &bi, &c, &h, &wd, &k, &s, &p, &oh, &ow
    )
}

/// dinp = d/dinp (overwritten; skipped when `None`), dw[C,1,K,K] += d/dw, and dbias[C] += the
/// sums of dout per channel when given, the activations in `layout`; `scratch` (at least
/// `weight_scratch_len(b, g, layout)` floats) overwritten. As `nn::depthwise::dwconv_backward`.
#[allow(clippy::too_many_arguments)]
pub fn dwconv_backward<E: Elem>(
    gpu: &Gpu,
    dinp: Option<&mut CudaViewMut<'_, E>>,
    dw: &mut CudaViewMut<'_, f32>,
    dbias: Option<&mut CudaViewMut<'_, f32>>,
    scratch: &mut CudaViewMut<'_, f32>,
    (dout, inp, w): (&CudaView<'_, E>, &CudaView<'_, E>, &CudaView<'_, f32>),
    (b, g, layout): (usize, &ConvGeom, Layout),
) -> Result<(), CudaError> {
    let (n_in, n_out, kk) = (b * g.c * g.h * g.w, b * g.c * g.oh * g.ow, g.c * g.k * g.k);
    let lens = [
        ("dinp", dinp.as_ref().map_or(n_in, |d| d.len()), n_in),
        ("dw", dw.len(), kk),
        ("dbias", dbias.as_ref().map_or(g.c, |d| d.len()), g.c),
        ("dout", dout.len(), n_out),
        ("inp", inp.len(), n_in),
        ("w", w.len(), kk),
        ("scratch", scratch.len(), weight_scratch_len(b, g, layout)),
    ];
    let what = "depthwise conv backward";
    let ints = ints(gpu, what, (b, g, layout), &lens)?;
    if n_out == 0 {
        return Ok(());
    }
    if let Some(db) = dbias {
        conv::bias_grad(gpu, db, dout, b, g.c, g.oh * g.ow, layout)?;
    }
    match layout {
        Layout::Nchw => nchw::backward_weight(gpu, dw, scratch, (dout, inp), b, g, ints)?,
        Layout::Nhwc => nhwc::backward_weight(gpu, dw, scratch, (dout, inp), b, g, ints)?,
    }
    let Some(d) = dinp else {
        return Ok(());
    };
    let (name, cfg) = match layout {
        Layout::Nchw => nchw::backward_input::<E>(b, g),
        Layout::Nhwc => nhwc::backward_input::<E>(b, g, [start(gpu, d), start(gpu, dout)]),
    };
    let [bi, c, h, wd, k, s, p, oh, ow] = ints;
    try_launch!(gpu, name, cfg, &mut *d, dout, w, &bi, &c, &h, &wd, &k, &s, &p, &oh, &ow)
}

/// dw[len] += the sum over `parts` of partial[parts, len], in part order
/// (`dwconv_weight_sum_f32`).
fn add_parts(
    gpu: &Gpu,
    dw: &mut CudaViewMut<'_, f32>,
    partial: &CudaView<'_, f32>,
    parts: usize,
    len: usize,
) -> Result<(), CudaError> {
    let (pi, li) = (parts as i32, len as i32);
    try_launch!(
        gpu,
        "dwconv_weight_sum_f32",
        grid_stride_cfg(len),
        &mut *dw,
        partial,
        &pi,
        &li
    )
}

#[cfg(test)]
mod tests {
    use super::super::kernels::{HEADERS, SOURCES};
    use super::super::launch::THREADS;
    use super::*;

    /// A depthwise geometry for the tests: C channels of HxW, a KxK window moved by `stride`,
    /// padded by `pad`.
    pub(super) fn geom(
        c: usize,
        (h, w): (usize, usize),
        (k, stride, pad): (usize, usize, usize),
    ) -> ConvGeom {
        let out = |n: usize| (n + 2 * pad - k) / stride + 1;
        ConvGeom {
            c,
            h,
            w,
            oc: c,
            k,
            stride,
            pad,
            oh: out(h),
            ow: out(w),
        }
    }

    #[test]
    fn depthwise_stays_with_cudnn_unless_own_is_asked_and_an_unknown_value_names_the_choices() {
        assert_eq!(asked(None), Ok(false));
        assert_eq!(asked(Some("")), Ok(false));
        assert_eq!(asked(Some("cudnn")), Ok(false));
        assert_eq!(asked(Some("own")), Ok(true));
        assert_eq!(asked(Some("OWN")), Ok(true));
        let e = asked(Some("fast")).unwrap_err();
        assert!(e.contains("MGTOP_GPU_DEPTHWISE=fast") && e.contains("cudnn (the default) or own"));
    }

    /// The block-per-item reductions size their shared memory for a fixed block; `blocks_cfg`
    /// and the channels-last launches have at most THREADS per block: they must agree or items
    /// lose terms.
    #[test]
    fn the_reduction_blocks_are_the_launch_block() {
        for (file, define) in [
            ("depthwise.cu", "#define DW_BLOCK "),
            ("depthwise_nhwc.cu", "#define DWN_THREADS "),
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
