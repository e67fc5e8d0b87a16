//! Batch norm's loops over one channel: its planes (one per sample, `C * HW` floats apart in
//! NCHW) handed over together, so a 4x4 or 1x1 channel costs one call and one final reduction,
//! not one per sample. Sums run in f64 over `L` partial sums carried from plane to plane (a
//! plane shorter than `L` adds into the first ones), added in order at the end: fixed order,
//! the accuracy of a plain f64 loop, vectorised. Compiled twice (`simd::twice`).

use std::marker::PhantomData;

use super::BnGeom;
use crate::nn::intraop::Disjoint;
use crate::nn::ops::Act;
use crate::nn::simd::twice;

/// A channel's planes to read.
pub trait Planes {
    /// How many (the batch).
    fn count(&self) -> usize;
    /// Sample i's plane.
    fn plane(&self, i: usize) -> &[f32];
}

/// Channel ch's planes of an NCHW tensor.
#[derive(Clone, Copy)]
pub struct Channel<'a> {
    x: &'a [f32],
    g: BnGeom,
    ch: usize,
}

impl<'a> Channel<'a> {
    pub fn of(x: &'a [f32], g: BnGeom, ch: usize) -> Channel<'a> {
        Channel { x, g, ch }
    }
}

impl Planes for Channel<'_> {
    fn count(&self) -> usize {
        self.g.b
    }

    #[inline]
    fn plane(&self, i: usize) -> &[f32] {
        let at = (i * self.g.c + self.ch) * self.g.hw;
        &self.x[at..at + self.g.hw]
    }
}

/// Channel ch's planes of a tensor the tasks of one `each` write, each its own channel.
pub struct ChannelMut<'a> {
    x: &'a Disjoint<f32>,
    g: BnGeom,
    ch: usize,
    _planes: PhantomData<&'a mut [f32]>,
}

impl<'a> ChannelMut<'a> {
    /// # Safety
    /// No other task touches channel ch's planes of `x` while this lives.
    pub unsafe fn of(x: &'a Disjoint<f32>, g: BnGeom, ch: usize) -> ChannelMut<'a> {
        ChannelMut {
            x,
            g,
            ch,
            _planes: PhantomData,
        }
    }

    /// Sample i's plane.
    #[inline]
    pub fn plane_mut(&mut self, i: usize) -> &mut [f32] {
        // SAFETY: the channel's planes are this value's alone (`of`), lent out one at a time
        unsafe {
            self.x
                .range((i * self.g.c + self.ch) * self.g.hw, self.g.hw)
        }
    }
}

impl Planes for ChannelMut<'_> {
    fn count(&self) -> usize {
        self.g.b
    }

    #[inline]
    fn plane(&self, i: usize) -> &[f32] {
        // SAFETY: as `plane_mut`; no `&mut` to them lives while `&self` is borrowed
        unsafe {
            self.x
                .range((i * self.g.c + self.ch) * self.g.hw, self.g.hw)
        }
    }
}

/// Partial sums: four AVX2 registers of f64.
pub(super) const L: usize = 16;

/// sum over the planes of f(value) into `L` lanes, then in order.
#[inline(always)]
fn sum(planes: Channel, f: impl Fn(f32) -> f64) -> f64 {
    let mut acc = [0.0f64; L];
    for i in 0..planes.count() {
        let p = planes.plane(i);
        let chunks = p.chunks_exact(L);
        for (a, &v) in acc.iter_mut().zip(chunks.remainder()) {
            *a += f(v);
        }
        for c in chunks {
            for l in 0..L {
                acc[l] += f(c[l]);
            }
        }
    }
    acc.iter().sum()
}

twice! {
    /// The sum of every value.
    pub fn planes_sum(planes: Channel) -> f64 {
        sum(planes, |v| v as f64)
    }
}

twice! {
    /// The sum of (x - m)^2, each term rounded as f32.
    pub fn planes_sq_dev(planes: Channel, m: f32) -> f64 {
        sum(planes, |v| ((v - m) * (v - m)) as f64)
    }
}

