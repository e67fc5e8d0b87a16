//! Winograd F(2x2, 3x3) convolutions (Lavin & Gray, 2015): 3x3 windows, stride 1, padding 1
//! (all but three of a CIFAR ResNet's convolutions, most of an ImageNet ResNet-18's), 16
//! products per 2 x 2 block of outputs where the direct kernels make 36.
//!
//! Output block (i, j) (rows 2i, 2i + 1, columns 2j, 2j + 1) reads the 4 x 4 patch d of the
//! input padded by 1 at rows and columns 2i.., 2j.. of the padded input, and is
//! Y = A^T [U (.) V] A, with V = B^T d B the input's transform, U = G g G^T the weights' (made
//! once per pass over a layer, `Weights`) and the sum over input channels taken between:
//! M[xi][k][t] = sum_c U[xi][k][c] V[xi][c][t], sixteen matrix products (one per entry xi of a
//! transformed patch) over a chunk of blocks t. The input gradient is the same convolution of
//! dout with the weights flipped and transposed; the weight gradient is
//! dw[k][c] = G^T (sum_t (A dy_t A^T) (.) V_t[c]) G, sixteen products summed over the blocks.
//! Blocks are taken in chunks of whole block rows (of one image or several) sized so that a
//! chunk's transformed values stay in the L2 cache. Every sum runs in a fixed order, so the
//! results do not depend on threads; they differ from the direct kernels' by rounding (the
//! transforms add and halve).
//!
//! The kernels (`avx2`) need AVX2 + FMA; `applies` says where they run.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::ops::Range;
use std::sync::OnceLock;

use super::direct;

/// Entries of a transformed 4 x 4 patch.
const XI: usize = 16;
/// Rows (output channels) per product tile.
const RB: usize = 4;
/// Floats per vector.
const L: usize = 8;
/// Floats of transformed values a chunk aims at (both operands and the products: about the
/// L2 cache of one core).
const CHUNK_FLOATS: usize = 128 << 10;

/// Blocks per chunk, at least (fewer calls, and fewer horizontal sums in the weight gradient's
/// products, for the price of chunks past the L2 cache on wide layers: 20% less CPU time than
/// the direct kernels on ResNet-20 at batch 128 against 12% with 64).
const LEAST_BLOCKS: usize = 256;

/// Whether this process computes 3x3 stride-1 convolutions this way: by default on CPUs whose
/// widest direct kernels are AVX2 (where it is faster than them; the AVX-512 tiles run near
/// peak on their own); `MGTOP_WINOGRAD=off` never, `on` also with AVX-512 (for comparisons).
/// Read once per process.
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let wanted = std::env::var("MGTOP_WINOGRAD").unwrap_or_default();
        decide(&wanted, direct::isa(), has_avx2())
    })
}

fn decide(wanted: &str, isa: Option<direct::Isa>, avx2: bool) -> bool {
    match wanted {
        "off" => false,
        "on" => avx2 && isa.is_some(),
        _ => avx2 && isa == Some(direct::Isa::Avx2),
    }
}

/// Whether this CPU can run the kernels (AVX2 + FMA), whether or not `enabled` takes them.
pub fn available() -> bool {
    has_avx2()
}

#[cfg(target_arch = "x86_64")]
fn has_avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

#[cfg(not(target_arch = "x86_64"))]
fn has_avx2() -> bool {
    false
}

/// Input channels a convolution needs to take this way (over 3, a network's first layer, the
/// products are too short: 0.7x the direct kernels' speed).
const LEAST_INPUTS: usize = 8;

/// Whether `forward` / `backward` can compute a convolution with this window: 3x3, stride 1,
/// padding 1.
pub fn computes(kh: usize, kw: usize, stride: usize, pad: usize) -> bool {
    kh == 3 && kw == 3 && stride == 1 && pad == 1
}

/// Whether a convolution over `c` input channels with this window takes this way: one
/// `computes`, over at least 8 channels, on a CPU where `enabled` holds.
pub fn applies(c: usize, kh: usize, kw: usize, stride: usize, pad: usize) -> bool {
    c >= LEAST_INPUTS && computes(kh, kw, stride, pad) && enabled()
}

