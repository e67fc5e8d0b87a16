//! Flags and `--config` file into a validated `RunConfig`: flags over the file over the defaults,
//! every value through the same parser either way.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::config_file;
use super::origin::Origins;
use super::TrainArgs;
use crate::config::{BatchFrom, Budget, RunConfig};
use crate::data::DataOptions;
use crate::engine::{checkpoint, rundir};
use crate::nn::schedule::LrScaling;

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

/// `--lr` as the run holds it, a float32: the range below is what one holds as a positive
/// normal number (1e-300 would round to 0 and train nothing; 1e-38, subnormal, to 0 once
/// scaled).
fn learning_rate(lr: f64) -> Result<f32, String> {
    match lr {
        v if (f32::MIN_POSITIVE as f64..=3e38).contains(&v) => Ok(v as f32),
        _ => {
            // as typed, near enough: Display would write 1e-300 with 300 digits
            let shown = crate::text::number(lr);
            Err(format!(
                "--lr {shown} is invalid: use a positive number from 1.2e-38 to 3e38, such as 1e-3"
            ))
        }
    }
}

impl TrainArgs {
    /// `self` (flags) over `file` over defaults.
    /// The budget (epochs or steps) is one setting: a flag for either replaces the file's. So is
    /// where the run starts (weights to `init` from, or a checkpoint to `resume`): a run's own
    /// config file serves to resume it (`--config run.toml --resume RUN`), the file's `init`
    /// recorded in the checkpoint already; the file's `init-partial` goes with its `init`.
    pub(super) fn merge(self, file: TrainArgs) -> TrainArgs {
        let budget_flag = self.epochs.is_some() || self.steps.is_some();
        let (epochs, steps) = if budget_flag {
            (self.epochs, self.steps)
        } else {
            (file.epochs, file.steps)
        };
        let start_flag = self.init.is_some() || self.resume.is_some();
        let (init, resume) = match start_flag {
            true => (self.init, self.resume),
            false => (file.init, file.resume),
        };
        let init_partial = (self.init_partial).or(file.init_partial.filter(|_| init.is_some()));
        macro_rules! pick {
            ($($f:ident),*) => { TrainArgs { config: self.config, inject_panic: self.inject_panic, inject_peer_sample: self.inject_peer_sample, epochs, steps, init, resume, init_partial, $($f: self.$f.or(file.$f)),* } };
        }
        pick!(
            headless,
            readonly,
            calibrate,
            download,
            exit_when_done,
            rebalance,
            checkpoint_best,
            sync_bn,
            bn_stats,
            no_decay_bn_bias,
            strategy,
            local_sgd_warmup,
            stall_timeout,
            slow_rank,
            slow_data,
            name,
            theme,
            sample_interval,
            devices,
            model,
            data,
            val_split,
            val_data,
            val_every,
            image_size,
            augment,
            normalize,
            batch_per_replica,
            lr,
            optimizer,
            weight_decay,
            momentum,
            label_smoothing,
            clip_grad_norm,
            precision,
            cuda_graph,
            grad_dtype,
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
            prometheus,
            tensorboard,
            run_dir,
            checkpoint_dir,
            checkpoint_every,
            keep_checkpoints,
            freeze,
            export
        )
    }

    /// The flags over the `--config` file's settings: the file read (and no longer named).
    /// And the file's settings no flag overrode, for `resolve_noted`'s refusals.
    pub fn with_config_file(self) -> Result<(TrainArgs, Origins), String> {
        let mut origins = Origins::default();
        let args = self.with_config_noted(&mut origins)?;
        Ok((args, origins))
    }

    /// `with_config_file`, telling `origins` the file's settings no flag overrode.
    fn with_config_noted(self, origins: &mut Origins) -> Result<TrainArgs, String> {
        let path = match &self.config[..] {
            [] => return Ok(self),
            [one] => one.clone(),
            many => {
                let names: Vec<String> = many.iter().map(|p| p.display().to_string()).collect();
                return Err(format!(
                    "--config is given {} times ({}): a run reads one config file; put the settings in one file, or give the others' as flags",
                    many.len(),
                    names.join(", ")
                ));
            }
        };
        let (file, text) = config_file::read(&path)?;
        origins.file(&path, &text, &self);
        // (a flag for either replaces the file's)
        let budget_flag = self.epochs.is_some() || self.steps.is_some();
        if file.epochs.is_some() && file.steps.is_some() && !budget_flag {
            return Err(format!(
                "config file {}: `epochs` and `steps` are both set: keep one budget",
                path.display()
            ));
        }
        config_file::beside(&path, &self, &file)?;
        Ok(TrainArgs {
            config: Vec::new(),
            ..self.merge(file)
        })
    }

