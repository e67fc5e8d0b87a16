//! Dense convolutions: out[oc, q] = sum_t w[oc, t] * planes[off(t) + q], t over (c, ky, kx), in
//! register tiles of 4 output channels x up to 96 positions; the input gradient is the same
//! product of dout's planes with the weights flipped and transposed (stride 1) or, per parity
//! plane, restricted to the taps that read it (stride 2); the weight gradient
//! dw[oc, t] = sum_q dout_oc[q] * planes[off(t) + q] reads both operands in place too (dout's
//! planes hold zeros at the dropped positions), in tiles of 4 channels x 6 taps summed over as
//! many of a call's images as stay in the L1 cache before one horizontal sum per weight.

use std::cell::RefCell;

use super::{available, grow, kernel, Plane, Reads, Window, V};

/// Output channels (or weight-gradient rows) per register tile.
pub(super) const OB: usize = 4;
/// Vectors of positions per forward tile, at most (AVX-512: OB x J registers of sums).
pub(super) const J: usize = 6;
/// Taps per weight-gradient tile (AVX-512: OB x TB registers of sums).
pub(super) const TB: usize = 6;
/// Bytes of planes a weight-gradient tile may read in one pass (most of a 48 KiB L1 cache).
const TILE_BYTES: usize = 32 << 10;

/// Whether `forward` / `backward` compute this convolution (otherwise im2col does): an odd
/// square kernel, padding k/2, stride 1 or 2.
pub fn applies(kh: usize, kw: usize, stride: usize, pad: usize) -> bool {
    kh == kw && kh % 2 == 1 && pad == kh / 2 && (1..=2).contains(&stride) && available()
}

/// Weights regrouped for the forward tiles: for each block of OB rows, for each tap, the OB
/// rows' weights side by side (zeros past `rows`). Row r's tap t is w[r * row_step + at[t]]
/// (offsets worked out once per call, not per weight; `ForwardWeights` / `InputGradWeights`
/// call it once per layer and pass).
fn pack(wp: &mut Vec<f32>, rows: usize, w: &[f32], row_step: usize, at: &[usize]) {
    let (blocks, taps) = (rows.div_ceil(OB), at.len());
    wp.clear();
    wp.resize(blocks * taps * OB, 0.0);
    if taps == 0 {
        return;
    }
    for r in 0..rows {
        let (b, i) = (r / OB, r % OB);
        let (src, dst) = (
            &w[r * row_step..],
            &mut wp[b * taps * OB..(b + 1) * taps * OB],
        );
        for (d, &a) in dst[i..].iter_mut().step_by(OB).zip(at) {
            *d = src[a];
        }
    }
}

/// This thread's buffers, grown as needed.
#[derive(Default)]
struct Buffers {
    planes: Vec<f32>,
    douts: Vec<f32>,
    outq: Vec<f32>,
    bias: Vec<f32>,
    offs: Vec<usize>,
}

thread_local! {
    static BUFFERS: RefCell<Buffers> = RefCell::new(Buffers::default());
}

/// A layer's weights regrouped for the forward tiles (`pack`): made once per pass over the
/// layer and shared by the calls for its groups of images (`nn::grouped`).
pub struct ForwardWeights(Vec<f32>);

impl ForwardWeights {
    /// w[OC, C, K, K] regrouped.
    pub fn new(w: &[f32], c: usize, oc: usize, k: usize) -> ForwardWeights {
        let ckk = c * k * k;
        let at: Vec<usize> = (0..ckk).collect();
        let mut wp = Vec::new();
        pack(&mut wp, oc, w, ckk, &at);
        ForwardWeights(wp)
    }
}

/// out[B,OC,OH,OW] = inp[B,C,H,W] (*) w[OC,C,K,K] + bias[OC] with padding K/2 and the window's
/// stride (`applies` holds; the caller checked the lengths); `w` as `ForwardWeights` made.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    out: &mut [f32],
    inp: &[f32],
    w: &ForwardWeights,
    bias: &[f32],
    b: usize,
    c: usize,
    oc: usize,
    win @ (h, w_in, _, _): Window,
) {
    let r = Reads::new(win);
    let (g, per) = (r.out(), r.per_channel());
    let (hw, ohw) = (h * w_in, g.h * g.w);
    BUFFERS.with(|s| {
        let s = &mut *s.borrow_mut();
        let rows = oc.next_multiple_of(OB);
        s.bias.clear();
        s.bias.extend_from_slice(&bias[..oc]);
        s.bias.resize(rows, 0.0);
        r.taps(c, 1, &mut s.offs);
        grow(&mut s.planes, c * per);
        grow(&mut s.outq, rows * g.positions());
        for n in 0..b {
            for ch in 0..c {
                let img = &inp[(n * c + ch) * hw..(n * c + ch + 1) * hw];
                r.fill(&mut s.planes[ch * per..(ch + 1) * per], img);
            }
            convolve(&mut s.outq, &s.planes, &s.offs, &w.0, &s.bias, rows, g);
            let o = &mut out[n * oc * ohw..(n + 1) * oc * ohw];
            for (r, img) in o.chunks_exact_mut(ohw).enumerate() {
                g.gather(img, &s.outq[r * g.positions()..]);
            }
        }
    });
}

