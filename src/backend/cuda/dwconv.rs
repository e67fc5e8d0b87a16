//! Depthwise 2-D convolution on a GPU (`kernels/depthwise.cu`), mirroring `nn::depthwise`
//! (NCHW, groups = channels, weights [C, 1, K, K], stride, zero padding, optional bias):
//! direct kernels, one thread per output forward and per input pixel for the input gradient (a
//! gather, no atomics); the weight gradient of a 3x3 window in one pass over dout and the input,
//! one block per (channel, part of its outputs) into `scratch`, then the parts added in order
//! (other windows one block per (channel, tap)); the bias gradient one block per channel
//! (`conv_bias_grad_f32`); each a fixed-order reduction. Where cuDNN is in use these run only
//! when `MGTOP_GPU_DEPTHWISE=own` asks (`asked`, NCHW runs): cuDNN's grouped convolutions are
//! the default until a GPU has measured the two side by side.

use cudarc::driver::{CudaView, CudaViewMut, LaunchConfig};

use super::elem::Elem;
use super::launch::{blocks_cfg, grid_stride_cfg, MAX_BLOCKS, SMALL, THREADS};
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

/// Blocks a 3x3 weight gradient aims at in all (channels x parts), and the fewest outputs of a
/// channel a part takes (4 a thread).
const WEIGHT_BLOCKS: usize = 1024;
const WEIGHT_PART_MIN: usize = 4 * THREADS as usize;

/// The parts a channel's B*OH*OW outputs are summed in by `dwconv_weight_parts3`: about
/// WEIGHT_BLOCKS blocks in all, each part at least WEIGHT_PART_MIN outputs (fixed by the sizes
/// alone).
fn weight_parts(b: usize, g: &ConvGeom) -> usize {
    let by_blocks = WEIGHT_BLOCKS.div_ceil(g.c.max(1));
    let by_size = (b * g.oh * g.ow).div_ceil(WEIGHT_PART_MIN);
    by_blocks.min(by_size).clamp(1, u16::MAX as usize)
}

/// Whether the weight gradient over `b` images of `g` takes the one-pass kernel: a 3x3 window,
/// and every offset of the input and of dout in an int.
fn one_pass(b: usize, g: &ConvGeom) -> bool {
    let fits = |v: Option<usize>| v.is_some_and(|v| v < SMALL);
    let plane = |h: usize, w: usize| b.checked_mul(g.c)?.checked_mul(h)?.checked_mul(w);
    g.k == 3 && fits(plane(g.h, g.w)) && fits(plane(g.oh, g.ow))
}

/// Floats of the scratch `dwconv_backward` needs over `b` images of `g`: the one-pass weight
/// gradient's partial sums (parts x C x 9), none for other windows.
pub fn weight_scratch_len(b: usize, g: &ConvGeom) -> usize {
    match one_pass(b, g) {
        true => weight_parts(b, g) * g.c * 9,
        false => 0,
    }
}

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
/// dbias[C] += the sums of dout per channel when given; `scratch` (at least
/// `weight_scratch_len(b, g)` floats) overwritten. As `nn::depthwise::dwconv_backward`.
#[allow(clippy::too_many_arguments)]
pub fn dwconv_backward<E: Elem>(
    gpu: &Gpu,
    dinp: Option<&mut CudaViewMut<'_, E>>,
    dw: &mut CudaViewMut<'_, f32>,
    dbias: Option<&mut CudaViewMut<'_, f32>>,
    scratch: &mut CudaViewMut<'_, f32>,
    (dout, inp, w): (&CudaView<'_, E>, &CudaView<'_, E>, &CudaView<'_, f32>),
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
        ("scratch", scratch.len(), weight_scratch_len(b, g)),
    ];
    let [bi, c, h, wd, k, s, p, oh, ow] = ints(gpu, "depthwise conv backward", b, g, &lens)?;
    if n_out == 0 {
        return Ok(());
    }
    if let Some(db) = dbias {
        conv::bias_grad(gpu, db, dout, b, g.c, g.oh * g.ow, Layout::Nchw)?;
    }
    if one_pass(b, g) {
        let parts = weight_parts(b, g);
        let cfg = LaunchConfig {
            grid_dim: (g.c.min(MAX_BLOCKS as usize) as u32, parts as u32, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        try_launch!(
            gpu,
            named!(E, "dwconv_weight_parts3"),
            cfg,
            &mut *scratch,
            dout,
            inp,
            &bi,
            &c,
            &h,
            &wd,
            &s,
            &p,
            &oh,
            &ow
        )?;
        let (pi, len, partial) = (parts as i32, kk as i32, scratch.as_view());
        try_launch!(
            gpu,
            "dwconv_weight_sum_f32",
            grid_stride_cfg(kk),
            &mut *dw,
            &partial,
            &pi,
            &len
        )?;
    } else {
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
    }
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
    use super::*;

    /// A depthwise geometry: C channels of HxW, a KxK window moved by `stride`, padded by
    /// `pad`.
    fn dw(c: usize, (h, w): (usize, usize), (k, stride, pad): (usize, usize, usize)) -> ConvGeom {
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

    #[test]
    fn a_3x3_weight_gradient_is_summed_in_parts_that_fill_the_gpu_and_its_scratch_holds_them() {
        // MobileNetV2's first depthwise layer at batch 64: 32 channels of 64x112x112 outputs,
        // 32 parts of them (1024 blocks); its last: 960 channels of 64x7x7, 2 parts
        let first = dw(32, (112, 112), (3, 1, 1));
        assert_eq!(weight_parts(64, &first), 32);
        assert_eq!(weight_scratch_len(64, &first), 32 * 32 * 9);
        let last = dw(960, (7, 7), (3, 1, 1));
        assert_eq!(weight_parts(64, &last), 2);
        // a stride-2 layer: its outputs decide; few outputs: one part of at least 4 a thread
        let down = dw(144, (56, 56), (3, 2, 1));
        assert_eq!(weight_parts(64, &down), (1024usize).div_ceil(144));
        assert_eq!(weight_parts(2, &dw(8, (4, 4), (3, 1, 1))), 1);
        assert_eq!(weight_parts(0, &first), 1);
        // other windows, or offsets past an int: the per-tap kernel, no scratch
        assert_eq!(weight_scratch_len(64, &dw(32, (56, 56), (5, 1, 2))), 0);
        let huge = dw(1024, (1024, 1024), (3, 1, 1));
        assert!(!one_pass(4, &huge));
        assert_eq!(weight_scratch_len(4, &huge), 0);
        assert!(one_pass(1, &dw(1024, (1024, 1024), (3, 2, 1))));
    }

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
