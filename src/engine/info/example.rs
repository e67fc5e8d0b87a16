//! A fixed run's description.

use std::time::Duration;

use super::RunInfo;
use crate::config::Budget;
use crate::engine::Device;
use crate::nn::precision::Precision;

impl RunInfo {
    /// A small run on `devices` CPU workers (the UCI digits, an MLP, 30 epochs), for the demo
    /// screen and the tests: nothing in it reads the machine.
    pub fn example(devices: usize) -> RunInfo {
        RunInfo {
            host: None,
            name: "digits-mlp:128".into(),
            devices: (0..devices).map(|index| Device::Cpu { index }).collect(),
            hosts: Vec::new(),
            process: 0,
            processes: 1,
            peers_here: Vec::new(),
            device_note: None,
            others_notes: Vec::new(),
            precision: Precision::Fp32,
            precision_notes: Vec::new(),
            cuda_graph: None,
            step_metrics: None,
            grad_dtype: Default::default(),
            convolutions: None,
            data: "digits (UCI optdigits 8x8, 1797 samples, 10 classes)".into(),
            model: "mlp:128 (64-128-10)".into(),
            params: 9610,
            per_replica: 32,
            grad_accum: 1,
            lr: 1e-3,
            lr_note: None,
            schedule: Default::default(),
            warmup: 0,
            clip_grad_norm: None,
            resume_note: None,
            train_samples: 1438,
            val_samples: 359,
            val_every: None,
            budget: Budget::Epochs(30),
            start_step: 0,
            start_epoch: 0,
            resumed_from: None,
            best_before: None,
            run_dir: None,
            run_dir_note: None,
            checkpoint_dir: None,
            layers: Vec::new(),
            flops: 19_200,
            model_notes: Vec::new(),
            data_notes: Vec::new(),
            pictures: false,
            loader_threads: 1,
            prefetch: 0,
            cores: 64,
            threads_per_worker: 1,
            injected: vec![None; devices],
            stall_timeout: Duration::from_secs(60),
            baseline: None,
            strategy: Default::default(),
            started: None,
        }
    }
}
