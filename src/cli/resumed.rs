//! What a resumed run trains with where its flags and config file are silent: the settings of
//! the run it continues, as that run's checkpoints record them (`RunConfig::record`). So
//! `--resume RUN_DIR` alone continues a run as it was (model, data, budget, schedule, seed,
//! ...); the batch size and LR follow the engine's own rules (`engine::resume`).

use serde_json::{Map, Value};

use super::TrainArgs;
use crate::config::{record, RunConfig};
use crate::engine::checkpoint::CheckpointMeta;

/// The recorded settings a resumed run takes, as the flags name them (with `_` for `-`).
const TAKEN: [&str; 35] = [
    "name",
    "model",
    "data",
    "devices",
    "seed",
    "val_split",
    "val_data",
    "val_every",
    "image_size",
    "augment",
    "normalize",
    "steps",
    "epochs",
    "optimizer",
    "weight_decay",
    "momentum",
    "no_decay_bn_bias",
    "label_smoothing",
    "clip_grad_norm",
    "sync_bn",
    "bn_stats",
    "precision",
    "grad_dtype",
    "schedule",
    "warmup",
    "lr_scaling",
    "grad_accum",
    "strategy",
    "local_sgd_warmup",
    "rebalance",
    "freeze",
    "checkpoint_every",
    "checkpoint_best",
    "keep_checkpoints",
    "log_every",
];

/// The settings of the checkpoint's run, as flags (checkpoints from before they were all
/// recorded give what they have: the model, data, seed, devices, optimizer and its settings,
/// schedule, warm-up, strategy, accumulation, LR scaling and batch-norm switches).
pub fn recorded(meta: &CheckpointMeta) -> Map<String, Value> {
    let mut taken: Map<String, Value> = TAKEN
        .iter()
        .filter_map(|k| Some((k.replace('_', "-"), meta.config.get(*k)?.clone())))
        .filter(|(_, v)| !v.is_null())
        // float32s as the run held them (older checkpoints widened 0.1 to 0.10000000149...)
        .map(|(k, v)| match v.as_f64().filter(|_| v.is_f64()) {
            Some(x) => (k, record::short(x as f32)),
            None => (k, v),
        })
        .collect();
    accumulation_asked(&mut taken, meta);
    taken.entry("seed").or_insert(meta.seed.into());
    taken.entry("data").or_insert(meta.data.clone().into());
    taken
}

/// `args` (the flags over the config file) over the settings of the run `meta`'s checkpoint
/// continues (a budget, a strategy, a validation set given replace the recorded one whole); and the `--flag value`s taken from the checkpoint that differ from the defaults,
/// for a start-up line (empty where none did).
pub fn under_checkpoint(
    args: TrainArgs,
    meta: &CheckpointMeta,
) -> Result<(TrainArgs, String), String> {
    under_record(args, recorded(meta))
}

/// An accumulation the run's training split cut: the one it asked for (cut again where the
/// split is still too small, as a fresh run's; every process takes it from process 0's
/// `recorded`, so they agree).
fn accumulation_asked(taken: &mut Map<String, Value>, meta: &CheckpointMeta) {
    let cut = meta.config.get("grad_accum_cut").and_then(Value::as_array);
    if let Some([asked, to]) = cut.map(Vec::as_slice) {
        if taken.get("grad-accum") == Some(to) && asked.as_u64().is_some_and(|a| a >= 1) {
            taken.insert("grad-accum".into(), asked.clone());
        }
    }
}

