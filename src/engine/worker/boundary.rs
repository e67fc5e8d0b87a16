//! The step boundary: every rank learns rank 0's decision (controls), and in a run over several
//! processes every rank's last step reaches process 0, whose frontend shows every rank.

use super::Worker;
use crate::config::strategy::Strategy;
use crate::engine::control::{agree, Decision, Heard, HOLD};
use crate::engine::events::{Applied, Event, StepStats};
use crate::engine::heartbeat::Phase;
use crate::engine::EngineError;

/// The most steps a rank reports and has not yet told between two boundaries of a run that
/// meets every step (one, and the one before where its replica reports late).
const UNSENT: usize = 2;
/// The most steps told at one boundary besides (local SGD meets at its averages only): the
/// newest of them, as many as process 0's monitor waits for (`monitor::PENDING_STEPS`).
const MOST_TOLD: usize = 256;

impl Worker {
    /// Takes the batch of `b` per replica rank 0 decided on from the next step, the LR
    /// rescaled for it (said as the next step takes it: where the schedule has it by now).
    pub(super) fn change_batch(&mut self, b: usize) {
        // (by the samples a step takes: a batch cut to a small split takes all of it)
        let step_samples = |per_replica| {
            crate::config::step_samples(
                per_replica,
                self.ranks,
                self.cfg.grad_accum,
                self.train.samples,
            )
        };
        self.lr_base = self.cfg.lr_scaling().rescale(
            self.lr_base,
            step_samples(self.per_replica),
            step_samples(b),
        );
        if self.rank == 0 {
            let applied = Applied::BatchSize {
                from: self.per_replica,
                to: b,
                lr: self.lr_now(),
            };
            let _ = self.events.send(Event::Control {
                step: self.step,
                applied,
            });
        }
        self.per_replica = b;
        // rebalancing starts over at the new size, its speeds measured afresh
        self.split = None;
        (
            self.rebalance_speeds,
            self.rebalance_work,
            self.rebalance_samples,
            self.rebalance_since,
        ) = (None, std::time::Duration::ZERO, 0, self.step);
        self.loader.restart(self.cursor, self.sharding());
    }

    /// Meets the other ranks until rank 0 decides something other than "still paused" (a
    /// checkpoint while paused is something).
    pub(super) fn boundary(&mut self) -> Result<Decision, EngineError> {
        let multi = self.local.len() < self.ranks;
        // (one process's ranks report to its frontend themselves)
        let mine = if multi { self.told() } else { Vec::new() };
        loop {
            let (events, step_now) = (&self.events, self.step);
            let mut heard = |h: Heard| {
                let _ = events.send(match h {
                    Heard::Paused(paused) => Event::Control {
                        step: step_now,
                        applied: match paused {
                            true => Applied::Paused,
                            false => Applied::Resumed,
                        },
                    },
                    Heard::Asked(control, by) => Event::Asked {
                        step: step_now,
                        control,
                        by,
                    },
                });
            };
            let report = multi.then_some((&mine[..], &mut self.reports));
            let d = agree(
                self.coll.as_mut(),
                self.decider.as_mut(),
                &mut heard,
                report,
            )?;
            if multi && self.rank == 0 {
                self.forward_remote_steps();
            }
            if !d.hold || d.checkpoint {
                return Ok(d);
            }
            // still paused: rank 0 waits for a control up to `HOLD` before the ranks meet
            // again; the others wait most of it asleep, not in an exchange (MPI's polls a core)
            if multi && self.decider.is_none() {
                std::thread::sleep(HOLD * 9 / 10);
            }
        }
    }

