//! A run's training settings as its checkpoints record them (`state.json`'s `config`): keys
//! named as the flags are (with `_` for `-`), values as the flags take them, paths absolute. A
//! run resumed from a checkpoint takes them where its own flags and config file are silent
//! (`cli::resumed`), and says which of its settings differ (`engine::resume`).

use serde_json::{json, Map, Value};

use super::log_every::LogEvery;
use super::strategy::Strategy;
use super::{Budget, RunConfig};
use crate::data::DataSpec;

impl RunConfig {
    /// The settings that decide what a run trains and how: everything a resumed run must
    /// share with the run it continues, and the LR as given (`lr_flag`, for the record).
    pub fn record(&self) -> Value {
        let inputs = &self.inputs;
        let mut v = json!({
            // (an explicit --name: a derived one follows the data and model)
            "name": self.name,
            "model": self.model.to_string(),
            "data": absolute(&self.data),
            "devices": self.devices.to_string(),
            "seed": self.seed,
            "val_split": inputs.val_fraction,
            "val_data": inputs.val_data.as_ref().map(absolute),
            "image_size": inputs.image_size,
            "augment": inputs.augment.to_string(),
            "normalize": inputs.normalize.to_string(),
            "optimizer": self.optimizer.to_string(),
            "weight_decay": short(self.weight_decay),
            "momentum": short(self.momentum()),
            "no_decay_bn_bias": self.no_decay_bn_bias,
            "label_smoothing": short(self.label_smoothing),
            // (null: not clipped)
            "clip_grad_norm": self.clip_grad_norm.map(short),
            "sync_bn": self.sync_bn,
            "bn_stats": self.bn_stats.to_string(),
            "precision": self.precision.to_string(),
            "grad_dtype": self.grad_dtype.to_string(),
            "schedule": self.schedule.to_string(),
            "warmup": self.warmup,
            // as given (null: the optimizer's rule, which follows a resume's --optimizer)
            "lr_scaling": self.lr_scaling.map(|l| l.to_string()),
            "grad_accum": self.grad_accum,
            "lr_flag": self.lr.map(short),
            "strategy": self.strategy.to_string(),
            "rebalance": self.rebalance,
            "freeze": self.freeze.as_ref().map(|f| f.to_string()),
            // (the weights the line of runs began from: recorded, never taken by a resume)
            "init": self.line_init,
            "checkpoint_every": self.checkpoint_every,
            "checkpoint_best": self.checkpoint_best,
            "val_every": self.val_every,
            "keep_checkpoints": self.keep_checkpoints,
            // (a number as one, auto as the word)
            "log_every": match self.log_every {
                LogEvery::Steps(n) => Value::from(n),
                LogEvery::Auto => Value::from("auto"),
            },
            // (null: the training split did not cut the batch asked for)
            "batch_cut": self.batch_cut,
            "grad_accum_cut": self.grad_accum_cut,
        });
        let map: &mut Map<String, Value> = v.as_object_mut().expect("an object");
        match self.budget {
            Budget::Steps(s) => map.insert("steps".into(), s.into()),
            Budget::Epochs(e) => map.insert("epochs".into(), e.into()),
        };
        if let Strategy::LocalSgd { warmup, .. } = self.strategy {
            map.insert("local_sgd_warmup".into(), warmup.into());
        }
        v
    }
}

impl Strategy {
    /// The strategy a checkpoint's `config` records, with its warm-up (None: not recorded, or
    /// not one this build reads).
    pub fn recorded(config: &Value) -> Option<Strategy> {
        let s: Strategy = config.get("strategy")?.as_str()?.parse().ok()?;
        match config.get("local_sgd_warmup").and_then(Value::as_u64) {
            Some(w) => s.with_warmup(w).ok(),
            None => Some(s),
        }
    }
}

/// A data spec with its paths absolute, where that reads back as the same data (a path with a
/// comma in it does not: then as given).
fn absolute(spec: &DataSpec) -> String {
    let abs = spec.absolute();
    match abs.to_string().parse::<DataSpec>() {
        Ok(back) if back == abs => abs.to_string(),
        _ => spec.to_string(),
    }
}

/// A float32 as the shortest decimal that reads back as it (0.1, not 0.10000000149011612).
pub fn short(x: f32) -> Value {
    x.to_string()
        .parse::<f64>()
        .map_or(Value::Null, Value::from)
}
