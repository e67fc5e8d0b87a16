//! Batch norm over NCHW tensors (a flat [B, C] input is C channels of one position), fused per
//! channel: the statistics, the normalisation and the backward sums of one channel in one task,
//! channels spread over the worker's intra-op threads (each channel's sums in a fixed order, so
//! results do not depend on the thread count); over planes of at most 16 values, a block of
//! adjacent channels per task instead (`blocks`: the same sums in the same order). PyTorch's
//! definition: biased variance to normalise, unbiased for the running variance, momentum 0.1,
//! eps 1e-5.

mod blocks;
mod planes;

use crate::nn::intraop::{self, Disjoint};
use crate::nn::ops::Act;
use planes::{
    planes_affine, planes_dx, planes_mask_sums, planes_sq_dev, planes_sum, Channel, ChannelMut,
    DxTerms, Planes,
};

/// One batch norm's geometry: `b` samples of `c` channels of `hw` positions.
#[derive(Clone, Copy, Debug)]
pub struct BnGeom {
    pub b: usize,
    pub c: usize,
    pub hw: usize,
}

/// Per-channel sums of x (`dev` None) or of (x - dev[c])^2, in f64.
pub fn channel_sums(x: &[f32], g: BnGeom, dev: Option<&[f64]>) -> Vec<f64> {
    let mut out = vec![0.0f64; g.c];
    let sums = Disjoint::new(&mut out);
    intraop::each(g.c, &|ch| {
        let xs = Channel::of(x, g, ch);
        let s = match dev {
            None => planes_sum(xs),
            Some(m) => planes_sq_dev(xs, m[ch] as f32),
        };
        // SAFETY: entry `ch` is this task's alone
        unsafe { sums.range(ch, 1)[0] = s };
    });
    out
}

/// The per-channel statistics of a batch: means, biased variances and the count they are over.
#[derive(Clone, Debug)]
pub struct BnStats {
    pub mean: Vec<f64>,
    pub var: Vec<f64>,
    pub n: f64,
}

impl BnStats {
    /// This batch's own statistics (two passes: the mean, then the squared deviations).
    pub fn of(x: &[f32], g: BnGeom) -> BnStats {
        let n = (g.b * g.hw) as f64;
        let mean: Vec<f64> = channel_sums(x, g, None).iter().map(|s| s / n).collect();
        let var = channel_sums(x, g, Some(&mean))
            .iter()
            .map(|s| s / n)
            .collect();
        BnStats { mean, var, n }
    }
}

/// Channel ch's mean and biased variance over its planes `xs` (two passes, the planes staying
/// in cache between them).
fn own_stats(xs: Channel, g: BnGeom) -> (f64, f64) {
    let n = (g.b * g.hw) as f64;
    let mean = planes_sum(xs) / n;
    (mean, planes_sq_dev(xs, mean as f32) / n)
}

/// Training: out = act((x - mean) / sqrt(var + eps) * weight + bias) with the batch's
/// statistics: `stats` (the global batch's under sync batch norm), or, when `None`, this
/// batch's own, taken in the same task as the normalisation. saved[2C] = mean, 1/sqrt(var + eps) per
/// channel (for backward); running[2C] = running mean, running variance (unbiased), moved
/// toward the batch's by `momentum`.
#[allow(clippy::too_many_arguments)]
pub fn bn_forward_train(
    out: &mut [f32],
    saved: &mut [f32],
    running: &mut [f32],
    x: &[f32],
    (weight, bias): (&[f32], &[f32]),
    g: BnGeom,
    stats: Option<&BnStats>,
    act: Act,
    consts: (f32, f32),
) {
    assert!(x.len() >= g.b * g.hw * g.c && out.len() >= g.b * g.hw * g.c);
    assert!(saved.len() >= 2 * g.c && running.len() >= 2 * g.c);
    let (outs, saveds, runnings) = (
        Disjoint::new(out),
        Disjoint::new(saved),
        Disjoint::new(running),
    );
    let kept = (&saveds, &runnings);
    match blocks::applies(g) {
        true => blocks::forward_train(&outs, kept, x, (weight, bias), g, stats, act, consts),
        false => by_channel_forward(&outs, kept, x, (weight, bias), g, stats, act, consts),
    }
}

