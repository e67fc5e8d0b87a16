//! Step samples in the run's order beside its events. Frontends take the samples waiting
//! before they write an event, so that the steps before it come first in the log and the
//! metrics file; a frontend that gets to an event late would otherwise also write the steps
//! after it first. Samples later than the event are held for the next take, by step: a take
//! costs what it takes, not what it holds (a watch behind a fast run, with an event every few
//! steps, would otherwise go over every sample held at each, and never catch up).

use std::collections::BTreeMap;

use crossbeam_channel::{Receiver, TryRecvError};

use crate::engine::events::StepStats;

pub struct Steps {
    rx: Receiver<StepStats>,
    /// Samples fetched and not yet taken, by step (each step's in the order they came).
    held: BTreeMap<u64, Vec<StepStats>>,
    open: bool,
}

impl Steps {
    pub fn new(rx: Receiver<StepStats>) -> Steps {
        Steps {
            rx,
            held: BTreeMap::new(),
            open: true,
        }
    }

    /// Every sample waiting, in step order, up to step `until` where given (an event's step);
    /// later ones are kept for the next take.
    pub fn take(&mut self, until: Option<u64>) -> Vec<StepStats> {
        self.fetch();
        let later = match until.and_then(|u| u.checked_add(1)) {
            Some(after) => self.held.split_off(&after),
            None => BTreeMap::new(),
        };
        flat(std::mem::replace(&mut self.held, later))
    }

    /// The samples waiting now, held for [`Steps::take_held`] (the events a rank sent before
    /// them are waiting by then too).
    pub fn fetch(&mut self) {
        for _ in 0..self.waiting() {
            match self.rx.try_recv() {
                Ok(s) => self.held.entry(s.step).or_default().push(s),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => self.open = false,
            }
        }
    }

    /// How many samples to take from the channel: those waiting now (the ranks may send
    /// faster than they are taken), or one where it may have closed (which says so).
    fn waiting(&self) -> usize {
        match self.open {
            true => self.rx.len().max(1),
            false => 0,
        }
    }

    /// The samples held (fetched, or kept by a take), none from the channel.
    pub fn take_held(&mut self) -> Vec<StepStats> {
        flat(std::mem::take(&mut self.held))
    }

    /// Every sample still to come, once the workers are ending (blocks until they have).
    pub fn rest(&mut self) -> Vec<StepStats> {
        self.open = false;
        let held = flat(std::mem::take(&mut self.held));
        held.into_iter().chain(self.rx.iter()).collect()
    }
}

/// Samples held by step, in step order.
fn flat(held: BTreeMap<u64, Vec<StepStats>>) -> Vec<StepStats> {
    held.into_values().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(step: u64) -> StepStats {
        StepStats {
            rank: 0,
            step,
            epoch: 1,
            samples: 1,
            global_samples: 1,
            per_replica: 1,
            loss: 0.0,
            accuracy: 0.0,
            grad_norm: 1.0,
            lr: 0.0,
            data_wait: Default::default(),
            loader_busy: None,
            compute: Default::default(),
            compute_cpu: None,
            device_timed: false,
            comm: Default::default(),
            sync_wait: Default::default(),
            transfer: Default::default(),
            optimizer: Default::default(),
            step_time: Default::default(),
            at: Default::default(),
            after_pause: false,
            paused: false,
            progress: 0.0,
            ends_at: None,
        }
    }

    #[test]
    fn steps_after_an_event_wait_for_the_next_take_in_order() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut steps = Steps::new(rx);
        for s in [21, 22, 23, 24, 25] {
            tx.send(sample(s)).unwrap();
        }
        let step = |v: Vec<StepStats>| v.iter().map(|s| s.step).collect::<Vec<_>>();
        // an epoch ended after step 23: 24 and 25 are written after it
        assert_eq!(step(steps.take(Some(23))), [21, 22, 23]);
        tx.send(sample(26)).unwrap();
        assert_eq!(step(steps.take(None)), [24, 25, 26]);
        tx.send(sample(27)).unwrap();
        assert_eq!(step(steps.take(Some(26))), Vec::<u64>::new());
        assert!(steps.open);
        drop(tx);
        assert_eq!(step(steps.take(None)), [27]);
        assert!(steps.rest().is_empty());
    }

    #[test]
    fn samples_fetched_are_taken_held_and_later_ones_wait() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut steps = Steps::new(rx);
        let step = |v: Vec<StepStats>| v.iter().map(|s| s.step).collect::<Vec<_>>();
        tx.send(sample(1)).unwrap();
        tx.send(sample(2)).unwrap();
        steps.fetch();
        // (sent after the fetch: an event sent before it may not have been taken yet)
        tx.send(sample(3)).unwrap();
        assert_eq!(step(steps.take_held()), [1, 2]);
        assert_eq!(step(steps.take(None)), [3]);
    }

    #[test]
    fn samples_come_in_step_order_up_to_each_event_however_many_are_held() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut steps = Steps::new(rx);
        // ranks' samples come interleaved, a few steps apart
        for s in [2, 1, 3, 2, 4, 3] {
            tx.send(sample(s)).unwrap();
        }
        let step = |v: Vec<StepStats>| v.iter().map(|s| s.step).collect::<Vec<_>>();
        assert_eq!(step(steps.take(Some(2))), [1, 2, 2]);
        // a watch far behind: many samples held, then an event every step taken in turn
        // (each take splits the held steps rather than passing over them all)
        for s in 5..100_000 {
            tx.send(sample(s)).unwrap();
        }
        steps.fetch();
        for until in 3..1_000 {
            let taken = steps.take(Some(until));
            assert!(
                !taken.is_empty() && taken.iter().all(|s| s.step == until),
                "{until}"
            );
        }
        let rest = steps.take_held();
        assert_eq!(rest.len(), 100_000 - 1_000);
        assert!(rest.windows(2).all(|w| w[0].step < w[1].step));
    }
}
