//! What a frontend shows about a run before its first step, and what follows from it.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use super::devices::available_cores;
use super::job::World;
use super::start::Start;
use super::{Device, RunData};
use crate::config::strategy::Strategy;
use crate::config::{Budget, RunConfig};
use crate::engine::loader::Sharding;
use crate::nn::model::Model;
use crate::nn::precision::Precision;

mod example;
mod idle;

/// What a frontend shows about the run before the first step.
#[derive(Clone, Debug)]
pub struct RunInfo {
    pub name: String,
    /// Every rank's device, in global rank order.
    pub devices: Vec<Device>,
    /// Every rank's host, where the run spans several processes (empty: this process alone).
    pub hosts: Vec<String>,
    /// The machine of process 0, which writes the run's records (`None` in files from before
    /// it was recorded).
    pub host: Option<String>,
    /// This process's index among the run's processes, and their number.
    pub process: usize,
    pub processes: usize,
    /// The run's other processes on this machine: their global ranks and process ids (none in
    /// a run read back).
    pub peers_here: Vec<crate::pids::Peer>,
    pub device_note: Option<String>,
    /// The other processes' notes on their devices that this one's does not say, a line each
    /// (none in a run read back).
    pub others_notes: Vec<String>,
    /// What the GPU ranks compute their products in (`--precision`; CPU workers: fp32), and
    /// the notes on it: why, where it is not what was asked for, and what `--grad-dtype` does.
    pub precision: Precision,
    pub precision_notes: Vec<String>,
    /// What the GPUs' gradient all-reduce carries (`--grad-dtype` where there is one; fp32
    /// where there is none to carry it: said so by the `--grad-dtype` note).
    pub grad_dtype: crate::nn::precision::GradDtype,
    /// What `--cuda-graph` comes to on GPUs (None where unknown: a run read back).
    pub cuda_graph: Option<String>,
    /// When GPUs' step metrics are read (`RunConfig::metrics_late`; None: a run read back).
    pub step_metrics: Option<String>,
    /// What a run's convolutions go through, on GPUs or CPU workers (None: no convolution).
    pub convolutions: Option<String>,
    pub data: String,
    /// What the data's start-up lines say besides (a folder's classes, files skipped).
    pub data_notes: Vec<String>,
    /// The samples are pictures decoded from files (which `--image-size` makes smaller).
    pub pictures: bool,
    /// Loader threads per rank, and batches queued ahead per rank (0: built on the worker).
    pub loader_threads: usize,
    pub prefetch: usize,
    pub model: String,
    /// A convolutional model's ops with their shapes, parameters and FLOPs (none for MLPs).
    pub layers: Vec<String>,
    pub params: usize,
    /// Forward FLOPs per sample (a training step is about 3x).
    pub flops: u64,
    /// What the model's start-up lines say besides (its stem, its batch norm across replicas).
    pub model_notes: Vec<String>,
    pub per_replica: usize,
    pub grad_accum: usize,
    /// The base LR the run starts with, and how it was chosen when not given.
    pub lr: f32,
    pub lr_note: Option<String>,
    /// How the LR moves over the run (`--schedule`) and its warm-up steps (`--warmup`).
    pub schedule: crate::nn::schedule::Schedule,
    pub warmup: u64,
    /// `--clip-grad-norm`: the mean gradient's L2 norm bound (None: not clipped).
    pub clip_grad_norm: Option<f32>,
    /// Resuming: where the batch size came from (the checkpoint or the flag), and the settings
    /// the flags changed from the checkpoint's run.
    pub resume_note: Option<String>,
    pub train_samples: usize,
    pub val_samples: usize,
    /// `--val-every`: validations within epochs every this many steps.
    pub val_every: Option<u64>,
    pub budget: Budget,
    pub start_step: u64,
    pub start_epoch: u64,
    pub resumed_from: Option<PathBuf>,
    /// Resumed: the best validation of the run's line before the checkpoint it resumed from.
    pub best_before: Option<super::checkpoint::BestVal>,
    /// The run's directory, absolute (None for runs that keep nothing: `scale`, `bench`).
    pub run_dir: Option<PathBuf>,
    /// What its start-up lines say of it, where something is amiss (`runs/NAME/latest`).
    pub run_dir_note: Option<String>,
    /// Where its checkpoints go, absolute (`--checkpoint-dir`; None where not recorded).
    pub checkpoint_dir: Option<PathBuf>,
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
    /// When the workers started (the moment `t` and `StepStats::at` count from); `None` for a
    /// metrics file from a version that did not say.
    pub started: Option<SystemTime>,
}

