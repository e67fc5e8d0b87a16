//! Command line and `--config` TOML file → `RunConfig`. Flags override the file; the file
//! overrides the defaults. Every value is checked by the same parser either way.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use serde::Deserialize;

use crate::config::{Budget, RunConfig};
use crate::data::read::{self, Expect, ReadError};

const EXAMPLES: &str = "\
Examples:
  mgtop-train                                  train the MLP 64-128-10 on the embedded digits data, live in the terminal UI
  mgtop-train --headless                       the same run as log lines
  mgtop-train --data synthetic:60000,784,10 --model mlp:1024 --batch-per-replica 128 --epochs 60
                                               a run to watch (~1.5 min on 2 cores; keys: p pause, ]/[ batch, s checkpoint, ? help)
  mgtop-train --headless --devices cpu:4 --epochs 5 --batch-per-replica 64
  mgtop-train --headless --data csv:iris.csv,label=last,header --model mlp:16
  mgtop-train --headless --data idx:train-images-idx3-ubyte.gz,train-labels-idx1-ubyte.gz --model mlp:256,128
  mgtop-train --headless --config run.toml --lr 3e-4     (flags override the file)
  mgtop-train --headless --resume checkpoints            (continue from the newest checkpoint)
  mgtop-train --devices cpu:2 --data synthetic:60000,784,10 --model mlp:1024 --batch-per-replica 128 --steps 10000 --slow-rank 1:2.0 --rebalance
                                               (watch rank 1 found as a straggler at step ~50, rebalanced from step 51, cleared at ~100)
  mgtop-train --headless --metrics-out run.jsonl && mgtop-train view run.jsonl
                                               (the UI over a finished or still running run's metrics file; --headless: its summary)
  mgtop-train scale --counts 1,2 --batches 32,128 --out scale.csv   (scaling report)
  mgtop-train selftest                                 (every GPU op, training step and all-reduce vs the CPU)
  mgtop-train bench                                    (throughput, all-reduce, UI cost, rebalancing)";

#[derive(Parser, Debug)]
#[command(name = "mgtop-train", version, about = "Data-parallel training with a live view of every device", after_help = EXAMPLES)]
#[command(args_conflicts_with_subcommands = true)]
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
}

#[derive(Args, Debug)]
pub struct ViewArgs {
    /// A metrics file (--metrics-out), or a run directory holding metrics.jsonl.
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
    /// Print the run's summary lines instead of the terminal UI (also what a non-terminal stdout gets).
    #[arg(long)]
    pub headless: bool,
    /// Terminal UI colours: dark | light | mono | PATH of a theme file  [default: dark; mono when NO_COLOR is set]
    #[arg(long, value_name = "NAME|PATH")]
    pub theme: Option<String>,
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

/// A count flag's parser: 1..=most, so 0 (which would measure nothing or divide by zero) and
/// absurd values are refused with the range.
fn at_least_one(most: u64) -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(1..=most)
}

#[derive(Args, Debug)]
pub struct ScaleArgs {
    /// Device counts to measure  [default: 1 up to the number of cores (at least 2)]
    #[arg(long, value_delimiter = ',')]
    pub counts: Vec<usize>,
    /// Per-replica batch sizes  [default: --batch-per-replica]
    #[arg(long, value_delimiter = ',', value_parser = at_least_one(1 << 20))]
    pub batches: Vec<usize>,
    /// Prefetch settings to compare: on, off, or on,off
    #[arg(long = "prefetch-modes", value_delimiter = ',', default_value = "on,off", value_parser = ["on", "off"])]
    pub prefetch_modes: Vec<String>,
    /// Untimed steps before each measurement.
    #[arg(long, default_value_t = 20)]
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
    #[arg(long, value_delimiter = ',', default_value = "32,128,512", value_parser = at_least_one(1 << 16))]
    pub batches: Vec<usize>,
    /// CPU worker counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,2", value_parser = at_least_one(256))]
    pub workers: Vec<usize>,
    /// Timed samples per measurement (after a warm-up of a tenth as many).
    #[arg(long, default_value_t = 120_000, value_parser = at_least_one(1 << 30))]
    pub samples: usize,
    /// Repeats per point (the median is reported).
    #[arg(long, default_value_t = 3, value_parser = at_least_one(100))]
    pub repeat: usize,
    /// Only one part: training throughput, all-reduce bandwidth, the terminal UI's cost, --rebalance against a slow rank, or the GPU benchmarks (kernels, samples/s per GPU count, NCCL bandwidth).
    #[arg(long, value_parser = ["all", "train", "allreduce", "tui", "rebalance", "gpu"], default_value = "all")]
    pub only: String,
}

