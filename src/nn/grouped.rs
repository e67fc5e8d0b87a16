//! Convolution and max-pooling layers spread over a worker's intra-op threads: the batch is cut
//! into at most `GROUPS` contiguous groups of images, fixed by the batch size alone, each group
//! runs the layer's op on its own images (and, for the weight gradient, into its own partial
//! sums, added in group order at the end). So the result does not depend on how many threads
//! there are, and one worker on two cores uses both for its convolutions (their per-image
//! products are too small to split inside the GEMM).

use std::ops::Range;
use std::sync::Mutex;

use crate::nn::conv::{
    conv2d_backward_prepared, conv2d_forward_prepared, conv2d_scratch_len, Geom, Prepared,
};
use crate::nn::intraop;
use crate::nn::ops::{accumulate, par, relu_backward, relu_forward};
use crate::nn::pool::{maxpool2d_backward, maxpool2d_forward};
use crate::nn::winograd;

/// Images per group (at least, when the batch allows): a group's activations then stay in
/// the core's cache from one op to the next (batch 128 in 4 groups ran 25% slower per sample
/// than batch 32).
const GROUP_IMAGES: usize = 8;
/// Groups per batch, at most (and at least 4 where the batch allows: the threads a worker is
/// given on common machines).
pub const GROUPS: usize = 16;

/// One convolution's geometry (see `nn::conv`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct ConvGeom {
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub oc: usize,
    pub k: usize,
    pub stride: usize,
    pub pad: usize,
    pub oh: usize,
    pub ow: usize,
}

impl ConvGeom {
    fn in_len(&self) -> usize {
        self.c * self.h * self.w
    }
    fn out_len(&self) -> usize {
        self.oc * self.oh * self.ow
    }
    fn col_len(&self) -> usize {
        let (k, sp, o) = (
            (self.k, self.k),
            (self.stride, self.pad),
            (self.oh, self.ow),
        );
        conv2d_scratch_len(self.c, k, sp, o)
    }
    /// As `nn::conv` takes it, over `b` images.
    fn of(&self, b: usize) -> Geom {
        let (k, hw) = ((self.k, self.k), (self.h, self.w));
        (b, self.c, hw, self.oc, k, self.stride, self.pad)
    }
    fn weights(&self) -> usize {
        self.oc * self.c * self.k * self.k
    }
}

/// Per-group column scratch (for the convolutions that need one) and weight-gradient partial
/// sums, grown as needed.
#[derive(Default)]
pub struct Scratch {
    col: Vec<f32>,
    partial: Vec<f32>,
}

impl Scratch {
    /// The floats `ensure` grows to over convolutions `gs`, and those the Winograd layers among
    /// them take (`winograd::floats`; what a run's memory estimate counts): each part to its
    /// largest.
    pub fn floats_for<'a>(gs: impl Iterator<Item = &'a ConvGeom>) -> usize {
        let (col, partial, wino) = gs.fold((0, 0, 0), |(c, p, w), g| {
            let wg = match winograd::applies(g.c, g.k, g.k, g.stride, g.pad) {
                true => winograd::floats(g.c, g.oc, (g.h, g.w)),
                false => 0,
            };
            (c.max(g.col_len()), p.max(g.weights() + g.oc), w.max(wg))
        });
        GROUPS * (col + partial) + wino
    }

    pub fn ensure(&mut self, g: &ConvGeom) {
        let col = GROUPS * g.col_len();
        if self.col.len() < col {
            self.col.resize(col, 0.0);
        }
        let partial = GROUPS * (g.weights() + g.oc);
        if self.partial.len() < partial {
            self.partial.resize(partial, 0.0);
        }
    }
}

/// The groups of a batch of `b` images.
fn groups(b: usize) -> Vec<Range<usize>> {
    let n = (b / GROUP_IMAGES).clamp(4, GROUPS).min(b).max(1);
    (0..n).map(|i| i * b / n..(i + 1) * b / n).collect()
}

/// `buf` cut into the groups' parts of `per` floats per image, each behind its own lock (only
/// its group takes it, so the locks are never contended).
fn parts<'a, T>(
    mut buf: &'a mut [T],
    groups: &[Range<usize>],
    per: usize,
) -> Vec<Mutex<&'a mut [T]>> {
    let mut out = Vec::with_capacity(groups.len());
    for g in groups {
        let (head, tail) = buf.split_at_mut(g.len() * per);
        out.push(Mutex::new(head));
        buf = tail;
    }
    out
}