/// What a GPU run's start-up says of when its step metrics are read (as its GPU ranks do:
/// `worker::late`), where its passes pool batch norm's statistics or not (`pools_bn`).
fn step_metrics(cfg: &RunConfig, pools_bn: bool) -> String {
    match super::worker::late(cfg, true, pools_bn) {
        true => "read one step late: the host queues the next step before it waits for a step's loss (MGTOP_METRICS_LATE=0 reads it at the step's end)".into(),
        false => "read at the end of each step".into(),
    }
}

/// For a convolutional model, what its convolutions go through: on GPUs "cuDNN 9.3.0" or why
/// the own kernels; on CPU workers which kernels this CPU takes.
fn convolutions(model: &Model, devices: &[Device]) -> Option<String> {
    let convs = (model.nodes.iter()).any(|n| matches!(n.op, crate::nn::model::Op::Conv { .. }));
    if !convs {
        return None;
    }
    let gpus = (devices.iter()).any(|d| matches!(d, Device::Gpu { .. }));
    if !gpus {
        return Some(crate::nn::conv::kernels(
            crate::nn::direct::isa(),
            crate::nn::winograd::enabled(),
            crate::nn::direct::turned_off(),
        ));
    }
    use crate::backend::cuda::{dnn, libs};
    Some(match (dnn::wanted(), dnn::available()) {
        (true, _) => format!(
            "cuDNN {} ({}{}algorithms {}; checked against the own kernels on each GPU first)",
            dnn::version(),
            match dnn::asked(std::env::var("MGTOP_CUDNN").ok().as_deref()) {
                Ok(_) => String::new(),
                Err(e) => format!("{e}; "),
            },
            match dnn::Api::parse(std::env::var("MGTOP_CUDNN_API").ok().as_deref()) {
                Ok(dnn::Api::Legacy) => String::new(),
                Ok(dnn::Api::Graph) => "graph API: MGTOP_CUDNN_API=graph; ".into(),
                Err(e) => format!("{e}; "),
            },
            match dnn::AlgoChoice::parse(std::env::var("MGTOP_CUDNN_ALGOS").ok().as_deref()) {
                Ok(how) => how.describe().to_string(),
                Err(e) => format!("measured once per shape; {e}"),
            }
        ),
        (false, true) => "own kernels (im2col + cuBLAS, depthwise kernels; MGTOP_CUDNN=off)".into(),
        (false, false) => format!(
            "own kernels (im2col + cuBLAS, depthwise kernels): {}; for faster convolutions {}",
            match dnn::too_old() {
                Some(v) => format!("the cuDNN found is {v}, and they need cuDNN 9 or newer"),
                None => "cuDNN not found".into(),
            },
            libs::CUDNN.install()
        ),
    })
}

