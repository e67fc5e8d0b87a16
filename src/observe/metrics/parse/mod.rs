//! One metrics-file line (already JSON) into the engine's types; errors are the words after
//! "line N:" (the reader adds the file and the line).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::fields::{array, count, field, num, opt_num, opt_uint, seconds, text, uint};

use super::SCHEMA;
use crate::config::Budget;
use crate::engine::checkpoint::BestVal;
use crate::engine::control::Control;
use crate::engine::events::{Applied, Ending, Event};
use crate::engine::strategy::Strategy;
use crate::engine::{Device, RunInfo};
use crate::nn::precision::Precision;
use crate::observe::monitor::StepRow;
use crate::observe::nvml::throttle_bits;
use crate::observe::sample::DeviceSample;
use crate::observe::straggler::{SaidFor, Warning};

/// The most ranks a run may have.
pub const MAX_RANKS: usize = 1024;

/// One record after the `run` record.
#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    /// A step as every rank saw it, and the samples/s measured when it was written.
    Step {
        row: StepRow,
        samples_per_s: Option<f64>,
    },
    /// `epoch`, a checkpoint, control or error `event`, and `end` (as `Event::Finished`).
    Event { t: Duration, event: Event },
    /// A detector's warning or its clearing (`kind` ends in `_cleared`), in the log's words.
    Warning {
        t: Duration,
        kind: String,
        /// The rank it is about (a straggler's, a degraded device's).
        rank: Option<usize>,
        /// The step it was said at (a gradient spike's), where recorded.
        step: Option<u64>,
        /// A gradient spike's: the spikes it was said for (one in files from before a warning
        /// was said for several).
        spikes: Option<SaidFor>,
        message: String,
    },
    Telemetry {
        t: Duration,
        devices: Vec<DeviceSample>,
        /// This process's resident memory and the machine's, in bytes.
        process_memory: Option<(u64, u64)>,
    },
}

impl Record {
    /// A detector's warning as its record reads back.
    pub fn warning(w: &Warning, t: Duration) -> Record {
        Record::Warning {
            t,
            kind: w.kind().to_string(),
            rank: w.rank(),
            step: Some(w.step()),
            spikes: match w {
                Warning::GradSpike(s) => Some(s.said_for),
                _ => None,
            },
            message: w.to_string(),
        }
    }
}

pub(super) type Parsed<T> = Result<T, String>;

/// The first line of a metrics file or a live socket: a `run` record of this schema.
pub fn run_line(text: &[u8]) -> Parsed<RunInfo> {
    let v: Value =
        serde_json::from_slice(text).map_err(|_| "not JSON: not a metrics file".to_string())?;
    if v["type"] != "run" {
        return Err("not a `run` record: not an mgtop-train metrics file".into());
    }
    if v["schema"] != SCHEMA {
        return Err(format!(
            "schema {}; this mgtop-train reads {SCHEMA} (the file is from another version)",
            v["schema"]
        ));
    }
    run_info(&v)
}

/// Any line after the first, of a run of `ranks` ranks; `None` for what is skipped (a blank
/// line, an unknown type or event kind).
pub fn record_line(text: &[u8], ranks: usize) -> Parsed<Option<Record>> {
    if text.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    // (serde counts lines of the one line it was given: its column alone means something)
    let v: Value = serde_json::from_slice(text)
        .map_err(|e| format!("not JSON ({e})").replace(" at line 1 column ", " at column "))?;
    record(&v, ranks)
}

fn device(label: &str, name: Option<&str>) -> Parsed<Device> {
    let index = |rest: &str| rest.parse::<usize>().ok();
    match (label.strip_prefix("cpu"), label.strip_prefix("gpu")) {
        (Some(i), _) if index(i).is_some() => Ok(Device::Cpu {
            index: index(i).unwrap_or(0),
        }),
        (_, Some(i)) if index(i).is_some() => Ok(Device::Gpu {
            index: index(i).unwrap_or(0),
            name: name.unwrap_or("GPU").to_string(),
            pci_bus_id: None,
            arch: 0,
        }),
        _ => Err(format!("device `{label}` is neither cpuN nor gpuN")),
    }
}