/// A layer's weights regrouped for its input gradient, with where each tap reads dout's
/// planes: for stride 1 one product (the weights flipped and transposed: C rows and OC x K x K
/// taps), for stride 2 one per parity plane of the input (the taps that read it). Made once
/// per pass over the layer, like `ForwardWeights`.
pub struct InputGradWeights(Vec<(Vec<f32>, Vec<usize>)>);

impl InputGradWeights {
    /// w[OC, C, K, K] regrouped for the window `win`.
    pub fn new(w: &[f32], c: usize, oc: usize, win @ (_, _, k, _): Window) -> InputGradWeights {
        let r = Reads::new(win);
        let kk = k * k;
        match &r {
            Reads::Same(g) => {
                // row r (an input channel), tap (o, t): w[o, r] flipped
                let at: Vec<usize> = (0..oc)
                    .flat_map(|o| (0..kk).map(move |t| o * c * kk + kk - 1 - t))
                    .collect();
                let (mut wp, mut offs) = (Vec::new(), Vec::new());
                pack(&mut wp, c, w, kk, &at);
                g.taps(oc, 1, &mut offs);
                InputGradWeights(vec![(wp, offs)])
            }
            Reads::Halved(halves) => {
                let g = &halves.g;
                InputGradWeights(
                    (0..4)
                        .map(|phase| {
                            let (mut taps, mut at, mut wp) = (Vec::new(), Vec::new(), Vec::new());
                            halves.back_taps(phase, &mut taps, &mut at);
                            let weights: Vec<usize> = (0..oc)
                                .flat_map(|o| taps.iter().map(move |&t| o * c * kk + t))
                                .collect();
                            pack(&mut wp, c, w, kk, &weights);
                            let offs = (0..oc)
                                .flat_map(|o| at.iter().map(move |off| o * g.len + off))
                                .collect();
                            (wp, offs)
                        })
                        .collect(),
                )
            }
        }
    }
}

/// dinp[B,C,H,W] = d/dinp (overwritten; skipped when `None`; its weights as
/// `InputGradWeights` made) and dw[OC,C,K,K] += d/dw for `forward`'s convolution (the bias
/// gradient is the caller's: it does not depend on the way).
#[allow(clippy::too_many_arguments)]
pub fn backward(
    dinp: Option<(&mut [f32], &InputGradWeights)>,
    dw: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    b: usize,
    c: usize,
    oc: usize,
    win @ (h, w_in, k, _): Window,
) {
    let r = Reads::new(win);
    let (g, per) = (*r.out(), r.per_channel());
    let (kk, hw, ohw) = (k * k, h * w_in, g.h * g.w);
    let ckk = c * kk;
    BUFFERS.with(|s| {
        let s = &mut *s.borrow_mut();
        let rows = oc.next_multiple_of(OB);
        grow(&mut s.planes, b * c * per);
        grow(&mut s.douts, b * rows * g.len);
        for n in 0..b {
            for ch in 0..c {
                let img = &inp[(n * c + ch) * hw..(n * c + ch + 1) * hw];
                let at = (n * c + ch) * per;
                r.fill(&mut s.planes[at..at + per], img);
            }
            for r in 0..rows {
                let at = (n * rows + r) * g.len;
                let plane = &mut s.douts[at..at + g.len];
                match r < oc {
                    true => g.fill(plane, &dout[(n * oc + r) * ohw..(n * oc + r + 1) * ohw]),
                    false => plane.fill(0.0),
                }
            }
        }
        // dw[oc, t] += sum over images and positions of dout_oc[q] * planes[off(t) + q], in
        // passes over as many images as keep a tile's planes in the L1 cache (a tile reads OB
        // dout planes and the one or two input planes of its taps per image)
        r.taps(c, TB, &mut s.offs);
        let per_pass = (TILE_BYTES / ((OB + 2) * g.len * 4)).clamp(1, b.max(1));
        let mut tile = [[0.0f32; TB]; OB];
        for n0 in (0..b).step_by(per_pass) {
            let images = per_pass.min(b - n0);
            let douts = &s.douts[n0 * rows * g.len..];
            let planes = &s.planes[n0 * c * per..];
            for r0 in (0..rows).step_by(OB) {
                for t0 in (0..s.offs.len()).step_by(TB) {
                    let offs: &[usize; TB] = s.offs[t0..t0 + TB].try_into().expect("TB taps");
                    weight_tile(
                        &mut tile,
                        images,
                        douts,
                        rows,
                        r0,
                        planes,
                        c * per,
                        offs,
                        &g,
                    );
                    for (i, row) in tile.iter().enumerate().take(oc.saturating_sub(r0)) {
                        for (j, v) in row.iter().enumerate().take(ckk.saturating_sub(t0)) {
                            dw[(r0 + i) * ckk + t0 + j] += v;
                        }
                    }
                }
            }
        }
        let Some((dinp, packs)) = dinp else { return };
        let crows = c.next_multiple_of(OB);
        s.bias.clear();
        s.bias.resize(crows, 0.0);
        match &r {
            // dinp = dout's planes (*) w flipped, with C rows and OC x K x K taps
            Reads::Same(g) => {
                let (wp, offs) = &packs.0[0];
                grow(&mut s.outq, crows * g.positions());
                for n in 0..b {
                    let planes = &s.douts[n * rows * g.len..(n + 1) * rows * g.len];
                    convolve(&mut s.outq, planes, offs, wp, &s.bias, crows, g);
                    let d = &mut dinp[n * c * hw..(n + 1) * c * hw];
                    for (r, img) in d.chunks_exact_mut(hw).enumerate() {
                        g.gather(img, &s.outq[r * g.positions()..]);
                    }
                }
            }
            // each parity plane of dinp = dout's planes against the taps that read it
            Reads::Halved(halves) => {
                let n = g.positions();
                grow(&mut s.outq, 4 * crows * n);
                for img in 0..b {
                    let planes = &s.douts[img * rows * g.len..(img + 1) * rows * g.len];
                    for (phase, (wp, offs)) in packs.0.iter().enumerate() {
                        let out = &mut s.outq[phase * crows * n..(phase + 1) * crows * n];
                        convolve(out, planes, offs, wp, &s.bias, crows, &g);
                    }
                    for ch in 0..c {
                        let d = &mut dinp[(img * c + ch) * hw..(img * c + ch + 1) * hw];
                        halves.scatter(d, 0, &s.outq[ch * n..], crows * n);
                    }
                }
            }
        }
    });
}

