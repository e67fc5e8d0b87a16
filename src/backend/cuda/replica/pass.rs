//! The GPU's ops for the model interpreter (`nn::model::interp`): linear layers as cuBLAS
//! products through the row-major helper, convolutions and max pooling through `conv.rs` /
//! `pool.rs`, the rest kernels of `kernels/`. Activations and their gradients live per value of
//! the graph, as on the CPU. `supports` says which models these ops cover.

use cudarc::cublas::CudaBlas;

use super::CudaReplica;
use crate::backend::cuda::blas::sgemm;
use crate::backend::cuda::launch::die;
use crate::backend::cuda::{conv, pool, CudaError};
use crate::nn::model::interp::{self, Exec, Grad};
use crate::nn::model::{Act, Model, Op};

/// A failed launch inside a step has no way back through `Replica`: the rank fails with it.
fn check(r: Result<(), CudaError>) {
    if let Err(e) = r {
        panic!("{e}")
    }
}

/// Whether the GPU backend has every op of `m`; else what it lacks, for the refusal.
pub fn supports(m: &Model) -> Result<(), String> {
    for node in &m.nodes {
        let ok = match node.op {
            Op::Linear { act, .. } => act != Act::Relu6,
            Op::Conv { groups, bias, act, .. } => groups == 1 && bias && act != Act::Relu6,
            Op::MaxPool(w) => w.pad == 0,
            Op::Activation(a) => a == Act::Relu,
            _ => false,
        };
        if !ok {
            return Err(format!(
                "the GPU backend does not run this model's `{}` yet (batch norm, depthwise \
                 convolutions, residual adds, ReLU6, average pooling and dropout train on CPU \
                 workers in this version); use --devices cpu:N",
                node.op.kind()
            ));
        }
    }
    Ok(())
}

impl CudaReplica {
    /// Forward, softmax cross-entropy (per-row loss and correct into `row_loss` /
    /// `row_correct`) and backward over `b` uploaded rows, accumulating gradient sums.
    pub(super) fn train_pass(&mut self, b: usize) {
        let m = self.model.clone();
        interp::train(&m, self, b);
    }

    /// Forward in inference mode and the per-row loss and correct.
    pub(super) fn eval_pass(&mut self, b: usize) {
        let m = self.model.clone();
        interp::evaluate(&m, self, b);
    }
}

impl Exec for CudaReplica {
    fn forward(&mut self, m: &Model, n: usize, b: usize, _train: bool) {
        let node = &m.nodes[n];
        let (i, o) = (node.inputs[0], node.output);
        let (d_in, d_out) = (m.dims[i], m.dims[o]);
        let CudaReplica {
            gpu,
            blas,
            params,
            acts,
            argmax,
            col,
            ..
        } = self;
        let blas: &CudaBlas = blas.as_ref().expect("cuBLAS is held until drop");
        // a node's inputs are made before it
        let (lower, upper) = acts.split_at_mut(o);
        let inp = lower[i].slice(..b * d_in);
        let mut out = upper[0].slice_mut(..b * d_out);
        match node.op {
            Op::Linear { inp: c, out: oc, .. } => {
                let (w, bias) = m.weight_bias(node);
                // out = inp @ w^T (w is [OC, C], PyTorch's layout)
                let wv = params.slice(w);
                if let Err(e) = sgemm(blas, false, true, b, oc, c, 1.0, &inp, &wv, 0.0, &mut out) {
                    die(gpu.index, "forward", e)
                }
                if !bias.is_empty() {
                    let bv = params.slice(bias);
                    let (ni, di) = (b as i32, oc as i32);
                    launch!(gpu, "bias_add_f32", b * oc, &mut out, &bv, &ni, &di);
                }
            }
            Op::Conv { g, .. } => {
                let (w, bias) = m.weight_bias(node);
                check(conv::conv2d_forward(
                    gpu,
                    blas,
                    &mut out,
                    &inp,
                    &params.slice(w),
                    &params.slice(bias),
                    b,
                    g.c,
                    g.h,
                    g.w,
                    g.oc,
                    g.k,
                    g.k,
                    g.stride,
                    g.pad,
                    &mut col.slice_mut(..),
                ))
            }
            Op::MaxPool(win) => check(pool::maxpool2d_forward(
                gpu,
                &mut out,
                &mut argmax[n].slice_mut(..b * d_out),
                &inp,
                b,
                win.c,
                win.h,
                win.w,
                win.k,
                win.stride,
            )),
            Op::Activation(_) => {
                if let Err(e) = gpu.stream.memcpy_dtod(&inp, &mut out) {
                    die(gpu.index, "forward", e)
                }
            }
            op => unreachable!("`supports` refused {}", op.kind()),
        }
        if node.op.act() == Act::Relu {
            let nn = (b * d_out) as i32;
            launch!(gpu, "relu_forward_f32", b * d_out, &mut out, &nn);
        }
    }

