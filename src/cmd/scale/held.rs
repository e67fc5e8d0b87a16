//! What `scale` needs besides timing: the strategies to compare, and the held-out split each
//! point's final model is validated on.

use crate::backend::{CpuReplica, Replica, TrainState};
use crate::config::RunConfig;
use crate::data::{self, Dataset};
use crate::engine::strategy::Strategy;
use crate::engine::EngineError;
use crate::nn::layers::Shape;
use crate::nn::model::Model;

/// `--strategies mirrored,central-storage,local-sgd:8,moments` (a `moments` item belongs to
/// the local-sgd before it); `warmup` (`--local-sgd-warmup`) applies to every local-sgd of the list.
pub fn strategies(
    list: &str,
    warmup: Option<u64>,
    base: &RunConfig,
) -> Result<Vec<Strategy>, String> {
    let mut items: Vec<String> = Vec::new();
    for item in list.split(',').map(str::trim) {
        match items.last_mut() {
            Some(last) if item == "moments" => *last += ",moments",
            _ => items.push(item.to_string()),
        }
    }
    items
        .iter()
        .map(|s| {
            let s = s
                .parse::<Strategy>()
                .map_err(|e| format!("--strategies: {e}"))?;
            Ok(match (s, warmup, base.strategy) {
                (Strategy::LocalSgd { .. }, Some(w), _) => s.with_warmup(w)?,
                (Strategy::LocalSgd { .. }, None, Strategy::LocalSgd { warmup, .. }) => {
                    s.with_warmup(warmup)?
                }
                _ => s,
            })
        })
        .collect()
}

/// The held-out split of the run's data (the training runs leave it out).
pub struct Held {
    val: Dataset,
}

impl Held {
    pub fn load(base: &RunConfig) -> Result<Held, EngineError> {
        let loaded = data::load(&base.data, &base.inputs, base.seed)?;
        Ok(Held { val: loaded.val })
    }

    /// The accuracy of `state` on the held-out split; `None` where it is empty.
    pub fn accuracy(&self, base: &RunConfig, state: &TrainState) -> Option<f32> {
        let v = &self.val;
        if v.is_empty() {
            return None;
        }
        let input = match v.image {
            Some([c, h, w]) => Shape::Image { c, h, w },
            None => Shape::Flat(v.features),
        };
        let model = Model::new(input, &base.model, v.classes).ok()?;
        let mut replica = CpuReplica::new(model, base.optimizer, 0.0, state.clone());
        let (_, correct) = replica.evaluate(&v.x, &v.y, v.len());
        Some(correct as f32 / v.len() as f32)
    }
}