/// `under_checkpoint` with the checkpoint's settings already read (`recorded`): processes
/// other than process 0 get them from it, as the checkpoint need only be on its machine.
pub fn under_record(
    args: TrainArgs,
    mut taken: Map<String, Value>,
) -> Result<(TrainArgs, String), String> {
    // which settings the flags and file gave (every recorded setting is an option: a switch
    // given `=false` is given)
    let given = super::origin::given(&args)?;
    // a budget given replaces the recorded one whole; a strategy given, its warm-up too
    // unless both are local SGD (another period keeps the run's synchronous start)
    if given("steps") || given("epochs") {
        taken.remove("steps");
        taken.remove("epochs");
    }
    // the validation set is one choice: a split or a data set given replaces either recorded
    if given("val-split") || given("val-data") {
        taken.remove("val-split");
        taken.remove("val-data");
    }
    let local_sgd = |s: Option<&str>| s.is_some_and(|s| s.starts_with("local-sgd"));
    let recorded_strategy = taken.get("strategy").and_then(Value::as_str);
    if given("strategy") && !(local_sgd(recorded_strategy) && local_sgd(args.strategy.as_deref())) {
        taken.remove("local-sgd-warmup");
    }
    taken.retain(|k, _| !given(k));
    // (the LR scaling's default is the optimizer's rule)
    let optimizer = (args.optimizer.clone())
        .or_else(|| taken.get("optimizer")?.as_str().map(String::from))
        .and_then(|o| o.parse().ok())
        .unwrap_or(RunConfig::default().optimizer);
    // (a momentum recorded for an optimizer without one is its default, not the run's choice)
    if !optimizer.has_momentum() {
        taken.remove("momentum");
    }
    let mut defaults = RunConfig::default().record();
    defaults["lr_scaling"] = crate::nn::schedule::LrScaling::for_optimizer(optimizer)
        .to_string()
        .into();
    let said: Vec<String> = (taken.iter())
        .filter(|(k, v)| defaults.get(k.replace('-', "_")) != Some(*v))
        .filter_map(|(k, v)| match v {
            Value::Bool(true) => Some(format!("--{k}")),
            Value::Bool(false) => None,
            Value::String(s) => Some(format!("--{k} {s}")),
            v => Some(format!("--{k} {v}")),
        })
        .collect();
    let from_checkpoint: TrainArgs = serde_json::from_value(Value::Object(taken)).map_err(|e| {
        format!("its state.json records settings this version cannot read ({e}){UNREADABLE_FIX}")
    })?;
    Ok((args.merge(from_checkpoint), said.join(" ")))
}

/// What the refusal of a state.json whose settings cannot be read ends with.
const UNREADABLE_FIX: &str = ": give the run's flags yourself";

/// The settings of the run that wrote the checkpoint `point`, for a command that takes every
/// one of them from it and has no flags to replace them (`eval`): a setting refused is said as
/// the checkpoint's, to be mended there.
pub fn of_checkpoint(point: &std::path::Path) -> Result<RunConfig, String> {
    let args = TrainArgs {
        resume: Some(point.to_path_buf()),
        ..TrainArgs::default()
    };
    args.resolve().map(|(cfg, _)| cfg).map_err(|e| {
        let e = e.replace(&format!("--resume {}: ", point.display()), "");
        let e = e.replace(super::origin::TAKEN_FIX, "");
        let e = e.strip_suffix(UNREADABLE_FIX).unwrap_or(&e);
        format!(
            "checkpoint {}: the settings it records: {e}; its state.json was edited or damaged: \
             mend it, or take another checkpoint of the run",
            point.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_accumulation_the_split_cut_is_asked_for_again() {
        let meta = |config: Value| CheckpointMeta {
            config,
            ..CheckpointMeta::example()
        };
        let accum = |m: &CheckpointMeta| recorded(m)["grad-accum"].clone();
        let cut = meta(serde_json::json!({ "grad_accum": 5, "grad_accum_cut": [8, 5] }));
        assert_eq!(accum(&cut), 8);
        // not cut, or a record that does not add up: as recorded
        let whole = meta(serde_json::json!({ "grad_accum": 5, "grad_accum_cut": null }));
        assert_eq!(accum(&whole), 5);
        let odd = meta(serde_json::json!({ "grad_accum": 5, "grad_accum_cut": [8, 4] }));
        assert_eq!(accum(&odd), 5);
        let zero = meta(serde_json::json!({ "grad_accum": 5, "grad_accum_cut": [0, 5] }));
        assert_eq!(accum(&zero), 5);
    }
}
