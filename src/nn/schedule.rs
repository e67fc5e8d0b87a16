//! Learning-rate schedule (warm-up, then constant / cosine / step decay) and the rule that
//! rescales the LR when the batch size changes during a run.

use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    Constant,
    /// Half-cosine from the base LR to 0 over the run.
    Cosine,
    /// x0.1 at 50% and again at 75% of the run.
    Step,
}

impl FromStr for Schedule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "constant" => Ok(Self::Constant),
            "cosine" => Ok(Self::Cosine),
            "step" => Ok(Self::Step),
            _ => Err(format!(
                "unknown schedule `{s}`: use constant, cosine or step"
            )),
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Constant => "constant",
            Self::Cosine => "cosine",
            Self::Step => "step",
        })
    }
}

/// LR at `step` (0-based, steps done so far) when `progress` (0..=1) of the run is done.
/// Progress is measured in samples for epoch-bounded runs, so it stays right when the batch
/// size changes mid-run.
pub fn lr_at(schedule: Schedule, base: f32, warmup: u64, step: u64, progress: f64) -> f32 {
    let decay = match schedule {
        Schedule::Constant => 1.0,
        Schedule::Cosine => 0.5 * (1.0 + (std::f64::consts::PI * progress.clamp(0.0, 1.0)).cos()),
        Schedule::Step => {
            if progress >= 0.75 {
                0.01
            } else if progress >= 0.5 {
                0.1
            } else {
                1.0
            }
        }
    };
    let ramp = if warmup > 0 && step < warmup {
        (step + 1) as f64 / warmup as f64
    } else {
        1.0
    };
    (base as f64 * decay * ramp) as f32
}

/// How the base LR follows a batch-size change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LrScaling {
    /// LR x new/old (Goyal et al. 2017).
    Linear,
    /// LR x sqrt(new/old).
    Sqrt,
    None,
}

impl LrScaling {
    pub fn rescale(self, lr: f32, old_batch: usize, new_batch: usize) -> f32 {
        let ratio = new_batch as f64 / old_batch as f64;
        match self {
            LrScaling::Linear => (lr as f64 * ratio) as f32,
            LrScaling::Sqrt => (lr as f64 * ratio.sqrt()) as f32,
            LrScaling::None => lr,
        }
    }
}

impl FromStr for LrScaling {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "linear" => Ok(Self::Linear),
            "sqrt" => Ok(Self::Sqrt),
            "none" => Ok(Self::None),
            _ => Err(format!(
                "unknown LR scaling `{s}`: use linear, sqrt or none"
            )),
        }
    }
}

impl fmt::Display for LrScaling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Linear => "linear",
            Self::Sqrt => "sqrt",
            Self::None => "none",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_ramps_then_schedules_decay() {
        assert!((lr_at(Schedule::Constant, 1.0, 4, 0, 0.0) - 0.25).abs() < 1e-6);
        assert!((lr_at(Schedule::Constant, 1.0, 4, 3, 0.1) - 1.0).abs() < 1e-6);
        assert!((lr_at(Schedule::Cosine, 1.0, 0, 10, 0.5) - 0.5).abs() < 1e-6);
        assert!(lr_at(Schedule::Cosine, 1.0, 0, 10, 1.0).abs() < 1e-6);
        assert!((lr_at(Schedule::Step, 1.0, 0, 10, 0.6) - 0.1).abs() < 1e-6);
        assert!((lr_at(Schedule::Step, 1.0, 0, 10, 0.8) - 0.01).abs() < 1e-6);
    }

    #[test]
    fn batch_change_rescales_lr() {
        assert!((LrScaling::Linear.rescale(0.1, 32, 64) - 0.2).abs() < 1e-6);
        assert!((LrScaling::Sqrt.rescale(0.1, 32, 128) - 0.2).abs() < 1e-6);
        assert_eq!(LrScaling::None.rescale(0.1, 32, 64), 0.1);
    }
}
