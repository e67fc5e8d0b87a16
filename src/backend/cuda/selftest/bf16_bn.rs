//! `bf16_ops`'s batch-norm checks: the bf16 kernels against the fp32 ones on the same
//! inputs, in each layout and each kernel walk (NCHW a value or a 16-byte vector of a plane a
//! thread; channels last pairs or 16-byte vectors of channels).

use super::bf16_ops::{down, down32, up, Got, Inputs, B, C, H, N, W};
use crate::backend::cuda::bn;
use crate::backend::cuda::elem::Elem;
use crate::backend::cuda::layout::{laid, unlaid, Layout};
use crate::backend::cuda::{on, Gpu};
use crate::nn::bn::BnGeom;
use crate::nn::ops::Act;

/// What `batch_norm` outputs, in NCHW and channels last.
const BN_NAMES: [&str; 7] = [
    "batch norm+relu forward",
    "batch norm statistics",
    "batch norm running statistics",
    "batch norm+relu backward",
    "batch norm weight gradient",
    "batch norm bias gradient",
    "batch norm+relu6 inference",
];
const BN_NAMES_NHWC: [&str; 7] = [
    "channels-last batch norm+relu forward",
    "channels-last batch norm statistics",
    "channels-last batch norm running statistics",
    "channels-last batch norm+relu backward",
    "channels-last batch norm weight gradient",
    "channels-last batch norm bias gradient",
    "channels-last batch norm+relu6 inference",
];
const BN_NAMES_ODD: [&str; 7] = [
    "batch norm+relu forward, planes of 27 (a value a thread)",
    "batch norm statistics, planes of 27",
    "batch norm running statistics, planes of 27",
    "batch norm+relu backward, planes of 27",
    "batch norm weight gradient, planes of 27",
    "batch norm bias gradient, planes of 27",
    "batch norm+relu6 inference, planes of 27",
];
const BN_NAMES_WIDE: [&str; 7] = [
    "channels-last batch norm+relu forward, 16 channels (16-byte vectors)",
    "channels-last batch norm statistics, 16 channels",
    "channels-last batch norm running statistics, 16 channels",
    "channels-last batch norm+relu backward, 16 channels",
    "channels-last batch norm weight gradient, 16 channels",
    "channels-last batch norm bias gradient, 16 channels",
    "channels-last batch norm+relu6 inference, 16 channels",
];

/// The geometries `batch_norm` runs over the N inputs: C channels of 72 positions (NCHW: 16-byte
/// vectors of a plane; channels last: pairs of channels), and 16 channels of 27 (NCHW: a value
/// a thread; channels last: 16-byte vectors of channels).
const BN_SHAPE: (usize, usize, usize) = (B, C, H * W);
const BN_SHAPE_WIDE: (usize, usize, usize) = (4, 16, N / 64);

/// Batch norm of `E` over `shape` = [B, C, HW] (B*C*HW = N) in `layout` (the inputs laid out
/// so, the outputs moved back): training forward with ReLU, its statistics, backward,
/// inference with ReLU6. The per-channel parameters repeat the inputs' C ones.
fn batch_norm<E: Elem>(
    gpu: &Gpu,
    inp: &Inputs,
    (shape, layout): ((usize, usize, usize), Layout),
    names: [&'static str; 7],
) -> Got {
    let s = &gpu.stream;
    let (b, c, hw) = shape;
    let x = up::<E>(gpu, &laid(layout, &inp.x, shape))?;
    let y = up::<E>(gpu, &laid(layout, &inp.y, shape))?;
    let (xv, yv) = (x.slice(..), y.slice(..));
    let g = BnGeom { b, c, hw };
    let per_channel = |v: &[f32]| (0..c).map(|i| v[i % C]).collect::<Vec<f32>>();
    let (wh, bh) = (per_channel(&inp.w), per_channel(&inp.bias));
    let mut rh = per_channel(&inp.running[..C]);
    rh.extend(per_channel(&inp.running[C..]));
    let (w, bias) = (up::<f32>(gpu, &wh)?, up::<f32>(gpu, &bh)?);
    let mut running = up::<f32>(gpu, &rh)?;
    let mut saved = s
        .alloc_zeros::<f32>(2 * c)
        .map_err(on(gpu.index, "allocate"))?;
    let mut scratch = (s.alloc_zeros::<f64>(bn::scratch_len(layout, c, b * hw)))
        .map_err(on(gpu.index, "allocate"))?;
    let mut t = up::<E>(gpu, &inp.y)?;
    let count = bn::forward_train(
        gpu,
        None,
        &mut scratch.slice_mut(..),
        &mut saved.slice_mut(..),
        &mut running.slice_mut(..),
        &mut t.slice_mut(..),
        (&xv, &w.slice(..), &bias.slice(..)),
        (g, layout),
        Act::Relu,
    )?;
    let mut out = vec![(names[0], unlaid(layout, &down(gpu, &t, N)?, shape))];
    out.push((names[1], down32(gpu, &saved, 2 * c)?));
    out.push((names[2], down32(gpu, &running, 2 * c)?));
    let mut dx = up::<E>(gpu, &inp.x)?;
    let (mut gw, mut gb) = (up::<f32>(gpu, &wh)?, up::<f32>(gpu, &bh)?);
    bn::backward(
        gpu,
        None,
        &mut scratch.slice_mut(..),
        Some(&mut dx.slice_mut(..)),
        (&mut gw.slice_mut(..), &mut gb.slice_mut(..)),
        (&yv, &xv),
        (&saved.slice(..), &w.slice(..), &bias.slice(..)),
        (g, layout),
        bn::Taken::Over(count),
        Act::Relu,
    )?;
    out.push((names[3], unlaid(layout, &down(gpu, &dx, N)?, shape)));
    out.push((names[4], down32(gpu, &gw, c)?));
    out.push((names[5], down32(gpu, &gb, c)?));
    bn::forward_eval(
        gpu,
        &mut t.slice_mut(..),
        &running.slice(..),
        (&xv, &w.slice(..), &bias.slice(..)),
        (g, layout),
        Act::Relu6,
    )?;
    out.push((names[6], unlaid(layout, &down(gpu, &t, N)?, shape)));
    Ok(out)
}

/// Batch norm of `E` over [B, C, H*W] and [4, 16, 27], in each layout.
pub(super) fn batch_norms<E: Elem>(gpu: &Gpu, inp: &Inputs) -> Got {
    let mut out = Vec::new();
    for (how, names) in [
        ((BN_SHAPE, Layout::Nchw), BN_NAMES),
        ((BN_SHAPE, Layout::Nhwc), BN_NAMES_NHWC),
        ((BN_SHAPE_WIDE, Layout::Nchw), BN_NAMES_ODD),
        ((BN_SHAPE_WIDE, Layout::Nhwc), BN_NAMES_WIDE),
    ] {
        out.extend(batch_norm::<E>(gpu, inp, how, names)?);
    }
    Ok(out)
}
