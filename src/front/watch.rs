//! What watches a run in this process, for either frontend: its step samples put together into
//! rows (the step monitor), the straggler detector, the devices' telemetry and the records (the
//! metrics files, the live socket), in the run's order, on a thread of its own (`watcher`). The
//! frontend is handed every row (`Seen::Step`, marked where the files keep it: the log prints
//! those), event, warning and sample as the record `view` reads from a file and `attach` from a
//! socket: the log shows what the file says, the screen that and the rows and epochs the file
//! thins (`Seen::Unlogged`; what the file writes late, `Seen::Late`, is for the log).

use std::collections::VecDeque;
use std::time::Duration;

use crossbeam_channel::Receiver;

use crate::engine::events::{Applied, Event, StepStats};
use crate::engine::heartbeat::Beat;
use crate::engine::RunInfo;
use crate::front::steps::Steps;
use crate::observe::metrics::Record;
use crate::observe::monitor::{Monitor, StepRow};
use crate::observe::sample::DeviceSample;
use crate::observe::straggler::{Detector, Warning};
use crate::observe::telemetry::{process_memory, PeerLoad, Telemetry};
use crate::observe::Recorder;

/// What the watch saw, in the order it was recorded.
#[derive(Debug)]
pub enum Seen {
    /// A step's row, with the time left to the end of the run's budget at the pace of the
    /// newest rows, and whether the log keeps it (`--log-every`: the metrics files do).
    Step {
        row: StepRow,
        samples_per_s: Option<f64>,
        eta: Option<Duration>,
        logged: bool,
    },
    /// Any other record.
    Record(Record),
    /// An epoch's end or a validation (at `t`) the files leave out for now (`--log-every auto`
    /// thins them where they come faster than ten a second): the screen takes it, the log does
    /// not.
    Unlogged { t: Duration, event: Event },
    /// One of those the files write late (a best that came too soon after the last kept; the
    /// newest of its kind before a checkpoint, the run's last step, its failure or its end):
    /// the log says it, the screen has it.
    Late { t: Duration, event: Event },
    /// Recording went wrong (a metrics file's disk is full, a sink failed): for the user.
    Note(String),
}

pub struct Watch {
    steps: Steps,
    telemetry: Telemetry,
    monitor: Monitor,
    detector: Detector,
    recorder: Recorder,
    /// The run's end, recorded after its final step samples and telemetry.
    end: Option<(Event, Duration)>,
    seen: Vec<Seen>,
    lost: Lost,
    /// Events that follow a step whose row is not yet put together (another process's samples
    /// of it are on their way), and every event after them, in order: the log and the file say
    /// a step's line before the replicas' check, checkpoint, epoch's end or validation that
    /// followed it. Recorded once its row is, before a later one (its own never comes: a
    /// sample dropped), or `HELD_AT_MOST` on. (Other events, warnings and telemetry are not
    /// held where nothing waits.)
    early: VecDeque<(Event, Duration)>,
    newest_row: Option<u64>,
}

/// The longest an event waits for its step's row.
const HELD_AT_MOST: Duration = Duration::from_secs(2);

/// Whether `ev` says what followed its step (and waits for the step's row).
fn after_step(ev: &Event) -> bool {
    matches!(
        ev,
        Event::EpochDone { .. }
            | Event::Validated { .. }
            | Event::InSync { .. }
            | Event::Checkpoint { .. }
    )
}

/// Steps no row was put together for: a rank's sample of them was dropped (its queue was full:
/// the ranks stepped faster than this process recorded).
#[derive(Default)]
struct Lost {
    /// Not counted: under local SGD across processes the others' steps between two averages
    /// are told in part, by design.
    off: bool,
    newest_row: Option<u64>,
    steps: u64,
    /// As of the note said.
    said: Option<u64>,
}

impl Lost {
    /// Row `step` put together: a note the first time steps before it were lost.
    fn row(&mut self, step: u64) -> Option<String> {
        if self.off {
            return None;
        }
        let newest = self
            .newest_row
            .replace(step.max(self.newest_row.unwrap_or(0)));
        let gap = newest.map_or(0, |n| step.saturating_sub(n + 1));
        if gap == 0 {
            return None;
        }
        self.steps += gap;
        if self.said.is_some() {
            return None;
        }
        self.said = Some(self.steps);
        Some(format!(
            "steps {} to {} have no row: the ranks stepped faster than this process could record them and their step samples were dropped (its recording was short of CPU, or wrote a row every step for --log-every 1); the metrics file, the totals and the summary leave such steps out (their count comes at the end)",
            step - gap,
            step - 1
        ))
    }

