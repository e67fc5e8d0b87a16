//! Steering a run: the `Controller` API frontends call (here), and the step-boundary agreement
//! that makes every rank apply a control at the same step (`decider`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_channel::Sender;

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
    #[error("batch size {0} is out of range: use 1 to {MAX_BATCH} samples per replica")]
    BadBatch(usize),
    #[error("a batch of {batch} per replica would need about {need} of memory, and a run may take {usable} (90% of what was available when it started): at most {max} per replica")]
    TooLarge {
        batch: usize,
        max: usize,
        need: String,
        usable: String,
    },
    #[error("a batch of {batch} per replica would not fit in the memory of another process of the run (90% of what was available there when it started): at most {max} per replica")]
    TooLargeElsewhere { batch: usize, max: usize },
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
    #[error("the run has trained its last step and is finishing (its last validation and checkpoint): nothing more is taken")]
    Finishing,
    #[error("the run is stopping: nothing but the stop is taken now")]
    Stopping,
    #[error("the run is not paused (nor asked to pause)")]
    NotPaused,
    #[error("the run is paused already (or asked to pause)")]
    Paused,
    #[error("the batch is {0} per replica already (or asked to be)")]
    SameBatch(usize),
    #[error("a checkpoint is asked for already: it is written at the next step boundary")]
    CheckpointAsked,
}

/// What the run was asked that later asks depend on, shared by every controller of a run: a
/// request that would change nothing is refused (and not recorded), not taken.
#[derive(Default)]
struct AskedSoFar {
    /// The last pause or resume taken was a pause.
    paused: AtomicBool,
    /// A stop was taken.
    stopping: AtomicBool,
    /// The per-replica batch the run trains with, or the last one asked for (0: not known).
    batch: AtomicUsize,
    /// The run's decider is gone: the run has ended.
    ended: AtomicBool,
    /// The run has trained its last step: no boundary is to come, where a control would be
    /// taken.
    finishing: AtomicBool,
    /// A checkpoint is asked for and not yet taken at a boundary.
    checkpoint: AtomicBool,
}

/// Held by the run's decider (`Decider::while_open`): once it is dropped, the run has ended and
/// every ask is refused as such (not as one that would change nothing).
pub(crate) struct Open(Arc<AskedSoFar>);

impl Open {
    /// The run has trained its last step: every ask is refused as such from now on.
    pub(crate) fn finishing(&self) {
        self.0.finishing.store(true, Ordering::Release);
    }

    /// A checkpoint asked for is taken (written at this boundary): another may be asked.
    pub(crate) fn checkpoint_taken(&self) {
        self.0.checkpoint.store(false, Ordering::Release);
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.ended.store(true, Ordering::Release);
    }
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

/// The largest micro-batch every device of the run can take, as each GPU of this process tells
/// when it has opened, and the other processes' GPUs once every rank has told every other
/// (CPU workers' memory is the host's, which `BatchLimit` covers).
pub(crate) struct DeviceCap {
    max: AtomicUsize,
    /// GPUs yet to tell (and the other processes' GPUs, as one): until none is, batch-size
    /// changes are refused as too early.
    pending: AtomicUsize,
    /// The run's other processes have GPUs, not yet told of.
    elsewhere: AtomicBool,
}

impl DeviceCap {
    /// For `gpus` GPUs of this process, and other processes' GPUs where `elsewhere`.
    pub(crate) fn new(gpus: usize, elsewhere: bool) -> Arc<DeviceCap> {
        Arc::new(DeviceCap {
            max: AtomicUsize::new(MAX_BATCH),
            pending: AtomicUsize::new(gpus + elsewhere as usize),
            elsewhere: AtomicBool::new(elsewhere),
        })
    }

    /// A GPU has opened and can take micro-batches of up to `rows` rows.
    pub(crate) fn tell(&self, rows: usize) {
        self.max.fetch_min(rows, Ordering::Relaxed);
        self.pending.fetch_sub(1, Ordering::Release);
    }

