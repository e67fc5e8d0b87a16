//! The numerics every backend shares: the model, its layers' forward and backward passes (dense,
//! convolution, max pooling) and the convolutional layer language, the GEMM and its intra-op
//! threads, optimizers, learning-rate schedules and the random numbers.
//! Imports nothing else of the crate.

pub mod bf16;
pub mod bn;
pub mod conv;
pub mod depthwise;
pub mod direct;
pub mod gemm;
#[cfg(test)]
mod gradcheck;
pub mod grouped;
pub mod im2col;
pub mod intraop;
pub mod layer_language;
pub mod model;
pub mod ops;
pub mod optim;
pub mod pool;
pub mod precision;
pub mod rng;
pub mod schedule;
pub mod shape;
pub mod simd;
pub mod window;
pub mod winograd;

/// Grows a scratch buffer to at least `n` floats (new ones zero; it never shrinks): the
/// thread-local and per-worker buffers of the CPU kernels. An empty one is allocated zeroed
/// (the system's zero pages, touched first by whoever writes them), not written with zeros:
/// a large model's first step would otherwise write every activation gradient twice.
pub(crate) fn grow(v: &mut Vec<f32>, n: usize) {
    if v.is_empty() && n > 0 {
        *v = vec![0.0; n];
    } else if v.len() < n {
        v.resize(n, 0.0);
    }
}
