//! Learning-rate schedule (warm-up, then constant / cosine / step decay) and the rule that
//! rescales the LR when the batch size changes during a run.

use std::fmt;
use std::str::FromStr;

use super::optim::OptimizerKind;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Schedule {
    #[default]
    Constant,
    /// Half-cosine from the base LR to 0 over the run.
    Cosine,
    /// x0.1 at each milestone, given in thousandths of the run (`step`: 50% and 75%); at
    /// most 4 milestones, the unused ones 0.
    MultiStep { at: [u16; 4] },
}

/// `step`: x0.1 at 50% and again at 75% of the run.
pub const STEP: Schedule = Schedule::MultiStep {
    at: [500, 750, 0, 0],
};

const FORMS: &str =
    "use constant, cosine, step (x0.1 at 50% and 75% of the run) or multistep:F1,F2,... (x0.1 at each fraction of the run, e.g. multistep:0.3,0.6,0.8)";

impl FromStr for Schedule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.to_ascii_lowercase();
        if let Some(list) = lower.strip_prefix("multistep:") {
            let mut at = [0u16; 4];
            let parts: Vec<&str> = list.split(',').map(str::trim).collect();
            if parts.len() > at.len() {
                return Err(format!("schedule `{s}`: at most 4 milestones; {FORMS}"));
            }
            for (i, p) in parts.iter().enumerate() {
                let f: f64 = p.parse().map_err(|_| {
                    format!("schedule `{s}`: milestone `{p}` is not a number; {FORMS}")
                })?;
                let milli = (f * 1000.0).round();
                if !(1.0..1000.0).contains(&milli) {
                    return Err(format!(
                        "schedule `{s}`: milestone {p} must be a fraction of the run between 0.001 and 0.999"
                    ));
                }
                if i > 0 && milli as u16 <= at[i - 1] {
                    return Err(format!("schedule `{s}`: milestones must increase"));
                }
                at[i] = milli as u16;
            }
            return Ok(Self::MultiStep { at });
        }
        match lower.as_str() {
            "constant" => Ok(Self::Constant),
            "cosine" => Ok(Self::Cosine),
            "step" => Ok(STEP),
            _ => Err(format!("unknown schedule `{s}`: {FORMS}")),
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Constant => f.write_str("constant"),
            Self::Cosine => f.write_str("cosine"),
            s if *s == STEP => f.write_str("step"),
            Self::MultiStep { at } => {
                let parts: Vec<String> = (at.iter())
                    .filter(|&&a| a > 0)
                    .map(|&a| (a as f64 / 1000.0).to_string())
                    .collect();
                write!(f, "multistep:{}", parts.join(","))
            }
        }
    }
}

