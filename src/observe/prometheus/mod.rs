//! The run as Prometheus metrics (`--prometheus [ADDR:]PORT`): every GPU under dcgm-exporter's
//! names and labels (so its public Grafana dashboard shows them unchanged) and the training
//! under `mgtop_` names. Process 0 serves the whole job (it alone sees every rank's steps);
//! `rank` and `worker` labels tell the ranks apart.
//!
//! The recorder updates the values (atomics, on its own thread); `http` serves them. Nothing a
//! training step does waits on either.

mod dcgm;
mod families;
pub mod http;
#[cfg(test)]
mod tests;

use std::time::Duration;

use prometheus::{Counter, Gauge, GaugeVec, IntCounter, IntCounterVec, IntGauge, Registry};

use crate::engine::events::{Applied, Event};
use crate::engine::RunInfo;
use crate::observe::mfu::Mfu;
use crate::observe::monitor::{GlobalBatch, StepRow};
use crate::observe::nvml::GpuIdentity;
use crate::observe::recorder::Sink;
use crate::observe::sample::DeviceSample;
use crate::observe::straggler::{Cause, Limit, Warning};
use dcgm::Dcgm;
use families::{counter_vec, gauge_vec, int_counter, int_counter_vec, int_gauge, Newest};
use families::{wide, OUTSIDE_LOAD, PARTS, STATE, STATES};

/// The metrics of one run, registered in the endpoint's registry.
pub struct Prometheus {
    /// (from the start: a resumed run's step it resumed at)
    step: IntGauge,
    steps: IntCounter,
    epoch: Newest,
    progress: Newest,
    samples: Counter,
    samples_per_s: Newest,
    /// The newest step's time, samples and rate: the rate said in between is no more than
    /// one step's samples over the time since (a stall's falls), and 0 while paused.
    last_rate: Option<(Duration, usize, f64)>,
    paused: bool,
    /// The run has ended (failed, stopped, completed): nothing trains, nothing is measured.
    over: bool,
    loss: Newest,
    accuracy: Newest,
    /// (files written before it was recorded have none)
    grad_norm: Newest,
    lr: Newest,
    /// The learning rate last set (it changes seldom; widening it costs a format).
    lr_seen: Option<f32>,
    global_batch: Newest,
    /// (an epoch's short last step keeps the global batch the run trains at)
    global_of: GlobalBatch,
    per_replica: Newest,
    val_loss: Newest,
    val_accuracy: Newest,
    /// Per rank, one counter per part of `PARTS`.
    step_time: Vec<[Counter; 6]>,
    /// Per rank, its loader threads' time building its batches (over their number).
    loader_busy: Vec<Counter>,
    stragglers: IntCounterVec,
    degraded: IntCounterVec,
    stalls: IntCounter,
    grad_spikes: IntCounter,
    /// 1 while the run is said to be input-bound, launch-bound or underused.
    bound: GaugeVec,
    checkpoints: IntCounter,
    data_skipped: IntCounter,
    state: GaugeVec,
    utilization: Vec<Gauge>,
    /// MFU per GPU rank whose peak is known: a series appears with its first value.
    mfu: GaugeVec,
    /// Per rank, the labels of its MFU series (`None`: no peak known, never shown).
    mfu_labels: Vec<Option<[String; 3]>>,
    mfu_of: Mfu,
    process_memory: Newest,
    dcgm: Dcgm,
    /// The `rank` label of each rank.
    ranks: Vec<String>,
}

