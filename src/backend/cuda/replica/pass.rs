//! The GPU's ops for the model interpreter (`nn::model::interp`), op for op as the CPU's
//! (`nn::model::cpu`): linear layers as cuBLAS products through the row-major helper, dense
//! convolutions and unpadded max pooling through `conv.rs` / `pool.rs`, depthwise
//! convolutions, batch norm, the other poolings and the elementwise ops through `dwconv`,
//! `bn`, `pool.rs` and `ops.rs`. Activations and their gradients live per value of the
//! graph; an op's activation runs after it forward and masks its output's gradient first
//! backward; an input gradient that is added (a residual's input reached twice) is computed
//! into scratch and accumulated. A residual add's backward (its mask, then each input's
//! gradient written or added) is one kernel (`ops::add_backward`). The per-op backward is in
//! `backprop.rs`. Training passes, and inference passes (evaluation's chunks of
//! `Model::eval_rows` rows are `evaluate.rs`).

use cudarc::cublas::CudaBlas;
use cudarc::driver::CudaSlice;

use super::backprop::Back;
use super::nodes::NodeBufs;
use super::profile::{self, Profile};
use super::weights::Weights;
use super::CudaReplica;
use crate::backend::cuda::blas::gemm;
use crate::backend::cuda::dnn::Key;
use crate::backend::cuda::elem::Elem;
use crate::backend::cuda::launch::{check, die};
use crate::backend::cuda::{bn, conv, dwconv, ops, pointwise, pool, CudaError, Gpu};
use crate::comm::Collective;
use crate::nn::bn::BnGeom;
use crate::nn::model::interp::{self, Exec, Grad};
use crate::nn::model::{Act, BnPass, Model, Op};

/// One pass's view of a replica: its buffers, and the collective sync batch norm sums through.
struct Pass<'a, 'c, E: Elem> {
    r: &'a mut CudaReplica<E>,
    sync: Option<&'a mut (dyn Collective + 'c)>,
}

impl<E: Elem> CudaReplica<E> {
    /// Forward, softmax cross-entropy (per-row loss and correct into `row_loss` /
    /// `row_correct`) and backward over `b` uploaded rows, accumulating gradient sums; with
    /// `sync`, batch norm's statistics over every replica's rows.
    pub(super) fn train_pass(&mut self, b: usize, sync: Option<&mut dyn Collective>) {
        let m = self.model.clone();
        // (every pass counts, an empty one too, as on the CPU)
        if m.has_dropout() {
            check(ops::count_pass(&self.gpu, &mut self.passes.slice_mut(..)));
        }
        // as on the CPU: an empty share of a short last batch has nothing to learn, and batch
        // norm no statistics to take from it (unless the replicas pool theirs)
        if b == 0 && (sync.is_none() || !m.has_batch_norm()) {
            return;
        }
        interp::train(&m, &mut Pass { r: self, sync }, b);
    }

    /// Forward in inference mode and the per-row loss and correct.
    pub(super) fn eval_pass(&mut self, b: usize) {
        let m = self.model.clone();
        interp::evaluate(
            &m,
            &mut Pass {
                r: self,
                sync: None,
            },
            b,
        );
    }
}

/// out[B, OC] = inp[B, C] @ w^T + bias (w is [OC, C], PyTorch's layout, read as `weights`
/// gives it; the bias from the fp32 parameters).
#[allow(clippy::too_many_arguments)]
fn linear_forward<E: Elem>(
    gpu: &Gpu,
    blas: &CudaBlas,
    out: &mut cudarc::driver::CudaViewMut<'_, E>,
    inp: &cudarc::driver::CudaView<'_, E>,
    (weights, params): (&Weights<E>, &CudaSlice<f32>),
    (w, bias): (std::ops::Range<usize>, std::ops::Range<usize>),
    b: usize,
    (c, oc): (usize, usize),
) {
    let wv = weights.of(params, w);
    let product = gemm(
        blas,
        &gpu.stream,
        (false, true),
        (b, oc, c),
        1.0,
        inp,
        &wv,
        0.0,
        out,
    );
    if let Err(e) = product {
        die(gpu.index, "forward", e)
    }
    if !bias.is_empty() {
        let bv = params.slice(bias);
        let (ni, di) = (b as i32, oc as i32);
        launch!(gpu, named!(E, "bias_add"), b * oc, &mut *out, &bv, &ni, &di);
    }
}

