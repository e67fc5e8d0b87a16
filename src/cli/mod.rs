//! Command line and `--config` TOML file → `RunConfig`. Flags override the file; the file
//! overrides the defaults. Every value is checked by the same parser either way.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use serde::{Deserialize, Serialize};

mod config_file;
mod one_line;
mod origin;
mod readers;
mod resolve;
pub mod resumed;
mod texts;

pub use one_line::one_line;
pub use origin::Origins;
pub use readers::{AttachArgs, EvalArgs, ExportArgs, ModelsArgs, RunsArgs, ViewArgs};
pub use resolve::{Frontend, TensorboardDir};
use texts::{heading, EXAMPLES, VERSION};

#[derive(Parser, Debug)]
#[command(name = "mgtop-train", version = VERSION, about = "Data-parallel training with a live view of every device", after_help = EXAMPLES)]
#[command(args_conflicts_with_subcommands = true)]
// a flag given again replaces the earlier value (a sweep script appends its overrides)
#[command(args_override_self = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub train: TrainArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Measure training throughput (MLP 784-128-10, Adam, synthetic data), all-reduce bandwidth and the terminal UI's cost.
    Bench(BenchArgs),
    /// Scaling report: the configured workload (same flags as training) over device counts, prefetch on/off and per-replica batch sizes.
    Scale(Box<ScaleArgs>),
    /// Check the CUDA path on this machine: kernels compiled with NVRTC; on GPUs, every op, two training steps and the NCCL all-reduce against the CPU reference.
    Selftest,
    /// Open the terminal UI over a metrics file (or a run directory holding metrics.jsonl) written by an earlier or still running run; read-only, `q` quits.
    View(ViewArgs),
    /// List the runs under ./runs (or DIR), the one started last first: state (live, paused, suspended, done, stopped, quit, failed, killed, copy, damaged, unreadable), step, progress, best validation accuracy, last update.
    #[command(visible_alias = "ls")]
    Runs(RunsArgs),
    /// The processes of `bench --only processes`' MPI all-reduce measurement (started by it under mpirun).
    #[command(hide = true, name = "mpi-allreduce-bench")]
    MpiAllreduceBench {
        #[arg(long, default_value_t = 3, value_parser = at_least_one(100))]
        repeat: usize,
    },
    /// Write a run's (or checkpoint's) trained weights to a safetensors file under PyTorch's names, for `model.load_state_dict(safetensors.torch.load_file(FILE))`.
    Export(ExportArgs),
    /// Evaluate a run's (or checkpoint's) model on its validation set or another labelled set (--data): loss, accuracy, top-5, and per class its accuracy, precision and what it was taken for.
    Eval(EvalArgs),
    /// What --model takes (the named networks and the layer language), or one model's layers, parameters and FLOPs for an input, with --tensors every tensor by PyTorch's name and shape (what --init reads, export writes).
    Models(ModelsArgs),
    /// Open the terminal UI on a running job over its live socket (default: the newest live run under ./runs): same screens and keys; q offers detach (the run goes on) or stop.
    Attach(AttachArgs),
}

impl Command {
    /// The subcommand as typed.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Bench(_) => "bench",
            Command::Scale(_) => "scale",
            Command::Selftest => "selftest",
            Command::View(_) => "view",
            Command::Runs(_) => "runs",
            Command::Attach(_) => "attach",
            Command::Export(_) => "export",
            Command::Eval(_) => "eval",
            Command::Models(_) => "models",
            Command::MpiAllreduceBench { .. } => "mpi-allreduce-bench",
        }
    }
}

/// A flag that is a switch or a folder (`--tensorboard[=DIR]`) as it was given: `Some(None)`
/// for the flag alone or `=true` (the default folder), `None` for `=false` or no flag.
pub fn switch_or_folder(given: &Option<Option<PathBuf>>) -> Option<Option<PathBuf>> {
    match given {
        Some(Some(d)) if d.as_os_str() == "false" => None,
        Some(Some(d)) if d.as_os_str() == "true" => Some(None),
        d => d.clone(),
    }
}

