//! What the engine tells frontends: lossy per-rank step samples and lossless lifecycle events.

use std::path::PathBuf;
use std::time::Duration;

/// One rank's view of one optimizer step. `loss` and `accuracy` are global (all ranks' shards,
/// all-reduced), the timings are this rank's.
#[derive(Clone, Debug, PartialEq)]
pub struct StepStats {
    pub rank: usize,
    /// 1-based number of this step in the run.
    pub step: u64,
    pub epoch: u64,
    /// Samples this rank processed in this step.
    pub samples: usize,
    pub global_samples: usize,
    pub per_replica: usize,
    pub loss: f32,
    pub accuracy: f32,
    pub lr: f32,
    pub data_wait: Duration,
    pub compute: Duration,
    /// CPU time this worker's thread used computing (CPU workers): the device's own speed,
    /// without time lost to other threads on a shared core. `None` where not measured.
    pub compute_cpu: Option<Duration>,
    /// A GPU's step: compute and all-reduce are device (CUDA event) times, and its wait for
    /// slower peers is inside `comm` (`sync_wait` is zero) until the monitor splits it out.
    pub device_timed: bool,
    /// Time inside the all-reduce moving and summing data.
    pub comm: Duration,
    /// Time inside the all-reduce waiting for slower ranks to arrive.
    pub sync_wait: Duration,
    /// Parameters and gradients copied between the device and the host's copy of the model
    /// (central storage every step; local SGD at its averages).
    pub transfer: Duration,
    pub optimizer: Duration,
    pub step_time: Duration,
    /// Since the run started, when this rank finished the step.
    pub at: Duration,
    /// The run was paused just before this step (throughput windows restart here).
    pub after_pause: bool,
    /// Fraction of the run's budget (epochs or steps) done after this step.
    pub progress: f64,
}

/// A control the engine applied, and at which step (every rank applied it there).
#[derive(Clone, Debug, PartialEq)]
pub enum Applied {
    Paused,
    Resumed,
    BatchSize {
        from: usize,
        to: usize,
        lr: f32,
    },
    /// `--rebalance` cut the global batch unevenly: samples per rank from this step.
    Split(Vec<usize>),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Started {
        ranks: usize,
        per_replica: usize,
        params: usize,
        start_step: u64,
        start_epoch: u64,
    },
    Control {
        step: u64,
        applied: Applied,
    },
    EpochDone {
        epoch: u64,
        step: u64,
        train_loss: f32,
        val_loss: Option<f32>,
        val_accuracy: Option<f32>,
        elapsed: Duration,
    },
    Checkpoint {
        step: u64,
        path: PathBuf,
    },
    Failed {
        rank: usize,
        step: u64,
        message: String,
    },
    Finished {
        step: u64,
        stopped: bool,
    },
}