/// `bn_forward_train`, each channel in one task.
#[allow(clippy::too_many_arguments)]
fn by_channel_forward(
    outs: &Disjoint<f32>,
    (saveds, runnings): (&Disjoint<f32>, &Disjoint<f32>),
    x: &[f32],
    (weight, bias): (&[f32], &[f32]),
    g: BnGeom,
    stats: Option<&BnStats>,
    act: Act,
    consts: (f32, f32),
) {
    let n = stats.map_or((g.b * g.hw) as f64, |s| s.n);
    intraop::each(g.c, &|ch| {
        let xs = Channel::of(x, g, ch);
        let (mean, var) = match stats {
            Some(st) => (st.mean[ch], st.var[ch]),
            None => own_stats(xs, g),
        };
        // SAFETY: entries ch and C + ch of saved and running are this task's alone
        let (scale, shift) = unsafe {
            normalising(
                saveds,
                runnings,
                (weight, bias),
                g,
                ch,
                (mean, var, n),
                consts,
            )
        };
        // SAFETY: channel ch's planes of out are this task's alone
        let mut os = unsafe { ChannelMut::of(outs, g, ch) };
        planes_affine(&mut os, xs, scale, shift, act);
    });
}

/// Channel ch's normalisation from its batch statistics (mean, biased var, over n values):
/// saved[ch] = mean, saved[C + ch] = 1/sqrt(var + eps), the running statistics moved toward
/// them; returns the (scale, shift) that normalise and apply weight and bias.
///
/// # Safety
/// Entries ch and C + ch of saved and running are the caller's alone.
unsafe fn normalising(
    saveds: &Disjoint<f32>,
    runnings: &Disjoint<f32>,
    (weight, bias): (&[f32], &[f32]),
    g: BnGeom,
    ch: usize,
    (mean, var, n): (f64, f64, f64),
    (eps, momentum): (f32, f32),
) -> (f32, f32) {
    let invstd = (1.0 / (var + eps as f64).sqrt()) as f32;
    let unbiased = if n > 1.0 { var * n / (n - 1.0) } else { var };
    saveds.range(ch, 1)[0] = mean as f32;
    saveds.range(g.c + ch, 1)[0] = invstd;
    let r = runnings.range(ch, 1);
    r[0] = (1.0 - momentum) * r[0] + momentum * mean as f32;
    let r = runnings.range(g.c + ch, 1);
    r[0] = (1.0 - momentum) * r[0] + momentum * unbiased as f32;
    let scale = invstd * weight[ch];
    (scale, bias[ch] - mean as f32 * scale)
}

/// Inference: out = act((x - running mean) / sqrt(running var + eps) * weight + bias).
#[allow(clippy::too_many_arguments)]
pub fn bn_forward_eval(
    out: &mut [f32],
    running: &[f32],
    x: &[f32],
    (weight, bias): (&[f32], &[f32]),
    g: BnGeom,
    act: Act,
    eps: f32,
) {
    affine_each(out, x, g, act, &|ch| {
        let scale = weight[ch] / (running[g.c + ch] + eps).sqrt();
        (scale, bias[ch] - running[ch] * scale)
    });
}

/// out = act(x * scale + shift) channel by channel, each in one task, with `scale_shift(ch)`.
fn affine_each(
    out: &mut [f32],
    x: &[f32],
    g: BnGeom,
    act: Act,
    scale_shift: &(dyn Fn(usize) -> (f32, f32) + Sync),
) {
    let outs = Disjoint::new(out);
    intraop::each(g.c, &|ch| {
        let (scale, shift) = scale_shift(ch);
        // SAFETY: channel ch's planes of out are this task's alone
        let mut os = unsafe { ChannelMut::of(&outs, g, ch) };
        planes_affine(&mut os, Channel::of(x, g, ch), scale, shift, act);
    });
}

