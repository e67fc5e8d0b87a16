//! The GPU's bf16 autocast (`--precision bf16`) emulated on the CPU: the same ops in fp32,
//! with each value rounded to bf16 where the GPU stores one in bf16 (the batch, every
//! activation and activation gradient, a product before its bias is added, the weights the
//! convolutions and linear layers read, each convolution's weight gradient before it is added
//! to the fp32 sums, an input gradient before it is added to another). What it shows is
//! what bf16's rounding alone does to a training step, apart from any GPU kernel: `selftest`
//! holds a GPU's bf16 pass to it.

use super::{Cpu, Workspace};
use crate::nn::bf16::round_bf16;
use crate::nn::model::interp::{self, Exec, Grad};
use crate::nn::model::op::{Act, Op};
use crate::nn::model::Model;
use crate::nn::optim::{self, OptState, Optimizer, OptimizerKind};

fn round(v: &mut [f32]) {
    v.iter_mut().for_each(|x| *x = round_bf16(*x));
}

/// A CPU pass whose stored values are rounded as the GPU's bf16 pass stores them.
struct Bf16<'c, 'a, 's> {
    cpu: &'c mut Cpu<'a, 's>,
}

impl Exec for Bf16<'_, '_, '_> {
    fn forward(&mut self, m: &Model, n: usize, b: usize, train: bool) {
        self.cpu.forward(m, n, b, train);
        let node = &m.nodes[n];
        let o = node.output;
        let out = &mut self.cpu.ws.vals[o][..b * m.dims[o]];
        // a product with a bias: the GPU stores the product (rounded), then adds the bias
        // (rounded again), then applies the activation; the product is the output less the
        // bias where the activation left the output as it was
        let biased = match node.op {
            Op::Linear {
                out: oc,
                bias: true,
                ..
            } => Some((oc, 1)),
            Op::Conv { g, bias: true, .. } => Some((g.oc, g.oh * g.ow)),
            _ => None,
        };
        if let Some((oc, hw)) = biased {
            let bias = &self.cpu.params[m.weight_bias(node).1];
            let act = node.op.act();
            for (j, v) in out.iter_mut().enumerate() {
                let linear = match act {
                    Act::None => true,
                    Act::Relu => *v > 0.0,
                    Act::Relu6 => *v > 0.0 && *v < 6.0,
                };
                if linear {
                    let bj = bias[(j / hw) % oc];
                    let mut r = [round_bf16(round_bf16(*v - bj) + bj)];
                    act.forward(&mut r);
                    *v = r[0];
                }
            }
        }
        round(out);
    }

    fn loss(&mut self, m: &Model, b: usize, grad: bool) -> (f64, usize) {
        let r = self.cpu.loss(m, b, grad);
        if grad {
            let o = m.output();
            round(&mut self.cpu.ws.grads[o][..b * m.dims[o]]);
        }
        r
    }

    fn backward(&mut self, m: &Model, n: usize, b: usize, din: &[Grad]) {
        let node = &m.nodes[n];
        // a convolution's weight gradient goes through bf16 scratch, then into the fp32 sums
        let conv_w = matches!(node.op, Op::Conv { .. }).then(|| m.weight_bias(node).0);
        let before = conv_w.clone().map(|w| self.cpu.grads[w].to_vec());
        // an op's input gradient added to one already there goes through a bf16 buffer first
        // (the add and the activation pass theirs on as it is: already bf16)
        let pass_on = matches!(node.op, Op::Add { .. } | Op::Activation(_));
        let i = node.inputs[0];
        let added = (!pass_on && din.first() == Some(&Grad::Add))
            .then(|| self.cpu.ws.grads[i][..b * m.dims[i]].to_vec());
        self.cpu.backward(m, n, b, din);
        if let (Some(w), Some(before)) = (conv_w, before) {
            for (g, old) in self.cpu.grads[w].iter_mut().zip(before) {
                *g = old + round_bf16(*g - old);
            }
        }
        if let Some(before) = added {
            // (the CPU left the op's own gradient for the input in `acc`)
            let ws = &mut *self.cpu.ws;
            for ((g, old), a) in ws.grads[i].iter_mut().zip(before).zip(&ws.acc) {
                *g = old + round_bf16(*a);
            }
        }
        for (&i, d) in node.inputs.iter().zip(din) {
            if *d != Grad::Skip && i != 0 {
                round(&mut self.cpu.ws.grads[i][..b * m.dims[i]]);
            }
        }
    }
}

