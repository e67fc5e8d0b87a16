//! 2-D max pooling on a GPU, mirroring `nn::pool` (NCHW, KxK windows moved by `stride`, no
//! padding, floor mode, u32 argmax within the image plane): one launch over every plane of every
//! image each way. The backward pass is a gather per input pixel over the windows that hold it,
//! so overlapping windows need no atomics and the result is the CPU's, bit for bit.

use cudarc::driver::{CudaView, CudaViewMut};

use super::launch::grid_stride_cfg;
use super::shape::PoolShape;
use super::{CudaError, Gpu};

fn fail(gpu: &Gpu, what: &str, detail: String) -> CudaError {
    CudaError {
        gpu: gpu.index,
        what: what.to_string(),
        detail,
    }
}

/// out[B,C,OH,OW] = max of inp[B,C,H,W] over each KxK window moved by `stride`;
/// argmax[B,C,OH,OW] = the winner's index iy*W + ix inside its HxW plane (the first maximum in
/// row-major order on ties; a NaN wins). As `nn::pool::maxpool2d_forward`.
#[allow(clippy::too_many_arguments)]
pub fn maxpool2d_forward(
    gpu: &Gpu,
    out: &mut CudaViewMut<'_, f32>,
    argmax: &mut CudaViewMut<'_, u32>,
    inp: &CudaView<'_, f32>,
    b: usize,
    c: usize,
    h: usize,
    w: usize,
    k: usize,
    stride: usize,
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
    try_launch!(
        gpu,
        "maxpool_forward_f32",
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
        &owi
    )
}

/// dinp[B,C,H,W] = 0, then dinp[plane, argmax] += dout[B,C,OH,OW], for the argmax of
/// `maxpool2d_forward` (each inside its window). As `nn::pool::maxpool2d_backward`.
#[allow(clippy::too_many_arguments)]
pub fn maxpool2d_backward(
    gpu: &Gpu,
    dinp: &mut CudaViewMut<'_, f32>,
    dout: &CudaView<'_, f32>,
    argmax: &CudaView<'_, u32>,
    b: usize,
    c: usize,
    h: usize,
    w: usize,
    k: usize,
    stride: usize,
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
    try_launch!(
        gpu,
        "maxpool_backward_f32",
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
        &owi
    )
}
