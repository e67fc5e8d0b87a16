//! The interpreter: walks a planned model forward, through the loss, and backward, telling the
//! backend which op to run and, in backward, which input gradients to write, add to, or skip.
//! Every backend runs the same schedule; only the ops differ.

use super::Model;

/// What backward does with an input's gradient.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grad {
    /// Nothing upstream has parameters: not computed.
    Skip,
    /// The first gradient to reach this value: overwrite.
    Write,
    /// Another consumer wrote already (a residual's input): add.
    Add,
}

/// A backend's ops over the buffers it holds for one model.
pub trait Exec {
    /// Node `n`'s op forward over `b` samples; `train`: batch statistics, dropout.
    fn forward(&mut self, m: &Model, n: usize, b: usize, train: bool);
    /// Softmax cross-entropy of the logits against the labels: (loss sum, correct); with
    /// `grad`, d(loss sum)/d(logits) into the logits' gradient.
    fn loss(&mut self, m: &Model, b: usize, grad: bool) -> (f64, usize);
    /// Node `n`'s op backward from its output's gradient: parameter gradients accumulated,
    /// input `i`'s gradient as `din[i]` says.
    fn backward(&mut self, m: &Model, n: usize, b: usize, din: &[Grad]);
}

/// Forward, loss and backward over one micro-batch: (loss sum, correct).
pub fn train<E: Exec>(m: &Model, e: &mut E, b: usize) -> (f64, usize) {
    for n in 0..m.nodes.len() {
        e.forward(m, n, b, true);
    }
    let result = e.loss(m, b, true);
    let need = &m.needs_grad;
    let mut written = vec![false; m.values.len()];
    let mut din = Vec::with_capacity(2);
    for (n, node) in m.nodes.iter().enumerate().rev() {
        if !need[node.output] {
            continue;
        }
        din.clear();
        for &i in &node.inputs {
            din.push(match (need[i], written[i]) {
                (false, _) => Grad::Skip,
                (true, false) => Grad::Write,
                (true, true) => Grad::Add,
            });
            written[i] |= need[i];
        }
        e.backward(m, n, b, &din);
    }
    result
}

/// Forward in inference mode (running statistics, no dropout) and the loss: (loss sum, correct).
pub fn evaluate<E: Exec>(m: &Model, e: &mut E, b: usize) -> (f64, usize) {
    for n in 0..m.nodes.len() {
        e.forward(m, n, b, false);
    }
    e.loss(m, b, false)
}
