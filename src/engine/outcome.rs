//! How a run ends: the errors that stop every rank, and what a run that did not fail returns.

use std::path::PathBuf;
use std::time::Duration;

use super::checkpoint::CheckpointError;
use super::DeviceError;
use crate::backend::TrainState;
use crate::comm::CollectiveError;
use crate::data::DataError;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Devices(#[from] DeviceError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("{0}")]
    Config(String),
    /// A refusal every process of a run meets alike as they meet (process 0 says it).
    #[error("{0}")]
    Shared(String),
    #[error("{}", non_finite(*.step, *.epoch, .checkpoint.as_deref(), .started_from.as_deref()))]
    NonFinite {
        step: u64,
        epoch: u64,
        checkpoint: Option<PathBuf>,
        /// Where `step` is this run's first, what to blame in words (what it started from, its
        /// data: the loss came before any update, so no learning rate made it so).
        started_from: Option<String>,
    },
    #[error("worker for rank {rank} panicked at step {step}: {message}; all ranks stopped")]
    WorkerPanic {
        rank: usize,
        step: u64,
        message: String,
    },
    #[error("the replicas are out of sync at step {step}: the parameters of rank(s) {} differ from rank 0's (a bug, or memory corruption on their device); all ranks stopped", .ranks.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", "))]
    OutOfSync { step: u64, ranks: Vec<usize> },
    #[error(transparent)]
    Collective(#[from] CollectiveError),
    #[error(transparent)]
    Gpu(#[from] crate::backend::cuda::CudaError),
}

/// A loss (or weights) not finite, said: at this run's first step, what it started from is to
/// blame (or its data); later, the training's settings.
fn non_finite(
    step: u64,
    epoch: u64,
    checkpoint: Option<&std::path::Path>,
    started_from: Option<&str>,
) -> String {
    match started_from {
        Some(why) => format!(
            "the loss is not finite at step {step}, this run's first, before any update: {why}; all ranks stopped"
        ),
        None => format!(
            "training diverged: the loss is not finite at step {step} (epoch {epoch}); all ranks stopped{}; try a lower --lr, more --warmup, or --clip-grad-norm 1.0",
            checkpoint.map(|p| format!(", last good checkpoint: {}", p.display())).unwrap_or_default()
        ),
    }
}

/// The outcome of a run that did not fail.
#[derive(Clone, Debug, Default)]
pub struct RunResult {
    pub steps: u64,
    /// Stopped on request before the budget was spent.
    pub stopped: bool,
    /// Global training loss of each step of this process's run: every step of a run of up to
    /// 131072, at least the last 65536 (`STEP_HISTORY`) of a longer one (its memory bounded).
    pub losses: Vec<f32>,
    /// When each of those steps ended (rank 0), since the start.
    pub step_ends: Vec<Duration>,
    /// The samples each of those steps trained, over every rank.
    pub step_samples: Vec<usize>,
    pub state: TrainState,
    pub last_checkpoint: Option<PathBuf>,
    pub best_val_accuracy: Option<f32>,
    /// Picture files that could not be decoded during the run (each was told as it happened,
    /// and another picture of its class stood in for it).
    pub data_skipped: usize,
}
