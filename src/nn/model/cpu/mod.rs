//! The CPU's side of the interpreter: the buffers a pass needs (`Workspace`), a pass's view of
//! a replica (`Cpu`) and the entry points; its ops are in `exec.rs`.

pub mod bf16_emulation;
mod exec;

use crate::nn::grow;
use std::mem::take;

use super::interp;
use super::op::Op;
use super::Model;
use crate::nn::grouped;

/// Activations and their gradients per value, what each node keeps for backward (batch
/// statistics, dropout masks, pooling winners), and scratch; grown to the largest batch seen.
/// Value 0's activation is the batch itself, borrowed.
#[derive(Default)]
pub struct Workspace {
    vals: Vec<Vec<f32>>,
    grads: Vec<Vec<f32>>,
    saved: Vec<Vec<f32>>,
    argmax: Vec<Vec<u32>>,
    conv: grouped::Scratch,
    /// An input gradient to be added (a residual's input reached a second time).
    acc: Vec<f32>,
    /// The zero bias of bias-less convolutions.
    zeros: Vec<f32>,
    /// Dropout's masks: this replica's seed, and training passes so far.
    dropout_seed: u64,
    passes: u64,
}

impl Workspace {
    /// Dropout masks drawn from `seed` (a replica's own: rank and run seed), from training pass
    /// `first_pass` on.
    pub fn seed_dropout(&mut self, seed: u64, first_pass: u64) {
        self.dropout_seed = seed;
        self.passes = first_pass;
    }

    /// The logits of the last pass over `b` samples.
    pub fn logits(&self, m: &Model, b: usize) -> &[f32] {
        &self.vals[m.output()][..b * m.classes()]
    }

    fn ensure(&mut self, m: &Model, b: usize) {
        let nv = m.values.len();
        if self.vals.len() != nv {
            self.vals = vec![Vec::new(); nv];
            self.grads = vec![Vec::new(); nv];
            self.saved = vec![Vec::new(); m.nodes.len()];
            self.argmax = vec![Vec::new(); m.nodes.len()];
        }
        for v in 1..nv {
            grow(&mut self.vals[v], b * m.dims[v]);
        }
        let mut widest_c = 0;
        for (n, node) in m.nodes.iter().enumerate() {
            match node.op {
                // mean and 1/std per channel, then the count they were taken over
                Op::BatchNorm { c, .. } => grow(&mut self.saved[n], 2 * c + 1),
                Op::Dropout { .. } => grow(&mut self.saved[n], b * m.dims[node.output]),
                Op::MaxPool(_) => {
                    let need = b * m.dims[node.output];
                    if self.argmax[n].len() < need {
                        self.argmax[n].resize(need, 0);
                    }
                }
                Op::Conv { g, .. } => {
                    widest_c = widest_c.max(g.oc);
                }
                _ => {}
            }
        }
        grow(&mut self.zeros, widest_c);
    }

    fn grad(&mut self, m: &Model, v: usize, b: usize) -> Vec<f32> {
        let mut g = take(&mut self.grads[v]);
        grow(&mut g, b * m.dims[v]);
        g
    }
}

/// Sums across the replicas of a run: what sync batch norm takes its statistics through.
pub trait SumAcross {
    fn sum(&mut self, v: &mut Vec<f32>);
}

/// One pass's view of a replica: its parameters, gradient sums, running statistics and batch.
pub struct Cpu<'a, 's> {
    /// Sync batch norm: statistics over every replica's batch.
    pub sync: Option<&'a mut (dyn SumAcross + 's)>,
    pub ws: &'a mut Workspace,
    pub params: &'a [f32],
    /// Gradient sums over samples (accumulated); empty in evaluation.
    pub grads: &'a mut [f32],
    pub buffers: &'a mut [f32],
    pub x: &'a [f32],
    pub y: &'a [u32],
}

impl Model {
    /// Forward + backward over one micro-batch x[B,...], y[B]. Gradients are *accumulated*
    /// into `grads` as sums over samples (not means); batch norm's running statistics in
    /// `buffers` move toward this batch's, or with `sync` (`--sync-bn`) toward the statistics
    /// summed across the replicas (every replica must then make this call, even with an empty
    /// share of the batch). Returns (loss sum, correct predictions).
    #[allow(clippy::too_many_arguments)]
    pub fn forward_backward(
        &self,
        params: &[f32],
        grads: &mut [f32],
        buffers: &mut [f32],
        ws: &mut Workspace,
        x: &[f32],
        y: &[u32],
        b: usize,
        sync: Option<&mut dyn SumAcross>,
    ) -> (f64, usize) {
        // (every pass counts, an empty one too: a step makes --grad-accum of them whatever its
        // shares, so a resumed run knows where its masks' stream stands)
        ws.passes += 1;
        // a rank's share of a short last batch can be empty: nothing to learn, and batch norm
        // has no statistics to take from it (unless the replicas pool theirs)
        if b == 0 && (sync.is_none() || !self.has_batch_norm()) {
            return (0.0, 0);
        }
        ws.ensure(self, b);
        let mut cpu = Cpu {
            sync,
            ws,
            params,
            grads,
            buffers,
            x,
            y,
        };
        interp::train(self, &mut cpu, b)
    }

    /// Loss sum and correct count over x[B,...], y[B] in inference mode (running statistics),
    /// without gradients.
    pub fn evaluate(
        &self,
        params: &[f32],
        buffers: &[f32],
        ws: &mut Workspace,
        x: &[f32],
        y: &[u32],
        b: usize,
    ) -> (f64, usize) {
        if b == 0 {
            return (0.0, 0);
        }
        ws.ensure(self, b);
        let mut running = buffers.to_vec();
        let mut cpu = Cpu {
            sync: None,
            ws,
            params,
            grads: &mut [],
            buffers: &mut running,
            x,
            y,
        };
        interp::evaluate(self, &mut cpu, b)
    }
}
