//! What a run configuration must satisfy before any data is loaded or thread started: each
//! rule's error names the flag and the accepted range.

use std::time::Duration;

use super::EngineError;

mod batch;
mod batch_norm;
pub(super) use batch::{a_sample_per_rank, batch_within_data};
pub(super) use batch_norm::{
    batch_norm_values, few_values, one_sample_shares, one_value_batch_norm, one_value_layer,
    one_value_refusal,
};

/// Micro-batches per step (`--grad-accum`) and batches queued per rank (`--prefetch`): far
/// beyond any use, and what keeps a typo from allocating without bound.
pub const MAX_GRAD_ACCUM: usize = 1 << 16;
pub const MAX_PREFETCH: usize = 1024;
use crate::config::log_every::LogEvery;
use crate::config::{BnStats, Budget, Freeze, RunConfig};
use crate::data::Dataset;
use crate::nn::model::Model;
use crate::nn::optim::Optimizer;
use crate::nn::shape::Shape;
use crate::text::number;

pub(super) fn settings(cfg: &RunConfig) -> Result<(), EngineError> {
    let bad = |m: String| Err(EngineError::Config(m));
    // (the kernels' switches: a misspelt one would be taken for the default unsaid)
    crate::nn::direct::check_env()
        .and_then(|()| crate::nn::winograd::check_env())
        .and_then(|()| crate::backend::cuda::check_env())
        .map_err(EngineError::Config)?;
    if cfg.batch_per_replica == 0 || cfg.batch_per_replica > crate::engine::control::MAX_BATCH {
        return bad(format!(
            "--batch-per-replica {} is out of range: use 1 to {}",
            cfg.batch_per_replica,
            crate::engine::control::MAX_BATCH
        ));
    }
    if cfg.grad_accum == 0 || cfg.grad_accum > MAX_GRAD_ACCUM {
        return bad(format!(
            "--grad-accum {} is out of range: use 1 (no accumulation) to {MAX_GRAD_ACCUM} micro-batches per step",
            cfg.grad_accum
        ));
    }
    if cfg.prefetch > MAX_PREFETCH {
        return bad(format!(
            "--prefetch {} is out of range: use 0 (no prefetch) to {MAX_PREFETCH} batches, or auto",
            cfg.prefetch
        ));
    }
    if let Some(name) = &cfg.name {
        if name.trim().is_empty() {
            return bad(format!(
                "--name {name:?} names nothing: give the run a name, or leave --name out for <data>-<model>"
            ));
        }
        if name.chars().any(crate::text::unprintable)
            || name.chars().count() > crate::config::MAX_NAME_CHARS
        {
            return bad(
                "--name must be printable text of at most 200 characters (no escape sequences, line breaks or text-direction controls)"
                    .into(),
            );
        }
    }
    if let Some(lr) = cfg.lr.filter(|lr| !(lr.is_finite() && *lr > 0.0)) {
        return bad(format!(
            "--lr {lr} is invalid: use a positive number such as 1e-3"
        ));
    }
    if !(0.0..1.0).contains(&cfg.momentum()) {
        return bad(format!(
            "--momentum {} is out of range: use 0 to 1 (exclusive), e.g. 0.9",
            cfg.momentum()
        ));
    }
    // (as PyTorch's SGD refuses it: a look-ahead of no momentum is plain SGD under another name)
    if cfg.optimizer == crate::nn::optim::OptimizerKind::Nesterov && cfg.momentum() == 0.0 {
        return bad(
            "--optimizer nesterov with --momentum 0: Nesterov's look-ahead needs a momentum; give --momentum 0.9, or --optimizer sgd"
                .into(),
        );
    }
    if !(0.0..1.0).contains(&cfg.label_smoothing) {
        return bad(format!(
            "--label-smoothing {} is out of range: use 0 to 1 (exclusive), e.g. 0.1",
            number(cfg.label_smoothing.into())
        ));
    }
    if let Some(c) = cfg.clip_grad_norm.filter(|c| !(c.is_finite() && *c > 0.0)) {
        return bad(format!(
            "--clip-grad-norm {} is invalid: use a positive bound such as 1.0 (0 turns clipping off)",
            number(c.into())
        ));
    }
    if !(cfg.weight_decay.is_finite() && cfg.weight_decay >= 0.0) {
        return bad(format!(
            "--weight-decay {} is invalid: use 0 or a small positive number such as 1e-4",
            number(cfg.weight_decay.into())
        ));
    }
    match cfg.budget {
        Budget::Epochs(0) => return bad("--epochs 0 trains nothing: use 1 or more".into()),
        Budget::Steps(0) => return bad("--steps 0 trains nothing: use 1 or more".into()),
        _ => {}
    }
    if cfg.log_every == LogEvery::Steps(0) {
        return bad("--log-every 0 is invalid: use 1 or more steps, or auto".into());
    }
    if cfg.checkpoint_every == Some(0) {
        return bad("--checkpoint-every 0 is invalid: use 1 or more steps".into());
    }
    if cfg.val_every == Some(0) {
        return bad("--val-every 0 is invalid: use 1 or more steps".into());
    }
    if cfg.keep_checkpoints == Some(0) {
        return bad("--keep-checkpoints 0 would keep none: use 1 or more".into());
    }
    if let Some(t) = cfg.loader_threads.filter(|t| !(1..=64).contains(t)) {
        return bad(format!("--loader-threads {t} is out of range: use 1 to 64"));
    }
    if let Some(t) = cfg.threads_per_worker.filter(|t| !(1..=256).contains(t)) {
        return bad(format!(
            "--threads-per-worker {t} is out of range: use 1 to 256, or auto"
        ));
    }
    // every CPU worker's intra-op threads are threads of this process (each with its stack)
    if let (crate::config::DeviceSpec::Cpu(n), Some(t)) = (&cfg.devices, cfg.threads_per_worker) {
        if n * t > MAX_THREADS {
            return bad(format!(
                "--devices cpu:{n} with --threads-per-worker {t} asks for {} threads; at most {MAX_THREADS} in all: fewer workers or fewer threads each (this machine has {} cores)",
                n * t,
                super::devices::available_cores()
            ));
        }
    }
    // and each one's loader threads (`--loader-threads` is per rank)
    if let (crate::config::DeviceSpec::Cpu(n), Some(l)) = (&cfg.devices, cfg.loader_threads) {
        if n * l > MAX_THREADS {
            return bad(format!(
                "--devices cpu:{n} with --loader-threads {l} asks for {} loader threads; at most {MAX_THREADS} in all: fewer workers or fewer loader threads each",
                n * l
            ));
        }
    }
    if let Some((_, f)) = cfg
        .slow_rank
        .filter(|f| !(f.1.is_finite() && (1.0..=100.0).contains(&f.1)))
    {
        return bad(format!(
            "--slow-rank factor {} is out of range: use 1 to 100 (2.0 = twice as slow)",
            number(f)
        ));
    }
    if cfg.slow_data.is_some_and(|f| f.1 > Duration::from_secs(10)) {
        return bad("--slow-data delay is out of range: use 0 to 10000 ms".into());
    }
    if cfg.stall_timeout.is_zero() {
        return bad("--stall-timeout 0 is invalid: use a number of seconds such as 60".into());
    }
    if cfg.init.is_some() && cfg.resume.is_some() {
        return bad("--init starts a run from given weights and --resume continues a run from its checkpoint; give one".into());
    }
    if let Some(f) = cfg.inputs.val_fraction.filter(|f| !(0.0..1.0).contains(f)) {
        return bad(format!(
            "--val-split {} is out of range: use a share from 0 (no validation) to below 1, e.g. 0.2",
            number(f)
        ));
    }
    Ok(())
}
/// The most intra-op threads a run's CPU workers may have in all.
const MAX_THREADS: usize = 1024;

