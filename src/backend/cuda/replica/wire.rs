//! What the gradients' all-reduce between GPUs carries: the gradient sums and, after them, the
//! batch's metrics (fp32); with `--freeze` only the trained parameters' sums (`packed`); with
//! `--grad-dtype bf16` the sums rounded to bf16 for the trip (half the bytes) and widened back
//! into the fp32 gradients, the metrics still fp32, both in one NCCL group.

use cudarc::driver::CudaSlice;

use super::CudaReplica;
use crate::backend::cuda::convert::{from_bf16, to_elem};
use crate::backend::cuda::elem::{bf16, Elem};
use crate::backend::cuda::nccl::{Communicator, Patience};
use crate::backend::cuda::Gpu;
use crate::backend::AUX;
use crate::nn::precision::GradDtype;

impl<E: Elem> CudaReplica<E> {
    /// `--grad-dtype`: what the all-reduce carries the gradient sums as (nothing changes on one
    /// GPU, which has no all-reduce).
    pub fn reduce_grads_as(mut self, d: GradDtype) -> CudaReplica<E> {
        self.grads_bf16 = d == GradDtype::Bf16;
        self
    }

    /// Queues the sum over every GPU of `grads` (n_params sums, then the metric slots), as this
    /// replica carries them.
    pub(super) fn sum_grads(
        &mut self,
        comm: &Communicator,
        patience: &Patience,
    ) -> Result<(), String> {
        if self.grads_bf16 && self.wire.is_none() {
            let len = match &self.packed {
                Some(p) => p.buf.len(),
                None => self.grads.len(),
            } - AUX;
            let wire = (self.gpu.stream.alloc_zeros::<bf16>(len.max(1)))
                .map_err(|e| format!("allocate the bf16 gradients' buffer: {e:?}"))?;
            self.wire = Some(wire);
        }
        let (gpu, wire) = (&self.gpu, self.wire.as_mut());
        match self.packed.as_mut() {
            None => sum(gpu, comm, &mut self.grads, wire, patience),
            Some(p) => {
                let s = &gpu.stream;
                (p.pack(s, &self.grads))
                    .map_err(|e| format!("pack the trained gradients: {e:?}"))?;
                sum(gpu, comm, &mut p.buf, wire, patience)?;
                (p.unpack(s, &mut self.grads))
                    .map_err(|e| format!("unpack the trained gradients: {e:?}"))
            }
        }
    }
}

/// `buf` (sums, then AUX metric slots) summed over every GPU: as it is, or its sums through
/// `wire` in bf16 (`selftest` checks both).
pub(crate) fn sum(
    gpu: &Gpu,
    comm: &Communicator,
    buf: &mut CudaSlice<f32>,
    wire: Option<&mut CudaSlice<bf16>>,
    patience: &Patience,
) -> Result<(), String> {
    let Some(w) = wire else {
        return comm.all_reduce_sum(buf, patience);
    };
    let n = buf.len() - AUX;
    let convert = |e| format!("convert the gradients for the all-reduce: {e}");
    to_elem::<bf16>(gpu, &mut w.slice_mut(..n), &buf.slice(..n), n).map_err(convert)?;
    comm.all_reduce_bf16_and_f32(&mut w.slice_mut(..n), &mut buf.slice_mut(n..), patience)?;
    from_bf16(gpu, &mut buf.slice_mut(..n), &w.slice(..n), n).map_err(convert)
}