impl<E: Elem> Exec for Pass<'_, '_, E> {
    fn forward(&mut self, m: &Model, n: usize, b: usize, train: bool) {
        let node = &m.nodes[n];
        // an empty share (sync batch norm) only takes part in the statistics' exchange
        if b == 0 && !matches!(node.op, Op::BatchNorm { .. }) {
            return;
        }
        let (i, o) = (node.inputs[0], node.output);
        let len = b * m.dims[o];
        let mark = (self.r.profile.as_ref())
            .filter(|_| train)
            .map(Profile::mark);
        let Pass { r, sync } = self;
        let CudaReplica {
            gpu,
            blas,
            dnn,
            params,
            weights,
            acts,
            argmax,
            col,
            nodes,
            running,
            dropout_seed,
            passes,
            layout,
            ..
        } = &mut **r;
        let layout = *layout;
        let weights: &Weights<E> = weights;
        let gpu: &Gpu = gpu;
        let blas: &CudaBlas = blas.as_ref().expect("cuBLAS is held until drop");
        // a node's inputs are made before it
        let (lower, upper) = acts.split_at_mut(o);
        let inp = lower[i].slice(..b * m.dims[i]);
        let mut out = upper[0].slice_mut(..len);
        match node.op {
            Op::Linear {
                inp: c, out: oc, ..
            } => linear_forward(
                gpu,
                blas,
                &mut out,
                &inp,
                (weights, params),
                m.weight_bias(node),
                b,
                (c, oc),
            ),
            Op::Conv {
                g, groups, bias, ..
            } => {
                let (w, bi) = m.weight_bias(node);
                let bv = match bias {
                    true => params.slice(bi),
                    false => nodes.zeros.slice(..g.oc),
                };
                // cuDNN, or cuBLAS for channels-last 1x1 convolutions it leaves: the bias after
                let library = match dnn.as_mut().filter(|d| d.takes(groups, &g, layout)) {
                    Some(d) => {
                        let wv = weights.of(params, w.clone());
                        let key = Key {
                            b,
                            groups,
                            g,
                            layout,
                        };
                        let run = d.forward(key, &mut out, &inp, &wv);
                        let e = |e| CudaError::new(gpu.index, "convolution forward", e);
                        check(run.map_err(e));
                        true
                    }
                    None if pointwise::takes(layout, &g, groups) => {
                        let wv = weights.of(params, w.clone());
                        check(pointwise::forward(gpu, blas, &mut out, &inp, &wv, b, &g));
                        true
                    }
                    None => false,
                };
                if library {
                    if bias {
                        check(conv::bias_add(
                            gpu,
                            &mut out,
                            &bv,
                            b,
                            g.oc,
                            g.oh * g.ow,
                            layout,
                        ));
                    }
                } else {
                    // the own kernels read the fp32 parameters; im2col exists in fp32 only (a
                    // bf16 replica with dense convolutions opens only with cuDNN)
                    let wv = params.slice(w);
                    check(match groups {
                        1 => conv::conv2d_forward(
                            gpu,
                            blas,
                            E::f32_view_mut(&mut out).expect("im2col convolutions are fp32"),
                            E::f32_view(&inp).expect("im2col convolutions are fp32"),
                            &wv,
                            &bv,
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
                        ),
                        _ => dwconv::dwconv_forward(
                            gpu,
                            &mut out,
                            &inp,
                            &wv,
                            bias.then_some(&bv),
                            b,
                            &g,
                            layout,
                        ),
                    })
                }
            }
            Op::BatchNorm { c, hw, .. } => {
                let (w, bi) = m.weight_bias(node);
                let at = m.buffers[node.buffers.expect("batch norm has buffers")].offset;
                let g = BnGeom { b, c, hw };
                let (wv, bv) = (params.slice(w), params.slice(bi));
                let (xs, act) = ((&inp, &wv, &bv), node.op.act());
                match m.bn_pass(n, train) {
                    BnPass::Fixed => {
                        let rv = running.slice(at..at + 2 * c);
                        let saved = &mut nodes.saved[n].slice_mut(..2 * c);
                        let geom = (g, layout);
                        check(bn::forward_fixed(gpu, saved, &rv, &mut out, xs, geom, act))
                    }
                    BnPass::Running => {
                        let rv = running.slice(at..at + 2 * c);
                        check(bn::forward_eval(gpu, &mut out, &rv, xs, (g, layout), act))
                    }
                    BnPass::Batch => {
                        let NodeBufs {
                            saved, count, sums, ..
                        } = nodes;
                        let sync = sync.as_deref_mut().map(|s| s as &mut dyn Collective);
                        match bn::forward_train(
                            gpu,
                            sync,
                            &mut sums.slice_mut(..),
                            &mut saved[n].slice_mut(..2 * c),
                            &mut running.slice_mut(at..at + 2 * c),
                            &mut out,
                            xs,
                            (g, layout),
                            act,
                        ) {
                            Ok(n_seen) => count[n] = n_seen,
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            }
            Op::Add { .. } => {
                let other = lower[node.inputs[1]].slice(..len);
                check(ops::add(gpu, &mut out, (&inp, &other), len, node.op.act()))
            }
            Op::MaxPool(win) if win.pad == 0 => check(pool::maxpool2d_forward(
                gpu,
                &mut out,
                &mut argmax[n].slice_mut(..len),
                &inp,
                b,
                win.c,
                win.h,
                win.w,
                win.k,
                win.stride,
                layout,
            )),
            Op::MaxPool(win) => check(pool::maxpool2d_padded_forward(
                gpu,
                &mut out,
                &mut argmax[n].slice_mut(..len),
                &inp,
                b,
                &win,
                layout,
            )),
            Op::AvgPool(win) => check(pool::avgpool2d_forward(
                gpu, &mut out, &inp, b, &win, layout,
            )),
            Op::GlobalAvgPool { c, hw } => {
                check(pool::gap_forward(gpu, &mut out, &inp, (b, c), hw, layout))
            }
            Op::Dropout { p } if train => {
                let mut mask = nodes.saved[n].slice_mut(..len);
                let key = (*dropout_seed, &passes.slice(..), n);
                check(ops::dropout_mask(gpu, &mut mask, len, key, p));
                check(ops::mul(gpu, &mut out, &inp, &mask.as_view(), len));
            }
            Op::Activation(_) | Op::Dropout { .. } => {
                if let Err(e) = gpu.stream.memcpy_dtod(&inp, &mut out) {
                    die(gpu.index, "forward", e)
                }
            }
        }
        // (batch norm and the add apply theirs as they write: one pass fewer over the output)
        let fused = matches!(node.op, Op::BatchNorm { .. } | Op::Add { .. });
        match node.op.act() {
            _ if fused => {}
            Act::None => {}
            Act::Relu => check(ops::relu_forward(gpu, &mut out, len)),
            Act::Relu6 => check(ops::relu6_forward(gpu, &mut out, len)),
        }
        if let (Some(p), Some(mark)) = (self.r.profile.as_mut(), mark) {
            p.count((profile::kind(&node.op), "forward"), Some(n), mark);
        }
    }

    /// The loss stays on the device (`row_loss`, `row_correct`, summed by the caller with
    /// the rest of the step's metrics): (0, 0) here.
    fn loss(&mut self, m: &Model, b: usize, grad: bool) -> (f64, usize) {
        if b == 0 {
            return (0.0, 0);
        }
        let mark = (self.r.profile.as_ref())
            .filter(|_| grad)
            .map(Profile::mark);
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
        } = &mut *self.r;
        let logits = acts[o].slice(..b * classes);
        let labels = labels.slice(..b);
        let mut loss = row_loss.slice_mut(..b);
        let mut correct = row_correct.slice_mut(..b);
        let mut dlogits = dacts[o].slice_mut(..b * classes);
        check(ops::softmax_xent(
            gpu,
            &logits,
            &labels,
            (&mut loss, &mut correct),
            &mut dlogits,
            (b, classes),
            m.label_smoothing,
        ));
        if let (Some(p), Some(mark)) = (self.r.profile.as_mut(), mark) {
            p.count(("softmax cross-entropy", "both ways"), None, mark);
        }
        (0.0, 0)
    }

    fn backward(&mut self, m: &Model, n: usize, b: usize, din: &[Grad]) {
        let node = &m.nodes[n];
        // an empty share (sync batch norm) only takes part in the sums' exchange
        if b == 0 && !matches!(node.op, Op::BatchNorm { .. }) {
            return;
        }
        let o = node.output;
        let len = b * m.dims[o];
        let mark = self.r.profile.as_ref().map(Profile::mark);
        let Pass { r, sync } = self;
        let CudaReplica {
            gpu,
            blas,
            dnn,
            params,
            weights,
            wgrad,
            grads,
            acts,
            dacts,
            argmax,
            col,
            nodes,
            layout,
            ..
        } = &mut **r;
        let gpu: &Gpu = gpu;
        let NodeBufs {
            saved,
            count,
            acc,
            sink,
            sums,
            dw_parts,
            ..
        } = nodes;
        let (dlower, dupper) = dacts.split_at_mut(o);
        let mut dout = dupper[0].slice_mut(..len);
        // a sum of two values that both want their gradients: its activation's mask and both
        // gradients in one pass over dout
        if let (Op::Add { .. }, [g0, g1]) = (&node.op, din) {
            let [i0, i1] = [node.inputs[0], node.inputs[1]];
            let wanted = *g0 != Grad::Skip && *g1 != Grad::Skip;
            if let (true, Ok([d0, d1])) = (wanted, dlower.get_disjoint_mut([i0, i1])) {
                let (out, add) = (acts[o].slice(..len), [*g0 == Grad::Add, *g1 == Grad::Add]);
                let d = [&mut d0.slice_mut(..len), &mut d1.slice_mut(..len)];
                let act = node.op.act();
                check(ops::add_backward(
                    gpu,
                    d,
                    add,
                    (&dout.as_view(), &out),
                    len,
                    act,
                ));
                if let (Some(p), Some(mark)) = (self.r.profile.as_mut(), mark) {
                    p.count((profile::kind(&node.op), "backward"), Some(n), mark);
                }
                return;
            }
        }
        // the activation's mask first, from the op's output (batch norm's is taken inside its
        // backward, from the output recomputed from its input: one pass fewer)
        if !matches!(node.op, Op::BatchNorm { .. }) {
            let out = acts[o].slice(..len);
            check(ops::act_backward(gpu, &mut dout, &out, len, node.op.act()));
        }
        let dout = dout.as_view();
        let mut back = Back {
            gpu,
            blas: blas.as_ref().expect("cuBLAS is held until drop"),
            dnn: dnn.as_mut(),
            weights,
            params,
            wgrad,
            grads,
            acts,
            argmax,
            col,
            saved,
            count,
            sink,
            sums,
            dw_parts,
            sync: sync.as_deref_mut().map(|s| s as &mut dyn Collective),
            layout: *layout,
        };
        // input gradients land in their own buffer, or in `acc` to be added to it (for Add, straight
        // from dout)
        for (k, &i) in node.inputs.iter().enumerate() {
            if k > 0 && !matches!(node.op, Op::Add { .. }) {
                break;
            }
            let li = b * m.dims[i];
            // the sum passes dout on to each input as it is: one it adds to takes it straight
            // from dout (no copy into `acc` first)
            if matches!(node.op, Op::Add { .. }) && din[k] == Grad::Add {
                check(ops::accumulate(
                    gpu,
                    &mut dlower[i].slice_mut(..li),
                    &dout,
                    li,
                ));
                continue;
            }
            {
                let mut target = match din[k] {
                    Grad::Skip => None,
                    Grad::Write => Some(dlower[i].slice_mut(..li)),
                    Grad::Add => Some(acc.slice_mut(..li)),
                };
                if k == 0 {
                    back.op(m, n, b, &dout, target.as_mut());
                } else if let Some(t) = target.as_mut() {
                    if let Err(e) = gpu.stream.memcpy_dtod(&dout, t) {
                        die(gpu.index, "backward", e)
                    }
                }
            }
            if din[k] == Grad::Add {
                check(ops::accumulate(
                    gpu,
                    &mut dlower[i].slice_mut(..li),
                    &acc.slice(..li),
                    li,
                ));
            }
        }
        if let (Some(p), Some(mark)) = (self.r.profile.as_mut(), mark) {
            p.count((profile::kind(&node.op), "backward"), Some(n), mark);
        }
    }
}