/// out = keep(x * scale + shift) per value.
#[inline(always)]
fn affine_by(outs: &mut ChannelMut, xs: Channel, scale: f32, shift: f32, act: impl Fn(f32) -> f32) {
    for i in 0..xs.count() {
        for (o, &v) in outs.plane_mut(i).iter_mut().zip(xs.plane(i)) {
            *o = act(v * scale + shift);
        }
    }
}

twice! {
    /// outs = act(xs * scale + shift).
    pub fn planes_affine(outs: &mut ChannelMut, xs: Channel, scale: f32, shift: f32, act: Act) {
        match act {
            Act::None => affine_by(outs, xs, scale, shift, |v| v),
            Act::Relu => affine_by(outs, xs, scale, shift, |v| v.max(0.0)),
            Act::Relu6 => affine_by(outs, xs, scale, shift, |v| v.clamp(0.0, 6.0)),
        }
    }
}

/// One step of `mask_sums_by`: the first `lanes` values of d, o, x.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn mask_step(
    (sd, sdx): (&mut [f64; L], &mut [f64; L]),
    d: &mut [f32],
    o: &[f32],
    x: &[f32],
    m: f32,
    lanes: usize,
    keep: &impl Fn(f32) -> bool,
) {
    for l in 0..lanes {
        let v = if keep(o[l]) { d[l] } else { 0.0 };
        d[l] = v;
        sd[l] += v as f64;
        sdx[l] += (v * (x[l] - m)) as f64;
    }
}

/// d = keep(out) ? d : 0 per value (a select, not a branch), then (sum d, sum d * (x - m)).
/// (A function, not a closure, for the step: a closure is not compiled with the AVX2 of
/// `twice!`'s wide copy unless inlined, and this one was not.)
#[inline(always)]
fn mask_sums_by(
    ds: &mut ChannelMut,
    outs: Channel,
    xs: Channel,
    m: f32,
    keep: impl Fn(f32) -> bool,
) -> (f64, f64) {
    let (mut sd, mut sdx) = ([0.0f64; L], [0.0f64; L]);
    for i in 0..xs.count() {
        let (d, o, x) = (ds.plane_mut(i), outs.plane(i), xs.plane(i));
        let n = d.len().min(o.len()).min(x.len());
        let whole = n - n % L;
        let (dr, or, xr) = (&mut d[whole..n], &o[whole..n], &x[whole..n]);
        mask_step((&mut sd, &mut sdx), dr, or, xr, m, n - whole, &keep);
        let chunks = d[..whole].chunks_exact_mut(L);
        for ((d, o), x) in chunks.zip(o.chunks_exact(L)).zip(x.chunks_exact(L)) {
            mask_step((&mut sd, &mut sdx), d, o, x, m, L, &keep);
        }
    }
    (sd.iter().sum(), sdx.iter().sum())
}

twice! {
    /// ds masked in place by the activation's derivative at its output `outs`, then the sums of
    /// ds and of ds * (xs - m).
    pub fn planes_mask_sums(ds: &mut ChannelMut, outs: Channel, xs: Channel, m: f32, act: Act) -> (f64, f64) {
        match act {
            Act::None => mask_sums_by(ds, outs, xs, m, |_| true),
            Act::Relu => mask_sums_by(ds, outs, xs, m, |o| o > 0.0),
            Act::Relu6 => mask_sums_by(ds, outs, xs, m, |o| o > 0.0 && o < 6.0),
        }
    }
}

/// What the input gradient of one channel is made of: dx = k * (n * d - sdy - xhat * sdyxhat)
/// with xhat = (x - mean) * invstd.
#[derive(Clone, Copy, Debug)]
pub struct DxTerms {
    pub mean: f32,
    pub invstd: f32,
    pub k: f32,
    pub n: f32,
    pub sdy: f32,
    pub sdyxhat: f32,
}

twice! {
    /// dxs from the (masked) output gradient ds and the input xs.
    pub fn planes_dx(dxs: &mut ChannelMut, ds: &dyn Planes, xs: Channel, t: DxTerms) {
        for i in 0..xs.count() {
            for ((o, &d), &v) in dxs.plane_mut(i).iter_mut().zip(ds.plane(i)).zip(xs.plane(i)) {
                let xhat = (v - t.mean) * t.invstd;
                *o = t.k * (t.n * d - t.sdy - xhat * t.sdyxhat);
            }
        }
    }
}
