//! One device's copy of the model: the interface every backend implements, and the CPU one.

mod cpu;
pub mod cuda;

pub use cpu::CpuReplica;

use std::time::Duration;

use crate::comm::{Collective, CollectiveError, ReduceTiming};
use crate::data::{Dataset, MicroBatch};
use crate::nn::optim::{OptState, OptimizerKind};

/// Parameters, optimizer state and the model's buffers (batch norm's running statistics),
/// on the host (checkpoints, tests, comparisons).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrainState {
    pub params: Vec<f32>,
    pub opt: OptState,
    /// `Model::n_buffers` floats (none without batch norm).
    pub buffers: Vec<f32>,
}

impl TrainState {
    /// A model's start: its seeded initial parameters, an empty optimizer state of `kind`, and
    /// its initial buffers.
    pub fn initial(model: &crate::nn::model::Model, kind: OptimizerKind, seed: u64) -> TrainState {
        TrainState {
            params: model.init_params(seed),
            opt: OptState::new(kind, model.n_params),
            buffers: model.init_buffers(),
        }
    }
}

/// Global metrics of the last step's batch, after the all-reduce.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BatchMetrics {
    pub loss_sum: f64,
    pub correct: f64,
    pub samples: f64,
    /// The L2 norm of the mean gradient of the trained parameters, before `--clip-grad-norm`.
    pub grad_norm: f32,
}

/// What a step's end leaves for its report: its metric slots (global once exchanged) and the
/// sum of squares of the trained parameters' gradient sums (`Optimizer::grad_sumsq`; a GPU's
/// from the norm it reads back, whose square does not pass float's range).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepEnd {
    pub slots: [f32; AUX],
    pub grad_sumsq: f64,
}

impl StepEnd {
    /// What the optimizer `o` multiplies this step's gradient sums by: 1 / its samples (the
    /// mean), times `--clip-grad-norm`'s factor for its norm (`kernels/optim.cu`'s
    /// `update_scale` on the GPU).
    pub fn update_scale(&self, o: &crate::nn::optim::Optimizer) -> f32 {
        let samples = f64::from(self.slots[2]);
        let norm = crate::nn::optim::mean_grad_norm(self.grad_sumsq, samples);
        (1.0 / samples.max(1.0)) as f32 * o.clip_factor(norm)
    }

    pub fn metrics(&self) -> BatchMetrics {
        let [loss_sum, correct, samples] = self.slots.map(f64::from);
        BatchMetrics {
            loss_sum,
            correct,
            samples,
            grad_norm: crate::nn::optim::mean_grad_norm(self.grad_sumsq, samples),
        }
    }
}

/// Where the last step's time went on the device itself (GPUs: CUDA events on the stream),
/// where the host's clock only sees kernel launches. Each part has its own pair of events, so
/// host-side gaps (data loading, barriers, checkpoints) are in none of them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DeviceTimes {
    /// Forward and backward of every micro-batch, uploads included.
    pub compute: Duration,
    pub comm: Duration,
    /// The optimizer update of the step before (its events are only read once the next
    /// all-reduce has been waited for); `None` on the first step.
    pub optimizer: Option<Duration>,
}

/// A replica of the model on one device. Each worker thread owns exactly one.
pub trait Replica {
    /// Zeroes the gradients, then forward + backward over every micro-batch (accumulating).
    /// With `sync` (`--sync-bn`), batch norm takes its statistics over every replica's
    /// micro-batch through it: every replica must then call this with as many micro-batches.
    fn compute_grads(&mut self, micro: &[MicroBatch], sync: Option<&mut dyn Collective>);
    /// Sums gradients (and batch metrics) across ranks; returns the reported step's timing.
    fn all_reduce_grads(
        &mut self,
        coll: &mut dyn Collective,
    ) -> Result<ReduceTiming, CollectiveError>;
    /// Metrics of the reported step's batch (global once `all_reduce_grads` has run): the step
    /// just ended, or the one before it where the replica reports late (`report_late`).
    fn batch_metrics(&self) -> BatchMetrics;
    /// Device-measured times of the reported step; None where the host's clock is the device's
    /// (CPU workers).
    fn device_times(&self) -> Option<DeviceTimes> {
        None
    }
    /// From now on (`on`), the end of a step (`all_reduce_grads`, `finish_local`) is only
    /// queued, so that the host goes on to the next step while the device finishes this one:
    /// the step reported (`batch_metrics`, `device_times`, the timing returned) is then the one
    /// before it (none after the first, or after `catch_up`), and `catch_up` waits for the last.
    /// The optimizer step needs no metrics on the host. (Whether to: `engine::worker::late`.)
    fn report_late(&mut self, on: bool);
    /// Where reports are late: waits for the last step queued and reports it (its timing;
    /// `host` is polled for a peer's failure while waiting). Nothing to do otherwise.
    fn catch_up(&mut self, host: &dyn Collective) -> Result<ReduceTiming, CollectiveError>;
    /// What the run should be told about this device since the last call (a fallback taken).
    fn take_notes(&mut self) -> Vec<String> {
        Vec::new()
    }
    /// Optimizer step with the mean gradient (sum / global sample count).
    fn apply_update(&mut self, lr: f32);
    /// (loss sum, correct) over x[n, features], y[n], without touching gradients.
    fn evaluate(&mut self, x: &[f32], y: &[u32], n: usize) -> (f64, usize);
    fn export(&self) -> TrainState;
    fn import(&mut self, state: &TrainState);
    /// Ends a step without exchanging gradients (local SGD between averages, central storage):
    /// `batch_metrics` and `device_times` then describe this rank's own batch (of the step
    /// reported, as `all_reduce_grads`: the one before where reports are late, whose end may
    /// have followed an all-reduce: its timing is returned, `host` polled while waiting).
    fn finish_local(&mut self, host: &dyn Collective) -> Result<ReduceTiming, CollectiveError>;
    /// The last step's gradient sums and metric slots (n_params + AUX floats) into `out`, on
    /// the host (central storage).
    fn grads_to_host(&mut self, out: &mut Vec<f32>);
    /// The parameters (n_params floats) into `out`, on the host.
    fn params_to_host(&mut self, out: &mut Vec<f32>);
    /// Replaces the parameters with `params` from the host; the optimizer state stays.
    fn params_from_host(&mut self, params: &[f32]);
    /// The model's buffers (batch norm's running statistics, `Model::n_buffers` floats).
    fn buffers(&self) -> Vec<f32>;
    /// Replaces the model's buffers.
    fn set_buffers(&mut self, buffers: &[f32]);
    /// Takes the training and validation sets onto the device when they fit there beside the
    /// buffers of micro-batches of `rows` rows, so that micro-batches can come as row numbers
    /// alone (`MicroBatch::rows`, `x` empty) and validation as a range (`evaluate_held`):
    /// whether it did. Host memory is the CPU replica's device: it never needs to.
    fn hold_data(&mut self, _train: &Dataset, _val: &Dataset, _rows: usize) -> bool {
        false
    }
    /// `evaluate` over rows `lo..hi` of the validation set the device holds; None when it
    /// holds none.
    fn evaluate_held(&mut self, _lo: usize, _hi: usize) -> Option<(f64, usize)> {
        None
    }
}

/// The number of metric slots riding at the end of the gradient buffer, so that one
/// all-reduce also yields the global loss sum, correct count and sample count.
pub const AUX: usize = 3;
