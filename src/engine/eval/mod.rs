//! `eval`: a checkpoint's model on a labelled set, on this machine's CPU cores. The set is the
//! run's own validation set, or one given as `--val-data` would give it (a CIFAR directory's
//! test file, a folder's `val/` or the folder itself, a table of the training set's columns),
//! made into samples exactly as the run made its validation samples: the run's `--data`,
//! `--image-size`, `--normalize` and seed, read again (a table's standardisation is the training
//! split's). Its answer: the loss, accuracy, top-5 and per class counts (`Tally`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::config::RunConfig;
use crate::data::{self, DataSpec, Dataset};
use crate::engine::checkpoint::{self, CheckpointMeta};
use crate::engine::EngineError;
use crate::nn::model::{Model, Workspace};

mod tally;
pub use tally::{ClassCounts, Tally, TOP_K};

/// What `eval` evaluated and what it found.
pub struct Evaluation {
    /// The `step-N` checkpoint directory.
    pub checkpoint: PathBuf,
    pub step: u64,
    /// `--model` as the run gave it.
    pub model: String,
    /// The set: the run's data line (its own validation set), or the set given and how its
    /// samples were made.
    pub data: String,
    /// The set's notes (a folder's classes, pictures skipped).
    pub notes: Vec<String>,
    /// Whether the set is the run's own validation set (no `--data`).
    pub own: bool,
    /// Each output's name: the data's class names, else their numbers.
    pub classes: Vec<String>,
    pub tally: Tally,
    pub elapsed: Duration,
    pub threads: usize,
}

/// The CPU memory eval's threads may take for their activations, as a share of the machine's.
const MEMORY_SHARE: u64 = 4;

/// The fewest rows a thread evaluates at a time (where the set has that many).
const MIN_CHUNK: usize = 32;

/// Evaluates the checkpoint `point` (whose run's settings are `cfg`, as `--resume` would take
/// them) on `data` (None: the run's own validation set), on up to `threads` CPU threads;
/// `progress(done, total)` is called every few milliseconds meanwhile.
pub fn evaluate(
    cfg: &RunConfig,
    point: &Path,
    data: Option<&DataSpec>,
    threads: usize,
    progress: impl FnMut(usize, usize),
) -> Result<Evaluation, EngineError> {
    let meta = checkpoint::read_meta(point)?;
    let mut inputs = cfg.inputs.clone();
    if let Some(given) = data {
        inputs.val_data = Some(given.clone());
        inputs.val_fraction = None;
    }
    let loaded = data::load(&cfg.data, &inputs, cfg.seed).map_err(said)?;
    if loaded.val.is_empty() {
        return Err(EngineError::Config(match data {
            Some(d) => format!("--data {d}: the set holds no sample to evaluate"),
            None => format!(
                "the run validated on no samples ({}): give the set to evaluate, eval {} --data SPEC",
                loaded.description,
                point.display()
            ),
        }));
    }
    let model = super::validate::model(cfg, &loaded.train)?;
    let (meta, state) = checkpoint::read(point, &model, &meta.optimizer)?;
    let classes = class_names(&meta, &loaded.val);
    let threads = threads_for(&model, threads, loaded.val.len());
    let set = match data {
        None => loaded.description,
        Some(_) => format!(
            "{}; inputs {}",
            (loaded.val_text.strip_prefix("validation ")).unwrap_or(&loaded.val_text),
            loaded.recipe.text
        ),
    };
    let notes = loaded.notes[loaded.val_notes.min(loaded.notes.len())..].to_vec();
    let started = Instant::now();
    let tally = run(
        &model,
        (&state.params, &state.buffers),
        &loaded.val,
        threads,
        progress,
    );
    Ok(Evaluation {
        checkpoint: point.to_path_buf(),
        step: meta.step,
        model: cfg.model.to_string(),
        data: set,
        notes,
        own: data.is_none(),
        classes,
        tally,
        elapsed: started.elapsed(),
        threads,
    })
}

/// A data error as eval's flags name it: the set given is `--data`'s (read as `--val-data`
/// reads it); the run's training data is read again for its classes, picture size and scaling.
fn said(e: data::DataError) -> EngineError {
    use data::DataError::{Io, Spec, ValSpec};
    match e {
        ValSpec { spec, msg } => EngineError::Config(format!(
            "--data {spec}: {}",
            msg.replace("--val-data", "--data")
        )),
        Io {
            path,
            source,
            flag: "--val-data",
        } => EngineError::Data(Io {
            path,
            source,
            flag: "--data",
        }),
        e @ (Spec { .. } | Io { .. }) => EngineError::Config(format!(
            "eval reads the run's training data again, for its classes, picture size and scaling (as the run made its validation samples): {e}; put the run's data back where the run read it"
        )),
        e => EngineError::Data(e),
    }
}

/// The checkpoint's class names where it recorded them for every output, else the numbers.
fn class_names(meta: &CheckpointMeta, set: &Dataset) -> Vec<String> {
    match meta.classes.len() == set.classes {
        true => meta.classes.clone(),
        false => (0..set.classes).map(|c| c.to_string()).collect(),
    }
}

/// Threads for `rows` samples: `asked` (the cores), no more than there are chunks, nor than the
/// activations of a chunk each fit in a share of the machine's memory.
fn threads_for(model: &Model, asked: usize, rows: usize) -> usize {
    let chunk_bytes = (model.eval_rows() * model.dims.iter().sum::<usize>() * 4) as u64;
    let memory = data::host_memory::machine_memory().0 / MEMORY_SHARE;
    let fit = (memory / chunk_bytes.max(1)).max(1) as usize;
    asked.min(rows.div_ceil(MIN_CHUNK)).min(fit).max(1)
}

/// Rows a thread evaluates at a time: the set shared out among the threads, in chunks of no
/// fewer than `MIN_CHUNK` rows (a batch the products run well at), nor more than
/// `Model::eval_rows`.
fn chunk_rows(model: &Model, rows: usize, threads: usize) -> usize {
    (rows.div_ceil(threads).max(MIN_CHUNK)).min(model.eval_rows())
}

/// The tally of `model` with `weights` (parameters, buffers) over every sample of `set`, in
/// chunks of `Model::eval_rows` rows claimed by `threads` threads, each with its workspace.
fn run(
    model: &Model,
    (params, buffers): (&[f32], &[f32]),
    set: &Dataset,
    threads: usize,
    mut progress: impl FnMut(usize, usize),
) -> Tally {
    let (n, chunk) = (set.len(), chunk_rows(model, set.len(), threads));
    let (next, done) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let part = || {
        let (mut ws, mut buf) = (Workspace::default(), Vec::new());
        let mut tally = Tally::new(model.classes());
        loop {
            let lo = next.fetch_add(chunk, Ordering::Relaxed);
            if lo >= n {
                return tally;
            }
            let hi = (lo + chunk).min(n);
            let (x, y) = (set.rows(lo, hi, &mut buf), &set.y[lo..hi]);
            let (loss, _) = model.evaluate(params, buffers, &mut ws, x, y, hi - lo);
            tally.add(ws.logits(model, hi - lo), y, loss);
            done.fetch_add(hi - lo, Ordering::Relaxed);
        }
    };
    std::thread::scope(|s| {
        let parts: Vec<_> = (0..threads).map(|_| s.spawn(part)).collect();
        while !parts.iter().all(|p| p.is_finished()) {
            std::thread::sleep(Duration::from_millis(5));
            progress(done.load(Ordering::Relaxed), n);
        }
        let mut whole = Tally::new(model.classes());
        for p in parts {
            match p.join() {
                Ok(t) => whole.merge(t),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        whole
    })
}
