//! Opening a rank's GPU: its replica, the notes it has for the run, the host barrier, the NCCL
//! group, and the data it can hold.

use super::{dropout_seed, Worker};
use crate::backend::Replica;
use crate::engine::events::Event;
use crate::engine::EngineError;

/// A GPU all-reduce that waits this many `--stall-timeout`s aborts the NCCL group.
pub const ALL_REDUCE_TIMEOUT_FACTOR: u32 = 10;

/// Opens GPU `index` for this rank. Every rank first opens its GPU (context, kernels, buffers),
/// then all meet at a host barrier, and only then join NCCL (which gives up after the all-reduce
/// timeout, or when the host collective is aborted): a rank that failed to open stops the others
/// before it. The GPU then takes the training set `train` (and the validation set) if it can
/// hold them.
#[allow(clippy::too_many_arguments)]
pub(in crate::engine) fn open_gpu(
    w: &mut Worker,
    index: usize,
    model: crate::nn::model::Model,
    optimizer: crate::nn::optim::Optimizer,
    precision: crate::nn::precision::Precision,
    state: crate::backend::TrainState,
    group: Option<crate::backend::cuda::replica::Group>,
    train: &crate::data::Dataset,
) -> Result<crate::backend::cuda::replica::CudaReplica, EngineError> {
    let opened = crate::backend::cuda::replica::CudaReplica::open(
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
            let graphs = (w.cfg.cuda_graph.resolve(w.cfg.sync_bn)).is_ok_and(|(on, _)| on);
            r.seed_dropout(dropout_seed(w.cfg.seed, w.rank))
                .use_graphs(graphs)
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
    w.device_cap.tell(replica.max_rows());
    Ok(replica)
}