impl Prometheus {
    /// Registers this run's metrics in `registry`; `gpus` are NVML's identities of the run's
    /// GPUs in rank order (empty where NVML is not there: the labels NVML gives are then empty).
    pub fn new(
        registry: &Registry,
        info: &RunInfo,
        identities: &[GpuIdentity],
    ) -> Result<Prometheus, String> {
        let r = registry;
        let ranks: Vec<String> = (0..info.ranks()).map(|r| r.to_string()).collect();
        let workers: Vec<String> = info
            .devices
            .iter()
            .enumerate()
            .map(|(r, d)| d.label_on(info.hosts.get(r).map(String::as_str)))
            .collect();
        let step_time = counter_vec(
            r,
            "mgtop_step_time_seconds_total",
            "Time each rank spent in each part of its steps: data (waiting for input), compute, allreduce (moving and summing gradients), wait (for slower ranks), optimizer, transfer (host-device copies).",
            &["rank", "worker", "part"],
        )?;
        let loader_busy = counter_vec(
            r,
            "mgtop_loader_busy_seconds_total",
            "Time each rank's loader threads spent building its batches, over their number: its rate is how busy they are, 0-1 (near 1 they can no longer keep up).",
            &["rank", "worker"],
        )?;
        let utilization = gauge_vec(
            r,
            "mgtop_device_utilization_ratio",
            "Each rank's device busy share, 0-1 (GPU: NVML's utilization; CPU worker: time computing, reducing and updating).",
            &["rank", "worker"],
        )?;
        let mfu_of = Mfu::for_run(info);
        let mfu = gauge_vec(
            r,
            "mgtop_mfu_ratio",
            "Model FLOPs utilisation of each GPU rank, 0-1: 3 x the model's forward FLOPs per sample x samples/s over the GPU's dense peak for the precision in use (fp32, tf32 or bf16).",
            &["rank", "worker", "precision"],
        )?;
        let info_gauge = gauge_vec(
            r,
            "mgtop_run_info",
            "The run (always 1): its name, model, data and strategy.",
            &["run", "model", "data", "strategy"],
        )?;
        info_gauge
            .with_label_values(&[
                info.name.as_str(),
                info.model.as_str(),
                info.data.as_str(),
                &info.strategy.to_string(),
            ])
            .set(1.0);
        let dcgm = Dcgm::new(r, info, identities)?;
        let state = gauge_vec(r, STATE.0, STATE.1, &["state"])?;
        let p = Prometheus {
            step: int_gauge(r, "mgtop_step", "The newest step every rank has completed.")?,
            steps: int_counter(
                r,
                "mgtop_steps_total",
                "Steps completed by every rank since this process started.",
            )?,
            epoch: Newest::new(
                r,
                "mgtop_epoch",
                "The epoch the newest step is in (1-based).",
            )?,
            progress: Newest::new(
                r,
                "mgtop_progress_ratio",
                "The share of the run's budget done, 0-1.",
            )?,
            samples: {
                let c = Counter::new(
                    "mgtop_samples_total",
                    "Training samples processed by all ranks since this process started.",
                )
                .map_err(|e| e.to_string())?;
                r.register(Box::new(c.clone())).map_err(|e| e.to_string())?;
                c
            },
            last_rate: None,
            paused: false,
            over: false,
            samples_per_s: Newest::new(
                r,
                "mgtop_samples_per_second",
                "Training samples per second over the last seconds, all ranks.",
            )?,
            loss: Newest::new(
                r,
                "mgtop_train_loss",
                "The newest step's training loss (mean over the global batch).",
            )?,
            accuracy: Newest::new(
                r,
                "mgtop_train_accuracy_ratio",
                "The newest step's training accuracy, 0-1.",
            )?,
            grad_norm: Newest::new(
                r,
                "mgtop_grad_norm",
                "The newest step's mean gradient's L2 norm, before --clip-grad-norm.",
            )?,
            lr: Newest::new(
                r,
                "mgtop_learning_rate",
                "The learning rate of the newest step.",
            )?,
            lr_seen: None,
            global_batch: Newest::new(
                r,
                "mgtop_global_batch_size",
                "Samples per optimizer step over all ranks (an epoch's last step, cut short, keeps the batch before).",
            )?,
            global_of: GlobalBatch::default(),
            per_replica: Newest::new(
                r,
                "mgtop_batch_size_per_replica",
                "Samples per rank per step.",
            )?,
            val_loss: Newest::new(
                r,
                "mgtop_validation_loss",
                "The newest epoch's validation loss.",
            )?,
            val_accuracy: Newest::new(
                r,
                "mgtop_validation_accuracy_ratio",
                "The newest epoch's validation accuracy, 0-1.",
            )?,
            step_time: (0..info.ranks())
                .map(|rank| {
                    PARTS.map(|part| {
                        step_time.with_label_values(&[&ranks[rank], &workers[rank], part])
                    })
                })
                .collect(),
            loader_busy: (0..info.ranks())
                .map(|rank| loader_busy.with_label_values(&[&ranks[rank], &workers[rank]]))
                .collect(),
            stragglers: int_counter_vec(
                r,
                "mgtop_straggler_warnings_total",
                "Straggler warnings, by the slow rank and the likely cause.",
                &["rank", "cause"],
            )?,
            degraded: int_counter_vec(
                r,
                "mgtop_degraded_warnings_total",
                "Warnings that a rank runs well below its own best speed.",
                &["rank"],
            )?,
            stalls: int_counter(
                r,
                "mgtop_stall_warnings_total",
                "Warnings that no step completed for the stall timeout.",
            )?,
            grad_spikes: int_counter(
                r,
                "mgtop_grad_spike_warnings_total",
                "Gradient spikes warned of: steps whose gradient norm was many times its recent median (a climb is one; a warning said for a minute's spikes counts them all).",
            )?,
            bound: gauge_vec(
                r,
                "mgtop_bound",
                "1 while the whole run is held back by its input (input-bound) or its host (launch-bound), busy GPUs compute at a low MFU (underused), or other work takes the machine's cores (outside-load: the machines under it); 0 once cleared.",
                &["limit"],
            )?,
            checkpoints: int_counter(
                r,
                "mgtop_checkpoints_total",
                "Checkpoints written since this process started.",
            )?,
            data_skipped: int_counter(
                r,
                "mgtop_data_skipped_total",
                "Input files that could not be decoded (another sample stood in).",
            )?,
            utilization: (0..info.ranks())
                .map(|rank| utilization.with_label_values(&[&ranks[rank], &workers[rank]]))
                .collect(),
            mfu_labels: (0..info.ranks())
                .map(|rank| {
                    mfu_of.peaks[rank].map(|_| {
                        [
                            ranks[rank].clone(),
                            workers[rank].clone(),
                            info.precision.name().to_string(),
                        ]
                    })
                })
                .collect(),
            mfu,
            mfu_of,
            process_memory: Newest::new(
                r,
                "mgtop_process_resident_memory_bytes",
                "Resident memory of the process serving these metrics.",
            )?,
            state,
            dcgm,
            ranks,
        };
        p.step.set(info.start_step as i64);
        p.set_state("running");
        // every series there can be, at 0 from the start: an alert or rate() over a warning
        // counter sees a rise, not a series appearing
        for r in &p.ranks {
            p.degraded.with_label_values(&[r.as_str()]);
            for cause in Cause::KINDS {
                p.stragglers.with_label_values(&[r.as_str(), cause]);
            }
        }
        for l in Limit::ALL {
            p.bound.with_label_values(&[l.name()]).set(0.0);
        }
        p.bound.with_label_values(&[OUTSIDE_LOAD]).set(0.0);
        Ok(p)
    }

