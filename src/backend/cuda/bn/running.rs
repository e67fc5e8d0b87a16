//! Batch norm on its running statistics: inference (`forward_eval`), and training where
//! `--bn-stats` fixes them (`forward_fixed`, which keeps them for `backward`'s `Taken::Fixed`).

use cudarc::driver::{CudaView, CudaViewMut};

use super::grid::{parts_cfg, spread, Walk};
use super::{apply, ints, walk};
use crate::backend::cuda::elem::Elem;
use crate::backend::cuda::launch::{act_code, grid_stride_cfg, start};
use crate::backend::cuda::layout::Layout;
use crate::backend::cuda::{CudaError, Gpu};
use crate::nn::bn::BnGeom;
use crate::nn::model::BN_EPS;
use crate::nn::ops::Act;

/// The activations and per-channel tensors of one op checked (`saved`, where it keeps them,
/// beside them): their walk and [B, C, HW] as the kernels' ints.
fn checked<E: Elem>(
    gpu: &Gpu,
    what: &str,
    (running, saved): (&CudaView<'_, f32>, Option<usize>),
    out: &CudaViewMut<'_, E>,
    (x, weight, bias): (&CudaView<'_, E>, &CudaView<'_, f32>, &CudaView<'_, f32>),
    (g, layout): (BnGeom, Layout),
) -> Result<(Walk, [i32; 3]), CudaError> {
    let all = g.b * g.c * g.hw;
    let mut lens = vec![
        ("running", running.len(), 2 * g.c),
        ("weight", weight.len(), g.c),
        ("bias", bias.len(), g.c),
        ("x", x.len(), all),
        ("out", out.len(), all),
    ];
    lens.extend(saved.map(|n| ("saved", n, 2 * g.c)));
    let walk = walk::<E>(layout, g, &[start(gpu, x), start(gpu, out)]);
    Ok((walk, ints(gpu, what, (g, walk), &lens)?))
}

/// Training on the running statistics (`BnPass::Fixed`): saved[2C] = the running mean and
/// 1/sqrt(running var + eps), and out from them as `bn_apply`; `running` is left as it is. As
/// `nn::bn::bn_forward_fixed`.
pub fn forward_fixed<E: Elem>(
    gpu: &Gpu,
    saved: &mut CudaViewMut<'_, f32>,
    running: &CudaView<'_, f32>,
    out: &mut CudaViewMut<'_, E>,
    xs: (&CudaView<'_, E>, &CudaView<'_, f32>, &CudaView<'_, f32>),
    geom: (BnGeom, Layout),
    act: Act,
) -> Result<(), CudaError> {
    let what = "batch norm forward";
    let (walk, ints) = checked(gpu, what, (running, Some(saved.len())), out, xs, geom)?;
    let (c, eps) = (ints[1], BN_EPS);
    try_launch!(
        gpu,
        "bn_fixed_saved_f32",
        grid_stride_cfg(geom.0.c),
        &mut *saved,
        running,
        &c,
        &eps
    )?;
    let (x, weight, bias) = xs;
    let applied = (x, &saved.as_view(), weight, bias);
    apply(gpu, out, applied, (geom.0, walk, ints), act)
}

/// Inference: out = act((x - running mean) / sqrt(running var + eps) * weight + bias). As
/// `nn::bn::bn_forward_eval`.
pub fn forward_eval<E: Elem>(
    gpu: &Gpu,
    out: &mut CudaViewMut<'_, E>,
    running: &CudaView<'_, f32>,
    xs: (&CudaView<'_, E>, &CudaView<'_, f32>, &CudaView<'_, f32>),
    geom: (BnGeom, Layout),
    act: Act,
) -> Result<(), CudaError> {
    let what = "batch norm inference";
    let (walk, [b, c, hw]) = checked(gpu, what, (running, None), out, xs, geom)?;
    let g = geom.0;
    if g.b * g.c * g.hw == 0 {
        return Ok(());
    }
    let (x, weight, bias) = xs;
    let (eps, act) = (BN_EPS, act_code(act));
    let cfg = parts_cfg(walk, g.c, spread(walk, g.c, g.b * g.hw));
    try_launch!(
        gpu,
        bn_kernel!(E, walk, "eval"),
        cfg,
        &mut *out,
        x,
        running,
        weight,
        bias,
        &b,
        &c,
        &hw,
        &eps,
        &act
    )
}
