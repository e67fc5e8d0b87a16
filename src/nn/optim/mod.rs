//! Optimizers over the flat parameter buffer. The gradient arrives as a *sum* over the global
//! batch; `scale` (1 / global sample count) turns it into the mean inside the same pass.

use std::fmt;
use std::ops::Range;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptimizerKind {
    Sgd,
    /// SGD with heavy-ball momentum (PyTorch's formulation; `--momentum`, default 0.9).
    Momentum,
    /// SGD with Nesterov momentum (PyTorch's `nesterov=True`).
    Nesterov,
    /// Adam (beta1 0.9, beta2 0.999, eps 1e-8); weight decay is L2 added to the gradient.
    Adam,
    /// AdamW: weight decay decoupled from the gradient.
    AdamW,
}

impl OptimizerKind {
    /// Whether `--momentum` is its (SGD with momentum, heavy-ball or Nesterov).
    pub fn has_momentum(self) -> bool {
        matches!(self, Self::Momentum | Self::Nesterov)
    }
}

impl FromStr for OptimizerKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "sgd" => Ok(Self::Sgd),
            "momentum" => Ok(Self::Momentum),
            "nesterov" => Ok(Self::Nesterov),
            "adam" => Ok(Self::Adam),
            "adamw" => Ok(Self::AdamW),
            _ => Err(format!(
                "unknown optimizer `{s}`: use sgd, momentum, nesterov, adam or adamw"
            )),
        }
    }
}

impl fmt::Display for OptimizerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Sgd => "sgd",
            Self::Momentum => "momentum",
            Self::Nesterov => "nesterov",
            Self::Adam => "adam",
            Self::AdamW => "adamw",
        })
    }
}

pub const MOMENTUM: f32 = 0.9;
pub const BETA1: f32 = 0.9;
pub const BETA2: f32 = 0.999;
pub const EPS: f32 = 1e-8;

/// Optimizer state: the step count and up to two moment buffers (empty when unused).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OptState {
    pub t: u64,
    pub m: Vec<f32>,
    pub v: Vec<f32>,
}

impl OptimizerKind {
    /// Whether it keeps moments (momentum, Adam's m and v) from step to step.
    pub fn keeps_moments(self) -> bool {
        self != OptimizerKind::Sgd
    }
}

impl OptState {
    pub fn new(kind: OptimizerKind, n: usize) -> OptState {
        let (m, v) = match kind {
            OptimizerKind::Sgd => (0, 0),
            OptimizerKind::Momentum | OptimizerKind::Nesterov => (n, 0),
            OptimizerKind::Adam | OptimizerKind::AdamW => (n, n),
        };
        OptState {
            t: 0,
            m: vec![0.0; m],
            v: vec![0.0; v],
        }
    }
}

/// An optimizer with its coefficients.
#[derive(Clone, Debug, PartialEq)]
pub struct Optimizer {
    pub kind: OptimizerKind,
    /// Momentum's coefficient (momentum and nesterov).
    pub momentum: f32,
    pub weight_decay: f32,
    /// Parameter ranges weight decay leaves alone (`--no-decay-bn-bias`: batch norm's weights
    /// and every bias), in order.
    pub no_decay: Vec<Range<usize>>,
    /// Parameter ranges never updated (`--freeze`), in order.
    pub frozen: Vec<Range<usize>>,
    /// Parameter ranges that began training after optimizer step `u64` (frozen before a
    /// resume that trains them), in order: Adam's bias correction counts their steps from
    /// there, as PyTorch keeps a step count per parameter (with the run's count, the zero
    /// moments of a tensor unfrozen at step 2000 moved it ~3x the LR on its first step).
    pub began: Vec<(Range<usize>, u64)>,
    /// `--clip-grad-norm`: the mean gradient scaled down to this L2 norm where it is longer
    /// (PyTorch's `clip_grad_norm_`, before weight decay); `None`: never.
    pub clip_norm: Option<f32>,
}

impl Optimizer {
    /// The ranges of `0..n` that train (not frozen), in order.
    pub fn trained(&self, n: usize) -> Vec<Range<usize>> {
        let mut out = Vec::new();
        let mut at = 0;
        for r in &self.frozen {
            let (s, e) = (r.start.min(n), r.end.min(n));
            if s > at {
                out.push(at..s);
            }
            at = at.max(e);
        }
        if at < n {
            out.push(at..n);
        }
        out
    }

