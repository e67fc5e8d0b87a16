//! What the products (cuDNN's convolutions, cuBLAS's linear layers) read as weights: an fp32
//! run's parameters themselves; a bf16 run's copy of its convolution and linear weights rounded
//! to bf16 (batch norm's parameters and the biases stay fp32, read from the parameters). The
//! flat parameter buffer packs tensors without gaps, so in bf16 a tensor could start on any even
//! byte; the copy starts each one on 16 bytes, as tensor-core kernels want their operands. One
//! launch refreshes it after every change to the parameters (`kernels/convert.cu`,
//! `f32_to_bf16_chunks`). A channels-last run (`Layout::Nhwc`) also copies each KxK convolution
//! over several channels (`layout::moves_weights`) into cuDNN's NHWC filter layout, in fp32 or
//! bf16: one launch per such tensor (`krsc_from_kcrs` in `kernels/layout.cu`).

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, CudaView, DriverError};

use super::host::to_device;
use super::update::CHUNK;
use crate::backend::cuda::elem::Elem;
use crate::backend::cuda::launch::{blocks_cfg, grid_stride_cfg};
use crate::backend::cuda::layout::{self, Layout};
use crate::backend::cuda::{pointwise, CudaError, Gpu};
use crate::nn::model::{Model, Op};

/// Elements a tensor's start in the copy is a multiple of (16 bytes of bf16).
const ALIGN: usize = 8;

/// Whether `m` has a convolution that is not depthwise (the own kernels' im2col path: fp32 only).
pub(super) fn has_dense_conv(m: &Model) -> bool {
    (m.nodes.iter()).any(|n| matches!(n.op, Op::Conv { groups: 1, .. }))
}

/// Whether `m` has a grouped (depthwise) convolution.
pub(super) fn has_grouped_conv(m: &Model) -> bool {
    (m.nodes.iter()).any(|n| matches!(n.op, Op::Conv { groups, .. } if groups > 1))
}

/// Whether `m` has a 1x1 stride-1 unpadded convolution (channels last: `pointwise`'s products).
pub(super) fn has_pointwise_conv(m: &Model) -> bool {
    (m.nodes.iter()).any(|n| {
        matches!(n.op, Op::Conv { g, groups, .. } if pointwise::takes(Layout::Nhwc, &g, groups))
    })
}

/// The most weights one convolution of `m` has.
pub(super) fn largest_conv(m: &Model) -> usize {
    (m.nodes.iter())
        .filter(|n| matches!(n.op, Op::Conv { .. }))
        .map(|n| m.weight_bias(n).0.len())
        .max()
        .unwrap_or(0)
}

pub(super) struct Weights<E: Elem> {
    /// The copy (bf16 runs, channels-last runs' moved tensors); one element otherwise.
    copy: CudaSlice<E>,
    /// Per copied tensor, by parameter offset: (first parameter, first element of the copy).
    at: Vec<(usize, usize)>,
    /// Four ints per chunk of the tensors copied as they are: (first parameter, length, first
    /// element of the copy, 0).
    table: CudaSlice<i32>,
    chunks: usize,
    /// The tensors copied into cuDNN's NHWC filter layout.
    moved: Vec<Moved>,
}

/// A convolution's weights [OC, C, K*K] copied as [OC, K*K, C] (`kernels/layout.cu`).
#[derive(Clone, Debug, PartialEq)]
struct Moved {
    w: Range<usize>,
    at: usize,
    oc: usize,
    c: usize,
    kk: usize,
}

/// Tensors in the copy: (parameter range, first element of the copy).
type Placed = Vec<(Range<usize>, usize)>;