/// Training flags. Every one is optional so the config file can fill it in.
#[derive(Args, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TrainArgs {
    /// Read settings from a TOML file (keys are the flag names, e.g. `batch-per-replica = 64`).
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Print log lines instead of the terminal UI.
    #[arg(long)]
    #[serde(default)]
    pub headless: bool,
    /// Terminal UI colours: dark | light | mono | PATH of a theme file  [default: dark; mono when NO_COLOR is set]
    #[arg(long, value_name = "NAME|PATH")]
    pub theme: Option<String>,
    /// Terminal UI: disable the keys that change the run (for shared tmux sessions).
    #[arg(long)]
    #[serde(default)]
    pub readonly: bool,
    /// Terminal UI: exit when training ends instead of showing the summary until q.
    #[arg(long)]
    #[serde(default)]
    pub exit_when_done: bool,
    /// Seconds between device telemetry samples  [default: 1]
    #[arg(long, value_name = "SECONDS")]
    pub sample_interval: Option<f64>,
    /// What to call the run (UI header, metrics file)  [default: <data>-<model>]
    #[arg(long)]
    pub name: Option<String>,
    /// auto | cpu:N | GPU ids such as 0,1,3  [default: auto]
    #[arg(long)]
    pub devices: Option<String>,
    /// mlp:H1,H2,... hidden widths (ReLU; softmax cross-entropy)  [default: mlp:128]
    #[arg(long)]
    pub model: Option<String>,
    /// digits | csv:PATH[,label=last|first|N][,header] | idx:IMAGES,LABELS | synthetic:N,D,C  [default: digits]
    #[arg(long)]
    pub data: Option<String>,
    /// Train this many epochs  [default: 30]
    #[arg(long, conflicts_with = "steps")]
    pub epochs: Option<u64>,
    /// Train this many optimizer steps instead of whole epochs.
    #[arg(long)]
    pub steps: Option<u64>,
    /// Samples per replica per step  [default: 32]
    #[arg(long)]
    pub batch_per_replica: Option<usize>,
    /// Learning rate  [default: 1e-3 per 64 samples of global batch, scaled to the run's global batch by --lr-scaling]
    #[arg(long)]
    pub lr: Option<f32>,
    /// sgd | momentum | adam | adamw  [default: adam]
    #[arg(long)]
    pub optimizer: Option<String>,
    /// Weight decay (L2 for sgd/momentum/adam, decoupled for adamw)  [default: 0]
    #[arg(long)]
    pub weight_decay: Option<f32>,
    /// Linear LR warm-up over this many steps  [default: 0]
    #[arg(long)]
    pub warmup: Option<u64>,
    /// constant | cosine | step  [default: constant]
    #[arg(long)]
    pub schedule: Option<String>,
    /// How the LR follows a batch-size change: linear | sqrt | none  [default: linear]
    #[arg(long)]
    pub lr_scaling: Option<String>,
    /// Micro-batches accumulated per optimizer step (one all-reduce)  [default: 1]
    #[arg(long)]
    pub grad_accum: Option<usize>,
    /// Batches prefetched per rank, 0 to build batches on the worker, or auto (4)  [default: auto]
    #[arg(long)]
    pub prefetch: Option<String>,
    /// Loader threads per rank  [default: 1]
    #[arg(long)]
    pub loader_threads: Option<usize>,
    /// Threads per CPU worker for its matrix products, or auto (cores / workers)  [default: auto]
    #[arg(long, value_name = "N|auto")]
    pub threads_per_worker: Option<String>,
    /// Seed for the split, data order and initial weights  [default: 0]
    #[arg(long)]
    pub seed: Option<u64>,
    /// Print (and record) a step line every N steps  [default: 50]
    #[arg(long)]
    pub log_every: Option<u64>,
    /// Write JSON Lines metrics (schema mgtop.metrics/1) to this file.
    #[arg(long, value_name = "PATH")]
    pub metrics_out: Option<PathBuf>,
    /// Where checkpoints go  [default: checkpoints]
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Also checkpoint every N steps (one is always written at the end and on Ctrl-C).
    #[arg(long)]
    pub checkpoint_every: Option<u64>,
    /// Continue from a checkpoint (a step-NNNNNNNN directory, or a checkpoint dir: newest inside).
    #[arg(long, value_name = "PATH")]
    pub resume: Option<PathBuf>,
    /// Warn when no step completes for this many seconds; on GPUs, abort an NCCL all-reduce that takes longer  [default: 60]
    #[arg(long, value_name = "SECONDS")]
    pub stall_timeout: Option<f64>,
    /// First train one device for 120 steps on the same workload, then show the run's speedup and scaling efficiency against it.
    #[arg(long)]
    #[serde(default)]
    pub calibrate: bool,
    /// Cut the global batch among ranks in proportion to their measured speed (re-decided every 50 steps; the result stays that of the global batch).
    #[arg(long)]
    #[serde(default)]
    pub rebalance: bool,
    /// Demo / test fault: RANK:FACTOR makes that rank's compute FACTOR times slower (e.g. 1:2.0).
    #[arg(long, value_name = "RANK:FACTOR")]
    pub slow_rank: Option<String>,
    /// Demo / test fault: RANK:MS delays each of that rank's batches by MS milliseconds.
    #[arg(long, value_name = "RANK:MS")]
    pub slow_data: Option<String>,
    /// Fault injection for tests: RANK:STEP panics that rank's worker at that step.
    #[arg(long, hide = true)]
    #[serde(skip)]
    pub inject_panic: Option<String>,
}

