//! The CPU's ops for the interpreter: each op on slices (`nn::grouped`, `nn::bn`,
//! `nn::depthwise`, `nn::pool`, `nn::ops`), over the buffers of a `Workspace`.

use std::mem::take;
use std::ops::Range;

use crate::nn::bn::{
    bn_backward, bn_backward_own, bn_forward_eval, bn_forward_fixed, bn_forward_train,
    bn_grad_sums, channel_sums, BnGeom, BnSaved, BnStats,
};
use crate::nn::depthwise::{dwconv_backward, dwconv_forward};
use crate::nn::grouped;
use crate::nn::ops::{
    dropout_key, dropout_mask, linear_backward, linear_forward, mul, par, softmax_xent_smoothed,
};
use crate::nn::pool::{
    avgpool2d_backward, avgpool2d_forward, gap_backward, gap_forward, maxpool2d_padded_backward,
    maxpool2d_padded_forward,
};

use super::{grow, Cpu, SumAcross};
use crate::nn::model::interp::{Exec, Grad};
use crate::nn::model::op::{Act, Op, BN_EPS, BN_MOMENTUM};
use crate::nn::model::{BnPass, Model};

fn split(g: &mut [f32], w: Range<usize>, b: Range<usize>) -> (&mut [f32], &mut [f32]) {
    debug_assert_eq!(w.end, b.start);
    let (head, tail) = g[w.start..b.end].split_at_mut(w.len());
    (head, tail)
}

fn bn_geom(b: usize, c: usize, hw: usize) -> BnGeom {
    BnGeom { b, c, hw }
}

/// The value's activations over the batch (value 0: the batch itself).
fn value<'v>(vals: &'v [Vec<f32>], x: &'v [f32], m: &Model, v: usize, b: usize) -> &'v [f32] {
    let n = b * m.dims[v];
    match v {
        0 => &x[..n],
        _ => &vals[v][..n],
    }
}

/// Ops that apply their activation themselves (a dense convolution its ReLU group by group,
/// batch norm any per channel, in cache, a residual add its ReLU as it adds and masks as it
/// passes the gradient on); the others' runs after them.
fn native_act(op: &Op) -> bool {
    matches!(
        op,
        Op::Conv {
            groups: 1,
            act: Act::Relu,
            ..
        } | Op::BatchNorm { .. }
            | Op::Add { act: Act::Relu }
    )
}

impl Exec for Cpu<'_, '_> {
    fn forward(&mut self, m: &Model, n: usize, b: usize, train: bool) {
        let node = &m.nodes[n];
        let o = node.output;
        let len = b * m.dims[o];
        let ws = &mut *self.ws;
        let mut out = take(&mut ws.vals[o]);
        let out_s = &mut out[..len];
        let inp = value(&ws.vals, self.x, m, node.inputs[0], b);
        let p = self.params;
        match node.op {
            Op::Conv {
                g,
                groups,
                bias,
                act,
            } => {
                let (w, bi) = m.weight_bias(node);
                let bias_s = if bias { &p[bi] } else { &ws.zeros[..g.oc] };
                if groups == 1 {
                    let relu = act == Act::Relu;
                    grouped::conv_forward(out_s, inp, &p[w], bias_s, b, &g, relu, &mut ws.conv);
                } else {
                    dwconv_forward(out_s, inp, &p[w], bias.then_some(bias_s), b, &g);
                }
            }
            Op::BatchNorm { c, hw, act } => {
                let (w, bi) = m.weight_bias(node);
                let at = m.buffers[node.buffers.expect("batch norm has buffers")].offset;
                let running = &mut self.buffers[at..at + 2 * c];
                let g = bn_geom(b, c, hw);
                let wb = (&p[w], &p[bi]);
                let saved = &mut ws.saved[n];
                match m.bn_pass(n, train) {
                    BnPass::Batch => {
                        let st = self.sync.as_deref_mut().map(|s| global_stats(s, inp, g));
                        saved[2 * c] = st.as_ref().map_or((b * hw) as f64, |s| s.n) as f32;
                        let consts = (BN_EPS, BN_MOMENTUM);
                        let st = st.as_ref();
                        bn_forward_train(out_s, saved, running, inp, wb, g, st, act, consts);
                    }
                    BnPass::Fixed => {
                        bn_forward_fixed(out_s, saved, running, inp, wb, g, act, BN_EPS);
                    }
                    BnPass::Running => bn_forward_eval(out_s, running, inp, wb, g, act, BN_EPS),
                }
            }
            Op::Activation(_) => out_s.copy_from_slice(inp),
            Op::Add { act } => {
                let other = value(&ws.vals, self.x, m, node.inputs[1], b);
                match act {
                    Act::Relu => par::add_relu_forward(out_s, inp, other),
                    _ => par::add_forward(out_s, inp, other),
                }
            }
            Op::MaxPool(win) if win.pad == 0 => grouped::pool_forward(
                out_s,
                &mut ws.argmax[n],
                inp,
                b,
                (win.c, win.h, win.w),
                (win.oh, win.ow),
                win.k,
                win.stride,
            ),
            Op::MaxPool(win) => maxpool2d_padded_forward(out_s, &mut ws.argmax[n], inp, b, &win),
            Op::AvgPool(win) => avgpool2d_forward(out_s, inp, b, &win),
            Op::GlobalAvgPool { c, hw } => gap_forward(out_s, inp, b * c, hw),
            Op::Linear {
                inp: c, out: oc, ..
            } => {
                let (w, bi) = m.weight_bias(node);
                linear_forward(out_s, inp, &p[w], &p[bi], b, c, oc);
            }
            Op::Dropout { p: prob } if train => {
                let mask = &mut ws.saved[n][..len];
                dropout_mask(mask, dropout_key(ws.dropout_seed, ws.passes, n), prob);
                mul(out_s, inp, mask);
            }
            Op::Dropout { .. } => out_s.copy_from_slice(inp),
        }
        if !native_act(&node.op) {
            node.op.act().forward(out_s);
        }
        ws.vals[o] = out;
    }