    /// The validated run configuration, and how to show it: flags over the config file over,
    /// for a resumed run, the settings of the run it continues, over the defaults.
    /// A refused setting no flag gave is said with where it came from (the config file's
    /// line, or the resumed checkpoint).
    pub fn resolve(self) -> Result<(RunConfig, Frontend), String> {
        (self.resolve_noted(Origins::default())).map(|(cfg, front, _)| (cfg, front))
    }

    /// `resolve` with the `origins` already noted (`with_config_file`'s, where it merged the
    /// file; else none), and where the settings no flag gave came from: for the refusals of
    /// the engine's own checks when it starts (`Origins::explain`).
    pub fn resolve_noted(
        self,
        mut origins: Origins,
    ) -> Result<(RunConfig, Frontend, Origins), String> {
        match self.resolve_under(&mut origins) {
            Ok((cfg, front)) => Ok((cfg, front, origins)),
            Err(e) => Err(origins.explain(e)),
        }
    }

    /// `resolve`, telling `origins` where the settings no flag gave came from.
    fn resolve_under(self, origins: &mut Origins) -> Result<(RunConfig, Frontend), String> {
        let args = self.with_config_noted(origins)?;
        // the checkpoint a resumed run continues (read once: a `latest` link moves when this
        // run starts), and the settings it takes from it
        let resume = args
            .resume
            .as_deref()
            .map(rundir::resume_point)
            .transpose()?;
        let (args, taken) = match &resume {
            Some(point) => {
                let meta = checkpoint::read_meta(point).map_err(|e| e.to_string())?;
                let (args, taken) = super::resumed::under_checkpoint(args, &meta)
                    .map_err(|e| format!("--resume {}: {e}", point.display()))?;
                (args, (!taken.is_empty()).then_some(taken))
            }
            None => (args, None),
        };
        origins.taken.clone_from(&taken);
        let d = RunConfig::default();
        let optimizer = parse("optimizer", args.optimizer.as_ref(), d.optimizer)?;
        let budget = match (args.epochs, args.steps) {
            (Some(_), Some(_)) => {
                return Err("--epochs and --steps both given: choose one budget".into())
            }
            (Some(e), None) => Budget::Epochs(e),
            (None, Some(s)) => Budget::Steps(s),
            (None, None) => d.budget,
        };
        if args.init_partial == Some(true) && args.init.is_none() {
            return Err("--init-partial lets --init load part of a model, and no --init is given: give the weights file with --init FILE, or leave --init-partial out".into());
        }
        let prefetch = number_or_auto(
            args.prefetch.as_deref(),
            "--prefetch",
            "a number of batches (0 = no prefetch)",
        )?
        .unwrap_or(d.prefetch);
        let log_every = match args.log_every.as_deref() {
            None => d.log_every,
            Some(s) => s.parse()?,
        };
        let threads_per_worker = number_or_auto(
            args.threads_per_worker.as_deref(),
            "--threads-per-worker",
            "a number of threads (1 = one core per worker)",
        )?;
        let loader_threads = number_or_auto(
            args.loader_threads.as_deref(),
            "--loader-threads",
            "a number of threads per rank",
        )?;
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
            Some(s) if (1e-3..=1e6).contains(&s) => Duration::from_secs_f64(s),
            Some(s) => {
                return Err(format!(
                    "--stall-timeout {} is invalid: use a number of seconds from 0.001 to 1000000, such as 60",
                    crate::text::number(s)
                ))
            }
        };
        let mut strategy = parse("strategy", args.strategy.as_ref(), d.strategy)?;
        if let Some(w) = args.local_sgd_warmup {
            strategy = strategy.with_warmup(w)?;
        }
        let cfg = RunConfig {
            strategy,
            epoch_validation: d.epoch_validation,
            name: args.name,
            slow_rank,
            slow_data,
            stall_timeout,
            rebalance: args.rebalance.unwrap_or(d.rebalance),
            sync_bn: args.sync_bn.unwrap_or(d.sync_bn),
            bn_stats: parse("bn-stats", args.bn_stats.as_ref(), d.bn_stats)?,
            calibrate: args.calibrate.unwrap_or(false),
            devices: parse("devices", args.devices.as_ref(), d.devices)?,
            model: parse("model", args.model.as_ref(), d.model)?,
            data: parse("data", args.data.as_ref(), d.data)?,
            budget,
            batch_per_replica: args.batch_per_replica.unwrap_or(d.batch_per_replica),
            batch_from: (args.batch_per_replica)
                .map(|_| BatchFrom::Given(origins.given("batch-per-replica"))),
            batch_cut: None,
            grad_accum_cut: None,
            lr: args.lr.map(learning_rate).transpose()?.or(d.lr),
            optimizer,
            weight_decay: args.weight_decay.unwrap_or(d.weight_decay),
            momentum: args.momentum,
            no_decay_bn_bias: args.no_decay_bn_bias.unwrap_or(d.no_decay_bn_bias),
            label_smoothing: args.label_smoothing.unwrap_or(d.label_smoothing),
            clip_grad_norm: match args.clip_grad_norm {
                Some(given) => clip_bound(given)?,
                None => d.clip_grad_norm,
            },
            precision: parse("precision", args.precision.as_ref(), d.precision)?,
            cuda_graph: parse("cuda-graph", args.cuda_graph.as_ref(), d.cuda_graph)?,
            grad_dtype: parse("grad-dtype", args.grad_dtype.as_ref(), d.grad_dtype)?,
            metrics_late: crate::config::metrics_late(
                std::env::var("MGTOP_METRICS_LATE").ok().as_deref(),
            )?,
            warmup: args.warmup.unwrap_or(d.warmup),
            schedule: parse("schedule", args.schedule.as_ref(), d.schedule)?,
            lr_scaling: (args.lr_scaling.as_ref())
                .map(|s| parse("lr-scaling", Some(s), LrScaling::Linear))
                .transpose()?,
            grad_accum: args.grad_accum.unwrap_or(d.grad_accum),
            prefetch,
            loader_threads,
            threads_per_worker,
            seed: args.seed.unwrap_or(d.seed),
            log_every,
            recipe: Default::default(),
            inputs: DataOptions {
                val_fraction: args.val_split,
                val_data: args
                    .val_data
                    .as_ref()
                    .map(|v| v.parse().map_err(|e| format!("--val-data: {e}")))
                    .transpose()?,
                image_size: match args.image_size {
                    Some(s) if !(8..=4096).contains(&s) => {
                        return Err(format!(
                            "--image-size {s} is out of range: use 8 to 4096 pixels, e.g. 224"
                        ))
                    }
                    s => s,
                },
                augment: parse("augment", args.augment.as_ref(), Default::default())?,
                normalize: parse("normalize", args.normalize.as_ref(), Default::default())?,
                download: args.download.unwrap_or(false),
            },
            metrics_out: args.metrics_out,
            run_dir: None,
            origin: None,
            line_init: None,
            link_latest: false,
            checkpoint_dir: d.checkpoint_dir,
            checkpoint_every: args.checkpoint_every,
            checkpoint_best: args.checkpoint_best.unwrap_or(false),
            val_every: args.val_every,
            keep_checkpoints: args.keep_checkpoints,
            final_checkpoint: d.final_checkpoint,
            resume,
            init: args.init,
            init_partial: args.init_partial.unwrap_or(false),
            // (`none` over a resumed checkpoint's: everything trains again)
            freeze: (args.freeze.as_ref().filter(|&f| f != "none"))
                .map(|f| f.parse().map_err(|e| format!("--freeze: {e}")))
                .transpose()?,
            inject_panic,
            inject_desync: None,
        };
        // the run's directory, and its checkpoints inside it unless --checkpoint-dir says where
        let run_dir = args
            .run_dir
            .clone()
            .unwrap_or_else(|| rundir::default_dir(Path::new(""), &cfg.run_name()));
        // `=false`: none, over a config file's
        let prometheus = (args.prometheus.as_deref())
            .filter(|&p| p != "false")
            .map(crate::observe::prometheus::http::parse_addr)
            .transpose()?;
        // the flag without a value (or `=true`): the run directory's; `=false`: none, as the
        // other switches (over a config file's `tensorboard = true`)
        let tensorboard = super::switch_or_folder(&args.tensorboard)
            .map(|d| d.map_or(TensorboardDir::InRunDir, TensorboardDir::At));
        let cfg = RunConfig {
            // (a path through `runs/NAME/latest`: the run it names now, before this run's
            // start moves the link)
            checkpoint_dir: (args.checkpoint_dir.as_deref().map(rundir::followed))
                .unwrap_or_else(|| run_dir.join(rundir::CHECKPOINTS)),
            link_latest: args.run_dir.is_none(),
            run_dir: Some(run_dir),
            ..cfg
        };
        let sample_interval = match args.sample_interval {
            None => Duration::from_secs(1),
            Some(s) if s.is_finite() && (0.05..=3600.0).contains(&s) => Duration::from_secs_f64(s),
            Some(s) => {
                return Err(format!(
                    "--sample-interval {} is out of range: use 0.05 to 3600 seconds",
                    crate::text::number(s)
                ))
            }
        };
        let frontend = Frontend {
            taken_from_checkpoint: taken,
            prometheus,
            tensorboard,
            headless: args.headless.unwrap_or(false),
            theme: args.theme,
            readonly: args.readonly.unwrap_or(false),
            exit_when_done: args.exit_when_done.unwrap_or(false),
            sample_interval,
            export: args.export,
        };
        Ok((cfg, frontend))
    }
}

