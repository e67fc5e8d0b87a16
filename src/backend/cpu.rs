//! The CPU backend: a worker thread is the device; the numerical reference for every other.

use super::{BatchMetrics, Replica, TrainState, AUX};
use crate::comm::{Collective, CollectiveError, ReduceTiming};
use crate::data::MicroBatch;
use crate::nn::model::{Model, SumAcross, Workspace};
use crate::nn::optim::{self, OptState, Optimizer, OptimizerKind};

pub struct CpuReplica {
    model: Model,
    optimizer: Optimizer,
    params: Vec<f32>,
    /// n_params gradient sums, then [loss sum, correct, samples].
    grads: Vec<f32>,
    opt: OptState,
    /// Batch norm's running statistics (this replica's; kept in step by the engine).
    buffers: Vec<f32>,
    ws: Workspace,
    /// What the all-reduce carries where frozen parameters start the buffer (`--freeze`):
    /// the gradients after them and the batch's metrics.
    tail: Vec<f32>,
}

impl CpuReplica {
    /// Must be called on the thread that will train (it sets that thread's FPU mode).
    pub fn new(
        model: Model,
        kind: OptimizerKind,
        weight_decay: f32,
        state: TrainState,
    ) -> CpuReplica {
        CpuReplica::with(model, Optimizer::new(kind, weight_decay), state)
    }

    /// Dropout masks drawn from `seed` (each replica its own).
    pub fn seed_dropout(mut self, seed: u64) -> CpuReplica {
        self.ws.seed_dropout(seed);
        self
    }

    /// `new` with every coefficient of the optimizer given.
    pub fn with(model: Model, optimizer: Optimizer, state: TrainState) -> CpuReplica {
        flush_denormals_on_this_thread();
        let n = model.n_params;
        assert_eq!(state.params.len(), n);
        assert_eq!(state.buffers.len(), model.n_buffers);
        CpuReplica {
            model,
            // frozen parameters (`--freeze`) have no moments here
            opt: optimizer.compact(&state.opt, n),
            optimizer,
            params: state.params,
            grads: vec![0.0; n + AUX],
            buffers: state.buffers,
            ws: Workspace::default(),
            tail: Vec::new(),
        }
    }
}

/// Sync batch norm's sums through the run's collective. A failed exchange (a lost peer) has no
/// way back through the interpreter: the rank fails with it, as the engine reports.
struct Across<'a, 'c>(&'a mut (dyn Collective + 'c));

impl SumAcross for Across<'_, '_> {
    fn sum(&mut self, v: &mut Vec<f32>) {
        if let Err(e) = self.0.all_reduce_sum(v) {
            panic!("sync batch norm: {e}")
        }
    }
}

/// Optimizer moments of parameters whose gradient is zero (dead ReLUs) decay geometrically into
/// subnormal floats, which x86 cores process ~100x slower: without this, a run slows down
/// several-fold after ~1000 steps. Flush-to-zero / denormals-are-zero is what PyTorch's
/// `set_flush_denormal(True)` and most training stacks do. It is per thread and deterministic.
fn flush_denormals_on_this_thread() {
    #[cfg(target_arch = "x86_64")]
    #[allow(deprecated)]
    // _mm_setcsr is the documented way; it is only deprecated in favour of asm
    // SAFETY: sets the FTZ (bit 15) and DAZ (bit 6) bits of this thread's MXCSR; every x86_64 CPU
    // with SSE2 (all of them) supports both, and no other state is changed.
    unsafe {
        use std::arch::x86_64::{_mm_getcsr, _mm_setcsr};
        _mm_setcsr(_mm_getcsr() | 0x8040);
    }
}

impl Replica for CpuReplica {
    fn compute_grads(&mut self, micro: &[MicroBatch], mut sync: Option<&mut dyn Collective>) {
        self.grads.iter_mut().for_each(|g| *g = 0.0);
        let n = self.model.n_params;
        let (mut loss, mut correct, mut samples) = (0.0f64, 0usize, 0usize);
        for mb in micro {
            let mut across = sync.as_deref_mut().map(Across);
            let (l, c) = self.model.forward_backward(
                &self.params,
                &mut self.grads[..n],
                &mut self.buffers,
                &mut self.ws,
                &mb.x,
                &mb.y,
                mb.n,
                across.as_mut().map(|a| a as &mut dyn SumAcross),
            );
            loss += l;
            correct += c;
            samples += mb.n;
        }
        self.grads[n..].copy_from_slice(&[loss as f32, correct as f32, samples as f32]);
    }

    fn all_reduce_grads(
        &mut self,
        coll: &mut dyn Collective,
    ) -> Result<ReduceTiming, CollectiveError> {
        // frozen parameters have no gradients worth summing: every rank leaves out the same
        let skip = self.model.frozen_prefix();
        if skip == 0 {
            return coll.all_reduce_sum(&mut self.grads);
        }
        self.tail.clear();
        self.tail.extend_from_slice(&self.grads[skip..]);
        let t = coll.all_reduce_sum(&mut self.tail)?;
        self.grads[skip..].copy_from_slice(&self.tail);
        Ok(t)
    }

    fn batch_metrics(&self) -> BatchMetrics {
        let a = &self.grads[self.model.n_params..];
        BatchMetrics {
            loss_sum: a[0] as f64,
            correct: a[1] as f64,
            samples: a[2] as f64,
        }
    }

    fn apply_update(&mut self, lr: f32) {
        let samples = self.batch_metrics().samples.max(1.0);
        let scale = (1.0 / samples) as f32;
        optim::step(
            &self.optimizer,
            &mut self.params,
            &self.grads,
            &mut self.opt,
            lr,
            scale,
        );
    }

    fn evaluate(&mut self, x: &[f32], y: &[u32], n: usize) -> (f64, usize) {
        let d = self.model.dims[0];
        let (mut loss, mut correct) = (0.0, 0);
        let chunk = self.model.eval_rows();
        for start in (0..n).step_by(chunk) {
            let b = chunk.min(n - start);
            let (l, c) = self.model.evaluate(
                &self.params,
                &self.buffers,
                &mut self.ws,
                &x[start * d..(start + b) * d],
                &y[start..start + b],
                b,
            );
            loss += l;
            correct += c;
        }
        (loss, correct)
    }

    fn export(&self) -> TrainState {
        TrainState {
            params: self.params.clone(),
            opt: self.optimizer.expand(&self.opt, self.params.len()),
            buffers: self.buffers.clone(),
        }
    }

    fn import(&mut self, state: &TrainState) {
        self.params.copy_from_slice(&state.params);
        self.opt = self.optimizer.compact(&state.opt, self.params.len());
        self.buffers.copy_from_slice(&state.buffers);
    }

    fn grads_to_host(&mut self, out: &mut Vec<f32>) {
        out.clear();
        out.extend_from_slice(&self.grads);
    }

    fn params_to_host(&mut self, out: &mut Vec<f32>) {
        out.clear();
        out.extend_from_slice(&self.params);
    }

    fn params_from_host(&mut self, params: &[f32]) {
        self.params.copy_from_slice(params);
    }

    fn buffers(&self) -> Vec<f32> {
        self.buffers.clone()
    }

    fn set_buffers(&mut self, buffers: &[f32]) {
        self.buffers.copy_from_slice(buffers);
    }
}
