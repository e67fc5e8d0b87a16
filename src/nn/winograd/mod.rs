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
//! `weights` transforms a layer's weights (and their gradient back), `chunk` lays out and
//! transforms a chunk of blocks, `avx2` holds the kernels (AVX2 + FMA); `applies` says where
//! this way runs.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(test)]
mod tests;

use std::sync::OnceLock;

use super::{direct, grow};

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
/// products, for the price of chunks past the L2 cache on wide layers; ResNet-20 at batch 128,
/// medians of four noisy interleaved rounds: 20% less CPU time than the direct kernels, 11%
/// with 64).
const LEAST_BLOCKS: usize = 256;

/// `MGTOP_WINOGRAD` refused where it is none of its values (unset or empty: the default, on
/// where the CPU's widest kernels are AVX2, or AVX-512 on 256-bit units).
pub fn check_env() -> Result<(), String> {
    crate::switches::check("MGTOP_WINOGRAD", &["on", "off"], "on or off")
}

/// Whether this process computes 3x3 stride-1 convolutions this way: by default on CPUs whose
/// widest direct kernels are AVX2, and on those whose AVX-512 runs on 256-bit units (AMD's Zen
/// 4), where it is faster than them (ResNet-20 15-30% on a Zen 4 VM; on a Zen 5 VM the AVX-512
/// tiles ran near peak on their own); `MGTOP_WINOGRAD=off` never, `on` also with full-width
/// AVX-512 (for comparisons). Read once per process.
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let wanted = std::env::var("MGTOP_WINOGRAD").unwrap_or_default();
        decide(&wanted, direct::isa(), has_avx2(), half_width_avx512())
    })
}

/// `half_width`: AVX-512 on 256-bit units (`half_width_avx512`).
fn decide(wanted: &str, isa: Option<direct::Isa>, avx2: bool, half_width: bool) -> bool {
    match (wanted, isa) {
        ("off", _) | (_, None) => false,
        ("on", _) | (_, Some(direct::Isa::Avx2)) => avx2,
        (_, Some(direct::Isa::Avx512)) => avx2 && half_width,
    }
}

/// Whether this CPU runs AVX-512 on 256-bit units, each 512-bit operation twice: AMD's
/// family 19h (Zen 4; Zen 5, family 1Ah, has full-width units).
#[cfg(target_arch = "x86_64")]
fn half_width_avx512() -> bool {
    // (leaves 0 and 1 exist on every x86-64 CPU)
    let v = std::arch::x86_64::__cpuid(0);
    let vendor = [v.ebx, v.edx, v.ecx].map(u32::to_le_bytes).concat();
    let signature = std::arch::x86_64::__cpuid(1).eax;
    let base = (signature >> 8) & 0xf;
    let family = match base {
        0xf => base + ((signature >> 20) & 0xff),
        b => b,
    };
    vendor == b"AuthenticAMD" && family == 0x19
}

#[cfg(not(target_arch = "x86_64"))]
fn half_width_avx512() -> bool {
    false
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
        let done = $crate::nn::winograd::avx2::$f($($a),*);
        #[cfg(not(target_arch = "x86_64"))]
        let done = {
            $(let _ = $a;)*
            unreachable!("Winograd convolutions need AVX2")
        };
        done
    }};
}

mod chunk;
mod weights;

use chunk::{
    products, transform_grads, transform_inputs, transform_outputs, Blocks, Chunk, BUFFERS,
};
use weights::add_weight_grads;
pub use weights::Weights;

/// Floats a convolution of c -> oc channels over h x w images takes this way beside its
/// weights, at most (what a run's memory estimate counts): the transformed weights of one pass
/// and one thread's buffers, each as large as either pass grows it.
pub fn floats(c: usize, oc: usize, (h, w): (usize, usize)) -> usize {
    let g = Blocks::new(h, w);
    let (cp, kp) = (c.next_multiple_of(RB), oc.next_multiple_of(RB));
    let weights = XI * (kp * c).max(cp * oc);
    // the forward pass's chunks are the larger
    let per = g.rows_per_chunk(c + oc);
    let stride = Chunk::new(per, g.tw).stride;
    let halves = (2 * per + 2) * 2 * g.half;
    let buffers = XI * stride * (c.max(oc) + kp + cp.max(kp)) + XI * kp * c + halves;
    weights + buffers
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
        add_weight_grads(dw, &s.s, c, oc, kp);
    });
}
