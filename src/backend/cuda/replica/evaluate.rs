//! Evaluation on a GPU: a set's rows through the input buffers as many at a time as they hold
//! (a training batch's rows, at least `Model::eval_rows`), each chunk's inference pass
//! (`pass.rs`) and its loss and correct summed on the device, read once at the end; for `eval`,
//! each chunk's logits read back too.

use super::CudaReplica;
use crate::backend::cuda::elem::Elem;
use crate::backend::cuda::launch::add_metrics;
use crate::backend::AUX;
use crate::nn::model::EVAL_ROWS;

impl<E: Elem> CudaReplica<E> {
    /// (loss sum, correct) over `n` rows, put into the input buffers a chunk at a time by
    /// `load(self, start, rows)`: as many rows as the buffers hold, up to `EVAL_ROWS` (a
    /// ResNet-50 at 224x224 validates a training batch's rows a pass, not `eval_rows`' 4).
    pub(super) fn evaluate_chunks(
        &mut self,
        n: usize,
        mut load: impl FnMut(&mut Self, usize, usize),
        mut logits: Option<&mut Vec<f32>>,
    ) -> (f64, usize) {
        let s = self.gpu.stream.clone();
        if let Err(e) = s.memset_zeros(&mut self.eval_metrics) {
            self.fail("zero the metrics", e)
        }
        let chunk = (self.cap.min(EVAL_ROWS)).max(self.model.eval_rows());
        for start in (0..n).step_by(chunk) {
            let b = chunk.min(n - start);
            load(self, start, b);
            self.eval_pass(b);
            let mut out = self.eval_metrics.slice_mut(..);
            add_metrics(&self.gpu, &mut out, &self.row_loss, &self.row_correct, b);
            if let Some(l) = logits.as_deref_mut() {
                self.read_logits(b, l);
            }
        }
        let mut host = [0.0f32; AUX];
        if let Err(e) = s.memcpy_dtoh(&self.eval_metrics, &mut host[..]) {
            self.fail("read the evaluation metrics", e)
        }
        if let Err(e) = s.synchronize() {
            self.fail("evaluate", e)
        }
        (host[0] as f64, host[1].round() as usize)
    }

    /// The last inference pass's logits of `b` rows appended to `out` (row-major, as fp32).
    fn read_logits(&mut self, b: usize, out: &mut Vec<f32>) {
        let len = b * self.model.classes();
        let mut host = vec![E::default(); len];
        let logits = self.acts[self.model.output()].slice(..len);
        if let Err(e) = self.gpu.stream.memcpy_dtoh(&logits, &mut host[..]) {
            self.fail("read the logits", e)
        }
        out.extend(host.into_iter().map(E::to_f32));
    }

    /// `evaluate` of rows x[n, features], y[n] that also appends their logits (n x classes,
    /// row-major) to `logits`: `eval`'s per-class figures.
    pub fn evaluate_logits(
        &mut self,
        x: &[f32],
        y: &[u32],
        n: usize,
        logits: &mut Vec<f32>,
    ) -> (f64, usize) {
        let d = self.model.dims[0];
        let load = |r: &mut Self, start: usize, b: usize| {
            r.upload(&x[start * d..(start + b) * d], &y[start..start + b], b)
        };
        self.evaluate_chunks(n, load, Some(logits))
    }
}
