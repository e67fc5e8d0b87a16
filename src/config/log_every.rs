//! `--log-every N|auto`: which steps the log and the metrics files keep. Left to itself
//! (`auto`) a run keeps every 50th step, or where those come faster than ten a second every
//! 100th, 200th, 500th, 1000th, ... (`observe::recorder::kept`): a small model stepping 50 000
//! times a second would otherwise write a thousand step records a second (3 GB an hour) and a
//! log no one can read; where 50 steps take longer than ten seconds, every 20th, 10th, 5th, 2nd
//! or every step (a slow model speaks every few seconds). A number asked for is kept to the step. `auto` thins epochs' ends and
//! validations the same way where they come faster than ten a second (a number keeps them all).

use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogEvery {
    /// Every `AUTO_STEPS`th step, or a round multiple that keeps `AUTO_GAP` between two, or a
    /// round fraction that keeps within ten seconds.
    #[default]
    Auto,
    /// Every Nth step, however fast they come.
    Steps(u64),
}

/// The steps between two kept by `auto`, and between two checks that the replicas agree
/// (`engine::worker::in_sync`).
pub const AUTO_STEPS: u64 = 50;

/// The run time `auto` keeps between two steps kept, at the least (ten a second).
pub const AUTO_GAP: std::time::Duration = std::time::Duration::from_millis(100);

impl LogEvery {
    /// The steps between two kept ones (at the least, for `auto`).
    pub fn steps(self) -> u64 {
        match self {
            LogEvery::Auto => AUTO_STEPS,
            LogEvery::Steps(n) => n,
        }
    }
}

impl FromStr for LogEvery {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            w if w.eq_ignore_ascii_case("auto") => Ok(LogEvery::Auto),
            n => match n.parse::<u64>() {
                Ok(0) => Err("--log-every 0 is invalid: use 1 or more steps, or auto".into()),
                Ok(n) => Ok(LogEvery::Steps(n)),
                Err(_) => Err(format!(
                    "--log-every `{s}`: use a number of steps, or auto (every {AUTO_STEPS}th step, fewer where they come faster than ten a second)"
                )),
            },
        }
    }
}

impl fmt::Display for LogEvery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogEvery::Auto => f.write_str("auto"),
            LogEvery::Steps(n) => write!(f, "{n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_or_auto_and_nothing_else() {
        assert_eq!("auto".parse(), Ok(LogEvery::Auto));
        assert_eq!("AUTO".parse(), Ok(LogEvery::Auto));
        assert_eq!("7".parse(), Ok(LogEvery::Steps(7)));
        for (text, said) in [
            ("0", "use 1 or more"),
            ("-3", "a number of steps"),
            ("x", "auto"),
        ] {
            let e = text.parse::<LogEvery>().unwrap_err();
            assert!(e.contains(said), "{text}: {e}");
        }
        // (what a checkpoint records reads back)
        for l in [LogEvery::Auto, LogEvery::Steps(20)] {
            assert_eq!(l.to_string().parse(), Ok(l));
        }
    }
}