/// Where TensorBoard's event file goes (`--tensorboard [DIR]`).
#[derive(Clone, Debug, PartialEq)]
pub enum TensorboardDir {
    /// The flag without a value: `tensorboard/` in the run directory (the one the run makes,
    /// which is `<time>-2` where another run took `<time>`).
    InRunDir,
    /// `--tensorboard DIR`: a folder for the run under DIR, `<name>/<run dir's name>`.
    At(PathBuf),
}

/// How a run is shown: log lines or the terminal UI, and the UI's options.
#[derive(Clone, Debug, PartialEq)]
pub struct Frontend {
    /// A resumed run's settings taken from its checkpoint that are not the defaults, as flags
    /// (`--schedule cosine --steps 2000`), for a start-up line.
    pub taken_from_checkpoint: Option<String>,
    /// Where to serve Prometheus metrics (`--prometheus`).
    pub prometheus: Option<std::net::SocketAddr>,
    /// Where to write TensorBoard's event file (`--tensorboard`).
    pub tensorboard: Option<TensorboardDir>,
    pub headless: bool,
    pub theme: Option<String>,
    pub readonly: bool,
    pub exit_when_done: bool,
    pub sample_interval: Duration,
    /// Where to write the run's weights at its end (`--export`, or the config file's).
    pub export: Option<PathBuf>,
}

