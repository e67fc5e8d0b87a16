//! Which tensors began training after the run's first optimizer step (frozen, then trained
//! by a resumed run), and after which step: Adam's bias correction counts each tensor's own
//! steps, as PyTorch keeps a step count per parameter. A checkpoint's `state.json` names them
//! (`optimizer_began`); a resumed run takes a tensor whose second moments are all zero (frozen
//! in the checkpoint's run, or never given a gradient) as beginning at the checkpoint's step.

use std::collections::BTreeMap;
use std::ops::Range;

use super::CheckpointMeta;
use crate::nn::model::Model;
use crate::nn::optim::OptState;

/// Each tensor that begins or began training late, as parameter ranges with the optimizer
/// step they began after, in order (`Optimizer::began`), on resuming `meta`'s checkpoint whose
/// optimizer state (laid out over every parameter) is `opt`.
pub fn ranges(model: &Model, meta: &CheckpointMeta, opt: &OptState) -> Vec<(Range<usize>, u64)> {
    let n = model.n_params;
    (model.tensors.iter())
        .filter_map(|t| {
            let r = t.range();
            let fresh = opt.t > 0 && opt.v.len() == n && opt.v[r.clone()].iter().all(|&x| x == 0.0);
            let began = match fresh {
                true => opt.t,
                false => meta.optimizer_began.get(&t.name).copied().unwrap_or(0),
            };
            (began > 0).then_some((r, began))
        })
        .collect()
}

/// The tensors of `began` (`ranges`) that train by name, for `state.json` (a frozen one's zero
/// moments say it anew at the next resume that trains it).
pub fn names(model: &Model, began: &[(Range<usize>, u64)]) -> BTreeMap<String, u64> {
    (model.tensors.iter().enumerate())
        .filter(|(i, _)| !model.frozen.contains(i))
        .filter_map(|(_, t)| {
            let r = t.range();
            let (_, b) = began.iter().find(|(g, _)| g.contains(&r.start))?;
            Some((t.name.clone(), *b))
        })
        .collect()
}
