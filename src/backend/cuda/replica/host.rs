//! Parameters and gradients between this GPU and the host (central storage each step, local SGD
//! at its averages): through page-locked staging buffers, so the copies are DMA transfers that
//! the stream runs asynchronously; an upload is queued ahead of the step's compute, a download is
//! waited for once.
//!
//! The waits are ours: cudarc's page-locked buffers order host access with an event that it
//! records only while its per-use event tracking is on, and `Gpu::open` turns that off (one
//! stream per GPU), so `PinnedHostSlice::as_slice` would not wait for a copy in flight.

use cudarc::driver::{CudaEvent, CudaSlice, PinnedHostSlice};

use super::CudaReplica;
use crate::backend::AUX;

/// Page-locked host buffers, made on first use: one of n_params floats (parameters), one of
/// n_params + AUX (gradients and metric slots); and the event after the last upload from the
/// parameters' buffer, which must pass before the buffer is written again.
#[derive(Default)]
pub(super) struct Staging {
    params: Option<PinnedHostSlice<f32>>,
    grads: Option<PinnedHostSlice<f32>>,
    uploaded: Option<CudaEvent>,
}

impl CudaReplica {
    fn pinned(&self, len: usize) -> PinnedHostSlice<f32> {
        // flags 0: cached (not write-combined) memory, which the host reads back quickly
        // SAFETY: every use fills the buffer (a device copy into it, or a host copy of `len`
        // floats) before anything reads it.
        unsafe { self.gpu.ctx.alloc_pinned_with_flags::<f32>(len, 0) }
            .unwrap_or_else(|e| self.fail("allocate page-locked host memory", e))
    }

    /// Copies `len` floats from the start of `src` on the device into `out` through `buf`,
    /// waiting for the stream (the work before the copy, then the copy).
    fn download(
        &self,
        src: &CudaSlice<f32>,
        len: usize,
        buf: &mut PinnedHostSlice<f32>,
        out: &mut Vec<f32>,
        what: &str,
    ) {
        let s = &self.gpu.stream;
        if let Err(e) = s
            .memcpy_dtoh(&src.slice(..len), buf)
            .and_then(|_| s.synchronize())
        {
            self.fail(what, e)
        }
        match buf.as_slice() {
            Ok(host) => {
                out.clear();
                out.extend_from_slice(host);
            }
            Err(e) => self.fail(what, e),
        }
    }

    pub(super) fn grads_out(&mut self, out: &mut Vec<f32>) {
        let len = self.model.n_params + AUX;
        let mut buf = match self.staging.grads.take() {
            Some(b) => b,
            None => self.pinned(len),
        };
        self.download(&self.grads, len, &mut buf, out, "download the gradients");
        self.staging.grads = Some(buf);
    }

    pub(super) fn params_out(&mut self, out: &mut Vec<f32>) {
        let n = self.model.n_params;
        let mut buf = match self.staging.params.take() {
            Some(b) => b,
            None => self.pinned(n),
        };
        self.download(&self.params, n, &mut buf, out, "download the parameters");
        self.staging.params = Some(buf);
    }

    /// Queues the upload; the step's kernels that follow on the stream see the new values.
    pub(super) fn params_in(&mut self, params: &[f32]) {
        let n = self.model.n_params;
        let mut buf = match self.staging.params.take() {
            Some(b) => b,
            None => self.pinned(n),
        };
        // the buffer's last upload must be done before the buffer is overwritten
        if let Some(ev) = self.staging.uploaded.take() {
            if let Err(e) = ev.synchronize() {
                self.fail("stage the parameters", e)
            }
        }
        match buf.as_mut_slice() {
            Ok(host) => host.copy_from_slice(&params[..n]),
            Err(e) => self.fail("stage the parameters", e),
        }
        let s = self.gpu.stream.clone();
        if let Err(e) = s.memcpy_htod(&buf, &mut self.params.slice_mut(..n)) {
            self.fail("upload the parameters", e)
        }
        self.staging.uploaded = Some(self.record());
        self.staging.params = Some(buf);
    }
}
