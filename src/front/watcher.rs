//! The watch of a run in this process on a thread of its own, so that what is recorded never
//! waits on what is shown: a terminal stalled over SSH, a log piped into a pager nobody
//! scrolls, a Ctrl-S, would otherwise hold the frontend's thread in a write while the ranks'
//! step samples overflowed their queue, and the metrics file, the live socket and the
//! summary's totals would lose those steps. The frontend takes what the watch saw in batches;
//! where it falls behind, the step rows and telemetry samples it has not taken are thinned
//! (the newest before each other record kept, so an event still follows its step's figures)
//! and it is told how many it did not get.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, tick, Receiver, Sender, TrySendError};

use crate::engine::events::Event;
use crate::engine::heartbeat::Heartbeats;
use crate::engine::Engine;
use crate::front::watch::{Seen, Watch};
use crate::observe::metrics::Record;

/// How often the watch collects step samples: rather than as they come, so that a worker's
/// `try_send` never has to wake its thread (that wake-up costs steps ~5%).
const STEP_POLL: Duration = Duration::from_millis(20);

/// Batches handed over but not yet taken.
const BATCHES: usize = 4;

/// Records waiting for a frontend that is behind before its step rows are thinned.
const BACKLOG: usize = 16_384;

/// The watch's thread and what it saw.
pub struct Watcher {
    seen: Receiver<Vec<Seen>>,
    ending: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    /// Watches `engine`'s run with `watch` (started on it, its first records taken), sampling
    /// the devices every `sample_interval`, until every worker has ended and the run's end is
    /// recorded.
    pub fn start(engine: &Engine, watch: Watch, sample_interval: Duration) -> Watcher {
        let (out, seen) = bounded(BATCHES);
        let ending = Arc::new(AtomicBool::new(false));
        let thread = Thread {
            watch,
            events: engine.events().clone(),
            beats: engine.heartbeats(),
            t0: engine.started(),
            sample_interval,
            ending: ending.clone(),
            outbox: Outbox::default(),
        };
        let thread = std::thread::Builder::new()
            .name("watch".into())
            .spawn(move || thread.run(out))
            .expect("spawning the watch's thread");
        Watcher {
            seen,
            ending,
            thread: Some(thread),
        }
    }

    /// What the watch saw, a batch at a time, oldest first; closes once the run's end is
    /// recorded (the last batch holds it).
    pub fn seen(&self) -> &Receiver<Vec<Seen>> {
        &self.seen
    }

    /// Whether the run's end was heard (its ranks are ending: what is left is their teardown).
    pub fn ending(&self) -> bool {
        self.ending.load(Ordering::Acquire)
    }

    /// Everything still to come, once the workers are ending: waits for the watch to record
    /// the run's end. A watch that failed fails the frontend's thread in turn, with its words
    /// (a frontend waiting on a watch that is gone would wait silently for the run's end).
    pub fn rest(mut self) -> Vec<Seen> {
        let rest = self.seen.iter().flatten().collect();
        if let Some(Err(failed)) = self.thread.take().map(JoinHandle::join) {
            let why = (failed.downcast_ref::<&str>().map(|s| s.to_string()))
                .or_else(|| failed.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            panic!("the run's watch (its records, its telemetry) failed: {why}");
        }
        rest
    }
}

/// What the watch's thread holds.
struct Thread {
    watch: Watch,
    events: Receiver<Event>,
    beats: Heartbeats,
    t0: Instant,
    sample_interval: Duration,
    ending: Arc<AtomicBool>,
    outbox: Outbox,
}

impl Thread {
    fn run(mut self, out: Sender<Vec<Seen>>) {
        let poll = tick(STEP_POLL);
        let sampler = tick(self.sample_interval);
        loop {
            select! {
                recv(poll) -> _ => {
                    self.watch.collect(&self.events, self.t0.elapsed());
                    self.watch.beats(self.t0.elapsed(), &self.beats.read());
                }
                recv(sampler) -> _ => self.watch.sample(self.t0.elapsed()),
                recv(self.events) -> e => match e {
                    Ok(ev) => self.watch.event(ev, self.t0.elapsed()),
                    Err(_) => break,
                },
            }
            if self.watch.ending() {
                self.ending.store(true, Ordering::Release);
            }
            self.outbox.add(self.watch.take());
            self.outbox.offer(&out);
        }
        // every worker has ended: the last samples, the end
        self.watch.end(self.t0.elapsed());
        self.ending.store(true, Ordering::Release);
        self.outbox.add(self.watch.take());
        self.outbox.hand_over(&out);
    }
}

/// What the frontend has not taken yet, and what was thinned out of it since it last took.
#[derive(Default)]
struct Outbox {
    waiting: VecDeque<Seen>,
    left_out: LeftOut,
}

#[derive(Default, Debug, PartialEq)]
struct LeftOut {
    rows: usize,
    samples: usize,
    /// Epochs' ends and validations: only where even those piled up past the backlog.
    others: usize,
}

impl LeftOut {
    fn any(&self) -> bool {
        *self != LeftOut::default()
    }