impl RunInfo {
    /// What a run of `model` over `world`, starting at `start`, shows before its first step.
    pub(super) fn for_run(
        cfg: &RunConfig,
        model: &Model,
        world: &World,
        start: &Start,
        loaded: &RunData,
        device_note: Option<String>,
        (precision, precision_note): (Precision, Option<String>),
    ) -> RunInfo {
        let ranks = world.devices.len();
        let pools = super::worker::pools_bn(cfg, model, ranks);
        let local = world.local();
        let mut info = RunInfo {
            name: cfg.run_name(),
            devices: world.devices.clone(),
            hosts: world.hosts.clone(),
            host: Some((world.hosts.first().cloned()).unwrap_or_else(crate::pids::hostname)),
            process: world.process(),
            processes: world.offsets.len() - 1,
            peers_here: world.peers_here.clone(),
            device_note,
            others_notes: world.others_notes.clone(),
            precision,
            precision_notes: (precision_note.into_iter())
                .chain(grad_note(cfg, &world.devices))
                .collect(),
            grad_dtype: wire(cfg, &world.devices),
            // (the pair `on` refuses on GPUs is no matter on CPU workers: said as `on` alone)
            cuda_graph: match crate::backend::cuda::replica::profiled() {
                // (a profile times each launch of a pass: its passes are never graphs)
                Some(_) if cfg.cuda_graph != crate::config::cuda_graph::CudaGraph::Off => Some(
                    "off: MGTOP_GPU_PROFILE times each launch of a pass, which a graph would hide (unset it for graphs)".into(),
                ),
                _ => (cfg.cuda_graph.resolve(pools))
                    .or_else(|_| cfg.cuda_graph.resolve(false))
                    .ok()
                    .map(|(_, line)| line),
            },
            step_metrics: Some(step_metrics(cfg, pools)),
            convolutions: convolutions(model, &world.devices),
            data: loaded.description.clone(),
            // (--val-data naming the training folder itself: its notes are said once)
            data_notes: (loaded.notes.iter().enumerate())
                .filter(|&(i, n)| !loaded.notes[..i].contains(n))
                .map(|(_, n)| n.clone())
                .collect(),
            pictures: loaded.train.pictures.is_some(),
            loader_threads: crate::engine::loader::threads_for(
                cfg,
                &loaded.train,
                &world.devices,
                local.len(),
            ),
            prefetch: cfg.prefetch,
            model: format!("{} ({})", cfg.model, model.shape_string()),
            layers: match model.is_mlp() {
                true => Vec::new(),
                false => model.layer_summary(),
            },
            params: model.n_params,
            flops: model.flops_per_sample(),
            model_notes: (start.init_notes.iter().cloned())
                .chain(model_notes(model, ranks, cfg.sync_bn))
                .collect(),
            lr: start.lr,
            lr_note: start.lr_note.clone(),
            schedule: cfg.schedule,
            warmup: cfg.warmup,
            clip_grad_norm: cfg.clip_grad_norm,
            resume_note: start.resume_note.clone(),
            per_replica: start.per_replica,
            grad_accum: cfg.grad_accum,
            train_samples: loaded.train.len(),
            val_samples: loaded.val.len(),
            val_every: cfg.val_every,
            budget: cfg.budget,
            start_step: start.step,
            start_epoch: start.cursor.epoch,
            resumed_from: start.checkpoint.clone(),
            best_before: start.best_val,
            run_dir: cfg.run_dir.clone(),
            run_dir_note: None,
            checkpoint_dir: (cfg.run_dir.as_ref())
                .and_then(|_| std::path::absolute(&cfg.checkpoint_dir).ok()),
            cores: available_cores(),
            // the run's processes on this machine share its cores
            threads_per_worker: cfg
                .threads_per_worker
                .unwrap_or_else(|| (available_cores() / (local.len() * world.neighbours)).max(1)),
            injected: (0..ranks)
                .map(|r| {
                    let slow = cfg
                        .slow_rank
                        .filter(|f| f.0 == r)
                        .map(|(r, f)| format!("--slow-rank {r}:{f}"));
                    let data = cfg
                        .slow_data
                        .filter(|f| f.0 == r)
                        .map(|(r, d)| format!("--slow-data {r}:{}", d.as_millis()));
                    match (slow, data) {
                        (Some(a), Some(b)) => Some(format!("{a} {b}")),
                        (a, b) => a.or(b),
                    }
                })
                .collect(),
            stall_timeout: cfg.stall_timeout,
            baseline: None,
            strategy: cfg.strategy,
            started: None,
        };
        // local SGD on one rank trains as mirrored (a start-up note says so): the header, the
        // log and the records tell of what runs
        // (and `,moments` with an optimizer that keeps none averages the parameters alone)
        match cfg.strategy {
            Strategy::LocalSgd { .. } if info.ranks() == 1 => info.strategy = Strategy::Mirrored,
            Strategy::LocalSgd { every, warmup, .. } if !cfg.optimizer.keeps_moments() => {
                info.strategy = Strategy::LocalSgd {
                    every,
                    warmup,
                    moments: false,
                }
            }
            _ => {}
        }
        let idle = idle::settings(cfg, model, &info);
        info.model_notes.extend(idle);
        info
    }

