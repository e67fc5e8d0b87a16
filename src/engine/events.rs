//! What the engine tells frontends: lossy per-rank step samples and lossless lifecycle events.

use std::path::PathBuf;
use std::time::Duration;

/// One rank's view of one optimizer step. `loss` and `accuracy` are global (all ranks' shards,
/// all-reduced), the timings are this rank's.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepStats {
    pub rank: usize,
    /// 1-based number of this step in the run.
    pub step: u64,
    pub epoch: u64,
    /// Samples this rank processed in this step.
    pub samples: usize,
    pub global_samples: usize,
    pub per_replica: usize,
    pub loss: f32,
    pub accuracy: f32,
    /// The L2 norm of the mean gradient the update applied, before `--clip-grad-norm` (as
    /// global as `loss`); NaN in rows of files written before it was recorded.
    pub grad_norm: f32,
    pub lr: f32,
    pub data_wait: Duration,
    /// The time building this step's batch took of the rank's loader threads as a whole
    /// (`RankLoader::busy`): over the step's time, how busy they are. `None` in rows of files
    /// written before it was recorded.
    pub loader_busy: Option<Duration>,
    pub compute: Duration,
    /// CPU time this worker's thread used computing (CPU workers): the device's own speed,
    /// without time lost to other threads on a shared core. `None` where not measured.
    pub compute_cpu: Option<Duration>,
    /// A GPU's step: compute and all-reduce are device (CUDA event) times, and its wait for
    /// slower peers is inside `comm` (`sync_wait` is zero) until the monitor splits it out.
    pub device_timed: bool,
    /// Time inside the all-reduce moving and summing data.
    pub comm: Duration,
    /// Time inside the all-reduce waiting for slower ranks to arrive.
    pub sync_wait: Duration,
    /// Parameters and gradients copied between the device and the host's copy of the model
    /// (central storage every step; local SGD at its averages).
    pub transfer: Duration,
    pub optimizer: Duration,
    pub step_time: Duration,
    /// Since the run started, when this rank finished the step.
    pub at: Duration,
    /// Training stopped just before this step: a pause, an epoch's end (its validation) or a
    /// checkpoint (throughput windows restart here, so samples/s shows training's pace).
    pub after_pause: bool,
    /// Of those, a pause (the ETA's window leaves it out too: validation and checkpoints are
    /// part of the time left, a pause is not).
    pub paused: bool,
    /// Fraction of the run's budget (epochs or steps) done after this step.
    pub progress: f64,
    /// Where the next step's epoch and the run end, at this step's batch; `None` in rows of
    /// files written before they were recorded.
    pub ends_at: Option<EndsAt>,
}

/// The last step of an epoch and of the run, as a step leaves them (a batch change moves
/// both): where every strategy makes its replicas one, for validation and at the end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndsAt {
    /// The last step of the epoch the next step trains in (past `run` where the run ends
    /// first).
    pub epoch: u64,
    pub run: u64,
}

impl StepStats {
    /// A step its process was stopped and continued in (Ctrl-Z, `kill -STOP`): its time
    /// counts from the continuing, and the host's clock times of its parts, one of which holds
    /// the stop, are scaled down alike to fit it where they pass it (a thread's CPU time and a
    /// device's times did not run on while stopped).
    pub fn fit_awake(&mut self) {
        let device = self.device_timed;
        let mut host: Vec<&mut Duration> = vec![&mut self.data_wait, &mut self.transfer];
        if !device {
            host.extend([
                &mut self.compute,
                &mut self.optimizer,
                &mut self.comm,
                &mut self.sync_wait,
            ]);
        }
        let sum: Duration = host.iter().map(|t| **t).sum();
        if sum <= self.step_time {
            return;
        }
        let k = self.step_time.as_secs_f64() / sum.as_secs_f64();
        for t in host {
            *t = t.mul_f64(k);
        }
    }

    /// What the rank spent on its own (input, compute, optimizer), not in the all-reduce nor
    /// waiting for slower peers: a CPU worker's compute as its thread's CPU time, so time lost
    /// to other threads on a shared core is not counted as its work. What a straggler has more of.
    pub fn work(&self) -> Duration {
        self.data_wait + self.compute_cpu.unwrap_or(self.compute) + self.optimizer
    }

    /// Words of `to_words`.
    pub const WORDS: usize = 25;