/// `scale --seconds`: a time budget between 0.05 s and an hour.
fn seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.05..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "`{s}`: use a number of seconds from 0.05 to 3600, such as 2"
        )),
    }
}

/// A decimal flag's parser: the number as Rust reads it, but one past what its type holds
/// (`1e308` for a 32-bit one) refused in the words typed, not taken as infinity.
fn decimal<T: std::str::FromStr + Into<f64> + Copy>(s: &str) -> Result<T, String> {
    let value: T = (s.trim().parse()).map_err(|_| format!("`{s}` is not a number"))?;
    let typed_infinite = s.to_ascii_lowercase().contains("inf");
    match value.into().is_infinite() && !typed_infinite {
        true => Err(format!(
            "{s} is beyond the numbers the flag holds (±{})",
            match std::mem::size_of::<T>() {
                4 => "3.4e38",
                _ => "1.8e308",
            }
        )),
        false => Ok(value),
    }
}

/// A count flag's parser: 1..=most, so 0 (which would measure nothing or divide by zero) and
/// absurd values are refused with the range.
fn at_least_one(most: u64) -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(1..=most)
}

#[derive(Args, Debug)]
pub struct ScaleArgs {
    /// Device counts to measure  [default: 1 up to the number of cores (at least 2)]
    #[arg(long, value_delimiter = ',', action = clap::ArgAction::Set)]
    pub counts: Vec<usize>,
    /// Per-replica batch sizes  [default: --batch-per-replica]
    #[arg(long, value_delimiter = ',', action = clap::ArgAction::Set, value_parser = at_least_one(1 << 20))]
    pub batches: Vec<usize>,
    /// Prefetch settings to compare: on, off, or on,off
    #[arg(long = "prefetch-modes", value_delimiter = ',', action = clap::ArgAction::Set, default_value = "on,off", value_parser = ["on", "off"])]
    pub prefetch_modes: Vec<String>,
    /// Distribution strategies to compare side by side, e.g. mirrored,central-storage,local-sgd:8  [default: --strategy]
    #[arg(long, value_name = "LIST")]
    pub strategies: Option<String>,
    /// Untimed steps before each measurement (0..=100000).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(0..=100_000))]
    pub warmup_steps: u64,
    /// Seconds each measurement is timed for (after the warm-up steps).
    #[arg(long, default_value_t = 2.0, value_parser = seconds)]
    pub seconds: f64,
    /// Runs per point (the median is reported).
    #[arg(long, default_value_t = 3, value_parser = at_least_one(100))]
    pub repeat: usize,
    /// Also write the table to PATH (.csv or .json).
    #[arg(long, value_name = "PATH")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub train: TrainArgs,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Per-replica batch sizes to measure.
    #[arg(long, value_delimiter = ',', action = clap::ArgAction::Set, default_value = "32,128,512", value_parser = at_least_one(1 << 16))]
    pub batches: Vec<usize>,
    /// CPU worker counts to measure.
    #[arg(long, value_delimiter = ',', action = clap::ArgAction::Set, default_value = "1,2", value_parser = at_least_one(256))]
    pub workers: Vec<usize>,
    /// Timed samples per measurement (after a warm-up of a tenth as many); the rebalance part times a fixed 300 steps.
    #[arg(long, default_value_t = 120_000, value_parser = at_least_one(1 << 30))]
    pub samples: usize,
    /// Repeats per point (the median is reported).
    #[arg(long, default_value_t = 3, value_parser = at_least_one(100))]
    pub repeat: usize,
    /// Only one part: training throughput, all-reduce bandwidth, the terminal UI's cost, attached clients' cost (live), --rebalance against a slow rank, 1 process x 2 workers against 2 processes x 1 worker and the MPI all-reduce (processes; needs --features mpi and mpirun), or the GPU benchmarks (kernels, samples/s per GPU count, NCCL bandwidth).
    #[arg(long, value_parser = ["all", "train", "allreduce", "tui", "live", "rebalance", "gpu", "processes"], default_value = "all")]
    pub only: String,
}