    /// The optimizer's own state from one laid out over all `n` parameters (a checkpoint's, a
    /// run's start): the moments of trained parameters only, frozen ones' left out.
    pub fn compact(&self, full: &OptState, n: usize) -> OptState {
        if self.frozen.is_empty() {
            return full.clone();
        }
        let take = |v: &[f32]| match v.len() == n {
            true => self
                .trained(n)
                .into_iter()
                .flat_map(|r| v[r].to_vec())
                .collect(),
            false => v.to_vec(),
        };
        OptState {
            t: full.t,
            m: take(&full.m),
            v: take(&full.v),
        }
    }

    /// The state laid out over all `n` parameters again (frozen ones' moments zero).
    pub fn expand(&self, own: &OptState, n: usize) -> OptState {
        if self.frozen.is_empty() {
            return own.clone();
        }
        let put = |v: &[f32]| {
            if v.is_empty() {
                return Vec::new();
            }
            let mut full = vec![0.0; n];
            let mut at = 0;
            for r in self.trained(n) {
                let len = r.len();
                full[r].copy_from_slice(&v[at..at + len]);
                at += len;
            }
            full
        };
        OptState {
            t: own.t,
            m: put(&own.m),
            v: put(&own.v),
        }
    }

    /// `kind` with weight decay `wd` on every parameter, momentum 0.9.
    pub fn new(kind: OptimizerKind, wd: f32) -> Optimizer {
        Optimizer {
            kind,
            momentum: MOMENTUM,
            weight_decay: wd,
            no_decay: Vec::new(),
            frozen: Vec::new(),
            began: Vec::new(),
            clip_norm: None,
        }
    }

    /// The sum of squares of the trained parameters' gradients in `grads` (sums or means:
    /// scale its root as the gradient is scaled), each piece in `simd::dot`'s order, added in
    /// f64 (a piece whose squares pass float32's range, gradients past 1.8e19, again in f64:
    /// the norm of an exploding gradient is said, not lost). Frozen parameters' gradients are
    /// left out: they are not exchanged.
    pub fn grad_sumsq(&self, grads: &[f32]) -> f64 {
        (self.trained(grads.len()).into_iter())
            .map(|r| {
                let g = &grads[r];
                match crate::nn::simd::dot(g, g) {
                    s if s.is_finite() => s as f64,
                    _ => g.iter().map(|&x| x as f64 * x as f64).sum(),
                }
            })
            .sum()
    }

    /// What the mean gradient, of L2 norm `norm`, is multiplied by before the update: 1, or
    /// `--clip-grad-norm`'s bound over the norm where the norm is past it (PyTorch's
    /// `max_norm / (norm + 1e-6)`, at most 1). The GPU's kernels compute it alike
    /// (`kernels/optim.cu`'s `update_scale`).
    pub fn clip_factor(&self, norm: f32) -> f32 {
        match self.clip_norm {
            Some(max) => (max / (norm + 1e-6)).min(1.0),
            None => 1.0,
        }
    }
}

/// The L2 norm of the mean gradient, from the sum of squares of the gradient sums (`sumsq`,
/// `Optimizer::grad_sumsq`) and the step's samples; 0 for a step of none, NaN for a gradient
/// that holds one (said, not taken for 0).
pub fn mean_grad_norm(sumsq: f64, samples: f64) -> f32 {
    (sumsq.sqrt() / samples.max(1.0)) as f32
}

/// A stretch of parameters one update treats alike: trained (frozen ones have no piece),
/// decayed or not, with its moments from `moment` in the optimizer's own (compact) state, and
/// the optimizer step after which it began training (`Optimizer::began`; 0 for most).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    pub range: Range<usize>,
    pub moment: usize,
    pub decay: bool,
    pub began: u64,
}

