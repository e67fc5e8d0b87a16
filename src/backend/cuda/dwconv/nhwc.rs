//! Depthwise convolution's launches over channels-last activations
//! (`kernels/depthwise_nhwc.cu`): each thread a vector of neighbouring channels of a pixel
//! (`Walk`), blocks of lanes across the channels and rows of threads across the pixels
//! (`launch::channel_blocks`, as batch norm's); the weight gradient in parts of the pixels into
//! scratch, then the parts added in order.

use cudarc::driver::{CudaView, CudaViewMut, LaunchConfig};

use super::super::elem::Elem;
use super::super::launch::{channel_blocks, start, THREADS};
use super::super::{CudaError, Gpu};
use super::add_parts;
use crate::nn::grouped::ConvGeom;

/// Pixels each thread of the forward and input-gradient launches takes (about: its window's
/// weights are loaded once for them).
const ROW_STEPS: usize = 4;
/// The weight gradient's parts: about PART_BLOCKS blocks in all, each thread at least
/// PART_STEPS pixels, at most MAX_PARTS parts (`dwconv_weight_sum_f32` adds a weight's parts
/// one after another).
const PART_BLOCKS: usize = 1024;
const PART_STEPS: usize = 4;
const MAX_PARTS: usize = 256;
/// CUDA's limit on a grid's y.
const MAX_GRID_Y: usize = 65535;

/// How a thread takes its channels: a 16-byte vector of `v` (4 floats or 8 bf16) with a 3x3
/// window's weights in registers (`Wide3`: C a multiple of v, every tensor 16-byte aligned),
/// or one channel and any window (`One`). The same sums either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Walk {
    One,
    Wide3(usize),
}

impl Walk {
    /// The walk for `g` over `bytes`-byte elements, the tensors 16-byte `aligned` or not.
    fn of(g: &ConvGeom, bytes: usize, aligned: bool) -> Walk {
        let v = 16 / bytes;
        match g.k == 3 && aligned && g.c.is_multiple_of(v) {
            true => Walk::Wide3(v),
            false => Walk::One,
        }
    }

    fn channels(self) -> usize {
        match self {
            Walk::One => 1,
            Walk::Wide3(v) => v,
        }
    }

    /// The walk over tensors of `E` starting at these views.
    fn over<E: Elem>(g: &ConvGeom, starts: [u64; 2]) -> Walk {
        Walk::of(g, E::BYTES, starts.iter().all(|a| a.is_multiple_of(16)))
    }
}

/// The kernel of op `$op` for activations of type `$e` walked by `$walk`.
macro_rules! dwn_kernel {
    ($e:ty, $walk:expr, $op:literal) => {
        match ($walk, <$e as Elem>::BF16) {
            (Walk::One, false) => concat!("dwconv_nhwc_", $op, "_f32"),
            (Walk::One, true) => concat!("dwconv_nhwc_", $op, "_bf16"),
            (Walk::Wide3(_), false) => concat!("dwconv_nhwc_wide3_", $op, "_f32"),
            (Walk::Wide3(_), true) => concat!("dwconv_nhwc_wide3_", $op, "_bf16"),
        }
    };
}

/// A launch over C channels and `grid_y` blocks of rows (parts or a spread of the pixels).
fn cfg(walk: Walk, c: usize, grid_y: usize) -> LaunchConfig {
    let (blocks, lanes, rows) = channel_blocks(c.div_ceil(walk.channels()), THREADS as usize);
    LaunchConfig {
        grid_dim: (blocks as u32, grid_y as u32, 1),
        block_dim: (lanes as u32, rows as u32, 1),
        shared_mem_bytes: 0,
    }
}

/// Blocks of rows over `pixels` pixels for the kernels that make no sums: ROW_STEPS each.
fn spread(walk: Walk, c: usize, pixels: usize) -> usize {
    let rows = cfg(walk, c, 1).block_dim.1 as usize;
    pixels.div_ceil(rows * ROW_STEPS).clamp(1, MAX_GRID_Y)
}

/// The parts the weight gradient sums a channel's `pixels` outputs in.
fn parts(walk: Walk, c: usize, pixels: usize) -> usize {
    let LaunchConfig {
        grid_dim: (blocks, _, _),
        block_dim: (_, rows, _),
        ..
    } = cfg(walk, c, 1);
    let by_size = pixels.div_ceil(rows as usize * PART_STEPS);
    by_size
        .min(PART_BLOCKS.div_ceil(blocks as usize))
        .clamp(1, MAX_PARTS)
}

/// Floats of the weight gradient's partial sums (parts x C x K*K) whichever walk it takes.
pub(super) fn weight_scratch_len(b: usize, g: &ConvGeom) -> usize {
    let pixels = b * g.oh * g.ow;
    let most = [Walk::One, Walk::Wide3(4), Walk::Wide3(8)]
        .map(|w| parts(w, g.c, pixels))
        .into_iter()
        .max()
        .unwrap_or(1);
    most * g.c * g.k * g.k
}

/// The kernel and grid of out[B,OH,OW,C] = inp[B,H,W,C] (*) w (+ bias), the tensors starting
/// at `starts`.
pub(super) fn forward<E: Elem>(
    b: usize,
    g: &ConvGeom,
    starts: [u64; 2],
) -> (&'static str, LaunchConfig) {
    let walk = Walk::over::<E>(g, starts);
    let grid = spread(walk, g.c, b * g.oh * g.ow);
    (dwn_kernel!(E, walk, "forward"), cfg(walk, g.c, grid))
}