/// `--clip-grad-norm` as given: 0 is off (over a resumed run's bound too); else a positive
/// bound a float32 holds as it is (not one that would round to 0 or to infinity).
fn clip_bound(v: f64) -> Result<Option<f32>, String> {
    let f = v as f32;
    match v {
        0.0 => Ok(None),
        _ if v > 0.0 && f.is_normal() => Ok(Some(f)),
        _ => Err(format!(
            "--clip-grad-norm {} is invalid: use a positive bound such as 1.0, from 1.2e-38 to 3e38 (0 turns clipping off)",
            match v.abs() {
                a if (1e-3..1e5).contains(&a) || !a.is_finite() => format!("{v}"),
                _ => format!("{v:e}"),
            }
        )),
    }
}

/// A flag that takes a number or `auto` (in any case, spaces about it aside): the number,
/// `None` for auto or where the flag is not given, or why not (`what` the number counts).
fn number_or_auto(given: Option<&str>, flag: &str, what: &str) -> Result<Option<usize>, String> {
    match given.map(str::trim) {
        None => Ok(None),
        Some(s) if s.eq_ignore_ascii_case("auto") => Ok(None),
        Some(s) => (s.parse().map(Some)).map_err(|_| format!("{flag} `{s}`: use {what} or auto")),
    }
}
