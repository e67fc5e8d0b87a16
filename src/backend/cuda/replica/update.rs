//! The optimizer update on the GPU: one kernel per step over the flat buffers, with the CPU's
//! bias correction and the same mean-gradient scaling. The kernel walks a table of chunks made
//! once from the optimizer's pieces (`Optimizer::pieces`): frozen parameters have none, moments
//! are kept for the trained parameters only, and each chunk says whether it is decayed.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut, DriverError};

use super::{to_device, CudaReplica};
use crate::backend::cuda::elem::Elem;
use crate::backend::cuda::launch::{blocks_cfg, check};
use crate::backend::cuda::Gpu;
use crate::backend::AUX;
use crate::nn::optim::{adam_factors, Optimizer, OptimizerKind, Piece, BETA1, BETA2, EPS};

/// The most parameters one block updates (a piece longer than this is cut).
pub(crate) const CHUNK: usize = 4096;

/// `pieces` cut into chunks of at most `CHUNK` parameters: four ints each, (first parameter,
/// length, first moment, decayed), as `kernels/optim.cu` reads them, and beside them each
/// chunk's piece's `began` (the step its Adam bias correction counts from). Indices fit in
/// i32: the replica refuses models of more than i32::MAX parameters.
pub(crate) fn chunk_table(pieces: &[Piece]) -> (Vec<i32>, Vec<i64>) {
    let (mut out, mut began) = (Vec::new(), Vec::new());
    for p in pieces {
        for at in (0..p.range.len()).step_by(CHUNK) {
            let len = CHUNK.min(p.range.len() - at);
            let ints = [p.range.start + at, len, p.moment + at, usize::from(p.decay)];
            out.extend(ints.map(|v| v as i32));
            began.push(p.began as i64);
        }
    }
    (out, began)
}

/// The update's work list on the device, and a partial sum of squares per chunk (the
/// gradient's norm, `launch_step_end`).
pub(crate) struct Chunks {
    table: CudaSlice<i32>,
    began: CudaSlice<i64>,
    count: usize,
    partial: CudaSlice<f64>,
}

impl Chunks {
    /// The chunks of `o`'s update over `n` parameters, uploaded.
    pub(crate) fn new(s: &Arc<CudaStream>, o: &Optimizer, n: usize) -> Result<Chunks, DriverError> {
        let (table, began) = chunk_table(&o.pieces(n));
        let count = table.len() / 4;
        Ok(Chunks {
            count,
            table: to_device(s, &table)?,
            began: to_device(s, &began)?,
            partial: s.alloc_zeros::<f64>(count.max(1))?,
        })
    }
}

/// A step's end into `out` (AUX + 1 floats), for one copy to the host: its metric `slots`, then
/// the L2 norm of the trained parameters' gradients in `g` (their squares summed in f64 in a
/// fixed order: the same bits on every replica holding the same gradients), what the update
/// clips by and the step reports (the root of `Optimizer::grad_sumsq` on the CPU).
pub(crate) fn launch_step_end(
    gpu: &Gpu,
    chunks: &mut Chunks,
    (g, slots): (CudaView<'_, f32>, CudaView<'_, f32>),
    mut out: CudaViewMut<'_, f32>,
) {
    let count = chunks.count as i32;
    let (table, partial) = (&chunks.table, &mut chunks.partial);
    check(try_launch!(
        gpu,
        "grad_sumsq_f32",
        blocks_cfg(chunks.count),
        &g,
        table,
        &count,
        &mut *partial
    ));
    let aux = AUX as i32;
    check(try_launch!(
        gpu,
        "step_end_f32",
        blocks_cfg(1),
        &*partial,
        &count,
        &slots,
        &aux,
        &mut out
    ));
}

/// The buffers one update reads and writes: the moments hold the trained parameters' only
/// (`m`, `v` unused where the optimizer keeps none); `samples`, one float, the step's global
/// sample count (its metric slot), which the gradient sums are divided by; `norm`, one float,
/// their L2 norm (`launch_step_end`), which `--clip-grad-norm` clips by.
pub(crate) struct Buffers<'a> {
    pub p: CudaViewMut<'a, f32>,
    pub g: CudaView<'a, f32>,
    pub m: CudaViewMut<'a, f32>,
    pub v: CudaViewMut<'a, f32>,
    pub samples: CudaView<'a, f32>,
    pub norm: CudaView<'a, f32>,
}

