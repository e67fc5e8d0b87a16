//! A chunk of blocks (whole block rows of one image or several): its layout, this thread's
//! buffers, and the passes over it: the rows split into even and odd columns, the input and
//! gradient transforms, the products, the output transform.

use crate::nn::grow;
use std::cell::RefCell;
use std::ops::Range;

use super::weights::Weights;
use super::{CHUNK_FLOATS, L, LEAST_BLOCKS, RB, XI};

/// The blocks of h x w images.
#[derive(Clone, Copy, Debug)]
pub(super) struct Blocks {
    pub(super) h: usize,
    pub(super) w: usize,
    /// Block rows and columns per image.
    pub(super) th: usize,
    pub(super) tw: usize,
    /// Floats per half row (the even or the odd columns of a row, with room for a whole
    /// vector of blocks read one column on).
    pub(super) half: usize,
}

impl Blocks {
    pub(super) fn new(h: usize, w: usize) -> Blocks {
        let tw = w.div_ceil(2);
        Blocks {
            h,
            w,
            th: h.div_ceil(2),
            tw,
            half: tw.next_multiple_of(L) + L,
        }
    }

    /// Block rows per chunk for a convolution whose transforms hold `channels` rows (inputs
    /// and outputs together) per block: at least one.
    pub(super) fn rows_per_chunk(&self, channels: usize) -> usize {
        let blocks = (CHUNK_FLOATS / (XI * channels.max(1))).max(LEAST_BLOCKS);
        (blocks / self.tw).max(1)
    }

    /// The chunks of `images` images' block rows (numbered image by image), `per` rows each.
    pub(super) fn chunks(&self, images: usize, per: usize) -> impl Iterator<Item = Range<usize>> {
        let total = images * self.th;
        (0..total)
            .step_by(per)
            .map(move |r| r..(r + per).min(total))
    }

    /// The stretches of one image each in a chunk's block rows: (image, its block rows, where
    /// the first sits in the chunk).
    pub(super) fn segments(
        &self,
        rows: Range<usize>,
    ) -> impl Iterator<Item = (usize, Range<usize>, usize)> {
        let (th, start) = (self.th, rows.start);
        let mut r = rows.start;
        std::iter::from_fn(move || {
            (r < rows.end).then(|| {
                let (n, i0) = (r / th, r % th);
                let i1 = (i0 + rows.end - r).min(th);
                let seg = (n, i0..i1, r - start);
                r += i1 - i0;
                seg
            })
        })
    }
}

/// A chunk's layout: its blocks, the vectors they fill, and the stride of one channel's row
/// of transformed values (room for the vector stores that run up to 7 lanes past the last).
#[derive(Clone, Copy, Debug)]
pub(super) struct Chunk {
    pub(super) blocks: usize,
    pub(super) vectors: usize,
    pub(super) stride: usize,
}

impl Chunk {
    pub(super) fn new(rows: usize, tw: usize) -> Chunk {
        let blocks = rows * tw;
        let vectors = blocks.div_ceil(L);
        Chunk {
            blocks,
            vectors,
            stride: (vectors + 1) * L,
        }
    }

    /// Zeroes the lanes of the last vector past the blocks in `rows` rows of transformed
    /// values (for sums over the blocks).
    pub(super) fn clear_tail(&self, t: &mut [f32], rows: usize) {
        for row in t.chunks_exact_mut(self.stride).take(rows) {
            row[self.blocks..self.vectors * L].fill(0.0);
        }
    }
}

/// This thread's buffers, grown as needed.
#[derive(Default)]
pub(super) struct Buffers {
    /// Rows split into their even and odd columns.
    pub(super) halves: Vec<f32>,
    /// Transformed values: the input's, the gradient's, the products.
    pub(super) v: Vec<f32>,
    pub(super) y: Vec<f32>,
    pub(super) m: Vec<f32>,
    /// The weight gradient's transformed sums, entry xi of input i and output k at
    /// (xi * c + i) * kp + k.
    pub(super) s: Vec<f32>,
}

thread_local! {
    pub(super) static BUFFERS: RefCell<Buffers> = RefCell::new(Buffers::default());
}