/// dw[C,1,K,K] += d/dw; `scratch` overwritten.
pub(super) fn backward_weight<E: Elem>(
    gpu: &Gpu,
    dw: &mut CudaViewMut<'_, f32>,
    scratch: &mut CudaViewMut<'_, f32>,
    (dout, inp): (&CudaView<'_, E>, &CudaView<'_, E>),
    b: usize,
    g: &ConvGeom,
    [bi, c, h, wd, k, s, p, oh, ow]: [i32; 9],
) -> Result<(), CudaError> {
    let walk = Walk::over::<E>(g, [start(gpu, dout), start(gpu, inp)]);
    let parts = parts(walk, g.c, b * g.oh * g.ow);
    try_launch!(
        gpu,
        dwn_kernel!(E, walk, "weight_parts"),
        cfg(walk, g.c, parts),
        &mut *scratch,
        dout,
        inp,
        &bi,
        &c,
        &h,
        &wd,
        &k,
        &s,
        &p,
        &oh,
        &ow
    )?;
    add_parts(gpu, dw, &scratch.as_view(), parts, g.c * g.k * g.k)
}

/// The kernel and grid of dinp[B,H,W,C] = d/dinp (overwritten), the tensors starting at
/// `starts`.
pub(super) fn backward_input<E: Elem>(
    b: usize,
    g: &ConvGeom,
    starts: [u64; 2],
) -> (&'static str, LaunchConfig) {
    let walk = Walk::over::<E>(g, starts);
    let grid = spread(walk, g.c, b * g.h * g.w);
    (dwn_kernel!(E, walk, "backward_input"), cfg(walk, g.c, grid))
}

#[cfg(test)]
mod tests {
    use super::super::tests::geom as dw;
    use super::*;

    #[test]
    fn a_3x3_window_over_whole_aligned_vectors_of_channels_takes_the_wide_kernels() {
        let mb = dw(96, (56, 56), (3, 2, 1));
        assert_eq!(Walk::of(&mb, 2, true), Walk::Wide3(8));
        assert_eq!(Walk::of(&mb, 4, true), Walk::Wide3(4));
        // unaligned, a channel count not a multiple of the vector, another window: one a thread
        assert_eq!(Walk::of(&mb, 2, false), Walk::One);
        assert_eq!(Walk::of(&dw(12, (8, 8), (3, 1, 1)), 2, true), Walk::One);
        assert_eq!(
            Walk::of(&dw(12, (8, 8), (3, 1, 1)), 4, true),
            Walk::Wide3(4)
        );
        assert_eq!(Walk::of(&dw(32, (8, 8), (5, 1, 2)), 4, true), Walk::One);
    }

    #[test]
    fn launches_cover_every_channel_and_pixel_and_the_scratch_holds_every_part() {
        // MobileNetV2's first depthwise layer at batch 64 (32 channels of 112x112): in 8-channel
        // vectors one block of 4 lanes and 64 rows, the pixels in 4-step spreads, the weight
        // gradient in MAX_PARTS parts; its last (960 channels of 7x7): 4 blocks of 30 lanes
        let first = dw(32, (112, 112), (3, 1, 1));
        let c = cfg(Walk::Wide3(8), 32, 7);
        assert_eq!((c.grid_dim, c.block_dim), ((1, 7, 1), (4, 64, 1)));
        assert_eq!(
            spread(Walk::Wide3(8), 32, 64 * 112 * 112),
            64 * 112 * 112 / 256
        );
        assert_eq!(parts(Walk::Wide3(8), 32, 64 * 112 * 112), MAX_PARTS);
        let c = cfg(Walk::Wide3(8), 960, 1);
        assert_eq!((c.grid_dim.0, c.block_dim), (4, (30, 8, 1)));
        // a part gives each thread at least PART_STEPS pixels: 3136 pixels, 8 rows
        assert_eq!(parts(Walk::Wide3(8), 960, 64 * 7 * 7), 98);
        for walk in [Walk::One, Walk::Wide3(4), Walk::Wide3(8)] {
            for ch in [1, 3, 8, 32, 96, 136, 960, 2048] {
                let c = cfg(walk, ch, 1);
                let (blocks, lanes, rows) = (c.grid_dim.0, c.block_dim.0, c.block_dim.1);
                assert!(lanes * rows <= THREADS, "{walk:?} {ch}");
                // the weight gradient's column sums: a thread per (lane, channel of its vector)
                assert!(rows >= walk.channels() as u32, "{walk:?} {ch}");
                let v = walk.channels() as u32;
                assert!(
                    v * blocks * lanes >= ch as u32,
                    "{walk:?} {ch}: every channel"
                );
                assert!(
                    v * (blocks - 1) * lanes < ch as u32,
                    "{walk:?} {ch}: no idle block"
                );
            }
            // nothing to sum is one part; the spread never exceeds a grid's y
            assert_eq!(parts(walk, 8, 0), 1);
            assert_eq!(spread(walk, 8, usize::MAX / 2), MAX_GRID_Y);
        }
        // the scratch holds the walk with the most parts (the widest vectors: fewest blocks)
        let most = parts(Walk::Wide3(8), 32, 64 * 112 * 112);
        assert_eq!(weight_scratch_len(64, &first), most * 32 * 9);
        assert!(weight_scratch_len(64, &first) >= parts(Walk::One, 32, 64 * 112 * 112) * 32 * 9);
        assert_eq!(weight_scratch_len(0, &first), 32 * 9);
    }
}
