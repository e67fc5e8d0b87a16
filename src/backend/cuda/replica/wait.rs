//! Waiting for the GPU's stream at the end of a step: for an all-reduce (without hanging on a
//! failed peer) and the batch metrics copied out behind it, in one wait, then the device's
//! times of the step.

use std::time::{Duration, Instant};

use cudarc::driver::CudaEvent;

use super::CudaReplica;
use crate::backend::cuda::elem::Elem;
use crate::backend::{DeviceTimes, AUX};
use crate::comm::{Collective, CollectiveError, ReduceTiming};

impl<E: Elem> CudaReplica<E> {
    /// Waits for `ev`, which follows an all-reduce, without blocking forever: the clock starts
    /// when the work before the all-reduce (`compute_end`) is done, so a long compute is not a
    /// hang; a group aborted on the host (a peer's failure) or `timeout` of all-reduce with no
    /// progress ends the wait and aborts the NCCL group. Without a group nothing can hang.
    pub(super) fn wait_for(
        &mut self,
        ev: &CudaEvent,
        host: Option<&dyn Collective>,
    ) -> Result<(), CollectiveError> {
        let mut started: Option<Instant> = None;
        let compute_end = self.events.as_ref().map(|(_, end)| end);
        loop {
            match ev.try_is_complete() {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => self.fail("wait for the all-reduce", e),
            }
            if self.comm.is_none() {
                if let Err(e) = ev.synchronize() {
                    self.fail("wait for the GPU", e)
                }
                return Ok(());
            }
            if let Some(reason) = host.and_then(|h| h.abort_reason()) {
                self.abort_group();
                return Err(CollectiveError::Aborted(reason));
            }
            let compute_done = compute_end.is_none_or(|c| c.try_is_complete().unwrap_or(true));
            if compute_done {
                let t0 = *started.get_or_insert_with(Instant::now);
                if t0.elapsed() > self.timeout {
                    self.abort_group();
                    return Err(CollectiveError::Aborted(format!(
                        "GPU {}: the NCCL all-reduce did not finish within {:.0} s of the step's compute (a peer GPU hung or failed); set NCCL_DEBUG=INFO to see why",
                        self.gpu.index,
                        self.timeout.as_secs_f64()
                    )));
                }
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }

    /// After the step's gradients (and their all-reduce, if any) are queued: queues the batch
    /// metrics' copy into page-locked memory behind them, waits once for both, and reads the
    /// metrics and the device's times of the step.
    pub(super) fn settle(
        &mut self,
        t0: Instant,
        host: Option<&dyn Collective>,
    ) -> Result<ReduceTiming, CollectiveError> {
        let n = self.model.n_params;
        let s = self.gpu.stream.clone();
        let mut out = match self.staging.metrics.take() {
            Some(b) => b,
            None => self.pinned(AUX),
        };
        // (`reduced` ends the all-reduce's time; `copied` follows the metrics' copy)
        let reduced = self.record();
        if let Err(e) = s.memcpy_dtoh(&self.grads.slice(n..n + AUX), &mut out) {
            self.fail("read the batch metrics", e)
        }
        let copied = self.record();
        let waited = self.wait_for(&copied, host);
        if waited.is_ok() {
            // (the copy is done once its event is: cudarc's own tracking is off, `Gpu::open`)
            match out.as_slice() {
                Ok(m) => self.metrics.copy_from_slice(m),
                Err(e) => self.fail("read the batch metrics", e),
            }
        }
        self.staging.metrics = Some(out);
        waited?;
        let ms = |a: &CudaEvent, b: &CudaEvent| {
            a.elapsed_ms(b)
                .map(|m| Duration::from_secs_f64(m.max(0.0) as f64 / 1e3))
                .unwrap_or_default()
        };
        if let Some((start, computed)) = self.events.take() {
            self.times = Some(DeviceTimes {
                compute: ms(&start, &computed),
                comm: ms(&computed, &reduced),
                // queued before this step's compute, so complete by now
                optimizer: self.update_events.take().map(|(a, b)| ms(&a, &b)),
            });
        }
        Ok(ReduceTiming {
            wait: Duration::ZERO,
            transfer: self.times.map_or(t0.elapsed(), |t| t.comm),
        })
    }
}