/// Where each weight tensor of `m` the products read from the copy goes, in parameter order:
/// (parameter range, first element of the copy), the copy's length, and which of them are
/// moved into the NHWC filter layout. A bf16 run copies every convolution and linear weight
/// tensor; a channels-last run those it moves (all it copies, in fp32).
fn layout(m: &Model, bf16: bool, laid: Layout) -> (Placed, usize, Vec<Moved>) {
    let moves = |op: &Op| laid.nhwc() && layout::moves_weights(op);
    let mut copied: Vec<(Range<usize>, Option<Moved>)> = (m.nodes.iter())
        .filter(|n| matches!(n.op, Op::Conv { .. } | Op::Linear { .. }))
        .filter(|n| bf16 || moves(&n.op))
        .map(|n| {
            let w = m.weight_bias(n).0;
            let moved = match n.op {
                Op::Conv { g, groups, .. } if moves(&n.op) => Some(Moved {
                    w: w.clone(),
                    at: 0,
                    oc: g.oc,
                    c: g.c / groups,
                    kk: g.k * g.k,
                }),
                _ => None,
            };
            (w, moved)
        })
        .filter(|(w, _)| !w.is_empty())
        .collect();
    copied.sort_by_key(|(w, _)| w.start);
    let mut end = 0usize;
    let mut moved = Vec::new();
    let placed = (copied.into_iter())
        .map(|(w, mv)| {
            let at = end.next_multiple_of(ALIGN);
            end = at + w.len();
            moved.extend(mv.map(|m| Moved { at, ..m }));
            (w, at)
        })
        .collect();
    (placed, end, moved)
}

/// The tensors copied as they are (not `moved`) as chunks of at most `CHUNK` elements, four
/// ints each.
fn chunk_table(placed: &[(Range<usize>, usize)], moved: &[Moved]) -> Vec<i32> {
    let mut out = Vec::new();
    for (w, at) in placed
        .iter()
        .filter(|(w, _)| !moved.iter().any(|m| m.w == *w))
    {
        for off in (0..w.len()).step_by(CHUNK) {
            let len = CHUNK.min(w.len() - off);
            out.extend([w.start + off, len, at + off, 0].map(|v| v as i32));
        }
    }
    out
}

impl<E: Elem> Weights<E> {
    /// The copy's buffers for `m` with activations in `laid` (nothing for an fp32 NCHW run),
    /// not yet filled: `refresh` does.
    pub fn new(s: &Arc<CudaStream>, m: &Model, laid: Layout) -> Result<Weights<E>, DriverError> {
        let (placed, len, moved) = layout(m, E::BF16, laid);
        let table = chunk_table(&placed, &moved);
        Ok(Weights {
            copy: s.alloc_zeros::<E>(len.max(1))?,
            at: placed.iter().map(|(w, at)| (w.start, *at)).collect(),
            chunks: table.len() / 4,
            table: to_device(s, &table)?,
            moved,
        })
    }

    /// The weights of parameter range `w` (a convolution's or linear layer's weight tensor) as
    /// products read them: from the copy where it has them, else (fp32) the parameters.
    pub fn of<'a>(&'a self, params: &'a CudaSlice<f32>, w: Range<usize>) -> CudaView<'a, E> {
        match self.at.binary_search_by_key(&w.start, |&(p, _)| p) {
            Ok(i) => {
                let at = self.at[i].1;
                self.copy.slice(at..at + w.len())
            }
            Err(_) => {
                assert!(
                    !E::BF16,
                    "a bf16 run copies every convolution and linear weight"
                );
                // (an fp32 run's parameters)
                E::weights(params, &self.copy).slice(w)
            }
        }
    }

