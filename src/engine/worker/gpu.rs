//! Opening a rank's GPU: its replica, the notes it has for the run, the host barrier, the NCCL
//! group, and the data it can hold.

use super::{dropout_stream, Worker};
use crate::backend::cuda::elem::{bf16, Elem};
use crate::backend::cuda::replica::CudaReplica;
use crate::backend::Replica;
use crate::engine::events::Event;
use crate::engine::EngineError;
use crate::nn::precision::Precision;

/// A GPU all-reduce that waits this many `--stall-timeout`s aborts the NCCL group.
pub const ALL_REDUCE_TIMEOUT_FACTOR: u32 = 10;

/// Opens GPU `index` for this rank. Every rank first opens its GPU (context, kernels, buffers),
/// then all meet at a host barrier, and only then join NCCL (which gives up after the all-reduce
/// timeout, or when the host collective is aborted): a rank that failed to open stops the others
/// before it. The GPU then takes the training set `train` (and the validation set) if it can
/// hold them. Its activations are bf16 under `--precision bf16`, fp32 otherwise.
#[allow(clippy::too_many_arguments)]
pub(in crate::engine) fn open_gpu(
    w: &mut Worker,
    index: usize,
    model: crate::nn::model::Model,
    optimizer: crate::nn::optim::Optimizer,
    precision: Precision,
    state: crate::backend::TrainState,
    group: Option<crate::backend::cuda::replica::Group>,
    train: &crate::data::Dataset,
) -> Result<Box<dyn Replica>, EngineError> {
    let args = (index, model, optimizer, precision, state, group, train);
    Ok(match precision {
        Precision::Bf16 => Box::new(open_as::<bf16>(w, args)?),
        Precision::Fp32 | Precision::Tf32 => Box::new(open_as::<f32>(w, args)?),
    })
}

type OpenArgs<'a> = (
    usize,
    crate::nn::model::Model,
    crate::nn::optim::Optimizer,
    Precision,
    crate::backend::TrainState,
    Option<crate::backend::cuda::replica::Group>,
    &'a crate::data::Dataset,
);

fn open_as<E: Elem>(
    w: &mut Worker,
    (index, model, optimizer, precision, state, group, train): OpenArgs<'_>,
) -> Result<CudaReplica<E>, EngineError> {
    let opened = CudaReplica::<E>::open(
        index,
        model,
        optimizer,
        precision,
        state,
        // a stall is warned about at 1x; only a wait ten times as long is taken for a hung peer
        // (a slow input or a long checkpoint write on rank 0 must not kill the run)
        w.cfg.stall_timeout * ALL_REDUCE_TIMEOUT_FACTOR,
    );
    let mut replica = match opened {
        Ok(r) => {
            // (validated before any GPU opened)
            let graphs = (w.cfg.cuda_graph.resolve(w.pools_bn)).is_ok_and(|(on, _)| on);
            let (seed, first_pass) = dropout_stream(w);
            r.seed_dropout(seed, first_pass)
                .use_graphs(graphs)
                .reduce_grads_as(w.cfg.grad_dtype)
        }
        Err(e) => {
            w.coll
                .abort(&format!("rank {} could not open GPU {index}: {e}", w.rank));
            return Err(e.into());
        }
    };
    for message in replica.take_notes() {
        let _ = w.events.send(Event::DeviceNote {
            rank: w.rank,
            message,
        });
    }
    w.coll.barrier()?;
    replica.join(group, &*w.coll)?;
    // data the GPU can hold is uploaded once: batches then come as row numbers
    if replica.hold_data(train, &w.val, w.per_replica) {
        w.loader.rows_only();
    }
    // (this rank's share of a resumed rebalanced split, else the batch)
    let rows = (w.split.as_deref()).and_then(|s| s.get(w.rank).copied());
    if let Err(e) = replica.reserve(rows.unwrap_or(w.per_replica)) {
        w.coll.abort(&format!("rank {}: {e}", w.rank));
        return Err(e.into());
    }
    w.max_rows = replica.max_rows();
    w.device_cap.tell(w.max_rows);
    Ok(replica)
}
