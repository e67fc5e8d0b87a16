//! The GPU's elementwise ops of the model graph (`kernels/eltwise.cu`), mirroring `nn::ops`:
//! ReLU6 and its gradient mask, the residual add, gradient accumulation, and dropout (its mask
//! drawn on the device from a counter-based hash, then a product); the residual add, its
//! backward and accumulation in 16-byte vectors. Every length is checked against the buffers
//! and the kernels' 32-bit sizes before a launch; an empty one launches nothing.

use cudarc::driver::{CudaView, CudaViewMut};

use super::elem::Elem;
use super::launch::{act_code, blocks_cfg, grid_stride_cfg};
use super::shape::{fit_i32, need};
use super::{fail, CudaError, Gpu};
use crate::nn::ops::Act;

/// `n` as the kernels' int, after checking every buffer holds at least `n` elements.
pub(crate) fn elements(
    gpu: &Gpu,
    what: &str,
    n: usize,
    lens: &[(&str, usize)],
) -> Result<i32, CudaError> {
    let lens: Vec<(&str, usize, usize)> =
        lens.iter().map(|&(name, have)| (name, have, n)).collect();
    need(what, &lens).map_err(|e| fail(gpu, what, e))?;
    fit_i32(what, &[("the length", n)]).map_err(|e| fail(gpu, what, e))?;
    Ok(n as i32)
}

/// A launch of a thread per 16-byte vector of `n` elements of `E` (`kernels/eltwise.cu`'s
/// vectorised ops, which take the elements one by one where a pointer is not aligned).
fn vector_cfg<E: Elem>(n: usize) -> cudarc::driver::LaunchConfig {
    grid_stride_cfg(n.div_ceil(16 / E::BYTES))
}

/// x[n] = min(max(x, 0), 6), in place. As `nn::ops::relu6_forward`.
pub fn relu6_forward<E: Elem>(
    gpu: &Gpu,
    x: &mut CudaViewMut<'_, E>,
    n: usize,
) -> Result<(), CudaError> {
    let ni = elements(gpu, "relu6 forward", n, &[("x", x.len())])?;
    if n == 0 {
        return Ok(());
    }
    try_launch!(
        gpu,
        named!(E, "relu6_forward"),
        grid_stride_cfg(n),
        &mut *x,
        &ni
    )
}

/// dx[n] *= (0 < out < 6), in place; `out` is the ReLU6's output. As `nn::ops::relu6_backward`.
pub fn relu6_backward<E: Elem>(
    gpu: &Gpu,
    dx: &mut CudaViewMut<'_, E>,
    out: &CudaView<'_, E>,
    n: usize,
) -> Result<(), CudaError> {
    let ni = elements(
        gpu,
        "relu6 backward",
        n,
        &[("dx", dx.len()), ("out", out.len())],
    )?;
    if n == 0 {
        return Ok(());
    }
    try_launch!(
        gpu,
        named!(E, "relu6_backward"),
        grid_stride_cfg(n),
        &mut *dx,
        out,
        &ni
    )
}

/// x[n] = max(x, 0), in place. As `nn::ops::relu_forward` (`kernels/relu.cu`).
pub fn relu_forward<E: Elem>(
    gpu: &Gpu,
    x: &mut CudaViewMut<'_, E>,
    n: usize,
) -> Result<(), CudaError> {
    let ni = elements(gpu, "relu forward", n, &[("x", x.len())])?;
    if n == 0 {
        return Ok(());
    }
    let cfg = super::launch::launch_cfg(n);
    try_launch!(gpu, named!(E, "relu_forward"), cfg, &mut *x, &ni)
}

/// dx[n] *= (out > 0), in place. As `nn::ops::relu_backward` (`kernels/relu.cu`).
pub fn relu_backward<E: Elem>(
    gpu: &Gpu,
    dx: &mut CudaViewMut<'_, E>,
    out: &CudaView<'_, E>,
    n: usize,
) -> Result<(), CudaError> {
    let ni = elements(
        gpu,
        "relu backward",
        n,
        &[("dx", dx.len()), ("out", out.len())],
    )?;
    if n == 0 {
        return Ok(());
    }
    let cfg = super::launch::launch_cfg(n);
    try_launch!(gpu, named!(E, "relu_backward"), cfg, &mut *dx, out, &ni)
}

/// dx[n] masked in place by `act`'s derivative at its output `out` (nothing for `Act::None`).
pub fn act_backward<E: Elem>(
    gpu: &Gpu,
    dx: &mut CudaViewMut<'_, E>,
    out: &CudaView<'_, E>,
    n: usize,
    act: Act,
) -> Result<(), CudaError> {
    match act {
        Act::None => Ok(()),
        Act::Relu => relu_backward(gpu, dx, out, n),
        Act::Relu6 => relu6_backward(gpu, dx, out, n),
    }
}

/// out[n] = act(a + b). As `nn::ops::add_forward`, then the add's activation.
pub fn add<E: Elem>(
    gpu: &Gpu,
    out: &mut CudaViewMut<'_, E>,
    (a, b): (&CudaView<'_, E>, &CudaView<'_, E>),
    n: usize,
    act: Act,
) -> Result<(), CudaError> {
    let lens = [("out", out.len()), ("a", a.len()), ("b", b.len())];
    let ni = elements(gpu, "add", n, &lens)?;
    if n == 0 {
        return Ok(());
    }
    let act = act_code(act);
    try_launch!(
        gpu,
        named!(E, "add"),
        vector_cfg::<E>(n),
        &mut *out,
        a,
        b,
        &ni,
        &act
    )
}

