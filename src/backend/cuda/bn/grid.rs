//! Where batch norm's kernels run: how many parts a channel's values are summed in, the
//! scratch that takes, each layout's launch (NCHW: one block per (channel, part); channels last:
//! `nhwc_block`), and the in-order addition of the parts.

use cudarc::driver::{CudaView, CudaViewMut, LaunchConfig};

use crate::backend::cuda::launch::{
    blocks_cfg, channel_blocks, grid_stride_cfg, MAX_BLOCKS, MAX_LANES, THREADS,
};
use crate::backend::cuda::layout::Layout;
use crate::backend::cuda::{CudaError, Gpu};

/// Values of a channel one block sums (at most; fewer parts than that where `MAX_PARTS` caps).
const PART: usize = 4096;
const MAX_PARTS: usize = 64;

/// Channels-last blocks (`kernels/bn_nhwc.cu`, `nhwc_block`): at most NHWC_THREADS threads,
/// at most NHWC_MAX_LANES lanes of a group of channels; a summing part at least a walk's step
/// of rows per row of threads, about `NHWC_BLOCKS` blocks in all where the rows allow, at most
/// `NHWC_MAX_PARTS` parts; the kernels that only read sums (`spread`) `ROW_STEPS` walk steps
/// per thread, at most `MAX_GRID_Y` parts (CUDA's limit).
const NHWC_THREADS: usize = 256;
pub(super) const NHWC_MAX_LANES: usize = MAX_LANES;
const NHWC_BLOCKS: usize = 1024;
const NHWC_MAX_PARTS: usize = 1024;
const ROW_STEPS: usize = 4;
const MAX_GRID_Y: usize = 65535;

/// Rows a thread of a channels-last kernel loads before it uses them (`BN_UNROLL` and
/// `WIDE_UNROLL` in the kernels).
const PAIR_UNROLL: usize = 8;
const WIDE_UNROLL: usize = 4;

/// Which kernels walk a batch norm's tensors: NCHW's (`kernels/bn.cu`) a value a thread at a
/// time, or a 16-byte vector of a plane's neighbours (`NchwWide`: HW a multiple of it); or
/// channels last's (`kernels/bn_nhwc.cu`) taking each row's channels in pairs (C even) or in
/// 16-byte vectors (`Wide`: C a multiple of it). A vector is 4 floats or 8 bf16, and every
/// tensor must start 16-byte aligned. The same results either way, with a quarter or an eighth
/// of the loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Walk {
    Nchw,
    NchwWide(usize),
    Pairs,
    Wide(usize),
}

impl Walk {
    /// The walk for C channels of HW positions of `bytes`-byte elements in `layout`, the
    /// tensors 16-byte `aligned` or not.
    pub fn of(layout: Layout, (c, hw): (usize, usize), bytes: usize, aligned: bool) -> Walk {
        let v = 16 / bytes;
        match layout {
            Layout::Nchw if aligned && hw.is_multiple_of(v) => Walk::NchwWide(v),
            Layout::Nchw => Walk::Nchw,
            Layout::Nhwc if aligned && c.is_multiple_of(v) => Walk::Wide(v),
            Layout::Nhwc => Walk::Pairs,
        }
    }

    /// Whether it is NCHW's.
    pub fn nchw(self) -> bool {
        matches!(self, Walk::Nchw | Walk::NchwWide(_))
    }

    /// Channels a thread takes of a row (channels last).
    fn channels(self) -> usize {
        match self {
            Walk::Wide(v) => v,
            Walk::Nchw | Walk::NchwWide(_) | Walk::Pairs => 2,
        }
    }

    fn unroll(self) -> usize {
        match self {
            Walk::Wide(_) => WIDE_UNROLL,
            Walk::Nchw | Walk::NchwWide(_) | Walk::Pairs => PAIR_UNROLL,
        }
    }
}

/// A channels-last launch's blocks across the channels, and each block's lanes and rows of
/// threads: the groups of channels (`Walk::channels`) spread evenly over the fewest blocks of
/// at most NHWC_MAX_LANES lanes (so few channels are one block whose lanes are its groups, and
/// a warp reads whole rows), as many rows as NHWC_THREADS allows.
pub(super) fn nhwc_block(walk: Walk, c: usize) -> (usize, usize, usize) {
    channel_blocks(c.div_ceil(walk.channels()), NHWC_THREADS)
}

/// How many parts a channel of `per_channel` values (B*HW) is summed in: in NCHW enough blocks
/// to fill a GPU when the channels are few and long (ResNet's first stage: 16 channels of 128K
/// values); channels last, enough parts of the rows for about `NHWC_BLOCKS` blocks.
pub fn parts(walk: Walk, c: usize, per_channel: usize) -> usize {
    match walk {
        Walk::Nchw | Walk::NchwWide(_) => per_channel.div_ceil(PART).clamp(1, MAX_PARTS),
        Walk::Pairs | Walk::Wide(_) => {
            let (blocks, _, rows) = nhwc_block(walk, c);
            let steps = per_channel.div_ceil(rows * walk.unroll());
            steps
                .min(NHWC_BLOCKS.div_ceil(blocks))
                .clamp(1, NHWC_MAX_PARTS)
        }
    }
}