    /// After the last step, which no boundary follows: every rank's last step reaches process 0
    /// (so a run over several processes records its last step as one process does).
    pub(super) fn last_reports(&mut self) -> Result<(), EngineError> {
        if self.local.len() == self.ranks {
            return Ok(());
        }
        // (as many rounds on every rank: one tells every step left, the second whatever a
        // late-reporting replica added meanwhile)
        for _ in 0..2 {
            let mine = self.told();
            let mut all = vec![0u64; mine.len() * self.ranks];
            self.coll.all_gather_u64(&mine, &mut all)?;
            self.reports = all;
            if self.rank == 0 {
                self.forward_remote_steps();
            }
        }
        self.other_processes_skipped()
    }

    /// The picture files each other process could not decode during the run, counted into
    /// process 0's records (its log named them; process 0's records had none of them).
    fn other_processes_skipped(&mut self) -> Result<(), EngineError> {
        // (every process alike: their data agree)
        if self.picture_sets.is_empty() {
            return Ok(());
        }
        let mine = match self.rank == self.local.start {
            true => self
                .picture_sets
                .iter()
                .map(|s| s.failures())
                .sum::<usize>(),
            false => 0,
        };
        let mut all = vec![0u64; self.ranks];
        self.coll.all_gather_u64(&[mine as u64], &mut all)?;
        if self.rank != 0 {
            return Ok(());
        }
        for (first, &n) in all
            .iter()
            .enumerate()
            .filter(|&(r, &n)| n > 0 && !self.local.contains(&r))
        {
            let message = format!(
                "the process of rank {first} could not decode {} of its machine's picture files during the run; another picture of the same class stood in for each where its class had one (that process's log names them)",
                n
            );
            let step = self.step;
            let _ = self.events.send(Event::Warning { step, message });
        }
        Ok(())
    }

    /// Steps a rank tells at one boundary: those since the last (one, or two where its
    /// replica reports late; local SGD's whole interval between averages, its newest
    /// `MOST_TOLD`). Every rank tells as many words, zeros for none.
    pub(super) fn report_slots(&self) -> usize {
        match self.cfg.strategy {
            Strategy::LocalSgd { every, .. } => (every as usize).min(MOST_TOLD) + UNSENT,
            _ => UNSENT,
        }
    }

    /// This rank's steps reported and not yet told, oldest first, as words (`report_slots` of
    /// them, zeros after the last).
    fn told(&mut self) -> Vec<u64> {
        let slots = self.report_slots();
        let mut words = vec![0u64; slots * StepStats::WORDS];
        let unsent = std::iter::from_fn(|| self.unsent.pop_front());
        for (slot, s) in words.chunks_mut(StepStats::WORDS).zip(unsent) {
            slot.copy_from_slice(&s.to_words());
        }
        words
    }

    /// Process 0's first rank passes the other processes' steps on to the frontend, once each.
    fn forward_remote_steps(&mut self) {
        self.forwarded.resize(self.ranks, 0);
        let per_rank = self.reports.len() / self.ranks.max(1);
        for r in (0..self.ranks).filter(|r| !self.local.contains(r)) {
            let told = self.reports[r * per_rank..][..per_rank].chunks(StepStats::WORDS);
            for s in told.filter_map(StepStats::from_words) {
                if s.step <= self.forwarded[r] || s.rank != r {
                    continue;
                }
                self.forwarded[r] = s.step;
                self.beats.reached(r, s.step + 1, Phase::Data);
                let _ = self.stats.try_send(s);
            }
        }
    }

    /// Where no boundary that takes controls comes before the run's end (the last step, or
    /// local SGD's last average, is next), no control is asked from now on: it would go
    /// unanswered (during the last steps, the last validation and checkpoint).
    pub(super) fn finishing_at_the_last_boundary(&self) {
        let Some(decider) = self.decider.as_ref() else {
            return;
        };
        let ends =
            self.sharding()
                .ends_at(self.step, self.cursor, self.train.samples, self.cfg.budget);
        // (the boundary before step s + 1 is at step s: those before the last step)
        let more = (self.step + 1..ends.run).any(|s| self.strategy.syncs_after(s));
        if !more {
            decider.finishing();
        }
    }
}