/// `kernel!(name(args))`: `avx2::name(args)` (unsafe: the caller states the bounds; it runs
/// only where `available()` holds, which `forward_in` / `backward_in` assert).
macro_rules! kernel {
    ($f:ident($($a:expr),* $(,)?)) => {{
        #[cfg(target_arch = "x86_64")]
        let done = avx2::$f($($a),*);
        #[cfg(not(target_arch = "x86_64"))]
        let done = {
            $(let _ = $a;)*
            unreachable!("Winograd convolutions need AVX2")
        };
        done
    }};
}

/// A layer's weights transformed (U = G g G^T per output and input channel), made once per
/// pass over the layer: `rows` outputs (padded to RB with zeros) by `inner` inputs, laid out
/// u[((xi * rows / RB + block) * inner + i) * RB + r] so a product tile's RB weights of input
/// i sit side by side.
pub struct Weights {
    u: Vec<f32>,
    rows: usize,
    inner: usize,
}

impl Weights {
    /// For the forward pass of w[OC, C, 3, 3].
    pub fn forward(w: &[f32], c: usize, oc: usize) -> Weights {
        Weights::make(oc, c, |k, i| taps(w, (k * c + i) * 9, false))
    }

    /// For the input gradient of the same: C outputs, OC inputs, each window flipped.
    pub fn input_grad(w: &[f32], c: usize, oc: usize) -> Weights {
        Weights::make(c, oc, |ci, k| taps(w, (k * c + ci) * 9, true))
    }

    fn make(rows: usize, inner: usize, g: impl Fn(usize, usize) -> [f32; 9]) -> Weights {
        let padded = rows.next_multiple_of(RB);
        let mut u = vec![0.0; XI * padded * inner];
        for r in 0..rows {
            for i in 0..inner {
                let t = transform_weights(&g(r, i));
                for (xi, v) in t.into_iter().enumerate() {
                    u[((xi * padded / RB + r / RB) * inner + i) * RB + r % RB] = v;
                }
            }
        }
        Weights {
            u,
            rows: padded,
            inner,
        }
    }
}

/// The nine taps of the window at w[at..], flipped (ky, kx -> 2 - ky, 2 - kx) where asked.
fn taps(w: &[f32], at: usize, flip: bool) -> [f32; 9] {
    std::array::from_fn(|t| w[at + if flip { 8 - t } else { t }])
}

/// G x for a column x of 3: G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1].
fn g_of(x: [f32; 3]) -> [f32; 4] {
    [
        x[0],
        0.5 * (x[0] + x[1] + x[2]),
        0.5 * (x[0] - x[1] + x[2]),
        x[2],
    ]
}

/// G^T x for a column x of 4.
fn gt_of(x: [f32; 4]) -> [f32; 3] {
    [
        x[0] + 0.5 * (x[1] + x[2]),
        0.5 * (x[1] - x[2]),
        0.5 * (x[1] + x[2]) + x[3],
    ]
}

/// U = G g G^T of a 3 x 3 window g (row-major), row-major 4 x 4.
fn transform_weights(g: &[f32; 9]) -> [f32; XI] {
    let cols: [[f32; 4]; 3] = std::array::from_fn(|x| g_of([g[x], g[3 + x], g[6 + x]]));
    let mut u = [0.0; XI];
    for a in 0..4 {
        let row = g_of([cols[0][a], cols[1][a], cols[2][a]]);
        u[a * 4..a * 4 + 4].copy_from_slice(&row);
    }
    u
}

/// The weights' gradient from the gradient of their transform: G^T s G, row-major 3 x 3.
fn untransform_grad(s: &[f32; XI]) -> [f32; 9] {
    let cols: [[f32; 3]; 4] = std::array::from_fn(|b| gt_of([s[b], s[4 + b], s[8 + b], s[12 + b]]));
    let mut g = [0.0; 9];
    for y in 0..3 {
        let row = gt_of([cols[0][y], cols[1][y], cols[2][y], cols[3][y]]);
        g[y * 3..y * 3 + 3].copy_from_slice(&row);
    }
    g
}