fn parse<T: std::str::FromStr<Err = String>>(
    flag: &str,
    v: Option<&String>,
    default: T,
) -> Result<T, String> {
    match v {
        Some(s) => s.parse().map_err(|e| format!("--{flag}: {e}")),
        None => Ok(default),
    }
}

/// Reads a config file into the same shape as the flags.
pub fn read_config_file(path: &Path) -> Result<TrainArgs, String> {
    let expect = Expect {
        what: "a config file",
        flag: "--config",
        max: read::SETTINGS_MAX,
        fix: "check that --config names a config file (TOML, keys named like the flags)",
    };
    let text = read::read_text(path, &expect).map_err(|e| match e {
        ReadError::Io { source, .. } => {
            format!("cannot read config file {}: {source}", path.display())
        }
        refused => format!("config file {refused}"),
    })?;
    toml::from_str(&text).map_err(|e| {
        let msg = read::excerpt_quotes(e.message());
        let line = e.span().map(|s| text[..s.start].matches('\n').count() + 1);
        let at = line.map_or(String::new(), |l| format!(" (line {l})"));
        format!("config file {}{at}: {msg}; keys are the flag names without the leading --, e.g. batch-per-replica = 64", path.display())
    })
}

impl TrainArgs {
    /// `self` (flags) over `file` over defaults.
    /// The budget (epochs or steps) is one setting: a flag for either replaces the file's.
    fn merge(self, file: TrainArgs) -> TrainArgs {
        let budget_flag = self.epochs.is_some() || self.steps.is_some();
        let (epochs, steps) = if budget_flag {
            (self.epochs, self.steps)
        } else {
            (file.epochs, file.steps)
        };
        macro_rules! pick {
            ($($f:ident),*) => { TrainArgs { config: self.config, headless: self.headless || file.headless, readonly: self.readonly || file.readonly, rebalance: self.rebalance || file.rebalance, calibrate: self.calibrate || file.calibrate, exit_when_done: self.exit_when_done || file.exit_when_done, inject_panic: self.inject_panic, epochs, steps, $($f: self.$f.or(file.$f)),* } };
        }
        pick!(
            stall_timeout,
            slow_rank,
            slow_data,
            name,
            theme,
            sample_interval,
            devices,
            model,
            data,
            batch_per_replica,
            lr,
            optimizer,
            weight_decay,
            warmup,
            schedule,
            lr_scaling,
            grad_accum,
            prefetch,
            loader_threads,
            threads_per_worker,
            seed,
            log_every,
            metrics_out,
            checkpoint_dir,
            checkpoint_every,
            resume
        )
    }

