//! Writes the metrics file as a run goes. Lifecycle records and telemetry are flushed as they
//! are written, so a reader of a running run's file (`view`) lags at most `--sample-interval`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use super::SCHEMA;
use crate::config::Budget;
use crate::engine::events::{Applied, Event};
use crate::engine::{Device, RunInfo};
use crate::observe::monitor::StepRow;
use crate::observe::straggler::Warning;
use crate::observe::telemetry::DeviceSample;

#[derive(Debug, thiserror::Error)]
#[error("cannot write metrics file {path}: {source}; pick a writable path for --metrics-out")]
pub struct MetricsError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// Writes every record to one or more files (the run directory's `metrics.jsonl` and
/// `--metrics-out`).
pub struct MetricsWriter {
    outs: Vec<(PathBuf, BufWriter<File>)>,
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

impl MetricsWriter {
    /// Checks that `path` can be written, without creating or truncating anything, so a run
    /// can refuse a bad path before it starts.
    pub fn preflight(path: &Path) -> Result<(), MetricsError> {
        let err = |source| MetricsError {
            path: path.to_path_buf(),
            source,
        };
        let parent = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !parent.is_dir() {
            return Err(err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("directory {} does not exist", parent.display()),
            )));
        }
        if path.exists() {
            std::fs::OpenOptions::new()
                .append(true)
                .open(path)
                .map_err(err)?;
        }
        Ok(())
    }

    /// Creates (truncates) every file in `paths`.
    pub fn create<P: AsRef<Path>>(paths: &[P]) -> Result<MetricsWriter, MetricsError> {
        let outs = paths
            .iter()
            .map(|p| {
                let path = p.as_ref().to_path_buf();
                match File::create(&path) {
                    Ok(f) => Ok((path, BufWriter::new(f))),
                    Err(source) => Err(MetricsError { path, source }),
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(MetricsWriter { outs })
    }

    fn line(&mut self, v: Value) -> Result<(), MetricsError> {
        let mut s = v.to_string();
        s.push('\n');
        for (path, out) in &mut self.outs {
            out.write_all(s.as_bytes()).map_err(|source| MetricsError {
                path: path.clone(),
                source,
            })?;
        }
        Ok(())
    }

    pub fn run_start(&mut self, info: &RunInfo) -> Result<(), MetricsError> {
        let budget = match info.budget {
            Budget::Epochs(e) => json!({ "epochs": e }),
            Budget::Steps(s) => json!({ "steps": s }),
        };
        let device_names: Vec<Option<&str>> = info
            .devices
            .iter()
            .map(|d| match d {
                Device::Gpu { name, .. } => Some(name.as_str()),
                Device::Cpu { .. } => None,
            })
            .collect();
        self.line(json!({
            "type": "run", "schema": SCHEMA, "name": info.name,
            "devices": info.devices.iter().map(|d| d.label()).collect::<Vec<_>>(),
            "ranks": info.ranks(), "model": info.model, "params": info.params, "data": info.data,
            "per_replica": info.per_replica, "grad_accum": info.grad_accum,
            "train_samples": info.train_samples, "val_samples": info.val_samples,
            "start_step": info.start_step, "baseline_samples_per_s": info.baseline,
            "resumed_from": info.resumed_from.as_ref().map(|p| p.display().to_string()),
            "run_dir": info.run_dir.as_ref().map(|p| p.display().to_string()),
            "budget": budget, "lr": info.lr, "start_epoch": info.start_epoch,
            "device_names": device_names, "device_note": info.device_note,
        }))?;
        self.flush()
    }

    pub fn step(&mut self, row: &StepRow, samples_per_s: Option<f64>) -> Result<(), MetricsError> {
        let per_rank: Vec<Value> = row
            .ranks
            .iter()
            .map(|r| {
                json!({
                    "rank": r.rank, "samples": r.samples, "step_ms": ms(r.step_time),
                    "data_wait_ms": ms(r.data_wait), "compute_ms": ms(r.compute), "comm_ms": ms(r.comm),
                    "sync_wait_ms": ms(r.sync_wait), "optimizer_ms": ms(r.optimizer),
                })
            })
            .collect();
        self.line(json!({
            "type": "step", "step": row.step, "epoch": row.epoch, "t": row.at.as_secs_f64(),
            "loss": row.loss, "accuracy": row.accuracy, "lr": row.lr,
            "per_replica": row.per_replica, "ranks": row.ranks.len(), "global_batch": row.global_samples,
            "samples_per_s": samples_per_s, "progress": row.progress, "per_rank": per_rank,
        }))
    }

    /// Lifecycle events (`t` is seconds since the run started, as the frontend saw it).
    pub fn event(&mut self, ev: &Event, t: Duration) -> Result<(), MetricsError> {
        let t = t.as_secs_f64();
        let v = match ev {
            Event::Started { .. } => return Ok(()),
            Event::EpochDone {
                epoch,
                step,
                train_loss,
                val_loss,
                val_accuracy,
                ..
            } => json!({
                "type": "epoch", "epoch": epoch, "step": step, "t": t,
                "train_loss": train_loss, "val_loss": val_loss, "val_accuracy": val_accuracy,
            }),
            Event::Checkpoint { step, path } => {
                json!({"type": "event", "kind": "checkpoint", "step": step, "t": t, "path": path.display().to_string()})
            }
            Event::Control { step, applied } => {
                let mut v = json!({"type": "event", "kind": "control", "step": step, "t": t});
                match applied {
                    Applied::Paused => v["action"] = "pause".into(),
                    Applied::Resumed => v["action"] = "resume".into(),
                    Applied::BatchSize { from, to, lr } => {
                        v["action"] = "batch_size".into();
                        v["from"] = (*from).into();
                        v["to"] = (*to).into();
                        v["lr"] = (*lr).into();
                    }
                    Applied::Split(sizes) => {
                        v["action"] = "rebalance".into();
                        v["split"] = sizes.clone().into();
                    }
                }
                v
            }
            Event::Failed {
                rank,
                step,
                message,
            } => {
                json!({"type": "event", "kind": "error", "rank": rank, "step": step, "t": t, "message": message})
            }
            Event::Finished { step, stopped } => {
                json!({"type": "end", "step": step, "t": t, "status": if *stopped { "stopped" } else { "completed" }})
            }
        };
        self.line(v)?;
        self.flush()
    }

    /// Every device's sample at `t` (values a device cannot report are null), and the
    /// process's resident memory.
    pub fn telemetry(
        &mut self,
        t: Duration,
        devices: &[DeviceSample],
        process: Option<(u64, u64)>,
    ) -> Result<(), MetricsError> {
        let devices: Vec<Value> = devices
            .iter()
            .enumerate()
            .map(|(rank, d)| {
                json!({
                    "rank": rank, "util": d.util, "mem_access": d.mem_access,
                    "mem_used": d.mem_used, "mem_total": d.mem_total, "temp_c": d.temp_c,
                    "power_w": d.power_w, "power_limit_w": d.power_limit_w,
                    "sm_clock_mhz": d.sm_clock_mhz, "sm_clock_max_mhz": d.sm_clock_max_mhz,
                    "throttle": d.throttle_reasons.map(crate::observe::nvml::throttle_names),
                    "pcie_rx_kbs": d.pcie_rx_kbs, "pcie_tx_kbs": d.pcie_tx_kbs,
                })
            })
            .collect();
        self.line(json!({
            "type": "telemetry", "t": t.as_secs_f64(), "devices": devices,
            "process_rss": process.map(|p| p.0), "machine_memory": process.map(|p| p.1),
        }))?;
        self.flush()
    }

    /// A straggler / degraded / stall warning (or its clearing).
    pub fn warning(&mut self, w: &Warning, t: Duration) -> Result<(), MetricsError> {
        let mut v = json!({"type": "event", "kind": w.kind(), "t": t.as_secs_f64(), "message": w.to_string()});
        match w {
            Warning::Straggler {
                rank,
                step,
                slowdown,
                work_ms,
                fastest_rank,
                fastest_ms,
                others_wait_ms,
                cause,
                ..
            } => {
                v["rank"] = (*rank).into();
                v["step"] = (*step).into();
                v["slowdown"] = (*slowdown).into();
                v["work_ms"] = (*work_ms).into();
                v["fastest_rank"] = (*fastest_rank).into();
                v["fastest_ms"] = (*fastest_ms).into();
                v["others_wait_ms"] = (*others_wait_ms).into();
                v["cause"] = cause.kind().into();
            }
            Warning::StragglerCleared { rank, step } | Warning::DegradedCleared { rank, step } => {
                v["rank"] = (*rank).into();
                v["step"] = (*step).into();
            }
            Warning::Degraded {
                rank,
                step,
                median_ms,
                best_ms,
            } => {
                v["rank"] = (*rank).into();
                v["step"] = (*step).into();
                v["work_ms"] = (*median_ms).into();
                v["best_ms"] = (*best_ms).into();
            }
            Warning::Stall {
                step,
                waited,
                missing,
            } => {
                v["step"] = (*step).into();
                v["waited_s"] = waited.as_secs_f64().into();
                v["missing_ranks"] = missing.clone().into();
            }
        }
        self.line(v)
    }

    pub fn flush(&mut self) -> Result<(), MetricsError> {
        for (path, out) in &mut self.outs {
            out.flush().map_err(|source| MetricsError {
                path: path.clone(),
                source,
            })?;
        }
        Ok(())
    }
}

/// The metrics file as frontends use it: an optional writer that, after its first failure,
/// reports the problem once and writes no more (training goes on).
pub struct Recorder(Option<MetricsWriter>);

impl Recorder {
    pub fn new(writer: Option<MetricsWriter>) -> Recorder {
        Recorder(writer)
    }

    /// Writes one record; returns the warning to show if this write failed.
    pub fn record(
        &mut self,
        write: impl FnOnce(&mut MetricsWriter) -> Result<(), MetricsError>,
    ) -> Option<String> {
        let e = self.0.as_mut().and_then(|w| write(w).err())?;
        self.0 = None;
        Some(format!("warning: {e}; no more metrics will be written"))
    }
}
