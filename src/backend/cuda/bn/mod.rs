//! Batch norm on a GPU (`kernels/bn.cu`), mirroring `nn::bn` and the CPU interpreter's use of
//! it: per-channel sums in double, each channel cut into `parts` (fixed by the sizes alone) that
//! blocks sum and a second launch adds in order (no atomics: the same bits at every run); the
//! statistics in one pass (the sums of x and of x^2, exact in double, where the CPU takes two:
//! the same mean and variance to float's rounding), the running statistics updated on the
//! device. Under sync batch norm the statistics take two passes as on the CPU (the mean, then
//! the squared deviations from it), each set of sums through the host: rounded to f32, summed
//! across the replicas by the run's collective (as the CPU's `global_stats`), and put back; the
//! sums stay raw on the device so that the exchange fits between two launches. Every kernel
//! runs one block per (channel, part) of a channel's values (`parts_cfg`), each thread loading
//! a value or, where HW and the tensors' alignment allow, a 16-byte vector of them (`Walk`).
//! Channels-last activations (`Layout::Nhwc`) take the twins in `kernels/bn_nhwc.cu`: the same
//! arguments and results, one block per (up to 32 lanes of channels, part of the rows), many
//! more parts (added by a tree, `bn_reduce_parts_f32`), each lane two channels, or where C and
//! the tensors' alignment allow a 16-byte vector of them; the kernels that only read the sums
//! (output, input gradient) spread over more blocks still (`grid::spread`).

use cudarc::driver::{CudaView, CudaViewMut};

use super::elem::Elem;
use super::launch::{act_code, grid_stride_cfg, start, MAX_BLOCKS};
use super::layout::Layout;
use super::shape::{fit_i32, need};
use super::{fail, CudaError, Gpu};
use crate::comm::Collective;
use crate::nn::bn::BnGeom;
use crate::nn::model::{BN_EPS, BN_MOMENTUM};
use crate::nn::ops::Act;

mod grid;

pub use grid::scratch_len;
use grid::{nhwc_block, parts, parts_cfg, reduce, spread, Walk, NHWC_MAX_LANES};
pub use running::{forward_eval, forward_fixed};

/// The kernel of batch-norm op `$op` for activations of type `$e` walked by `$walk`.
macro_rules! bn_kernel {
    ($e:ty, $walk:expr, $op:literal) => {
        match ($walk, <$e as Elem>::BF16) {
            (Walk::Nchw, false) => concat!("bn_", $op, "_f32"),
            (Walk::Nchw, true) => concat!("bn_", $op, "_bf16"),
            (Walk::NchwWide(_), false) => concat!("bn_wide_", $op, "_f32"),
            (Walk::NchwWide(_), true) => concat!("bn_wide_", $op, "_bf16"),
            (Walk::Pairs, false) => concat!("bn_nhwc_", $op, "_f32"),
            (Walk::Pairs, true) => concat!("bn_nhwc_", $op, "_bf16"),
            (Walk::Wide(_), false) => concat!("bn_nhwc_wide_", $op, "_f32"),
            (Walk::Wide(_), true) => concat!("bn_nhwc_wide_", $op, "_bf16"),
        }
    };
}

// (after the macro, which it uses)
mod running;

/// The walk over `g`'s tensors in `layout`, starting at `starts` (device addresses): 16-byte
/// vectors where the sizes and every start allow (`Walk::of`).
fn walk<E: Elem>(layout: Layout, g: BnGeom, starts: &[u64]) -> Walk {
    let aligned = starts.iter().all(|a| a.is_multiple_of(16));
    Walk::of(layout, (g.c, g.hw), E::BYTES, aligned)
}

