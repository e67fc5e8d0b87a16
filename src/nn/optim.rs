//! Optimizers over the flat parameter buffer. The gradient arrives as a *sum* over the global
//! batch; `scale` (1 / global sample count) turns it into the mean inside the same pass.

use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptimizerKind {
    Sgd,
    /// SGD with heavy-ball momentum 0.9 (PyTorch's formulation).
    Momentum,
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
            "adam" => Ok(Self::Adam),
            "adamw" => Ok(Self::AdamW),
            _ => Err(format!(
                "unknown optimizer `{s}`: use sgd, momentum, adam or adamw"
            )),
        }
    }
}

impl fmt::Display for OptimizerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Sgd => "sgd",
            Self::Momentum => "momentum",
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
            OptimizerKind::Momentum => (n, 0),
            OptimizerKind::Adam | OptimizerKind::AdamW => (n, n),
        };
        OptState {
            t: 0,
            m: vec![0.0; m],
            v: vec![0.0; v],
        }
    }
}

/// One update: params -= lr * direction(scale * grads).
pub fn step(
    kind: OptimizerKind,
    params: &mut [f32],
    grads: &[f32],
    st: &mut OptState,
    lr: f32,
    wd: f32,
    scale: f32,
) {
    let grads = &grads[..params.len()];
    st.t += 1;
    match kind {
        OptimizerKind::Sgd => {
            for (p, g) in params.iter_mut().zip(grads) {
                let g = g * scale + wd * *p;
                *p -= lr * g;
            }
        }
        OptimizerKind::Momentum => {
            let first = st.t == 1;
            for ((p, g), m) in params.iter_mut().zip(grads).zip(st.m.iter_mut()) {
                let g = g * scale + wd * *p;
                *m = if first { g } else { MOMENTUM * *m + g };
                *p -= lr * *m;
            }
        }
        OptimizerKind::Adam | OptimizerKind::AdamW => {
            let decoupled = kind == OptimizerKind::AdamW;
            let t = st.t as i32;
            let bc1 = 1.0 - BETA1.powi(t);
            let bc2 = 1.0 - BETA2.powi(t);
            let step_size = lr / bc1;
            let inv_sqrt_bc2 = 1.0 / bc2.sqrt();
            for (((p, g), m), v) in params
                .iter_mut()
                .zip(grads)
                .zip(st.m.iter_mut())
                .zip(st.v.iter_mut())
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
            OptimizerKind::Adam,
            OptimizerKind::AdamW,
        ] {
            let mut p = vec![3.0f32, -2.0];
            let mut st = OptState::new(kind, 2);
            for _ in 0..500 {
                let g: Vec<f32> = p.iter().map(|x| 2.0 * x).collect(); // d/dx x^2
                step(kind, &mut p, &g, &mut st, 0.05, 0.0, 1.0);
            }
            assert!(p.iter().all(|x| x.abs() < 0.05), "{kind}: {p:?}");
        }
    }

    #[test]
    fn adam_first_step_moves_by_lr_in_the_gradient_sign() {
        let mut p = vec![1.0f32, 1.0];
        let mut st = OptState::new(OptimizerKind::Adam, 2);
        step(
            OptimizerKind::Adam,
            &mut p,
            &[4.0, -0.5],
            &mut st,
            0.1,
            0.0,
            0.5,
        );
        assert!(
            (p[0] - 0.9).abs() < 1e-5 && (p[1] - 1.1).abs() < 1e-5,
            "{p:?}"
        );
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
            .contains("sgd, momentum, adam or adamw"));
    }
}