/// The `run` record. Fields older files lack: `budget` (0 steps), `lr` (0), `start_epoch`
/// (0), `device_names` ("GPU"); never in the file: the cores and threads (one per rank), the
/// injected faults (none), the stall timeout (60 s) and how the LR and batch were chosen.
pub fn run_info(v: &Value) -> Parsed<RunInfo> {
    let labels = array(v, "devices")?;
    if labels.is_empty() || labels.len() > MAX_RANKS {
        return Err(format!(
            "{} devices: a run has 1 to {MAX_RANKS}",
            labels.len()
        ));
    }
    let names = field(v, "device_names").and_then(Value::as_array);
    let devices = labels
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let name = names.and_then(|n| n.get(i)).and_then(Value::as_str);
            device(l.as_str().unwrap_or("?"), name)
        })
        .collect::<Parsed<Vec<Device>>>()?;
    let budget = match field(v, "budget") {
        None => Budget::Steps(0),
        Some(b) if b.get("epochs").is_some() => Budget::Epochs(uint(b, "epochs")?),
        Some(b) => Budget::Steps(uint(b, "steps")?),
    };
    let ranks = devices.len();
    // runs over several processes name every rank's host
    let hosts: Vec<String> = field(v, "hosts")
        .and_then(Value::as_array)
        .map(|h| {
            h.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .filter(|h: &Vec<String>| h.len() == ranks)
        .unwrap_or_default();
    // (the start-up's notes; older files have none)
    let notes = |key: &str| -> Vec<String> {
        (field(v, key).and_then(Value::as_array))
            .map(|n| {
                n.iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    Ok(RunInfo {
        // (a hand-edited file's name of a million characters: cut to what --name takes)
        name: {
            let name = text(v, "name")?;
            match name.char_indices().nth(crate::config::MAX_NAME_CHARS) {
                Some((at, _)) => format!("{}…", &name[..at]),
                None => name.to_string(),
            }
        },
        devices,
        processes: count(v, "processes").unwrap_or(1).max(1),
        peers_here: Vec::new(),
        process: 0,
        host: (field(v, "host").and_then(Value::as_str).map(String::from))
            .or_else(|| hosts.first().cloned()),
        hosts,
        device_note: field(v, "device_note")
            .and_then(Value::as_str)
            .map(String::from),
        others_notes: Vec::new(),
        // files written before the GPUs had a choice computed in fp32
        precision: field(v, "precision")
            .and_then(Value::as_str)
            .and_then(|p| p.parse().ok())
            .unwrap_or(Precision::Fp32),
        precision_notes: notes("precision_notes"),
        cuda_graph: None,
        step_metrics: None,
        // (files written before --grad-dtype carried fp32)
        grad_dtype: field(v, "grad_dtype")
            .and_then(Value::as_str)
            .and_then(|g| g.parse().ok())
            .unwrap_or_default(),
        convolutions: None,
        data: text(v, "data")?.to_string(),
        model: text(v, "model")?.to_string(),
        params: count(v, "params")?,
        per_replica: count(v, "per_replica")?,
        grad_accum: count(v, "grad_accum").unwrap_or(1).max(1),
        lr: opt_num(v, "lr")?.unwrap_or(0.0) as f32,
        lr_note: None,
        // (older files did not say: constant, as far as they tell)
        schedule: field(v, "schedule")
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok())
            .unwrap_or_default(),
        warmup: opt_uint(v, "warmup")?.unwrap_or(0),
        // (older files: not clipped)
        clip_grad_norm: opt_num(v, "clip_grad_norm")?.map(|c| c as f32),
        resume_note: None,
        train_samples: count(v, "train_samples").unwrap_or(0),
        val_samples: count(v, "val_samples").unwrap_or(0),
        val_every: opt_uint(v, "val_every")?,
        budget,
        start_step: opt_uint(v, "start_step")?.unwrap_or(0),
        start_epoch: opt_uint(v, "start_epoch")?.unwrap_or(0),
        resumed_from: field(v, "resumed_from")
            .and_then(Value::as_str)
            .map(PathBuf::from),
        // (older files did not say; a damaged one's is not told)
        best_before: field(v, "best_before")
            .and_then(|b| serde_json::from_value::<BestVal>(b.clone()).ok())
            .filter(|b| (0.0..=1.0).contains(&b.accuracy)),
        layers: Vec::new(),
        flops: uint(v, "flops_per_sample").unwrap_or(0),
        model_notes: notes("model_notes"),
        data_notes: notes("data_notes"),
        // (files written before they were recorded: samples held ready, one loader thread)
        pictures: field(v, "pictures").and_then(Value::as_bool) == Some(true),
        loader_threads: opt_uint(v, "loader_threads")?.map_or(1, |t| t as usize),
        prefetch: opt_uint(v, "prefetch")?.map_or(0, |p| p as usize),
        run_dir: field(v, "run_dir")
            .and_then(Value::as_str)
            .map(PathBuf::from),
        run_dir_note: None,
        checkpoint_dir: field(v, "checkpoint_dir")
            .and_then(Value::as_str)
            .map(PathBuf::from),
        cores: ranks,
        threads_per_worker: 1,
        injected: vec![None; ranks],
        stall_timeout: Duration::from_secs(60),
        baseline: opt_num(v, "baseline_samples_per_s")?,
        // files written before strategies were mirrored
        strategy: field(v, "strategy")
            .and_then(Value::as_str)
            .and_then(|s| s.parse::<Strategy>().ok())
            .map(|s| {
                s.with_warmup(opt_uint(v, "sync_warmup").ok().flatten().unwrap_or(0))
                    .unwrap_or(s)
            })
            .unwrap_or_default(),
        started: opt_num(v, "started_unix")?
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .map(|d| std::time::UNIX_EPOCH + d),
    })
}

/// Any record after the first; `None` for what is skipped (an unknown type or event kind).
pub fn record(v: &Value, ranks: usize) -> Parsed<Option<Record>> {
    let t = || seconds(v, "t");
    let kind = text(v, "type")?;
    Ok(Some(match kind {
        "step" => super::step_record::step(v, ranks)?,
        "epoch" => Record::Event {
            t: t()?,
            event: Event::EpochDone {
                epoch: uint(v, "epoch")?,
                step: uint(v, "step")?,
                train_loss: opt_num(v, "train_loss")?.unwrap_or(f64::NAN) as f32,
                val_loss: opt_num(v, "val_loss")?.map(|x| x as f32),
                val_accuracy: opt_num(v, "val_accuracy")?.map(|x| x as f32),
                elapsed: t()?,
            },
        },
        "validation" => Record::Event {
            t: t()?,
            event: Event::Validated {
                step: uint(v, "step")?,
                epochs: num(v, "epochs")? as f32,
                // (a NaN loss is written null)
                val_loss: opt_num(v, "val_loss")?.unwrap_or(f64::NAN) as f32,
                val_accuracy: num(v, "val_accuracy")? as f32,
                elapsed: t()?,
            },
        },
        "end" => Record::Event {
            t: t()?,
            event: Event::Finished {
                step: uint(v, "step")?,
                ending: {
                    let s = text(v, "status")?;
                    Ending::from_word(s).ok_or_else(|| {
                        format!("`status` {s:?} is none of completed, stopped and quit")
                    })?
                },
            },
        },
        "event" => return event(v, t()?),
        "telemetry" => telemetry(v, ranks)?,
        "run" => return Err("a second `run` record: two runs in one file".into()),
        _ => return Ok(None),
    }))
}

fn event(v: &Value, t: Duration) -> Parsed<Option<Record>> {
    let kind = text(v, "kind")?;
    let event = match kind {
        "checkpoint" => Event::Checkpoint {
            step: uint(v, "step")?,
            path: PathBuf::from(text(v, "path")?),
            best: None,
        },
        "best_checkpoint" => Event::Checkpoint {
            step: uint(v, "step")?,
            path: PathBuf::from(text(v, "path")?),
            best: Some(num(v, "val_accuracy")? as f32),
        },
        "validating" => Event::Validating {
            step: uint(v, "step")?,
            samples: count(v, "samples")?,
        },
        "in_sync" => Event::InSync {
            step: uint(v, "step")?,
            ranks: count(v, "ranks")?,
        },
        "data_skipped" => Event::DataSkipped {
            step: uint(v, "step")?,
            message: text(v, "message")?.to_string(),
        },
        "warning" => Event::Warning {
            step: uint(v, "step")?,
            message: text(v, "message")?.to_string(),
        },
        "error" => Event::Failed {
            rank: count(v, "rank")?,
            step: uint(v, "step")?,
            message: text(v, "message")?.to_string(),
        },
        "control" => Event::Control {
            step: uint(v, "step")?,
            applied: match text(v, "action")? {
                "pause" => Applied::Paused,
                "resume" => Applied::Resumed,
                "batch_size" => Applied::BatchSize {
                    from: count(v, "from")?,
                    to: count(v, "to")?,
                    lr: num(v, "lr")? as f32,
                },
                "rebalance" => Applied::Split(
                    array(v, "split")?
                        .iter()
                        .take(MAX_RANKS)
                        .map(|x| x.as_u64().map(|n| n as usize))
                        .collect::<Option<_>>()
                        .ok_or("`split` is not a list of sample counts")?,
                ),
                a => return Err(format!("unknown control action {a:?}")),
            },
        },
        "asked" => Event::Asked {
            step: uint(v, "step")?,
            control: match text(v, "request")? {
                "pause" => Control::Pause,
                "resume" => Control::Resume,
                "checkpoint" => Control::Checkpoint,
                "stop" => Control::Stop {
                    checkpoint: field(v, "checkpoint").and_then(Value::as_bool) != Some(false),
                },
                "batch_size" => Control::SetBatch(count(v, "per_replica")?),
                a => return Err(format!("unknown asked action {a:?}")),
            },
            by: text(v, "by")?.to_string(),
        },
        // a detector's warning: shown in its own words
        _ => {
            return Ok(field(v, "message")
                .and_then(Value::as_str)
                .map(|m| Record::Warning {
                    t,
                    kind: kind.to_string(),
                    rank: field(v, "rank")
                        .and_then(Value::as_u64)
                        .and_then(|r| usize::try_from(r).ok()),
                    step: field(v, "step").and_then(Value::as_u64),
                    spikes: (kind == "grad_spike").then(|| said_for(v)).flatten(),
                    message: m.to_string(),
                }))
        }
    };
    Ok(Some(Record::Event { t, event }))
}

/// The spikes a `grad_spike` record was said for: one, at its step, in older files.
fn said_for(v: &Value) -> Option<SaidFor> {
    let at = |k| field(v, k).and_then(Value::as_u64);
    let step = at("step")?;
    Some(match (at("spikes"), at("first_step"), at("last_step")) {
        (Some(count), Some(first), Some(last)) if count >= 1 && first <= last => {
            SaidFor { count, first, last }
        }
        _ => SaidFor::one(step),
    })
}

fn telemetry(v: &Value, ranks: usize) -> Parsed<Record> {
    let list = array(v, "devices")?;
    if list.len() > ranks {
        return Err(format!(
            "`devices` has {} entries; the run has {ranks} ranks",
            list.len()
        ));
    }
    let f32_of = |d: &Value, k: &str| opt_num(d, k).map(|x| x.map(|x| x as f32));
    let u32_of = |d: &Value, k: &str| {
        opt_uint(d, k).map(|x| x.map(|x| u32::try_from(x).unwrap_or(u32::MAX)))
    };
    let mut devices = vec![DeviceSample::default(); ranks];
    for d in list {
        let rank = count(d, "rank")?;
        let slot = devices
            .get_mut(rank)
            .ok_or_else(|| format!("telemetry of rank {rank}; the run has {ranks} ranks"))?;
        *slot = DeviceSample {
            util: f32_of(d, "util")?,
            mem_access: f32_of(d, "mem_access")?,
            mem_used: opt_uint(d, "mem_used")?,
            mem_total: opt_uint(d, "mem_total")?,
            temp_c: f32_of(d, "temp_c")?,
            power_w: f32_of(d, "power_w")?,
            power_limit_w: f32_of(d, "power_limit_w")?,
            sm_clock_mhz: u32_of(d, "sm_clock_mhz")?,
            sm_clock_max_mhz: u32_of(d, "sm_clock_max_mhz")?,
            throttle_reasons: field(d, "throttle")
                .and_then(Value::as_array)
                .map(|names| throttle_bits(names.iter().filter_map(Value::as_str))),
            pcie_rx_kbs: u32_of(d, "pcie_rx_kbs")?,
            pcie_tx_kbs: u32_of(d, "pcie_tx_kbs")?,
            sm_active: f32_of(d, "sm_active")?,
            tensor_active: f32_of(d, "tensor_active")?,
        };
    }
    let process_memory = match (opt_uint(v, "process_rss")?, opt_uint(v, "machine_memory")?) {
        (Some(rss), Some(total)) => Some((rss, total)),
        _ => None,
    };
    Ok(Record::Telemetry {
        t: seconds(v, "t")?,
        devices,
        process_memory,
    })
}

#[cfg(test)]
mod tests;