/// Training on the running statistics (`BnPass::Fixed`): out as `bn_forward_eval`'s, and
/// saved[2C] = the running mean and 1/sqrt(running var + eps) per channel (for backward, which
/// then takes no batch sums: `bn_backward` with zero totals over a count of 1); `running` is
/// left as it is.
#[allow(clippy::too_many_arguments)]
pub fn bn_forward_fixed(
    out: &mut [f32],
    saved: &mut [f32],
    running: &[f32],
    x: &[f32],
    (weight, bias): (&[f32], &[f32]),
    g: BnGeom,
    act: Act,
    eps: f32,
) {
    for ch in 0..g.c {
        saved[ch] = running[ch];
        saved[g.c + ch] = (1.0 / (running[g.c + ch] as f64 + eps as f64).sqrt()) as f32;
    }
    let saved = &*saved;
    affine_each(out, x, g, act, &|ch| {
        let scale = saved[g.c + ch] * weight[ch];
        (scale, bias[ch] - saved[ch] * scale)
    });
}

/// What backward reads of the forward pass: its input, its output (for the activation's
/// mask), the activation, and `saved`.
#[derive(Clone, Copy)]
pub struct BnSaved<'a> {
    pub x: &'a [f32],
    pub out: &'a [f32],
    pub act: Act,
    pub saved: &'a [f32],
}

/// Channel `ch`'s dout masked by the activation (in place), then its sums of dout and of
/// dout * (x - mean).
fn channel_grad_sums(douts: &Disjoint<f32>, f: BnSaved, g: BnGeom, ch: usize) -> (f64, f64) {
    // SAFETY: channel ch's planes of dout are this task's alone
    let mut ds = unsafe { ChannelMut::of(douts, g, ch) };
    let (outs, xs) = (Channel::of(f.out, g, ch), Channel::of(f.x, g, ch));
    planes_mask_sums(&mut ds, outs, xs, f.saved[ch], f.act)
}

/// Masks dout by the activation (in place) and returns the per-channel sums of dout and of
/// dout * (x - mean), [2C], in f64: what the input gradient needs from the whole batch (summed
/// across replicas under sync batch norm before `bn_backward`).
pub fn bn_grad_sums(dout: &mut [f32], f: BnSaved, g: BnGeom) -> Vec<f64> {
    let mut out = vec![0.0f64; 2 * g.c];
    let sums = Disjoint::new(&mut out);
    let douts = Disjoint::new(dout);
    intraop::each(g.c, &|ch| {
        let (sdy, sdyx) = channel_grad_sums(&douts, f, g, ch);
        // SAFETY: entries `ch` and `C + ch` are this task's alone
        unsafe {
            sums.range(ch, 1)[0] = sdy;
            sums.range(g.c + ch, 1)[0] = sdyx;
        }
    });
    out
}

/// The parameter and input gradients of channel `ch` from this replica's sums `local` and the
/// sums over the batch the statistics were taken over, `total` (of `n` values); `ds`: the
/// channel's planes of the (masked) output gradient.
#[allow(clippy::too_many_arguments)]
fn channel_backward(
    dxs: Option<&Disjoint<f32>>,
    dweight: &Disjoint<f32>,
    dbias: &Disjoint<f32>,
    ds: &dyn Planes,
    f: BnSaved,
    weight: &[f32],
    g: BnGeom,
    ch: usize,
    (local, total, n): ((f64, f64), (f64, f64), f64),
) {
    // SAFETY: entry ch of dweight and dbias is this task's alone
    let t = unsafe { dx_terms((dweight, dbias), f, weight, g, ch, (local, total, n)) };
    let Some(dxs) = dxs else { return };
    // SAFETY: channel ch's planes of dx are this task's alone
    let mut dx = unsafe { ChannelMut::of(dxs, g, ch) };
    planes_dx(&mut dx, ds, Channel::of(f.x, g, ch), t);
}

