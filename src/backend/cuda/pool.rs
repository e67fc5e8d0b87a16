//! 2-D max pooling on a GPU, mirroring `nn::pool` (NCHW, KxK windows moved by `stride`, no
//! padding, floor mode, u32 argmax within the image plane): one launch over every plane of every
//! image each way. The backward pass is a gather per input pixel over the windows that hold it,
//! so overlapping windows need no atomics and the result is the CPU's, bit for bit. Padded max
//! pooling, average pooling (padding counted) and global average pooling likewise mirror
//! `nn::pool`'s `maxpool2d_padded_*`, `avgpool2d_*` and `gap_*` (`kernels/avgpool.cu`). Each
//! takes the replica's layout (`layout::Layout`): channels last, the same windows and values.

use cudarc::driver::{CudaView, CudaViewMut};

use super::elem::Elem;
use super::launch::grid_stride_cfg;
use super::layout::Layout;
use super::shape::{fit_i32, need, PoolShape};
use super::{fail, CudaError, Gpu};
use crate::nn::window::Window;

/// out[B,C,OH,OW] = max of inp[B,C,H,W] over each KxK window moved by `stride`;
/// argmax[B,C,OH,OW] = the winner's index iy*W + ix inside its HxW plane (the first maximum in
/// row-major order on ties; a NaN wins). As `nn::pool::maxpool2d_forward`.
#[allow(clippy::too_many_arguments)]
pub fn maxpool2d_forward<E: Elem>(
    gpu: &Gpu,
    out: &mut CudaViewMut<'_, E>,
    argmax: &mut CudaViewMut<'_, u32>,
    inp: &CudaView<'_, E>,
    b: usize,
    c: usize,
    h: usize,
    w: usize,
    k: usize,
    stride: usize,
    layout: Layout,
) -> Result<(), CudaError> {
    let what = "maxpool2d forward";
    let s = PoolShape::new(b, c, h, w, k, stride).map_err(|e| fail(gpu, what, e))?;
    s.need(&[
        ("inp", inp.len(), s.inp_len()),
        ("out", out.len(), s.out_len()),
        ("argmax", argmax.len(), s.out_len()),
    ])
    .map_err(|e| fail(gpu, what, e))?;
    if s.out_len() == 0 {
        return Ok(());
    }
    let [bi, ci, hi, wi, ki, si, ohi, owi] = s.ints();
    let cfg = grid_stride_cfg(s.out_len());
    let nhwc = layout.code();
    try_launch!(
        gpu,
        named!(E, "maxpool_forward"),
        cfg,
        &mut *out,
        &mut *argmax,
        inp,
        &bi,
        &ci,
        &hi,
        &wi,
        &ki,
        &si,
        &ohi,
        &owi,
        &nhwc
    )
}

/// dinp[B,C,H,W] = 0, then dinp[plane, argmax] += dout[B,C,OH,OW], for the argmax of
/// `maxpool2d_forward` (each inside its window). As `nn::pool::maxpool2d_backward`.
#[allow(clippy::too_many_arguments)]
pub fn maxpool2d_backward<E: Elem>(
    gpu: &Gpu,
    dinp: &mut CudaViewMut<'_, E>,
    dout: &CudaView<'_, E>,
    argmax: &CudaView<'_, u32>,
    b: usize,
    c: usize,
    h: usize,
    w: usize,
    k: usize,
    stride: usize,
    layout: Layout,
) -> Result<(), CudaError> {
    let what = "maxpool2d backward";
    let s = PoolShape::new(b, c, h, w, k, stride).map_err(|e| fail(gpu, what, e))?;
    s.need(&[
        ("dinp", dinp.len(), s.inp_len()),
        ("dout", dout.len(), s.out_len()),
        ("argmax", argmax.len(), s.out_len()),
    ])
    .map_err(|e| fail(gpu, what, e))?;
    if s.inp_len() == 0 {
        return Ok(());
    }
    let [bi, ci, hi, wi, ki, si, ohi, owi] = s.ints();
    let cfg = grid_stride_cfg(s.inp_len());
    let nhwc = layout.code();
    try_launch!(
        gpu,
        named!(E, "maxpool_backward"),
        cfg,
        &mut *dinp,
        dout,
        argmax,
        &bi,
        &ci,
        &hi,
        &wi,
        &ki,
        &si,
        &ohi,
        &owi,
        &nhwc
    )
}