/// `--cuda-graph on` with `--sync-bn` where it pools statistics (`pools_bn`), a GPU-only pair,
/// refused where there are GPUs to refuse it for.
pub(super) fn graph_flags(
    cfg: &RunConfig,
    devices: &[super::Device],
    pools_bn: bool,
) -> Result<(), EngineError> {
    if devices
        .iter()
        .any(|d| matches!(d, super::Device::Gpu { .. }))
    {
        (cfg.cuda_graph.resolve(pools_bn)).map_err(EngineError::Config)?;
    }
    Ok(())
}

/// `--slow-rank` and `--slow-data` name a rank of the run's `devices`, and `--slow-rank` a CPU
/// worker's (its compute is what it slows).
pub(super) fn fault_flags(cfg: &RunConfig, devices: &[super::Device]) -> Result<(), EngineError> {
    if let Some(super::Device::Gpu { .. }) = cfg.slow_rank.and_then(|f| devices.get(f.0)) {
        return Err(EngineError::Config(
            "--slow-rank slows a CPU worker's compute; on a GPU rank it would only delay kernel launches, which the GPU's own timing does not see: use --slow-data RANK:MS to slow a GPU rank's input".into(),
        ));
    }
    for (flag, rank) in [
        ("--slow-rank", cfg.slow_rank.map(|f| f.0)),
        ("--slow-data", cfg.slow_data.map(|f| f.0)),
    ] {
        if let Some(r) = rank.filter(|&r| r >= devices.len()) {
            return Err(EngineError::Config(format!(
                "{flag}: there is no rank {r}; this run has ranks 0 to {}",
                devices.len() - 1
            )));
        }
    }
    Ok(())
}

