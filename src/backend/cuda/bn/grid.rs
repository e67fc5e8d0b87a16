//! Where batch norm's kernels run: how many parts a channel's values are summed in, the
//! scratch that takes, each layout's launch (NCHW: one block per (channel, part); channels last:
//! `nhwc_block`), and the in-order addition of the parts.

use cudarc::driver::{CudaView, CudaViewMut, LaunchConfig};

use crate::backend::cuda::launch::{blocks_cfg, grid_stride_cfg, MAX_BLOCKS, THREADS};
use crate::backend::cuda::layout::Layout;
use crate::backend::cuda::{CudaError, Gpu};

/// Values of a channel one block sums (at most; fewer parts than that where `MAX_PARTS` caps).
const PART: usize = 4096;
const MAX_PARTS: usize = 64;

/// Channels-last blocks (`kernels/bn_nhwc.cu`, `nhwc_block`): at most NHWC_THREADS threads,
/// at most NHWC_MAX_LANES lanes of two channels; each part at least a walk's step of rows (8
/// per row of threads), about `NHWC_BLOCKS` blocks in all where the rows allow, at most
/// `NHWC_MAX_PARTS` parts.
const NHWC_THREADS: usize = 256;
pub(super) const NHWC_MAX_LANES: usize = 32;
const NHWC_BLOCKS: usize = 1024;
const NHWC_MAX_PARTS: usize = 1024;

/// A channels-last launch's blocks across the channels, and each block's lanes and rows of
/// threads: the channel pairs spread evenly over the fewest blocks of at most NHWC_MAX_LANES
/// lanes (so C < 64 is one block whose lanes are its pairs, and a warp reads whole rows), as
/// many rows as NHWC_THREADS allows.
pub(super) fn nhwc_block(c: usize) -> (usize, usize, usize) {
    let pairs = c.div_ceil(2).max(1);
    let blocks = pairs.div_ceil(NHWC_MAX_LANES);
    let lanes = pairs.div_ceil(blocks);
    (blocks, lanes, NHWC_THREADS / lanes)
}

/// How many parts a channel of `per_channel` values (B*HW) is summed in: in NCHW enough blocks
/// to fill a GPU when the channels are few and long (ResNet's first stage: 16 channels of 128K
/// values); channels last, enough parts of the rows for about `NHWC_BLOCKS` blocks.
pub fn parts(layout: Layout, c: usize, per_channel: usize) -> usize {
    match layout {
        Layout::Nchw => per_channel.div_ceil(PART).clamp(1, MAX_PARTS),
        Layout::Nhwc => {
            let (blocks, _, rows) = nhwc_block(c);
            let steps = per_channel.div_ceil(rows * 8);
            steps
                .min(NHWC_BLOCKS.div_ceil(blocks))
                .clamp(1, NHWC_MAX_PARTS)
        }
    }
}

/// Doubles of the scratch one batch norm of `c` channels over `per_channel` values (B*HW, the
/// most rows it will see) needs in `layout`: the sums, and each part's.
pub fn scratch_len(layout: Layout, c: usize, per_channel: usize) -> usize {
    4 * c + 2 * c * parts(layout, c, per_channel)
}

/// NCHW: one block per (channel, part), channels grid-stride beyond `MAX_BLOCKS`. Channels
/// last: one block per (its channels, part), `nhwc_block`.
pub(super) fn parts_cfg(layout: Layout, c: usize, parts: usize) -> LaunchConfig {
    let (grid_x, block_dim) = match layout {
        Layout::Nchw => (c.clamp(1, MAX_BLOCKS as usize), (THREADS, 1, 1)),
        Layout::Nhwc => {
            let (blocks, lanes, rows) = nhwc_block(c);
            (blocks, (lanes as u32, rows as u32, 1))
        }
    };
    LaunchConfig {
        grid_dim: (grid_x as u32, parts as u32, 1),
        block_dim,
        shared_mem_bytes: 0,
    }
}

/// out[len] = the sum over `parts` of partial[parts, len]: in order (`bn_reduce_f32`), or for
/// channels last's many parts by a block per output (`bn_reduce_parts_f32`).
pub(super) fn reduce(
    gpu: &Gpu,
    layout: Layout,
    out: &mut CudaViewMut<'_, f64>,
    partial: &CudaView<'_, f64>,
    parts: usize,
    len: usize,
) -> Result<(), CudaError> {
    let (pi, li) = (parts as i32, len as i32);
    match layout {
        Layout::Nchw => {
            let cfg = grid_stride_cfg(len);
            try_launch!(gpu, "bn_reduce_f32", cfg, &mut *out, partial, &pi, &li)
        }
        Layout::Nhwc => {
            let cfg = blocks_cfg(len);
            try_launch!(
                gpu,
                "bn_reduce_parts_f32",
                cfg,
                &mut *out,
                partial,
                &pi,
                &li
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cuda::kernels::SOURCES;

    #[test]
    fn channels_last_blocks_fit_the_kernels_and_parts_cover_the_rows() {
        let (_, src) = SOURCES.iter().find(|(f, _)| *f == "bn_nhwc.cu").unwrap();
        let threads: usize = (src.lines())
            .find_map(|l| l.strip_prefix("#define NHWC_THREADS "))
            .expect("bn_nhwc.cu defines NHWC_THREADS")
            .trim()
            .parse()
            .unwrap();
        assert_eq!(threads, NHWC_THREADS, "column_sum's shared sums");
        for c in [2, 16, 24, 64, 96, 130, 2048] {
            let (blocks, lanes, rows) = nhwc_block(c);
            assert!(
                lanes * rows <= NHWC_THREADS && lanes <= NHWC_MAX_LANES,
                "{c}"
            );
            assert!(2 * blocks * lanes >= c, "{c}: every channel has a lane");
            assert!(
                2 * (blocks - 1) * lanes < c,
                "{c}: no block without channels"
            );
        }
        // ResNet-20's 16 channels: one block of 8 lanes and 32 rows (a warp: 4 whole rows)
        assert_eq!(nhwc_block(16), (1, 8, 32));
        // 96 channels: two blocks of 24 lanes, none idle; 130: three of 22, one idle
        assert_eq!(nhwc_block(96), (2, 24, 10));
        let cfg = parts_cfg(Layout::Nhwc, 130, 7);
        assert_eq!((cfg.grid_dim, cfg.block_dim), ((3, 7, 1), (22, 11, 1)));
        // ResNet-50's first batch norm: few channels, many rows: many parts; its last: many
        // channels, few rows: fewer parts, about NHWC_BLOCKS blocks either way
        assert_eq!(parts(Layout::Nhwc, 64, 128 * 112 * 112), NHWC_BLOCKS);
        let last = parts(Layout::Nhwc, 2048, 128 * 7 * 7);
        assert_eq!(last * nhwc_block(2048).0, NHWC_BLOCKS);
        // a part has at least a walk's step of rows; nothing to sum is one part
        assert_eq!(parts(Layout::Nhwc, 64, 100), 2);
        assert_eq!(parts(Layout::Nhwc, 2, 8800), 5);
        assert_eq!(parts(Layout::Nhwc, 8, 0), 1);
        // NCHW keeps its parts
        assert_eq!(parts(Layout::Nchw, 3, 8800), 3);
        let first = parts(Layout::Nhwc, 64, 128 * 112 * 112);
        assert_eq!(
            scratch_len(Layout::Nhwc, 64, 128 * 112 * 112),
            4 * 64 + 2 * 64 * first
        );
    }
}
