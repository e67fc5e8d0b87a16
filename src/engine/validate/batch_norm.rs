//! Batch norm over one value per channel: the batch of 1 per replica refused for it, and the
//! short last batch of an epoch that gives it one sample, said; over a few values, said.

use super::EngineError;
use crate::config::{Budget, RunConfig};
use crate::engine::loader::Sharding;
use crate::nn::model::{Model, Node};
use crate::nn::shape::Shape;

/// A batch norm whose statistics a batch of one per replica would make of one value per
/// channel (over a flat vector or 1x1 pictures, on one rank or without `--sync-bn` over
/// `ranks`): it would put out its bias alone, with a variance of 0, as PyTorch refuses. Its
/// name and what it normalises over, where the model has one: a batch of 2 or more per replica is
/// needed.
pub(in crate::engine) fn one_value_batch_norm(
    cfg: &RunConfig,
    model: &Model,
    ranks: usize,
) -> Option<(String, &'static str)> {
    match cfg.sync_bn && ranks > 1 {
        true => None,
        false => one_value_layer(model),
    }
}

/// The batch norms that normalise by the batch's statistics in training (not those `--bn-stats`
/// fixed).
fn on_batch_statistics(model: &Model) -> impl Iterator<Item = &Node> {
    (model.batch_norms().into_iter())
        .filter(|&n| !model.statistics_fixed(n))
        .map(|n| &model.nodes[n])
}

/// The batch norm a micro-batch of one sample makes of one value per channel (over a flat
/// vector or 1x1 pictures), whatever pools its statistics: its name and what it normalises over.
pub(in crate::engine) fn one_value_layer(model: &Model) -> Option<(String, &'static str)> {
    let n = on_batch_statistics(model).find(|n| match model.values[n.inputs[0]] {
        Shape::Image { h, w, .. } => h * w == 1,
        Shape::Flat(_) => true,
    })?;
    let over = match model.values[n.inputs[0]] {
        Shape::Image { .. } => "over 1x1 pictures",
        Shape::Flat(_) => "over a flat vector",
    };
    Some((n.name.clone(), over))
}

/// Why a batch of 1 per replica is refused, for the batch norm `one_value_batch_norm` found.
pub(in crate::engine) fn one_value_refusal((name, over): &(String, &str)) -> String {
    format!(
        "batch norm `{name}` would normalise one value per channel at a batch of 1 per replica ({over}): its output would be its bias alone"
    )
}

/// A run whose batch makes a batch norm of one value per channel (`not_one`, what
/// `one_value_batch_norm` found): refused.
pub(in crate::engine) fn batch_norm_values(
    not_one: Option<&str>,
    per_replica: usize,
) -> Result<(), EngineError> {
    match not_one.filter(|_| per_replica < 2) {
        Some(why) => Err(EngineError::Config(format!(
            "{why}; use --batch-per-replica 2 or more (with a training split of 2 or more samples a rank), or, fine-tuning from --init, --bn-stats running (its running statistics, not the batch's)"
        ))),
        None => Ok(()),
    }
}

/// Whether an epoch of `samples` ends with a batch that gives batch norm one sample to normalise:
/// a rank's micro-batch of one, or with `sync` (`--sync-bn` over ranks) a micro-batch of one
/// over all the ranks.
fn ends_with_one_sample(samples: usize, sharding: &Sharding, sync: bool) -> bool {
    let last = samples % sharding.global_batch();
    let share = |m, r| sharding.piece(last, m, r).1;
    last > 0
        && (0..sharding.accum).any(|m| match sync {
            true => (0..sharding.ranks).map(|r| share(m, r)).sum::<usize>() == 1,
            false => (0..sharding.ranks).any(|r| share(m, r) == 1),
        })
}

/// Where the epoch's short last batch of `samples` gives the batch norm `one_value_layer`
/// found one sample, which it normalises to its bias for that step (PyTorch's would refuse
/// to), in a run whose `budget` gets there: said, with the nearest batch size that avoids it.
pub(in crate::engine) fn one_sample_shares(
    one_value: Option<&(String, &str)>,
    samples: usize,
    sharding: &Sharding,
    sync: bool,
    budget: Budget,
) -> Option<String> {
    let (name, over) = one_value?;
    let reached = match budget {
        Budget::Steps(s) => s.saturating_mul(sharding.global_batch() as u64) >= samples as u64,
        Budget::Epochs(_) => true,
    };
    if !reached || !ends_with_one_sample(samples, sharding, sync) {
        return None;
    }
    let b = sharding.per_replica;
    let fits = |per_replica: usize| {
        let other = Sharding {
            per_replica,
            ..sharding.clone()
        };
        !ends_with_one_sample(samples, &other, sync)
    };
    let avoid = (1..=b.max(64))
        .flat_map(|d| [b + d, b.saturating_sub(d)])
        .find(|&c| c >= 2 && fits(c))
        .map_or(String::new(), |c| {
            format!("; --batch-per-replica {c} avoids it")
        });
    Some(format!(
        "each epoch ends with a batch of {} of the {samples} training samples, which gives batch norm `{name}` one sample to normalise ({over}): its output is its bias alone for that step{avoid}",
        samples % sharding.global_batch()
    ))
}

/// The fewest values per channel any batch norm normalises under which the run is told: its
/// statistics are then noise, and its gradients can grow without bound (a norm of 8e20 at a
/// batch of 2 over 1x1 pictures).
const FEW_VALUES: usize = 8;

/// Where a batch norm normalises fewer than `FEW_VALUES` values per channel (a batch of
/// `per_replica`, over `ranks` with `sync`, times its pictures' pixels): said, with the batch
/// per replica that gives it as many.
pub(in crate::engine) fn few_values(
    model: &Model,
    per_replica: usize,
    ranks: usize,
    sync: bool,
) -> Option<String> {
    let replicas = if sync { ranks } else { 1 };
    let (name, pixels) = on_batch_statistics(model)
        .map(|n| match model.values[n.inputs[0]] {
            Shape::Image { h, w, .. } => (n, h * w),
            Shape::Flat(_) => (n, 1),
        })
        .min_by_key(|&(_, pixels)| pixels)
        .map(|(n, pixels)| (n.name.clone(), pixels))?;
    let values = per_replica * replicas * pixels;
    if !(2..FEW_VALUES).contains(&values) {
        return None;
    }
    let over = match pixels {
        1 => String::new(),
        p => format!(" x {p} pixels"),
    };
    let pooled = match replicas {
        1 => String::new(),
        r => format!(" x {r} ranks (--sync-bn)"),
    };
    let enough = FEW_VALUES.div_ceil(pixels * replicas);
    Some(format!(
        "batch norm `{name}` normalises {values} values per channel (a batch of {per_replica} per replica{pooled}{over}): statistics of so few are noise, and the gradients can grow past any bound (the step lines' grad norm); a batch of {enough} or more per replica gives it {FEW_VALUES}"
    ))
}
