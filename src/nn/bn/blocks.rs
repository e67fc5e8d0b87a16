//! Batch norm over short planes (a channel's plane at most `L` floats: MobileNetV2's 4x4 and
//! 2x2 layers at 32x32 input, a flat [B, C] input). There the per-channel loops (`planes`)
//! spend their time finding each plane, not on its values (`cargo bench --bench batch_norm`:
//! ~4 and ~7 ns a value forward and backward on 2x2 planes, against ~0.6 and ~1.9 on 16x16).
//! Here a task takes a block of adjacent channels, whose planes lie side by side in each sample,
//! and sweeps the samples' runs of (channels x plane) floats, one partial sum per position. A
//! channel's sum is then its positions' sums in order, padded with zeros to `L` lanes: the
//! terms, and the order, of the per-channel loops (whose lanes are a short plane's positions),
//! so both paths give the same results bit for bit (tested).

use super::planes::L;
use super::{dx_terms, normalising, BnGeom, BnSaved, BnStats};
use crate::nn::intraop::{self, Disjoint};
use crate::nn::ops::Act;
use crate::nn::simd::twice;

/// Floats per sample a block spans, at most (its channels x the plane).
const SPAN: usize = 256;

/// Whether batch norm over `g` takes the blocks.
pub(super) fn applies(g: BnGeom) -> bool {
    (1..=L).contains(&g.hw)
}

/// Block k's channels.
fn block(g: BnGeom, k: usize) -> std::ops::Range<usize> {
    let per = SPAN / g.hw;
    k * per..((k + 1) * per).min(g.c)
}

fn blocks(g: BnGeom) -> usize {
    g.c.div_ceil(SPAN / g.hw)
}

/// Where sample i's run of the block starting at channel c0 begins.
fn at(g: BnGeom, i: usize, c0: usize) -> usize {
    (i * g.c + c0) * g.hw
}

/// A channel's sum from its positions' sums, as `planes` adds its `L` lanes.
fn lanes(pos: &[f64]) -> f64 {
    let mut l = [0.0f64; L];
    l[..pos.len()].copy_from_slice(pos);
    l.iter().sum()
}

/// `v[p] = per[p / hw]` for the first `per.len() * hw` positions.
fn spread<T: Copy>(v: &mut [T], per: impl Iterator<Item = T>, hw: usize) {
    for (run, x) in v.chunks_mut(hw).zip(per) {
        run.fill(x);
    }
}

/// `bn_forward_train` over blocks of channels (see the module); the arguments as there.
#[allow(clippy::too_many_arguments)]
pub(super) fn forward_train(
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
    intraop::each(blocks(g), &|k| {
        let chs = block(g, k);
        let span = chs.len() * g.hw;
        let (mut mean, mut var) = ([0.0f64; SPAN], [0.0f64; SPAN]);
        match stats {
            Some(st) => {
                mean[..chs.len()].copy_from_slice(&st.mean[chs.clone()]);
                var[..chs.len()].copy_from_slice(&st.var[chs.clone()]);
            }
            None => {
                let mut acc = [0.0f64; SPAN];
                for i in 0..g.b {
                    let r = at(g, i, chs.start);
                    run_sum(&mut acc[..span], &x[r..r + span]);
                }
                let per = acc[..span].chunks(g.hw).map(|p| lanes(p) / n);
                mean.iter_mut().zip(per).for_each(|(m, s)| *m = s);
                let mut m = [0.0f32; SPAN];
                spread(&mut m, mean.iter().map(|&v| v as f32), g.hw);
                acc.fill(0.0);
                for i in 0..g.b {
                    let r = at(g, i, chs.start);
                    run_sq_dev(&mut acc[..span], &x[r..r + span], &m[..span]);
                }
                let per = acc[..span].chunks(g.hw).map(|p| lanes(p) / n);
                var.iter_mut().zip(per).for_each(|(v, s)| *v = s);
            }
        }
        let (mut scale, mut shift) = ([0.0f32; SPAN], [0.0f32; SPAN]);
        for (j, ch) in chs.clone().enumerate() {
            // SAFETY: channel ch's entries of saved and running are this task's alone
            let (s, t) = unsafe {
                normalising(
                    saveds,
                    runnings,
                    (weight, bias),
                    g,
                    ch,
                    (mean[j], var[j], n),
                    consts,
                )
            };
            scale[j * g.hw..(j + 1) * g.hw].fill(s);
            shift[j * g.hw..(j + 1) * g.hw].fill(t);
        }
        for i in 0..g.b {
            let r = at(g, i, chs.start);
            // SAFETY: the block's channels of every sample are this task's alone
            let o = unsafe { outs.range(r, span) };
            run_affine(o, &x[r..r + span], &scale[..span], &shift[..span], act);
        }
    });
}

