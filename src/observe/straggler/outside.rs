//! Other work on the machine taking the run's cores (`outside_load`): said once it held for
//! `RUNS` telemetry samples in a row, cleared after as many without it, or once another
//! machine's loads stop coming.

use crate::observe::machine_load::Load;

/// Samples in a row to say it, and to clear it.
const RUNS: u32 = 3;

#[derive(Default)]
pub struct OutsideDetector {
    above: u32,
    below: u32,
    said: bool,
    /// The newest load, while it is said.
    holding: Option<Load>,
}

/// What changed: said (with the newest sample's load) or cleared.
pub enum Change {
    Said(Load),
    Cleared,
}

impl OutsideDetector {
    pub fn on_load(&mut self, load: &Load) -> Option<Change> {
        match load.contended() {
            true => (self.above, self.below) = (self.above + 1, 0),
            false => (self.above, self.below) = (0, self.below + 1),
        }
        let change = match self.said {
            false if self.above >= RUNS => Some(Change::Said(load.clone())),
            true if self.below >= RUNS => Some(Change::Cleared),
            _ => None,
        };
        if let Some(c) = &change {
            self.said = matches!(c, Change::Said(_));
        }
        // (the newest load that takes the cores: not one of the few before a clearing)
        if !self.said {
            self.holding = None;
        } else if load.contended() {
            self.holding = Some(load.clone());
        }
        change
    }

    /// The machine's loads stopped coming: what was said holds no more (said again only after
    /// `RUNS` new samples with it). Whether it was said.
    pub fn unheard(&mut self) -> bool {
        std::mem::take(self).said
    }

    /// The machine's newest load, while other work is said to take its cores.
    pub fn holding(&self) -> Option<&Load> {
        self.holding.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn said_after_three_samples_in_a_row_and_cleared_after_three_without() {
        let load = |others| Load {
            cores: 2,
            ours: 1.2,
            others,
            top: Some(("cc1plus (pid 9)".into(), others)),
        };
        let mut d = OutsideDetector::default();
        // a blip is not said
        for others in [0.9, 0.9, 0.1, 0.9, 0.9] {
            assert!(d.on_load(&load(others)).is_none());
        }
        assert!(matches!(d.on_load(&load(0.9)), Some(Change::Said(l)) if l.others == 0.9));
        assert!(d.on_load(&load(0.8)).is_none());
        for _ in 0..2 {
            assert!(d.on_load(&load(0.1)).is_none());
            // (what a straggler's cause says meanwhile: the newest load that took the cores)
            assert_eq!(d.holding().map(|l| l.others), Some(0.8));
        }
        assert!(matches!(d.on_load(&load(0.1)), Some(Change::Cleared)));
        assert!(d.holding().is_none());
        // a machine whose loads stop coming: what was said of it is taken back, once
        assert!(!d.unheard());
        for _ in 0..3 {
            d.on_load(&load(0.9));
        }
        assert!(d.unheard());
        assert!(d.holding().is_none() && !d.unheard());
        // said again only after as many samples with it as at first
        assert!(d.on_load(&load(0.9)).is_none() && d.on_load(&load(0.9)).is_none());
        assert!(matches!(d.on_load(&load(0.9)), Some(Change::Said(_))));
        // as the log and the screen say it
        let w = super::super::Warning::OutsideLoad {
            step: 238,
            load: load(0.9),
            rank: None,
            host: None,
        };
        assert_eq!((w.kind(), w.rank()), ("outside_load", None));
        assert!(
            w.to_string().starts_with("outside load: other work took 0.9 of this machine's 2 cores (0.9 of them cc1plus (pid 9)) beside this run's 1.2: its ranks wait for cores"),
            "{w}"
        );
        // another machine's: by its name, about the first rank of the process there
        let there = super::super::Warning::OutsideLoad {
            step: 238,
            load: load(0.9),
            rank: Some(2),
            host: Some("node2".into()),
        };
        assert_eq!(there.rank(), Some(2));
        assert!(
            there
                .to_string()
                .starts_with("outside load on node2: other work took 0.9 of its 2 cores (0.9 of"),
            "{there}"
        );
        let cleared = |unheard| super::super::Warning::OutsideLoadCleared {
            step: 300,
            rank: Some(2),
            host: Some("node2".into()),
            unheard,
        };
        assert_eq!(
            cleared(false).to_string(),
            "outside load on node2 cleared: the cores are free for this run again (step 300)"
        );
        assert_eq!(
            cleared(true).to_string(),
            "outside load on node2 no longer known: its machine's loads stopped coming (step 300)"
        );
    }
}