    /// At the end, where more were lost since the note.
    fn total(&self) -> Option<String> {
        (self.said.is_some_and(|s| s < self.steps)).then(|| {
            format!(
                "{} steps in all have no row (their step samples were dropped: see above)",
                self.steps
            )
        })
    }
}

impl Watch {
    /// Starts watching the run `info` whose ranks send their step samples to `steps`; records
    /// the `run` record.
    pub fn new(
        info: &RunInfo,
        steps: Receiver<StepStats>,
        mut recorder: Recorder,
        mut telemetry: Telemetry,
    ) -> Watch {
        telemetry.with_siblings(info.peers_here.iter().map(|p| p.pid).collect());
        let notes = recorder.run_start(info);
        let mut watch = Watch {
            steps: Steps::new(steps),
            telemetry,
            monitor: Monitor::new(info.ranks()),
            detector: Detector::for_run(info),
            recorder,
            end: None,
            seen: Vec::new(),
            early: VecDeque::new(),
            // (a resumed run's events at its first step need no row)
            newest_row: Some(info.start_step),
            lost: Lost {
                off: !info.hosts.is_empty()
                    && matches!(
                        info.strategy,
                        crate::engine::strategy::Strategy::LocalSgd { .. }
                    ),
                ..Lost::default()
            },
        };
        watch.note(notes);
        watch
    }

    /// What was seen since the last call, oldest first.
    pub fn take(&mut self) -> Vec<Seen> {
        std::mem::take(&mut self.seen)
    }

    fn note(&mut self, notes: Vec<String>) {
        self.seen.extend(notes.into_iter().map(Seen::Note));
    }

    /// One rank's step sample; the step's row once every rank has sent theirs. (A run's samples
    /// come through the channel, taken in order beside its events by `collect` and `event`; this
    /// is for samples made up: the demo's, the tests'.)
    pub fn step(&mut self, s: StepStats) {
        self.telemetry.on_step(&s);
        let Some(row) = self.monitor.on_step(s) else {
            return;
        };
        // (the events of steps before it: their rows came, or never will)
        self.newest_row = self.newest_row.max(Some(row.step.saturating_sub(1)));
        self.release_early(None);
        let rate = self.monitor.samples_per_sec();
        let (logged, mut notes) = self.recorder.step(&row, rate);
        self.late();
        notes.extend(self.lost.row(row.step));
        let warnings = self.detector.on_row(&row);
        let at = row.at;
        self.newest_row = self.newest_row.max(Some(row.step));
        self.seen.push(Seen::Step {
            row,
            samples_per_s: rate,
            eta: self.monitor.eta(),
            logged,
        });
        self.note(notes);
        for w in warnings {
            self.warning(&w, at);
        }
        self.release_early(None);
    }

    /// Records the events held whose step's row is put together, and those after them (all
    /// that came by `t` less `HELD_AT_MOST` where `t` is given, all where `Some(MAX)`).
    fn release_early(&mut self, t: Option<Duration>) {
        while let Some((ev, at)) = self.early.front() {
            let row_done = !after_step(ev) || ev.step() <= self.newest_row;
            let waited = t.is_some_and(|t| t.saturating_sub(*at) >= HELD_AT_MOST);
            if !(row_done || waited) {
                break;
            }
            let (ev, at) = self.early.pop_front().expect("a front");
            self.record(ev, at);
        }
    }

    /// Every step sample and event waiting, in the run's order: the samples waiting are
    /// fetched first, then each event waiting is taken after the samples up to its step, then
    /// the samples fetched after it. An event a rank sent before a sample is waiting once the
    /// sample is, so no step comes before an event of an earlier step (taken the other way
    /// round, an epoch's end sent between the two looks would come after the next step).
    /// Only what is waiting when it looks: where the ranks send faster than it records, a look
    /// that took what came meanwhile too would never end (nor would `now` stay true). Samples
    /// are collected (every 20 ms: `front::watcher`) rather than as they come: a worker's
    /// `try_send` then never has to wake the watch's thread, which keeps its cost off the steps.
    pub fn collect(&mut self, events: &Receiver<Event>, now: Duration) {
        self.steps.fetch();
        for ev in events.try_iter().take(events.len()) {
            self.event(ev, now);
        }
        for s in self.steps.take_held() {
            self.step(s);
        }
        self.release_early(Some(now));
        self.recorder.catch_up();
    }

    fn steps_to(&mut self, until: Option<u64>) {
        for s in self.steps.take(until) {
            self.step(s);
        }
        self.recorder.catch_up();
    }