    fn loss(&mut self, m: &Model, b: usize, grad: bool) -> (f64, usize) {
        let o = m.output();
        let classes = m.dims[o];
        if !grad {
            let logits = &self.ws.vals[o][..b * classes];
            return softmax_xent_smoothed(None, logits, self.y, b, classes, m.label_smoothing);
        }
        let mut d = self.ws.grad(m, o, b);
        let logits = &self.ws.vals[o][..b * classes];
        let eps = m.label_smoothing;
        let r = softmax_xent_smoothed(Some(&mut d[..b * classes]), logits, self.y, b, classes, eps);
        self.ws.grads[o] = d;
        r
    }

    fn backward(&mut self, m: &Model, n: usize, b: usize, din: &[Grad]) {
        let node = &m.nodes[n];
        let o = node.output;
        let len = b * m.dims[o];
        let mut dout = take(&mut self.ws.grads[o]);
        let dout_s = &mut dout[..len];
        {
            let out = &self.ws.vals[o][..len];
            if !native_act(&node.op) {
                node.op.act().backward(dout_s, out);
            }
        }
        if matches!(node.op, Op::Add { .. } | Op::Activation(_)) {
            return self.pass_through(m, n, b, din, dout);
        }
        // input gradients land in their own buffer, or in `acc` to be added to it
        for (k, &i) in node.inputs.iter().enumerate() {
            if k > 0 {
                break;
            }
            let mut target = match din[k] {
                Grad::Skip => None,
                Grad::Write => Some(self.ws.grad(m, i, b)),
                Grad::Add => {
                    let mut acc = take(&mut self.ws.acc);
                    grow(&mut acc, b * m.dims[i]);
                    Some(acc)
                }
            };
            let d_in = target.as_mut().map(|t| &mut t[..b * m.dims[i]]);
            self.op_backward(m, n, b, dout_s, d_in);
            match (din[k], target) {
                (Grad::Write, Some(t)) => self.ws.grads[i] = t,
                (Grad::Add, Some(t)) => {
                    let l = b * m.dims[i];
                    par::accumulate(&mut self.ws.grads[i][..l], &t[..l]);
                    self.ws.acc = t;
                }
                _ => {}
            }
        }
        self.ws.grads[o] = dout;
    }
}

impl Cpu<'_, '_> {
    /// The backward of ops whose input gradients are their (masked) output gradient itself
    /// (an activation, a residual add): added where an input has one already, else a copy, and
    /// for the last input `dout`'s buffer itself, moved (it is not needed after this op). A
    /// residual add's ReLU (`native_act`) masks dout in the same pass as the first input's
    /// gradient.
    fn pass_through(&mut self, m: &Model, n: usize, b: usize, din: &[Grad], mut dout: Vec<f32>) {
        let node = &m.nodes[n];
        let o = node.output;
        let len = b * m.dims[o];
        let last = node.inputs.len() - 1;
        // the add's output while dout is not yet masked by its ReLU
        let out = take(&mut self.ws.vals[o]);
        let mut unmasked = native_act(&node.op).then_some(&out[..len]);
        for (k, &i) in node.inputs.iter().enumerate() {
            let d = &mut dout[..len];
            match (din[k], unmasked.take()) {
                (Grad::Skip, keep) => unmasked = keep,
                (Grad::Add, None) => par::accumulate(&mut self.ws.grads[i][..len], d),
                (Grad::Add, Some(out)) => {
                    par::relu_backward_accumulate(d, &mut self.ws.grads[i][..len], out)
                }
                (Grad::Write, mask) if k == last => {
                    if let Some(out) = mask {
                        par::relu_backward(d, out);
                    }
                    std::mem::swap(&mut self.ws.grads[i], &mut dout);
                }
                (Grad::Write, mask) => {
                    let mut t = self.ws.grad(m, i, b);
                    match mask {
                        Some(out) => par::relu_backward_copy(d, &mut t[..len], out),
                        None => par::copy(&mut t[..len], d),
                    }
                    self.ws.grads[i] = t;
                }
            }
        }
        self.ws.vals[o] = out;
        // the output's gradient buffer back (after a move, the input's old one)
        self.ws.grads[o] = dout;
    }

