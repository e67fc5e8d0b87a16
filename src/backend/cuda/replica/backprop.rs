//! Each op's backward on the GPU for its first input, as the CPU interpreter's `op_backward`:
//! parameter gradients accumulated, the input's gradient written (overwritten) where wanted.
//! The output's gradient arrives already masked by the op's activation, except batch norm's,
//! which applies its activation's derivative itself (`bn::backward`).

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};

use super::weights::Weights;
use crate::backend::cuda::blas::gemm;
use crate::backend::cuda::convert;
use crate::backend::cuda::dnn::{Dnn, Key};
use crate::backend::cuda::elem::Elem;
use crate::backend::cuda::launch::{check, die, grid_stride_cfg};
use crate::backend::cuda::layout::{self, Layout};
use crate::backend::cuda::{bn, conv, dwconv, ops, pointwise, pool, CudaError, Gpu};
use crate::comm::Collective;
use crate::nn::bn::BnGeom;
use crate::nn::grouped::ConvGeom;
use crate::nn::model::{BnPass, Model, Op};

/// What an op's backward reads and writes besides the activations' gradients.
pub(super) struct Back<'x, E: Elem> {
    pub gpu: &'x Gpu,
    pub blas: &'x CudaBlas,
    /// cuDNN for the convolutions, where the replica uses it.
    pub dnn: Option<&'x mut Dnn<E>>,
    pub params: &'x CudaSlice<f32>,
    /// What the products read as weights.
    pub weights: &'x Weights<E>,
    /// A bf16 convolution's weight gradient before it is added to `grads`.
    pub wgrad: &'x mut CudaSlice<E>,
    /// n_params gradient sums (then the metric slots).
    pub grads: &'x mut CudaSlice<f32>,
    pub acts: &'x [CudaSlice<E>],
    pub argmax: &'x [CudaSlice<u32>],
    pub col: &'x mut CudaSlice<f32>,
    pub saved: &'x [CudaSlice<f32>],
    pub count: &'x [f32],
    pub sink: &'x mut CudaSlice<f32>,
    pub sums: &'x mut CudaSlice<f64>,
    /// The own depthwise kernels' weight-gradient parts.
    pub dw_parts: &'x mut CudaSlice<f32>,
    pub sync: Option<&'x mut dyn Collective>,
    /// How the activations are laid out.
    pub layout: Layout,
}