    /// Fills the copy anew from `params` (nothing for an fp32 NCHW run).
    pub fn refresh(&mut self, gpu: &Gpu, params: &CudaSlice<f32>) -> Result<(), CudaError> {
        if self.chunks > 0 {
            let count = self.chunks as i32;
            try_launch!(
                gpu,
                "f32_to_bf16_chunks",
                blocks_cfg(self.chunks),
                &mut self.copy,
                params,
                &self.table,
                &count
            )?;
        }
        for m in &self.moved {
            let n = m.w.len();
            let (oc, c, kk) = (m.oc as i32, m.c as i32, m.kk as i32);
            let mut out = self.copy.slice_mut(m.at..m.at + n);
            let w = params.slice(m.w.clone());
            try_launch!(
                gpu,
                named!(E, "krsc_from_kcrs"),
                grid_stride_cfg(n),
                &mut out,
                &w,
                &oc,
                &c,
                &kk
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::shape::Shape;

    #[test]
    fn each_product_weight_starts_on_16_bytes_in_order_and_chunks_cover_it_once() {
        // odd weight counts: 3*5*9 = 135, then batch norm's 10, so the next conv's weights
        // start at an odd parameter
        let spec = "conv5k3p1,bn,conv7k3,dwconv3p1,dense9".parse().unwrap();
        let m = Model::new(Shape::Image { c: 3, h: 8, w: 8 }, &spec, 4).unwrap();
        let (placed, len, moved) = layout(&m, true, Layout::Nchw);
        assert_eq!(
            placed.len(),
            5,
            "4 convolutions or linear layers and the classifier"
        );
        assert!(moved.is_empty(), "NCHW moves nothing");
        let mut end = 0;
        for (w, at) in &placed {
            assert_eq!(at % ALIGN, 0, "{w:?} at {at}");
            assert!(*at >= end, "overlaps the tensor before");
            end = at + w.len();
        }
        assert_eq!(len, end);
        assert!(
            placed.iter().any(|(w, _)| w.start % 2 == 1),
            "the case is exercised"
        );
        // the chunks write each copied element once, from its parameter
        let table = chunk_table(&placed, &moved);
        let mut written = vec![None; len];
        for c in table.chunks_exact(4) {
            let (src, n, dst) = (c[0] as usize, c[1] as usize, c[2] as usize);
            assert!(n <= CHUNK && c[3] == 0);
            for j in 0..n {
                assert_eq!(written[dst + j], None);
                written[dst + j] = Some(src + j);
            }
        }
        for (w, at) in &placed {
            for (j, p) in w.clone().enumerate() {
                assert_eq!(written[at + j], Some(p));
            }
        }
    }

    #[test]
    fn long_tensors_are_cut_into_chunks() {
        let placed = [(10..10 + 2 * CHUNK + 3, 0)];
        let t = chunk_table(&placed, &[]);
        assert_eq!(t.len(), 12);
        assert_eq!(
            &t[8..],
            &[(10 + 2 * CHUNK) as i32, 3, (2 * CHUNK) as i32, 0]
        );
    }

    #[test]
    fn channels_last_moves_kxk_convolutions_over_several_channels_into_the_copy() {
        let spec = "conv5k3p1,bn,conv6k1,dwconv3p1,conv4k3,gap"
            .parse()
            .unwrap();
        let m = Model::new(Shape::Image { c: 3, h: 8, w: 8 }, &spec, 4).unwrap();
        let convs: Vec<&crate::nn::model::Node> = (m.nodes.iter())
            .filter(|n| matches!(n.op, Op::Conv { .. }))
            .collect();
        // fp32: only the two 3x3 dense convolutions are copied, both moved
        let (placed, len, moved) = layout(&m, false, Layout::Nhwc);
        let ws: Vec<Range<usize>> = placed.iter().map(|(w, _)| w.clone()).collect();
        assert_eq!(ws, [m.weight_bias(convs[0]).0, m.weight_bias(convs[3]).0]);
        assert_eq!(
            (moved[0].oc, moved[0].c, moved[0].kk),
            (5, 3, 9),
            "conv5k3 over 3 channels"
        );
        assert_eq!((moved[1].oc, moved[1].c, moved[1].kk), (4, 6, 9));
        assert_eq!(moved[1].at, placed[1].1);
        assert_eq!(len, placed[1].1 + 4 * 6 * 9);
        // nothing left for the straight chunks
        assert!(chunk_table(&placed, &moved).is_empty());
        // bf16: every product weight copied, the same two moved, the rest in chunks
        let (placed, _, moved) = layout(&m, true, Layout::Nhwc);
        assert_eq!(placed.len(), 5, "4 convolutions and the classifier");
        assert_eq!(moved.len(), 2);
        let chunked: usize = (chunk_table(&placed, &moved).chunks_exact(4))
            .map(|c| c[1] as usize)
            .sum();
        let straight = [convs[1], convs[2]].map(|n| m.weight_bias(n).0.len());
        let classifier = placed[4].0.len();
        assert_eq!(chunked, straight[0] + straight[1] + classifier);
    }
}
