//! Conversions between fp32 and bf16 on the device (`kernels/convert.cu`), for bf16 mixed
//! precision: bf16 kept as its 16 bits (`u16`), rounded as `nn::bf16` rounds (the selftest
//! compares them bit for bit).

use cudarc::driver::{CudaView, CudaViewMut};

use super::launch::grid_stride_cfg;
use super::ops::elements;
use super::{CudaError, Gpu};

/// out[n] = x rounded to bf16 (`nn::bf16::to_bf16`).
pub fn to_bf16(
    gpu: &Gpu,
    out: &mut CudaViewMut<'_, u16>,
    x: &CudaView<'_, f32>,
    n: usize,
) -> Result<(), CudaError> {
    let ni = elements(gpu, "to bf16", n, &[("out", out.len()), ("x", x.len())])?;
    if n == 0 {
        return Ok(());
    }
    try_launch!(gpu, "f32_to_bf16", grid_stride_cfg(n), &mut *out, x, &ni)
}

/// out[n] = the fp32 value of the bf16 x (`nn::bf16::from_bf16`, exact).
pub fn from_bf16(
    gpu: &Gpu,
    out: &mut CudaViewMut<'_, f32>,
    x: &CudaView<'_, u16>,
    n: usize,
) -> Result<(), CudaError> {
    let ni = elements(gpu, "from bf16", n, &[("out", out.len()), ("x", x.len())])?;
    if n == 0 {
        return Ok(());
    }
    try_launch!(gpu, "bf16_to_f32", grid_stride_cfg(n), &mut *out, x, &ni)
}