impl<E: Elem> Back<'_, E> {
    /// Node `n`'s op backward over `b` rows from `dout`: parameter gradients accumulated, the
    /// first input's gradient into `d_in` (overwritten; skipped when `None`).
    pub fn op(
        &mut self,
        m: &Model,
        n: usize,
        b: usize,
        dout: &CudaView<'_, E>,
        d_in: Option<&mut CudaViewMut<'_, E>>,
    ) {
        let node = &m.nodes[n];
        let i = node.inputs[0];
        let gpu = self.gpu;
        let inp = self.acts[i].slice(..b * m.dims[i]);
        let len = dout.len();
        match node.op {
            Op::Linear {
                inp: c, out: oc, ..
            } => self.linear(m, n, b, (c, oc), dout, &inp, d_in),
            Op::Conv {
                g, groups, bias, ..
            } => {
                let (w, bi) = m.weight_bias(node);
                // the weight gradient, and the bias gradient right after it (Model's layout),
                // or the sink of a bias-less convolution
                let mut wb = self.grads.slice_mut(w.start..bi.end);
                let (mut gw, mut gb) = wb.split_at_mut(w.len());
                let mut sink = self.sink.slice_mut(..g.oc);
                let gb = if bias { &mut gb } else { &mut sink };
                let layout = self.layout;
                if let Some(d) = (self.dnn.as_deref_mut()).filter(|d| d.takes(groups, &g, layout)) {
                    let k = Key {
                        b,
                        groups,
                        g,
                        layout,
                    };
                    let wv = self.weights.of(self.params, w.clone());
                    let moved = layout.nhwc() && layout::moves_weights(&node.op);
                    // fp32 adds into the gradients; bf16, or weights in cuDNN's NHWC filter
                    // layout, write the scratch, then add that (moved back)
                    let run = match (E::from_f32_view_mut(&mut gw), moved) {
                        (Some(gw), false) => d.backward(k, d_in, (gw, 1.0), dout, &inp, &wv),
                        _ => {
                            let mut scratch = self.wgrad.slice_mut(..w.len());
                            let run = d.backward(k, d_in, (&mut scratch, 0.0), dout, &inp, &wv);
                            let scratch = scratch.as_view();
                            run.and_then(|()| {
                                let added = match moved {
                                    true => add_moved_back(gpu, &mut gw, &scratch, g, groups),
                                    false => convert::add_to_f32(gpu, &mut gw, &scratch, w.len()),
                                };
                                added.map_err(|e| e.to_string())
                            })
                        }
                    };
                    check(run.map_err(|e| CudaError::new(gpu.index, "convolution backward", e)));
                    if bias {
                        let ohw = g.oh * g.ow;
                        check(conv::bias_grad(gpu, gb, dout, b, g.oc, ohw, layout));
                    }
                    return;
                }
                // a channels-last 1x1 convolution cuDNN leaves: cuBLAS's products, the weight
                // gradient added into `grads` in fp32
                if pointwise::takes(layout, &g, groups) {
                    let wv = self.weights.of(self.params, w.clone());
                    let ins = (dout, &inp, &wv);
                    check(pointwise::backward(
                        gpu, self.blas, d_in, &mut gw, ins, b, &g,
                    ));
                    if bias {
                        check(conv::bias_grad(gpu, gb, dout, b, g.oc, g.oh * g.ow, layout));
                    }
                    return;
                }
                // the own kernels read the fp32 parameters; im2col exists in fp32 only (a bf16
                // replica with dense convolutions opens only with cuDNN)
                let wv = self.params.slice(w.clone());
                let fp32 = "im2col convolutions are fp32";
                check(match groups {
                    1 => conv::conv2d_backward(
                        gpu,
                        self.blas,
                        d_in.map(|d| E::f32_view_mut(d).expect(fp32)),
                        &mut gw,
                        gb,
                        E::f32_view(dout).expect(fp32),
                        E::f32_view(&inp).expect(fp32),
                        &wv,
                        b,
                        g.c,
                        g.h,
                        g.w,
                        g.oc,
                        g.k,
                        g.k,
                        g.stride,
                        g.pad,
                        &mut self.col.slice_mut(..),
                    ),
                    _ => dwconv::dwconv_backward(
                        gpu,
                        d_in,
                        &mut gw,
                        bias.then_some(gb),
                        &mut self.dw_parts.slice_mut(..),
                        (dout, &inp, &wv),
                        (b, &g, self.layout),
                    ),
                })
            }
            Op::BatchNorm { c, hw, .. } => {
                let (w, bi) = m.weight_bias(node);
                let (wv, bv) = (self.params.slice(w.clone()), self.params.slice(bi.clone()));
                let mut wb = self.grads.slice_mut(w.start..bi.end);
                let (mut gw, mut gb) = wb.split_at_mut(w.len());
                let sv = self.saved[n].slice(..2 * c);
                let (sync, taken) = match m.bn_pass(n, true) {
                    BnPass::Fixed => (None, bn::Taken::Fixed),
                    _ => (self.sync.as_deref_mut(), bn::Taken::Over(self.count[n])),
                };
                // (`dout` is the gradient at the activation's output: batch norm takes its
                // activation's derivative itself)
                check(bn::backward(
                    gpu,
                    sync.map(|s| s as &mut dyn Collective),
                    &mut self.sums.slice_mut(..),
                    d_in,
                    (&mut gw, &mut gb),
                    (dout, &inp),
                    (&sv, &wv, &bv),
                    (BnGeom { b, c, hw }, self.layout),
                    taken,
                    node.op.act(),
                ))
            }
            Op::Activation(_) | Op::Add { .. } => {
                if let Some(d) = d_in {
                    if let Err(e) = gpu.stream.memcpy_dtod(dout, d) {
                        die(gpu.index, "backward", e)
                    }
                }
            }
            Op::MaxPool(win) => {
                let Some(d) = d_in else { return };
                let arg = self.argmax[n].slice(..len);
                let layout = self.layout;
                check(match win.pad {
                    0 => pool::maxpool2d_backward(
                        gpu, d, dout, &arg, b, win.c, win.h, win.w, win.k, win.stride, layout,
                    ),
                    _ => pool::maxpool2d_padded_backward(gpu, d, dout, &arg, b, &win, layout),
                })
            }
            Op::AvgPool(win) => {
                if let Some(d) = d_in {
                    check(pool::avgpool2d_backward(gpu, d, dout, b, &win, self.layout))
                }
            }
            Op::GlobalAvgPool { c, hw } => {
                if let Some(d) = d_in {
                    check(pool::gap_backward(gpu, d, dout, (b, c), hw, self.layout))
                }
            }
            Op::Dropout { .. } => {
                if let Some(d) = d_in {
                    check(ops::mul(gpu, d, dout, &self.saved[n].slice(..len), len))
                }
            }
        }
    }

    /// dW[OC, C] += dout^T inp, dbias += column sums of dout, dinp = dout W.
    #[allow(clippy::too_many_arguments)]
    fn linear(
        &mut self,
        m: &Model,
        n: usize,
        b: usize,
        (c, oc): (usize, usize),
        dout: &CudaView<'_, E>,
        inp: &CudaView<'_, E>,
        d_in: Option<&mut CudaViewMut<'_, E>>,
    ) {
        let (gpu, s) = (self.gpu, &self.gpu.stream);
        let (w, bias) = m.weight_bias(&m.nodes[n]);
        // the weight gradient (accumulated in fp32 whatever the operands), and the bias
        // gradient right after it (Model's layout)
        let mut wb = self.grads.slice_mut(w.start..bias.end);
        let (mut gw, mut gb) = wb.split_at_mut(w.len());
        let dims = (oc, c, b);
        if let Err(e) = gemm(
            self.blas,
            s,
            (true, false),
            dims,
            1.0,
            dout,
            inp,
            1.0,
            &mut gw,
        ) {
            die(gpu.index, "backward", e)
        }
        if !bias.is_empty() {
            let (ni, di) = (b as i32, oc as i32);
            launch!(gpu, named!(E, "bias_grad"), oc, &mut gb, dout, &ni, &di);
        }
        if let Some(dinp) = d_in {
            let wv = self.weights.of(self.params, w);
            let dims = (b, c, oc);
            if let Err(e) = gemm(
                self.blas,
                s,
                (false, false),
                dims,
                1.0,
                dout,
                &wv,
                0.0,
                dinp,
            ) {
                die(gpu.index, "backward", e)
            }
        }
    }
}

/// acc[OC, C, K, K] += g[OC, K, K, C]: a channels-last convolution's weight gradient, in
/// cuDNN's NHWC filter layout (of the activations' type), added to the fp32 gradients
/// (`kcrs_add_krsc` in `kernels/layout.cu`).
fn add_moved_back<E: Elem>(
    gpu: &Gpu,
    acc: &mut CudaViewMut<'_, f32>,
    g: &CudaView<'_, E>,
    geom: ConvGeom,
    groups: usize,
) -> Result<(), CudaError> {
    let (oc, c, kk) = (geom.oc, geom.c / groups, geom.k * geom.k);
    let n = oc * c * kk;
    if acc.len() < n || g.len() < n {
        let e = format!("{n} weights, buffers of {} and {}", acc.len(), g.len());
        return Err(CudaError::new(gpu.index, "move a weight gradient back", e));
    }
    let (oci, ci, kki) = (oc as i32, c as i32, kk as i32);
    try_launch!(
        gpu,
        named!(E, "kcrs_add_krsc"),
        grid_stride_cfg(n),
        &mut *acc,
        g,
        &oci,
        &ci,
        &kki
    )
}
