//! A batch's rows onto this GPU (`upload`), and parameters and gradients between it and the host
//! (central storage each step, local SGD at its averages), through page-locked staging
//! buffers, so the copies are DMA transfers that the stream runs asynchronously; an upload is
//! queued ahead of the step's compute, a download is waited for once. And `to_device`, a
//! buffer uploaded once.
//!
//! The waits are ours: cudarc's page-locked buffers order host access with an event that it
//! records only while its per-use event tracking is on, and `Gpu::open` turns that off (one
//! stream per GPU), so `PinnedHostSlice::as_slice` would not wait for a copy in flight.

use std::sync::Arc;

use cudarc::driver::{
    CudaEvent, CudaSlice, CudaStream, CudaViewMut, DeviceRepr, DriverError, PinnedHostSlice,
    ValidAsZeroBits,
};

use super::CudaReplica;
use crate::backend::cuda::convert;
use crate::backend::cuda::elem::Elem;
use crate::backend::cuda::launch::check;
use crate::backend::AUX;
use crate::nn::shape::Shape;

/// `v` on the device; an empty one as a one-element buffer (CUDA allocates no empty ones).
pub(super) fn to_device<T: DeviceRepr + ValidAsZeroBits>(
    s: &Arc<CudaStream>,
    v: &[T],
) -> Result<CudaSlice<T>, DriverError> {
    match v.is_empty() {
        true => s.alloc_zeros::<T>(1),
        false => s.clone_htod(v),
    }
}

/// Host data on its way to the device, through page-locked buffers (grown as needed) the data
/// is copied from asynchronously, each with the event after its last copy out, which must pass
/// before it is written again. A buffer still in use is not waited for while there is room for
/// another (up to `UPLOAD_SLOTS`): the host may run a step ahead of the device (step metrics
/// read late), and the buffer of the step before's micro-batch may sit behind that step's
/// all-reduce, which a failed peer could hold forever.
pub(super) struct Upload<T> {
    slots: Vec<(PinnedHostSlice<T>, Option<CudaEvent>)>,
    /// The slot written last (the next one tried is after it).
    last: usize,
}

/// The most page-locked buffers one kind of upload keeps: made only as uploads are in flight at
/// once (a step's micro-batches, `--grad-accum` of them, and the step's before, one step
/// ahead), so that one waited for is rare (over 30 micro-batches a step; it waits in the
/// driver, where no abort reaches).
pub const UPLOAD_SLOTS: usize = 64;

impl<T> Default for Upload<T> {
    fn default() -> Self {
        Upload {
            slots: Vec::new(),
            last: 0,
        }
    }
}

impl<T: DeviceRepr + ValidAsZeroBits + Copy> Upload<T> {
    /// Queues on `stream` the copy of `data` into the start of `dst`; the work that follows on
    /// the stream sees it.
    pub fn copy(
        &mut self,
        stream: &Arc<CudaStream>,
        data: &[T],
        dst: &mut CudaViewMut<'_, T>,
    ) -> Result<(), DriverError> {
        let free = |s: &(PinnedHostSlice<T>, Option<CudaEvent>)| {
            s.1.as_ref()
                .is_none_or(|e| e.try_is_complete().unwrap_or(false))
        };
        let n = self.slots.len();
        let pick = (1..=n)
            .map(|k| (self.last + k) % n.max(1))
            .find(|&i| free(&self.slots[i]));
        let i = match pick {
            Some(i) => i,
            None if n < UPLOAD_SLOTS => {
                // SAFETY: written below before any copy out of it
                let buf = unsafe { alloc(stream, data.len()) }?;
                self.slots.push((buf, None));
                n
            }
            None => {
                // every slot in use: the oldest, the one after the last written
                let i = (self.last + 1) % n;
                if let Some(ev) = &self.slots[i].1 {
                    ev.synchronize()?;
                }
                i
            }
        };
        if self.slots[i].0.len() < data.len() {
            // SAFETY: written below before any copy out of it; the old one's copies are done
            self.slots[i].0 = unsafe { alloc(stream, data.len()) }?;
        }
        let host = self.slots[i].0.as_mut_slice()?;
        host[..data.len()].copy_from_slice(data);
        // page-locked memory: the driver copies it asynchronously
        stream.memcpy_htod(&host[..data.len()], dst)?;
        self.slots[i].1 = Some(stream.record_event(None)?);
        self.last = i;
        Ok(())
    }
}

