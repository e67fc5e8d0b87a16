//! Parameters and gradients between this GPU and the host (central storage each step, local SGD
//! at its averages): through page-locked staging buffers, so the copies are DMA transfers that
//! the stream runs asynchronously; an upload is queued ahead of the step's compute, a download is
//! waited for once.

use cudarc::driver::PinnedHostSlice;

use super::CudaReplica;
use crate::backend::AUX;

/// Page-locked host buffers, made on first use: one of n_params floats (parameters), one of
/// n_params + AUX (gradients and metric slots).
#[derive(Default)]
pub(super) struct Staging {
    params: Option<PinnedHostSlice<f32>>,
    grads: Option<PinnedHostSlice<f32>>,
}

impl CudaReplica {
    fn pinned(&self, len: usize) -> PinnedHostSlice<f32> {
        // flags 0: cached (not write-combined) memory, which the host reads back quickly
        // SAFETY: every use fills the buffer (a device copy into it, or a host copy of `len`
        // floats) before anything reads it.
        unsafe { self.gpu.ctx.alloc_pinned_with_flags::<f32>(len, 0) }
            .unwrap_or_else(|e| self.fail("allocate page-locked host memory", e))
    }

    pub(super) fn grads_out(&mut self, out: &mut Vec<f32>) {
        let n = self.model.n_params;
        let mut buf = match self.staging.grads.take() {
            Some(b) => b,
            None => self.pinned(n + AUX),
        };
        let s = self.gpu.stream.clone();
        if let Err(e) = s.memcpy_dtoh(&self.grads, &mut buf) {
            self.fail("download the gradients", e)
        }
        match buf.as_slice() {
            Ok(host) => {
                out.clear();
                out.extend_from_slice(host);
            }
            Err(e) => self.fail("download the gradients", e),
        }
        self.staging.grads = Some(buf);
    }

    pub(super) fn params_out(&mut self, out: &mut Vec<f32>) {
        let n = self.model.n_params;
        let mut buf = match self.staging.params.take() {
            Some(b) => b,
            None => self.pinned(n),
        };
        let s = self.gpu.stream.clone();
        if let Err(e) = s.memcpy_dtoh(&self.params.slice(..n), &mut buf) {
            self.fail("download the parameters", e)
        }
        match buf.as_slice() {
            Ok(host) => {
                out.clear();
                out.extend_from_slice(host);
            }
            Err(e) => self.fail("download the parameters", e),
        }
        self.staging.params = Some(buf);
    }

    /// Queues the upload; the step's kernels that follow on the stream see the new values.
    pub(super) fn params_in(&mut self, params: &[f32]) {
        let n = self.model.n_params;
        let mut buf = match self.staging.params.take() {
            Some(b) => b,
            None => self.pinned(n),
        };
        // waits until the buffer's previous copy is done before it is overwritten
        match buf.as_mut_slice() {
            Ok(host) => host.copy_from_slice(&params[..n]),
            Err(e) => self.fail("stage the parameters", e),
        }
        let s = self.gpu.stream.clone();
        if let Err(e) = s.memcpy_htod(&buf, &mut self.params.slice_mut(..n)) {
            self.fail("upload the parameters", e)
        }
        self.staging.params = Some(buf);
    }
}
