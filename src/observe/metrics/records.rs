//! Each record of the schema, built once as one JSON line (`Line`) that every sink takes: the
//! metrics files and the live socket's hub.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::SCHEMA;
use crate::config::Budget;
use crate::engine::control::Control;
use crate::engine::events::{Applied, Event};
use crate::engine::{Device, RunInfo};
use crate::observe::mfu::Mfu;
use crate::observe::monitor::StepRow;
use crate::observe::sample::DeviceSample;
use crate::observe::straggler::Warning;

/// One record as written: its JSON text and the newline after it. Cheap to clone (shared).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line(Arc<str>);

impl Line {
    pub fn new(v: &Value) -> Line {
        let mut s = v.to_string();
        s.push('\n');
        Line(s.into())
    }

    /// The text, newline included.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// The first record: what the run is.
pub fn run(info: &RunInfo) -> Value {
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
    let mut v = json!({
        "type": "run", "schema": SCHEMA, "name": info.name,
        "devices": info.devices.iter().map(|d| d.label()).collect::<Vec<_>>(),
        "ranks": info.ranks(), "model": info.model, "params": info.params, "data": info.data,
        "flops_per_sample": info.flops,
        "per_replica": info.per_replica, "grad_accum": info.grad_accum,
        "train_samples": info.train_samples, "val_samples": info.val_samples,
        "val_every": info.val_every,
        "start_step": info.start_step, "baseline_samples_per_s": info.baseline,
        "resumed_from": info.resumed_from.as_ref().map(|p| p.display().to_string()),
        "best_before": info.best_before,
        "run_dir": info.run_dir.as_ref().map(|p| p.display().to_string()),
        "checkpoint_dir": info.checkpoint_dir.as_ref().map(|p| p.display().to_string()),
        "budget": budget, "lr": info.lr,
        "schedule": info.schedule.to_string(), "warmup": info.warmup,
        "clip_grad_norm": info.clip_grad_norm.map(crate::config::record::short),
        "start_epoch": info.start_epoch,
        "device_names": device_names, "device_note": info.device_note,
        "precision_notes": info.precision_notes, "data_notes": info.data_notes,
        "model_notes": info.model_notes,
        "precision": info.precision.name(), "grad_dtype": info.grad_dtype.name(),
        "hosts": info.hosts, "host": info.host, "processes": info.processes,
        "strategy": info.strategy.to_string(), "sync_warmup": info.strategy.sync_warmup(),
        "started_unix": info.started.map(crate::observe::tensorboard::unix_seconds),
    });
    // (the input, apart: one macro call of them all passes its recursion limit)
    v["pictures"] = info.pictures.into();
    v["loader_threads"] = info.loader_threads.into();
    v["prefetch"] = info.prefetch.into();
    v
}

/// An outside load's machine, where it is another than process 0's: its first rank and host.
fn other_machine(v: &mut Value, rank: Option<usize>, host: &Option<String>) {
    if let (Some(r), Some(h)) = (rank, host) {
        (v["rank"], v["host"]) = (r.into(), h.clone().into());
    }
}

/// A step as every rank saw it, and the samples/s measured then; each GPU rank's MFU where
/// `mfu` knows its peak.
pub fn step(row: &StepRow, samples_per_s: Option<f64>, mfu: Option<&Mfu>) -> Value {
    let per_rank: Vec<Value> = row
        .ranks
        .iter()
        .map(|r| {
            let mfu = mfu.and_then(|m| m.of(r.rank, r.samples, r.step_time));
            json!({
                "rank": r.rank, "samples": r.samples, "step_ms": ms(r.step_time),
                "data_wait_ms": ms(r.data_wait), "compute_ms": ms(r.compute), "comm_ms": ms(r.comm),
                "sync_wait_ms": ms(r.sync_wait), "optimizer_ms": ms(r.optimizer),
                "transfer_ms": ms(r.transfer), "loader_busy_ms": r.loader_busy.map(ms),
                "mfu": mfu.map(|m| (m * 1e5).round() / 1e5),
            })
        })
        .collect();
    json!({
        "type": "step", "step": row.step, "epoch": row.epoch, "t": row.at.as_secs_f64(),
        "loss": row.loss, "accuracy": row.accuracy, "grad_norm": row.grad_norm, "lr": row.lr,
        "per_replica": row.per_replica, "ranks": row.ranks.len(), "global_batch": row.global_samples,
        "samples_per_s": samples_per_s, "progress": row.progress,
        "epoch_ends_at": row.ends_at.map(|e| e.epoch), "run_ends_at": row.ends_at.map(|e| e.run),
        "per_rank": per_rank,
        "totals": row.totals.map(|t| json!({
            "steps": t.steps, "samples": t.samples, "train_s": t.train_s, "rank_s": t.rank_s,
            "compute_s": t.compute_s, "data_s": t.data_s, "comm_s": t.comm_s, "wait_s": t.wait_s,
            "transfer_s": t.transfer_s, "loader_s": t.loader_s, "smoothed_loss": t.smoothed_loss,
        })),
    })
}

/// A lifecycle event (`t`: seconds since the run started, as the frontend saw it); `None` for
/// what the file does not record (the start: the `run` record says it).
pub fn event(ev: &Event, t: Duration) -> Option<Value> {
    let t = t.as_secs_f64();
    Some(match ev {
        Event::Started { .. } => return None,
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
        Event::Validated {
            step,
            epochs,
            val_loss,
            val_accuracy,
            ..
        } => json!({
            "type": "validation", "step": step, "epochs": epochs, "t": t,
            "val_loss": val_loss, "val_accuracy": val_accuracy,
        }),
        Event::Validating { step, samples } => {
            json!({"type": "event", "kind": "validating", "step": step, "t": t, "samples": samples})
        }
        Event::Checkpoint { step, path, best } => {
            // absolute (the engine's checkpoint directory is): `--resume RUN_DIR` finds a
            // run's checkpoints wherever they went (a best one is not what it takes)
            let path = path.display().to_string();
            match best {
                None => {
                    json!({"type": "event", "kind": "checkpoint", "step": step, "t": t, "path": path})
                }
                Some(a) => {
                    json!({"type": "event", "kind": "best_checkpoint", "step": step, "t": t, "path": path, "val_accuracy": a})
                }
            }
        }
        Event::InSync { step, ranks } => {
            json!({"type": "event", "kind": "in_sync", "step": step, "t": t, "ranks": ranks})
        }
        Event::DataSkipped { step, message } => {
            json!({"type": "event", "kind": "data_skipped", "step": step, "t": t, "message": message})
        }
        Event::Warning { step, message } => {
            json!({"type": "event", "kind": "warning", "step": step, "t": t, "message": message})
        }
        Event::DeviceNote { rank, message } => {
            json!({"type": "event", "kind": "device_note", "rank": rank, "t": t, "message": message})
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
        Event::Asked { step, control, by } => {
            let mut v = json!({"type": "event", "kind": "asked", "step": step, "t": t, "request": control.action(), "by": by});
            match control {
                Control::Stop { checkpoint } => v["checkpoint"] = (*checkpoint).into(),
                Control::SetBatch(b) => v["per_replica"] = (*b).into(),
                Control::Pause | Control::Resume | Control::Checkpoint => {}
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
        Event::Finished { step, ending } => {
            json!({"type": "end", "step": step, "t": t, "status": ending.word()})
        }
    })
}

/// Every device's sample at `t` (values a device cannot report are null), and the process's
/// resident memory beside the machine's.
pub fn telemetry(t: Duration, devices: &[DeviceSample], process: Option<(u64, u64)>) -> Value {
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
                "sm_active": d.sm_active, "tensor_active": d.tensor_active,
            })
        })
        .collect();
    json!({
        "type": "telemetry", "t": t.as_secs_f64(), "devices": devices,
        "process_rss": process.map(|p| p.0), "machine_memory": process.map(|p| p.1),
    })
}