/// `GROUPS` parts of `len` floats each (empty when the convolution needs no columns).
fn per_group(mut buf: &mut [f32], len: usize) -> Vec<Mutex<&mut [f32]>> {
    let mut out = Vec::with_capacity(GROUPS);
    for _ in 0..GROUPS {
        let (head, tail) = buf.split_at_mut(len);
        out.push(Mutex::new(head));
        buf = tail;
    }
    out
}

/// A group's part (its lock is never contended; a poisoned one is a panic already on its way).
fn take<'m, 'a, T>(m: &'m Mutex<&'a mut [T]>) -> std::sync::MutexGuard<'m, &'a mut [T]> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `nn::conv::conv2d_forward` over `b` images, by groups (the weights regrouped for the
/// kernels once, `Prepared`, not per group), then ReLU where `relu` (on the group's output
/// while it is in cache).
#[allow(clippy::too_many_arguments)]
pub fn conv_forward(
    out: &mut [f32],
    inp: &[f32],
    w: &[f32],
    bias: &[f32],
    b: usize,
    g: &ConvGeom,
    relu: bool,
    s: &mut Scratch,
) {
    s.ensure(g);
    let gs = groups(b);
    let outs = parts(&mut out[..b * g.out_len()], &gs, g.out_len());
    let cols = per_group(&mut s.col, g.col_len());
    let prep = Prepared::forward(w, g.of(b));
    intraop::each(gs.len(), &|i| {
        let r = &gs[i];
        let img = &inp[r.start * g.in_len()..r.end * g.in_len()];
        let (mut o, mut col) = (take(&outs[i]), take(&cols[i]));
        conv2d_forward_prepared(&prep, &mut o, (img, w, bias), g.of(r.len()), &mut col);
        if relu {
            relu_forward(&mut o);
        }
    });
}

/// `nn::conv::conv2d_backward` over `b` images, by groups: dinp per group; dw and dbias (where
/// the layer has a bias) summed per group, then added to `dw` / `dbias` in group order. With
/// `relu_out` (the layer's output after its ReLU), dout is first masked by it, group by group.
#[allow(clippy::too_many_arguments)]
pub fn conv_backward(
    dinp: Option<&mut [f32]>,
    dw: &mut [f32],
    dbias: Option<&mut [f32]>,
    dout: &mut [f32],
    relu_out: Option<&[f32]>,
    inp: &[f32],
    w: &[f32],
    b: usize,
    g: &ConvGeom,
    s: &mut Scratch,
) {
    s.ensure(g);
    let gs = groups(b);
    let (nw, nb) = (g.weights(), g.oc);
    let with_bias = dbias.is_some();
    let prep = match dinp.is_some() {
        true => Prepared::input_grad(w, g.of(b)),
        false => Prepared::default(),
    };
    let dinps = dinp.map(|d| parts(&mut d[..b * g.in_len()], &gs, g.in_len()));
    let partials: Vec<_> = s.partial.chunks_mut(nw + nb).map(Mutex::new).collect();
    let cols = per_group(&mut s.col, g.col_len());
    let douts = parts(&mut dout[..b * g.out_len()], &gs, g.out_len());
    intraop::each(gs.len(), &|i| {
        let r = &gs[i];
        let img = &inp[r.start * g.in_len()..r.end * g.in_len()];
        let mut d = take(&douts[i]);
        if let Some(out) = relu_out {
            relu_backward(&mut d, &out[r.start * g.out_len()..r.end * g.out_len()]);
        }
        let d: &[f32] = &d;
        let (mut partial, mut col) = (take(&partials[i]), take(&cols[i]));
        partial.fill(0.0);
        let (pw, pb) = partial.split_at_mut(nw);
        let mut din = dinps.as_ref().map(|p| take(&p[i]));
        let grads = (
            din.as_deref_mut().map(|x| &mut **x),
            pw,
            with_bias.then_some(pb),
        );
        conv2d_backward_prepared(&prep, grads, d, img, w, g.of(r.len()), &mut col);
    });
    drop(partials);
    let partials: Vec<&[f32]> = s.partial.chunks(nw + nb).take(gs.len()).collect();
    let weights: Vec<&[f32]> = partials.iter().map(|p| &p[..nw]).collect();
    par::accumulate_all(&mut dw[..nw], &weights);
    if let Some(db) = dbias {
        for p in &partials {
            accumulate(&mut db[..nb], &p[nw..]);
        }
    }
}

/// `nn::pool::maxpool2d_forward` over `b` images of C x H x W, by groups.
#[allow(clippy::too_many_arguments)]
pub fn pool_forward(
    out: &mut [f32],
    argmax: &mut [u32],
    inp: &[f32],
    b: usize,
    (c, h, w): (usize, usize, usize),
    (oh, ow): (usize, usize),
    k: usize,
    stride: usize,
) {
    let (il, ol) = (c * h * w, c * oh * ow);
    let gs = groups(b);
    let outs = parts(&mut out[..b * ol], &gs, ol);
    let args = parts(&mut argmax[..b * ol], &gs, ol);
    intraop::each(gs.len(), &|i| {
        let r = &gs[i];
        let (mut o, mut a) = (take(&outs[i]), take(&args[i]));
        let img = &inp[r.start * il..r.end * il];
        maxpool2d_forward(&mut o, &mut a, img, r.len(), c, h, w, k, stride);
    });
}

/// `nn::pool::maxpool2d_backward` over `b` images, by groups.
#[allow(clippy::too_many_arguments)]
pub fn pool_backward(
    dinp: &mut [f32],
    dout: &[f32],
    argmax: &[u32],
    b: usize,
    (c, h, w): (usize, usize, usize),
    (oh, ow): (usize, usize),
    k: usize,
    stride: usize,
) {
    let (il, ol) = (c * h * w, c * oh * ow);
    let gs = groups(b);
    let dinps = parts(&mut dinp[..b * il], &gs, il);
    intraop::each(gs.len(), &|i| {
        let r = &gs[i];
        let mut d = take(&dinps[i]);
        let (o, a) = (
            &dout[r.start * ol..r.end * ol],
            &argmax[r.start * ol..r.end * ol],
        );
        maxpool2d_backward(&mut d, o, a, r.len(), c, h, w, k, stride);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::conv::{conv2d_backward, conv2d_forward};

    #[test]
    fn groups_cover_the_batch_in_order_whatever_its_size() {
        for b in 1..20 {
            let gs = groups(b);
            assert!(gs.len() <= GROUPS && !gs.is_empty());
            assert_eq!(gs[0].start, 0);
            assert_eq!(gs.last().unwrap().end, b);
            assert!(gs
                .windows(2)
                .all(|p| p[0].end == p[1].start && !p[0].is_empty()));
        }
    }

    /// Two intra-op threads give bit-identical results to one (the groups, not the threads,
    /// decide the order of every sum), and both equal the plain ops up to rounding.
    #[test]
    fn threads_do_not_change_the_result() {
        let g = ConvGeom {
            c: 2,
            h: 7,
            w: 6,
            oc: 3,
            k: 3,
            stride: 1,
            pad: 1,
            oh: 7,
            ow: 6,
        };
        let b = 7;
        let mut rng = crate::nn::rng::Rng::new(3);
        let mut r = |n: usize| -> Vec<f32> { (0..n).map(|_| rng.normal()).collect() };
        let (inp, w, bias, dout) = (r(b * 84), r(54), r(3), r(b * 126));
        let run = |threads: usize| {
            intraop::install(intraop::for_worker(threads, "t").unwrap());
            let mut s = Scratch::default();
            let mut out = vec![0.0; b * 126];
            conv_forward(&mut out, &inp, &w, &bias, b, &g, false, &mut s);
            let (mut dinp, mut dw, mut db) = (vec![0.0; b * 84], vec![0.0; 54], vec![0.0; 3]);
            let mut dout = dout.clone();
            conv_backward(
                Some(&mut dinp),
                &mut dw,
                Some(&mut db),
                &mut dout,
                None,
                &inp,
                &w,
                b,
                &g,
                &mut s,
            );
            intraop::install(None);
            (out, dinp, dw, db)
        };
        let one = run(1);
        assert_eq!(one, run(2));
        let mut out = vec![0.0; b * 126];
        let mut col = vec![0.0; g.col_len()];
        conv2d_forward(
            &mut out, &inp, &w, &bias, b, 2, 7, 6, 3, 3, 3, 1, 1, &mut col,
        );
        assert_eq!(out, one.0, "the forward pass is per image either way");
        let (mut dinp, mut dw, mut db) = (vec![0.0; b * 84], vec![0.0; 54], vec![0.0; 3]);
        let mut col = vec![0.0; g.col_len()];
        conv2d_backward(
            Some(&mut dinp),
            &mut dw,
            &mut db,
            &dout,
            &inp,
            &w,
            b,
            2,
            7,
            6,
            3,
            3,
            3,
            1,
            1,
            &mut col,
        );
        assert_eq!(dinp, one.1);
        for (a, e) in dw.iter().zip(&one.2).chain(db.iter().zip(&one.3)) {
            assert!((a - e).abs() <= 1e-5 * a.abs().max(1.0), "{a} vs {e}");
        }
    }
}
