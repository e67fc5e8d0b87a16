//! TensorBoard scalars from the metrics stream (`--tensorboard`, `view --tensorboard`): one
//! event file per run, written by the recorder as records come (or from a metrics file read
//! back), each event written whole as it comes (and a write that failed taken back).
//!
//! Tags (the part before the first `/` is TensorBoard's group):
//! - logged steps: `train/loss`, `train/accuracy`, `train/grad_norm` (where recorded),
//!   `train/learning_rate`, `train/global_batch`, `train/samples_per_s`; per rank `step_time/<part>_ms/rank<R>` for `step`, `data_wait`,
//!   `compute`, `comm` (the all-reduce), `sync_wait` (waiting for slower ranks), `optimizer`,
//!   `transfer` (host-device copies), and `loader_busy` (not a part of the step: its loader threads' time building its batch,
//!   over their number; over `step`, how busy they are);
//! - epochs: `train/epoch_loss`, `validation/loss`, `validation/accuracy`;
//! - samples (at the newest step a logged step or an event has told of): `utilization/rank<R>` and `memory_access/rank<R>` in
//!   %, `memory_used_mib/rank<R>`, `power_w/rank<R>`, `temp_c/rank<R>`, `sm_clock_mhz/rank<R>`,
//!   `process/rss_mib`.

pub mod events;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::engine::events::Event;
use crate::engine::RunInfo;
use crate::observe::metrics::{MetricsReader, Record};
use crate::observe::monitor::{GlobalBatch, StepRow};
use crate::observe::recorder::Sink;
use crate::observe::sample::DeviceSample;
use events::EventFile;

/// The folder in a run directory that `--tensorboard` writes by default.
pub const DIR: &str = crate::engine::rundir::TENSORBOARD;

const MIB: f64 = 1024.0 * 1024.0;

/// Seconds since 1970 of a moment.
pub fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Refuses, before a run starts, a `dir` that could not be made or written: a file on its path,
/// or a nearest existing folder this user cannot write in.
pub fn preflight(dir: &Path) -> Result<(), String> {
    let fix = "give a writable directory: --tensorboard DIR";
    let mut at = dir;
    loop {
        if at.exists() {
            if !at.is_dir() {
                return Err(format!(
                    "--tensorboard {}: {} is not a directory; {fix}",
                    dir.display(),
                    at.display()
                ));
            }
            return match crate::files::write::can_write_in(at) {
                Ok(()) => Ok(()),
                Err(e) => Err(format!(
                    "--tensorboard {}: cannot make a file in {} ({e}); {fix}",
                    dir.display(),
                    at.display()
                )),
            };
        }
        match at.parent() {
            Some(p) if !p.as_os_str().is_empty() => at = p,
            // relative to the working directory
            _ => return Ok(()),
        }
    }
}

/// One run's TensorBoard event file.
pub struct TensorBoard {
    file: EventFile,
    /// When the run started, seconds since 1970 (records' `t` count from it).
    started: f64,
    /// Each rank as the tags name it (`rank0`): unique where labels are not (two processes'
    /// `cpu0` on one machine), and the same in every run, so TensorBoard overlays runs.
    devices: Vec<String>,
    /// The newest step a logged step or an event told of: samples are written at it (as a
    /// metrics file read back gives).
    step: u64,
    global_batch: GlobalBatch,
}