    /// As words, to travel between processes (durations in ns, floats as their bits).
    pub fn to_words(&self) -> [u64; Self::WORDS] {
        let ns = |d: Duration| d.as_nanos().min(u64::MAX as u128) as u64;
        [
            self.rank as u64,
            self.step,
            self.epoch,
            self.samples as u64,
            self.global_samples as u64,
            self.per_replica as u64,
            self.loss.to_bits() as u64,
            self.accuracy.to_bits() as u64,
            self.lr.to_bits() as u64,
            ns(self.data_wait),
            ns(self.compute),
            self.compute_cpu.map_or(0, |d| ns(d).saturating_add(1)),
            self.device_timed as u64,
            ns(self.comm),
            ns(self.sync_wait),
            ns(self.optimizer),
            ns(self.step_time),
            ns(self.at),
            self.after_pause as u64 | (self.paused as u64) << 1,
            self.progress.to_bits(),
            ns(self.transfer),
            // (a run's end is step 1 or later: 0 says none)
            self.ends_at.map_or(0, |e| e.epoch),
            self.ends_at.map_or(0, |e| e.run),
            self.grad_norm.to_bits() as u64,
            self.loader_busy.map_or(0, |d| ns(d).saturating_add(1)),
        ]
    }

    /// The stats `to_words` wrote (None for a rank that has no step to report yet).
    pub fn from_words(w: &[u64]) -> Option<StepStats> {
        let w: &[u64; Self::WORDS] = w.try_into().ok()?;
        let d = Duration::from_nanos;
        let f = |x: u64| f32::from_bits(x as u32);
        (w[1] > 0).then(|| StepStats {
            rank: w[0] as usize,
            step: w[1],
            epoch: w[2],
            samples: w[3] as usize,
            global_samples: w[4] as usize,
            per_replica: w[5] as usize,
            loss: f(w[6]),
            accuracy: f(w[7]),
            lr: f(w[8]),
            data_wait: d(w[9]),
            compute: d(w[10]),
            compute_cpu: (w[11] > 0).then(|| d(w[11] - 1)),
            device_timed: w[12] != 0,
            comm: d(w[13]),
            sync_wait: d(w[14]),
            optimizer: d(w[15]),
            step_time: d(w[16]),
            at: d(w[17]),
            after_pause: w[18] & 1 != 0,
            paused: w[18] & 2 != 0,
            progress: f64::from_bits(w[19]),
            transfer: d(w[20]),
            ends_at: (w[22] > 0).then_some(EndsAt {
                epoch: w[21],
                run: w[22],
            }),
            grad_norm: f(w[23]),
            loader_busy: (w[24] > 0).then(|| d(w[24] - 1)),
        })
    }
}

/// A control the engine applied, and at which step (every rank applied it there).
#[derive(Clone, Debug, PartialEq)]
pub enum Applied {
    Paused,
    Resumed,
    BatchSize {
        from: usize,
        to: usize,
        /// The LR the first step at the new size takes (rescaled, on the schedule's way).
        lr: f32,
    },
    /// `--rebalance` cut the global batch unevenly: samples per rank from this step.
    Split(Vec<usize>),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Started {
        ranks: usize,
        per_replica: usize,
        params: usize,
        start_step: u64,
        start_epoch: u64,
    },
    Control {
        step: u64,
        applied: Applied,
    },
    /// `by` (an attached client) asked for `control`, taken at the boundary after `step`; what
    /// it did follows as its own events.
    Asked {
        step: u64,
        control: crate::engine::control::Control,
        by: String,
    },
    EpochDone {
        epoch: u64,
        step: u64,
        train_loss: f32,
        val_loss: Option<f32>,
        val_accuracy: Option<f32>,
        elapsed: Duration,
    },
    /// A validation within an epoch (`--val-every`; an epoch's own is in `EpochDone`), after
    /// `step`, `epochs` trained by then (1.4: 40% into the second).
    Validated {
        step: u64,
        epochs: f32,
        val_loss: f32,
        val_accuracy: f32,
        elapsed: Duration,
    },
    /// A checkpoint written; `best`: the best validation's so far (`--checkpoint-best`), of
    /// this accuracy.
    Checkpoint {
        step: u64,
        path: PathBuf,
        best: Option<f32>,
    },
    /// A validation of `samples` samples begins after `step` (its figures follow as
    /// `Validated` or `EpochDone`): a screen says the run is validating, not stuck.
    Validating {
        step: u64,
        samples: usize,
    },
    /// Every rank's parameters hashed the same after `step`: the run's first check (they are
    /// checked every `--log-every` steps; a later one is heard of only if it fails).
    InSync {
        step: u64,
        ranks: usize,
    },
    /// A picture file could not be decoded (told once per file): another picture of its class
    /// stands in for it from now on, where one decodes (the message says so).
    DataSkipped {
        step: u64,
        message: String,
    },
    /// Something gone wrong that the run goes on through (an old checkpoint `--keep-checkpoints`
    /// could not remove).
    Warning {
        step: u64,
        message: String,
    },
    /// Something a rank's device should tell the run (cuDNN failing its check on a GPU).
    DeviceNote {
        rank: usize,
        message: String,
    },
    Failed {
        rank: usize,
        step: u64,
        message: String,
    },
    Finished {
        step: u64,
        ending: Ending,
    },
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// It trained its budget.
    Completed,
    /// Stopped when asked: the step under way finished and a checkpoint was written.
    Stopped,
    /// Quit at once (a second signal): the step under way was neither finished nor
    /// checkpointed. Only a metrics file says this (the process is gone).
    Quit,
}