/// outq[r, q] = bias[r] + sum_t wp(r, t) * planes[offs[t] + q] for r < rows (a multiple of OB)
/// and q < g.positions().
fn convolve(
    outq: &mut [f32],
    planes: &[f32],
    offs: &[usize],
    wp: &[f32],
    bias: &[f32],
    rows: usize,
    g: &Plane,
) {
    let positions = g.positions();
    let taps = offs.len();
    let reach = offs.iter().max().copied().unwrap_or(0) + positions;
    assert!(planes.len() >= reach, "direct: planes too short");
    assert!(outq.len() >= rows * positions && bias.len() >= rows && rows.is_multiple_of(OB));
    assert!(wp.len() >= rows * taps);
    for q0 in (0..positions).step_by(J * V) {
        let nj = ((positions - q0) / V).min(J);
        for r0 in (0..rows).step_by(OB) {
            let out = outq[r0 * positions + q0..].as_mut_ptr();
            let x = planes[q0..].as_ptr();
            let w = wp[r0 * taps..].as_ptr();
            let bias = &bias[r0..r0 + OB];
            // SAFETY: `applies` saw the kernels' instructions; the tile writes OB rows of nj
            // vectors from (r0, q0), inside outq (asserted), reads planes up to max(offs) + q0
            // + nj*V <= reach (asserted), and OB weights for each of `taps` taps of block r0/OB.
            unsafe { kernel!(forward_tile(out, positions, x, offs, w, bias, nj)) }
        }
    }
}

/// tile[i][j] = sum over `images` and positions of douts(r0 + i)[q] * planes[offs[j] + q], where
/// image n's planes start at n * plane_image and its dout planes at n * rows * g.len.
#[allow(clippy::too_many_arguments)]
fn weight_tile(
    tile: &mut [[f32; TB]; OB],
    images: usize,
    douts: &[f32],
    rows: usize,
    r0: usize,
    planes: &[f32],
    plane_image: usize,
    offs: &[usize; TB],
    g: &Plane,
) {
    let positions = g.positions();
    let reach = offs.iter().max().copied().unwrap_or(0) + positions;
    assert!(r0 + OB <= rows && images * rows * g.len <= douts.len());
    assert!(images == 0 || (images - 1) * plane_image + reach <= planes.len());
    assert!(g.origin() + positions <= g.len);
    let dout = douts[r0 * g.len + g.origin()..].as_ptr();
    let (dout_image, x) = (rows * g.len, planes.as_ptr());
    // SAFETY: `applies` saw the kernels' instructions; image n reads its dout planes r0..r0+OB
    // at origin + q (< len, asserted) and its planes at offs + q < reach (asserted), q <
    // positions.
    unsafe {
        kernel!(weight_tile(
            tile,
            images,
            dout,
            dout_image,
            g.len,
            x,
            plane_image,
            offs,
            positions
        ))
    }
}
