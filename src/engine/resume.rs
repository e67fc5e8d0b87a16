//! What a resumed run trains with: the checkpoint's batch size and LR unless the command line
//! says otherwise, and a line saying which came from where and which settings differ from the
//! checkpoint's run (the command line takes the rest from it: `cli::resumed`).

use std::path::Path;

use super::checkpoint::{self, CheckpointMeta};
use super::EngineError;
use crate::config::{BatchFrom, Budget, RunConfig};
use crate::data::Dataset;
use crate::nn::schedule::LrScaling;

/// A run's training split as a checkpoint records it: its size and a fingerprint of its
/// contents; and of its validation set's, where it is known (`eval` of the run's own set holds
/// the set it reads again to it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct TrainSplit {
    pub samples: usize,
    pub fingerprint: u64,
    pub val_fingerprint: Option<u64>,
}

impl TrainSplit {
    pub fn of(train: &Dataset) -> TrainSplit {
        TrainSplit {
            samples: train.len(),
            fingerprint: super::fingerprint::of_data(train),
            val_fingerprint: None,
        }
    }

    /// The training split's fingerprint as a checkpoint records it (hex), and the validation
    /// set's where it is known.
    pub fn hex(&self) -> (String, Option<String>) {
        let hex = |f: u64| format!("{f:016x}");
        (hex(self.fingerprint), self.val_fingerprint.map(hex))
    }

    /// With the fingerprint of the validation set `val`.
    pub fn validating(self, val: &Dataset) -> TrainSplit {
        TrainSplit {
            val_fingerprint: Some(super::fingerprint::of_data(val)),
            ..self
        }
    }
}

#[derive(Debug, PartialEq)]
pub(super) struct Resumed {
    pub per_replica: usize,
    pub lr: f32,
    pub resume_note: String,
    pub lr_note: String,
    /// The checkpoint's rebalanced shares of the global batch, where this run rebalances on
    /// as many ranks with the same batch.
    pub shares: Option<Vec<usize>>,
}

/// `--batch-per-replica` replaces the checkpoint's batch size when given; `--lr` replaces its
/// LR when given, and otherwise the checkpoint's LR follows the global batch (per-replica batch
/// x ranks x `--grad-accum`) by the run's `--lr-scaling` rule (as a batch-size change during a
/// run does). A training split of another size or other contents than the checkpoint's run had
/// under the same data settings (the data changed) is said: its order and validation split are
/// not the run's it continues.
pub(super) fn resumed_settings(
    cfg: &RunConfig,
    meta: &CheckpointMeta,
    ranks: usize,
    split: TrainSplit,
) -> Resumed {
    let per_replica = match cfg.batch_from {
        Some(_) => cfg.batch_per_replica,
        None => meta.per_replica,
    };
    let resume_note = match &cfg.batch_from {
        Some(BatchFrom::AskedAgain { asked, cut_to }) => format!(
            "batch {per_replica} per replica: the checkpoint's run asked for {asked}, which its training split cut to {cut_to}"
        ),
        Some(BatchFrom::Given(given)) if per_replica == meta.per_replica => {
            format!("batch {per_replica} per replica ({given}, as in the checkpoint)")
        }
        Some(BatchFrom::Given(given)) => format!(
            "batch {per_replica} per replica from {given} (the checkpoint had {})",
            meta.per_replica
        ),
        None => format!("batch {per_replica} per replica from the checkpoint"),
    };
    let mut changed = changed(cfg, meta);
    let train_samples = split.samples;
    let ours = split.hex().0;
    if let Some(n) = meta.train_samples.filter(|&n| n != train_samples) {
        changed.push(format!(
            "a training split of {train_samples} samples (the checkpoint's run had {n}: the data or its validation split changed, so the sample order is not the one it trained on)"
        ));
    } else if meta.train_fingerprint.as_ref().is_some_and(|t| *t != ours)
        && same_data_settings(cfg, meta)
    {
        changed.push(format!(
            "the training data changed (the same --data and {train_samples} samples, other contents: its batches are not the ones the checkpoint's run trained on)"
        ));
    }
    // the global batch counts accumulated micro-batches
    let old_accum = meta.grad_accum();
    let (old, new) = (
        crate::config::step_samples(
            meta.per_replica,
            meta.ranks,
            old_accum,
            meta.train_samples.unwrap_or(0),
        ),
        crate::config::step_samples(per_replica, ranks, cfg.grad_accum, train_samples),
    );
    // (said even where --devices changed: a run over several processes records process 0's
    // --devices, which is not its ranks)
    if meta.ranks != ranks {
        changed.push(format!(
            "{} (the checkpoint's run had {}: {})",
            crate::text::counted(ranks, "rank"),
            meta.ranks,
            other_ranks(old, new, ranks * cfg.grad_accum)
        ));
    }
    let shares = (meta.split.clone())
        .filter(|_| cfg.rebalance && meta.ranks == ranks && meta.per_replica == per_replica);
    let resume_note = match &shares {
        Some(s) => format!(
            "{resume_note}, rebalanced as the checkpoint's run was ({} per rank)",
            s.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("/")
        ),
        None => resume_note,
    };
    let resume_note = match changed.is_empty() {
        true => resume_note,
        false => format!("{resume_note}; {}", changed.join(", ")),
    };
    let (lr, lr_note) = match cfg.lr {
        Some(lr) => (lr, format!("from --lr; the checkpoint had {:.2e}", meta.lr)),
        None if old != new => {
            let lr = cfg.lr_scaling().rescale(meta.lr, old, new);
            (
                lr,
                format!(
                    "the checkpoint's {:.2e}, {} scaling from a global batch of {old} to {new}",
                    meta.lr,
                    cfg.lr_scaling()
                ),
            )
        }
        None => (meta.lr, "from the checkpoint".to_string()),
    };
    Resumed {
        per_replica,
        lr,
        resume_note,
        lr_note,
        shares,
    }
}