/// [B, C, HW] as the kernels' ints, after checking every buffer's length (name, has, needs),
/// and for channels last that the channels come in pairs and their blocks fit a grid.
fn ints(
    gpu: &Gpu,
    what: &str,
    (g, walk): (BnGeom, Walk),
    lens: &[(&str, usize, usize)],
) -> Result<[i32; 3], CudaError> {
    need(what, lens).map_err(|e| fail(gpu, what, e))?;
    let nhwc = !walk.nchw();
    if nhwc && (g.c % 2 == 1 || nhwc_block(walk, g.c).0 > MAX_BLOCKS as usize) {
        let most = 2 * NHWC_MAX_LANES * MAX_BLOCKS as usize;
        let e = format!(
            "channels-last batch norm takes an even number of channels, at most {most}: {} channels",
            g.c
        );
        return Err(fail(gpu, what, e));
    }
    let all = g.b.checked_mul(g.c).and_then(|v| v.checked_mul(g.hw));
    let all = all.ok_or_else(|| fail(gpu, what, "B*C*HW overflows"))?;
    let sizes = [
        ("the batch", g.b),
        ("C", g.c),
        ("HW", g.hw),
        ("B*HW", g.b * g.hw),
        ("B*C*HW", all),
    ];
    fit_i32(what, &sizes).map_err(|e| fail(gpu, what, e))?;
    Ok([g.b as i32, g.c as i32, g.hw as i32])
}

/// The per-channel sums `v` (on the device) summed across the replicas through the host, as
/// f32 (the CPU's `SumAcross`); with `count`, it rides along and its sum is returned.
fn across(
    gpu: &Gpu,
    coll: &mut dyn Collective,
    v: &mut CudaViewMut<'_, f64>,
    count: Option<f64>,
) -> Result<f64, CudaError> {
    let what = "sync batch norm";
    let s = &gpu.stream;
    let mut host = vec![0.0f64; v.len()];
    s.memcpy_dtoh(&*v, &mut host[..])
        .map_err(|e| fail(gpu, what, format!("{e:?}")))?;
    s.synchronize()
        .map_err(|e| fail(gpu, what, format!("{e:?}")))?;
    let mut sums: Vec<f32> = host.iter().map(|&x| x as f32).collect();
    if let Some(n) = count {
        sums.push(n as f32);
    }
    // a lost peer has no way back through the interpreter: the rank fails, as on the CPU
    if let Err(e) = coll.all_reduce_sum(&mut sums) {
        panic!("sync batch norm: {e}")
    }
    let total = match count {
        Some(_) => sums.pop().map_or(0.0, f64::from),
        None => 0.0,
    };
    let back: Vec<f64> = sums.into_iter().map(f64::from).collect();
    s.memcpy_htod(&back[..], v)
        .map_err(|e| fail(gpu, what, format!("{e:?}")))?;
    Ok(total)
}

