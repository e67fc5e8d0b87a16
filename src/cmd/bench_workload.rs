//! What the benchmarks share: the reference workload's run and the median of repeated
//! measurements.

use crate::config::{Budget, DeviceSpec, RunConfig};
use crate::data::DataSpec;
use crate::nn::model::ModelSpec;

/// A benchmark run: MLP 784-`hidden`-10 on `n` synthetic samples, no validation, no checkpoint.
pub(super) fn synthetic(
    workers: usize,
    hidden: usize,
    n: usize,
    batch: usize,
    steps: u64,
) -> RunConfig {
    RunConfig {
        devices: DeviceSpec::Cpu(workers),
        model: ModelSpec::mlp(&[hidden]),
        data: DataSpec::Synthetic { n, d: 784, c: 10 },
        budget: Budget::Steps(steps),
        batch_per_replica: batch,
        inputs: crate::data::DataOptions::no_validation(),
        final_checkpoint: false,
        ..RunConfig::default()
    }
}
