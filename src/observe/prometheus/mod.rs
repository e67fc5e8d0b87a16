//! The run as Prometheus metrics (`--prometheus [ADDR:]PORT`): every GPU under dcgm-exporter's
//! names and labels (so its public Grafana dashboard shows them unchanged) and the training
//! under `mgtop_` names. Process 0 serves the whole job (it alone sees every rank's steps);
//! `rank` and `worker` labels tell the ranks apart.
//!
//! The recorder updates the values (atomics, on its own thread); `http` serves them. Nothing a
//! training step does waits on either.

pub mod http;

use std::time::Duration;

use prometheus::{
    Counter, CounterVec, Gauge, GaugeVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
};

use crate::engine::events::{Applied, Event};
use crate::engine::{Device, RunInfo};
use crate::observe::mfu::{Mfu, GPU_PRECISION};
use crate::observe::monitor::StepRow;
use crate::observe::nvml::GpuIdentity;
use crate::observe::recorder::Sink;
use crate::observe::sample::DeviceSample;
use crate::observe::straggler::Warning;

/// The states `mgtop_run_state` has a series for.
const STATES: [&str; 5] = ["running", "paused", "completed", "stopped", "failed"];

/// The parts of a step `mgtop_step_time_seconds_total` counts, in the order of `parts`.
const PARTS: [&str; 6] = [
    "data",
    "compute",
    "allreduce",
    "wait",
    "optimizer",
    "transfer",
];

/// The labels of every dcgm-exporter metric, in the order of `Gpu::labels`.
const DCGM_LABELS: [&str; 7] = [
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "Hostname",
    "rank",
];

const MIB: f64 = 1024.0 * 1024.0;

/// An f32 as the f64 its shortest decimal spells (1e-3 stays 0.001, not 0.0010000000474974513).
fn wide(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(f64::from(x))
}

/// dcgm-exporter's fields that NVML gives: the name, its help (dcgm-exporter's words), and the
/// value in its unit from a sample.
type Field = (&'static str, &'static str, fn(&DeviceSample) -> Option<f64>);

const DCGM_FIELDS: [Field; 9] = [
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", |s| {
        s.util.map(|u| f64::from(u) * 100.0)
    }),
    (
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "Memory utilization (in %).",
        |s| s.mem_access.map(|u| f64::from(u) * 100.0),
    ),
    (
        "DCGM_FI_DEV_FB_USED",
        "Framebuffer memory used (in MiB).",
        |s| s.mem_used.map(|b| (b as f64 / MIB).round()),
    ),
    (
        "DCGM_FI_DEV_FB_FREE",
        "Framebuffer memory free (in MiB).",
        |s| match (s.mem_total, s.mem_used) {
            (Some(t), Some(u)) => Some((t.saturating_sub(u) as f64 / MIB).round()),
            _ => None,
        },
    ),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", |s| {
        s.temp_c.map(f64::from)
    }),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", |s| {
        s.power_w.map(f64::from)
    }),
    (
        "DCGM_FI_DEV_SM_CLOCK",
        "SM clock frequency (in MHz).",
        |s| s.sm_clock_mhz.map(f64::from),
    ),
    (
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
        "PCIe transmit throughput (in KB/s), read by NVML.",
        |s| s.pcie_tx_kbs.map(f64::from),
    ),
    (
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
        "PCIe receive throughput (in KB/s), read by NVML.",
        |s| s.pcie_rx_kbs.map(f64::from),
    ),
];

/// A GPU rank's dcgm-exporter label values.
struct Gpu {
    rank: usize,
    labels: [String; 7],
}

