//! A fully resolved training run: what the CLI and config file turn into, what the engine takes.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

pub mod cuda_graph;
mod freeze;
pub mod log_every;
pub mod record;
pub mod strategy;

pub use freeze::{BnStats, Freeze};

use crate::data::DataSpec;
use crate::nn::model::ModelSpec;
use crate::nn::optim::OptimizerKind;
use crate::nn::precision::PrecisionFlag;
use crate::nn::schedule::{LrScaling, Schedule};

/// `--devices`: which devices train.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceSpec {
    /// Every GPU found, else one CPU worker per core (at least 2).
    Auto,
    Cpu(usize),
    Gpus(Vec<usize>),
}

impl DeviceSpec {
    /// How many devices it names (`None`: `auto`, as many as are found).
    pub fn named(&self) -> Option<usize> {
        match self {
            DeviceSpec::Auto => None,
            DeviceSpec::Cpu(n) => Some(*n),
            DeviceSpec::Gpus(ids) => Some(ids.len()),
        }
    }
}

impl FromStr for DeviceSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let help = "use auto, cpu:N (N CPU workers) or GPU ids like 0,1,3";
        // (spaces about it and capitals are no part of it: AUTO, CPU:2 from a config file)
        let lower = s.trim().to_ascii_lowercase();
        let s = lower.as_str();
        if s == "auto" {
            return Ok(DeviceSpec::Auto);
        }
        if let Some(n) = s.strip_prefix("cpu:") {
            return match n.trim().parse::<usize>() {
                Ok(n) if (1..=256).contains(&n) => Ok(DeviceSpec::Cpu(n)),
                Ok(_) => Err(format!(
                    "devices `{s}`: the CPU worker count must be 1 to 256; {help}"
                )),
                Err(_) => Err(format!(
                    "devices `{s}`: `{n}` is not a number of CPU workers (1 to 256), e.g. cpu:2; {help}"
                )),
            };
        }
        if s == "cpu" {
            return Err(format!(
                "devices `cpu`: say how many workers, e.g. cpu:2; {help}"
            ));
        }
        let ids: Result<Vec<usize>, _> = s.split(',').map(|p| p.trim().parse::<usize>()).collect();
        match ids {
            Ok(mut ids) if !ids.is_empty() => {
                ids.sort_unstable();
                if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
                    return Err(format!(
                        "devices `{s}`: GPU {} is listed twice; list each GPU once (one rank each), e.g. 0,1",
                        w[0]
                    ));
                }
                Ok(DeviceSpec::Gpus(ids))
            }
            _ => Err(format!("unknown devices `{s}`: {help}")),
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Auto => f.write_str("auto"),
            DeviceSpec::Cpu(n) => write!(f, "cpu:{n}"),
            DeviceSpec::Gpus(ids) => f.write_str(
                &ids.iter()
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        }
    }
}

/// How long to train: whole epochs, or a number of optimizer steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    Epochs(u64),
    Steps(u64),
}

pub const DEFAULT_LR: f32 = 1e-3;
pub const DEFAULT_LR_BATCH: usize = 64;

/// The samples a step takes (the global batch the LR follows): every rank's batch of every
/// accumulated pass, or the whole training split where that is fewer (a batch cut to a small
/// split rounds up, its last shares taking fewer; `train_samples` 0: not known).
pub fn step_samples(per_replica: usize, ranks: usize, accum: usize, train_samples: usize) -> usize {
    let all = per_replica * ranks * accum;
    match train_samples {
        0 => all,
        n => all.min(n),
    }
}

/// The longest `--name` (in characters); a metrics file's longer one is read cut to it.
pub const MAX_NAME_CHARS: usize = 200;

impl RunConfig {
    /// Momentum's coefficient: the one given, else the default (0.9).
    pub fn momentum(&self) -> f32 {
        self.momentum.unwrap_or(crate::nn::optim::MOMENTUM)
    }

    /// What the run is called: `--name`, else `<data>-<model>` (without what would drive a
    /// terminal, an escape in the data's path: `--name` refuses it).
    pub fn run_name(&self) -> String {
        self.name.clone().unwrap_or_else(|| {
            let data = self.data.short_name();
            let data: String = (data.chars())
                .filter(|&c| !crate::text::unprintable(c))
                .collect();
            format!("{data}-{}", self.model)
        })
    }