    /// The run has ended: no samples/s, no use of its devices, and no GPU readings (no longer
    /// taken: a dashboard sees them gone rather than frozen at their last values).
    fn ended(&mut self) {
        self.over = true;
        self.samples_per_s.set(0.0);
        for g in &self.utilization {
            g.set(0.0);
        }
        self.dcgm.forget();
    }

    fn set_state(&self, now: &str) {
        for s in STATES {
            self.state
                .with_label_values(&[s])
                .set(if s == now { 1.0 } else { 0.0 });
        }
    }

    /// The newest validation's figures (an epoch's, or one within it).
    fn validated(&self, loss: Option<f32>, accuracy: Option<f32>) {
        if let Some(l) = loss {
            self.val_loss.set(wide(l));
        }
        if let Some(a) = accuracy {
            self.val_accuracy.set(wide(a));
        }
    }
}

impl Sink for Prometheus {
    fn step(&mut self, row: &StepRow, rate: Option<f64>, _logged: bool) -> Result<(), String> {
        // (a scrape waits for the step's figures to be set together: one step's, never torn)
        let _together = http::SETTING.write().unwrap_or_else(|p| p.into_inner());
        self.step.set(row.step as i64);
        self.steps.inc();
        self.epoch.set(row.epoch as f64);
        self.progress.set(row.progress);
        self.samples.inc_by(row.global_samples as f64);
        if let Some(r) = rate {
            self.samples_per_s.set(r);
            self.last_rate = Some((row.at, row.global_samples, r));
        }
        self.loss.set(f64::from(row.loss));
        self.accuracy.set(f64::from(row.accuracy));
        if row.grad_norm.is_finite() {
            self.grad_norm.set(f64::from(row.grad_norm));
        }
        // as set (0.001, not 0.0010000000474974513): read as the flag's value
        if self.lr_seen != Some(row.lr) {
            self.lr_seen = Some(row.lr);
            self.lr.set(wide(row.lr));
        }
        self.global_batch.set(self.global_of.at(row) as f64);
        self.per_replica.set(row.per_replica as f64);
        for s in &row.ranks {
            let Some(c) = self.step_time.get(s.rank) else {
                continue;
            };
            let parts = [
                s.data_wait,
                s.compute,
                s.comm,
                s.sync_wait,
                s.optimizer,
                s.transfer,
            ];
            for (c, d) in c.iter().zip(parts) {
                c.inc_by(d.as_secs_f64());
            }
            if let (Some(c), Some(b)) = (self.loader_busy.get(s.rank), s.loader_busy) {
                c.inc_by(b.as_secs_f64());
            }
            let labels = self.mfu_labels.get(s.rank).and_then(Option::as_ref);
            if let (Some(l), Some(m)) = (labels, self.mfu_of.of(s.rank, s.samples, s.step_time)) {
                self.mfu.with_label_values(l).set(m);
            }
        }
        Ok(())
    }

