//! `--strategy`: how ranks share what they learn, as a user gives it (the choice and its
//! settings; `engine::strategy` carries it out).

use std::fmt;
use std::str::FromStr;

use crate::nn::optim::OptimizerKind;

/// Synchronous steps before local SGD starts (PostLocalSGD's `start_localSGD_iter`).
pub const DEFAULT_LOCAL_SGD_WARMUP: u64 = 100;
/// The longest local period accepted.
pub const MAX_LOCAL_STEPS: u64 = 1_000_000;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Strategy {
    #[default]
    Mirrored,
    CentralStorage,
    LocalSgd {
        /// Optimizer steps each rank takes alone between two averages (H).
        every: u64,
        /// Synchronous (mirrored) steps first.
        warmup: u64,
        /// Also average the optimizer moments (momentum, Adam's m and v) at each sync.
        moments: bool,
    },
}

const HELP: &str =
    "use mirrored, central-storage, or local-sgd:H (average every H steps, e.g. local-sgd:8; local-sgd:H,moments also averages the optimizer moments)";

impl FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        match s.to_ascii_lowercase().as_str() {
            "mirrored" => return Ok(Strategy::Mirrored),
            "central-storage" | "central" => return Ok(Strategy::CentralStorage),
            "local-sgd" => {
                return Err(format!(
                    "strategy `{s}`: say how many local steps between averages, e.g. local-sgd:8"
                ))
            }
            _ => {}
        }
        let Some(rest) = s.strip_prefix("local-sgd:") else {
            let known = ["mirrored", "central-storage", "local-sgd"];
            let named = s.split(':').next().unwrap_or(s).to_ascii_lowercase();
            return Err(match crate::text::nearest(&named, &known) {
                Some(k) => format!("unknown strategy `{s}`: did you mean {k}? {HELP}"),
                None => format!("unknown strategy `{s}`: {HELP}"),
            });
        };
        let (h, moments) = match rest.split_once(',') {
            Some((h, "moments")) => (h, true),
            Some((_, other)) => {
                let other = (other.split(','))
                    .find(|o| *o != "moments")
                    .unwrap_or(other);
                return Err(format!(
                    "strategy `{s}`: unknown option `{other}` after the period; the only one is `moments` (local-sgd:8,moments)"
                ));
            }
            None => (rest, false),
        };
        match h.trim().parse::<u64>() {
            Ok(every) if (1..=MAX_LOCAL_STEPS).contains(&every) => Ok(Strategy::LocalSgd {
                every,
                warmup: DEFAULT_LOCAL_SGD_WARMUP,
                moments,
            }),
            _ => Err(format!(
                "strategy `{s}`: H, the local steps between averages, must be a whole number from 1 to {MAX_LOCAL_STEPS} (local-sgd:1 averages after every step), e.g. local-sgd:8"
            )),
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Strategy::Mirrored => f.write_str("mirrored"),
            Strategy::CentralStorage => f.write_str("central-storage"),
            Strategy::LocalSgd { every, moments, .. } => {
                write!(
                    f,
                    "local-sgd:{every}{}",
                    if *moments { ",moments" } else { "" }
                )
            }
        }
    }
}

impl Strategy {
    /// `--local-sgd-warmup`: only meaningful for local SGD.
    pub fn with_warmup(self, steps: u64) -> Result<Strategy, String> {
        match self {
            Strategy::LocalSgd { every, moments, .. } => Ok(Strategy::LocalSgd {
                every,
                warmup: steps,
                moments,
            }),
            other => Err(format!(
                "--local-sgd-warmup is for --strategy local-sgd:H; this run's strategy is {other}: drop the flag, or use e.g. --strategy local-sgd:8"
            )),
        }
    }

    /// Why a checkpoint at `step`, written by a run of this strategy on `ranks` ranks with
    /// `optimizer`, cannot be resumed as the run it was by a run of strategy `next` (local SGD
    /// without `,moments` past its warm-up keeps each rank's moments apart, and a checkpoint
    /// holds one rank's; another strategy, or another period, starts every rank from them as a
    /// run of its own), and the flags that go on from it instead.
    pub fn unresumable(
        &self,
        optimizer: OptimizerKind,
        step: u64,
        ranks: usize,
        next: Strategy,
    ) -> Option<(String, String)> {
        let Strategy::LocalSgd {
            every,
            warmup,
            moments: false,
        } = *self
        else {
            return None;
        };
        let again =
            matches!(next, Strategy::LocalSgd { every: e, moments: false, .. } if e == every);
        (again && ranks > 1 && step > warmup && optimizer.keeps_moments()).then(|| {
            let why = format!(
                "--strategy local-sgd:{every} cannot be resumed as it was at step {step}: past its synchronous warm-up ({warmup} steps) each rank's {optimizer} moments are its own, and a checkpoint holds one rank's"
            );
            (why, format!("--strategy local-sgd:{every},moments"))
        })
    }

    /// Whether the ranks hold one model after step `step` (1-based) by the schedule: always,
    /// except between local SGD's averages.
    pub fn synced_after(&self, step: u64) -> bool {
        match *self {
            Strategy::LocalSgd { every, warmup, .. } => {
                step <= warmup || (step - warmup).is_multiple_of(every)
            }
            _ => true,
        }
    }

    /// Local SGD past its warm-up: the next step (after `step`) at which the ranks average.
    pub fn next_sync(&self, step: u64) -> Option<u64> {
        match *self {
            Strategy::LocalSgd { every, warmup, .. } if step >= warmup => {
                Some(warmup + ((step - warmup) / every + 1) * every)
            }
            _ => None,
        }
    }

    /// Local SGD's synchronous warm-up steps (0 for the others).
    pub fn sync_warmup(&self) -> u64 {
        match *self {
            Strategy::LocalSgd { warmup, .. } => warmup,
            _ => 0,
        }
    }

    /// Steps between two exchanges, by the schedule (1 but for local SGD).
    pub fn sync_every(&self) -> u64 {
        match *self {
            Strategy::LocalSgd { every, .. } => every,
            _ => 1,
        }
    }

    /// One line for the start-up description.
    pub fn describe(&self) -> String {
        match *self {
            Strategy::Mirrored => "mirrored (every rank holds the model; gradients all-reduced every step)".into(),
            Strategy::CentralStorage => "central-storage (parameters and optimizer state on the host; devices get the parameters and send gradients every step)".into(),
            Strategy::LocalSgd { every, warmup, moments } => format!(
                "local-sgd:{every} ({warmup} synchronous warm-up steps, then each rank steps alone and the ranks average {} every {every} steps; replicas diverge by design between averages)",
                if moments { "parameters and optimizer moments" } else { "parameters" }
            ),
        }
    }
}
