//! What the products (cuDNN's convolutions, cuBLAS's linear layers) read as weights: an fp32
//! run's parameters themselves; a bf16 run's copy of its convolution and linear weights rounded
//! to bf16 (batch norm's parameters and the biases stay fp32, read from the parameters). The
//! flat parameter buffer packs tensors without gaps, so in bf16 a tensor could start on any even
//! byte; the copy starts each one on 16 bytes, as tensor-core kernels want their operands. One
//! launch refreshes it after every change to the parameters (`kernels/convert.cu`,
//! `f32_to_bf16_chunks`).

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, CudaView, DriverError};

use super::host::to_device;
use super::update::CHUNK;
use crate::backend::cuda::elem::Elem;
use crate::backend::cuda::launch::blocks_cfg;
use crate::backend::cuda::{CudaError, Gpu};
use crate::nn::model::{Model, Op};

/// Elements a tensor's start in the copy is a multiple of (16 bytes of bf16).
const ALIGN: usize = 8;

/// Whether `m` has a convolution that is not depthwise (the own kernels' im2col path: fp32 only).
pub(super) fn has_dense_conv(m: &Model) -> bool {
    (m.nodes.iter()).any(|n| matches!(n.op, Op::Conv { groups: 1, .. }))
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
    /// bf16 runs: the copy; one element otherwise.
    copy: CudaSlice<E>,
    /// Per copied tensor, by parameter offset: (first parameter, first element of the copy).
    at: Vec<(usize, usize)>,
    /// Four ints per chunk: (first parameter, length, first element of the copy, 0).
    table: CudaSlice<i32>,
    chunks: usize,
}

/// Where each of `m`'s convolution and linear weight tensors goes in the copy, in parameter
/// order: (parameter range, first element of the copy), and the copy's length.
fn layout(m: &Model) -> (Vec<(Range<usize>, usize)>, usize) {
    let mut ranges: Vec<Range<usize>> = (m.nodes.iter())
        .filter(|n| matches!(n.op, Op::Conv { .. } | Op::Linear { .. }))
        .map(|n| m.weight_bias(n).0)
        .filter(|w| !w.is_empty())
        .collect();
    ranges.sort_by_key(|w| w.start);
    let mut end = 0usize;
    let placed = (ranges.into_iter())
        .map(|w| {
            let at = end.next_multiple_of(ALIGN);
            end = at + w.len();
            (w, at)
        })
        .collect();
    (placed, end)
}

/// The layout as chunks of at most `CHUNK` elements, four ints each.
fn chunk_table(placed: &[(Range<usize>, usize)]) -> Vec<i32> {
    let mut out = Vec::new();
    for (w, at) in placed {
        for off in (0..w.len()).step_by(CHUNK) {
            let len = CHUNK.min(w.len() - off);
            out.extend([w.start + off, len, at + off, 0].map(|v| v as i32));
        }
    }
    out
}

impl<E: Elem> Weights<E> {
    /// The copy's buffers for `m` (nothing for fp32), not yet filled: `refresh` does.
    pub fn new(s: &Arc<CudaStream>, m: &Model) -> Result<Weights<E>, DriverError> {
        let (placed, len) = match E::BF16 {
            true => layout(m),
            false => (Vec::new(), 0),
        };
        let table = chunk_table(&placed);
        Ok(Weights {
            copy: s.alloc_zeros::<E>(len.max(1))?,
            at: placed.iter().map(|(w, at)| (w.start, *at)).collect(),
            chunks: table.len() / 4,
            table: to_device(s, &table)?,
        })
    }

    /// The weights of parameter range `w` (a convolution's or linear layer's weight tensor) as
    /// products read them.
    pub fn of<'a>(&'a self, params: &'a CudaSlice<f32>, w: Range<usize>) -> CudaView<'a, E> {
        let all = E::weights(params, &self.copy);
        if !E::BF16 {
            return all.slice(w);
        }
        let i = (self.at.binary_search_by_key(&w.start, |&(p, _)| p))
            .expect("every convolution and linear weight tensor has a place in the copy");
        let at = self.at[i].1;
        all.slice(at..at + w.len())
    }

    /// Rounds the copy anew from `params` (nothing for fp32).
    pub fn refresh(&mut self, gpu: &Gpu, params: &CudaSlice<f32>) -> Result<(), CudaError> {
        if self.chunks == 0 {
            return Ok(());
        }
        let count = self.chunks as i32;
        try_launch!(
            gpu,
            "f32_to_bf16_chunks",
            blocks_cfg(self.chunks),
            &mut self.copy,
            params,
            &self.table,
            &count
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::layers::Shape;

    #[test]
    fn each_product_weight_starts_on_16_bytes_in_order_and_chunks_cover_it_once() {
        // odd weight counts: 3*5*9 = 135, then batch norm's 10, so the next conv's weights
        // start at an odd parameter
        let spec = "conv5k3p1,bn,conv7k3,dwconv3p1,dense9".parse().unwrap();
        let m = Model::new(Shape::Image { c: 3, h: 8, w: 8 }, &spec, 4).unwrap();
        let (placed, len) = layout(&m);
        assert_eq!(
            placed.len(),
            5,
            "4 convolutions or linear layers and the classifier"
        );
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
        let table = chunk_table(&placed);
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
        let t = chunk_table(&placed);
        assert_eq!(t.len(), 12);
        assert_eq!(
            &t[8..],
            &[(10 + 2 * CHUNK) as i32, 3, (2 * CHUNK) as i32, 0]
        );
    }
}