/// The parts of the kernels that read the sums but make none (the output, the input gradient):
/// NCHW's `parts`; channels last, `ROW_STEPS` walk steps of rows per thread, so that the blocks
/// are many and each thread's per-channel constants serve several rows.
pub(super) fn spread(walk: Walk, c: usize, per_channel: usize) -> usize {
    match walk {
        Walk::Nchw | Walk::NchwWide(_) => parts(walk, c, per_channel),
        Walk::Pairs | Walk::Wide(_) => {
            let (_, _, rows) = nhwc_block(walk, c);
            let step = rows * walk.unroll() * ROW_STEPS;
            per_channel.div_ceil(step).clamp(1, MAX_GRID_Y)
        }
    }
}

/// Doubles of the scratch one batch norm of `c` channels over `per_channel` values (B*HW, the
/// most rows it will see) needs in `layout`, whichever walk it takes: the sums, and each part's.
pub fn scratch_len(layout: Layout, c: usize, per_channel: usize) -> usize {
    let walks: &[Walk] = match layout {
        Layout::Nchw => &[Walk::Nchw],
        Layout::Nhwc => &[Walk::Pairs, Walk::Wide(4), Walk::Wide(8)],
    };
    let most = walks.iter().map(|&w| parts(w, c, per_channel)).max();
    4 * c + 2 * c * most.unwrap_or(1)
}