/// The residual add's backward in one pass over its output's gradient `dout` (left as it
/// is): masked by the add's activation `act` (from its output `out`), then written to each
/// input's gradient `d[k]`, or added to it where `add[k]` (the input reached a second time).
/// As the activation's mask (`act_backward`), then a copy or `accumulate` per input.
pub fn add_backward<E: Elem>(
    gpu: &Gpu,
    [d0, d1]: [&mut CudaViewMut<'_, E>; 2],
    add: [bool; 2],
    (dout, out): (&CudaView<'_, E>, &CudaView<'_, E>),
    n: usize,
    act: Act,
) -> Result<(), CudaError> {
    let lens = [
        ("d0", d0.len()),
        ("d1", d1.len()),
        ("dout", dout.len()),
        ("out", out.len()),
    ];
    let ni = elements(gpu, "add backward", n, &lens)?;
    if n == 0 {
        return Ok(());
    }
    let (act, add0, add1) = (act_code(act), add[0] as i32, add[1] as i32);
    try_launch!(
        gpu,
        named!(E, "add_backward"),
        vector_cfg::<E>(n),
        &mut *d0,
        &mut *d1,
        dout,
        out,
        &ni,
        &act,
        &add0,
        &add1
    )
}

/// acc[n] += x. As `nn::ops::accumulate`.
pub fn accumulate<E: Elem>(
    gpu: &Gpu,
    acc: &mut CudaViewMut<'_, E>,
    x: &CudaView<'_, E>,
    n: usize,
) -> Result<(), CudaError> {
    let ni = elements(gpu, "accumulate", n, &[("acc", acc.len()), ("x", x.len())])?;
    if n == 0 {
        return Ok(());
    }
    try_launch!(
        gpu,
        named!(E, "accumulate"),
        vector_cfg::<E>(n),
        &mut *acc,
        x,
        &ni
    )
}

/// out[n] = x * mask. As `nn::ops::mul` (dropout's forward, and its backward).
pub fn mul<E: Elem>(
    gpu: &Gpu,
    out: &mut CudaViewMut<'_, E>,
    x: &CudaView<'_, E>,
    mask: &CudaView<'_, f32>,
    n: usize,
) -> Result<(), CudaError> {
    let lens = [("out", out.len()), ("x", x.len()), ("mask", mask.len())];
    let ni = elements(gpu, "mul", n, &lens)?;
    if n == 0 {
        return Ok(());
    }
    try_launch!(
        gpu,
        named!(E, "mul"),
        grid_stride_cfg(n),
        &mut *out,
        x,
        mask,
        &ni
    )
}

/// Softmax cross-entropy of `b` rows of `classes` logits against `labels`, smoothed by `eps`:
/// each row's loss and whether its argmax is the label (fp32), and the logits' gradient
/// (`kernels/softmax_xent.cu`, as `nn::ops::softmax_xent_smoothed`).
#[allow(clippy::too_many_arguments)]
pub fn softmax_xent<E: Elem>(
    gpu: &Gpu,
    logits: &CudaView<'_, E>,
    labels: &CudaView<'_, u32>,
    (loss, correct): (&mut CudaViewMut<'_, f32>, &mut CudaViewMut<'_, i32>),
    dlogits: &mut CudaViewMut<'_, E>,
    (b, classes): (usize, usize),
    eps: f32,
) -> Result<(), CudaError> {
    let all = b * classes;
    let lens = [("logits", logits.len()), ("dlogits", dlogits.len())];
    elements(gpu, "softmax cross-entropy", all, &lens)?;
    let rows = [
        ("labels", labels.len()),
        ("loss", loss.len()),
        ("correct", correct.len()),
    ];
    let ni = elements(gpu, "softmax cross-entropy", b, &rows)?;
    if b == 0 {
        return Ok(());
    }
    let ci = classes as i32;
    let cfg = super::launch::launch_cfg(b);
    try_launch!(
        gpu,
        named!(E, "softmax_xent"),
        cfg,
        logits,
        labels,
        &mut *loss,
        &mut *correct,
        &mut *dlogits,
        &ni,
        &ci,
        &eps
    )
}

/// mask[n] = 0 with probability `p`, else 1/(1-p), element i drawn from a hash of (key, i)
/// exactly as `nn::ops::dropout_mask` draws it, with the key `nn::ops::dropout_key(seed,
/// passes, node)` where `passes` is read on the device (`count_pass`'s counter).
pub fn dropout_mask(
    gpu: &Gpu,
    mask: &mut CudaViewMut<'_, f32>,
    n: usize,
    (seed, passes, node): (u64, &CudaView<'_, u64>, usize),
    p: f32,
) -> Result<(), CudaError> {
    let ni = elements(gpu, "dropout mask", n, &[("mask", mask.len())])?;
    let node = elements(gpu, "dropout mask", node, &[])?;
    if passes.is_empty() {
        return Err(CudaError::new(gpu.index, "dropout mask", "no pass counter"));
    }
    if n == 0 {
        return Ok(());
    }
    let keep = 1.0 / (1.0 - p);
    let seed_mix = crate::nn::rng::mix64(seed);
    try_launch!(
        gpu,
        "dropout_mask_f32",
        grid_stride_cfg(n),
        &mut *mask,
        &ni,
        &seed_mix,
        passes,
        &node,
        &p,
        &keep
    )
}

/// passes[0] += 1 on the device: one more training pass for dropout's key, counted on the
/// stream so that a pass replayed from a CUDA graph counts too.
pub fn count_pass(gpu: &Gpu, passes: &mut CudaViewMut<'_, u64>) -> Result<(), CudaError> {
    if passes.is_empty() {
        return Err(CudaError::new(gpu.index, "count a pass", "no pass counter"));
    }
    try_launch!(gpu, "count_pass_u64", blocks_cfg(1), &mut *passes)
}