    /// The LR a fresh run starts with at global batch `global`.
    pub fn start_lr(&self, global: usize) -> f32 {
        self.lr.unwrap_or_else(|| {
            self.lr_scaling()
                .rescale(DEFAULT_LR, DEFAULT_LR_BATCH, global)
        })
    }

    /// How the LR follows the global batch: `--lr-scaling`, else the optimizer's rule.
    pub fn lr_scaling(&self) -> LrScaling {
        (self.lr_scaling).unwrap_or(LrScaling::for_optimizer(self.optimizer))
    }
}

/// Every setting of a run, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct RunConfig {
    /// What the run is called in the UI and the metrics file; `None`: `<data>-<model>`.
    pub name: Option<String>,
    pub devices: DeviceSpec,
    pub model: ModelSpec,
    pub data: DataSpec,
    pub budget: Budget,
    pub batch_per_replica: usize,
    /// Where the batch per replica came from, where not the default: a resumed run then trains
    /// at it (cut to its training split as a fresh run's), not at its checkpoint's.
    pub batch_from: Option<BatchFrom>,
    /// The batch per replica asked for and what the training split cut it to, where it did
    /// (`engine::validate::batch_within_data`): recorded, so a run resumed on more data asks
    /// for the batch again rather than keep the cut one.
    pub batch_cut: Option<[usize; 2]>,
    /// The same for `--grad-accum`: a run resumed on more data accumulates as it asked again.
    pub grad_accum_cut: Option<[usize; 2]>,
    /// Learning rate; `None`: `DEFAULT_LR` at a global batch of `DEFAULT_LR_BATCH`, scaled to
    /// the run's global batch by `lr_scaling()` (so the defaults train well on any core count).
    pub lr: Option<f32>,
    pub optimizer: OptimizerKind,
    pub weight_decay: f32,
    pub warmup: u64,
    pub schedule: Schedule,
    /// `--lr-scaling`; `None`: the optimizer's rule (see `lr_scaling()`).
    pub lr_scaling: Option<LrScaling>,
    pub grad_accum: usize,
    /// Batches queued ahead per rank; 0 builds batches on the worker thread.
    pub prefetch: usize,
    /// Loader threads per rank; `None`: enough to keep the devices fed (`loader::threads_for`).
    pub loader_threads: Option<usize>,
    /// Intra-op threads per CPU worker; None: the cores divided among the workers.
    pub threads_per_worker: Option<usize>,
    pub seed: u64,
    pub log_every: log_every::LogEvery,
    /// Which samples validate and how pictures become samples (`--val-split`, `--val-data`,
    /// `--image-size`, `--augment`, `--normalize`).
    pub inputs: crate::data::DataOptions,
    /// How the loaded data's samples were made (set once it has loaded), for the checkpoints.
    pub recipe: crate::data::InputRecipe,
    pub metrics_out: Option<PathBuf>,
    /// The run's directory (metrics, checkpoints, live socket); created when the engine starts.
    /// None for runs that keep nothing (`scale`, `bench`, `--calibrate`).
    pub run_dir: Option<PathBuf>,
    /// The run directory the line of runs this one continues began in, written into each of
    /// its checkpoints: the resumed checkpoint's line (`CheckpointMeta::line`), or for a fresh
    /// run its own `run_dir`. Set when the engine starts (None for runs that keep nothing).
    pub origin: Option<String>,
    /// The `--init` file the line of runs this one continues began from (absolute), written
    /// into its checkpoints' records and exports: this run's `--init`, or the resumed
    /// checkpoint's record of it. Set when the engine starts.
    pub line_init: Option<String>,
    /// Point `runs/<name>/latest` at `run_dir` (a default one).
    pub link_latest: bool,
    pub checkpoint_dir: PathBuf,
    /// Also checkpoint every N steps.
    pub checkpoint_every: Option<u64>,
    /// Keep the checkpoint of the best validation accuracy in `<checkpoint_dir>/best`
    /// (`--checkpoint-best`).
    pub checkpoint_best: bool,
    /// Keep the newest N checkpoints this run writes, removing the older ones it wrote.
    pub keep_checkpoints: Option<u64>,
    /// Write a checkpoint when the run completes.
    pub final_checkpoint: bool,
    pub resume: Option<PathBuf>,
    /// Start from these weights, by name (`--init`, safetensors).
    pub init: Option<PathBuf>,
    /// `--init` may give only some of the model's tensors (`--init-partial`).
    pub init_partial: bool,
    /// Parameters training leaves as they are (`--freeze`).
    pub freeze: Option<Freeze>,
    /// Fault injection for tests and demos: (rank, step) panics at that step.
    pub inject_panic: Option<(usize, u64)>,
    /// Fault injection for tests: (rank, step) nudges one of that rank's parameters after
    /// that step's update (the replica check must catch it).
    pub inject_desync: Option<(usize, u64)>,
    /// Fault injection: this rank's compute takes FACTOR times as long (`--slow-rank`).
    pub slow_rank: Option<(usize, f64)>,
    /// Fault injection: this rank waits this long more for each batch (`--slow-data`).
    pub slow_data: Option<(usize, Duration)>,
    /// Measure one device on the same workload first, to show speedup and efficiency.
    pub calibrate: bool,
    /// Cut the global batch among ranks in proportion to their measured speed.
    pub rebalance: bool,
    /// Batch norm's statistics over the global batch (`--sync-bn`).
    pub sync_bn: bool,
    /// Which statistics batch norm normalises by in training (`--bn-stats`).
    pub bn_stats: BnStats,
    /// Momentum's coefficient (`--momentum`, for momentum and nesterov) where one is given: by a
    /// flag, the config file, or the record of a resumed run whose optimizer has one (None: the
    /// default, `momentum()`).
    pub momentum: Option<f32>,
    /// Weight decay leaves batch norm's parameters and biases alone (`--no-decay-bn-bias`).
    pub no_decay_bn_bias: bool,
    /// The loss's label smoothing (`--label-smoothing`).
    pub label_smoothing: f32,
    /// The mean gradient's L2 norm bound (`--clip-grad-norm`; None: not clipped).
    pub clip_grad_norm: Option<f32>,
    /// What GPUs compute their products in (`--precision`; auto: TF32 where every GPU has it).
    pub precision: PrecisionFlag,
    /// What the GPUs' gradient all-reduce carries (`--grad-dtype`).
    pub grad_dtype: crate::nn::precision::GradDtype,
    /// Whether GPUs replay each training pass from a CUDA graph (`--cuda-graph`).
    pub cuda_graph: cuda_graph::CudaGraph,
    /// Whether a step's metrics are read one step late, so that the host never waits for the
    /// device inside a step (`MGTOP_METRICS_LATE`; None: each device's own choice, GPUs late).
    pub metrics_late: Option<bool>,
    /// Warn when no step completes for this long (`--stall-timeout`).
    pub stall_timeout: Duration,
    /// How ranks share what they learn (`--strategy`).
    pub strategy: strategy::Strategy,
    /// Validate at every epoch end (`scale` measures without, and validates the final model).
    pub epoch_validation: bool,
    /// Also validate every this many steps, within epochs (`--val-every`; never without
    /// `epoch_validation`).
    pub val_every: Option<u64>,
}