/// The metrics of one run, registered in the endpoint's registry.
pub struct Prometheus {
    step: IntGauge,
    steps: IntCounter,
    epoch: IntGauge,
    progress: Gauge,
    samples: Counter,
    /// Families without labels whose one series appears with its first value: no 0 is shown
    /// before a rate is measured or an epoch validated.
    samples_per_s: GaugeVec,
    loss: Gauge,
    accuracy: Gauge,
    lr: Gauge,
    /// The learning rate last set (it changes seldom; widening it costs a format).
    lr_seen: Option<f32>,
    global_batch: IntGauge,
    per_replica: IntGauge,
    val_loss: GaugeVec,
    val_accuracy: GaugeVec,
    /// Per rank, one counter per part of `PARTS`.
    step_time: Vec<[Counter; 6]>,
    stragglers: IntCounterVec,
    degraded: IntCounterVec,
    stalls: IntCounter,
    checkpoints: IntCounter,
    data_skipped: IntCounter,
    state: GaugeVec,
    utilization: Vec<Gauge>,
    /// MFU per GPU rank whose peak is known: a series appears with its first value.
    mfu: GaugeVec,
    /// Per rank, the labels of its MFU series (`None`: no peak known, never shown).
    mfu_labels: Vec<Option<[String; 3]>>,
    mfu_of: Mfu,
    process_memory: IntGauge,
    dcgm: Vec<GaugeVec>,
    gpus: Vec<Gpu>,
    /// The `rank` label of each rank.
    ranks: Vec<String>,
}

fn gauge(r: &Registry, name: &str, help: &str) -> Result<Gauge, String> {
    let g = Gauge::new(name, help).map_err(|e| e.to_string())?;
    r.register(Box::new(g.clone())).map_err(|e| e.to_string())?;
    Ok(g)
}

fn int_gauge(r: &Registry, name: &str, help: &str) -> Result<IntGauge, String> {
    let g = IntGauge::new(name, help).map_err(|e| e.to_string())?;
    r.register(Box::new(g.clone())).map_err(|e| e.to_string())?;
    Ok(g)
}

fn int_counter(r: &Registry, name: &str, help: &str) -> Result<IntCounter, String> {
    let c = IntCounter::new(name, help).map_err(|e| e.to_string())?;
    r.register(Box::new(c.clone())).map_err(|e| e.to_string())?;
    Ok(c)
}

fn gauge_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> Result<GaugeVec, String> {
    let g = GaugeVec::new(Opts::new(name, help), labels).map_err(|e| e.to_string())?;
    r.register(Box::new(g.clone())).map_err(|e| e.to_string())?;
    Ok(g)
}