    /// The validated run configuration, and how to show it.
    pub fn resolve(self) -> Result<(RunConfig, Frontend), String> {
        let args = match &self.config {
            Some(path) => {
                let file = read_config_file(path)?;
                self.merge(file)
            }
            None => self,
        };
        let d = RunConfig::default();
        let budget = match (args.epochs, args.steps) {
            (Some(_), Some(_)) => {
                return Err("--epochs and --steps both given: choose one budget".into())
            }
            (Some(e), None) => Budget::Epochs(e),
            (None, Some(s)) => Budget::Steps(s),
            (None, None) => d.budget,
        };
        let prefetch = match args.prefetch.as_deref() {
            None | Some("auto") => d.prefetch,
            Some(s) => s.parse().map_err(|_| {
                format!("--prefetch `{s}`: use a number of batches (0 = no prefetch) or auto")
            })?,
        };
        let threads_per_worker = match args.threads_per_worker.as_deref() {
            None | Some("auto") => None,
            Some(s) => Some(s.parse().map_err(|_| {
                format!("--threads-per-worker `{s}`: use a number of threads (1 = one core per worker) or auto")
            })?),
        };
        let inject_panic = match &args.inject_panic {
            None => None,
            Some(s) => {
                let (r, st) = s.split_once(':').ok_or("--inject-panic takes RANK:STEP")?;
                Some((
                    r.parse().map_err(|_| "--inject-panic: bad rank")?,
                    st.parse().map_err(|_| "--inject-panic: bad step")?,
                ))
            }
        };
        let rank_value =
            |flag: &str, v: &Option<String>, what: &str| -> Result<Option<(usize, f64)>, String> {
                let Some(v) = v else { return Ok(None) };
                let bad = || format!("--{flag} `{v}`: use RANK:{what}, e.g. 1:2.0");
                let (r, x) = v.split_once(':').ok_or_else(bad)?;
                Ok(Some((
                    r.trim().parse().map_err(|_| bad())?,
                    x.trim().parse().map_err(|_| bad())?,
                )))
            };
        let slow_rank = rank_value("slow-rank", &args.slow_rank, "FACTOR")?;
        let slow_data = rank_value("slow-data", &args.slow_data, "MS")?
            .map(|(r, ms)| {
                (ms.is_finite() && ms >= 0.0)
                    .then(|| (r, Duration::from_secs_f64(ms.min(1e9) / 1e3)))
                    .ok_or(format!(
                        "--slow-data {r}:{ms}: the delay must be 0 or more milliseconds"
                    ))
            })
            .transpose()?;
        let stall_timeout = match args.stall_timeout {
            None => d.stall_timeout,
            Some(s) if s.is_finite() && s > 0.0 && s <= 1e6 => Duration::from_secs_f64(s),
            Some(s) => {
                return Err(format!(
                    "--stall-timeout {s} is invalid: use a number of seconds such as 60"
                ))
            }
        };
        let cfg = RunConfig {
            name: args.name,
            slow_rank,
            slow_data,
            stall_timeout,
            rebalance: args.rebalance,
            calibrate: args.calibrate,
            devices: parse("devices", args.devices.as_ref(), d.devices)?,
            model: parse("model", args.model.as_ref(), d.model)?,
            data: parse("data", args.data.as_ref(), d.data)?,
            budget,
            batch_per_replica: args.batch_per_replica.unwrap_or(d.batch_per_replica),
            batch_from_flag: args.batch_per_replica.is_some(),
            lr: args.lr.or(d.lr),
            optimizer: parse("optimizer", args.optimizer.as_ref(), d.optimizer)?,
            weight_decay: args.weight_decay.unwrap_or(d.weight_decay),
            warmup: args.warmup.unwrap_or(d.warmup),
            schedule: parse("schedule", args.schedule.as_ref(), d.schedule)?,
            lr_scaling: parse("lr-scaling", args.lr_scaling.as_ref(), d.lr_scaling)?,
            grad_accum: args.grad_accum.unwrap_or(d.grad_accum),
            prefetch,
            loader_threads: args.loader_threads.unwrap_or(d.loader_threads),
            threads_per_worker,
            seed: args.seed.unwrap_or(d.seed),
            log_every: args.log_every.unwrap_or(d.log_every),
            val_fraction: d.val_fraction,
            metrics_out: args.metrics_out,
            checkpoint_dir: args.checkpoint_dir.unwrap_or(d.checkpoint_dir),
            checkpoint_every: args.checkpoint_every,
            final_checkpoint: d.final_checkpoint,
            resume: args.resume,
            inject_panic,
        };
        let sample_interval = match args.sample_interval {
            None => Duration::from_secs(1),
            Some(s) if s.is_finite() && (0.05..=3600.0).contains(&s) => Duration::from_secs_f64(s),
            Some(s) => {
                return Err(format!(
                    "--sample-interval {s} is out of range: use 0.05 to 3600 seconds"
                ))
            }
        };
        let frontend = Frontend {
            headless: args.headless,
            theme: args.theme,
            readonly: args.readonly,
            exit_when_done: args.exit_when_done,
            sample_interval,
        };
        Ok((cfg, frontend))
    }
}