/// The kernels' ints [B, C, H, W, K, stride, pad, OH, OW] of a window over `b` images, after
/// checking the buffers (name, has, needs) and the 32-bit sizes.
fn window_ints(
    gpu: &Gpu,
    what: &str,
    b: usize,
    g: &Window,
    lens: &[(&str, usize, usize)],
) -> Result<[i32; 9], CudaError> {
    if g.k == 0 || g.stride == 0 {
        return Err(fail(
            gpu,
            what,
            format!("a {}x{} window moved by {}", g.k, g.k, g.stride),
        ));
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
        ("H*W", g.h * g.w),
    ];
    fit_i32(what, &sizes).map_err(|e| fail(gpu, what, e))?;
    Ok([b, g.c, g.h, g.w, g.k, g.stride, g.pad, g.oh, g.ow].map(|v| v as i32))
}

/// Max pooling with padding that never wins: out[B,C,OH,OW] and argmax (the winner's index in
/// its HxW plane). As `nn::pool::maxpool2d_padded_forward`.
pub fn maxpool2d_padded_forward<E: Elem>(
    gpu: &Gpu,
    out: &mut CudaViewMut<'_, E>,
    argmax: &mut CudaViewMut<'_, u32>,
    inp: &CudaView<'_, E>,
    b: usize,
    g: &Window,
    layout: Layout,
) -> Result<(), CudaError> {
    let (n_in, n_out) = (b * g.c * g.h * g.w, b * g.c * g.oh * g.ow);
    let lens = [
        ("out", out.len(), n_out),
        ("argmax", argmax.len(), n_out),
        ("inp", inp.len(), n_in),
    ];
    let [bi, c, h, w, k, s, p, oh, ow] = window_ints(gpu, "padded maxpool2d forward", b, g, &lens)?;
    if n_out == 0 {
        return Ok(());
    }
    let cfg = grid_stride_cfg(n_out);
    let nhwc = layout.code();
    try_launch!(
        gpu,
        named!(E, "maxpool_padded_forward"),
        cfg,
        &mut *out,
        &mut *argmax,
        inp,
        &bi,
        &c,
        &h,
        &w,
        &k,
        &s,
        &p,
        &oh,
        &ow,
        &nhwc
    )
}

/// dinp[B,C,H,W] = 0, then each dout routed to its window's winner. As
/// `nn::pool::maxpool2d_padded_backward`.
pub fn maxpool2d_padded_backward<E: Elem>(
    gpu: &Gpu,
    dinp: &mut CudaViewMut<'_, E>,
    dout: &CudaView<'_, E>,
    argmax: &CudaView<'_, u32>,
    b: usize,
    g: &Window,
    layout: Layout,
) -> Result<(), CudaError> {
    let (n_in, n_out) = (b * g.c * g.h * g.w, b * g.c * g.oh * g.ow);
    let lens = [
        ("dinp", dinp.len(), n_in),
        ("dout", dout.len(), n_out),
        ("argmax", argmax.len(), n_out),
    ];
    let [bi, c, h, w, k, s, p, oh, ow] =
        window_ints(gpu, "padded maxpool2d backward", b, g, &lens)?;
    if n_in == 0 {
        return Ok(());
    }
    let cfg = grid_stride_cfg(n_in);
    let nhwc = layout.code();
    try_launch!(
        gpu,
        named!(E, "maxpool_padded_backward"),
        cfg,
        &mut *dinp,
        dout,
        argmax,
        &bi,
        &c,
        &h,
        &w,
        &k,
        &s,
        &p,
        &oh,
        &ow,
        &nhwc
    )
}

/// out[B,C,OH,OW] = each window's sum / (K*K), padding counted as zeros. As
/// `nn::pool::avgpool2d_forward`.
pub fn avgpool2d_forward<E: Elem>(
    gpu: &Gpu,
    out: &mut CudaViewMut<'_, E>,
    inp: &CudaView<'_, E>,
    b: usize,
    g: &Window,
    layout: Layout,
) -> Result<(), CudaError> {
    let (n_in, n_out) = (b * g.c * g.h * g.w, b * g.c * g.oh * g.ow);
    let lens = [("out", out.len(), n_out), ("inp", inp.len(), n_in)];
    let [bi, c, h, w, k, s, p, oh, ow] = window_ints(gpu, "avgpool2d forward", b, g, &lens)?;
    if n_out == 0 {
        return Ok(());
    }
    let inv = 1.0 / (g.k * g.k) as f32;
    let cfg = grid_stride_cfg(n_out);
    let nhwc = layout.code();
    try_launch!(
        gpu,
        named!(E, "avgpool_forward"),
        cfg,
        &mut *out,
        inp,
        &bi,
        &c,
        &h,
        &w,
        &k,
        &s,
        &p,
        &oh,
        &ow,
        &inv,
        &nhwc
    )
}

