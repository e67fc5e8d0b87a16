//! Which statistics each batch norm normalises by in a pass: the batch's (PyTorch's train
//! mode), or its running ones, left as they are (eval mode: inference, and in training the
//! batch norms `--bn-stats` fixes, as PyTorch's `backbone.eval()` or Keras's `training=False`).

use std::ops::Range;

use super::{Model, Op};

/// What a batch norm node does in a pass; every backend asks `Model::bn_pass`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BnPass {
    /// Normalise by the batch's statistics and move the running ones toward them; keep the
    /// batch's mean and 1/std for backward.
    Batch,
    /// Normalise by the running statistics, leave them as they are, and keep their mean and
    /// 1/std for backward (the input's gradient is then the output's times weight / std).
    Fixed,
    /// Normalise by the running statistics, leave them, keep nothing: inference, or a fixed
    /// batch norm nothing trainable lies below (a frozen backbone's).
    Running,
}

impl Model {
    /// Makes the batch norms `nodes` (indices into `nodes`) normalise by their running
    /// statistics in training too, leaving them as they are.
    pub fn fix_statistics(&mut self, nodes: &[usize]) {
        self.fixed_stats = vec![false; self.nodes.len()];
        for &n in nodes {
            debug_assert!(matches!(self.nodes[n].op, Op::BatchNorm { .. }));
            self.fixed_stats[n] = true;
        }
    }

    /// The batch norms whose weight is frozen (`freeze`): what `--bn-stats frozen` fixes.
    pub fn frozen_batch_norms(&self) -> Vec<usize> {
        (self.nodes.iter().enumerate())
            .filter(|(_, n)| matches!(n.op, Op::BatchNorm { .. }))
            .filter(|(_, n)| n.params.iter().all(|t| self.frozen.contains(t)))
            .map(|(i, _)| i)
            .collect()
    }

    /// Every batch norm, by node.
    pub fn batch_norms(&self) -> Vec<usize> {
        (self.nodes.iter().enumerate())
            .filter(|(_, n)| matches!(n.op, Op::BatchNorm { .. }))
            .map(|(i, _)| i)
            .collect()
    }

    /// Whether batch norm node `n` normalises by its running statistics in training.
    pub fn statistics_fixed(&self, n: usize) -> bool {
        self.fixed_stats.get(n).copied().unwrap_or(false)
    }

    /// How many batch norms `fix_statistics` fixed.
    pub fn fixed_batch_norms(&self) -> usize {
        self.fixed_stats.iter().filter(|&&f| f).count()
    }

    /// What batch norm node `n` does in a training (`train`) or inference pass.
    pub fn bn_pass(&self, n: usize, train: bool) -> BnPass {
        match (train, self.statistics_fixed(n)) {
            (false, _) => BnPass::Running,
            (true, false) => BnPass::Batch,
            (true, true) if self.needs_grad[self.nodes[n].output] => BnPass::Fixed,
            (true, true) => BnPass::Running,
        }
    }

    /// Whether any batch norm normalises by the batch's statistics in training (what
    /// `--sync-bn` pools across replicas and a batch of one cannot give).
    pub fn has_batch_statistics(&self) -> bool {
        (self.batch_norms().into_iter()).any(|n| !self.statistics_fixed(n))
    }

    /// The running statistics' ranges of the fixed batch norms, in order: the same on every
    /// replica all run, so averaging them across replicas is left out (it would round them).
    pub fn fixed_buffer_ranges(&self) -> Vec<Range<usize>> {
        let mut out: Vec<Range<usize>> = Vec::new();
        for (n, node) in self.nodes.iter().enumerate() {
            let (Op::BatchNorm { c, .. }, Some(b)) = (node.op, node.buffers) else {
                continue;
            };
            if !self.statistics_fixed(n) {
                continue;
            }
            let at = self.buffers[b].offset;
            match out.last_mut() {
                Some(last) if last.end == at => last.end = at + 2 * c,
                _ => out.push(at..at + 2 * c),
            }
        }
        out
    }
}