impl Optimizer {
    /// The trained parameters of `0..n` cut where decay starts or stops and where a range
    /// that began training late starts or ends, in order: what one update walks (here, and as
    /// the GPU's table of chunks).
    pub fn pieces(&self, n: usize) -> Vec<Piece> {
        let began = self.began.iter().map(|(r, _)| r);
        let mut cuts: Vec<usize> = (self.no_decay.iter().chain(&self.frozen).chain(began))
            .flat_map(|r| [r.start.min(n), r.end.min(n)])
            .chain([0, n])
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let within = |rs: &[Range<usize>], i: usize| rs.iter().any(|r| r.contains(&i));
        let mut out = Vec::new();
        // where the next trained range's moments start
        let mut moment = 0;
        for w in cuts.windows(2) {
            let range = w[0]..w[1];
            if range.is_empty() || within(&self.frozen, range.start) {
                continue;
            }
            let len = range.len();
            let began = (self.began.iter())
                .find(|(r, _)| r.contains(&range.start))
                .map_or(0, |&(_, b)| b);
            out.push(Piece {
                decay: !within(&self.no_decay, range.start),
                range,
                moment,
                began,
            });
            moment += len;
        }
        out
    }
}

/// One update: params -= lr * direction(scale * grads), over the ranges that are decayed and
/// those that are not; frozen ranges keep their values. `st` is the optimizer's own state
/// ([`Optimizer::compact`]): moments for the trained parameters only, in order.
pub fn step(
    o: &Optimizer,
    params: &mut [f32],
    grads: &[f32],
    st: &mut OptState,
    lr: f32,
    scale: f32,
) {
    st.t += 1;
    for p in o.pieces(params.len()) {
        let wd = if p.decay { o.weight_decay } else { 0.0 };
        step_range(o, params, grads, st, lr, wd, scale, &p);
    }
}

/// Adam's bias corrections at a piece's `t`-th step: the step size for `lr`, and one over the
/// square root of the second moment's correction. `t` is at least 1; past float32's reach
/// (thousands of steps) both corrections are 1.
pub fn adam_factors(lr: f32, t: u64) -> (f32, f32) {
    let t = t.clamp(1, i32::MAX as u64) as i32;
    let bc1 = 1.0 - BETA1.powi(t);
    let bc2 = 1.0 - BETA2.powi(t);
    (lr / bc1, 1.0 / bc2.sqrt())
}

/// The moments of `len` parameters from `at` (none where the optimizer keeps none).
fn part(v: &mut [f32], at: usize, len: usize) -> &mut [f32] {
    match v.is_empty() {
        true => v,
        false => &mut v[at..at + len],
    }
}

#[allow(clippy::too_many_arguments)]
fn step_range(
    o: &Optimizer,
    params: &mut [f32],
    grads: &[f32],
    st: &mut OptState,
    lr: f32,
    wd: f32,
    scale: f32,
    piece: &Piece,
) {
    let (r, len) = (piece.range.clone(), piece.range.len());
    let (params, grads) = (&mut params[r.clone()], &grads[r]);
    let t = st.t;
    let (m, v) = (
        part(&mut st.m, piece.moment, len),
        part(&mut st.v, piece.moment, len),
    );
    let mu = o.momentum;
    match o.kind {
        OptimizerKind::Sgd => {
            for (p, g) in params.iter_mut().zip(grads) {
                let g = g * scale + wd * *p;
                *p -= lr * g;
            }
        }
        OptimizerKind::Momentum | OptimizerKind::Nesterov => {
            let first = t == 1;
            let nesterov = o.kind == OptimizerKind::Nesterov;
            for ((p, g), m) in params.iter_mut().zip(grads).zip(m.iter_mut()) {
                let g = g * scale + wd * *p;
                *m = if first { g } else { mu * *m + g };
                *p -= lr * if nesterov { g + mu * *m } else { *m };
            }
        }
        OptimizerKind::Adam | OptimizerKind::AdamW => {
            let decoupled = o.kind == OptimizerKind::AdamW;
            // (this piece's own steps: fewer than the run's where it began training late; the
            // GPU's kernel counts them alike)
            let own = t.saturating_sub(piece.began).max(1);
            let (step_size, inv_sqrt_bc2) = adam_factors(lr, own);
            for (((p, g), m), v) in params
                .iter_mut()
                .zip(grads)
                .zip(m.iter_mut())
                .zip(v.iter_mut())
            {
                let mut g = g * scale;
                if decoupled {
                    *p -= lr * wd * *p;
                } else {
                    g += wd * *p;
                }
                *m = BETA1 * *m + (1.0 - BETA1) * g;
                *v = BETA2 * *v + (1.0 - BETA2) * g * g;
                *p -= step_size * *m / ((*v).sqrt() * inv_sqrt_bc2 + EPS);
            }
        }
    }
}

#[cfg(test)]
mod tests;