/// Training flags. Every one is optional so the config file can fill it in.
#[derive(Args, Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TrainArgs {
    /// Read settings from a TOML file (keys are the flag names, e.g. `batch-per-replica = 64`).
    #[arg(long, value_name = "FILE", action = clap::ArgAction::Append)]
    #[serde(skip)]
    pub config: Vec<PathBuf>,
    /// What to call the run (UI header, metrics file)  [default: <data>-<model>]
    #[arg(help_heading = heading::RUN, long)]
    pub name: Option<String>,
    /// auto | cpu:N | GPU ids such as 0,1,3  [default: auto]
    #[arg(help_heading = heading::RUN, long)]
    pub devices: Option<String>,
    /// A network (resnet20, resnet32, resnet44, resnet56, resnet18, resnet34, resnet50, mobilenetv2[:WIDTH]), mlp:H1,H2,... hidden widths, or layers such as conv32k3,pool2,dense128 or conv16k3p1,bn,basic16,basic32s2,gap (convNkK[sS][pP], poolK[sS][pP], denseN, bn, basicN[sS], gap, ...; mgtop-train models lists them all; softmax cross-entropy)  [default: mlp:128]
    #[arg(help_heading = heading::RUN, long)]
    pub model: Option<String>,
    /// digits | cifar10:DIR | cifar100:DIR[,labels=coarse] | images:DIR (one folder per class of JPEG/PNG files, or DIR/train + DIR/val) | csv:PATH[,label=last|first|N|NAME][,header][,shape=CxHxW] | idx:IMAGES,LABELS[,layout=nchw|nhwc] | synthetic:N,D,C | synthetic-images:N,C,H,W,K (N images of C channels x H x W in K classes)  [default: digits]
    #[arg(help_heading = heading::RUN, long)]
    pub data: Option<String>,
    /// Train this many epochs (of --epochs and --steps, the one given last counts)  [default: 30]
    #[arg(help_heading = heading::RUN, allow_negative_numbers = true, long, overrides_with = "steps")]
    pub epochs: Option<u64>,
    /// Train this many optimizer steps instead of whole epochs (of --steps and --epochs, the one given last counts).
    #[arg(help_heading = heading::RUN, allow_negative_numbers = true, long, overrides_with = "epochs")]
    pub steps: Option<u64>,
    /// Samples per replica per step  [default: 32]
    #[arg(help_heading = heading::RUN, allow_negative_numbers = true, long)]
    pub batch_per_replica: Option<usize>,
    /// Seed for the split, data order and initial weights  [default: 0]
    #[arg(help_heading = heading::RUN, allow_negative_numbers = true, long)]
    pub seed: Option<u64>,
    /// Continue a run: its run directory (newest checkpoint), a checkpoint dir, or a step-NNNNNNNN directory.
    #[arg(help_heading = heading::RUN, long, value_name = "PATH")]
    pub resume: Option<PathBuf>,
    /// The share of the data held out for validation (0: none, the whole set trains); sets with their own validation set (CIFAR's test file, a folder's val/) use it  [default: 0.2]
    #[arg(help_heading = heading::DATA, allow_negative_numbers = true, long, value_name = "F", value_parser = decimal::<f64>)]
    pub val_split: Option<f64>,
    /// A separate validation set, given as --data is (e.g. images:photos-val)
    #[arg(help_heading = heading::DATA, long, value_name = "SPEC")]
    pub val_data: Option<String>,
    /// Also validate every N steps (each epoch's end always validates, as does a --steps run's last step): for epochs too long to wait for
    #[arg(help_heading = heading::DATA, allow_negative_numbers = true, long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub val_every: Option<u64>,
    /// Picture data: resize the shorter side to N and crop N x N (centre crop for validation; with --augment random-resized-crop, validation and eval resize the shorter side to N*8/7 first: 256 for 224, as torchvision's Resize(256) + CenterCrop(224))  [default: the pictures' own size]
    #[arg(help_heading = heading::DATA, allow_negative_numbers = true, long, value_name = "N")]
    pub image_size: Option<usize>,
    /// Picture data, training only: crop:P (pad P pixels, random crop), random-resized-crop, flip, comma-separated (e.g. crop:4,flip)  [default: none]
    #[arg(help_heading = heading::DATA, long, value_name = "LIST")]
    pub augment: Option<String>,
    /// Picture data: per-channel (x/255-mean)/std with imagenet | cifar10 | cifar100 | unit | MEAN,MEAN,MEAN/STD,STD,STD  [default: cifar10/cifar100 for CIFAR, imagenet for folders]
    #[arg(help_heading = heading::DATA, long, value_name = "NAME|MEAN/STD")]
    pub normalize: Option<String>,
    /// cifar10:DIR / cifar100:DIR: fetch the published archive (checked against its MD5, kept in $XDG_CACHE_HOME/mgtop/datasets, else ~/.cache/mgtop/datasets) when DIR lacks the files
    #[arg(help_heading = heading::DATA, long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    pub download: Option<bool>,
    /// Batches prefetched per rank, 0 to build batches on the worker, or auto (4)  [default: auto]
    #[arg(help_heading = heading::DATA, allow_negative_numbers = true, long)]
    #[serde(default, deserialize_with = "number_or_word")]
    pub prefetch: Option<String>,
    /// Loader threads per rank, or auto (1 for data held ready and on CPU workers; for picture sets on GPUs the cores the GPU ranks leave, at most 8 a rank)  [default: auto]
    #[arg(help_heading = heading::DATA, allow_negative_numbers = true, long, value_name = "N|auto")]
    #[serde(default, deserialize_with = "number_or_word")]
    pub loader_threads: Option<String>,
    /// sgd | momentum | nesterov | adam | adamw  [default: adam]
    #[arg(help_heading = heading::OPTIMIZER, long)]
    pub optimizer: Option<String>,
    /// Learning rate  [default: 1e-3 at a global batch of 64, scaled to the run's global batch by --lr-scaling]
    #[arg(help_heading = heading::OPTIMIZER, allow_negative_numbers = true, long, value_parser = decimal::<f64>)]
    pub lr: Option<f64>,
    /// Momentum's coefficient for momentum and nesterov  [default: 0.9]
    #[arg(help_heading = heading::OPTIMIZER, allow_negative_numbers = true, long, value_parser = decimal::<f32>)]
    pub momentum: Option<f32>,
    /// Weight decay (L2 for sgd/momentum/nesterov/adam, decoupled for adamw)  [default: 0]
    #[arg(help_heading = heading::OPTIMIZER, allow_negative_numbers = true, long, value_parser = decimal::<f32>)]
    pub weight_decay: Option<f32>,
    /// Leave batch norm's weights and biases and every bias out of the weight decay (=false turns off a resumed run's)
    #[arg(help_heading = heading::OPTIMIZER, long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    pub no_decay_bn_bias: Option<bool>,
    /// Label smoothing of the cross-entropy loss, in [0, 1) (e.g. 0.1)  [default: 0]
    #[arg(help_heading = heading::OPTIMIZER, allow_negative_numbers = true, long, value_parser = decimal::<f32>)]
    pub label_smoothing: Option<f32>,
    /// Scale the mean gradient down to this L2 norm where it is longer, before the update (PyTorch's clip_grad_norm_, e.g. 1.0); 0 turns it off (a resumed run's too). The norm shows either way  [default: off]
    #[arg(help_heading = heading::OPTIMIZER, allow_negative_numbers = true, long, value_name = "MAX", value_parser = decimal::<f64>)]
    pub clip_grad_norm: Option<f64>,
    /// Linear LR warm-up over this many steps  [default: 0]
    #[arg(help_heading = heading::OPTIMIZER, allow_negative_numbers = true, long)]
    pub warmup: Option<u64>,
    /// constant | cosine (to 0, after the warm-up) | step (x0.1 at 50% and 75% of the run) | multistep:F1,F2,... (x0.1 at each fraction of the run)  [default: constant]
    #[arg(help_heading = heading::OPTIMIZER, long)]
    pub schedule: Option<String>,
    /// How the LR follows the global batch (at the start and on a batch-size change): linear | sqrt | none  [default: sqrt with adam/adamw, linear with sgd/momentum/nesterov]
    #[arg(help_heading = heading::OPTIMIZER, long)]
    pub lr_scaling: Option<String>,
    /// Micro-batches accumulated per optimizer step (one all-reduce)  [default: 1]
    #[arg(help_heading = heading::OPTIMIZER, allow_negative_numbers = true, long)]
    pub grad_accum: Option<usize>,
    /// Start from the weights in this safetensors file, by PyTorch's names (e.g. torchvision's; a classifier head for another class count is re-initialised)
    #[arg(help_heading = heading::WEIGHTS, long, value_name = "FILE")]
    pub init: Option<PathBuf>,
    /// Let --init load a file that gives only some of this model's layers (another depth or layer list, as PyTorch's strict=False): the rest start at random, the file's others are ignored
    #[arg(help_heading = heading::WEIGHTS, long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    pub init_partial: Option<bool>,
    /// Leave these parameters as they are: backbone (all but the classifier head; backward then runs through the head alone) or name prefixes, e.g. layer1,layer2 (whole name parts: conv.1 is not conv.10); none trains everything (over a resumed checkpoint's)
    #[arg(help_heading = heading::WEIGHTS, long, value_name = "backbone|PREFIXES|none")]
    pub freeze: Option<String>,
    /// Which statistics batch norm normalises by in training: batch (the batch's, the running ones moved toward them: PyTorch's train mode), running (its running statistics, left as they are: PyTorch's eval mode for batch norm, Keras's training=False; for fine-tuning from --init at small batches), frozen (running where --freeze leaves the batch norm, batch elsewhere: PyTorch's backbone.eval())  [default: batch]
    #[arg(help_heading = heading::WEIGHTS, long, value_name = "batch|running|frozen")]
    pub bn_stats: Option<String>,
    /// When the run ends, also write its weights to this safetensors file by PyTorch's names (as `mgtop-train export` does)
    #[arg(help_heading = heading::WEIGHTS, long, value_name = "FILE")]
    pub export: Option<PathBuf>,
    /// How ranks share what they learn: mirrored (all-reduce gradients every step) | central-storage (one copy of the parameters and optimizer state on the host; devices get parameters and send gradients each step) | local-sgd:H[,moments] (each rank takes H steps alone, then the ranks average parameters [and optimizer moments])  [default: mirrored]
    #[arg(help_heading = heading::PARALLEL, long, value_name = "NAME")]
    pub strategy: Option<String>,
    /// local-sgd: synchronous (mirrored) steps before the ranks start stepping alone  [default: 100]
    #[arg(help_heading = heading::PARALLEL, allow_negative_numbers = true, long, value_name = "STEPS")]
    pub local_sgd_warmup: Option<u64>,
    /// Batch norm over the global batch: each batch norm's statistics summed across the replicas (so N ranks train as 1 rank with the global batch), instead of each replica normalising over its own batch (PyTorch DDP's and TF MirroredStrategy's default; =false turns off a resumed run's).
    #[arg(help_heading = heading::PARALLEL, long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    pub sync_bn: Option<bool>,
    /// Cut the global batch among ranks in proportion to their measured speed (re-decided every 50 steps; the result stays that of the global batch; =false turns off a resumed run's).
    #[arg(help_heading = heading::PARALLEL, long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    pub rebalance: Option<bool>,
    /// First train one device alone on the same workload (20 steps, or a pass over pictures decoded on first use, then 100 steps and 1 s timed, 10 s at most), then show the run's speedup and scaling efficiency against it.
    #[arg(help_heading = heading::PARALLEL, long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    pub calibrate: Option<bool>,
    /// Threads per CPU worker for its matrix products, or auto (cores / workers)  [default: auto]
    #[arg(help_heading = heading::PARALLEL, allow_negative_numbers = true, long, value_name = "N|auto")]
    #[serde(default, deserialize_with = "number_or_word")]
    pub threads_per_worker: Option<String>,
    /// Warn when no step completes for this many seconds; on GPUs, abort an NCCL all-reduce that takes longer  [default: 60]
    #[arg(help_heading = heading::PARALLEL, allow_negative_numbers = true, long, value_name = "SECONDS", value_parser = decimal::<f64>)]
    pub stall_timeout: Option<f64>,
    /// What GPUs compute in: auto | fp32 | tf32 | bf16 (bf16: autocast, bf16 activations and products with fp32 accumulation, Ampere and newer; auto, on Ampere and newer: bf16 for models of dense convolutions on images of 112x112 or more where cuDNN loads, TF32 for the rest; CPU workers are always fp32)  [default: auto]
    #[arg(help_heading = heading::GPUS, long)]
    pub precision: Option<String>,
    /// What the GPUs' gradient all-reduce carries: fp32 | bf16 (half the bytes between GPUs and machines; each rank's sums rounded to bf16; the optimizer still reads fp32 gradients)  [default: fp32]
    #[arg(help_heading = heading::GPUS, long)]
    pub grad_dtype: Option<String>,
    /// Capture each GPU training pass once as a CUDA graph and replay it: auto | on | off (auto: wherever a pass can be one; not with --sync-bn)  [default: auto]
    #[arg(help_heading = heading::GPUS, long)]
    pub cuda_graph: Option<String>,
    /// The run's directory: metrics.jsonl, checkpoints/ and the live socket  [default: runs/<name>/<YYYYmmdd-HHMMSS>]
    #[arg(help_heading = heading::OUTPUT, long, value_name = "DIR")]
    pub run_dir: Option<PathBuf>,
    /// Where checkpoints go  [default: <run dir>/checkpoints]
    #[arg(help_heading = heading::OUTPUT, long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Also checkpoint every N steps (one is always written at the end and on a stop: Ctrl-C, a signal, the UI's q then s).
    #[arg(help_heading = heading::OUTPUT, allow_negative_numbers = true, long)]
    pub checkpoint_every: Option<u64>,
    /// Keep only the newest N checkpoints this run writes: each older one it wrote is removed once a newer one is in place (the checkpoint a run resumed from is never removed)  [default: all]
    #[arg(help_heading = heading::OUTPUT, allow_negative_numbers = true, long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub keep_checkpoints: Option<u64>,
    /// Also keep the checkpoint of the best validation accuracy so far in <checkpoint dir>/best, replaced when a validation beats it (=false turns off a resumed run's)
    #[arg(help_heading = heading::OUTPUT, long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    pub checkpoint_best: Option<bool>,
    /// Write JSON Lines metrics (schema mgtop.metrics/1) to this file.
    #[arg(help_heading = heading::OUTPUT, long, value_name = "PATH")]
    pub metrics_out: Option<PathBuf>,
    /// Print (and record) a step line every N steps; auto: every 50th, or every 100th, 200th, 500th, 1000th... where those come faster than ten a second, or every 20th, 10th, 5th... where 50 take longer than ten seconds (and epochs' ends past the first 100 likewise, every new best kept). The replicas are compared every N steps (50 for auto): a small N costs time on several ranks  [default: auto]
    #[arg(help_heading = heading::OUTPUT, allow_negative_numbers = true, long, value_name = "N|auto")]
    #[serde(default, deserialize_with = "number_or_word")]
    pub log_every: Option<String>,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics: GPUs under dcgm-exporter's names, training under mgtop_ names (PORT alone listens on 127.0.0.1; =false serves none, over a config file's)
    #[arg(help_heading = heading::OUTPUT, allow_negative_numbers = true, long, value_name = "[ADDR:]PORT")]
    #[serde(default, deserialize_with = "port_or_address")]
    pub prometheus: Option<String>,
    /// Write TensorBoard scalars (loss, validation, lr, samples/s, step-time split, device utilization) under DIR, in DIR/<name>/<run dir's name> (so one DIR keeps a sweep's runs apart; =false writes none, over a config file's)  [default: off; <run dir>/tensorboard when given without DIR]
    #[arg(help_heading = heading::OUTPUT, long, value_name = "DIR", num_args = 0..=1)]
    #[serde(default, deserialize_with = "flag_or_path")]
    pub tensorboard: Option<Option<PathBuf>>,
    /// Print log lines instead of the terminal UI.
    #[arg(help_heading = heading::UI, long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    pub headless: Option<bool>,
    /// Terminal UI colours: dark | light | mono | PATH of a theme file  [default: dark; mono under NO_COLOR or a TERM without colours]
    #[arg(help_heading = heading::UI, long, value_name = "NAME|PATH")]
    pub theme: Option<String>,
    /// Terminal UI: disable the keys that change the run (for shared tmux sessions).
    #[arg(help_heading = heading::UI, long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    pub readonly: Option<bool>,
    /// Terminal UI: exit when training ends instead of showing the summary until q.
    #[arg(help_heading = heading::UI, long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    pub exit_when_done: Option<bool>,
    /// Seconds between device telemetry samples  [default: 1]
    #[arg(help_heading = heading::UI, allow_negative_numbers = true, long, value_name = "SECONDS", value_parser = decimal::<f64>)]
    pub sample_interval: Option<f64>,
    /// Demo / test fault: RANK:FACTOR makes that rank's compute FACTOR times slower (e.g. 1:2.0).
    #[arg(help_heading = heading::FAULTS, long, value_name = "RANK:FACTOR")]
    pub slow_rank: Option<String>,
    /// Demo / test fault: RANK:MS delays each of that rank's batches by MS milliseconds.
    #[arg(help_heading = heading::FAULTS, long, value_name = "RANK:MS")]
    pub slow_data: Option<String>,
    /// Fault injection for tests: RANK:STEP panics that rank's worker at that step.
    #[arg(long, hide = true)]
    #[serde(skip)]
    pub inject_panic: Option<String>,
    /// Fault injection for tests: a process on another machine than process 0's sends made-up
    /// samples of its ranks (this temperature, nothing else) for process 0, as if read there.
    #[arg(long, hide = true, value_name = "TEMP_C")]
    #[serde(skip)]
    pub inject_peer_sample: Option<f32>,
}

