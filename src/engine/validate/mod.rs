//! What a run configuration must satisfy before any data is loaded or thread started: each
//! rule's error names the flag and the accepted range.

use std::time::Duration;

use super::checkpoint::CheckpointMeta;
use super::EngineError;

mod batch_norm;
pub(super) use batch_norm::{
    batch_norm_values, one_sample_shares, one_value_batch_norm, one_value_layer, one_value_refusal,
};

/// Micro-batches per step (`--grad-accum`) and batches queued per rank (`--prefetch`): far
/// beyond any use, and what keeps a typo from allocating without bound.
pub const MAX_GRAD_ACCUM: usize = 1 << 16;
pub const MAX_PREFETCH: usize = 1024;
use crate::config::{BatchFrom, Budget, Freeze, RunConfig};
use crate::data::Dataset;
use crate::nn::layers::Shape;
use crate::nn::model::Model;
use crate::nn::optim::Optimizer;

pub(super) fn settings(cfg: &RunConfig) -> Result<(), EngineError> {
    let bad = |m: String| Err(EngineError::Config(m));
    // (the CPU kernels' switches: a misspelt one would be taken for the default unsaid)
    crate::nn::direct::check_env()
        .and_then(|()| crate::nn::winograd::check_env())
        .map_err(EngineError::Config)?;
    if cfg.batch_per_replica == 0 || cfg.batch_per_replica > crate::engine::control::MAX_BATCH {
        return bad(format!(
            "--batch-per-replica {} is out of range: use 1..={}",
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
        if name.chars().any(char::is_control) || name.chars().count() > 200 {
            return bad(
                "--name must be printable text of at most 200 characters (no escape sequences or line breaks)"
                    .into(),
            );
        }
    }
    if let Some(lr) = cfg.lr.filter(|lr| !(lr.is_finite() && *lr > 0.0)) {
        return bad(format!(
            "--lr {lr} is invalid: use a positive number such as 1e-3"
        ));
    }
    if !(0.0..1.0).contains(&cfg.momentum) {
        return bad(format!(
            "--momentum {} is out of range: use 0 to 1 (exclusive), e.g. 0.9",
            cfg.momentum
        ));
    }
    if !(0.0..1.0).contains(&cfg.label_smoothing) {
        return bad(format!(
            "--label-smoothing {} is out of range: use 0 to 1 (exclusive), e.g. 0.1",
            cfg.label_smoothing
        ));
    }
    if let Some(c) = cfg.clip_grad_norm.filter(|c| !(c.is_finite() && *c > 0.0)) {
        return bad(format!(
            "--clip-grad-norm {c} is invalid: use a positive bound such as 1.0 (0 turns clipping off)"
        ));
    }
    if !(cfg.weight_decay.is_finite() && cfg.weight_decay >= 0.0) {
        return bad(format!(
            "--weight-decay {} is invalid: use 0 or a small positive number such as 1e-4",
            cfg.weight_decay
        ));
    }
    match cfg.budget {
        Budget::Epochs(0) => return bad("--epochs 0 trains nothing: use 1 or more".into()),
        Budget::Steps(0) => return bad("--steps 0 trains nothing: use 1 or more".into()),
        _ => {}
    }
    if cfg.log_every == 0 {
        return bad("--log-every 0 is invalid: use 1 or more steps".into());
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
        return bad(format!("--loader-threads {t} is out of range: use 1..=64"));
    }
    if cfg.threads_per_worker.is_some_and(|t| t == 0 || t > 256) {
        return bad("--threads-per-worker is out of range: use 1..=256 or auto".into());
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
            "--slow-rank factor {f} is out of range: use 1 to 100 (2.0 = twice as slow)"
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
            "--val-split {f} is out of range: use a share from 0 (no validation) to below 1, e.g. 0.2"
        ));
    }
    Ok(())
}
/// The most intra-op threads a run's CPU workers may have in all.
const MAX_THREADS: usize = 1024;

/// The run's model on its data's samples.
/// `--cuda-graph on` with `--sync-bn`, a GPU-only pair, refused where there are GPUs to refuse
/// it for.
pub(super) fn graph_flags(cfg: &RunConfig, devices: &[super::Device]) -> Result<(), EngineError> {
    if devices
        .iter()
        .any(|d| matches!(d, super::Device::Gpu { .. }))
    {
        (cfg.cuda_graph.resolve(cfg.sync_bn)).map_err(EngineError::Config)?;
    }
    Ok(())
}