fn int_counter_vec(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntCounterVec, String> {
    let c = IntCounterVec::new(Opts::new(name, help), labels).map_err(|e| e.to_string())?;
    r.register(Box::new(c.clone())).map_err(|e| e.to_string())?;
    Ok(c)
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
        let here = crate::engine::hostname();
        let host = |rank: usize| {
            info.hosts
                .get(rank)
                .cloned()
                .unwrap_or_else(|| here.clone())
        };
        let ranks: Vec<String> = (0..info.ranks()).map(|r| r.to_string()).collect();
        let workers: Vec<String> = info
            .devices
            .iter()
            .enumerate()
            .map(|(r, d)| d.label_on(info.hosts.get(r).map(String::as_str)))
            .collect();
        let step_time = CounterVec::new(
            Opts::new(
                "mgtop_step_time_seconds_total",
                "Time each rank spent in each part of its steps: data (waiting for input), compute, allreduce (moving and summing gradients), wait (for slower ranks), optimizer, transfer (host-device copies).",
            ),
            &["rank", "worker", "part"],
        )
        .map_err(|e| e.to_string())?;
        r.register(Box::new(step_time.clone()))
            .map_err(|e| e.to_string())?;
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
            "Model FLOPs utilisation of each GPU rank, 0-1: 3 x the model's forward FLOPs per sample x samples/s over the GPU's dense peak for the precision in use (fp32).",
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
        let mut gpus = Vec::new();
        let mut identities = identities.iter();
        for (rank, d) in info.devices.iter().enumerate() {
            if let Device::Gpu {
                index,
                name,
                pci_bus_id,
            } = d
            {
                let id = identities.next().cloned().unwrap_or_default();
                // NVML here sees this machine's GPUs only: another machine's are left out
                let local = info
                    .hosts
                    .get(rank)
                    .is_none_or(|h| Some(h) == info.hosts.first());
                if !local {
                    continue;
                }
                gpus.push(Gpu {
                    rank,
                    labels: [
                        id.index
                            .map_or_else(|| index.to_string(), |i| i.to_string()),
                        id.uuid.unwrap_or_default(),
                        pci_bus_id.clone().unwrap_or_default(),
                        id.minor.map(|m| format!("nvidia{m}")).unwrap_or_default(),
                        name.clone(),
                        host(rank),
                        rank.to_string(),
                    ],
                });
            }
        }
        let dcgm = match gpus.is_empty() {
            true => Vec::new(),
            false => DCGM_FIELDS
                .iter()
                .map(|(name, help, _)| gauge_vec(r, name, help, &DCGM_LABELS))
                .collect::<Result<_, _>>()?,
        };
        let state = gauge_vec(
            r,
            "mgtop_run_state",
            "1 for the state the run is in: running, paused, completed, stopped or failed.",
            &["state"],
        )?;
        let p = Prometheus {
            step: int_gauge(r, "mgtop_step", "The newest step every rank has completed.")?,
            steps: int_counter(
                r,
                "mgtop_steps_total",
                "Steps completed by every rank since this process started.",
            )?,
            epoch: int_gauge(
                r,
                "mgtop_epoch",
                "The epoch the newest step is in (1-based).",
            )?,
            progress: gauge(
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
            samples_per_s: gauge_vec(
                r,
                "mgtop_samples_per_second",
                "Training samples per second over the last seconds, all ranks.",
                &[],
            )?,
            loss: gauge(
                r,
                "mgtop_train_loss",
                "The newest step's training loss (mean over the global batch).",
            )?,
            accuracy: gauge(
                r,
                "mgtop_train_accuracy_ratio",
                "The newest step's training accuracy, 0-1.",
            )?,
            lr: gauge(
                r,
                "mgtop_learning_rate",
                "The learning rate of the newest step.",
            )?,
            lr_seen: None,
            global_batch: int_gauge(
                r,
                "mgtop_global_batch_size",
                "Samples per optimizer step over all ranks.",
            )?,
            per_replica: int_gauge(
                r,
                "mgtop_batch_size_per_replica",
                "Samples per rank per step.",
            )?,
            val_loss: gauge_vec(
                r,
                "mgtop_validation_loss",
                "The newest epoch's validation loss.",
                &[],
            )?,
            val_accuracy: gauge_vec(
                r,
                "mgtop_validation_accuracy_ratio",
                "The newest epoch's validation accuracy, 0-1.",
                &[],
            )?,
            step_time: (0..info.ranks())
                .map(|rank| {
                    PARTS.map(|part| {
                        step_time.with_label_values(&[&ranks[rank], &workers[rank], part])
                    })
                })
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
                            GPU_PRECISION.name().to_string(),
                        ]
                    })
                })
                .collect(),
            mfu,
            mfu_of,
            process_memory: int_gauge(
                r,
                "mgtop_process_resident_memory_bytes",
                "Resident memory of the process serving these metrics.",
            )?,
            state,
            dcgm,
            gpus,
            ranks,
        };
        p.set_state("running");
        Ok(p)
    }

    fn set_state(&self, now: &str) {
        for s in STATES {
            self.state
                .with_label_values(&[s])
                .set(if s == now { 1.0 } else { 0.0 });
        }
    }
}

