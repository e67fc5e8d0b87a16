//! Depthwise convolutions with padding k/2 (3x3 or 5x5, stride 1 or 2), one channel at a time
//! with its images stacked into one plane (`Plane::stacked`, a few at 32x32, hundreds at 4x4):
//! out[q] = bias + sum_t w[t] * plane[off(t) + q] with the taps' weights held in registers (a
//! stride-2 window reads the four parity planes of `Halves`); the weight gradient sum_q dout[q] *
//! plane[off(t) + q] keeps one vector of partial sums per tap; the input gradient is the same
//! kind of sum over dout's plane: with the taps reversed for stride 1, per parity plane with the
//! taps that read it for stride 2. The caller spreads channels over threads; a channel's weight
//! gradient is summed stack by stack in image order.

use std::cell::RefCell;

use super::{available, grow, kernel, Plane, Reads, Window};

/// Taps a kernel keeps in registers, at most (5x5; a 7x7 depthwise layer goes row by row).
pub(super) const MAX_TAPS: usize = 25;

/// Floats of input planes one stack of images may take (it and dout's stay in L2).
const STACK_FLOATS: usize = 32 * 1024;

/// Whether `forward_channel` / `backward_channel` compute this depthwise convolution.
pub fn applies(k: usize, stride: usize, pad: usize) -> bool {
    k % 2 == 1
        && k > 1
        && k * k <= MAX_TAPS
        && pad == k / 2
        && (1..=2).contains(&stride)
        && available()
}

/// Images per stack under `win`.
fn stack(win: Window) -> usize {
    (STACK_FLOATS / Reads::new(win).per_channel()).max(1)
}

/// This thread's planes (the input's, dout's, output planes), tap offsets and tap indices.
#[derive(Default)]
struct Buffers {
    plane: Vec<f32>,
    dplane: Vec<f32>,
    outq: Vec<f32>,
    offs: Vec<usize>,
    taps: Vec<usize>,
}

thread_local! {
    static BUFFERS: RefCell<Buffers> = RefCell::new(Buffers::default());
}

impl Buffers {
    /// plane = the images' planes, offs = the forward taps' offsets, the rest big enough.
    fn ready(&mut self, r: &Reads, imgs: &[&[f32]]) {
        let g = r.out();
        grow(&mut self.plane, r.per_channel());
        grow(&mut self.dplane, g.len);
        grow(&mut self.outq, 4 * g.positions());
        r.fill_all(&mut self.plane, imgs);
        r.taps(1, 1, &mut self.offs);
    }
}

/// outs[i] = inps[i] (*) taps[k, k] + bias for each image i of one channel, padding k/2
/// (`applies` holds); inputs are h x w, outputs the window's output size.
pub fn forward_channel(
    outs: &mut [&mut [f32]],
    inps: &[&[f32]],
    taps: &[f32],
    bias: f32,
    win: Window,
) {
    let n = stack(win);
    BUFFERS.with(|s| {
        let s = &mut *s.borrow_mut();
        for (outs, inps) in outs.chunks_mut(n).zip(inps.chunks(n)) {
            let r = Reads::stacked(win, inps.len());
            s.ready(&r, inps);
            sweep(&mut s.outq, &s.plane, &s.offs, taps, bias, r.out());
            for (i, out) in outs.iter_mut().enumerate() {
                r.out().take(out, i, &s.outq);
            }
        }
    });
}

/// For `forward_channel`'s convolution: dtaps[k, k] += d/dtaps, dinps[i] = d/dinps[i]
/// (overwritten; skipped when `None`).
pub fn backward_channel(
    mut dinps: Option<&mut [&mut [f32]]>,
    dtaps: &mut [f32],
    douts: &[&[f32]],
    inps: &[&[f32]],
    taps: &[f32],
    win: Window,
) {
    let n = stack(win);
    BUFFERS.with(|s| {
        let s = &mut *s.borrow_mut();
        for (at, (douts, inps)) in douts.chunks(n).zip(inps.chunks(n)).enumerate() {
            let r = Reads::stacked(win, inps.len());
            s.ready(&r, inps);
            let g = r.out();
            g.clear(&mut s.dplane);
            for (i, d) in douts.iter().enumerate() {
                g.put(&mut s.dplane, i, d);
            }
            let sums = tap_sums(&s.dplane, &s.plane, &s.offs, g);
            for (d, v) in dtaps.iter_mut().zip(&sums) {
                *d += v;
            }
            let Some(dinps) = dinps.as_deref_mut() else {
                continue;
            };
            let dinps = &mut dinps[at * n..at * n + inps.len()];
            match &r {
                Reads::Same(g) => {
                    let k = taps.len();
                    let mut flipped = [0.0f32; MAX_TAPS];
                    for (t, w) in flipped[..k].iter_mut().enumerate() {
                        *w = taps[k - 1 - t];
                    }
                    sweep(&mut s.outq, &s.dplane, &s.offs, &flipped[..k], 0.0, g);
                    for (i, d) in dinps.iter_mut().enumerate() {
                        g.take(d, i, &s.outq);
                    }
                }
                Reads::Halved(h) => {
                    let apart = g.positions();
                    for phase in 0..4 {
                        h.back_taps(phase, &mut s.taps, &mut s.offs);
                        let mut w = [0.0f32; MAX_TAPS];
                        for (w, &t) in w.iter_mut().zip(&s.taps) {
                            *w = taps[t];
                        }
                        let out = &mut s.outq[phase * apart..(phase + 1) * apart];
                        sweep(out, &s.dplane, &s.offs, &w[..s.taps.len()], 0.0, g);
                    }
                    for (i, d) in dinps.iter_mut().enumerate() {
                        h.scatter(d, i, &s.outq, apart);
                    }
                }
            }
        }
    });
}

/// outq[q] = bias + sum_t w[t] * plane[offs[t] + q] for q < g.positions().
fn sweep(outq: &mut [f32], plane: &[f32], offs: &[usize], taps: &[f32], bias: f32, g: &Plane) {
    let positions = g.positions();
    let n = offs.len();
    assert!(n <= MAX_TAPS && taps.len() >= n && outq.len() >= positions);
    assert!(offs.iter().max().copied().unwrap_or(0) + positions <= plane.len());
    let mut w = [0.0f32; MAX_TAPS];
    w[..n].copy_from_slice(&taps[..n]);
    let (out, x) = (outq.as_mut_ptr(), plane.as_ptr());
    // SAFETY: `applies` saw the kernels' instructions; reads reach max(offs) + positions <=
    // plane.len() and writes positions <= outq.len() (asserted).
    unsafe { kernel!(sweep(out, x, offs, &w, bias, positions)) }
}

/// sums[t] = sum_q dplane[origin + q] * plane[offs[t] + q] over q < g.positions() (dout's plane
/// is zero at the dropped positions).
fn tap_sums(dplane: &[f32], plane: &[f32], offs: &[usize], g: &Plane) -> [f32; MAX_TAPS] {
    let positions = g.positions();
    let n = offs.len();
    assert!(n <= MAX_TAPS && g.origin() + positions <= dplane.len());
    assert!(offs.iter().max().copied().unwrap_or(0) + positions <= plane.len());
    let mut sums = [0.0f32; MAX_TAPS];
    let d = dplane[g.origin()..].as_ptr();
    let x = plane.as_ptr();
    // SAFETY: `applies` saw the kernels' instructions; reads stay inside both planes
    // (asserted).
    unsafe { kernel!(tap_sums(&mut sums, d, x, offs, positions)) }
    sums
}