/// `MGTOP_METRICS_LATE` (`RunConfig::metrics_late`): unset or empty for each device's own
/// choice, `1` to read every step's metrics one step late, `0` to read them at its end.
pub fn metrics_late(value: Option<&str>) -> Result<Option<bool>, String> {
    match value.map(str::trim) {
        None | Some("") => Ok(None),
        Some("1") => Ok(Some(true)),
        Some("0") => Ok(Some(false)),
        Some(v) => Err(format!(
            "MGTOP_METRICS_LATE={v}: expected 1 (read each step's metrics one step late, the GPUs' default) or 0 (at the end of the step), or leave it unset"
        )),
    }
}

/// Where a run's batch per replica came from, where not the default.
#[derive(Clone, Debug, PartialEq)]
pub enum BatchFrom {
    /// `--batch-per-replica`, or the config file's line (as `Origins::given` says it).
    Given(String),
    /// A resumed single-process run's: the batch its checkpoint's run `asked` for, which that
    /// run's training split cut to the checkpoint's `cut_to` (`engine::validate`'s cut).
    AskedAgain { asked: usize, cut_to: usize },
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            name: None,
            devices: DeviceSpec::Auto,
            model: ModelSpec::default(),
            data: DataSpec::Digits,
            budget: Budget::Epochs(30),
            batch_per_replica: 32,
            batch_from: None,
            batch_cut: None,
            grad_accum_cut: None,
            lr: None,
            optimizer: OptimizerKind::Adam,
            weight_decay: 0.0,
            warmup: 0,
            schedule: Schedule::Constant,
            lr_scaling: None,
            grad_accum: 1,
            prefetch: 4,
            loader_threads: None,
            threads_per_worker: None,
            seed: 0,
            log_every: log_every::LogEvery::Auto,
            inputs: Default::default(),
            recipe: Default::default(),
            metrics_out: None,
            run_dir: None,
            origin: None,
            line_init: None,
            link_latest: false,
            checkpoint_dir: PathBuf::from("checkpoints"),
            checkpoint_every: None,
            checkpoint_best: false,
            keep_checkpoints: None,
            final_checkpoint: true,
            resume: None,
            init: None,
            init_partial: false,
            freeze: None,
            inject_panic: None,
            inject_desync: None,
            slow_rank: None,
            slow_data: None,
            rebalance: false,
            sync_bn: false,
            bn_stats: BnStats::Batch,
            momentum: None,
            no_decay_bn_bias: false,
            label_smoothing: 0.0,
            clip_grad_norm: None,
            precision: PrecisionFlag::default(),
            cuda_graph: Default::default(),
            grad_dtype: Default::default(),
            metrics_late: None,
            calibrate: false,
            stall_timeout: Duration::from_secs(60),
            strategy: Default::default(),
            epoch_validation: true,
            val_every: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_late_takes_0_1_or_nothing_and_names_the_variable_otherwise() {
        assert_eq!(metrics_late(None), Ok(None));
        assert_eq!(metrics_late(Some(" ")), Ok(None));
        assert_eq!(metrics_late(Some("1")), Ok(Some(true)));
        assert_eq!(metrics_late(Some("0")), Ok(Some(false)));
        let e = metrics_late(Some("yes")).unwrap_err();
        assert!(
            e.contains("MGTOP_METRICS_LATE=yes") && e.contains("expected 1"),
            "{e}"
        );
    }

