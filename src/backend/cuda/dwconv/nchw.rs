//! Depthwise convolution's launches over NCHW activations (`kernels/depthwise.cu`): one thread
//! per output forward and per input pixel for the input gradient; the weight gradient of a 3x3
//! window in one pass over dout and the input, one block per (channel, part of its outputs)
//! into scratch, then the parts added in order (other windows one block per (channel, tap)).

use cudarc::driver::{CudaView, CudaViewMut, LaunchConfig};

use super::super::elem::Elem;
use super::super::launch::{blocks_cfg, grid_stride_cfg, MAX_BLOCKS, SMALL, THREADS};
use super::super::{CudaError, Gpu};
use super::add_parts;
use crate::nn::grouped::ConvGeom;

/// Blocks a 3x3 weight gradient aims at in all (channels x parts), and the fewest outputs of a
/// channel a part takes (4 a thread).
const WEIGHT_BLOCKS: usize = 1024;
const WEIGHT_PART_MIN: usize = 4 * THREADS as usize;

/// The parts a channel's B*OH*OW outputs are summed in by `dwconv_weight_parts3`: about
/// WEIGHT_BLOCKS blocks in all, each part at least WEIGHT_PART_MIN outputs (fixed by the sizes
/// alone).
fn weight_parts(b: usize, g: &ConvGeom) -> usize {
    let by_blocks = WEIGHT_BLOCKS.div_ceil(g.c.max(1));
    let by_size = (b * g.oh * g.ow).div_ceil(WEIGHT_PART_MIN);
    by_blocks.min(by_size).clamp(1, u16::MAX as usize)
}

/// Whether the weight gradient over `b` images of `g` takes the one-pass kernel: a 3x3 window,
/// and every offset of the input and of dout in an int.
fn one_pass(b: usize, g: &ConvGeom) -> bool {
    let fits = |v: Option<usize>| v.is_some_and(|v| v < SMALL);
    let plane = |h: usize, w: usize| b.checked_mul(g.c)?.checked_mul(h)?.checked_mul(w);
    g.k == 3 && fits(plane(g.h, g.w)) && fits(plane(g.oh, g.ow))
}

/// Floats of the one-pass weight gradient's partial sums (parts x C x 9) over any batch of up
/// to `b` images (a buffer sized for `b` serves them all: fewer images, an epoch's short last
/// batch, may take the one-pass kernel where `b` do not); none for other windows.
pub(super) fn weight_scratch_len(b: usize, g: &ConvGeom) -> usize {
    let image = g.c.saturating_mul((g.h * g.w).max(g.oh * g.ow)).max(1);
    let most = b.min((SMALL - 1) / image);
    match most > 0 && one_pass(most, g) {
        true => weight_parts(most, g) * g.c * 9,
        false => 0,
    }
}

/// The kernel and grid of out[B,C,OH,OW] = inp[B,C,H,W] (*) w (+ bias): a thread per output.
pub(super) fn forward<E: Elem>(b: usize, g: &ConvGeom) -> (&'static str, LaunchConfig) {
    let cfg = grid_stride_cfg(b * g.c * g.oh * g.ow);
    (named!(E, "dwconv_forward"), cfg)
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
    let kk = g.c * g.k * g.k;
    if !one_pass(b, g) {
        return try_launch!(
            gpu,
            named!(E, "dwconv_backward_weight"),
            blocks_cfg(kk),
            &mut *dw,
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
        );
    }
    let parts = weight_parts(b, g);
    let cfg = LaunchConfig {
        grid_dim: (g.c.min(MAX_BLOCKS as usize) as u32, parts as u32, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    try_launch!(
        gpu,
        named!(E, "dwconv_weight_parts3"),
        cfg,
        &mut *scratch,
        dout,
        inp,
        &bi,
        &c,
        &h,
        &wd,
        &s,
        &p,
        &oh,
        &ow
    )?;
    add_parts(gpu, dw, &scratch.as_view(), parts, kk)
}

/// The kernel and grid of dinp[B,C,H,W] = d/dinp (overwritten): a thread per input pixel.
pub(super) fn backward_input<E: Elem>(b: usize, g: &ConvGeom) -> (&'static str, LaunchConfig) {
    let cfg = grid_stride_cfg(b * g.c * g.h * g.w);
    (named!(E, "dwconv_backward_input"), cfg)
}

#[cfg(test)]
mod tests {
    use super::super::tests::geom as dw;
    use super::*;

    #[test]
    fn a_3x3_weight_gradient_is_summed_in_parts_that_fill_the_gpu_and_its_scratch_holds_them() {
        // MobileNetV2's first depthwise layer at batch 64: 32 channels of 64x112x112 outputs,
        // 32 parts of them (1024 blocks); its last: 960 channels of 64x7x7, 2 parts
        let first = dw(32, (112, 112), (3, 1, 1));
        assert_eq!(weight_parts(64, &first), 32);
        assert_eq!(weight_scratch_len(64, &first), 32 * 32 * 9);
        let last = dw(960, (7, 7), (3, 1, 1));
        assert_eq!(weight_parts(64, &last), 2);
        // a stride-2 layer: its outputs decide; few outputs: one part of at least 4 a thread
        let down = dw(144, (56, 56), (3, 2, 1));
        assert_eq!(weight_parts(64, &down), (1024usize).div_ceil(144));
        assert_eq!(weight_parts(2, &dw(8, (4, 4), (3, 1, 1))), 1);
        assert_eq!(weight_parts(0, &first), 1);
        // other windows, or offsets past an int: the per-tap kernel, no scratch
        assert_eq!(weight_scratch_len(64, &dw(32, (56, 56), (5, 1, 2))), 0);
        let huge = dw(1024, (1024, 1024), (3, 1, 1));
        assert!(!one_pass(4, &huge));
        // (a batch of 4 takes the per-tap kernel, one of them the one-pass kernel: its scratch
        // serves both)
        assert!(one_pass(1, &huge));
        assert_eq!(
            weight_scratch_len(4, &huge),
            weight_parts(1, &huge) * 1024 * 9
        );
        assert!(one_pass(1, &dw(1024, (1024, 1024), (3, 2, 1))));
    }

    #[test]
    fn a_scratch_sized_for_a_batch_holds_what_every_smaller_batch_needs() {
        for g in [dw(32, (112, 112), (3, 1, 1)), dw(96, (224, 224), (3, 1, 1))] {
            let most = weight_scratch_len(1024, &g);
            for b in 0..=1024 {
                let needs = if one_pass(b, &g) {
                    weight_parts(b, &g) * g.c * 9
                } else {
                    0
                };
                assert!(
                    needs <= most,
                    "{b} images need {needs}, the scratch holds {most}"
                );
                assert!(weight_scratch_len(b, &g) <= most);
            }
        }
    }
}