    /// Node `n`'s op backward for its first input: parameter gradients accumulated, the input's
    /// gradient written to `d_in` (when wanted). `dout` is already masked by the activation.
    fn op_backward(
        &mut self,
        m: &Model,
        n: usize,
        b: usize,
        dout: &mut [f32],
        d_in: Option<&mut [f32]>,
    ) {
        let node = &m.nodes[n];
        let ws = &mut *self.ws;
        let inp = value(&ws.vals, self.x, m, node.inputs[0], b);
        let p = self.params;
        match node.op {
            Op::Conv {
                g, groups, bias, ..
            } => {
                let (w, bi) = m.weight_bias(node);
                let (gw, gb) = split(self.grads, w.clone(), bi);
                let gb = bias.then_some(gb);
                if groups == 1 {
                    let relu_out =
                        native_act(&node.op).then(|| &ws.vals[node.output][..dout.len()]);
                    grouped::conv_backward(
                        d_in,
                        gw,
                        gb,
                        dout,
                        relu_out,
                        inp,
                        &p[w],
                        b,
                        &g,
                        &mut ws.conv,
                    );
                } else {
                    dwconv_backward(d_in, gw, gb, dout, inp, &p[w], b, &g);
                }
            }
            Op::BatchNorm { c, hw, act } => {
                let (w, bi) = m.weight_bias(node);
                let (gw, gb) = split(self.grads, w.clone(), bi);
                let g = bn_geom(b, c, hw);
                let f = BnSaved {
                    x: inp,
                    out: &ws.vals[node.output][..dout.len()],
                    act,
                    saved: &ws.saved[n],
                };
                if m.bn_pass(n, true) == BnPass::Fixed {
                    // the statistics are constants: no batch sums reach the input's gradient
                    let local = bn_grad_sums(dout, f, g);
                    let none = vec![0.0; 2 * c];
                    return bn_backward(d_in, (gw, gb), dout, f, &p[w], g, (&local, &none, 1.0));
                }
                let Some(s) = self.sync.as_deref_mut() else {
                    return bn_backward_own(d_in, (gw, gb), dout, f, &p[w], g);
                };
                let local = bn_grad_sums(dout, f, g);
                let mut total: Vec<f32> = local.iter().map(|&x| x as f32).collect();
                s.sum(&mut total);
                let total: Vec<f64> = total.into_iter().map(f64::from).collect();
                let count = f.saved[2 * c] as f64;
                bn_backward(d_in, (gw, gb), dout, f, &p[w], g, (&local, &total, count));
            }
            Op::Activation(_) | Op::Add { .. } => unreachable!("`pass_through` takes them"),
            Op::MaxPool(win) => {
                if let Some(d) = d_in {
                    match win.pad {
                        0 => grouped::pool_backward(
                            d,
                            dout,
                            &ws.argmax[n],
                            b,
                            (win.c, win.h, win.w),
                            (win.oh, win.ow),
                            win.k,
                            win.stride,
                        ),
                        _ => maxpool2d_padded_backward(d, dout, &ws.argmax[n], b, &win),
                    }
                }
            }
            Op::AvgPool(win) => {
                if let Some(d) = d_in {
                    avgpool2d_backward(d, dout, b, &win);
                }
            }
            Op::GlobalAvgPool { c, hw } => {
                if let Some(d) = d_in {
                    gap_backward(d, dout, b * c, hw);
                }
            }
            Op::Linear {
                inp: c, out: oc, ..
            } => {
                let (w, bi) = m.weight_bias(node);
                let (gw, gb) = split(self.grads, w.clone(), bi);
                linear_backward(d_in, gw, gb, dout, inp, &p[w], b, c, oc);
            }
            Op::Dropout { .. } => {
                if let Some(d) = d_in {
                    mul(d, dout, &ws.saved[n][..dout.len()]);
                }
            }
        }
    }
}

/// Sync batch norm's statistics over every replica's batch: the sums and counts, then (about
/// the global mean) the squared deviations, each summed across the replicas.
fn global_stats(s: &mut dyn SumAcross, x: &[f32], g: BnGeom) -> BnStats {
    let mut v: Vec<f32> = channel_sums(x, g, None).iter().map(|&v| v as f32).collect();
    v.push((g.b * g.hw) as f32);
    s.sum(&mut v);
    let n = v[g.c] as f64;
    let per = |v: f32| if n > 0.0 { v as f64 / n } else { 0.0 };
    let mean: Vec<f64> = v[..g.c].iter().map(|&v| per(v)).collect();
    let mut d: Vec<f32> = channel_sums(x, g, Some(&mean))
        .iter()
        .map(|&v| v as f32)
        .collect();
    s.sum(&mut d);
    BnStats {
        mean,
        var: d.into_iter().map(per).collect(),
        n,
    }
}