/// NCHW: one block per (channel, part), channels grid-stride beyond `MAX_BLOCKS`. Channels
/// last: one block per (its channels, part), `nhwc_block`.
pub(super) fn parts_cfg(walk: Walk, c: usize, parts: usize) -> LaunchConfig {
    let (grid_x, block_dim) = match walk {
        Walk::Nchw | Walk::NchwWide(_) => (c.clamp(1, MAX_BLOCKS as usize), (THREADS, 1, 1)),
        Walk::Pairs | Walk::Wide(_) => {
            let (blocks, lanes, rows) = nhwc_block(walk, c);
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
    walk: Walk,
    out: &mut CudaViewMut<'_, f64>,
    partial: &CudaView<'_, f64>,
    parts: usize,
    len: usize,
) -> Result<(), CudaError> {
    let (pi, li) = (parts as i32, len as i32);
    match walk {
        Walk::Nchw | Walk::NchwWide(_) => {
            let cfg = grid_stride_cfg(len);
            try_launch!(gpu, "bn_reduce_f32", cfg, &mut *out, partial, &pi, &li)
        }
        Walk::Pairs | Walk::Wide(_) => {
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
    use crate::backend::cuda::kernels::{HEADERS, SOURCES};

    /// A `#define NAME value` of bn_nhwc.cu.
    fn defined(name: &str) -> usize {
        let (_, src) = SOURCES.iter().find(|(f, _)| *f == "bn_nhwc.cu").unwrap();
        let prefix = format!("#define {name} ");
        (src.lines())
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("bn_nhwc.cu defines {name}"))
            .trim()
            .parse()
            .unwrap()
    }

    #[test]
    fn channels_last_blocks_fit_the_kernels_and_parts_cover_the_rows() {
        assert_eq!(
            defined("NHWC_THREADS"),
            NHWC_THREADS,
            "column_sum's shared sums"
        );
        assert_eq!(defined("WIDE_UNROLL"), WIDE_UNROLL);
        let (_, header) = HEADERS.iter().find(|(f, _)| *f == "bn.cuh").unwrap();
        let pairs = (header.lines()).find_map(|l| l.strip_prefix("#define BN_UNROLL "));
        assert_eq!(pairs.map(|v| v.trim().parse()), Some(Ok(PAIR_UNROLL)));
        for walk in [Walk::Pairs, Walk::Wide(4), Walk::Wide(8)] {
            for c in [8, 16, 24, 64, 96, 136, 2048] {
                let (blocks, lanes, rows) = nhwc_block(walk, c);
                let v = walk.channels();
                assert!(
                    lanes * rows <= NHWC_THREADS && lanes <= NHWC_MAX_LANES,
                    "{walk:?} {c}"
                );
                assert!(
                    v * blocks * lanes >= c,
                    "{walk:?} {c}: every channel has a lane"
                );
                assert!(
                    v * (blocks - 1) * lanes < c,
                    "{walk:?} {c}: no block without channels"
                );
            }
        }
        // ResNet-20's 16 channels: one block of 8 lanes and 32 rows (a warp: 4 whole rows);
        // in 8-channel vectors, 2 lanes and 128 rows
        assert_eq!(nhwc_block(Walk::Pairs, 16), (1, 8, 32));
        assert_eq!(nhwc_block(Walk::Wide(8), 16), (1, 2, 128));
        // 96 channels: two blocks of 24 lanes, none idle; 130: three of 22, one idle
        assert_eq!(nhwc_block(Walk::Pairs, 96), (2, 24, 10));
        let cfg = parts_cfg(Walk::Pairs, 130, 7);
        assert_eq!((cfg.grid_dim, cfg.block_dim), ((3, 7, 1), (22, 11, 1)));
        // ResNet-50's 2048 channels in 8-channel vectors: 8 blocks of 32 lanes
        assert_eq!(nhwc_block(Walk::Wide(8), 2048), (8, 32, 8));
        // ResNet-50's first batch norm: few channels, many rows: many parts; its last: many
        // channels, few rows: fewer parts, about NHWC_BLOCKS blocks either way
        for walk in [Walk::Pairs, Walk::Wide(8)] {
            assert_eq!(parts(walk, 64, 128 * 112 * 112), NHWC_BLOCKS);
            let last = parts(walk, 2048, 128 * 7 * 7);
            assert_eq!(last * nhwc_block(walk, 2048).0, NHWC_BLOCKS, "{walk:?}");
        }
        // a part has at least a walk's step of rows; nothing to sum is one part
        assert_eq!(parts(Walk::Pairs, 64, 100), 2);
        assert_eq!(parts(Walk::Pairs, 2, 8800), 5);
        assert_eq!(parts(Walk::Pairs, 8, 0), 1);
        assert_eq!(parts(Walk::Wide(8), 64, 100), 1);
        // NCHW keeps its parts
        assert_eq!(parts(Walk::Nchw, 3, 8800), 3);
        // the scratch holds the sums and the parts of whichever walk takes more
        let most = [Walk::Pairs, Walk::Wide(4), Walk::Wide(8)]
            .map(|w| parts(w, 2048, 128 * 7 * 7))
            .into_iter()
            .max()
            .unwrap();
        assert!(most > parts(Walk::Pairs, 2048, 128 * 7 * 7));
        assert_eq!(
            scratch_len(Layout::Nhwc, 2048, 128 * 7 * 7),
            4 * 2048 + 2 * 2048 * most
        );
        assert_eq!(
            scratch_len(Layout::Nchw, 3, 8800),
            4 * 3 + 2 * 3 * parts(Walk::Nchw, 3, 8800)
        );
    }

    #[test]
    fn wide_walks_need_whole_vectors_and_aligned_tensors() {
        // channels last: 16 bytes of channels, 4 floats or 8 bf16
        assert_eq!(Walk::of(Layout::Nhwc, (64, 49), 4, true), Walk::Wide(4));
        assert_eq!(Walk::of(Layout::Nhwc, (64, 49), 2, true), Walk::Wide(8));
        assert_eq!(Walk::of(Layout::Nhwc, (12, 64), 4, true), Walk::Wide(4));
        assert_eq!(Walk::of(Layout::Nhwc, (12, 64), 2, true), Walk::Pairs);
        assert_eq!(Walk::of(Layout::Nhwc, (64, 64), 2, false), Walk::Pairs);
        // NCHW: 16 bytes of a plane; MobileNetV2's 7x7 and (bf16) 14x14 planes one at a time
        assert_eq!(
            Walk::of(Layout::Nchw, (64, 3136), 2, true),
            Walk::NchwWide(8)
        );
        assert_eq!(
            Walk::of(Layout::Nchw, (64, 196), 4, true),
            Walk::NchwWide(4)
        );
        assert_eq!(Walk::of(Layout::Nchw, (64, 196), 2, true), Walk::Nchw);
        assert_eq!(Walk::of(Layout::Nchw, (64, 49), 4, true), Walk::Nchw);
        assert_eq!(Walk::of(Layout::Nchw, (64, 3136), 2, false), Walk::Nchw);
        assert!(Walk::NchwWide(8).nchw() && Walk::Nchw.nchw() && !Walk::Wide(8).nchw());
        // the wide NCHW walk keeps NCHW's parts and launch
        assert_eq!(
            parts(Walk::NchwWide(8), 3, 8800),
            parts(Walk::Nchw, 3, 8800)
        );
        let (a, b) = (
            parts_cfg(Walk::NchwWide(8), 5, 3),
            parts_cfg(Walk::Nchw, 5, 3),
        );
        assert_eq!((a.grid_dim, a.block_dim), (b.grid_dim, b.block_dim));
    }

    #[test]
    fn kernels_that_only_read_sums_spread_over_many_blocks_of_a_few_steps_each() {
        // ResNet-50's first batch norm in bf16: 8 lanes x 32 rows, 4 steps of 4 rows a thread
        let rows = 128 * 112 * 112;
        assert_eq!(
            spread(Walk::Wide(8), 64, rows),
            rows.div_ceil(32 * 4 * ROW_STEPS)
        );
        assert!(spread(Walk::Wide(8), 64, rows) > parts(Walk::Wide(8), 64, rows));
        // capped at CUDA's grid; nothing is one part; NCHW as its sums
        assert_eq!(spread(Walk::Pairs, 2, usize::MAX / 2), MAX_GRID_Y);
        assert_eq!(spread(Walk::Wide(4), 8, 0), 1);
        assert_eq!(spread(Walk::Nchw, 3, 8800), parts(Walk::Nchw, 3, 8800));
    }
}