    /// An engine event at `t` since the start, after the step samples up to its step (see
    /// `front::steps`); the run's end is kept back for `end`.
    pub fn event(&mut self, ev: Event, t: Duration) {
        self.steps_to(ev.step());
        if matches!(ev, Event::Finished { .. }) {
            self.end = Some((ev, t));
            return;
        }
        if let Event::Control { applied, .. } = &ev {
            match applied {
                Applied::Paused => self.detector.set_paused(true, t),
                Applied::Resumed => self.detector.set_paused(false, t),
                _ => {}
            }
        }
        if !self.early.is_empty() || (after_step(&ev) && ev.step() > self.newest_row) {
            self.early.push_back((ev, t));
            return;
        }
        self.record(ev, t);
    }

    /// An event into the records, and handed on.
    fn record(&mut self, ev: Event, t: Duration) {
        let (logged, notes) = self.recorder.event(&ev, t);
        self.late();
        self.seen.push(match logged {
            true => Seen::Record(Record::Event { t, event: ev }),
            false => Seen::Unlogged { t, event: ev },
        });
        self.note(notes);
    }

    /// The records the files wrote late, before the one that made them write them.
    fn late(&mut self) {
        let late = self.recorder.take_late().into_iter();
        (self.seen).extend(late.map(|(event, t)| Seen::Late { t, event }));
    }

    fn warning(&mut self, w: &Warning, t: Duration) {
        let notes = self.recorder.warning(w, t);
        self.late();
        self.seen.push(Seen::Record(Record::warning(w, t)));
        self.note(notes);
    }

    /// Whether the run's end was heard (its ranks are ending: what is left is their teardown).
    pub fn ending(&self) -> bool {
        self.end.is_some()
    }

    /// The devices' telemetry at `t` since the start (covering the time since the one before);
    /// none once the end was heard (the last, at the end's time, comes before it: `end`).
    pub fn sample(&mut self, t: Duration) {
        self.sample_with(t, process_memory());
    }

    /// [`sample`](Self::sample) with the process's memory given (`None`: not measured).
    fn sample_with(&mut self, t: Duration, memory: Option<(u64, u64)>) {
        self.release_early(Some(t));
        if self.ending() {
            return;
        }
        let devices = self.telemetry.sample(t);
        self.sampled(t, devices, memory);
        // (other work taking the cores, here and on the other processes' machines: said
        // where the detector finds it held; another machine's taken back where its loads stop
        // coming)
        let mut said: Vec<Warning> = Vec::new();
        if let Some(load) = self.telemetry.load() {
            said.extend(self.detector.on_load(None, &load));
        }
        for (rank, heard) in self.telemetry.peer_loads() {
            said.extend(match heard {
                PeerLoad::Load(load) => self.detector.on_load(Some(rank), &load),
                PeerLoad::Unheard => self.detector.on_unheard(rank),
            });
        }
        for w in said {
            self.warning(&w, t);
        }
    }

    /// Telemetry taken elsewhere (the demo's).
    pub fn sampled(
        &mut self,
        t: Duration,
        devices: Vec<DeviceSample>,
        process_memory: Option<(u64, u64)>,
    ) {
        self.detector.on_telemetry(&devices);
        let notes = self.recorder.telemetry(t, &devices, process_memory);
        self.late();
        self.seen.push(Seen::Record(Record::Telemetry {
            t,
            devices,
            process_memory,
        }));
        self.note(notes);
    }

    /// Where each rank is within its step at `t`: a stall is said when no step completes for
    /// the `--stall-timeout` (not while paused, nor once the end was heard).
    pub fn beats(&mut self, t: Duration, beats: &[Beat]) {
        if self.ending() {
            return;
        }
        if let Some(w) = self.detector.tick(t, beats) {
            self.warning(&w, t);
        }
    }

    /// The ranks are ending (`now` since the start): their last step samples (this waits for
    /// every rank to have sent its last), a last telemetry sample covering the time since the
    /// one before, the end, and everything written out.
    pub fn end(&mut self, now: Duration) {
        for s in self.steps.rest() {
            self.step(s);
        }
        self.release_early(Some(Duration::MAX));
        let end = self.end.take();
        if let Some(w) = self.detector.finish() {
            self.warning(&w, end.as_ref().map_or(now, |e| e.1));
        }
        self.recorder.catch_up();
        // (stamped no later than the end, which follows it in the file: a reader's wall time
        // is the end's; the process's memory left out, the ranks' given back by now: a
        // finished run's last figure was what was left after the training, not what it took)
        self.sample_with(end.as_ref().map_or(now, |e| e.1), None);
        if let Some((ev, t)) = end {
            self.record(ev, t);
        }
        let mut notes = self.recorder.flush();
        self.late();
        notes.extend(self.lost.total());
        self.note(notes);
    }
}

#[cfg(test)]
mod tests;