/// dinp[B,C,H,W] = each dout / (K*K) spread over its window (overwritten). As
/// `nn::pool::avgpool2d_backward`.
pub fn avgpool2d_backward<E: Elem>(
    gpu: &Gpu,
    dinp: &mut CudaViewMut<'_, E>,
    dout: &CudaView<'_, E>,
    b: usize,
    g: &Window,
    layout: Layout,
) -> Result<(), CudaError> {
    let (n_in, n_out) = (b * g.c * g.h * g.w, b * g.c * g.oh * g.ow);
    let lens = [("dinp", dinp.len(), n_in), ("dout", dout.len(), n_out)];
    let [bi, c, h, w, k, s, p, oh, ow] = window_ints(gpu, "avgpool2d backward", b, g, &lens)?;
    if n_in == 0 {
        return Ok(());
    }
    let inv = 1.0 / (g.k * g.k) as f32;
    let cfg = grid_stride_cfg(n_in);
    let nhwc = layout.code();
    try_launch!(
        gpu,
        named!(E, "avgpool_backward"),
        cfg,
        &mut *dinp,
        dout,
        &bi,
        &c,
        &h,
        &w,
        &k,
        &s,
        &p,
        &oh,
        &ow,
        &inv,
        &nhwc
    )
}

/// The checked ints (planes, HW) of a global average pooling, and 1/HW.
fn gap_ints(
    gpu: &Gpu,
    what: &str,
    planes: usize,
    hw: usize,
    lens: &[(&str, usize, usize)],
) -> Result<(i32, i32, f32), CudaError> {
    need(what, lens).map_err(|e| fail(gpu, what, e))?;
    let all = planes
        .checked_mul(hw)
        .ok_or_else(|| fail(gpu, what, "planes*HW overflows"))?;
    let sizes = [("the planes", planes), ("HW", hw), ("planes*HW", all)];
    fit_i32(what, &sizes).map_err(|e| fail(gpu, what, e))?;
    Ok((planes as i32, hw as i32, 1.0 / hw.max(1) as f32))
}

/// out[B, C] = the mean of each of inp[B, C, HW]'s planes (inp in `layout`). As
/// `nn::pool::gap_forward`.
pub fn gap_forward<E: Elem>(
    gpu: &Gpu,
    out: &mut CudaViewMut<'_, E>,
    inp: &CudaView<'_, E>,
    (b, c): (usize, usize),
    hw: usize,
    layout: Layout,
) -> Result<(), CudaError> {
    let planes = b * c;
    let lens = [("out", out.len(), planes), ("inp", inp.len(), planes * hw)];
    let (pi, hwi, inv) = gap_ints(gpu, "global average pooling forward", planes, hw, &lens)?;
    if planes == 0 {
        return Ok(());
    }
    let cfg = grid_stride_cfg(planes);
    let (ci, nhwc) = (c as i32, layout.code());
    try_launch!(
        gpu,
        named!(E, "gap_forward"),
        cfg,
        &mut *out,
        inp,
        &pi,
        &hwi,
        &inv,
        &ci,
        &nhwc
    )
}

/// dinp[B, C, HW] (in `layout`) = dout[B, C] / HW over each plane (overwritten). As
/// `nn::pool::gap_backward`.
pub fn gap_backward<E: Elem>(
    gpu: &Gpu,
    dinp: &mut CudaViewMut<'_, E>,
    dout: &CudaView<'_, E>,
    (b, c): (usize, usize),
    hw: usize,
    layout: Layout,
) -> Result<(), CudaError> {
    let planes = b * c;
    let lens = [
        ("dinp", dinp.len(), planes * hw),
        ("dout", dout.len(), planes),
    ];
    let (pi, hwi, inv) = gap_ints(gpu, "global average pooling backward", planes, hw, &lens)?;
    if planes * hw == 0 {
        return Ok(());
    }
    let cfg = grid_stride_cfg(planes * hw);
    let (ci, nhwc) = (c as i32, layout.code());
    try_launch!(
        gpu,
        named!(E, "gap_backward"),
        cfg,
        &mut *dinp,
        dout,
        &pi,
        &hwi,
        &inv,
        &ci,
        &nhwc
    )
}
