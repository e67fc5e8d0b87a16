//! The step boundary: every rank learns rank 0's decision (controls), and in a run over several
//! processes every rank's last step reaches process 0, whose frontend shows every rank.

use super::Worker;
use crate::engine::control::{agree, Decision};
use crate::engine::events::{Applied, Event, StepStats};
use crate::engine::heartbeat::Phase;
use crate::engine::EngineError;

/// The most steps a rank has reported and not yet told at the end of a run (`next_report`).
const UNSENT: usize = 2;

impl Worker {
    /// Meets the other ranks until rank 0 decides something other than "still paused" (a
    /// checkpoint while paused is something).
    pub(super) fn boundary(&mut self) -> Result<Decision, EngineError> {
        let multi = self.local.len() < self.ranks;
        self.next_report();
        loop {
            let (events, step_now) = (&self.events, self.step);
            let mut on_pause = |paused: bool| {
                let applied = match paused {
                    true => Applied::Paused,
                    false => Applied::Resumed,
                };
                let _ = events.send(Event::Control {
                    step: step_now,
                    applied,
                });
            };
            let mine = self
                .last_stats
                .as_ref()
                .map_or([0; StepStats::WORDS], StepStats::to_words);
            let report = multi.then_some((&mine[..], &mut self.reports));
            let d = agree(
                self.coll.as_mut(),
                self.decider.as_mut(),
                &mut on_pause,
                report,
            )?;
            if multi && self.rank == 0 {
                self.forward_remote_steps();
            }
            if !d.hold || d.checkpoint {
                return Ok(d);
            }
        }
    }

    /// After the last step, which no boundary follows: every rank's last step reaches process 0
    /// (so a run over several processes records its last step as one process does).
    pub(super) fn last_reports(&mut self) -> Result<(), EngineError> {
        if self.local.len() == self.ranks {
            return Ok(());
        }
        // (as many rounds on every rank: at most `UNSENT` steps are left, `next_report`)
        for _ in 0..UNSENT {
            self.next_report();
            let mine = self
                .last_stats
                .as_ref()
                .map_or([0; StepStats::WORDS], StepStats::to_words);
            let mut all = vec![0u64; StepStats::WORDS * self.ranks];
            self.coll.all_gather_u64(&mine, &mut all)?;
            self.reports = all;
            if self.rank == 0 {
                self.forward_remote_steps();
            }
        }
        Ok(())
    }

    /// The step this rank tells the others next: the oldest it has reported and not yet told
    /// (one a boundary; a rank reporting late can report two steps between boundaries, the one
    /// before and, caught up, its own, after which it reports none: at most `UNSENT` wait),
    /// else the last told again (process 0 passes each step on once).
    fn next_report(&mut self) {
        if let Some(s) = self.unsent.pop_front() {
            self.last_stats = Some(s);
        }
    }

    /// Process 0's first rank passes the other processes' steps on to the frontend, once each.
    fn forward_remote_steps(&mut self) {
        self.forwarded.resize(self.ranks, 0);
        for r in (0..self.ranks).filter(|r| !self.local.contains(r)) {
            let words = &self.reports[r * StepStats::WORDS..][..StepStats::WORDS];
            let Some(s) = StepStats::from_words(words) else {
                continue;
            };
            if s.step <= self.forwarded[r] || s.rank != r {
                continue;
            }
            self.forwarded[r] = s.step;
            self.beats.beat(r, s.step + 1, Phase::Data);
            let _ = self.stats.try_send(s);
        }
    }
}