/// A page-locked buffer of `len` elements (at least one; cached, not write-combined memory).
///
/// # Safety
/// Its contents are uninitialized: write before copying out of it.
unsafe fn alloc<T: DeviceRepr>(
    stream: &Arc<CudaStream>,
    len: usize,
) -> Result<PinnedHostSlice<T>, DriverError> {
    stream.context().alloc_pinned_with_flags::<T>(len.max(1), 0)
}

/// Page-locked host buffers, made on first use: one of n_params floats (parameters, both
/// ways), one of n_params + AUX (gradients and metric slots), and the uploads of parameters
/// and of batches' rows and labels. (Each step's batch metrics have their own, `wait::Ends`.)
#[derive(Default)]
pub(super) struct Staging {
    params: Option<PinnedHostSlice<f32>>,
    grads: Option<PinnedHostSlice<f32>>,
    params_in: Upload<f32>,
    rows: Upload<f32>,
    labels: Upload<u32>,
}

impl<E: Elem> CudaReplica<E> {
    /// Uploads x[b, d] and y[b] into the input buffers (a bf16 run's through `input`, then
    /// rounded on the device; a channels-last run's moved into place, `arrange_input`), through
    /// page-locked buffers: a copy from the loader's memory could wait for the stream's work
    /// before it (the step before's all-reduce, which a failed peer may hold), inside the
    /// driver, where no abort reaches the host.
    pub(super) fn upload(&mut self, x: &[f32], y: &[u32], b: usize) {
        if let Err(e) = self.ensure(b) {
            panic!("{e}")
        }
        let d = self.model.dims[0];
        let s = self.gpu.stream.clone();
        let landing = match self.layout.nhwc() {
            true => &mut self.arrived,
            false => &mut self.acts[0],
        };
        let mut a0 = landing.slice_mut(..b * d);
        let rows = &mut self.staging.rows;
        let sent = match E::f32_view_mut(&mut a0) {
            Some(a0) => rows.copy(&s, &x[..b * d], a0),
            None => {
                let mut staged = self.input.slice_mut(..b * d);
                (rows.copy(&s, &x[..b * d], &mut staged)).map(|()| {
                    check(convert::to_elem(
                        &self.gpu,
                        &mut a0,
                        &staged.as_view(),
                        b * d,
                    ))
                })
            }
        };
        if let Err(e) = sent {
            self.fail("upload a batch", e)
        }
        self.arrange_input(b);
        let labels = &mut self.labels.slice_mut(..b);
        if let Err(e) = self.staging.labels.copy(&s, &y[..b], labels) {
            self.fail("upload labels", e)
        }
    }

    /// Channels last: moves the `b` rows that arrived (NCHW, in `arrived`) into the input
    /// activations. Nothing in NCHW, where batches arrive in place.
    pub(super) fn arrange_input(&mut self, b: usize) {
        let (true, Shape::Image { c, h, w }) = (self.layout.nhwc(), self.model.input) else {
            return;
        };
        let n = b * c * h * w;
        let (bi, ci, hwi) = (b as i32, c as i32, (h * w) as i32);
        let mut x = self.acts[0].slice_mut(..n);
        let arrived = self.arrived.slice(..n);
        // both hold the b rows (`ensure`)
        launch!(
            &self.gpu,
            named!(E, "nchw_to_nhwc"),
            n,
            &mut x,
            &arrived,
            &bi,
            &ci,
            &hwi
        );
    }

    pub(super) fn pinned(&self, len: usize) -> PinnedHostSlice<f32> {
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
        let s = self.gpu.stream.clone();
        let r = (self.staging.params_in).copy(&s, &params[..n], &mut self.params.slice_mut(..n));
        if let Err(e) = r {
            self.fail("upload the parameters", e)
        }
        self.refresh_weights();
    }
}