    pub fn ranks(&self) -> usize {
        self.devices.len()
    }

    /// Where a stop takes past the step under way: local SGD over several ranks agrees on
    /// controls at its averages only, the next up to `H` steps on (`Some(H)`).
    pub fn stops_at_average(&self) -> Option<u64> {
        match self.strategy {
            crate::engine::strategy::Strategy::LocalSgd { every, .. } if self.ranks() > 1 => {
                Some(every)
            }
            _ => None,
        }
    }

    /// Whether how busy the loader threads are is said: where they decode and augment
    /// pictures batch by batch (samples held ready are copied, and with `--prefetch 0` the
    /// workers build their batches themselves, in their wait for data).
    pub fn loaders_said(&self) -> bool {
        self.pictures && self.prefetch > 0
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

    /// Whether rank `rank` runs on process 0's machine (every rank of a run of one process),
    /// machines told apart by host name.
    pub fn on_first_host(&self, rank: usize) -> bool {
        (self.hosts.get(rank)).is_none_or(|h| Some(h) == self.hosts.first())
    }

    /// Steps per epoch at the starting batch size.
    pub fn steps_per_epoch(&self) -> u64 {
        self.train_samples.div_ceil(self.sharding().global_batch()) as u64
    }
}

/// What the GPUs' gradient all-reduce carries: `--grad-dtype`'s, where there is one (GPUs, more
/// than one rank, no central storage, which sends fp32 gradients to the host); else fp32.
fn wire(cfg: &RunConfig, devices: &[Device]) -> crate::nn::precision::GradDtype {
    use crate::config::strategy::Strategy;
    let gpus = devices.iter().any(|d| matches!(d, Device::Gpu { .. }));
    match gpus && devices.len() > 1 && cfg.strategy != Strategy::CentralStorage {
        true => cfg.grad_dtype,
        false => crate::nn::precision::GradDtype::Fp32,
    }
}

/// What `--grad-dtype bf16` does in this run, where it was asked for.
fn grad_note(cfg: &RunConfig, devices: &[Device]) -> Option<String> {
    use crate::config::strategy::Strategy;
    if cfg.grad_dtype == crate::nn::precision::GradDtype::Fp32 {
        return None;
    }
    let gpus = (devices.iter())
        .filter(|d| matches!(d, Device::Gpu { .. }))
        .count();
    Some(match () {
        _ if gpus == 0 => "--grad-dtype bf16 applies to GPUs (their NCCL all-reduce): CPU workers sum their gradients in fp32".into(),
        _ if devices.len() == 1 => "--grad-dtype bf16: one GPU has no all-reduce; nothing changes".into(),
        _ if cfg.strategy == Strategy::CentralStorage => "--grad-dtype bf16: under central storage the gradients go to the host in fp32; nothing changes".into(),
        _ => format!("gradients' all-reduce in bf16 (--grad-dtype bf16{}): half the bytes between GPUs; each rank's sums are rounded to bf16 and summed in bf16, the metrics and the optimizer stay fp32, so N ranks no longer equal 1 rank bit for bit", match cfg.strategy {
            Strategy::LocalSgd { .. } => "; under local SGD only its warm-up's steps all-reduce gradients",
            _ => "",
        }),
    })
}

/// The stem a preset chose; how batch norm and dropout behave across replicas.
fn model_notes(model: &Model, ranks: usize, sync_bn: bool) -> Vec<String> {
    let mut notes: Vec<String> = model.stem.iter().map(|s| s.to_string()).collect();
    if !model.frozen.is_empty() {
        let n: usize = model.frozen_ranges().iter().map(|r| r.len()).sum();
        let frozen_bns = model.frozen_batch_norms();
        let statistics = match model.has_batch_norm() {
            true if !frozen_bns.is_empty()
                && frozen_bns.iter().all(|&n| model.statistics_fixed(n)) =>
            {
                " (the frozen batch norms normalise by their running statistics, which stay as they are)"
            }
            true if !frozen_bns.is_empty() => " (batch norm's running statistics still follow the data, as in PyTorch's train mode; --bn-stats frozen keeps the frozen batch norms' as they are)",
            true => " (batch norm's running statistics still follow the data, as in PyTorch's train mode)",
            false => "",
        };
        notes.push(format!(
            "--freeze: {n} of {} parameters ({}) frozen: never updated, no optimizer moments kept; backward runs only where a trainable parameter is upstream{statistics}",
            model.n_params,
            crate::text::counted(model.frozen.len(), "tensor")
        ));
    }
    let fixed = model.fixed_batch_norms();
    if fixed > 0 {
        notes.push(format!(
            "batch norm: {fixed} of {} normalise by their running statistics in training and leave them as they are (--bn-stats; PyTorch's eval mode for batch norm, Keras's training=False){}",
            model.batch_norms().len(),
            match model.has_batch_statistics() {
                true => "; the others by the batch's",
                false => "",
            }
        ));
    }
    if model.has_batch_statistics() && ranks > 1 && sync_bn {
        notes.push(
            "batch norm: statistics over the global batch (--sync-bn: summed across the replicas \
             at every batch norm, so N ranks train as 1 rank with the global batch)"
                .into(),
        );
    } else if model.has_batch_statistics() && ranks > 1 {
        notes.push(
            "batch norm: each replica normalises over its own batch (as PyTorch DDP and TF \
             MirroredStrategy do), so N ranks differ slightly from 1 rank with the global batch; \
             running statistics are averaged across replicas at every validation and checkpoint; \
             --sync-bn for statistics over the global batch"
                .into(),
        );
    }
    if model.has_dropout() && ranks > 1 {
        notes.push("dropout: each replica draws its own masks".into());
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::strategy::Strategy;

    #[test]
    fn grad_dtype_bf16_says_what_it_does_in_each_run() {
        use crate::nn::precision::GradDtype;
        let gpu = |index| Device::Gpu {
            index,
            name: "test".into(),
            pci_bus_id: None,
            arch: 90,
        };
        let cpu = |index| Device::Cpu { index };
        let mut cfg = RunConfig::default();
        assert_eq!(
            grad_note(&cfg, &[gpu(0), gpu(1)]),
            None,
            "fp32: nothing to say"
        );
        cfg.grad_dtype = GradDtype::Bf16;
        let said = |cfg: &RunConfig, d: &[Device]| grad_note(cfg, d).unwrap();
        assert!(said(&cfg, &[gpu(0), gpu(1)]).contains("half the bytes"));
        assert!(said(&cfg, &[cpu(0), cpu(1)]).contains("CPU workers sum their gradients in fp32"));
        assert!(said(&cfg, &[gpu(0)]).contains("one GPU has no all-reduce"));
        // what the start-up's precision line says the all-reduce carries agrees
        assert_eq!(wire(&cfg, &[gpu(0), gpu(1)]), GradDtype::Bf16);
        assert_eq!(wire(&cfg, &[gpu(0)]), GradDtype::Fp32);
        assert_eq!(wire(&cfg, &[cpu(0), cpu(1)]), GradDtype::Fp32);
        cfg.strategy = Strategy::CentralStorage;
        assert!(said(&cfg, &[gpu(0), gpu(1)]).contains("central storage"));
        assert_eq!(wire(&cfg, &[gpu(0), gpu(1)]), GradDtype::Fp32);
    }

    #[test]
    fn step_metrics_are_late_on_gpus_unless_turned_off_or_under_central_storage_or_sync_bn() {
        let mut cfg = RunConfig::default();
        assert!(step_metrics(&cfg, false).starts_with("read one step late"));
        assert!(
            !super::super::worker::late(&cfg, false, false),
            "CPU workers: not unless asked"
        );
        cfg.metrics_late = Some(false);
        assert_eq!(step_metrics(&cfg, false), "read at the end of each step");
        cfg.metrics_late = Some(true);
        assert!(super::super::worker::late(&cfg, false, false), "asked");
        cfg.metrics_late = None;
        // (statistics pooled by --sync-bn)
        assert_eq!(step_metrics(&cfg, true), "read at the end of each step");
        cfg.strategy = Strategy::CentralStorage;
        assert_eq!(step_metrics(&cfg, false), "read at the end of each step");
    }
}
