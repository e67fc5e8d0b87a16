//! The optimizer update on the GPU: one kernel per step over the flat buffers, with the CPU's
//! bias correction and the same mean-gradient scaling.

use super::CudaReplica;
use crate::backend::Replica;
use crate::nn::optim::{OptimizerKind, BETA1, BETA2, EPS, MOMENTUM};

impl CudaReplica {
    /// The optimizer kernel for this step's mean gradient.
    pub(super) fn update(&mut self, lr: f32) {
        let n = self.model.n_params;
        let scale = (1.0 / self.batch_metrics().samples.max(1.0)) as f32;
        let wd = self.weight_decay;
        self.t += 1;
        let ni = n as i32;
        let mut p = self.params.slice_mut(..);
        let g = self.grads.slice(..n);
        match self.kind {
            OptimizerKind::Sgd => {
                launch!(&self.gpu, "sgd_f32", n, &mut p, &g, &ni, &lr, &wd, &scale)
            }
            OptimizerKind::Momentum | OptimizerKind::Nesterov => {
                let mut m = self.m.slice_mut(..);
                let first = i32::from(self.t == 1);
                let nesterov = i32::from(self.kind == OptimizerKind::Nesterov);
                // other coefficients are refused on GPUs (`engine::validate::on_gpus`)
                let mu = MOMENTUM;
                launch!(
                    &self.gpu,
                    "momentum_f32",
                    n,
                    &mut p,
                    &g,
                    &mut m,
                    &ni,
                    &lr,
                    &mu,
                    &wd,
                    &scale,
                    &first,
                    &nesterov
                )
            }
            OptimizerKind::Adam | OptimizerKind::AdamW => {
                let t = self.t as i32;
                let step_size = lr / (1.0 - BETA1.powi(t));
                let inv_sqrt_bc2 = 1.0 / (1.0 - BETA2.powi(t)).sqrt();
                let (b1, b2, eps) = (BETA1, BETA2, EPS);
                let mut m = self.m.slice_mut(..);
                let mut v = self.v.slice_mut(..);
                let name = if self.kind == OptimizerKind::Adam {
                    "adam_f32"
                } else {
                    "adamw_f32"
                };
                launch!(
                    &self.gpu,
                    name,
                    n,
                    &mut p,
                    &g,
                    &mut m,
                    &mut v,
                    &ni,
                    &lr,
                    &b1,
                    &b2,
                    &eps,
                    &wd,
                    &scale,
                    &step_size,
                    &inv_sqrt_bc2
                )
            }
        }
    }
}