    /// Every rank of the run has told the others the micro-batch its device takes (the least
    /// is `rows`): the other processes' GPUs are known (once; nothing where there are none).
    pub(crate) fn tell_run(&self, rows: usize) {
        if self.elsewhere.swap(false, Ordering::AcqRel) {
            self.max.fetch_min(rows, Ordering::Relaxed);
            self.pending.fetch_sub(1, Ordering::Release);
        }
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
    /// The largest per-replica batch the memory of the run's other processes allows.
    elsewhere: Option<usize>,
    asked: Arc<AskedSoFar>,
}

impl Controller {
    pub(crate) fn new(tx: Sender<Ask>, devices: Arc<DeviceCap>) -> Self {
        Controller {
            tx,
            limit: None,
            devices,
            data: None,
            not_one: None,
            elsewhere: None,
            asked: Arc::default(),
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

    /// Batch-size changes past what the memory of the run's other processes allows (`max`,
    /// the least of theirs) are refused.
    pub(crate) fn elsewhere(self, max: Option<usize>) -> Self {
        Controller {
            elsewhere: max,
            ..self
        }
    }

    /// The per-replica batch the run starts with (a batch asked for is refused where it is the
    /// one the run has, or was last asked for).
    pub(crate) fn with_batch(self, per_replica: usize) -> Self {
        self.asked.batch.store(per_replica, Ordering::Release);
        self
    }

    /// Batch-size changes past what the machine's memory allows are refused.
    pub(crate) fn limited(self, limit: BatchLimit) -> Self {
        Controller {
            limit: Some(limit),
            ..self
        }
    }

    /// What the run's decider holds while the run goes (`Open`).
    pub(crate) fn open(&self) -> Open {
        Open(self.asked.clone())
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
        if self.asked.ended.load(Ordering::Acquire) {
            return Err(ControlError::Ended);
        }
        if self.asked.finishing.load(Ordering::Acquire) {
            return Err(ControlError::Finishing);
        }
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
            if let Some(max) = self.elsewhere.filter(|&m| b > m) {
                return Err(ControlError::TooLargeElsewhere { batch: b, max });
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
            if self.asked.batch.load(Ordering::Acquire) == b {
                return Err(ControlError::SameBatch(b));
            }
        }
        let asked = &self.asked;
        let stop = matches!(ask.control, Control::Stop { .. });
        // (a stop asked again may add its checkpoint: `decider`)
        if asked.stopping.load(Ordering::Acquire) && !stop {
            return Err(ControlError::Stopping);
        }
        // (one taken at the next boundary answers every ask before it: a script's burst of
        // them is refused, not recorded thousands of times)
        if ask.control == Control::Checkpoint && asked.checkpoint.swap(true, Ordering::AcqRel) {
            return Err(ControlError::CheckpointAsked);
        }
        // (one asker's pause or resume against another's: the first is taken)
        let toggle = |to: bool, err| {
            (asked.paused)
                .compare_exchange(!to, to, Ordering::AcqRel, Ordering::Acquire)
                .map(|_| ())
                .map_err(|_| err)
        };
        match ask.control {
            Control::Pause => toggle(true, ControlError::Paused)?,
            Control::Resume => toggle(false, ControlError::NotPaused)?,
            _ => {}
        }
        let sent = self.tx.send(ask.clone()).map_err(|_| ControlError::Ended);
        match (&sent, ask.control) {
            (Err(_), Control::Pause) => asked.paused.store(false, Ordering::Release),
            (Err(_), Control::Resume) => asked.paused.store(true, Ordering::Release),
            (Err(_), Control::Checkpoint) => asked.checkpoint.store(false, Ordering::Release),
            (Ok(()), Control::Stop { .. }) => asked.stopping.store(true, Ordering::Release),
            (Ok(()), Control::SetBatch(b)) => asked.batch.store(b, Ordering::Release),
            _ => {}
        }
        sent
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

mod decider;
pub use decider::{agree, Decider, Decision, Heard, HOLD};

#[cfg(test)]
mod tests;