pub(super) fn model(cfg: &RunConfig, train: &Dataset) -> Result<Model, EngineError> {
    let input = match train.image {
        Some([c, h, w]) => Shape::Image { c, h, w },
        None => Shape::Flat(train.features),
    };
    let mut model = Model::new(input, &cfg.model, train.classes).map_err(|e| {
        use crate::data::DataSpec;
        // flat data a picture model cannot take: how the data's format says it holds pictures
        let pictures = match &cfg.data {
            _ if train.image.is_some() || !e.contains("image") => "",
            DataSpec::Csv { .. } => {
                " (if the CSV's rows are pictures, give their shape: --data csv:PATH,shape=CxHxW)"
            }
            DataSpec::Idx { .. } => {
                " (if the IDX file holds 4-d pictures, give their layout: --data idx:IMAGES,LABELS,layout=nchw or layout=nhwc)"
            }
            DataSpec::Synthetic { .. } => " (synthetic pictures: synthetic-images:N,C,H,W,K)",
            _ => "",
        };
        EngineError::Config(format!(
            "{e}; change --model, or --data to data of that shape{pictures}"
        ))
    })?;
    model.label_smoothing = cfg.label_smoothing;
    if let Some(f) = &cfg.freeze {
        let frozen = frozen_tensors(&model, f).map_err(EngineError::Config)?;
        model.freeze(&frozen);
    }
    Ok(model)
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
                    "--freeze {f}: no parameter's name starts with `{q}` (up to a `.`); this model's names look like {}, ...",
                    names.join(", ")
                ));
            }
            all.filter(|&t| p.iter().any(|q| Freeze::under(&model.tensors[t].name, q)))
                .collect()
        }
    };
    if frozen.is_empty() || frozen.len() == model.tensors.len() {
        return Err(format!(
            "--freeze {f} would leave {} of the model's {} tensors to train; leave something to train, and something frozen",
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
        momentum: cfg.momentum,
        no_decay: match cfg.no_decay_bn_bias {
            true => model.no_decay_ranges(),
            false => Vec::new(),
        },
        frozen: model.frozen_ranges(),
        clip_norm: cfg.clip_grad_norm,
        ..Optimizer::new(cfg.optimizer, cfg.weight_decay)
    }
}

/// A global batch past the training split of `samples` takes it all each step: `cfg` trained
/// (its learning rate scaled, its memory counted) with the batch and the accumulation cut to
/// about that, and a note saying so. A resumed run keeps the batch it resumes with (`resumed`'s,
/// or --batch-per-replica's), but its accumulation is cut alike (a command run again with
/// `--resume` brings the flag back).
/// `ranks`: None in a run over several processes, which may hold unequal device counts (their
/// caps would differ): there the keyboard's cap alone applies.
/// A training split of fewer samples than there are ranks (over every process) would leave a
/// rank without a sample to train on: refused.
pub(super) fn a_sample_per_rank(samples: usize, ranks: usize) -> Result<(), EngineError> {
    match ranks {
        r if samples < r => Err(EngineError::Config(format!(
            "the training split has {} for {r} ranks, and each rank trains on at least one a step: lower --val-split, give more data, or fewer --devices",
            crate::text::counted(samples, "sample")
        ))),
        _ => Ok(()),
    }
}

pub(super) fn batch_within_data(
    cfg: RunConfig,
    samples: usize,
    ranks: Option<usize>,
    resumed: Option<&CheckpointMeta>,
    notes: &mut Vec<String>,
) -> RunConfig {
    let Some(ranks) = ranks else {
        return cfg;
    };
    // (a resumed run's batch is its checkpoint's, unless given: a given one is cut as a fresh
    // run's, and its LR follows the batch it trains at; so is the batch a checkpoint's run
    // asked for where its own training split cut it)
    let asked = (resumed.filter(|_| cfg.batch_from.is_none()))
        .and_then(|m| Some((super::resume::batch_asked(m)?, m.per_replica)));
    let cfg = match asked {
        Some((asked, cut_to)) => RunConfig {
            batch_per_replica: asked,
            batch_from: Some(BatchFrom::AskedAgain { cut_to }),
            ..cfg
        },
        None => cfg,
    };
    let cfg = RunConfig {
        batch_cut: None,
        ..cfg
    };
    let accum = cfg.grad_accum.min(samples.div_ceil(ranks).max(1));
    let theirs = resumed.filter(|_| cfg.batch_from.is_none());
    let per_replica = match theirs {
        Some(m) => m.per_replica,
        None => cfg
            .batch_per_replica
            .min(super::control::data_batch_cap(samples, ranks, accum)),
    };
    // (the batch rounded up: the accumulation again, so the global batch ends near the split)
    let accum = accum.min(samples.div_ceil(ranks * per_replica).max(1));
    if theirs.is_some() {
        return RunConfig {
            grad_accum: accum,
            ..cfg
        };
    }
    let cut = (per_replica, accum) != (cfg.batch_per_replica, cfg.grad_accum);
    if !cut {
        return cfg;
    }
    let shares = |b: usize, a: usize| {
        let accumulated = match a {
            1 => String::new(),
            a => format!(" x {a} accumulated"),
        };
        format!(
            "{b} per replica x {}{accumulated}",
            crate::text::counted(ranks, "rank")
        )
    };
    // (the cut batch rounds up, so its product can pass the split by a few: the last shares
    // take fewer, and the note names the split, not the product)
    let all = match samples {
        1 => "it".to_string(),
        n => format!("all {n}"),
    };
    notes.push(format!(
        "a global batch of {} = {} is more than the training split's {}: {}, each step takes {all}",
        shares(cfg.batch_per_replica, cfg.grad_accum),
        cfg.batch_per_replica * ranks * cfg.grad_accum,
        crate::text::counted(samples, "sample"),
        shares(per_replica, accum),
    ));
    RunConfig {
        // (the batch cut, not the accumulation alone: the batch a resume asks for again)
        batch_cut: (per_replica != cfg.batch_per_replica)
            .then_some([cfg.batch_per_replica, per_replica]),
        batch_per_replica: per_replica,
        grad_accum: accum,
        ..cfg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(
        batch: usize,
        accum: usize,
        samples: usize,
        ranks: usize,
    ) -> (usize, usize, Vec<String>) {
        let cfg = RunConfig {
            batch_per_replica: batch,
            grad_accum: accum,
            ..RunConfig::default()
        };
        let mut notes = Vec::new();
        let c = batch_within_data(cfg, samples, Some(ranks), None, &mut notes);
        (c.batch_per_replica, c.grad_accum, notes)
    }

    #[test]
    fn a_global_batch_past_the_training_split_is_cut_to_it_accumulation_counted() {
        assert_eq!(cut(32, 1, 1438, 2), (32, 1, vec![]));
        // 32 x 2 x 32 = 2048 of 1438: 23 a replica
        let (b, a, notes) = cut(32, 32, 1438, 2);
        assert_eq!((b, a), (23, 32));
        assert_eq!(
            notes,
            ["a global batch of 32 per replica x 2 ranks x 32 accumulated = 2048 is more than the training split's 1438 samples: 23 per replica x 2 ranks x 32 accumulated, each step takes all 1438"]
        );
        // one sample a replica is still 2000: the accumulation is cut too
        let (b, a, notes) = cut(1, 1000, 80, 2);
        assert_eq!((b, a), (1, 40));
        assert!(
            notes[0].ends_with("1 per replica x 2 ranks x 40 accumulated, each step takes all 80"),
            "{notes:?}"
        );
        let (b, a, _) = cut(64, 1, 100, 1);
        assert_eq!((b, a), (64, 1));
        assert_eq!(cut(200, 1, 100, 1).0, 100);
        // 2 a replica (1438 / 1000, rounded up) x 500 would be 2000: the accumulation follows
        let (b, a, _) = cut(32, 500, 1438, 2);
        assert_eq!((b, a), (2, 360), "2 x 2 x 360 = 1440");
    }

    #[test]
    fn a_resumed_run_s_batch_flag_is_cut_to_the_split_as_a_fresh_run_s() {
        let meta = crate::engine::checkpoint::CheckpointMeta::example();
        let cfg = RunConfig {
            batch_per_replica: 100_000,
            batch_from: Some(BatchFrom::Given("--batch-per-replica".into())),
            ..RunConfig::default()
        };
        let mut notes = Vec::new();
        let c = batch_within_data(cfg.clone(), 1438, Some(2), Some(&meta), &mut notes);
        assert_eq!(c.batch_per_replica, 719);
        assert!(notes[0].contains("each step takes all 1438"), "{notes:?}");
        // without the flag, the checkpoint's batch stands (its run took it)
        let theirs = RunConfig {
            batch_from: None,
            ..cfg
        };
        let c = batch_within_data(theirs, 1438, Some(2), Some(&meta), &mut Vec::new());
        assert_eq!(
            c.batch_per_replica, 100_000,
            "left to the resume's own settings"
        );
    }

    #[test]
    fn a_training_split_smaller_than_the_ranks_is_refused() {
        let e = a_sample_per_rank(1, 2).unwrap_err().to_string();
        assert!(
            e.contains("the training split has 1 sample for 2 ranks") && e.contains("--val-split"),
            "{e}"
        );
        assert!(a_sample_per_rank(2, 2).is_ok());
        // the one-sample note counts its sample
        assert_eq!(
            cut(32, 1, 1, 1).2,
            ["a global batch of 32 per replica x 1 rank = 32 is more than the training split's 1 sample: 1 per replica x 1 rank, each step takes it"]
        );
    }

    #[test]
    fn a_resumed_run_keeps_its_batch_but_its_accumulation_is_cut_alike() {
        // the checkpoint's 1 a replica; the flags' 32 and 1000 again
        let cfg = RunConfig {
            grad_accum: 1000,
            ..RunConfig::default()
        };
        let mut notes = Vec::new();
        let meta: CheckpointMeta = serde_json::from_value(serde_json::json!({
            "format": "mgtop-checkpoint/2", "step": 1, "epoch": 0, "offset": 0, "per_replica": 1,
            "ranks": 2, "lr": 1e-3, "optimizer": "adam", "optimizer_steps": 1, "dims": [4, 2],
            "seed": 0, "data": "synthetic:100,4,2", "config": {},
        }))
        .unwrap();
        let c = batch_within_data(cfg, 80, Some(2), Some(&meta), &mut notes);
        assert_eq!(c.grad_accum, 40, "{notes:?}");
    }

    #[test]
    fn a_batch_its_checkpoint_s_split_cut_is_asked_for_again_on_more_data() {
        // a run of 19 samples on 2 ranks: 32 asked, cut to 10 (and recorded so)
        let mut notes = Vec::new();
        let first = batch_within_data(RunConfig::default(), 19, Some(2), None, &mut notes);
        assert_eq!(first.batch_cut, Some([32, 10]));
        // (the accumulation alone cut: no batch to ask for again)
        let accumulated = RunConfig {
            batch_per_replica: 2,
            grad_accum: 8,
            ..RunConfig::default()
        };
        let c = batch_within_data(accumulated, 20, Some(2), None, &mut notes);
        assert_eq!(
            (c.batch_per_replica, c.grad_accum, c.batch_cut),
            (2, 5, None)
        );
        assert_eq!(first.record()["batch_cut"], serde_json::json!([32, 10]));
        let meta = CheckpointMeta {
            per_replica: 10,
            config: first.record(),
            ..CheckpointMeta::example()
        };
        // resumed on 180 samples: 32 again, nothing cut
        let c = batch_within_data(RunConfig::default(), 180, Some(2), Some(&meta), &mut notes);
        assert_eq!((c.batch_per_replica, c.batch_cut), (32, None));
        let split = crate::engine::resume::TrainSplit {
            samples: 180,
            fingerprint: 0,
        };
        let r = crate::engine::resume::resumed_settings(&c, &meta, 2, split);
        assert_eq!(r.per_replica, 32);
        assert!(
            r.resume_note.starts_with("batch 32 per replica: the checkpoint's run asked for 32, which its training split cut to 10"),
            "{}",
            r.resume_note
        );
        // a batch the keyboard changed since is the run's own: kept
        let changed = CheckpointMeta {
            per_replica: 8,
            ..meta.clone()
        };
        let c = batch_within_data(
            RunConfig::default(),
            180,
            Some(2),
            Some(&changed),
            &mut notes,
        );
        let r = crate::engine::resume::resumed_settings(&c, &changed, 2, split);
        assert_eq!(r.per_replica, 8);
    }
}