/// Row `y` of the plane (h x w) as its even and odd columns into `halves[..2 * half]` (even
/// then odd), shifted right by `shift` columns (1: the padded input's columns; 0: dout's);
/// zeros outside the plane, as far as the transforms read (`limit`).
pub(super) fn split_row(halves: &mut [f32], plane: &[f32], y: isize, g: &Blocks, shift: usize) {
    let (half, limit) = (g.half, g.tw.next_multiple_of(L) + 1);
    let (even, odd) = halves[..2 * half].split_at_mut(half);
    if !(0..g.h as isize).contains(&y) {
        even[..limit].fill(0.0);
        odd[..limit].fill(0.0);
        return;
    }
    let row = &plane[y as usize * g.w..(y as usize + 1) * g.w];
    assert!(limit <= half && g.w <= 2 * (limit - 1));
    // SAFETY: AVX2 + FMA are here (asserted by `forward_in` / `backward_in`); reads row[..w],
    // writes even / odd [..limit] (limit <= half; the whole vectors reach m + 9 <= w / 2 + 1 <=
    // limit).
    unsafe {
        kernel!(split(
            even.as_mut_ptr(),
            odd.as_mut_ptr(),
            row.as_ptr(),
            g.w,
            shift,
            limit
        ))
    }
}

/// The input transform of a chunk's blocks of `channels` planes of h x w (image n's channel c
/// at x[(n * channels + c) * h * w..]) into v[(xi * channels + c) * stride + block].
pub(super) fn transform_inputs(
    s: &mut Buffers,
    x: &[f32],
    channels: usize,
    g: &Blocks,
    rows: Range<usize>,
    ch: &Chunk,
) {
    let (hw, half) = (g.h * g.w, g.half);
    let xs = channels * ch.stride;
    grow(&mut s.v, XI * xs);
    for (n, seg, at) in g.segments(rows) {
        // padded rows 2 * i0 ..= 2 * i1 + 1, as halves
        let prow = 2 * seg.len() + 2;
        grow(&mut s.halves, prow * 2 * half);
        for c in 0..channels {
            let plane = &x[(n * channels + c) * hw..(n * channels + c + 1) * hw];
            for p in 0..prow {
                let y = (2 * seg.start + p) as isize - 1;
                let dst = &mut s.halves[p * 2 * half..(p + 1) * 2 * half];
                split_row(dst, plane, y, g, 1);
            }
            for (r, _) in seg.clone().enumerate() {
                let base = s.halves[2 * r * 2 * half..].as_ptr();
                let rows: [*const f32; 4] =
                    std::array::from_fn(|k| base.wrapping_add(k * 2 * half));
                let t0 = (at + r) * g.tw;
                let v = s.v[c * ch.stride + t0..].as_mut_ptr();
                assert!(s.halves.len() >= (2 * r + 4) * 2 * half);
                assert!(c * ch.stride + 15 * xs + t0 + g.tw.next_multiple_of(L) <= s.v.len());
                // SAFETY: AVX2 + FMA are here (asserted by `forward_in` / `backward_in`); rows are
                // four whole halved rows (asserted) read at j + 9 <= half; v[xi * xs + t0..] for xi
                // < 16 and whole vectors of tw blocks stays inside s.v (asserted).
                unsafe { kernel!(input_row(v, xs, rows, half, g.tw)) }
            }
        }
    }
}

