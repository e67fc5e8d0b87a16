//! The forward and backward pass of one micro-batch on the GPU: cuBLAS products through the
//! row-major helper and the kernels of `kernels/`, in the order of `Model::forward_backward`.

use super::CudaReplica;
use crate::backend::cuda::blas::sgemm;
use crate::backend::cuda::launch::die;

impl CudaReplica {
    /// Forward over the uploaded rows, then softmax cross-entropy: per-row loss and correct,
    /// and dlogits into `dacts[L]`.
    pub(super) fn forward(&mut self, b: usize) {
        let layers = self.model.layers();
        let ranges = self.layer_ranges();
        let CudaReplica {
            gpu,
            blas,
            model,
            params,
            acts,
            dacts,
            labels,
            row_loss,
            row_correct,
            ..
        } = self;
        for (l, (w, bias)) in ranges.into_iter().enumerate() {
            let (c, oc) = (model.dims[l], model.dims[l + 1]);
            let (lower, upper) = acts.split_at_mut(l + 1);
            let inp = lower[l].slice(..b * c);
            let mut out = upper[0].slice_mut(..b * oc);
            let wv = params.slice(w);
            if let Err(e) = sgemm(
                blas.as_ref().expect("cuBLAS is held until drop"),
                false,
                false,
                b,
                oc,
                c,
                1.0,
                &inp,
                &wv,
                0.0,
                &mut out,
            ) {
                die(gpu.index, "forward", e)
            }
            let bv = params.slice(bias);
            let (ni, di) = (b as i32, oc as i32);
            launch!(gpu, "bias_add_f32", b * oc, &mut out, &bv, &ni, &di);
            if l + 1 != layers {
                let nn = (b * oc) as i32;
                launch!(gpu, "relu_forward_f32", b * oc, &mut out, &nn);
            }
        }
        let classes = model.dims[layers];
        let logits = acts[layers].slice(..b * classes);
        let labels = labels.slice(..b);
        let mut loss = row_loss.slice_mut(..b);
        let mut correct = row_correct.slice_mut(..b);
        let mut dlogits = dacts[layers].slice_mut(..b * classes);
        let (ni, ci) = (b as i32, classes as i32);
        launch!(
            gpu,
            "softmax_xent_f32",
            b,
            &logits,
            &labels,
            &mut loss,
            &mut correct,
            &mut dlogits,
            &ni,
            &ci
        );
    }

    /// Backward from dlogits, accumulating weight and bias gradients (sums over rows).
    pub(super) fn backward(&mut self, b: usize) {
        let layers = self.model.layers();
        let ranges = self.layer_ranges();
        let CudaReplica {
            gpu,
            blas,
            model,
            params,
            grads,
            acts,
            dacts,
            ..
        } = self;
        for (l, (w, bias)) in ranges.into_iter().enumerate().rev() {
            let (c, oc) = (model.dims[l], model.dims[l + 1]);
            let (dlower, dupper) = dacts.split_at_mut(l + 1);
            let mut dout = dupper[0].slice_mut(..b * oc);
            if l + 1 != layers {
                let act = acts[l + 1].slice(..b * oc);
                let nn = (b * oc) as i32;
                launch!(gpu, "relu_backward_f32", b * oc, &mut dout, &act, &nn);
            }
            let dout = dout.as_view();
            let inp = acts[l].slice(..b * c);
            // the weight gradient, and the bias gradient right after it (Model's layout)
            let mut wb = grads.slice_mut(w.start..bias.end);
            let (mut gw, mut gb) = wb.split_at_mut(w.len());
            // dW += inp^T dout
            if let Err(e) = sgemm(
                blas.as_ref().expect("cuBLAS is held until drop"),
                true,
                false,
                c,
                oc,
                b,
                1.0,
                &inp,
                &dout,
                1.0,
                &mut gw,
            ) {
                die(gpu.index, "backward", e)
            }
            let (ni, di) = (b as i32, oc as i32);
            launch!(gpu, "bias_grad_f32", oc, &mut gb, &dout, &ni, &di);
            if l > 0 {
                // dinp = dout W^T
                let wv = params.slice(w);
                let mut dinp = dlower[l].slice_mut(..b * c);
                if let Err(e) = sgemm(
                    blas.as_ref().expect("cuBLAS is held until drop"),
                    false,
                    true,
                    b,
                    c,
                    oc,
                    1.0,
                    &dout,
                    &wv,
                    0.0,
                    &mut dinp,
                ) {
                    die(gpu.index, "backward", e)
                }
            }
        }
    }
}