impl TensorBoard {
    /// A new event file in `dir` (created with its parents) for this run, started at `started`.
    pub fn create(dir: &Path, info: &RunInfo, started: SystemTime) -> Result<TensorBoard, String> {
        let started = unix_seconds(started);
        let file = EventFile::create(dir, started).map_err(|e| {
            format!(
                "cannot write TensorBoard events in {} ({e}); give a writable directory: --tensorboard DIR",
                dir.display()
            )
        })?;
        let devices = (0..info.ranks()).map(|r| format!("rank{r}")).collect();
        Ok(TensorBoard {
            file,
            started,
            devices,
            step: info.start_step,
            global_batch: GlobalBatch::default(),
        })
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    fn write(&mut self, t: Duration, step: u64, values: &[(String, f32)]) -> Result<(), String> {
        let wall = self.started + t.as_secs_f64();
        self.file
            .scalars(wall, step, values)
            .map_err(|e| format!("cannot write {} ({e})", self.file.path().display()))
    }
}

/// A logged step's scalars.
/// A logged step's scalars; `global_batch` the batch the run trains at (`GlobalBatch`).
fn step_scalars(row: &StepRow, rate: Option<f64>, global_batch: usize) -> Vec<(String, f32)> {
    let mut v = vec![
        ("train/loss".to_string(), row.loss),
        ("train/accuracy".to_string(), row.accuracy),
        ("train/learning_rate".to_string(), row.lr),
        ("train/global_batch".to_string(), global_batch as f32),
    ];
    if row.grad_norm.is_finite() {
        v.push(("train/grad_norm".to_string(), row.grad_norm));
    }
    if let Some(r) = rate {
        v.push(("train/samples_per_s".to_string(), r as f32));
    }
    let ms = |d: Duration| (d.as_secs_f64() * 1e3) as f32;
    for r in &row.ranks {
        let parts = [
            ("step", r.step_time),
            ("data_wait", r.data_wait),
            ("compute", r.compute),
            ("comm", r.comm),
            ("sync_wait", r.sync_wait),
            ("optimizer", r.optimizer),
            ("transfer", r.transfer),
        ];
        for (part, d) in parts {
            v.push((format!("step_time/{part}_ms/rank{}", r.rank), ms(d)));
        }
        if let Some(b) = r.loader_busy {
            v.push((format!("step_time/loader_busy_ms/rank{}", r.rank), ms(b)));
        }
    }
    v
}

/// An epoch's scalars and a validation's within one (`--val-every`); none for other events.
pub fn event_scalars(ev: &Event) -> Option<(u64, Vec<(String, f32)>)> {
    let (step, train_loss, val_loss, val_accuracy) = match *ev {
        Event::EpochDone {
            step,
            train_loss,
            val_loss,
            val_accuracy,
            ..
        } => (step, Some(train_loss), val_loss, val_accuracy),
        Event::Validated {
            step,
            val_loss,
            val_accuracy,
            ..
        } => (step, None, Some(val_loss), Some(val_accuracy)),
        _ => return None,
    };
    let mut v: Vec<(String, f32)> = Vec::new();
    v.extend(train_loss.map(|l| ("train/epoch_loss".to_string(), l)));
    v.extend(val_loss.map(|l| ("validation/loss".to_string(), l)));
    v.extend(val_accuracy.map(|a| ("validation/accuracy".to_string(), a)));
    Some((step, v))
}

/// A sample's scalars, each device's values that it reports.
pub fn sample_scalars(
    devices: &[String],
    samples: &[DeviceSample],
    process: Option<(u64, u64)>,
) -> Vec<(String, f32)> {
    let mut v = Vec::new();
    for (name, s) in devices.iter().zip(samples) {
        let mut put = |what: &str, x: Option<f64>| {
            if let Some(x) = x {
                v.push((format!("{what}/{name}"), x as f32));
            }
        };
        put("utilization", s.util.map(|u| f64::from(u) * 100.0));
        put("memory_access", s.mem_access.map(|u| f64::from(u) * 100.0));
        put("memory_used_mib", s.mem_used.map(|b| b as f64 / MIB));
        put("power_w", s.power_w.map(f64::from));
        put("temp_c", s.temp_c.map(f64::from));
        put("sm_clock_mhz", s.sm_clock_mhz.map(f64::from));
    }
    if let Some((rss, _)) = process {
        v.push(("process/rss_mib".to_string(), (rss as f64 / MIB) as f32));
    }
    v
}

impl Sink for TensorBoard {
    fn step(&mut self, row: &StepRow, rate: Option<f64>, logged: bool) -> Result<(), String> {
        if !logged {
            return Ok(());
        }
        self.step = self.step.max(row.step);
        let global_batch = self.global_batch.at(row);
        self.write(row.at, row.step, &step_scalars(row, rate, global_batch))
    }

    fn last_step(&mut self, row: &StepRow, rate: Option<f64>) -> Result<(), String> {
        self.step(row, rate, true)
    }

    fn event(&mut self, ev: &Event, t: Duration, logged: bool) -> Result<(), String> {
        // (an epoch's end can be the newest step heard of where few steps are logged)
        self.step = self.step.max(ev.step().unwrap_or(0));
        match event_scalars(ev) {
            Some((step, values)) if logged => self.write(t, step, &values),
            _ => Ok(()),
        }
    }

    fn late_event(&mut self, ev: &Event, t: Duration) -> Result<(), String> {
        self.event(ev, t, true)
    }

    fn telemetry(
        &mut self,
        t: Duration,
        devices: &[DeviceSample],
        process: Option<(u64, u64)>,
    ) -> Result<(), String> {
        let values = sample_scalars(&self.devices, devices, process);
        self.write(t, self.step, &values)
    }

