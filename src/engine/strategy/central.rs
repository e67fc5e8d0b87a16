//! Central storage (TensorFlow's CentralStorageStrategy): one copy of the parameters and the
//! optimizer state on the host. Each step every device sends its gradients to the host, where
//! they are summed in fixed rank order (the collective's), rank 0 applies one optimizer step to
//! the host copy, and every device receives the new parameters. Same arithmetic as mirrored.
//!
//! The host copy is shared by the worker threads of this process: central storage is for one
//! process (the devices of one machine).

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use super::{Moved, Strategy};
use crate::backend::{Replica, StepEnd, TrainState, AUX};
use crate::comm::{Collective, CollectiveError};
use crate::config::RunConfig;
use crate::nn::optim::{self, OptState, Optimizer};

/// The host's copy of the model.
pub struct Store {
    state: RwLock<TrainState>,
    optimizer: Optimizer,
}

impl Store {
    /// The store of `state` (laid out over every parameter, as checkpoints are); it keeps the
    /// optimizer's own state (`Optimizer::compact`: no moments for frozen parameters). Batch
    /// norm's running statistics stay on the devices (each normalises its own batches).
    pub fn new(state: TrainState, optimizer: Optimizer) -> Arc<Store> {
        let opt = optimizer.compact(&state.opt, state.params.len());
        Arc::new(Store {
            state: RwLock::new(TrainState {
                opt,
                buffers: Vec::new(),
                ..state
            }),
            optimizer,
        })
    }

    /// Central storage: the store, holding `state`, and what each device starts from (the
    /// parameters, no optimizer state). Other strategies: no store, every device gets `state`.
    pub fn for_run(
        cfg: &RunConfig,
        optimizer: &Optimizer,
        state: TrainState,
    ) -> (Option<Arc<Store>>, TrainState) {
        match cfg.strategy {
            Strategy::CentralStorage => {
                let device = Store::device_state(&state);
                let store = Store::new(state, optimizer.clone());
                (Some(store), device)
            }
            _ => (None, state),
        }
    }

    /// The state laid out over every parameter, with the devices' running statistics `buffers`.
    pub fn export(&self, buffers: Vec<f32>) -> TrainState {
        let st = self.state.read().unwrap_or_else(|e| e.into_inner());
        TrainState {
            opt: self.optimizer.expand(&st.opt, st.params.len()),
            params: st.params.clone(),
            buffers,
        }
    }

    /// What a device starts from: the parameters, and no optimizer state.
    pub fn device_state(state: &TrainState) -> TrainState {
        TrainState {
            params: state.params.clone(),
            opt: OptState {
                t: state.opt.t,
                m: Vec::new(),
                v: Vec::new(),
            },
            buffers: state.buffers.clone(),
        }
    }
}

/// Gradients to the host, summed across ranks there; the step's global end (its metrics, and
/// the norm over the parameters the store's optimizer trains, which its update clips by).
pub(super) fn exchange(
    store: &Store,
    replica: &mut dyn Replica,
    coll: &mut dyn Collective,
    host: &mut Vec<f32>,
) -> Result<(StepEnd, Moved), CollectiveError> {
    // (never late under central storage: this step's end)
    replica.finish_local(&*coll)?;
    let mut moved = Moved::default();
    let t = Instant::now();
    replica.grads_to_host(host);
    moved.transfer = t.elapsed();
    moved.reduced(coll.all_reduce_sum(host)?);
    let n = host.len() - AUX;
    let end = StepEnd {
        slots: host[n..].try_into().expect("AUX metric slots"),
        grad_sumsq: store.optimizer.grad_sumsq(&host[..n]),
    };
    Ok((end, moved))
}

/// Rank 0 steps the host copy with the summed gradients (of the step that `end` ended);
/// every rank then receives it.
pub(super) fn update(
    store: &Store,
    replica: &mut dyn Replica,
    coll: &mut dyn Collective,
    (grads, end): (&[f32], &StepEnd),
    lr: f32,
) -> Result<(Duration, Moved), CollectiveError> {
    let mut optimizer = Duration::ZERO;
    if coll.rank() == 0 {
        let t = Instant::now();
        let o = &store.optimizer;
        let scale = end.update_scale(o);
        let mut st = store.state.write().unwrap_or_else(|e| e.into_inner());
        let TrainState { params, opt, .. } = &mut *st;
        optim::step(o, params, grads, opt, lr, scale);
        optimizer = t.elapsed();
    }
    let mut moved = Moved {
        wait: coll.barrier()?,
        ..Moved::default()
    };
    let t = Instant::now();
    replica.params_from_host(&store.state.read().unwrap_or_else(|e| e.into_inner()).params);
    moved.transfer = t.elapsed();
    Ok((optimizer, moved))
}