impl Ending {
    /// Its word in an `end` record.
    pub fn word(self) -> &'static str {
        match self {
            Ending::Completed => "completed",
            Ending::Stopped => "stopped",
            Ending::Quit => "quit",
        }
    }

    pub fn from_word(w: &str) -> Option<Ending> {
        [Ending::Completed, Ending::Stopped, Ending::Quit]
            .into_iter()
            .find(|e| e.word() == w)
    }

    /// Before its budget was trained.
    pub fn early(self) -> bool {
        self != Ending::Completed
    }
}

impl Event {
    /// The step this happened after, where it names one.
    pub fn step(&self) -> Option<u64> {
        match self {
            // (the run starts after step `start_step`: no sample of its comes before it)
            Event::Started { start_step, .. } => Some(*start_step),
            Event::DeviceNote { .. } => None,
            Event::Control { step, .. }
            | Event::Asked { step, .. }
            | Event::EpochDone { step, .. }
            | Event::Validated { step, .. }
            | Event::Validating { step, .. }
            | Event::Checkpoint { step, .. }
            | Event::InSync { step, .. }
            | Event::DataSkipped { step, .. }
            | Event::Warning { step, .. }
            | Event::Failed { step, .. }
            | Event::Finished { step, .. } => Some(*step),
        }
    }
}

#[cfg(test)]
impl Event {
    /// Epoch `epoch`'s end at step `step`, validated at `val_accuracy` (losses of 0.5).
    pub fn epoch_example(epoch: u64, step: u64, val_accuracy: f32) -> Event {
        Event::EpochDone {
            epoch,
            step,
            train_loss: 0.5,
            val_loss: Some(0.5),
            val_accuracy: Some(val_accuracy),
            elapsed: Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_stopped_in_its_compute_has_its_host_timed_parts_fit_its_time() {
        let ms = Duration::from_millis;
        let mut s = StepStats {
            data_wait: ms(1),
            compute: ms(15_002),
            compute_cpu: Some(ms(2)),
            optimizer: ms(1),
            transfer: ms(1),
            step_time: ms(4),
            ..StepStats::default()
        };
        s.fit_awake();
        let parts = s.data_wait + s.compute + s.optimizer + s.comm + s.sync_wait + s.transfer;
        assert!(
            parts <= ms(4) + Duration::from_micros(1) && s.compute > ms(3),
            "{s:?}"
        );
        assert_eq!(
            s.compute_cpu,
            Some(ms(2)),
            "a thread's CPU time did not run on"
        );
        // a GPU's step: its device times stay as measured, the host's input wait is fitted
        let mut gpu = StepStats {
            data_wait: ms(20_000),
            compute: ms(9),
            device_timed: true,
            step_time: ms(12),
            ..StepStats::default()
        };
        gpu.fit_awake();
        assert_eq!((gpu.compute, gpu.data_wait), (ms(9), ms(12)));
        // parts within the step: nothing changed
        let mut fine = StepStats {
            compute: ms(3),
            step_time: ms(4),
            ..StepStats::default()
        };
        fine.fit_awake();
        assert_eq!(fine.compute, ms(3));
    }

    #[test]
    fn step_stats_travel_as_words_unchanged() {
        let s = StepStats {
            rank: 3,
            step: 41,
            epoch: 2,
            samples: 32,
            global_samples: 128,
            per_replica: 32,
            loss: 0.731,
            accuracy: 0.5,
            grad_norm: 1.0,
            lr: 3e-3,
            data_wait: Duration::from_micros(12),
            loader_busy: Some(Duration::from_micros(230)),
            compute: Duration::from_micros(900),
            compute_cpu: Some(Duration::ZERO),
            device_timed: false,
            comm: Duration::from_micros(40),
            sync_wait: Duration::from_micros(7),
            optimizer: Duration::from_micros(30),
            step_time: Duration::from_micros(1000),
            at: Duration::from_secs(3),
            after_pause: true,
            paused: true,
            progress: 0.25,
            transfer: Duration::from_micros(3),
            ends_at: Some(EndsAt { epoch: 48, run: 96 }),
        };
        assert_eq!(StepStats::from_words(&s.to_words()), Some(s.clone()));
        let none = StepStats {
            compute_cpu: None,
            ends_at: None,
            loader_busy: None,
            ..s
        };
        assert_eq!(StepStats::from_words(&none.to_words()), Some(none));
        assert_eq!(StepStats::from_words(&[0; StepStats::WORDS]), None);
    }
}
