//! Steering a run: the `Controller` API frontends call, and the step-boundary agreement that
//! makes every rank apply a control at the same step.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

use crate::comm::{Collective, CollectiveError};

/// The largest per-replica batch a control may ask for.
pub const MAX_BATCH: usize = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    Pause,
    Resume,
    SetBatch(usize),
    Checkpoint,
    Stop { checkpoint: bool },
}

impl Control {
    /// Its `action` in a live request, its `request` in the metrics file's `asked` record.
    pub fn action(self) -> &'static str {
        match self {
            Control::Pause => "pause",
            Control::Resume => "resume",
            Control::SetBatch(_) => "batch_size",
            Control::Checkpoint => "checkpoint",
            Control::Stop { .. } => "stop",
        }
    }

    /// What was asked, as the log words it after "asked": `to stop, with a checkpoint`.
    pub fn asked_words(self) -> String {
        match self {
            Control::Pause => "to pause".into(),
            Control::Resume => "to resume".into(),
            Control::SetBatch(b) => format!("for a batch of {b} per replica"),
            Control::Checkpoint => "for a checkpoint".into(),
            Control::Stop { checkpoint: true } => "to stop, with a checkpoint".into(),
            Control::Stop { checkpoint: false } => "to stop, without a checkpoint".into(),
        }
    }
}

/// A control as it travels to rank 0: with who asked for it where the run's own log is to say
/// so (an attached client; the run's own keys and signals are said where they are pressed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ask {
    pub control: Control,
    pub by: Option<String>,
}

impl From<Control> for Ask {
    fn from(control: Control) -> Ask {
        Ask { control, by: None }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ControlError {
    #[error("batch size {0} is out of range: use 1..={MAX_BATCH} samples per replica")]
    BadBatch(usize),
    #[error("a batch of {batch} per replica would need about {need} of memory, and a run may take {usable} (90% of what was available when it started): at most {max} per replica")]
    TooLarge {
        batch: usize,
        max: usize,
        need: String,
        usable: String,
    },
    #[error("a batch of {batch} per replica does not fit on the run's GPUs (their memory, or the 32-bit indexing of their kernels): at most {max} per replica there")]
    TooLargeForDevices { batch: usize, max: usize },
    #[error("a batch of {batch} per replica is more than the training split's {samples} samples over the run's ranks: at most {max} per replica (each step then takes them all)")]
    LargerThanData {
        batch: usize,
        max: usize,
        samples: usize,
    },
    #[error("the run's GPUs are still starting (they tell how large a batch they can take once open): ask again in a moment")]
    DevicesStarting,
    #[error("{0}: use 2 or more")]
    BatchNormOfOne(String),
    #[error("the run has already ended")]
    Ended,
}

/// The largest per-replica batch the machine's memory allows (`engine::memory`), and the
/// estimate behind it: `fixed + per_sample * batch` bytes against `available`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct BatchLimit {
    pub max: usize,
    pub available: f64,
    pub fixed: f64,
    pub per_sample: f64,
}

/// The largest micro-batch every device of this process can take, as each GPU tells when it
/// has opened (CPU workers' memory is the host's, which `BatchLimit` covers).
pub(crate) struct DeviceCap {
    max: AtomicUsize,
    /// GPUs yet to tell: until none is, batch-size changes are refused as too early.
    pending: AtomicUsize,
}

impl DeviceCap {
    pub(crate) fn new(gpus: usize) -> Arc<DeviceCap> {
        Arc::new(DeviceCap {
            max: AtomicUsize::new(MAX_BATCH),
            pending: AtomicUsize::new(gpus),
        })
    }

    /// A GPU has opened and can take micro-batches of up to `rows` rows.
    pub(crate) fn tell(&self, rows: usize) {
        self.max.fetch_min(rows, Ordering::Relaxed);
        self.pending.fetch_sub(1, Ordering::Release);
    }
}

/// A cheap, cloneable handle that steers a running engine.
#[derive(Clone)]
pub struct Controller {
    tx: Sender<Ask>,
    limit: Option<BatchLimit>,
    devices: Arc<DeviceCap>,
    /// The per-replica batch that takes the whole training split each step, and the split's
    /// samples: a larger batch would only scale the learning rate for samples that are not there.
    data: Option<(usize, usize)>,
    /// Why a batch of 1 per replica is refused (a batch norm of one value per channel).
    not_one: Option<String>,
}

impl Controller {
    pub(crate) fn new(tx: Sender<Ask>, devices: Arc<DeviceCap>) -> Self {
        Controller {
            tx,
            limit: None,
            devices,
            data: None,
            not_one: None,
        }
    }