/// How a run is shown: log lines or the terminal UI, and the UI's options.
#[derive(Clone, Debug, PartialEq)]
pub struct Frontend {
    pub headless: bool,
    pub theme: Option<String>,
    pub readonly: bool,
    pub exit_when_done: bool,
    pub sample_interval: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DeviceSpec;

    fn cli(args: &[&str]) -> Result<(RunConfig, Frontend), String> {
        let mut v = vec!["mgtop-train"];
        v.extend_from_slice(args);
        Cli::try_parse_from(v)
            .map_err(|e| e.to_string())?
            .train
            .resolve()
    }

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("run.toml");
        std::fs::write(
            &f,
            "devices = \"cpu:3\"\nlr = 0.01\nsteps = 40\nbatch-per-replica = 16\n",
        )
        .unwrap();
        let (c, front) =
            cli(&["--config", f.to_str().unwrap(), "--lr", "0.5", "--headless"]).unwrap();
        assert!(front.headless);
        assert_eq!(c.devices, DeviceSpec::Cpu(3));
        assert_eq!(c.lr, Some(0.5));
        assert_eq!(c.batch_per_replica, 16);
        assert_eq!(c.budget, Budget::Steps(40));
        assert_eq!(c.seed, 0);
        let (c, _) = cli(&["--config", f.to_str().unwrap(), "--epochs", "2"]).unwrap();
        assert_eq!(c.budget, Budget::Epochs(2));
        std::fs::write(&f, "theme = \"light\"\nsample-interval = 0.5\n").unwrap();
        let (_, front) = cli(&["--config", f.to_str().unwrap(), "--readonly"]).unwrap();
        assert_eq!(front.theme.as_deref(), Some("light"));
        assert!(front.readonly && !front.headless && !front.exit_when_done);
        assert_eq!(front.sample_interval, Duration::from_millis(500));
    }

    #[test]
    fn bad_files_and_values_name_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("bad.toml");
        std::fs::write(&f, "lr = 0.1\nbatch_size = 3\n").unwrap();
        let e = cli(&["--config", f.to_str().unwrap()]).unwrap_err();
        assert!(e.contains("batch_size") && e.contains("line 2"), "{e}");
        std::fs::write(&f, "lr = \"fast\"\n").unwrap();
        let e = cli(&["--config", f.to_str().unwrap()]).unwrap_err();
        assert!(e.contains("line 1"), "{e}");
        let e = cli(&["--optimizer", "lion"]).unwrap_err();
        assert!(e.contains("--optimizer") && e.contains("adamw"), "{e}");
        let e = cli(&["--sample-interval", "0"]).unwrap_err();
        assert!(e.contains("--sample-interval"), "{e}");
        let e = cli(&["--prefetch", "lots"]).unwrap_err();
        assert!(e.contains("--prefetch"), "{e}");
        assert!(cli(&["--epochs", "1", "--steps", "2"]).is_err());
        let e = cli(&["--config", "/nonexistent.toml"]).unwrap_err();
        assert!(e.contains("/nonexistent.toml"), "{e}");
    }

    #[test]
    fn config_files_are_read_within_limits() {
        let e = cli(&["--config", "/dev/zero"]).unwrap_err();
        assert!(
            e.starts_with(
                "config file /dev/zero: a character device, not a regular file; --config needs"
            ),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let e = cli(&["--config", dir.path().to_str().unwrap()]).unwrap_err();
        assert!(e.contains("a directory, not a regular file"), "{e}");
        let f = dir.path().join("big.toml");
        std::fs::File::create(&f).unwrap().set_len(2 << 20).unwrap();
        let e = cli(&["--config", f.to_str().unwrap()]).unwrap_err();
        assert!(
            e.contains("larger than the 1 MiB that a config file may hold (2 MiB)"),
            "{e}"
        );
        // a long value from the file is quoted short, not echoed whole
        let long = "f".repeat(500_000);
        std::fs::write(&f, format!("lr = \"{long}\"\n")).unwrap();
        let e = cli(&["--config", f.to_str().unwrap()]).unwrap_err();
        assert!(
            e.len() < 400 && e.contains("line 1") && e.contains("fff…"),
            "{e}"
        );
    }
}