/// SGD (`lr`, no momentum or decay) over `steps` steps of the micro-batches `micro` (rows of
/// `x` and `y`), from `params`; with `bf16`, each pass as the GPU's bf16 autocast rounds it.
/// Returns the parameters and running statistics after.
pub fn sgd_steps(
    m: &Model,
    (params, buffers): (&[f32], &[f32]),
    (x, y): (&[f32], &[u32]),
    micro: &[std::ops::Range<usize>],
    (lr, steps): (f32, usize),
    bf16: bool,
) -> (Vec<f32>, Vec<f32>) {
    let (mut params, mut buffers) = (params.to_vec(), buffers.to_vec());
    let mut ws = Workspace::default();
    let d = m.dims[0];
    let rows: usize = micro.iter().map(|r| r.len()).sum();
    for _ in 0..steps {
        let mut grads = vec![0.0; m.n_params];
        let mut used = params.clone();
        if bf16 {
            for node in m.nodes.iter() {
                if matches!(node.op, Op::Conv { .. } | Op::Linear { .. }) {
                    round(&mut used[m.weight_bias(node).0]);
                }
            }
        }
        for r in micro {
            let b = r.len();
            let mut xb = x[r.start * d..r.end * d].to_vec();
            if bf16 {
                round(&mut xb);
            }
            ws.ensure(m, b);
            ws.passes += 1;
            let mut cpu = Cpu {
                sync: None,
                ws: &mut ws,
                params: &used,
                grads: &mut grads,
                buffers: &mut buffers,
                x: &xb,
                y: &y[r.clone()],
            };
            match bf16 {
                true => interp::train(m, &mut Bf16 { cpu: &mut cpu }, b),
                false => interp::train(m, &mut cpu, b),
            };
        }
        let sgd = Optimizer::new(OptimizerKind::Sgd, 0.0);
        let mut state = OptState::new(OptimizerKind::Sgd, m.n_params);
        optim::step(&sgd, &mut params, &grads, &mut state, lr, 1.0 / rows as f32);
    }
    (params, buffers)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::nn::rng::Rng;
    use crate::nn::shape::Shape;

    /// A small network of every op kind, 5 samples of 3 classes.
    pub(crate) fn setup() -> (Model, Vec<f32>, Vec<u32>) {
        let spec = "conv4k3p1,bn,basic4,inverted6t2,gap".parse().unwrap();
        let m = Model::new(Shape::Image { c: 3, h: 6, w: 6 }, &spec, 3).unwrap();
        let mut rng = Rng::new(5);
        let x = (0..5 * m.dims[0]).map(|_| rng.normal()).collect();
        (m, x, vec![0, 1, 2, 0, 1])
    }

    /// Rounded, every activation the pass stores is a bf16 value, and the steps land near the
    /// fp32 ones but not on them.
    #[test]
    fn rounded_it_stores_bf16_values_and_steps_near_fp32() {
        let (m, x, y) = setup();
        let (params, mut buffers) = (m.init_params(3), m.init_buffers());
        let start = (&params[..], &buffers[..]);
        let split = [0..2, 2..5];
        let (p32, _) = sgd_steps(&m, start, (&x, &y), &split, (0.05, 1), false);
        let (p16, _) = sgd_steps(&m, start, (&x, &y), &split, (0.05, 1), true);
        assert_ne!(p16, p32);
        let change = |p: &[f32]| -> Vec<f64> {
            p.iter().zip(&params).map(|(a, b)| (a - b) as f64).collect()
        };
        let (c32, c16) = (change(&p32), change(&p16));
        let off: f64 = c32.iter().zip(&c16).map(|(a, b)| (a - b) * (a - b)).sum();
        let size: f64 = c32.iter().map(|a| a * a).sum();
        assert!(
            off.sqrt() < 0.2 * size.sqrt(),
            "{} of {}",
            off.sqrt(),
            size.sqrt()
        );
        // the activations left in the workspace by a rounded pass
        let mut ws = Workspace::default();
        ws.ensure(&m, 5);
        let mut grads = vec![0.0; m.n_params];
        let xb: Vec<f32> = x.iter().map(|v| round_bf16(*v)).collect();
        let mut cpu = Cpu {
            sync: None,
            ws: &mut ws,
            params: &params,
            grads: &mut grads,
            buffers: &mut buffers,
            x: &xb,
            y: &y,
        };
        interp::train(&m, &mut Bf16 { cpu: &mut cpu }, 5);
        for v in 1..m.values.len() {
            let vals = &ws.vals[v][..5 * m.dims[v]];
            assert!(vals.iter().all(|a| round_bf16(*a) == *a), "value {v}");
        }
    }
}