/// out[C] = per-channel sums of x, or (`centred`) of (x - mean)^2 with mean = centre / n
/// (`bn_sums_f32` into `partial`, then `bn_reduce_f32`); `centre` is read only when centred.
fn sums<E: Elem>(
    gpu: &Gpu,
    out: &mut CudaViewMut<'_, f64>,
    partial: &mut CudaViewMut<'_, f64>,
    x: &CudaView<'_, E>,
    (centre, centred, n): (&CudaView<'_, f64>, bool, f64),
    (g, walk): (BnGeom, Walk),
) -> Result<(), CudaError> {
    let parts = parts(walk, g.c, g.b * g.hw);
    let lens = [
        ("out", out.len(), g.c),
        ("partial", partial.len(), parts * g.c),
        ("centre", centre.len(), g.c),
        ("x", x.len(), g.b * g.c * g.hw),
    ];
    let [b, c, hw] = ints(gpu, "batch norm sums", (g, walk), &lens)?;
    let centred = centred as i32;
    let cfg = parts_cfg(walk, g.c, parts);
    try_launch!(
        gpu,
        bn_kernel!(E, walk, "sums"),
        cfg,
        &mut *partial,
        x,
        centre,
        &centred,
        &n,
        &b,
        &c,
        &hw
    )?;
    reduce(gpu, walk, out, &partial.as_view(), parts, g.c)
}

/// Training, with this batch's statistics (one pass; or, with `sync`, the global batch's, in
/// two): out[B,C,HW] (in `layout`) = (x - mean) / sqrt(var + eps) * weight + bias; saved[2C] =
/// mean, 1/std per channel; running[2C] moved toward the batch's statistics; `scratch` (>=
/// `scratch_len(layout, C, B*HW)` doubles) overwritten. Returns the count the statistics were
/// taken over. As the CPU interpreter's `BnStats::of` / `global_stats` and
/// `nn::bn::bn_forward_train`.
#[allow(clippy::too_many_arguments)]
pub fn forward_train<E: Elem>(
    gpu: &Gpu,
    sync: Option<&mut dyn Collective>,
    scratch: &mut CudaViewMut<'_, f64>,
    saved: &mut CudaViewMut<'_, f32>,
    running: &mut CudaViewMut<'_, f32>,
    out: &mut CudaViewMut<'_, E>,
    (x, weight, bias): (&CudaView<'_, E>, &CudaView<'_, f32>, &CudaView<'_, f32>),
    (g, layout): (BnGeom, Layout),
    act: Act,
) -> Result<f32, CudaError> {
    let what = "batch norm forward";
    let c = g.c;
    let lens = [
        ("scratch", scratch.len(), scratch_len(layout, c, g.b * g.hw)),
        ("saved", saved.len(), 2 * c),
        ("running", running.len(), 2 * c),
        ("weight", weight.len(), c),
        ("bias", bias.len(), c),
        ("out", out.len(), g.b * c * g.hw),
    ];
    let walk = walk::<E>(layout, g, &[start(gpu, x), start(gpu, &*out)]);
    let [b, ci, hw] = ints(gpu, what, (g, walk), &lens)?;
    let mut n = (g.b * g.hw) as f64;
    let parts = parts(walk, g.c, g.b * g.hw);
    let moments = sync.is_none();
    {
        let (mut head, mut partial) = scratch.split_at_mut(4 * c);
        let (mut sum, mut rest) = head.split_at_mut(c);
        let mut sq = rest.slice_mut(..c);
        match sync {
            // one pass: the sums of x and of x^2, into scratch[..2C]
            None => {
                try_launch!(
                    gpu,
                    bn_kernel!(E, walk, "moments"),
                    parts_cfg(walk, c, parts),
                    &mut partial,
                    x,
                    &b,
                    &ci,
                    &hw
                )?;
                reduce(gpu, walk, &mut head, &partial.as_view(), parts, 2 * c)?;
            }
            // two, as the CPU's `global_stats`: the mean over every replica, then the squared
            // deviations from it
            Some(coll) => {
                sums(
                    gpu,
                    &mut sum,
                    &mut partial,
                    x,
                    (&sq.as_view(), false, 0.0),
                    (g, walk),
                )?;
                n = across(gpu, coll, &mut sum, Some(n))?;
                sums(
                    gpu,
                    &mut sq,
                    &mut partial,
                    x,
                    (&sum.as_view(), true, n),
                    (g, walk),
                )?;
                across(gpu, coll, &mut sq, None)?;
            }
        }
    }
    let st = scratch.slice(..2 * c);
    let (eps, momentum) = (BN_EPS, BN_MOMENTUM);
    let cfg = grid_stride_cfg(c);
    let moments = moments as i32;
    try_launch!(
        gpu,
        "bn_finish_f32",
        cfg,
        &mut *saved,
        &mut *running,
        &st,
        &moments,
        &n,
        &ci,
        &eps,
        &momentum
    )?;
    let ints = [b, ci, hw];
    apply(
        gpu,
        out,
        (x, &saved.as_view(), weight, bias),
        (g, walk, ints),
        act,
    )?;
    Ok(n as f32)
}

/// out = act(x * scale + shift) per channel from saved[2C] = mean, 1/std (`bn_apply`), over a
/// walk whose buffers `ints` checked.
fn apply<E: Elem>(
    gpu: &Gpu,
    out: &mut CudaViewMut<'_, E>,
    (x, saved, weight, bias): (
        &CudaView<'_, E>,
        &CudaView<'_, f32>,
        &CudaView<'_, f32>,
        &CudaView<'_, f32>,
    ),
    (g, walk, [b, c, hw]): (BnGeom, Walk, [i32; 3]),
    act: Act,
) -> Result<(), CudaError> {
    if g.b * g.c * g.hw == 0 {
        return Ok(());
    }
    let cfg = parts_cfg(walk, g.c, spread(walk, g.c, g.b * g.hw));
    let act = act_code(act);
    try_launch!(
        gpu,
        bn_kernel!(E, walk, "apply"),
        cfg,
        &mut *out,
        x,
        saved,
        weight,
        bias,
        &b,
        &c,
        &hw,
        &act
    )
}

/// What the forward pass normalised by, for `backward`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Taken {
    /// The batch's statistics, over this many values per channel (every replica's under sync).
    Over(f32),
    /// The running statistics (`BnPass::Fixed`, `forward_fixed`): constants, so no batch sums
    /// reach dx, which is dy * weight * 1/std.
    Fixed,
}

/// With dy the gradient at the normalised output (`dout` through `act`'s derivative, taken at
/// the output recomputed from x: the output itself is not read): dweight[C] += this replica's
/// sum(dy * xhat), dbias[C] += its sum(dy); dx (overwritten; skipped when `None`) from the
/// sums over the batch the statistics were taken over (this replica's, or with `sync` every
/// replica's) of `Taken::Over`'s count per channel; `scratch` (>= `scratch_len(layout, C,
/// B*HW)` doubles) overwritten. As the CPU interpreter's batch norm backward
/// (`nn::bn::bn_grad_sums`, `bn_backward`).
#[allow(clippy::too_many_arguments)]
pub fn backward<E: Elem>(
    gpu: &Gpu,
    sync: Option<&mut dyn Collective>,
    scratch: &mut CudaViewMut<'_, f64>,
    dx: Option<&mut CudaViewMut<'_, E>>,
    (dweight, dbias): (&mut CudaViewMut<'_, f32>, &mut CudaViewMut<'_, f32>),
    (dout, x): (&CudaView<'_, E>, &CudaView<'_, E>),
    (saved, weight, bias): (&CudaView<'_, f32>, &CudaView<'_, f32>, &CudaView<'_, f32>),
    (g, layout): (BnGeom, Layout),
    taken: Taken,
    act: Act,
) -> Result<(), CudaError> {
    let what = "batch norm backward";
    let (c, all) = (g.c, g.b * g.c * g.hw);
    let lens = [
        ("scratch", scratch.len(), scratch_len(layout, c, g.b * g.hw)),
        ("dweight", dweight.len(), c),
        ("dbias", dbias.len(), c),
        ("dout", dout.len(), all),
        ("x", x.len(), all),
        ("saved", saved.len(), 2 * c),
        ("weight", weight.len(), c),
        ("bias", bias.len(), c),
        ("dx", dx.as_ref().map_or(all, |d| d.len()), all),
    ];
    let mut starts = vec![start(gpu, dout), start(gpu, x)];
    starts.extend(dx.as_ref().map(|d| start(gpu, &**d)));
    let walk = walk::<E>(layout, g, &starts);
    let [b, ci, hw] = ints(gpu, what, (g, walk), &lens)?;
    let act = act_code(act);
    let (mut head, mut partial) = scratch.split_at_mut(4 * c);
    let (mut local, mut rest) = head.split_at_mut(2 * c);
    let mut total = rest.slice_mut(..2 * c);
    let parts = parts(walk, g.c, g.b * g.hw);
    try_launch!(
        gpu,
        bn_kernel!(E, walk, "grad_sums"),
        parts_cfg(walk, c, parts),
        &mut partial,
        dout,
        x,
        saved,
        weight,
        bias,
        &b,
        &ci,
        &hw,
        &act
    )?;
    reduce(gpu, walk, &mut local, &partial.as_view(), parts, 2 * c)?;
    let lv = local.as_view();
    let cfg = grid_stride_cfg(c);
    try_launch!(
        gpu,
        "bn_param_grads_f32",
        cfg,
        &mut *dweight,
        &mut *dbias,
        &lv,
        saved,
        &ci
    )?;
    let (in_total, count) = match (sync, taken) {
        (_, Taken::Fixed) => {
            let s = &gpu.stream;
            (s.memset_zeros(&mut total)).map_err(|e| fail(gpu, what, format!("{e:?}")))?;
            (true, 1.0f32)
        }
        (None, Taken::Over(n)) => (false, n),
        (Some(coll), Taken::Over(n)) => {
            let s = &gpu.stream;
            s.memcpy_dtod(&lv, &mut total)
                .map_err(|e| fail(gpu, what, format!("{e:?}")))?;
            across(gpu, coll, &mut total, None)?;
            (true, n)
        }
    };
    let Some(dx) = dx else {
        return Ok(());
    };
    if all == 0 {
        return Ok(());
    }
    let sums = if in_total { total.as_view() } else { lv };
    let cfg = parts_cfg(walk, c, spread(walk, c, g.b * g.hw));
    try_launch!(
        gpu,
        bn_kernel!(E, walk, "backward_dx"),
        cfg,
        &mut *dx,
        dout,
        x,
        saved,
        weight,
        bias,
        &sums,
        &count,
        &b,
        &ci,
        &hw,
        &act
    )
}