/// Step `t` (1 on the first) of optimizer `o` with learning rate `lr`, the gradient sums
/// divided by the samples into the mean.
pub(crate) fn launch_update(
    gpu: &Gpu,
    o: &Optimizer,
    chunks: &Chunks,
    b: Buffers<'_>,
    lr: f32,
    t: u64,
) {
    let Buffers {
        mut p,
        g,
        mut m,
        mut v,
        samples,
        norm,
    } = b;
    if chunks.count == 0 {
        return;
    }
    let (table, count) = (&chunks.table, chunks.count as i32);
    let cfg = blocks_cfg(chunks.count);
    let wd = o.weight_decay;
    // (0: no clipping)
    let clip = o.clip_norm.unwrap_or(0.0);
    let r = match o.kind {
        OptimizerKind::Sgd => try_launch!(
            gpu, "sgd_f32", cfg, &mut p, &g, table, &count, &lr, &wd, &samples, &norm, &clip
        ),
        OptimizerKind::Momentum | OptimizerKind::Nesterov => {
            let first = i32::from(t == 1);
            let nesterov = i32::from(o.kind == OptimizerKind::Nesterov);
            let mu = o.momentum;
            try_launch!(
                gpu,
                "momentum_f32",
                cfg,
                &mut p,
                &g,
                &mut m,
                table,
                &count,
                &lr,
                &mu,
                &wd,
                &samples,
                &norm,
                &clip,
                &first,
                &nesterov
            )
        }
        OptimizerKind::Adam | OptimizerKind::AdamW => {
            // (the pieces that began training late compute their own from `t`)
            let (step_size, inv_sqrt_bc2) = adam_factors(lr, t);
            let (b1, b2, eps) = (BETA1, BETA2, EPS);
            let decoupled = i32::from(o.kind == OptimizerKind::AdamW);
            let (began, t) = (&chunks.began, t as i64);
            try_launch!(
                gpu,
                "adam_f32",
                cfg,
                &mut p,
                &g,
                &mut m,
                &mut v,
                table,
                &count,
                &lr,
                &b1,
                &b2,
                &eps,
                &wd,
                &samples,
                &norm,
                &clip,
                &step_size,
                &inv_sqrt_bc2,
                &decoupled,
                began,
                &t
            )
        }
    };
    crate::backend::cuda::launch::check(r)
}

impl<E: Elem> CudaReplica<E> {
    /// The optimizer kernel for this step's mean gradient.
    pub(super) fn update(&mut self, lr: f32) {
        let n = self.model.n_params;
        self.t += 1;
        let b = Buffers {
            p: self.params.slice_mut(..),
            g: self.grads.slice(..n),
            m: self.m.slice_mut(..),
            v: self.v.slice_mut(..),
            // the metric slots after the sums: [loss sum, correct, samples]
            samples: self.grads.slice(n + 2..n + 3),
            norm: self.ends_dev.slice(AUX..AUX + 1),
        };
        launch_update(&self.gpu, &self.optimizer, &self.chunks, b, lr, self.t);
        self.refresh_weights();
    }

    /// A bf16 run's copy of the weights (`weights`), rounded anew from the parameters: after
    /// every change to them (open, update, import, upload). Nothing for f32.
    pub(super) fn refresh_weights(&mut self) {
        check(self.weights.refresh(&self.gpu, &self.params));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chunk_table_covers_each_trained_parameter_once_in_chunks_of_at_most_chunk() {
        let n = 3 * CHUNK + 10;
        let o = Optimizer {
            frozen: std::iter::once(0..5).collect(),
            no_decay: std::iter::once(CHUNK..CHUNK + 3).collect(),
            ..Optimizer::new(OptimizerKind::Momentum, 0.1)
        };
        let (t, began) = chunk_table(&o.pieces(n));
        assert_eq!(began.len() * 4, t.len());
        let mut seen = vec![0u8; n];
        let mut moment = 0;
        for c in t.chunks(4) {
            let [start, len, m, decay] = [c[0], c[1], c[2], c[3]].map(|v| v as usize);
            assert!((1..=CHUNK).contains(&len), "{c:?}");
            assert_eq!(m, moment, "moments follow the trained parameters in order");
            moment += len;
            for (i, s) in seen.iter_mut().enumerate().skip(start).take(len) {
                *s += 1;
                let excluded = (CHUNK..CHUNK + 3).contains(&i);
                assert_eq!(decay == 1, !excluded, "parameter {i}");
            }
        }
        assert!(seen[..5].iter().all(|&s| s == 0), "frozen: no chunk");
        assert!(seen[5..].iter().all(|&s| s == 1), "trained: one chunk each");
        assert_eq!(moment, n - 5);
    }
}
