//! Conversions between fp32 and bf16 on the device (`kernels/convert.cu`), for bf16 mixed
//! precision (`half::bf16` on the host side), rounded as `nn::bf16` rounds (the selftest compares
//! them bit for bit).

use cudarc::driver::{CudaView, CudaViewMut};

use super::elem::{bf16, Elem};
use super::launch::grid_stride_cfg;
use super::ops::elements;
use super::{CudaError, Gpu};

/// out[n] = the fp32 value of the bf16 x (`nn::bf16::from_bf16`, exact).
pub fn from_bf16(
    gpu: &Gpu,
    out: &mut CudaViewMut<'_, f32>,
    x: &CudaView<'_, bf16>,
    n: usize,
) -> Result<(), CudaError> {
    let ni = elements(gpu, "from bf16", n, &[("out", out.len()), ("x", x.len())])?;
    if n == 0 {
        return Ok(());
    }
    try_launch!(gpu, "bf16_to_f32", grid_stride_cfg(n), &mut *out, x, &ni)
}

/// out[n] = x as element type `E`: copied (f32) or rounded to bf16 (`nn::bf16::to_bf16`).
pub fn to_elem<E: Elem>(
    gpu: &Gpu,
    out: &mut CudaViewMut<'_, E>,
    x: &CudaView<'_, f32>,
    n: usize,
) -> Result<(), CudaError> {
    let ni = elements(gpu, "convert", n, &[("out", out.len()), ("x", x.len())])?;
    if n == 0 {
        return Ok(());
    }
    match E::f32_view_mut(out) {
        Some(out) => (gpu
            .stream
            .memcpy_dtod(&x.slice(..n), &mut out.slice_mut(..n)))
        .map_err(super::on(gpu.index, "copy")),
        None => try_launch!(gpu, "f32_to_bf16", grid_stride_cfg(n), &mut *out, x, &ni),
    }
}

/// acc[n] += the fp32 value of x: a bf16 weight gradient added into the fp32 gradients. `E` is
/// bf16 (generic only so that a replica's code compiles for either element type).
pub fn add_to_f32<E: Elem>(
    gpu: &Gpu,
    acc: &mut CudaViewMut<'_, f32>,
    x: &CudaView<'_, E>,
    n: usize,
) -> Result<(), CudaError> {
    assert!(E::BF16, "add_to_f32 adds bf16 values");
    let ni = elements(
        gpu,
        "add bf16 to f32",
        n,
        &[("acc", acc.len()), ("x", x.len())],
    )?;
    if n == 0 {
        return Ok(());
    }
    try_launch!(
        gpu,
        "bf16_add_to_f32",
        grid_stride_cfg(n),
        &mut *acc,
        x,
        &ni
    )
}