    fn note(&self) -> String {
        let mut what = Vec::new();
        let mut count = |n: usize, one: &str, many: &str| match n {
            0 => {}
            1 => what.push(format!("1 {one}")),
            n => what.push(format!("{n} {many}")),
        };
        count(self.rows, "step row", "step rows");
        count(self.samples, "telemetry sample", "telemetry samples");
        count(
            self.others,
            "epoch's end or validation",
            "epochs' ends and validations",
        );
        format!(
            "{} not shown: this display fell behind the run (its output was not being read, a stalled terminal or pipe, or it was short of CPU) and skipped ahead; the metrics file and the live socket were not held up and miss nothing of theirs",
            what.join(", ")
        )
    }
}

impl Outbox {
    fn add(&mut self, seen: Vec<Seen>) {
        self.waiting.extend(seen);
        if self.waiting.len() > BACKLOG {
            self.thin();
        }
    }

    /// Leaves out every step row and telemetry sample that a newer one of its kind
    /// follows before the next record of another kind (so each event still follows its step's
    /// totals); where the rest is still past the backlog, old validations
    /// (`thin_validations`).
    fn thin(&mut self) {
        let mut kept = VecDeque::with_capacity(self.waiting.len() / 2);
        let (mut row, mut sample) = (false, false);
        for s in std::mem::take(&mut self.waiting).into_iter().rev() {
            let newer = match &s {
                Seen::Step { .. } => std::mem::replace(&mut row, true),
                Seen::Record(Record::Telemetry { .. }) => std::mem::replace(&mut sample, true),
                _ => {
                    (row, sample) = (false, false);
                    false
                }
            };
            if !newer {
                kept.push_front(s);
                continue;
            }
            match s {
                Seen::Step { .. } => self.left_out.rows += 1,
                Seen::Record(Record::Telemetry { .. }) => self.left_out.samples += 1,
                _ => {}
            }
        }
        if kept.len() > BACKLOG {
            self.thin_validations(&mut kept);
        }
        self.waiting = kept;
    }

    /// Leaves out the oldest epochs' ends and validations where they alone pile up (a
    /// validation every step), down to half the backlog, but the best of them: what a frontend
    /// sums up from events (the best accuracy; every control, checkpoint and warning) stays
    /// whole.
    fn thin_validations(&mut self, kept: &mut VecDeque<Seen>) {
        let accuracy = |s: &Seen| match s {
            // (not one the files wrote late: the log says those)
            Seen::Record(Record::Event { event, .. }) | Seen::Unlogged { event, .. } => match event
            {
                Event::EpochDone { val_accuracy, .. } => Some(val_accuracy.unwrap_or(f32::MIN)),
                Event::Validated { val_accuracy, .. } => Some(*val_accuracy),
                _ => None,
            },
            _ => None,
        };
        let mut over = kept.len() - BACKLOG / 2;
        let oldest: Vec<usize> = (0..kept.len())
            .filter(|&i| accuracy(&kept[i]).is_some())
            .take(over)
            .collect();
        let best = (oldest.iter().copied()).max_by(|&a, &b| {
            accuracy(&kept[a])
                .partial_cmp(&accuracy(&kept[b]))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        let mut i = 0;
        kept.retain(|_| {
            i += 1;
            let drop = over > 0 && oldest.binary_search(&(i - 1)).is_ok() && Some(i - 1) != best;
            over -= usize::from(drop);
            self.left_out.others += usize::from(drop);
            !drop
        });
    }

    /// Hands what is waiting to the frontend where it has room; once it takes again after
    /// records were left out, says how many first.
    fn offer(&mut self, out: &Sender<Vec<Seen>>) {
        if self.waiting.is_empty() {
            return;
        }
        let left_out = std::mem::take(&mut self.left_out);
        let said = left_out.any().then(|| Seen::Note(left_out.note()));
        let batch = said.into_iter().chain(self.waiting.drain(..)).collect();
        match out.try_send(batch) {
            Ok(()) => {}
            Err(TrySendError::Full(batch)) => {
                let said = usize::from(left_out.any());
                self.waiting = batch.into_iter().skip(said).collect();
                self.left_out = left_out;
            }
            // no frontend any more (it left at once): the records are all that matters
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    /// Everything left, once the run has ended: the frontend takes it all, however late.
    fn hand_over(self, out: &Sender<Vec<Seen>>) {
        let said = self
            .left_out
            .any()
            .then(|| Seen::Note(self.left_out.note()));
        let _ = out.send(said.into_iter().chain(self.waiting).collect());
    }
}

#[cfg(test)]
mod tests;
