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
#[derive(Clone, Debug, PartialEq)]
pub struct OptState {
    pub t: u64,
    pub m: Vec<f32>,
    pub v: Vec<f32>,
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
            clip_norm: None,
        }
    }

    /// The sum of squares of the trained parameters' gradients in `grads` (sums or means:
    /// scale its root as the gradient is scaled), each piece in `simd::dot`'s order, added in
    /// f64. Frozen parameters' gradients are left out: they are not exchanged.
    pub fn grad_sumsq(&self, grads: &[f32]) -> f64 {
        (self.trained(grads.len()).into_iter())
            .map(|r| crate::nn::simd::dot(&grads[r.clone()], &grads[r]) as f64)
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
/// `Optimizer::grad_sumsq`) and the step's samples; 0 for a step of none.
pub fn mean_grad_norm(sumsq: f64, samples: f64) -> f32 {
    (sumsq.max(0.0).sqrt() / samples.max(1.0)) as f32
}

/// A stretch of parameters one update treats alike: trained (frozen ones have no piece),
/// decayed or not, with its moments from `moment` in the optimizer's own (compact) state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    pub range: Range<usize>,
    pub moment: usize,
    pub decay: bool,
}

impl Optimizer {
    /// The trained parameters of `0..n` cut where decay starts or stops, in order: what one
    /// update walks (here, and as the GPU's table of chunks).
    pub fn pieces(&self, n: usize) -> Vec<Piece> {
        let mut cuts: Vec<usize> = (self.no_decay.iter().chain(&self.frozen))
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
            out.push(Piece {
                decay: !within(&self.no_decay, range.start),
                range,
                moment,
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
        step_range(o, params, grads, st, lr, wd, scale, p.range, p.moment);
    }
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
    r: Range<usize>,
    moment: usize,
) {
    let len = r.len();
    let (params, grads) = (&mut params[r.clone()], &grads[r]);
    let t = st.t;
    let (m, v) = (part(&mut st.m, moment, len), part(&mut st.v, moment, len));
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
            let t = t as i32;
            let bc1 = 1.0 - BETA1.powi(t);
            let bc2 = 1.0 - BETA2.powi(t);
            let step_size = lr / bc1;
            let inv_sqrt_bc2 = 1.0 / bc2.sqrt();
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
mod tests {
    use super::*;

    #[test]
    fn every_optimizer_minimises_a_quadratic() {
        for kind in [
            OptimizerKind::Sgd,
            OptimizerKind::Momentum,
            OptimizerKind::Nesterov,
            OptimizerKind::Adam,
            OptimizerKind::AdamW,
        ] {
            let mut p = vec![3.0f32, -2.0];
            let mut st = OptState::new(kind, 2);
            let o = Optimizer::new(kind, 0.0);
            for _ in 0..500 {
                let g: Vec<f32> = p.iter().map(|x| 2.0 * x).collect(); // d/dx x^2
                step(&o, &mut p, &g, &mut st, 0.05, 1.0);
            }
            assert!(p.iter().all(|x| x.abs() < 0.05), "{kind}: {p:?}");
        }
    }

    #[test]
    fn adam_first_step_moves_by_lr_in_the_gradient_sign() {
        let mut p = vec![1.0f32, 1.0];
        let mut st = OptState::new(OptimizerKind::Adam, 2);
        let o = Optimizer::new(OptimizerKind::Adam, 0.0);
        step(&o, &mut p, &[4.0, -0.5], &mut st, 0.1, 0.5);
        assert!(
            (p[0] - 0.9).abs() < 1e-5 && (p[1] - 1.1).abs() < 1e-5,
            "{p:?}"
        );
    }

    #[test]
    fn nesterov_and_momentum_follow_pytorch_and_excluded_ranges_are_not_decayed() {
        // two steps of PyTorch's SGD(momentum=0.5, nesterov=True, weight_decay=0.1) by hand
        let o = Optimizer {
            momentum: 0.5,
            no_decay: std::iter::once(1..2).collect(),
            ..Optimizer::new(OptimizerKind::Nesterov, 0.1)
        };
        let mut p = vec![1.0f32, 1.0];
        let mut st = OptState::new(o.kind, 2);
        step(&o, &mut p, &[2.0, 2.0], &mut st, 0.1, 1.0);
        // decayed: g = 2 + 0.1 = 2.1, buf = 2.1, p -= 0.1 * (2.1 + 0.5 * 2.1)
        assert!((p[0] - (1.0 - 0.1 * 3.15)).abs() < 1e-6, "{p:?}");
        // not decayed: g = 2, p -= 0.1 * (2 + 0.5 * 2)
        assert!((p[1] - 0.7).abs() < 1e-6, "{p:?}");
        let p0 = p[0];
        step(&o, &mut p, &[1.0, 1.0], &mut st, 0.1, 1.0);
        let g = 1.0 + 0.1 * p0;
        let buf = 0.5 * 2.1 + g;
        assert!((p[0] - (p0 - 0.1 * (g + 0.5 * buf))).abs() < 1e-6, "{p:?}");
        // heavy ball with the same coefficient steps by the buffer alone
        let o = Optimizer {
            kind: OptimizerKind::Momentum,
            ..o
        };
        let (mut q, mut st) = (vec![1.0f32], OptState::new(o.kind, 1));
        step(&o, &mut q, &[2.0], &mut st, 0.1, 1.0);
        step(&o, &mut q, &[2.0], &mut st, 0.1, 1.0);
        let g1 = 2.1f32;
        let q1 = 1.0 - 0.1 * g1;
        let g2 = 2.0 + 0.1 * q1;
        assert!((q[0] - (q1 - 0.1 * (0.5 * g1 + g2))).abs() < 1e-6, "{q:?}");
    }

    #[test]
    fn pieces_cover_each_trained_parameter_once_with_its_decay_and_compact_moments() {
        let o = Optimizer {
            frozen: vec![0..2, 5..7],
            no_decay: vec![3..6, 8..9],
            ..Optimizer::new(OptimizerKind::Adam, 0.1)
        };
        let got: Vec<(Range<usize>, usize, bool)> = (o.pieces(10).into_iter())
            .map(|p| (p.range, p.moment, p.decay))
            .collect();
        assert_eq!(
            got,
            vec![
                (2..3, 0, true),
                (3..5, 1, false),
                (7..8, 3, true),
                (8..9, 4, false),
                (9..10, 5, true)
            ]
        );
        // nothing frozen or excluded: one piece
        let plain = Optimizer::new(OptimizerKind::Sgd, 0.0).pieces(7);
        assert_eq!(plain.len(), 1);
        assert_eq!((plain[0].range.clone(), plain[0].decay), (0..7, true));
        assert!(Optimizer::new(OptimizerKind::Sgd, 0.0).pieces(0).is_empty());
    }

    #[test]
    fn the_norm_counts_trained_gradients_and_clipping_scales_as_pytorch_does() {
        let o = Optimizer {
            frozen: std::iter::once(0..1).collect(),
            ..Optimizer::new(OptimizerKind::Sgd, 0.0)
        };
        // the frozen gradient (100) is left out: 3-4-0 over 2 samples is a mean of norm 2.5
        let sums = [100.0, 6.0, 8.0, 0.0];
        assert_eq!(o.grad_sumsq(&sums), 100.0);
        assert_eq!(mean_grad_norm(o.grad_sumsq(&sums), 2.0), 5.0);
        assert_eq!(mean_grad_norm(0.0, 0.0), 0.0, "a step of no samples");
        // no bound: never scaled; a bound: max / (norm + 1e-6) where the norm is past it
        assert_eq!(o.clip_factor(1e9), 1.0);
        let clipped = Optimizer {
            clip_norm: Some(1.0),
            ..o.clone()
        };
        assert_eq!(clipped.clip_factor(0.5), 1.0);
        assert!((clipped.clip_factor(5.0) - 0.2).abs() < 1e-6);
        // the update with the factor is the update of the clipped gradient
        let mut a = vec![1.0f32; 4];
        let mut b = a.clone();
        let mut sa = OptState::new(OptimizerKind::Sgd, 4);
        let mut sb = sa.clone();
        let f = clipped.clip_factor(5.0);
        step(&clipped, &mut a, &sums, &mut sa, 0.1, 0.5 * f);
        let clipped_mean: Vec<f32> = sums.iter().map(|g| g * 0.5 * f).collect();
        step(&clipped, &mut b, &clipped_mean, &mut sb, 0.1, 1.0);
        assert_eq!(a, b);
        assert_eq!(a[0], 1.0, "frozen");
        let moved: f32 = a.iter().map(|p| (p - 1.0) * (p - 1.0)).sum::<f32>().sqrt();
        assert!((moved - 0.1).abs() < 1e-6, "lr x the bound: {moved}");
    }

    #[test]
    fn parses_names() {
        assert_eq!(
            "AdamW".parse::<OptimizerKind>().unwrap(),
            OptimizerKind::AdamW
        );
        assert!("lion"
            .parse::<OptimizerKind>()
            .unwrap_err()
            .contains("sgd, momentum, nesterov, adam or adamw"));
    }

    #[test]
    fn frozen_parameters_have_no_moments_and_the_rest_step_as_if_alone() {
        let (n, frozen) = (9, vec![0..2, 5..7]);
        let kept: Vec<usize> = vec![2, 3, 4, 7, 8];
        for kind in [
            OptimizerKind::Momentum,
            OptimizerKind::Adam,
            OptimizerKind::AdamW,
        ] {
            let o = Optimizer {
                frozen: frozen.clone(),
                no_decay: std::iter::once(3..6).collect(),
                ..Optimizer::new(kind, 0.01)
            };
            let mut st = o.compact(&OptState::new(kind, n), n);
            assert_eq!(
                st.m.len(),
                kept.len(),
                "{kind}: moments for the trained only"
            );
            let mut p: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 1.0).collect();
            let before = p.clone();
            // the same parameters alone, with the no-decay range where it falls among them
            let alone_o = Optimizer {
                frozen: Vec::new(),
                no_decay: std::iter::once(1..3).collect(),
                ..o.clone()
            };
            let mut alone: Vec<f32> = kept.iter().map(|&i| before[i]).collect();
            let mut alone_st = OptState::new(kind, kept.len());
            for s in 0..5 {
                let g: Vec<f32> = (0..n).map(|i| (i as f32 - 4.0) * (s + 1) as f32).collect();
                step(&o, &mut p, &g, &mut st, 0.1, 0.5);
                let ga: Vec<f32> = kept.iter().map(|&i| g[i]).collect();
                step(&alone_o, &mut alone, &ga, &mut alone_st, 0.1, 0.5);
            }
            for r in &frozen {
                assert_eq!(p[r.clone()], before[r.clone()], "{kind}: frozen moved");
            }
            let got: Vec<f32> = kept.iter().map(|&i| p[i]).collect();
            assert_eq!(got, alone, "{kind}");
            // laid out over every parameter again (a checkpoint's), frozen moments zero
            let full = o.expand(&st, n);
            assert_eq!(full.m.len(), n);
            assert!(frozen
                .iter()
                .all(|r| full.m[r.clone()].iter().all(|&x| x == 0.0)));
            assert_eq!(o.compact(&full, n), st, "{kind}: the round trip");
        }
    }
}