/// dweight[ch] += sum(dout * xhat), dbias[ch] += sum(dout) from `local`, and the terms of
/// channel ch's input gradient from `total` (see `channel_backward`).
///
/// # Safety
/// Entry ch of dweight and dbias is the caller's alone.
unsafe fn dx_terms(
    (dweight, dbias): (&Disjoint<f32>, &Disjoint<f32>),
    f: BnSaved,
    weight: &[f32],
    g: BnGeom,
    ch: usize,
    (local, total, n): ((f64, f64), (f64, f64), f64),
) -> DxTerms {
    let (mean, invstd) = (f.saved[ch], f.saved[g.c + ch]);
    dweight.range(ch, 1)[0] += (local.1 * invstd as f64) as f32;
    dbias.range(ch, 1)[0] += local.0 as f32;
    DxTerms {
        mean,
        invstd,
        k: weight[ch] * invstd / n as f32,
        n: n as f32,
        sdy: total.0 as f32,
        sdyxhat: (total.1 * invstd as f64) as f32,
    }
}

/// dweight += this replica's sum(dout * xhat), dbias += sum(dout) (from `local`, its own
/// `bn_grad_sums`, dout masked by it); dx (overwritten; skipped when `None`) from `total`, the
/// sums over the batch the statistics were taken over (the global batch's), of `n` values per
/// channel.
#[allow(clippy::too_many_arguments)]
pub fn bn_backward(
    dx: Option<&mut [f32]>,
    (dweight, dbias): (&mut [f32], &mut [f32]),
    dout: &[f32],
    f: BnSaved,
    weight: &[f32],
    g: BnGeom,
    (local, total, n): (&[f64], &[f64], f64),
) {
    let dxs = dx.map(Disjoint::new);
    let (dws, dbs) = (Disjoint::new(dweight), Disjoint::new(dbias));
    intraop::each(g.c, &|ch| {
        let sums = |s: &[f64]| (s[ch], s[g.c + ch]);
        let s = (sums(local), sums(total), n);
        let ds = Channel::of(dout, g, ch);
        channel_backward(dxs.as_ref(), &dws, &dbs, &ds, f, weight, g, ch, s);
    });
}

/// Backward over this replica's own statistics, each channel in one task (its planes stay in
/// cache from the activation's mask to dx): dout masked in place, dweight and dbias added to,
/// dx overwritten (skipped when `None`).
pub fn bn_backward_own(
    dx: Option<&mut [f32]>,
    (dweight, dbias): (&mut [f32], &mut [f32]),
    dout: &mut [f32],
    f: BnSaved,
    weight: &[f32],
    g: BnGeom,
) {
    let dxs = dx.map(Disjoint::new);
    let (dws, dbs) = (Disjoint::new(dweight), Disjoint::new(dbias));
    let douts = Disjoint::new(dout);
    match blocks::applies(g) {
        true => blocks::backward_own(dxs.as_ref(), (&dws, &dbs), &douts, f, weight, g),
        false => by_channel_backward_own(dxs.as_ref(), (&dws, &dbs), &douts, f, weight, g),
    }
}

/// `bn_backward_own`, each channel in one task.
fn by_channel_backward_own(
    dxs: Option<&Disjoint<f32>>,
    (dws, dbs): (&Disjoint<f32>, &Disjoint<f32>),
    douts: &Disjoint<f32>,
    f: BnSaved,
    weight: &[f32],
    g: BnGeom,
) {
    let n = (g.b * g.hw) as f64;
    intraop::each(g.c, &|ch| {
        let sums = channel_grad_sums(douts, f, g, ch);
        // SAFETY: channel ch's planes of dout are this task's alone
        let ds = unsafe { ChannelMut::of(douts, g, ch) };
        channel_backward(dxs, dws, dbs, &ds, f, weight, g, ch, (sums, sums, n));
    });
}

#[cfg(test)]
mod tests;