impl Sink for Prometheus {
    fn step(&mut self, row: &StepRow, rate: Option<f64>, _logged: bool) -> Result<(), String> {
        self.step.set(row.step as i64);
        self.steps.inc();
        self.epoch.set(row.epoch as i64);
        self.progress.set(row.progress);
        self.samples.inc_by(row.global_samples as f64);
        if let Some(r) = rate {
            self.samples_per_s.with_label_values::<&str>(&[]).set(r);
        }
        self.loss.set(f64::from(row.loss));
        self.accuracy.set(f64::from(row.accuracy));
        // as set (0.001, not 0.0010000000474974513): read as the flag's value
        if self.lr_seen != Some(row.lr) {
            self.lr_seen = Some(row.lr);
            self.lr.set(wide(row.lr));
        }
        self.global_batch.set(row.global_samples as i64);
        self.per_replica.set(row.per_replica as i64);
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
            let labels = self.mfu_labels.get(s.rank).and_then(Option::as_ref);
            if let (Some(l), Some(m)) = (labels, self.mfu_of.of(s.rank, s.samples, s.step_time)) {
                self.mfu.with_label_values(l).set(m);
            }
        }
        Ok(())
    }

    fn event(&mut self, ev: &Event, _t: Duration) -> Result<(), String> {
        match ev {
            Event::EpochDone {
                val_loss,
                val_accuracy,
                ..
            } => {
                if let Some(l) = val_loss {
                    self.val_loss.with_label_values::<&str>(&[]).set(wide(*l));
                }
                if let Some(a) = val_accuracy {
                    self.val_accuracy
                        .with_label_values::<&str>(&[])
                        .set(wide(*a));
                }
            }
            Event::Checkpoint { .. } => self.checkpoints.inc(),
            Event::DataSkipped { .. } => self.data_skipped.inc(),
            Event::Control {
                applied: Applied::Paused,
                ..
            } => self.set_state("paused"),
            Event::Control {
                applied: Applied::Resumed,
                ..
            } => self.set_state("running"),
            Event::Failed { .. } => self.set_state("failed"),
            Event::Finished { stopped, .. } => {
                // a failure said first stays the state
                let failed = self.state.with_label_values(&["failed"]).get() > 0.0;
                if !failed {
                    self.set_state(if *stopped { "stopped" } else { "completed" });
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
            Warning::StragglerCleared { .. } | Warning::DegradedCleared { .. } => {}
        }
        Ok(())
    }

    fn telemetry(
        &mut self,
        _t: Duration,
        devices: &[DeviceSample],
        process: Option<(u64, u64)>,
    ) -> Result<(), String> {
        for (g, s) in self.utilization.iter().zip(devices) {
            if let Some(u) = s.util {
                g.set(wide(u));
            }
        }
        for gpu in &self.gpus {
            let Some(s) = devices.get(gpu.rank) else {
                continue;
            };
            for (vec, (_, _, value)) in self.dcgm.iter().zip(&DCGM_FIELDS) {
                match value(s) {
                    Some(v) => vec.with_label_values(&gpu.labels).set(v),
                    // what NVML cannot read is left out, as dcgm-exporter does
                    None => {
                        let _ = vec.remove_label_values(&gpu.labels);
                    }
                }
            }
        }
        if let Some((rss, _)) = process {
            self.process_memory.set(rss as i64);
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), String> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::events::StepStats;
    use crate::observe::straggler::Cause;

    fn info() -> RunInfo {
        crate::observe::metrics::run_info(&serde_json::json!({
            "devices": ["gpu0", "gpu1"], "hosts": ["nodeA", "nodeA"],
            "device_names": ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"],
            "name": "r", "data": "d", "model": "m", "params": 1, "per_replica": 32,
            "flops_per_sample": 1_000_000,
        }))
        .unwrap()
    }

    fn row(step: u64) -> StepRow {
        let rank = |rank| StepStats {
            rank,
            step,
            epoch: 1,
            samples: 32,
            global_samples: 64,
            per_replica: 32,
            loss: 0.5,
            accuracy: 0.25,
            lr: 1e-3,
            data_wait: Duration::from_millis(1),
            compute: Duration::from_millis(10),
            compute_cpu: None,
            device_timed: true,
            comm: Duration::from_millis(2),
            sync_wait: Duration::from_millis(3 * rank as u64),
            transfer: Duration::ZERO,
            optimizer: Duration::from_millis(1),
            step_time: Duration::from_millis(15),
            at: Duration::from_millis(15 * step),
            after_pause: false,
            progress: 0.5,
        };
        StepRow {
            step,
            epoch: 1,
            loss: 0.5,
            accuracy: 0.25,
            lr: 1e-3,
            per_replica: 32,
            global_samples: 64,
            at: Duration::from_millis(15 * step),
            progress: 0.5,
            ranks: vec![rank(0), rank(1)],
        }
    }

    fn text(r: &Registry) -> String {
        String::from_utf8(http::render(r).unwrap()).unwrap()
    }

    /// The value of the series written exactly as `series` (name and labels).
    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    /// `promtool check metrics` on the text, where promtool is installed (CI installs it). It
    /// parses (exit 1 otherwise) and lints (exit 3): the one lint problem allowed is the one it
    /// finds in dcgm-exporter's own output, its camelCase labels (`modelName`, `UUID`).
    pub(crate) fn promtool_accepts(text: &str) {
        use std::io::Write;
        let child = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn();
        let Ok(mut child) = child else {
            assert!(
                std::env::var_os("MGTOP_REQUIRE_PROMTOOL").is_none(),
                "MGTOP_REQUIRE_PROMTOOL is set but promtool is missing: apt install prometheus"
            );
            eprintln!("SKIPPED promtool check: promtool is not installed (apt install prometheus)");
            return;
        };
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let o = child.wait_with_output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        let dcgm_labels_only = o.status.code() == Some(3)
            && said.lines().all(|l| {
                l.starts_with("DCGM_FI_DEV_")
                    && l.ends_with("label names should be written in 'snake_case' not 'camelCase'")
            });
        assert!(
            o.status.success() || dcgm_labels_only,
            "promtool ({:?}): {said}\n{text}",
            o.status.code()
        );
    }

    #[test]
    fn gpus_show_under_dcgm_names_and_labels_and_training_under_mgtop_names() {
        let reg = Registry::new();
        let ids = [
            GpuIdentity {
                index: Some(3),
                uuid: Some("GPU-5b4f".into()),
                minor: Some(3),
            },
            GpuIdentity::default(),
        ];
        let mut p = Prometheus::new(&reg, &info(), &ids).unwrap();
        let t = text(&reg);
        // nothing is shown as 0 before it is known
        for absent in [
            "DCGM_FI_DEV_GPU_UTIL{",
            "mgtop_validation_loss ",
            "mgtop_samples_per_second ",
            "mgtop_mfu_ratio{",
        ] {
            assert!(!t.contains(absent), "{absent} before any value:\n{t}");
        }
        assert_eq!(value(&t, r#"mgtop_run_state{state="running"}"#), Some(1.0));
        for s in 1..=4 {
            p.step(&row(s), Some(1000.0), s % 2 == 0).unwrap();
        }
        let gpu0 = DeviceSample {
            util: Some(0.5),
            mem_access: Some(0.25),
            mem_used: Some(2048 << 20),
            mem_total: Some(80 << 30),
            temp_c: Some(61.0),
            power_w: Some(350.5),
            sm_clock_mhz: Some(1980),
            pcie_tx_kbs: Some(1200),
            ..DeviceSample::default()
        };
        let gpu1 = DeviceSample {
            util: Some(1.0),
            ..DeviceSample::default()
        };
        p.telemetry(
            Duration::from_secs(1),
            &[gpu0, gpu1],
            Some((1 << 20, 1 << 30)),
        )
        .unwrap();
        p.warning(
            &Warning::Straggler {
                rank: 1,
                host: None,
                step: 4,
                slowdown: 2.0,
                work_ms: 20.0,
                fastest_rank: 0,
                fastest_ms: 10.0,
                others_wait_ms: 10.0,
                cause: Cause::DataBound {
                    data_ms: 9.0,
                    fastest_data_ms: 1.0,
                },
                injected: None,
            },
            Duration::from_secs(1),
        )
        .unwrap();
        p.event(
            &Event::EpochDone {
                epoch: 1,
                step: 4,
                train_loss: 0.5,
                val_loss: Some(0.4),
                val_accuracy: Some(0.9),
                elapsed: Duration::from_secs(1),
            },
            Duration::from_secs(1),
        )
        .unwrap();
        p.event(
            &Event::Checkpoint {
                step: 4,
                path: "c".into(),
            },
            Duration::from_secs(1),
        )
        .unwrap();
        p.event(
            &Event::Finished {
                step: 4,
                stopped: true,
            },
            Duration::from_secs(1),
        )
        .unwrap();
        let t = text(&reg);
        let gpu0 = r#"{Hostname="nodeA",UUID="GPU-5b4f",device="nvidia3",gpu="3",modelName="NVIDIA H100 80GB HBM3",pci_bus_id="",rank="0"}"#;
        let want = [
            ("DCGM_FI_DEV_GPU_UTIL", 50.0),
            ("DCGM_FI_DEV_MEM_COPY_UTIL", 25.0),
            ("DCGM_FI_DEV_FB_USED", 2048.0),
            ("DCGM_FI_DEV_FB_FREE", 80.0 * 1024.0 - 2048.0),
            ("DCGM_FI_DEV_GPU_TEMP", 61.0),
            ("DCGM_FI_DEV_POWER_USAGE", 350.5),
            ("DCGM_FI_DEV_SM_CLOCK", 1980.0),
            ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", 1200.0),
        ];
        for (name, v) in want {
            assert_eq!(value(&t, &format!("{name}{gpu0}")), Some(v), "{name}:\n{t}");
        }
        // what NVML did not give is left out; a GPU NVML does not know keeps its CUDA ordinal
        assert!(!t.contains("DCGM_FI_DEV_PCIE_RX_THROUGHPUT{"), "{t}");
        let gpu1 = r#"{Hostname="nodeA",UUID="",device="",gpu="1",modelName="NVIDIA H100 80GB HBM3",pci_bus_id="",rank="1"}"#;
        assert_eq!(
            value(&t, &format!("DCGM_FI_DEV_GPU_UTIL{gpu1}")),
            Some(100.0)
        );
        assert!(!t.contains(&format!("DCGM_FI_DEV_GPU_TEMP{gpu1}")), "{t}");
        let training = [
            ("mgtop_step", 4.0),
            ("mgtop_steps_total", 4.0),
            ("mgtop_samples_total", 256.0),
            ("mgtop_samples_per_second", 1000.0),
            ("mgtop_learning_rate", 0.001),
            ("mgtop_train_loss", 0.5),
            ("mgtop_validation_loss", 0.4),
            ("mgtop_validation_accuracy_ratio", 0.9),
            ("mgtop_global_batch_size", 64.0),
            ("mgtop_checkpoints_total", 1.0),
            (
                r#"mgtop_step_time_seconds_total{part="compute",rank="0",worker="nodeA/gpu0"}"#,
                0.04,
            ),
            (
                r#"mgtop_step_time_seconds_total{part="wait",rank="1",worker="nodeA/gpu1"}"#,
                0.012,
            ),
            (
                r#"mgtop_straggler_warnings_total{cause="data-bound",rank="1"}"#,
                1.0,
            ),
            (
                r#"mgtop_device_utilization_ratio{rank="0",worker="nodeA/gpu0"}"#,
                0.5,
            ),
            (r#"mgtop_run_state{state="stopped"}"#, 1.0),
            (r#"mgtop_run_state{state="running"}"#, 0.0),
            ("mgtop_process_resident_memory_bytes", 1048576.0),
        ];
        for (series, v) in training {
            let got = value(&t, series).unwrap_or_else(|| panic!("no {series}:\n{t}"));
            assert!((got - v).abs() < 1e-9, "{series} = {got}, not {v}");
        }
        // 32 samples x 3 MFLOP in 15 ms on an H100's 66.9 fp32 TFLOP/s
        let mfu = r#"mgtop_mfu_ratio{precision="fp32",rank="1",worker="nodeA/gpu1"}"#;
        let want = 3e6 * 32.0 / 0.015 / 66.9e12;
        let got = value(&t, mfu).unwrap_or_else(|| panic!("no {mfu}:\n{t}"));
        assert!((got / want - 1.0).abs() < 1e-9, "{got} vs {want}");
        promtool_accepts(&t);
    }

    #[test]
    fn a_failure_stays_the_state_after_the_end() {
        let reg = Registry::new();
        let mut p = Prometheus::new(&reg, &info(), &[]).unwrap();
        let fail = Event::Failed {
            rank: 1,
            step: 3,
            message: "x".into(),
        };
        p.event(&fail, Duration::ZERO).unwrap();
        p.event(
            &Event::Finished {
                step: 3,
                stopped: true,
            },
            Duration::ZERO,
        )
        .unwrap();
        let t = text(&reg);
        assert_eq!(value(&t, r#"mgtop_run_state{state="failed"}"#), Some(1.0));
        assert_eq!(value(&t, r#"mgtop_run_state{state="stopped"}"#), Some(0.0));
    }

    #[test]
    fn another_machines_gpus_are_not_shown_with_this_machines_nvml() {
        let mut info = info();
        info.hosts = vec!["nodeA".into(), "nodeB".into()];
        let reg = Registry::new();
        let mut p = Prometheus::new(&reg, &info, &[]).unwrap();
        let busy = DeviceSample {
            util: Some(0.5),
            ..DeviceSample::default()
        };
        p.telemetry(Duration::ZERO, &[busy.clone(), busy], None)
            .unwrap();
        let t = text(&reg);
        assert_eq!(t.matches("DCGM_FI_DEV_GPU_UTIL{").count(), 1, "{t}");
        assert!(t.contains(r#"Hostname="nodeA""#) && !t.contains(r#"Hostname="nodeB""#));
        // its rank's own figures are still there
        let series = r#"mgtop_device_utilization_ratio{rank="1",worker="nodeB/gpu1"}"#;
        assert_eq!(value(&t, series), Some(0.5));
    }
}