    #[test]
    fn the_default_lr_follows_the_global_batch_and_a_given_lr_does_not() {
        // Adam, the default optimizer: square-root scaling
        let d = RunConfig::default();
        assert!((d.start_lr(64) - 1e-3).abs() < 1e-9);
        assert!((d.start_lr(256) - 2e-3).abs() < 1e-9);
        let linear = RunConfig {
            lr_scaling: Some(LrScaling::Linear),
            ..RunConfig::default()
        };
        assert!((linear.start_lr(512) - 8e-3).abs() < 1e-9);
        let given = RunConfig {
            lr: Some(0.05),
            ..RunConfig::default()
        };
        assert_eq!(given.start_lr(512), 0.05);
    }

    #[test]
    fn parses_devices() {
        assert_eq!("auto".parse::<DeviceSpec>().unwrap(), DeviceSpec::Auto);
        assert_eq!("cpu:3".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cpu(3));
        assert_eq!(
            "3,0,1".parse::<DeviceSpec>().unwrap(),
            DeviceSpec::Gpus(vec![0, 1, 3])
        );
        assert!("cpu:0"
            .parse::<DeviceSpec>()
            .unwrap_err()
            .contains("1 to 256"));
        assert!("gpu".parse::<DeviceSpec>().unwrap_err().contains("cpu:N"));
        let e = "1,0,1".parse::<DeviceSpec>().unwrap_err();
        assert!(
            e.contains("GPU 1 is listed twice; list each GPU once"),
            "{e}"
        );
        // capitals and spaces about it, as a config file or a shell may give them
        assert_eq!(" AUTO ".parse::<DeviceSpec>().unwrap(), DeviceSpec::Auto);
        assert_eq!("CPU:2 ".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cpu(2));
        assert_eq!("0,2".parse::<DeviceSpec>().unwrap().named(), Some(2));
        assert_eq!(DeviceSpec::Auto.named(), None);
        let e = "cpu:x".parse::<DeviceSpec>().unwrap_err();
        assert!(e.contains("`x` is not a number of CPU workers"), "{e}");
    }
}
