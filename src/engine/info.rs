//! What a frontend shows about a run before its first step, and what follows from it.

use std::path::PathBuf;
use std::time::Duration;

use super::Device;
use crate::config::Budget;
use crate::engine::loader::Sharding;

/// What a frontend shows about the run before the first step.
#[derive(Clone, Debug)]
pub struct RunInfo {
    pub name: String,
    /// Every rank's device, in global rank order.
    pub devices: Vec<Device>,
    /// Every rank's host, where the run spans several processes (empty: this process alone).
    pub hosts: Vec<String>,
    /// This process's index among the run's processes, and their number.
    pub process: usize,
    pub processes: usize,
    pub device_note: Option<String>,
    pub data: String,
    pub model: String,
    /// A convolutional model's layers, `conv 1x28x28 -> 32x26x26 (320 params)` (none for MLPs).
    pub layers: Vec<String>,
    pub params: usize,
    pub per_replica: usize,
    pub grad_accum: usize,
    /// The base LR the run starts with, and how it was chosen when not given.
    pub lr: f32,
    pub lr_note: Option<String>,
    /// Resuming: where the batch size came from (the checkpoint or the flag).
    pub batch_note: Option<String>,
    pub train_samples: usize,
    pub val_samples: usize,
    pub budget: Budget,
    pub start_step: u64,
    pub start_epoch: u64,
    pub resumed_from: Option<PathBuf>,
    /// The run's directory, absolute (None for runs that keep nothing: `scale`, `bench`).
    pub run_dir: Option<PathBuf>,
    /// Cores this process may use.
    pub cores: usize,
    /// Intra-op threads of each CPU worker (`--threads-per-worker`).
    pub threads_per_worker: usize,
    /// The fault injected on each rank, as the flag that asked for it.
    pub injected: Vec<Option<String>>,
    pub stall_timeout: Duration,
    /// Samples/s of one device on this workload (`--calibrate`).
    pub baseline: Option<f64>,
    /// How the ranks share what they learn (`--strategy`).
    pub strategy: crate::engine::strategy::Strategy,
}

impl RunInfo {
    pub fn ranks(&self) -> usize {
        self.devices.len()
    }

    /// How global batches are cut at the starting batch size.
    pub fn sharding(&self) -> Sharding {
        Sharding {
            per_replica: self.per_replica,
            ranks: self.ranks(),
            accum: self.grad_accum,
            split: None,
        }
    }

    /// `cpu0`, or `nodeB/cpu0` in a run over several processes.
    pub fn rank_label(&self, rank: usize) -> String {
        match self.devices.get(rank) {
            Some(d) => d.label_on(self.hosts.get(rank).map(String::as_str)),
            None => format!("rank{rank}"),
        }
    }

    /// Hosts the run spans (1 for a run in one process).
    pub fn host_count(&self) -> usize {
        let mut h: Vec<&String> = self.hosts.iter().collect();
        h.sort();
        h.dedup();
        h.len().max(1)
    }

    /// Steps per epoch at the starting batch size.
    pub fn steps_per_epoch(&self) -> u64 {
        self.train_samples.div_ceil(self.sharding().global_batch()) as u64
    }
}