/// The gradient's transform of a chunk's blocks of `channels` planes of dout into
/// y[(xi * rows + c) * stride + block] (rows >= channels; the rows past them zero).
#[allow(clippy::too_many_arguments)]
pub(super) fn transform_grads(
    s: &mut Buffers,
    dy: &[f32],
    channels: usize,
    rows_out: usize,
    g: &Blocks,
    rows: Range<usize>,
    ch: &Chunk,
) {
    let (hw, half) = (g.h * g.w, g.half);
    let xs = rows_out * ch.stride;
    grow(&mut s.y, XI * xs);
    grow(&mut s.halves, 2 * 2 * half);
    for (n, seg, at) in g.segments(rows) {
        for c in 0..channels {
            let plane = &dy[(n * channels + c) * hw..(n * channels + c + 1) * hw];
            for (r, i) in seg.clone().enumerate() {
                for p in 0..2 {
                    let dst = &mut s.halves[p * 2 * half..(p + 1) * 2 * half];
                    split_row(dst, plane, (2 * i + p) as isize, g, 0);
                }
                let base = s.halves.as_ptr();
                let t0 = (at + r) * g.tw;
                assert!(c * ch.stride + 15 * xs + t0 + g.tw.next_multiple_of(L) <= s.y.len());
                let y = s.y[c * ch.stride + t0..].as_mut_ptr();
                // SAFETY: AVX2 + FMA are here (asserted by `forward_in` / `backward_in`); two
                // halved rows read at j + 8 <= half; y as in `transform_inputs` (asserted).
                unsafe {
                    kernel!(grad_row(
                        y,
                        xs,
                        [base, base.wrapping_add(2 * half)],
                        half,
                        g.tw
                    ))
                }
            }
        }
    }
    for xi in 0..XI {
        let pad = &mut s.y[(xi * rows_out + channels) * ch.stride..(xi + 1) * rows_out * ch.stride];
        pad.fill(0.0);
    }
}

// / m[(xi * w.rows + r) * stride + block] = sum_i U[xi][r][i] v[(xi * w.inner + i) * stride +
// block].
pub(super) fn products(m: &mut Vec<f32>, v: &[f32], w: &Weights, ch: &Chunk) {
    let (rows, inner, st) = (w.rows, w.inner, ch.stride);
    grow(m, XI * rows * st);
    assert!(v.len() >= XI * inner * st && w.u.len() >= XI * rows * inner);
    for xi in 0..XI {
        for b in 0..rows / RB {
            let out = m[(xi * rows + b * RB) * st..].as_mut_ptr();
            let u = w.u[(xi * rows / RB + b) * inner * RB..].as_ptr();
            let vx = v[xi * inner * st..].as_ptr();
            // SAFETY: AVX2 + FMA are here (asserted by `forward_in` / `backward_in`); writes RB
            // rows of `vectors` vectors at out (inside m: stride >= vectors * 8), reads inner x RB
            // weights and inner rows of v (asserted).
            unsafe { kernel!(product(out, st, u, vx, st, inner, ch.vectors)) }
        }
    }
}

/// The output transform of a chunk: out plane (n, r) of h x w, for r < channels, from
/// m[(xi * rows + r) * stride + block], plus bias[r] where given.
#[allow(clippy::too_many_arguments)]
pub(super) fn transform_outputs(
    out: &mut [f32],
    m: &[f32],
    channels: usize,
    rows_m: usize,
    bias: Option<&[f32]>,
    g: &Blocks,
    rows: Range<usize>,
    ch: &Chunk,
) {
    let hw = g.h * g.w;
    let xs = rows_m * ch.stride;
    assert!(m.len() >= XI * xs);
    for (n, seg, at) in g.segments(rows) {
        for r in 0..channels {
            let plane = &mut out[(n * channels + r) * hw..(n * channels + r + 1) * hw];
            let b = bias.map_or(0.0, |b| b[r]);
            for (k, i) in seg.clone().enumerate() {
                let t0 = (at + k) * g.tw;
                assert!(r * ch.stride + 15 * xs + t0 + g.tw.next_multiple_of(L) <= m.len());
                let src = m[r * ch.stride + t0..].as_ptr();
                let y0 = 2 * i;
                let n_rows = (g.h - y0).min(2);
                let dst = plane[y0 * g.w..].as_mut_ptr();
                let rows_out = [dst, dst.wrapping_add(g.w)];
                // SAFETY: AVX2 + FMA are here (asserted by `forward_in` / `backward_in`); writes
                // columns < w of rows y0 .. y0 + n_rows of the plane (n_rows <= h - y0); reads m[xi
                // * xs + t0..] for whole vectors of tw blocks (asserted).
                unsafe { kernel!(output_row(rows_out, n_rows, g.w, src, xs, b, g.tw)) }
            }
        }
    }
}