    /// A batch of 1 per replica refused, saying `why`.
    pub(crate) fn not_one(self, why: Option<String>) -> Self {
        Controller {
            not_one: why,
            ..self
        }
    }

    /// Batch-size changes past the whole training split of `samples` each step over `ranks`
    /// ranks accumulating `accum` micro-batches (`data_batch_cap`) are refused.
    pub(crate) fn within_data(self, samples: usize, ranks: usize, accum: usize) -> Self {
        Controller {
            data: Some((data_batch_cap(samples, ranks, accum), samples)),
            ..self
        }
    }

    /// Batch-size changes past what the machine's memory allows are refused.
    pub(crate) fn limited(self, limit: BatchLimit) -> Self {
        Controller {
            limit: Some(limit),
            ..self
        }
    }

    pub fn send(&self, c: Control) -> Result<(), ControlError> {
        self.ask(c.into())
    }

    /// Sends `c` for `by`, whom the run's log names as having asked for it.
    pub fn send_for(&self, c: Control, by: String) -> Result<(), ControlError> {
        self.ask(Ask {
            control: c,
            by: Some(by),
        })
    }

    fn ask(&self, ask: Ask) -> Result<(), ControlError> {
        if let Control::SetBatch(b) = ask.control {
            if b == 0 || b > MAX_BATCH {
                return Err(ControlError::BadBatch(b));
            }
            if let Some(why) = self.not_one.as_ref().filter(|_| b == 1) {
                return Err(ControlError::BatchNormOfOne(why.clone()));
            }
            if let Some(l) = self.limit.filter(|l| b > l.max) {
                let gib = |bytes: f64| format!("{:.1} GiB", bytes / (1u64 << 30) as f64);
                return Err(ControlError::TooLarge {
                    batch: b,
                    max: l.max,
                    need: gib(l.fixed + l.per_sample * b as f64),
                    usable: gib(l.available * 0.9),
                });
            }
            if let Some((max, samples)) = self.data.filter(|d| b > d.0) {
                return Err(ControlError::LargerThanData {
                    batch: b,
                    max,
                    samples,
                });
            }
            if self.devices.pending.load(Ordering::Acquire) > 0 {
                return Err(ControlError::DevicesStarting);
            }
            let max = self.devices.max.load(Ordering::Relaxed);
            if b > max {
                return Err(ControlError::TooLargeForDevices { batch: b, max });
            }
        }
        self.tx.send(ask).map_err(|_| ControlError::Ended)
    }

    pub fn pause(&self) -> Result<(), ControlError> {
        self.send(Control::Pause)
    }
    pub fn resume(&self) -> Result<(), ControlError> {
        self.send(Control::Resume)
    }
    pub fn set_batch_per_replica(&self, b: usize) -> Result<(), ControlError> {
        self.send(Control::SetBatch(b))
    }
    pub fn checkpoint(&self) -> Result<(), ControlError> {
        self.send(Control::Checkpoint)
    }
    pub fn stop(&self, checkpoint: bool) -> Result<(), ControlError> {
        self.send(Control::Stop { checkpoint })
    }
}

/// The per-replica batch at which `ranks` ranks (each accumulating `accum` micro-batches) take a
/// training split of `samples` in one step: no step can take more.
pub(crate) fn data_batch_cap(samples: usize, ranks: usize, accum: usize) -> usize {
    samples.div_ceil((ranks * accum).max(1)).max(1)
}

/// What every rank does at the next step boundary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    pub batch: Option<usize>,
    pub checkpoint: bool,
    pub stop: Option<bool>,
    /// The run was paused and resumed before this step.
    pub was_paused: bool,
    /// The run is paused: every rank meets again (a paused run's processes keep answering
    /// each other, so that none takes the pause for a lost peer); with `checkpoint`, after
    /// writing one.
    pub hold: bool,
}

impl Decision {
    fn encode(&self) -> [u64; 4] {
        [
            self.batch.map_or(0, |b| b as u64),
            self.checkpoint as u64,
            self.stop.map_or(0, |c| 1 + c as u64),
            self.was_paused as u64 | (self.hold as u64) << 1,
        ]
    }

    fn decode(w: [u64; 4]) -> Decision {
        Decision {
            batch: (w[0] != 0).then_some(w[0] as usize),
            checkpoint: w[1] != 0,
            stop: (w[2] != 0).then_some(w[2] == 2),
            was_paused: w[3] & 1 != 0,
            hold: w[3] & 2 != 0,
        }
    }
}