/// What a resume on other ranks than the checkpoint's run had keeps of it, its global batch
/// `old` now `new` over `parts` (ranks x micro-batches): the same global batch takes the same
/// samples a step, split otherwise; another, other batches, and the batch per replica that
/// keeps it where there is one (ranks are each process's --devices over the processes).
fn other_ranks(old: usize, new: usize, parts: usize) -> String {
    if old == new {
        return format!("the same global batch of {new}, so each step takes the same samples, split over the ranks otherwise (batch norm without --sync-bn and dropout see other batches per replica, and sums add up in another order)");
    }
    let keep = match old % parts.max(1) {
        0 if old > 0 => format!(
            "--batch-per-replica {} keeps its global batch of {old}",
            old / parts.max(1)
        ),
        _ => "as many ranks keep it (each process's --devices, times the processes)".into(),
    };
    format!("a global batch of {new} where it had {old}: its batches and so its losses differ from the uninterrupted run's; {keep}")
}

/// The batch per replica the checkpoint's run asked for, where its training split cut it to
/// the batch the checkpoint has (a small data set; not one the keyboard changed since): a
/// resumed run that gives none asks for it again.
pub(super) fn batch_asked(meta: &CheckpointMeta) -> Option<usize> {
    let cut = meta.config.get("batch_cut")?.as_array()?;
    let [asked, to] = [cut.first()?, cut.get(1)?].map(|v| v.as_u64().map(|v| v as usize));
    let asked = asked.filter(|_| to == Some(meta.per_replica))?;
    (1..=crate::engine::control::MAX_BATCH)
        .contains(&asked)
        .then_some(asked)
}

/// The settings that choose the training split's samples, and their size (which the fingerprint
/// covers: a resume at another `--image-size` changes it), are the checkpoint's run's (where
/// they differ, `changed` says so).
fn same_data_settings(cfg: &RunConfig, meta: &CheckpointMeta) -> bool {
    let ours = cfg.record();
    let null = serde_json::Value::Null;
    let at = |m: &serde_json::Value, k: &str| m.get(k).unwrap_or(&null).clone();
    cfg.seed == meta.seed
        && ["data", "val_data", "val_split", "image_size"]
            .iter()
            .all(|k| same_setting(k, &at(&ours, k), &at(&meta.config, k)))
}

/// Whether recorded setting `k` is `a` in one record and `b` in the other: numbers as the run
/// holds them (float32: older checkpoints wrote 0.1 as 0.10000000149...), data sets as what
/// they read (older checkpoints spelled a CSV's default label column out).
fn same_setting(k: &str, a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use crate::data::DataSpec;
    let spec = |v: &serde_json::Value| v.as_str()?.parse::<DataSpec>().ok();
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) if a.is_f64() || b.is_f64() => x as f32 == y as f32,
        _ if matches!(k, "data" | "val_data") => match (spec(a), spec(b)) {
            (Some(x), Some(y)) => x == y,
            _ => a == b,
        },
        _ => a == b,
    }
}

