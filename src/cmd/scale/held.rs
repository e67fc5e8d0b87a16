//! What `scale` needs besides timing: the strategies to compare, and the held-out split each
//! point's final model is validated on.

use crate::backend::{CpuReplica, Replica, TrainState};
use crate::config::RunConfig;
use crate::data::{self, Dataset};
use crate::engine::strategy::Strategy;
use crate::engine::EngineError;
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
    let list: Vec<Strategy> = (items.iter())
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
        .collect::<Result<_, String>>()?;
    // (as parsed: local-sgd:08 is local-sgd:8)
    if let Some(twice) =
        (list.iter().enumerate()).find_map(|(i, s)| list[..i].contains(s).then_some(s))
    {
        return Err(format!(
            "--strategies: {twice} is given twice: list each strategy once"
        ));
    }
    if warmup.is_some() && !list.iter().any(|s| matches!(s, Strategy::LocalSgd { .. })) {
        return Err(format!(
            "--local-sgd-warmup is for the local-sgd strategies of --strategies, and {} has none: drop the flag, or add one (e.g. local-sgd:8)",
            items.join(",")
        ));
    }
    Ok(list)
}

/// The strategies to time, local SGD's made to step alone from the first timed step (its
/// synchronous warm-up the `untimed` steps') where --local-sgd-warmup was not `given`: its
/// points time local SGD, not the mirrored steps of its default warm-up.
pub fn timing_local_sgd(listed: Vec<Strategy>, given: bool, untimed: u64) -> Vec<Strategy> {
    (listed.into_iter())
        .map(|s| match s {
            Strategy::LocalSgd { every, moments, .. } if !given => Strategy::LocalSgd {
                every,
                warmup: untimed,
                moments,
            },
            s => s,
        })
        .collect()
}

/// How local SGD's points are timed, where the grid has one: stepping alone in the timed
/// window, or (a warm-up given past the `untimed` steps) partly synchronous.
pub fn local_sgd_line(strategies: &[Strategy], untimed: u64) -> Option<String> {
    let warmup = strategies.iter().find_map(|s| match s {
        Strategy::LocalSgd { warmup, .. } => Some(*warmup),
        _ => None,
    })?;
    Some(match warmup > untimed {
        true => format!(
            "note: local SGD's --local-sgd-warmup {warmup} outlasts the {untimed} untimed steps: its points time synchronous (mirrored) steps too; --local-sgd-warmup {untimed} times local SGD alone"
        ),
        false => format!(
            "local SGD: synchronous for the first {warmup} steps (--local-sgd-warmup), stepping alone in the timed window"
        ),
    })
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
        let model = Model::new(v.input_shape(), &base.model, v.classes).ok()?;
        let mut replica = CpuReplica::new(model, base.optimizer, 0.0, state.clone());
        let (_, correct) = replica.evaluate(&v.x, &v.y, v.len());
        Some(correct as f32 / v.len() as f32)
    }
}