/// A detector's warning (straggler, degraded, stall, bound, gradient spike) or its clearing.
pub fn warning(w: &Warning, t: Duration) -> Value {
    let mut v =
        json!({"type": "event", "kind": w.kind(), "t": t.as_secs_f64(), "message": w.to_string()});
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
            host,
            ..
        } => {
            v["rank"] = (*rank).into();
            if let Some(h) = host {
                v["host"] = h.clone().into();
            }
            v["step"] = (*step).into();
            v["slowdown"] = (*slowdown).into();
            v["work_ms"] = (*work_ms).into();
            v["fastest_rank"] = (*fastest_rank).into();
            v["fastest_ms"] = (*fastest_ms).into();
            v["others_wait_ms"] = (*others_wait_ms).into();
            v["cause"] = cause.kind().into();
        }
        Warning::StragglerCleared { rank, step } | Warning::DegradedCleared { rank, step, .. } => {
            v["rank"] = (*rank).into();
            v["step"] = (*step).into();
        }
        Warning::Degraded {
            rank,
            step,
            median_ms,
            best_ms,
            ..
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
            injected,
            suspended,
        } => {
            v["step"] = (*step).into();
            v["waited_s"] = waited.as_secs_f64().into();
            v["missing_ranks"] = missing.clone().into();
            v["injected"] = injected.clone().into();
            v["suspended_pid"] = suspended.as_ref().map(|p| p.pid).into();
        }
        Warning::Bound { step, bound } => {
            v["step"] = (*step).into();
            v["step_ms"] = bound.step_ms.into();
            v["data_ms"] = bound.data_ms.into();
            v["data_step_ms"] = bound.data_step_ms.into();
            v["data_share"] = bound.data_share.into();
            v["loaders_busy"] = bound.loaders.into();
            v["util"] = bound.util.into();
            v["mfu"] = bound.mfu.into();
        }
        Warning::BoundCleared { step, .. } => {
            v["step"] = (*step).into();
        }
        Warning::GradSpike(spike) => {
            v["step"] = spike.step.into();
            v["grad_norm"] = spike.norm.into();
            v["median"] = spike.median.into();
            // (the spikes it is said for: itself, and those of its minute held with it)
            v["spikes"] = spike.said_for.count.into();
            v["first_step"] = spike.said_for.first.into();
            v["last_step"] = spike.said_for.last.into();
        }
        Warning::OutsideLoad {
            step,
            load,
            rank,
            host,
        } => {
            other_machine(&mut v, *rank, host);
            v["step"] = (*step).into();
            v["cores"] = load.cores.into();
            v["ours_cores"] = load.ours.into();
            v["others_cores"] = load.others.into();
            v["top"] = load.top.as_ref().map(|t| t.0.clone()).into();
        }
        Warning::OutsideLoadCleared {
            step,
            rank,
            host,
            unheard,
        } => {
            other_machine(&mut v, *rank, host);
            v["step"] = (*step).into();
            if *unheard {
                v["unheard"] = true.into();
            }
        }
    }
    v
}