/// The recorded settings (`RunConfig::record`) the run changes from the checkpoint's run, as
/// `--flag ours (the checkpoint had theirs)`; settings a checkpoint from before they were
/// recorded lacks are not compared, nor the LR (`lr_note` says where it came from).
fn changed(cfg: &RunConfig, meta: &CheckpointMeta) -> Vec<String> {
    let mut ours = cfg.record();
    let mut theirs = meta.config.clone();
    if let Some(t) = theirs.as_object_mut() {
        t.entry("seed").or_insert(meta.seed.into());
    }
    // the LR scaling in use, where not given its optimizer's rule
    ours["lr_scaling"] = cfg.lr_scaling().to_string().into();
    if theirs.get("lr_scaling").is_some_and(|v| v.is_null()) {
        let optimizer = theirs["optimizer"].as_str().and_then(|o| o.parse().ok());
        if let Some(o) = optimizer {
            theirs["lr_scaling"] = LrScaling::for_optimizer(o).to_string().into();
        }
    }
    let (Some(ours), Some(theirs)) = (ours.as_object(), theirs.as_object()) else {
        return Vec::new();
    };
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "none".into(),
        v => v.to_string(),
    };
    // the budget is one setting: steps for epochs is a change too
    let budget = |m: &serde_json::Map<String, serde_json::Value>| {
        ["steps", "epochs"]
            .into_iter()
            .find_map(|k| Some(format!("--{k} {}", m.get(k).filter(|v| !v.is_null())?)))
    };
    let budget = match (budget(ours), budget(theirs)) {
        (Some(o), Some(t)) if o.split(' ').next() != t.split(' ').next() => {
            Some(format!("{o} (the checkpoint had {t})"))
        }
        _ => None,
    };
    let settings = (ours.iter())
        .filter(|(k, _)| !["lr_flag", "batch_cut", "grad_accum_cut", "init"].contains(&k.as_str()))
        .filter_map(|(k, v)| {
            let t = theirs.get(k)?;
            (!same_setting(k, v, t)).then(|| {
                let flag = k.replace('_', "-");
                // (a switch as it is given, clipping turned off as it is; a setting left unset
                // by the checkpoint's run)
                let ours = match v {
                    serde_json::Value::Bool(b) => format!("--{flag}={b}"),
                    serde_json::Value::Null if k == "clip_grad_norm" => format!("--{flag} 0"),
                    v => format!("--{flag} {}", text(v)),
                };
                let theirs = match t {
                    serde_json::Value::Null => "the default".into(),
                    t => text(t),
                };
                // the split drawn anew: what the run validated on is trained on
                let drawn = cfg.inputs.val_data.is_none() && cfg.inputs.val_fraction.is_none_or(|f| f > 0.0);
                let redrawn = match k.as_str() {
                    "seed" | "val_split" if drawn => ": its train/validation split is drawn anew, so samples it validated on may now be trained on",
                    _ => "",
                };
                format!("{ours} (the checkpoint had {theirs}{redrawn})")
            })
        });
    budget.into_iter().chain(settings).collect()
}

/// The checkpoint a run resumes from (`path`: a checkpoint or a directory of them), read by
/// process 0 before the data loads; refused where it already reached the run's budget.
pub(super) fn point(cfg: &RunConfig, path: &Path) -> Result<CheckpointMeta, EngineError> {
    let dir = checkpoint::resolve(path)?;
    let meta = checkpoint::read_meta(&dir)?;
    match budget_reached(cfg.budget, meta.step, meta.epoch) {
        Some(why) => Err(EngineError::Config(format!(
            "nothing to resume: {} {why}",
            dir.display()
        ))),
        None => Ok(meta),
    }
}

/// Why a run resumed at `step` in epoch `epoch` (0-based, the one in progress) would train
/// nothing under `budget`.
pub(super) fn budget_reached(budget: Budget, step: u64, epoch: u64) -> Option<String> {
    match budget {
        Budget::Steps(s) if step >= s => Some(format!(
            "is at step {step}, and --steps is {s}: pass a larger --steps to train further"
        )),
        Budget::Epochs(e) if epoch >= e => Some(format!(
            "has finished {}, and --epochs is {e}: pass a larger --epochs (or --steps) to train further",
            crate::text::counted(epoch as usize, "epoch")
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
