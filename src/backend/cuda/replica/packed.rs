//! With frozen parameters (`--freeze`) the all-reduce carries only the trained parameters'
//! gradients and the batch's metrics: packed one after another into one buffer, summed, and put
//! back (every rank leaves out the same ranges).

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DriverError};

use crate::backend::AUX;
use crate::nn::optim::Optimizer;

pub(super) struct Packed {
    /// The ranges of the gradient buffer the all-reduce carries.
    ranges: Vec<Range<usize>>,
    pub buf: CudaSlice<f32>,
}

impl Packed {
    /// The packed buffer for `o`'s frozen parameters among `n`; None when nothing is frozen.
    pub fn new(
        s: &Arc<CudaStream>,
        o: &Optimizer,
        n: usize,
    ) -> Result<Option<Packed>, DriverError> {
        if o.frozen.is_empty() {
            return Ok(None);
        }
        let ranges: Vec<Range<usize>> = (o.trained(n).into_iter())
            .chain(std::iter::once(n..n + AUX))
            .collect();
        let len = ranges.iter().map(|r| r.len()).sum();
        Ok(Some(Packed {
            ranges,
            buf: s.alloc_zeros::<f32>(len)?,
        }))
    }

    /// The carried ranges of `grads` one after another into the buffer.
    pub fn pack(&mut self, s: &Arc<CudaStream>, grads: &CudaSlice<f32>) -> Result<(), DriverError> {
        let mut at = 0;
        for r in &self.ranges {
            let len = r.len();
            s.memcpy_dtod(
                &grads.slice(r.clone()),
                &mut self.buf.slice_mut(at..at + len),
            )?;
            at += len;
        }
        Ok(())
    }

    /// `pack` undone: the buffer's pieces back into their ranges of `grads`.
    pub fn unpack(
        &self,
        s: &Arc<CudaStream>,
        grads: &mut CudaSlice<f32>,
    ) -> Result<(), DriverError> {
        let mut at = 0;
        for r in &self.ranges {
            let len = r.len();
            s.memcpy_dtod(
                &self.buf.slice(at..at + len),
                &mut grads.slice_mut(r.clone()),
            )?;
            at += len;
        }
        Ok(())
    }
}