/// How the LR moves from the base over a run, for the start-up's LR line: None for a constant
/// LR without warm-up.
pub fn describe(schedule: Schedule, warmup: u64) -> Option<String> {
    let decay = match schedule {
        Schedule::Constant => None,
        Schedule::Cosine if warmup > 0 => {
            Some("cosine decay to 0 over the rest of the run".to_string())
        }
        Schedule::Cosine => Some("cosine decay to 0 over the run".to_string()),
        Schedule::MultiStep { at } => {
            let at: Vec<String> = (at.iter())
                .filter(|&&a| a > 0)
                .map(|&a| format!("{}%", a as f64 / 10.0))
                .collect();
            Some(format!("x0.1 at {} of the run", at.join(", ")))
        }
    };
    let ramp = match warmup {
        0 => None,
        1 => Some("rising linearly to it over the first step".to_string()),
        w => Some(format!("rising linearly to it over the first {w} steps")),
    };
    let flags: Vec<String> = [
        (warmup > 0).then(|| format!("--warmup {warmup}")),
        (schedule != Schedule::Constant).then(|| format!("--schedule {schedule}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    let said: Vec<String> = ramp.into_iter().chain(decay).collect();
    (!said.is_empty()).then(|| format!("{} ({})", said.join(", then "), flags.join(" ")))
}

/// LR at `step` (0-based, steps done so far) when `progress` (0..=1) of the run is done, of
/// which the warm-up takes `warm_share`. Progress is measured in samples for epoch-bounded
/// runs, so it stays right when the batch size changes mid-run. The cosine starts where the
/// warm-up ends, at the base LR (as `SequentialLR` of a linear warm-up and a cosine, and
/// Hugging Face's cosine with warm-up); the step milestones are shares of the whole run.
pub fn lr_at(
    schedule: Schedule,
    base: f32,
    warmup: u64,
    step: u64,
    progress: f64,
    warm_share: f64,
) -> f32 {
    let decay = match schedule {
        Schedule::Constant => 1.0,
        Schedule::Cosine => {
            let rest = 1.0 - warm_share.clamp(0.0, 1.0);
            let after = match rest > 0.0 {
                true => ((progress - (1.0 - rest)) / rest).clamp(0.0, 1.0),
                false => 0.0,
            };
            0.5 * (1.0 + (std::f64::consts::PI * after).cos())
        }
        Schedule::MultiStep { at } => {
            let passed = (at.iter())
                .filter(|&&a| a > 0 && progress >= a as f64 / 1000.0)
                .count();
            0.1f64.powi(passed as i32)
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
    /// The rule an optimizer's LR follows unless `--lr-scaling` says otherwise: linear for
    /// SGD (Goyal et al. 2017), square root for Adam and AdamW (Malladi et al. 2022: linear
    /// scaling takes Adam's LR past where it trains at large batches).
    pub fn for_optimizer(optimizer: OptimizerKind) -> LrScaling {
        match optimizer {
            OptimizerKind::Adam | OptimizerKind::AdamW => LrScaling::Sqrt,
            OptimizerKind::Sgd | OptimizerKind::Momentum | OptimizerKind::Nesterov => {
                LrScaling::Linear
            }
        }
    }

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
    fn the_lr_line_says_the_warm_up_and_the_decay_with_their_flags() {
        assert_eq!(describe(Schedule::Constant, 0), None);
        assert_eq!(
            describe(Schedule::Constant, 1).as_deref(),
            Some("rising linearly to it over the first step (--warmup 1)")
        );
        assert_eq!(
            describe(Schedule::Cosine, 0).as_deref(),
            Some("cosine decay to 0 over the run (--schedule cosine)")
        );
        assert_eq!(
            describe(STEP, 500).as_deref(),
            Some("rising linearly to it over the first 500 steps, then x0.1 at 50%, 75% of the run (--warmup 500 --schedule step)")
        );
        let multi: Schedule = "multistep:0.3,0.65".parse().unwrap();
        assert_eq!(
            describe(multi, 0).as_deref(),
            Some("x0.1 at 30%, 65% of the run (--schedule multistep:0.3,0.65)")
        );
    }

    #[test]
    fn warmup_ramps_then_schedules_decay() {
        assert!((lr_at(Schedule::Constant, 1.0, 4, 0, 0.0, 0.0) - 0.25).abs() < 1e-6);
        assert!((lr_at(Schedule::Constant, 1.0, 4, 3, 0.1, 0.0) - 1.0).abs() < 1e-6);
        assert!((lr_at(Schedule::Cosine, 1.0, 0, 10, 0.5, 0.0) - 0.5).abs() < 1e-6);
        assert!(lr_at(Schedule::Cosine, 1.0, 0, 10, 1.0, 0.0).abs() < 1e-6);
        assert!((lr_at(STEP, 1.0, 0, 10, 0.6, 0.0) - 0.1).abs() < 1e-6);
        assert!((lr_at(STEP, 1.0, 0, 10, 0.8, 0.0) - 0.01).abs() < 1e-6);
        let m: Schedule = "multistep:0.3,0.6,0.8".parse().unwrap();
        assert_eq!(m.to_string(), "multistep:0.3,0.6,0.8");
        assert!((lr_at(m, 1.0, 0, 10, 0.29, 0.0) - 1.0).abs() < 1e-6);
        assert!((lr_at(m, 1.0, 0, 10, 0.7, 0.0) - 0.01).abs() < 1e-6);
        assert!((lr_at(m, 1.0, 0, 10, 0.9, 0.0) - 0.001).abs() < 1e-6);
        // a warm-up then a cosine over the rest: PyTorch's SequentialLR of LinearLR(1/3,
        // total_iters=2) and CosineAnnealingLR(T_max=7) at milestone 3, over 10 steps
        let torch = [
            0.0333333, 0.0666667, 0.1, 0.1, 0.0950484, 0.0811745, 0.0611260, 0.0388740, 0.0188255,
            0.0049516,
        ];
        for (step, want) in torch.into_iter().enumerate() {
            let s = step as u64;
            let lr = lr_at(Schedule::Cosine, 0.1, 3, s, s as f64 / 10.0, 0.3);
            assert!(
                (lr - want).abs() < 1e-6,
                "step {step}: {lr} where torch has {want}"
            );
        }
        // a warm-up as long as the run leaves the LR at the top
        assert!((lr_at(Schedule::Cosine, 1.0, 10, 12, 0.9, 1.0) - 1.0).abs() < 1e-6);
        assert_eq!("step".parse::<Schedule>().unwrap().to_string(), "step");
        assert_eq!("multistep:0.5,0.75".parse::<Schedule>().unwrap(), STEP);
        for (bad, says) in [
            ("multistep:0.5,0.2", "must increase"),
            ("multistep:1.5", "between 0.001 and 0.999"),
            ("multistep:x", "`x` is not a number"),
            ("multistep:0.1,0.2,0.3,0.4,0.5", "at most 4"),
            ("linear", "multistep:F1,F2"),
        ] {
            let e = bad.parse::<Schedule>().unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn batch_change_rescales_lr() {
        assert!((LrScaling::Linear.rescale(0.1, 32, 64) - 0.2).abs() < 1e-6);
        assert!((LrScaling::Sqrt.rescale(0.1, 32, 128) - 0.2).abs() < 1e-6);
        assert_eq!(LrScaling::None.rescale(0.1, 32, 64), 0.1);
    }
}