    /// (each event is written whole as it comes)
    fn flush(&mut self) -> Result<(), String> {
        Ok(())
    }
}

/// Where the events of run `name` (in run directory `run_dir`) go under a `--tensorboard DIR`
/// given: a folder of its own named as its run directory is (`<name>/<time>`), so the runs of
/// a sweep given one DIR stay apart in `tensorboard --logdir DIR`; `<name>` alone for a run
/// without a run directory.
fn run_folder(dir: &Path, name: &str, run_dir: Option<&Path>) -> PathBuf {
    let run = dir.join(crate::engine::rundir::file_name_of(name));
    match run_dir.and_then(Path::file_name) {
        Some(leaf) => run.join(leaf),
        None => run,
    }
}

/// `run_folder`, made for this run alone: where another run holds it already (two runs whose
/// run directories end alike, `a/r` and `b/r`, or a resumed run in a new one), the first of
/// `<leaf>-2`, `<leaf>-3`, ... that is free, made here (so two runs starting at once never
/// share one, and TensorBoard never shows two runs' points as one run's).
pub fn own_run_folder(dir: &Path, name: &str, run_dir: Option<&Path>) -> Result<PathBuf, String> {
    let base = run_folder(dir, name, run_dir);
    let fail = |at: &Path, e: std::io::Error| {
        format!(
            "cannot make {} for TensorBoard's events ({e}); give a writable directory: --tensorboard DIR",
            at.display()
        )
    };
    if let Some(parent) = base.parent() {
        std::fs::create_dir_all(parent).map_err(|e| fail(parent, e))?;
    }
    let leaf = base
        .file_name()
        .map_or("run".into(), |l| l.to_string_lossy());
    for k in 1..=MAX_SAME_NAMED {
        let at = match k {
            1 => base.clone(),
            k => base.with_file_name(format!("{leaf}-{k}")),
        };
        match std::fs::create_dir(&at) {
            Ok(()) => return Ok(at),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(fail(&at, e)),
        }
    }
    Err(format!(
        "{} and {MAX_SAME_NAMED} folders named after it hold other runs' TensorBoard events: give another --tensorboard DIR",
        base.display()
    ))
}

/// The folder among `run_folder` and its numbered ones (`own_run_folder`'s) that already holds
/// the events of the run that started at `started`: written during it, or by an earlier
/// conversion (an event file's name carries its run's start to the second, its first event to
/// the microsecond: two runs of a sweep started in one second are told apart).
pub fn holding_run(
    dir: &Path,
    name: &str,
    run_dir: Option<&Path>,
    started: SystemTime,
) -> Option<PathBuf> {
    let base = run_folder(dir, name, run_dir);
    let leaf = base.file_name()?.to_string_lossy().into_owned();
    let started = unix_seconds(started);
    let prefix = format!("events.out.tfevents.{}.", started as u64);
    let ours = |e: &std::fs::DirEntry| {
        e.file_name().to_string_lossy().starts_with(&prefix)
            && events::created(&e.path()).is_some_and(|t| (t - started).abs() < 1e-6)
    };
    let holds =
        |at: &Path| std::fs::read_dir(at).is_ok_and(|entries| entries.flatten().any(|e| ours(&e)));
    (1..=MAX_SAME_NAMED)
        .map(|k| match k {
            1 => base.clone(),
            k => base.with_file_name(format!("{leaf}-{k}")),
        })
        .take_while(|at| at.exists())
        .find(|at| holds(at))
}

/// The most runs of one name `own_run_folder` numbers apart.
const MAX_SAME_NAMED: usize = 1000;

/// What stands for the run directory of a metrics file whose run record names none (written
/// before it was recorded): the folder of a run directory's `metrics.jsonl`, else the file's
/// path without its extension (`old.jsonl`: `old`).
pub fn run_dir_of(metrics_file: &Path) -> PathBuf {
    match metrics_file.file_name() {
        Some(n) if n == crate::engine::rundir::METRICS => {
            (metrics_file.parent()).map_or_else(|| metrics_file.to_path_buf(), Path::to_path_buf)
        }
        _ => metrics_file.with_extension(""),
    }
}

/// Where `view PATH --tensorboard` writes by default: the `tensorboard` folder beside a run
/// directory's metrics file (the run's own); for another file (`--metrics-out a.jsonl`), a
/// folder of its name in it (`tensorboard/a`: files side by side stay apart).
pub fn default_dir_for(metrics_file: &Path) -> PathBuf {
    let beside = (metrics_file.parent()).map_or_else(|| PathBuf::from(DIR), |p| p.join(DIR));
    match metrics_file.file_name() {
        Some(n) if n == crate::engine::rundir::METRICS => beside,
        _ => beside.join(metrics_file.file_stem().unwrap_or_default()),
    }
}

/// Writes the scalars of a metrics file into a new event file in `dir` (which must not hold
/// event files already: TensorBoard would show every scalar twice); the file and how many
/// records gave scalars. On a damaged line nothing is left behind.
pub fn convert(reader: &mut MetricsReader, dir: &Path) -> Result<(PathBuf, usize), String> {
    if events::has_event_files(dir) {
        return Err(format!(
            "{} already holds TensorBoard event files (written by --tensorboard during the run, or an earlier conversion), and TensorBoard would show both; give another directory (--tensorboard DIR), or remove them to write them again (rm {}/events.out.tfevents.*)",
            dir.display(),
            dir.display()
        ));
    }
    let mut records = Vec::new();
    while let Some(r) = reader.next().map_err(|e| e.to_string())? {
        records.push(r);
    }
    // a file from a version that did not record the start: its last record was written about
    // when the file was last modified
    let started = reader.info().started.unwrap_or_else(|| {
        let last = records
            .iter()
            .rev()
            .find_map(record_time)
            .unwrap_or_default();
        std::fs::metadata(reader.path())
            .and_then(|m| m.modified())
            .map_or(UNIX_EPOCH, |m| m - last)
    });
    let mut tb = TensorBoard::create(dir, reader.info(), started)?;
    let path = tb.path().to_path_buf();
    let mut written = 0;
    let result = records.iter().try_for_each(|r| {
        written += 1;
        match r {
            Record::Step { row, samples_per_s } => tb.step(row, *samples_per_s, true),
            Record::Event { t, event } => tb.event(event, *t, true),
            Record::Telemetry {
                t,
                devices,
                process_memory,
            } => tb.telemetry(*t, devices, *process_memory),
            Record::Warning { .. } => {
                written -= 1;
                Ok(())
            }
        }
    });
    if let Err(e) = result {
        drop(tb);
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    Ok((path, written))
}

fn record_time(r: &Record) -> Option<Duration> {
    match r {
        Record::Step { row, .. } => Some(row.at),
        Record::Event { t, .. } | Record::Telemetry { t, .. } | Record::Warning { t, .. } => {
            Some(*t)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::events::Event;

    /// The step of each event record in an event file (after its first, the file version).
    fn steps(path: &Path) -> Vec<u64> {
        let data = std::fs::read(path).unwrap();
        (events::tests::records(&data).iter().skip(1))
            .map(|r| {
                // field 1 (wall time, 8 bytes), then field 2 (step) as a varint
                assert_eq!(r[9], 0x10);
                let (mut step, mut shift) = (0u64, 0);
                for &b in &r[10..] {
                    step |= u64::from(b & 0x7f) << shift;
                    shift += 7;
                    if b & 0x80 == 0 {
                        break;
                    }
                }
                step
            })
            .collect()
    }

    #[test]
    fn samples_are_at_the_newest_step_an_event_told_of() {
        let dir = tempfile::tempdir().unwrap();
        let info = crate::engine::RunInfo::example(1);
        let mut tb = TensorBoard::create(dir.path(), &info, SystemTime::now()).unwrap();
        let epoch = Event::EpochDone {
            epoch: 1,
            step: 46,
            train_loss: 0.5,
            val_loss: Some(0.4),
            val_accuracy: Some(0.9),
            elapsed: Duration::from_secs(1),
        };
        tb.event(&epoch, Duration::from_secs(1), true).unwrap();
        let sample = [DeviceSample::default()];
        tb.telemetry(Duration::from_secs(2), &sample, Some((1 << 20, 1 << 30)))
            .unwrap();
        assert_eq!(steps(tb.path()), [46, 46]);
    }

    #[test]
    fn metrics_files_side_by_side_convert_into_folders_apart_and_a_run_s_into_its_own() {
        let at = |p: &str| default_dir_for(Path::new(p));
        assert_eq!(at("runs/r/metrics.jsonl"), Path::new("runs/r/tensorboard"));
        assert_eq!(at("out/a.jsonl"), Path::new("out/tensorboard/a"));
        assert_eq!(at("out/b.jsonl"), Path::new("out/tensorboard/b"));
        assert_eq!(at("b.jsonl"), Path::new("tensorboard/b"));
    }
}