    fn event(&mut self, ev: &Event, _t: Duration, _logged: bool) -> Result<(), String> {
        match *ev {
            Event::EpochDone {
                val_loss,
                val_accuracy,
                ..
            } => self.validated(val_loss, val_accuracy),
            Event::Validated {
                val_loss,
                val_accuracy,
                ..
            } => self.validated(Some(val_loss), Some(val_accuracy)),
            Event::Checkpoint { .. } => self.checkpoints.inc(),
            Event::DataSkipped { .. } => self.data_skipped.inc(),
            Event::Control {
                applied: Applied::Paused,
                ..
            } => {
                self.set_state("paused");
                self.paused = true;
                if self.last_rate.is_some() {
                    self.samples_per_s.set(0.0);
                }
            }
            Event::Control {
                applied: Applied::Resumed,
                ..
            } => {
                self.set_state("running");
                self.paused = false;
            }
            Event::Failed { .. } => {
                self.set_state("failed");
                self.ended();
            }
            Event::Finished { ending, .. } => {
                self.ended();
                // a failure said first stays the state
                let failed = self.state.with_label_values(&["failed"]).get() > 0.0;
                if !failed {
                    self.set_state(if ending.early() {
                        "stopped"
                    } else {
                        "completed"
                    });
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn warning(&mut self, w: &Warning, _t: Duration) -> Result<(), String> {
        let rank = |r: usize| self.ranks.get(r).cloned().unwrap_or_else(|| r.to_string());
        match w {
            Warning::Straggler { rank: r, cause, .. } => self
                .stragglers
                .with_label_values(&[rank(*r).as_str(), cause.kind()])
                .inc(),
            Warning::Degraded { rank: r, .. } => self.degraded.with_label_values(&[rank(*r)]).inc(),
            Warning::Stall { .. } => self.stalls.inc(),
            Warning::GradSpike(spike) => self.grad_spikes.inc_by(spike.said_for.count),
            Warning::Bound { bound, .. } => {
                self.bound.with_label_values(&[bound.limit.name()]).set(1.0)
            }
            Warning::BoundCleared { limit, .. } => {
                self.bound.with_label_values(&[limit.name()]).set(0.0)
            }
            // (the machines under it: each clears its own)
            Warning::OutsideLoad { .. } => self.bound.with_label_values(&[OUTSIDE_LOAD]).inc(),
            Warning::OutsideLoadCleared { .. } => {
                self.bound.with_label_values(&[OUTSIDE_LOAD]).dec()
            }
            Warning::StragglerCleared { .. } | Warning::DegradedCleared { .. } => {}
        }
        Ok(())
    }

    fn telemetry(
        &mut self,
        t: Duration,
        devices: &[DeviceSample],
        process: Option<(u64, u64)>,
    ) -> Result<(), String> {
        if self.over {
            return Ok(());
        }
        // no step since: at most one step's samples over the time since the last
        if let Some((at, samples, rate)) = self.last_rate.filter(|_| !self.paused) {
            let since = t.saturating_sub(at).as_secs_f64();
            if since > 0.0 && (samples as f64 / since) < rate {
                self.samples_per_s.set(samples as f64 / since);
            }
        }
        for (g, s) in self.utilization.iter().zip(devices) {
            if let Some(u) = s.util {
                g.set(wide(u));
            }
        }
        self.dcgm.record(devices);
        if let Some((rss, _)) = process {
            self.process_memory.set(rss as f64);
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), String> {
        Ok(())
    }
}