    /// The loss stays on the device (`row_loss`, `row_correct`, summed by the caller with
    /// the rest of the step's metrics): (0, 0) here.
    fn loss(&mut self, m: &Model, b: usize, _grad: bool) -> (f64, usize) {
        let o = m.output();
        let classes = m.dims[o];
        let CudaReplica {
            gpu,
            acts,
            dacts,
            labels,
            row_loss,
            row_correct,
            ..
        } = self;
        let logits = acts[o].slice(..b * classes);
        let labels = labels.slice(..b);
        let mut loss = row_loss.slice_mut(..b);
        let mut correct = row_correct.slice_mut(..b);
        let mut dlogits = dacts[o].slice_mut(..b * classes);
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
        (0.0, 0)
    }

    fn backward(&mut self, m: &Model, n: usize, b: usize, din: &[Grad]) {
        let node = &m.nodes[n];
        let (i, o) = (node.inputs[0], node.output);
        let (d_in, d_out) = (m.dims[i], m.dims[o]);
        let CudaReplica {
            gpu,
            blas,
            params,
            grads,
            acts,
            dacts,
            argmax,
            col,
            ..
        } = self;
        let blas: &CudaBlas = blas.as_ref().expect("cuBLAS is held until drop");
        let (dlower, dupper) = dacts.split_at_mut(o);
        let mut dout = dupper[0].slice_mut(..b * d_out);
        if node.op.act() == Act::Relu {
            let act = acts[o].slice(..b * d_out);
            let nn = (b * d_out) as i32;
            launch!(gpu, "relu_backward_f32", b * d_out, &mut dout, &act, &nn);
        }
        let dout = dout.as_view();
        let inp = acts[i].slice(..b * d_in);
        let mut dinp = match din[0] {
            Grad::Skip => None,
            Grad::Write => Some(dlower[i].slice_mut(..b * d_in)),
            Grad::Add => unreachable!("`supports` refused models with residual adds"),
        };
        match node.op {
            Op::Linear { inp: c, out: oc, .. } => {
                let (w, bias) = m.weight_bias(node);
                // the weight gradient, and the bias gradient right after it (Model's layout)
                let mut wb = grads.slice_mut(w.start..bias.end);
                let (mut gw, mut gb) = wb.split_at_mut(w.len());
                // dW[OC, C] += dout^T inp
                if let Err(e) = sgemm(blas, true, false, oc, c, b, 1.0, &dout, &inp, 1.0, &mut gw) {
                    die(gpu.index, "backward", e)
                }
                if !bias.is_empty() {
                    let (ni, di) = (b as i32, oc as i32);
                    launch!(gpu, "bias_grad_f32", oc, &mut gb, &dout, &ni, &di);
                }
                if let Some(dinp) = dinp.as_mut() {
                    // dinp = dout W
                    let wv = params.slice(w);
                    if let Err(e) = sgemm(blas, false, false, b, c, oc, 1.0, &dout, &wv, 0.0, dinp) {
                        die(gpu.index, "backward", e)
                    }
                }
            }
            Op::Conv { g, .. } => {
                let (w, bias) = m.weight_bias(node);
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
                    g.c,
                    g.h,
                    g.w,
                    g.oc,
                    g.k,
                    g.k,
                    g.stride,
                    g.pad,
                    &mut col.slice_mut(..),
                ))
            }
            Op::MaxPool(win) => {
                if let Some(dinp) = dinp.as_mut() {
                    check(pool::maxpool2d_backward(
                        gpu,
                        dinp,
                        &dout,
                        &argmax[n].slice(..b * d_out),
                        b,
                        win.c,
                        win.h,
                        win.w,
                        win.k,
                        win.stride,
                    ))
                }
            }
            Op::Activation(_) => {
                if let Some(dinp) = dinp.as_mut() {
                    if let Err(e) = gpu.stream.memcpy_dtod(&dout, dinp) {
                        die(gpu.index, "backward", e)
                    }
                }
            }
            op => unreachable!("`supports` refused {}", op.kind()),
        }
    }
}
