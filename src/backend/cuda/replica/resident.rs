//! The training and validation sets held on the GPU: uploaded once, so that a batch arrives as
//! its samples' row numbers (a few bytes each) and is gathered on the device, and a validation
//! pass reads its rows in place, instead of features crossing PCIe from pageable memory every
//! step (which also made the upload wait for the stream).

use cudarc::driver::CudaSlice;

use super::host::Upload;
use super::{to_device, CudaReplica};
use crate::backend::cuda::convert;
use crate::backend::cuda::elem::Elem;
use crate::backend::cuda::launch::{check, die};
use crate::data::Dataset;

/// At most this share of the GPU's free memory goes to the data: the rest is for the model, its
/// activations and NCCL.
const SHARE_OF_FREE: f64 = 0.25;

pub(super) struct Resident {
    x: CudaSlice<f32>,
    y: CudaSlice<u32>,
    samples: usize,
    val_x: CudaSlice<f32>,
    val_y: CudaSlice<u32>,
    val_samples: usize,
    /// The batch's row numbers, on their way (an asynchronous copy), and on the device.
    upload: Upload<u32>,
    rows: CudaSlice<u32>,
}

impl Resident {
    /// Some when the held validation set has rows up to `hi`.
    pub(super) fn has_validation(&self, hi: usize) -> Option<()> {
        (self.val_samples > 0 && hi <= self.val_samples).then_some(())
    }
}

impl<E: Elem> CudaReplica<E> {
    /// Uploads `train` and `val` when they take at most a quarter of the GPU's free memory once
    /// the activations of micro-batches of `rows` rows are allocated; whether it did.
    pub(super) fn hold(&mut self, train: &Dataset, val: &Dataset, rows: usize) -> bool {
        // picture sets make their samples batch by batch (augmented): nothing to hold
        let (Some(train_x), Some(val_x)) = (train.dense(), val.dense()) else {
            return false;
        };
        let bytes = (train.x.len() + train.y.len() + val.x.len() + val.y.len()) * 4;
        // the run's own buffers first: the data must not take what its batches need
        if self.ensure(rows).is_err() {
            return false;
        }
        let free = match self.gpu.ctx.mem_get_info() {
            Ok((free, _)) => free,
            Err(_) => return false,
        };
        let d = self.model.dims[0];
        if train.features != d
            || (!val.is_empty() && val.features != d)
            || train.is_empty()
            || bytes as f64 > free as f64 * SHARE_OF_FREE
            || train.len() > u32::MAX as usize
        {
            return false;
        }
        let s = &self.gpu.stream;
        let made = (|| {
            let (x, y) = (to_device(s, train_x)?, to_device(s, &train.y)?);
            let (val_x, val_y) = (to_device(s, val_x)?, to_device(s, &val.y)?);
            let rows = s.alloc_zeros::<u32>(1)?;
            s.synchronize()?;
            Ok::<_, cudarc::driver::DriverError>(Resident {
                x,
                y,
                samples: train.len(),
                val_x,
                val_y,
                val_samples: val.len(),
                upload: Upload::default(),
                rows,
            })
        })();
        match made {
            Ok(r) => {
                self.resident = Some(r);
                true
            }
            // not enough memory after all, say: batches keep coming with their features
            Err(_) => false,
        }
    }

    /// Puts validation rows `start..start + b` of the held validation set into the input and
    /// label buffers (device copies, in stream order).
    pub(super) fn load_validation(&mut self, start: usize, b: usize) {
        if let Err(e) = self.ensure(b) {
            panic!("{e}")
        }
        let Some(r) = self.resident.as_ref() else {
            unreachable!("validation rows without a held validation set")
        };
        let (s, d) = (self.gpu.stream.clone(), self.model.dims[0]);
        let x = r.val_x.slice(start * d..(start + b) * d);
        let y = r.val_y.slice(start..start + b);
        // (a bf16 run's input is rounded from the held fp32 rows)
        let landing = match self.layout.nhwc() {
            true => &mut self.arrived,
            false => &mut self.acts[0],
        };
        check(convert::to_elem(
            &self.gpu,
            &mut landing.slice_mut(..b * d),
            &x,
            b * d,
        ));
        if let Err(e) = s.memcpy_dtod(&y, &mut self.labels.slice_mut(..b)) {
            die(self.gpu.index, "copy validation rows", e)
        }
        self.arrange_input(b);
    }

    /// Puts the samples `rows` (b of them) of the held training set into the input and label
    /// buffers.
    pub(super) fn gather(&mut self, rows: &[u32], b: usize) {
        if let Err(e) = self.ensure(b) {
            panic!("{e}")
        }
        let Some(r) = self.resident.as_mut() else {
            unreachable!("gather without a held training set")
        };
        assert!(
            rows.len() == b && rows.iter().all(|&i| (i as usize) < r.samples),
            "GPU {}: a batch's rows are outside the training set",
            self.gpu.index
        );
        let (s, index) = (self.gpu.stream.clone(), self.gpu.index);
        if r.rows.len() < b {
            r.rows = s
                .alloc_zeros::<u32>(b)
                .unwrap_or_else(|e| die(index, "allocate a batch's rows", e));
        }
        if let Err(e) = r.upload.copy(&s, rows, &mut r.rows.slice_mut(..b)) {
            die(index, "upload a batch's rows", e)
        }
        let d = self.model.dims[0];
        let (ni, di) = (b as i32, d as i32);
        let landing = match self.layout.nhwc() {
            true => &mut self.arrived,
            false => &mut self.acts[0],
        };
        let mut x = landing.slice_mut(..b * d);
        let mut y = self.labels.slice_mut(..b);
        let rows_dev = r.rows.slice(..b);
        // x holds b*d floats and y b labels; every row is below the held set's length (checked
        // above), whose buffers hold samples*d features and samples labels
        launch!(
            &self.gpu,
            named!(E, "gather_rows"),
            b * d,
            &mut x,
            &mut y,
            &r.x,
            &r.y,
            &rows_dev,
            &ni,
            &di
        );
        self.arrange_input(b);
    }
}
