//! Evaluation on a GPU: a set's rows through the input buffers `Model::eval_rows` at a time,
//! each chunk's inference pass (`pass.rs`) and its loss and correct summed on the device, read
//! once at the end.

use super::CudaReplica;
use crate::backend::cuda::elem::Elem;
use crate::backend::cuda::launch::add_metrics;
use crate::backend::AUX;

impl<E: Elem> CudaReplica<E> {
    /// (loss sum, correct) over `n` rows, put into the input buffers `Model::eval_rows` at a
    /// time by `load(self, start, rows)`.
    pub(super) fn evaluate_chunks(
        &mut self,
        n: usize,
        mut load: impl FnMut(&mut Self, usize, usize),
    ) -> (f64, usize) {
        let s = self.gpu.stream.clone();
        if let Err(e) = s.memset_zeros(&mut self.eval_metrics) {
            self.fail("zero the metrics", e)
        }
        let chunk = self.model.eval_rows();
        for start in (0..n).step_by(chunk) {
            let b = chunk.min(n - start);
            load(self, start, b);
            self.eval_pass(b);
            let mut out = self.eval_metrics.slice_mut(..);
            add_metrics(&self.gpu, &mut out, &self.row_loss, &self.row_correct, b);
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
}