/// How long rank 0 waits for a control while paused before the ranks meet again.
const HOLD: std::time::Duration = std::time::Duration::from_millis(500);

/// Rank 0's side: drains the control queue at a step boundary and decides. While paused it
/// waits here up to `HOLD` at a time (the other ranks wait in the exchange), so a paused run
/// uses almost no CPU.
pub struct Decider {
    rx: Receiver<Ask>,
    paused: bool,
    /// What was asked while paused, kept until the run resumes (or stops).
    held: Decision,
}

/// What rank 0's decider tells the run as it happens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Heard {
    /// The run paused (`true`) or resumed.
    Paused(bool),
    /// A control taken, and who asked for it (where the sender named someone).
    Asked(Control, String),
}

impl Decider {
    pub fn new(rx: Receiver<Ask>) -> Self {
        Decider {
            rx,
            paused: false,
            held: Decision::default(),
        }
    }

    /// `heard` is told of each control named for someone as it is taken, and of the run
    /// pausing and resuming.
    pub fn decide(&mut self, heard: &mut dyn FnMut(Heard)) -> Decision {
        let mut d = std::mem::take(&mut self.held);
        loop {
            let next = if self.paused && d.stop.is_none() {
                match self.rx.recv_timeout(HOLD) {
                    Ok(a) => Some(a),
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                        // the ranks meet again; what was asked waits for the resume
                        self.held = d;
                        return Decision {
                            hold: true,
                            ..Decision::default()
                        };
                    }
                    // nobody can resume us
                    Err(_) => Some(Control::Stop { checkpoint: true }.into()),
                }
            } else {
                self.rx.try_recv().ok()
            };
            let Some(Ask { control: c, by }) = next else {
                break;
            };
            if let Some(by) = by {
                heard(Heard::Asked(c, by));
            }
            match c {
                Control::Pause if !self.paused => {
                    self.paused = true;
                    heard(Heard::Paused(true));
                }
                Control::Resume if self.paused => {
                    self.paused = false;
                    d.was_paused = true;
                    heard(Heard::Paused(false));
                }
                Control::SetBatch(b) => d.batch = Some(b),
                Control::Checkpoint => d.checkpoint = true,
                Control::Stop { checkpoint } => d.stop = Some(checkpoint || d.stop == Some(true)),
                Control::Pause | Control::Resume => {}
            }
            // a checkpoint asked while paused is written now: the ranks meet, write it and
            // stay paused (the rest waits for the resume)
            if self.paused && d.checkpoint && d.stop.is_none() {
                d.checkpoint = false;
                self.held = d;
                return Decision {
                    hold: true,
                    checkpoint: true,
                    ..Decision::default()
                };
            }
        }
        d
    }
}