/// The blocks of h x w images.
#[derive(Clone, Copy, Debug)]
struct Blocks {
    h: usize,
    w: usize,
    /// Block rows and columns per image.
    th: usize,
    tw: usize,
    /// Floats per half row (the even or the odd columns of a row, with room for a whole
    /// vector of blocks read one column on).
    half: usize,
}

impl Blocks {
    fn new(h: usize, w: usize) -> Blocks {
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
    fn rows_per_chunk(&self, channels: usize) -> usize {
        let blocks = (CHUNK_FLOATS / (XI * channels.max(1))).max(LEAST_BLOCKS);
        (blocks / self.tw).max(1)
    }

    /// The chunks of `images` images' block rows (numbered image by image), `per` rows each.
    fn chunks(&self, images: usize, per: usize) -> impl Iterator<Item = Range<usize>> {
        let total = images * self.th;
        (0..total)
            .step_by(per)
            .map(move |r| r..(r + per).min(total))
    }

    /// The stretches of one image each in a chunk's block rows: (image, its block rows, where
    /// the first sits in the chunk).
    fn segments(&self, rows: Range<usize>) -> impl Iterator<Item = (usize, Range<usize>, usize)> {
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
struct Chunk {
    blocks: usize,
    vectors: usize,
    stride: usize,
}

impl Chunk {
    fn new(rows: usize, tw: usize) -> Chunk {
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
    fn clear_tail(&self, t: &mut [f32], rows: usize) {
        for row in t.chunks_exact_mut(self.stride).take(rows) {
            row[self.blocks..self.vectors * L].fill(0.0);
        }
    }
}

/// This thread's buffers, grown as needed.
#[derive(Default)]
struct Buffers {
    /// Rows split into their even and odd columns.
    halves: Vec<f32>,
    /// Transformed values: the input's, the gradient's, the products.
    v: Vec<f32>,
    y: Vec<f32>,
    m: Vec<f32>,
    /// The weight gradient's transformed sums, entry xi of input i and output k at
    /// (xi * c + i) * kp + k.
    s: Vec<f32>,
}

thread_local! {
    static BUFFERS: RefCell<Buffers> = RefCell::new(Buffers::default());
}

fn grow(v: &mut Vec<f32>, n: usize) {
    if v.len() < n {
        v.resize(n, 0.0);
    }
}

/// Row `y` of the plane (h x w) as its even and odd columns into `halves[..2 * half]` (even
/// then odd), shifted right by `shift` columns (1: the padded input's columns; 0: dout's);
/// zeros outside the plane, as far as the transforms read (`limit`).
fn split_row(halves: &mut [f32], plane: &[f32], y: isize, g: &Blocks, shift: usize) {
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
fn transform_inputs(
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
fn transform_grads(
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
fn products(m: &mut Vec<f32>, v: &[f32], w: &Weights, ch: &Chunk) {
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
fn transform_outputs(
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

/// out[B,OC,H,W] = inp[B,C,H,W] (*) w[OC,C,3,3] + bias[OC], padding 1, stride 1 (`applies`
/// holds; the caller checked the lengths); `w` as `Weights::forward` made.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    out: &mut [f32],
    inp: &[f32],
    w: &Weights,
    bias: &[f32],
    b: usize,
    c: usize,
    oc: usize,
    (h, wd): (usize, usize),
) {
    let g = Blocks::new(h, wd);
    forward_in(out, inp, w, bias, b, (c, oc), g, g.rows_per_chunk(c + oc));
}

#[allow(clippy::too_many_arguments)]
fn forward_in(
    out: &mut [f32],
    inp: &[f32],
    w: &Weights,
    bias: &[f32],
    b: usize,
    (c, oc): (usize, usize),
    g: Blocks,
    per: usize,
) {
    assert!(available(), "Winograd convolutions need AVX2 + FMA");
    assert!(w.inner == c && w.rows >= oc && bias.len() >= oc);
    assert!(inp.len() >= b * c * g.h * g.w && out.len() >= b * oc * g.h * g.w);
    BUFFERS.with(|s| {
        let s = &mut *s.borrow_mut();
        for rows in g.chunks(b, per) {
            let ch = Chunk::new(rows.len(), g.tw);
            transform_inputs(s, inp, c, &g, rows.clone(), &ch);
            products(&mut s.m, &s.v, w, &ch);
            transform_outputs(out, &s.m, oc, w.rows, Some(bias), &g, rows, &ch);
        }
    });
}

/// dinp[B,C,H,W] = d/dinp (overwritten; skipped when `None`; its weights as
/// `Weights::input_grad` made) and dw[OC,C,3,3] += d/dw for `forward`'s convolution.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    dinp: Option<(&mut [f32], &Weights)>,
    dw: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    b: usize,
    c: usize,
    oc: usize,
    (h, wd): (usize, usize),
) {
    let g = Blocks::new(h, wd);
    backward_in(
        dinp,
        dw,
        dout,
        inp,
        b,
        (c, oc),
        g,
        g.rows_per_chunk(c + 2 * oc),
    );
}

#[allow(clippy::too_many_arguments)]
fn backward_in(
    mut dinp: Option<(&mut [f32], &Weights)>,
    dw: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    b: usize,
    (c, oc): (usize, usize),
    g: Blocks,
    per: usize,
) {
    assert!(available(), "Winograd convolutions need AVX2 + FMA");
    let hw = g.h * g.w;
    assert!(inp.len() >= b * c * hw && dout.len() >= b * oc * hw && dw.len() >= oc * c * 9);
    if let Some((d, wi)) = dinp.as_ref() {
        assert!(d.len() >= b * c * hw && wi.inner == oc && wi.rows >= c);
    }
    let kp = oc.next_multiple_of(RB);
    BUFFERS.with(|s| {
        let s = &mut *s.borrow_mut();
        grow(&mut s.s, XI * kp * c);
        s.s[..XI * kp * c].fill(0.0);
        for rows in g.chunks(b, per) {
            let ch = Chunk::new(rows.len(), g.tw);
            transform_inputs(s, inp, c, &g, rows.clone(), &ch);
            transform_grads(s, dout, oc, kp, &g, rows.clone(), &ch);
            ch.clear_tail(&mut s.v, XI * c);
            ch.clear_tail(&mut s.y, XI * kp);
            let st = ch.stride;
            assert!(s.v.len() >= XI * c * st && s.y.len() >= XI * kp * st);
            for xi in 0..XI {
                for k0 in (0..kp).step_by(RB) {
                    let sums = s.s[xi * c * kp + k0..].as_mut_ptr();
                    let y = s.y[(xi * kp + k0) * st..].as_ptr();
                    let v = s.v[xi * c * st..].as_ptr();
                    // SAFETY: AVX2 + FMA are here (asserted by `forward_in` / `backward_in`); RB
                    // rows of y and c rows of v, `vectors` vectors each, inside the buffers
                    // (asserted); sums[i * kp + r] for r < RB, i < c inside s.s (sized XI * kp *
                    // c).
                    unsafe { kernel!(grad_product(sums, kp, y, st, v, st, c, ch.vectors)) }
                }
            }
            if let Some((d, wi)) = dinp.as_mut() {
                transform_inputs(s, dout, oc, &g, rows.clone(), &ch);
                products(&mut s.m, &s.v, wi, &ch);
                transform_outputs(d, &s.m, c, wi.rows, None, &g, rows, &ch);
            }
        }
        for k in 0..oc {
            for i in 0..c {
                let t: [f32; XI] = std::array::from_fn(|xi| s.s[(xi * c + i) * kp + k]);
                for (d, v) in dw[(k * c + i) * 9..][..9]
                    .iter_mut()
                    .zip(untransform_grad(&t))
                {
                    *d += v;
                }
            }
        }
    });
}
