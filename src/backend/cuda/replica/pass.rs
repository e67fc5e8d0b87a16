//! The forward and backward pass of one micro-batch on the GPU, layer by layer in the order of
//! `Model::forward_backward`: dense layers as cuBLAS products through the row-major helper,
//! convolutions and max pooling through `conv.rs` / `pool.rs`, the rest kernels of `kernels/`.

use cudarc::cublas::CudaBlas;

use super::CudaReplica;
use crate::backend::cuda::blas::sgemm;
use crate::backend::cuda::launch::die;
use crate::backend::cuda::{conv, pool, CudaError};
use crate::nn::layers::{Layer, Shape};

/// A failed launch inside a step has no way back through `Replica`: the rank fails with it.
fn check(r: Result<(), CudaError>) {
    if let Err(e) = r {
        panic!("{e}")
    }
}

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
            argmax,
            col,
            labels,
            row_loss,
            row_correct,
            ..
        } = self;
        let blas: &CudaBlas = blas.as_ref().expect("cuBLAS is held until drop");
        for (l, range) in ranges.into_iter().enumerate() {
            let planned = &model.plan[l];
            let (d_in, d_out) = (model.dims[l], model.dims[l + 1]);
            let (lower, upper) = acts.split_at_mut(l + 1);
            let inp = lower[l].slice(..b * d_in);
            let mut out = upper[0].slice_mut(..b * d_out);
            match (planned.layer, planned.input, range) {
                (Layer::Dense { units }, _, Some((w, bias))) => {
                    let wv = params.slice(w);
                    if let Err(e) = sgemm(
                        blas, false, false, b, units, d_in, 1.0, &inp, &wv, 0.0, &mut out,
                    ) {
                        die(gpu.index, "forward", e)
                    }
                    let bv = params.slice(bias);
                    let (ni, di) = (b as i32, units as i32);
                    launch!(gpu, "bias_add_f32", b * units, &mut out, &bv, &ni, &di);
                }
                (
                    Layer::Conv {
                        channels,
                        kernel,
                        stride,
                        pad,
                    },
                    Shape::Image { c, h, w: iw },
                    Some((w, bias)),
                ) => check(conv::conv2d_forward(
                    gpu,
                    blas,
                    &mut out,
                    &inp,
                    &params.slice(w),
                    &params.slice(bias),
                    b,
                    c,
                    h,
                    iw,
                    channels,
                    kernel,
                    kernel,
                    stride,
                    pad,
                    &mut col.slice_mut(..),
                )),
                (Layer::Pool { kernel, stride }, Shape::Image { c, h, w: iw }, None) => {
                    check(pool::maxpool2d_forward(
                        gpu,
                        &mut out,
                        &mut argmax[l].slice_mut(..b * d_out),
                        &inp,
                        b,
                        c,
                        h,
                        iw,
                        kernel,
                        stride,
                    ))
                }
                (layer, input, _) => unreachable!("planned {layer} on {input}"),
            }
            if planned.relu {
                let nn = (b * d_out) as i32;
                launch!(gpu, "relu_forward_f32", b * d_out, &mut out, &nn);
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
        let ranges = self.layer_ranges();
        let CudaReplica {
            gpu,
            blas,
            model,
            params,
            grads,
            acts,
            dacts,
            argmax,
            col,
            ..
        } = self;
        let blas: &CudaBlas = blas.as_ref().expect("cuBLAS is held until drop");
        for (l, range) in ranges.into_iter().enumerate().rev() {
            let planned = &model.plan[l];
            let (d_in, d_out) = (model.dims[l], model.dims[l + 1]);
            let (dlower, dupper) = dacts.split_at_mut(l + 1);
            let mut dout = dupper[0].slice_mut(..b * d_out);
            if planned.relu {
                let act = acts[l + 1].slice(..b * d_out);
                let nn = (b * d_out) as i32;
                launch!(gpu, "relu_backward_f32", b * d_out, &mut dout, &act, &nn);
            }
            let dout = dout.as_view();
            let inp = acts[l].slice(..b * d_in);
            let mut dinp = (l > 0).then(|| dlower[l].slice_mut(..b * d_in));
            match (planned.layer, planned.input, range) {
                (Layer::Dense { units }, _, Some((w, bias))) => {
                    // the weight gradient, and the bias gradient right after it (Model's layout)
                    let mut wb = grads.slice_mut(w.start..bias.end);
                    let (mut gw, mut gb) = wb.split_at_mut(w.len());
                    // dW += inp^T dout
                    if let Err(e) = sgemm(
                        blas, true, false, d_in, units, b, 1.0, &inp, &dout, 1.0, &mut gw,
                    ) {
                        die(gpu.index, "backward", e)
                    }
                    let (ni, di) = (b as i32, units as i32);
                    launch!(gpu, "bias_grad_f32", units, &mut gb, &dout, &ni, &di);
                    if let Some(dinp) = dinp.as_mut() {
                        // dinp = dout W^T
                        let wv = params.slice(w);
                        if let Err(e) = sgemm(
                            blas, false, true, b, d_in, units, 1.0, &dout, &wv, 0.0, dinp,
                        ) {
                            die(gpu.index, "backward", e)
                        }
                    }
                }
                (
                    Layer::Conv {
                        channels,
                        kernel,
                        stride,
                        pad,
                    },
                    Shape::Image { c, h, w: iw },
                    Some((w, bias)),
                ) => {
                    let mut wb = grads.slice_mut(w.start..bias.end);
                    let (mut gw, mut gb) = wb.split_at_mut(w.len());
                    check(conv::conv2d_backward(
                        gpu,
                        blas,
                        dinp.as_mut(),
                        &mut gw,
                        &mut gb,
                        &dout,
                        &inp,
                        &params.slice(w),
                        b,
                        c,
                        h,
                        iw,
                        channels,
                        kernel,
                        kernel,
                        stride,
                        pad,
                        &mut col.slice_mut(..),
                    ))
                }
                (Layer::Pool { kernel, stride }, Shape::Image { c, h, w: iw }, None) => {
                    if let Some(dinp) = dinp.as_mut() {
                        check(pool::maxpool2d_backward(
                            gpu,
                            dinp,
                            &dout,
                            &argmax[l].slice(..b * d_out),
                            b,
                            c,
                            h,
                            iw,
                            kernel,
                            stride,
                        ))
                    }
                }
                (layer, input, _) => unreachable!("planned {layer} on {input}"),
            }
        }
    }
}
