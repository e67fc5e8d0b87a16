//! What a resumed run trains with where its flags and config file are silent: the settings of
//! the run it continues, as that run's checkpoints record them (`RunConfig::record`). So
//! `--resume RUN_DIR` alone continues a run as it was (model, data, budget, schedule, seed,
//! ...); the batch size and LR follow the engine's own rules (`engine::resume`).

use serde_json::{Map, Value};

use super::TrainArgs;
use crate::config::RunConfig;
use crate::engine::checkpoint::CheckpointMeta;

/// The recorded settings a resumed run takes, as the flags name them (with `_` for `-`).
const TAKEN: [&str; 30] = [
    "name",
    "model",
    "data",
    "devices",
    "seed",
    "val_split",
    "val_data",
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
    "sync_bn",
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
    "log_every",
];

/// The settings of the checkpoint's run, as flags (checkpoints from before they were all
/// recorded give what they have: the model, data, seed, optimizer and its settings).
fn recorded(meta: &CheckpointMeta) -> Map<String, Value> {
    let mut taken: Map<String, Value> = TAKEN
        .iter()
        .filter_map(|k| Some((k.replace('_', "-"), meta.config.get(*k)?.clone())))
        .filter(|(_, v)| !v.is_null())
        .collect();
    taken.entry("seed").or_insert(meta.seed.into());
    taken.entry("data").or_insert(meta.data.clone().into());
    taken
}

/// `args` (the flags over the config file) over the settings of the run `meta`'s checkpoint
/// continues; and the `--flag value`s taken from the checkpoint that differ from the defaults,
/// for a start-up line (empty where none did).
pub fn under_checkpoint(
    args: TrainArgs,
    meta: &CheckpointMeta,
) -> Result<(TrainArgs, String), String> {
    let mut taken = recorded(meta);
    let given = serde_json::to_value(&args).map_err(|e| e.to_string())?;
    let given = |k: &str| !matches!(given.get(k), None | Some(Value::Null | Value::Bool(false)));
    // a budget, or a strategy, given replaces the recorded one whole
    if given("steps") || given("epochs") {
        taken.remove("steps");
        taken.remove("epochs");
    }
    if given("strategy") {
        taken.remove("local-sgd-warmup");
    }
    taken.retain(|k, _| !given(k));
    let defaults = RunConfig::default().record();
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
        format!("its state.json records settings this version cannot read ({e}): give the run's flags yourself")
    })?;
    Ok((args.merge(from_checkpoint), said.join(" ")))
}