/// Before the data loads (a large set takes a minute): a model that cannot take the data's
/// samples, where their shape is known before (`data::sample_shape`: from the spec, a CSV's
/// line 1, an IDX file's header), is refused as it would be once they are loaded.
pub(super) fn model_before_data(cfg: &RunConfig) -> Result<(), EngineError> {
    match crate::data::sample_shape(&cfg.data, cfg.inputs.image_size) {
        Some(shape) => built(cfg, shape, 2).map(|_| ()),
        None => Ok(()),
    }
}

/// The run's model on its data's samples.
pub(super) fn model(cfg: &RunConfig, train: &Dataset) -> Result<Model, EngineError> {
    let mut model = built(cfg, train.input_shape(), train.classes)?;
    model.label_smoothing = cfg.label_smoothing;
    if let Some(f) = &cfg.freeze {
        let frozen = frozen_tensors(&model, f).map_err(EngineError::Config)?;
        model.freeze(&frozen);
    }
    let fixed = match cfg.bn_stats {
        BnStats::Batch => Vec::new(),
        BnStats::Running => model.batch_norms(),
        BnStats::Frozen => model.frozen_batch_norms(),
    };
    model.fix_statistics(&fixed);
    Ok(model)
}

/// `--model` built for samples of `shape` in `classes` classes, or what to change.
fn built(cfg: &RunConfig, shape: Shape, classes: usize) -> Result<Model, EngineError> {
    Model::new(shape, &cfg.model, classes).map_err(|e| {
        use crate::data::DataSpec;
        // flat data a picture model cannot take: how the data's format says it holds pictures
        let pictures = match &cfg.data {
            _ if matches!(shape, Shape::Image { .. }) || !e.contains("image") => "",
            DataSpec::Csv { .. } => {
                " (if the CSV's rows are pictures, give their shape: --data csv:PATH,shape=CxHxW)"
            }
            DataSpec::Idx { .. } => {
                " (if the IDX file holds 4-d pictures, give their layout: --data idx:IMAGES,LABELS,layout=nchw or layout=nhwc)"
            }
            DataSpec::Synthetic { .. } => " (synthetic pictures: synthetic-images:N,C,H,W,K)",
            _ => "",
        };
        // (a layer list no data could make whole: the model alone is to change)
        let any_shape = [
            Shape::Image { c: 3, h: 224, w: 224 },
            Shape::Image { c: 1, h: 28, w: 28 },
            Shape::Flat(64),
        ]
        .into_iter()
        .any(|s| Model::new(s, &cfg.model, classes.max(2)).is_ok());
        EngineError::Config(match any_shape {
            true => format!("{e}; change --model, or --data to data of that shape{pictures}"),
            false => format!("{e}; change --model"),
        })
    })
}

/// The tensors `--freeze` names; an error if it names none, or all.
fn frozen_tensors(model: &Model, f: &Freeze) -> Result<Vec<usize>, String> {
    let head = model.head_tensors();
    let all = 0..model.tensors.len();
    let frozen: Vec<usize> = match f {
        Freeze::Backbone => all.filter(|t| !head.contains(t)).collect(),
        Freeze::Prefixes(p) => {
            if let Some(q) = p
                .iter()
                .find(|q| !model.tensors.iter().any(|t| Freeze::under(&t.name, q)))
            {
                let names: Vec<&str> = model
                    .tensors
                    .iter()
                    .take(4)
                    .map(|t| t.name.as_str())
                    .collect();
                return Err(format!(
                    "--freeze `{f}`: no parameter's name starts with `{q}` (up to a `.`); this model's names look like {}, ...",
                    names.join(", ")
                ));
            }
            all.filter(|&t| p.iter().any(|q| Freeze::under(&model.tensors[t].name, q)))
                .collect()
        }
    };
    if frozen.is_empty() && *f == Freeze::Backbone {
        return Err(format!(
            "--freeze backbone: the model `{}` is its classifier head alone ({}), with no backbone before it to freeze; leave --freeze out, or give a model with layers before its head",
            model.spec,
            crate::text::counted(model.tensors.len(), "tensor")
        ));
    }
    if frozen.is_empty() || frozen.len() == model.tensors.len() {
        return Err(format!(
            "--freeze `{f}` would leave {} of the model's {} tensors to train; leave something to train, and something frozen",
            model.tensors.len() - frozen.len(),
            model.tensors.len()
        ));
    }
    Ok(frozen)
}

/// The run's optimizer with its coefficients; `--no-decay-bn-bias` leaves batch norm's
/// parameters and every bias out of the weight decay.
pub(super) fn optimizer(cfg: &RunConfig, model: &Model) -> Optimizer {
    Optimizer {
        momentum: cfg.momentum(),
        no_decay: match cfg.no_decay_bn_bias {
            true => model.no_decay_ranges(),
            false => Vec::new(),
        },
        frozen: model.frozen_ranges(),
        clip_norm: cfg.clip_grad_norm,
        ..Optimizer::new(cfg.optimizer, cfg.weight_decay)
    }
}