/// Every rank calls this at every step boundary: rank 0 decides, everybody gets the same answer.
/// With `report` (a run over several processes), every rank's report words also go to every
/// rank, in rank order, into `reports`.
pub fn agree(
    coll: &mut dyn Collective,
    decider: Option<&mut Decider>,
    heard: &mut dyn FnMut(Heard),
    report: Option<(&[u64], &mut Vec<u64>)>,
) -> Result<Decision, CollectiveError> {
    let mut words = match decider {
        Some(d) => d.decide(heard).encode(),
        None => [0; 4],
    };
    let Some((mine, reports)) = report else {
        coll.broadcast_u64(&mut words, 0)?;
        return Ok(Decision::decode(words));
    };
    let width = words.len() + mine.len();
    let record: Vec<u64> = words.iter().chain(mine).copied().collect();
    let mut all = vec![0u64; width * coll.world_size()];
    coll.all_gather_u64(&record, &mut all)?;
    reports.clear();
    for r in all.chunks(width) {
        reports.extend_from_slice(&r[words.len()..]);
    }
    let decision = |r: &[u64]| Decision::decode(r[..4].try_into().expect("four words"));
    let mut d = decision(&all);
    // a stop asked in another process (a signal there) stops the run as one asked here does,
    // a pause or not
    for theirs in all.chunks(width).skip(1).filter_map(|r| decision(r).stop) {
        d.stop = Some(d.stop.unwrap_or(false) || theirs);
        d.hold = false;
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::unbounded;

    #[test]
    fn controller_rejects_bad_batches() {
        let (tx, _rx) = unbounded();
        let c = Controller::new(tx, DeviceCap::new(1));
        assert_eq!(c.set_batch_per_replica(0), Err(ControlError::BadBatch(0)));
        // before the GPU has told: too early; after: held to what it told
        assert_eq!(
            c.set_batch_per_replica(64),
            Err(ControlError::DevicesStarting)
        );
        c.devices.tell(100);
        assert!(c.set_batch_per_replica(64).is_ok());
        assert!(c.set_batch_per_replica(100).is_ok());
        assert_eq!(
            c.set_batch_per_replica(101),
            Err(ControlError::TooLargeForDevices {
                batch: 101,
                max: 100
            })
        );
        // a training split of 150 samples over 2 ranks: 75 per replica takes it all
        assert_eq!(data_batch_cap(150, 2, 1), 75);
        assert_eq!(data_batch_cap(151, 2, 1), 76);
        assert_eq!(data_batch_cap(150, 2, 4), 19);
        let c = c.within_data(150, 2, 1);
        assert!(c.set_batch_per_replica(75).is_ok());
        let e = c.set_batch_per_replica(76).unwrap_err();
        assert_eq!(
            e,
            ControlError::LargerThanData {
                batch: 76,
                max: 75,
                samples: 150
            }
        );
        assert!(e.to_string().contains("at most 75 per replica"), "{e}");
        // a model whose batch norm a batch of 1 makes of one value per channel
        assert!(c.set_batch_per_replica(1).is_ok());
        let c = c.not_one(Some("batch norm `bn.1` would ...".into()));
        let e = c.set_batch_per_replica(1).unwrap_err().to_string();
        assert_eq!(e, "batch norm `bn.1` would ...: use 2 or more");
        assert!(c.set_batch_per_replica(2).is_ok());
    }

    #[test]
    fn decision_round_trips_and_pause_blocks_until_resume() {
        let d = Decision {
            batch: Some(128),
            checkpoint: true,
            stop: Some(false),
            was_paused: true,
            hold: false,
        };
        assert_eq!(Decision::decode(d.encode()), d);
        let (tx, rx) = unbounded();
        let mut dec = Decider::new(rx);
        tx.send(Control::SetBatch(64).into()).unwrap();
        tx.send(Control::Pause.into()).unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(30));
            tx.send(Control::Resume.into()).unwrap();
        });
        let mut log = Vec::new();
        let d = dec.decide(&mut |h| log.push(h));
        t.join().unwrap();
        assert_eq!(log, vec![Heard::Paused(true), Heard::Paused(false)]);
        assert_eq!(d.batch, Some(64));
        assert!(d.was_paused);
    }

    #[test]
    fn the_decider_names_who_asked_where_the_sender_said() {
        let (tx, rx) = unbounded();
        let c = Controller::new(tx, DeviceCap::new(0));
        let mut dec = Decider::new(rx);
        c.checkpoint().unwrap();
        c.send_for(Control::Stop { checkpoint: false }, "client 7".into())
            .unwrap();
        let mut log = Vec::new();
        let d = dec.decide(&mut |h| log.push(h));
        assert_eq!((d.checkpoint, d.stop), (true, Some(false)));
        let stop = Control::Stop { checkpoint: false };
        assert_eq!(log, vec![Heard::Asked(stop, "client 7".into())]);
        // a bad batch is refused before it travels: nothing to name
        assert!(c.send_for(Control::SetBatch(0), "client 7".into()).is_err());
        dec.decide(&mut |h| log.push(h));
        assert_eq!(log.len(), 1);
    }

    #[test]
    fn controls_asked_while_paused_survive_the_ranks_meeting_in_between() {
        let (tx, rx) = unbounded();
        let mut dec = Decider::new(rx);
        tx.send(Control::Checkpoint.into()).unwrap();
        tx.send(Control::Pause.into()).unwrap();
        tx.send(Control::SetBatch(16).into()).unwrap();
        let mut log = Vec::new();
        // the checkpoint is written while paused, the ranks meeting for it
        let held = dec.decide(&mut |h| log.push(h));
        assert_eq!(
            held,
            Decision {
                hold: true,
                checkpoint: true,
                ..Decision::default()
            }
        );
        // paused longer than one hold: the ranks meet, nothing else is applied yet
        let held = dec.decide(&mut |h| log.push(h));
        assert_eq!(
            held,
            Decision {
                hold: true,
                ..Decision::default()
            }
        );
        tx.send(Control::Checkpoint.into()).unwrap();
        assert!(dec.decide(&mut |h| log.push(h)).checkpoint);
        tx.send(Control::Resume.into()).unwrap();
        let d = dec.decide(&mut |h| log.push(h));
        assert_eq!(
            (d.batch, d.checkpoint, d.was_paused, d.hold),
            (Some(16), false, true, false)
        );
        assert_eq!(log, vec![Heard::Paused(true), Heard::Paused(false)]);
    }
}