#[cfg(test)]
mod resume_tests;
#[cfg(test)]
mod tests;

/// A setting that is a count or a word (`prefetch = 4` or `prefetch = "auto"`), as its flag's text.
fn number_or_word<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    number_or_text(d, "takes a whole number or \"auto\", e.g. 4 or \"auto\"")
}

/// `prometheus = 9502`, `prometheus = "0.0.0.0:9502"` or `prometheus = false` (none, over
/// nothing: as `--prometheus=false`), as the flag's text.
fn port_or_address<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Served {
        Port(u64),
        Address(String),
        Switch(bool),
    }
    const EXPECTED: &str =
        "`prometheus` takes a port, \"ADDR:PORT\" or false, e.g. 9502 or \"0.0.0.0:9502\"";
    match Served::deserialize(d).map_err(|_| serde::de::Error::custom(EXPECTED))? {
        Served::Port(n) => Ok(Some(n.to_string())),
        Served::Address(a) => Ok(Some(a)),
        Served::Switch(false) => Ok(Some("false".into())),
        Served::Switch(true) => Err(serde::de::Error::custom(format!(
            "`prometheus = true` names no port: {EXPECTED}"
        ))),
    }
}

/// A whole number or text, as a flag's text; `expected` says which where it is neither.
fn number_or_text<'de, D: serde::Deserializer<'de>>(
    d: D,
    expected: &str,
) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumberOrWord {
        Number(u64),
        Word(String),
    }
    let v = NumberOrWord::deserialize(d).map_err(|_| serde::de::Error::custom(expected))?;
    Ok(Some(match v {
        NumberOrWord::Number(n) => n.to_string(),
        NumberOrWord::Word(w) => w,
    }))
}

/// A config-file key that is a switch or a path: `true` (the default place, as the flag
/// without a value), `false` (off) or `"DIR"`.
fn flag_or_path<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<PathBuf>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum FlagOrPath {
        Flag(bool),
        Path(PathBuf),
    }
    let v = FlagOrPath::deserialize(d).map_err(|_| {
        serde::de::Error::custom(
            "`tensorboard` takes true, false or a directory, e.g. tensorboard = \"tb\"",
        )
    })?;
    Ok(match v {
        FlagOrPath::Flag(true) => Some(None),
        FlagOrPath::Flag(false) => None,
        FlagOrPath::Path(p) if p.as_os_str().is_empty() => Some(None),
        FlagOrPath::Path(p) => Some(Some(p)),
    })
}