/// `bn_backward_own` over blocks of channels (see the module); the arguments as there.
pub(super) fn backward_own(
    dxs: Option<&Disjoint<f32>>,
    (dws, dbs): (&Disjoint<f32>, &Disjoint<f32>),
    douts: &Disjoint<f32>,
    f: BnSaved,
    weight: &[f32],
    g: BnGeom,
) {
    let n = (g.b * g.hw) as f64;
    intraop::each(blocks(g), &|k| {
        let chs = block(g, k);
        let span = chs.len() * g.hw;
        let mut m = [0.0f32; SPAN];
        spread(&mut m, f.saved[chs.clone()].iter().copied(), g.hw);
        let (mut sd, mut sdx) = ([0.0f64; SPAN], [0.0f64; SPAN]);
        for i in 0..g.b {
            let r = at(g, i, chs.start);
            // SAFETY: the block's channels of every sample are this task's alone
            let d = unsafe { douts.range(r, span) };
            let (o, x) = (&f.out[r..r + span], &f.x[r..r + span]);
            run_mask_sums(
                (&mut sd[..span], &mut sdx[..span]),
                d,
                o,
                x,
                &m[..span],
                f.act,
            );
        }
        let mut t = Terms::default();
        for (j, ch) in chs.clone().enumerate() {
            let p = j * g.hw..(j + 1) * g.hw;
            let sums = (lanes(&sd[p.clone()]), lanes(&sdx[p.clone()]));
            // SAFETY: entry ch of dweight and dbias is this task's alone
            let c = unsafe { dx_terms((dws, dbs), f, weight, g, ch, (sums, sums, n)) };
            t.mean[p.clone()].fill(c.mean);
            t.invstd[p.clone()].fill(c.invstd);
            t.k[p.clone()].fill(c.k);
            t.sdy[p.clone()].fill(c.sdy);
            t.sdyxhat[p].fill(c.sdyxhat);
            t.n = c.n;
        }
        let Some(dxs) = dxs else { return };
        for i in 0..g.b {
            let r = at(g, i, chs.start);
            // SAFETY: as above
            let (dx, d) = unsafe { (dxs.range(r, span), douts.range(r, span)) };
            run_dx(dx, d, &f.x[r..r + span], &t, span);
        }
    });
}

/// `planes::DxTerms` per position.
struct Terms {
    mean: [f32; SPAN],
    invstd: [f32; SPAN],
    k: [f32; SPAN],
    sdy: [f32; SPAN],
    sdyxhat: [f32; SPAN],
    n: f32,
}

impl Default for Terms {
    fn default() -> Terms {
        Terms {
            mean: [0.0; SPAN],
            invstd: [0.0; SPAN],
            k: [0.0; SPAN],
            sdy: [0.0; SPAN],
            sdyxhat: [0.0; SPAN],
            n: 0.0,
        }
    }
}

twice! {
    /// acc[p] += x[p].
    fn run_sum(acc: &mut [f64], x: &[f32]) {
        for (a, &v) in acc.iter_mut().zip(x) {
            *a += v as f64;
        }
    }
}

twice! {
    /// acc[p] += (x[p] - m[p])^2, the square rounded as f32.
    fn run_sq_dev(acc: &mut [f64], x: &[f32], m: &[f32]) {
        for ((a, &v), &m) in acc.iter_mut().zip(x).zip(m) {
            *a += ((v - m) * (v - m)) as f64;
        }
    }
}

#[inline(always)]
fn affine_by(out: &mut [f32], x: &[f32], scale: &[f32], shift: &[f32], act: impl Fn(f32) -> f32) {
    for (((o, &v), &s), &t) in out.iter_mut().zip(x).zip(scale).zip(shift) {
        *o = act(v * s + t);
    }
}

twice! {
    /// out[p] = act(x[p] * scale[p] + shift[p]).
    fn run_affine(out: &mut [f32], x: &[f32], scale: &[f32], shift: &[f32], act: Act) {
        match act {
            Act::None => affine_by(out, x, scale, shift, |v| v),
            Act::Relu => affine_by(out, x, scale, shift, |v| v.max(0.0)),
            Act::Relu6 => affine_by(out, x, scale, shift, |v| v.clamp(0.0, 6.0)),
        }
    }
}

#[inline(always)]
fn mask_sums_by(
    (sd, sdx): (&mut [f64], &mut [f64]),
    d: &mut [f32],
    (o, x, m): (&[f32], &[f32], &[f32]),
    keep: impl Fn(f32) -> bool,
) {
    let n = sd
        .len()
        .min(sdx.len())
        .min(d.len())
        .min(o.len())
        .min(x.len())
        .min(m.len());
    for p in 0..n {
        let v = if keep(o[p]) { d[p] } else { 0.0 };
        d[p] = v;
        sd[p] += v as f64;
        sdx[p] += (v * (x[p] - m[p])) as f64;
    }
}

twice! {
    /// d[p] masked in place by the activation's derivative at its output o[p], then
    /// sd[p] += d[p], sdx[p] += d[p] * (x[p] - m[p]).
    fn run_mask_sums(sums: (&mut [f64], &mut [f64]), d: &mut [f32], o: &[f32], x: &[f32], m: &[f32], act: Act) {
        let r = (o, x, m);
        match act {
            Act::None => mask_sums_by(sums, d, r, |_| true),
            Act::Relu => mask_sums_by(sums, d, r, |o| o > 0.0),
            Act::Relu6 => mask_sums_by(sums, d, r, |o| o > 0.0 && o < 6.0),
        }
    }
}

twice! {
    /// dx[p] from the masked output gradient d[p] and the input x[p], as `planes_dx`.
    fn run_dx(dx: &mut [f32], d: &[f32], x: &[f32], t: &Terms, span: usize) {
        let (dx, d, x) = (&mut dx[..span], &d[..span], &x[..span]);
        for p in 0..span {
            let xhat = (x[p] - t.mean[p]) * t.invstd[p];
            dx[p] = t.k[p] * (t.n * d[p] - t.sdy[p] - xhat * t.sdyxhat[p]);
        }
    }
}
