//! `eval`: a checkpoint's model on a labelled set, on this machine's CPU cores. The set is the
//! run's own validation set (its data read again as the run read it, and held to the training
//! split its checkpoint recorded), or one given as `--val-data` would give it (a CIFAR
//! directory's test file, a folder's `val/` or the folder itself, a table of the training set's
//! columns), made into samples as the run made its validation samples from what the checkpoint
//! records (`data::held_out`). Its answer: the loss, accuracy, top-5 and per class counts
//! (`Tally`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::config::RunConfig;
use crate::data::{self, held_out, DataSpec, Dataset};
use crate::engine::checkpoint::{self, CheckpointError, CheckpointMeta};
use crate::engine::resume::TrainSplit;
use crate::engine::EngineError;
use crate::nn::model::{Model, Workspace};
use crate::nn::shape::Shape;

mod gpu;
mod tally;
pub use tally::{ClassCounts, Tally, TOP_K};

/// Where eval runs the model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum On {
    /// This machine's CPU cores, up to this many threads.
    Cpu(usize),
    /// A GPU by CUDA ordinal, and the flag that named it as typed (`--device`, or `--devices`
    /// as training spells it), which its refusals name.
    Gpu { index: usize, flag: &'static str },
}

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
    /// Where it ran: `2 CPU threads, fp32`, `GPU 0 (NVIDIA H100 80GB HBM3), bf16`.
    pub device: String,
}

/// The CPU memory eval's threads may take for their activations, as a share of the machine's.
const MEMORY_SHARE: u64 = 4;

/// The fewest rows a thread evaluates at a time (where the set has that many).
const MIN_CHUNK: usize = 32;

/// Evaluates the checkpoint `opened` (its run's settings `cfg` as `--resume` would take them)
/// on `data` (None: the run's own validation set), `on` the CPU or a GPU; `progress(done, total)`
/// is called every few milliseconds (a GPU's: every chunk) meanwhile. (Opened before the data
/// is read: a run still going may remove it meanwhile.)
pub fn evaluate(
    cfg: &RunConfig,
    opened: checkpoint::Opened,
    data: Option<&DataSpec>,
    on: On,
    mut progress: impl FnMut(usize, usize),
) -> Result<Evaluation, EngineError> {
    let (point, meta) = (opened.dir().to_path_buf(), opened.meta());
    let point = point.as_path();
    let (set, text, mut notes) = match data {
        None => own_set(cfg, meta, point)?,
        Some(spec) => given_set(cfg, meta, spec)?,
    };
    // (what only training does, such as the tensors --freeze kept, does not bear on eval)
    let unfrozen = RunConfig {
        freeze: None,
        ..cfg.clone()
    };
    let model = super::validate::model(&unfrozen, &set)?;
    if cfg.label_smoothing > 0.0 {
        notes.push(format!(
            "the loss is with the run's --label-smoothing {} (as its validation loss was); the accuracy is not touched by it",
            cfg.label_smoothing
        ));
    }
    let optimizer = meta.optimizer.clone();
    let (meta, mut state) = opened.read(&model, &optimizer).map_err(damaged)?;
    // (eval takes no step: the optimizer's moments, Adam's twice the weights, are let go)
    state.opt = Default::default();
    let classes = class_names(&meta, &set);
    // (against what the checkpoint recorded: an older one's outputs are numbers, named by none)
    notes.extend(renamed(&meta.classes, set.class_names()));
    let started = Instant::now();
    let evaluate_on = |set: &Dataset, progress: &mut dyn FnMut(usize, usize)| match on {
        On::Cpu(asked) => {
            let threads = threads_for(&model, asked, set.len());
            let weights = (&state.params[..], &state.buffers[..]);
            let tally = run(&model, weights, set, threads, progress);
            let used = crate::text::counted(threads, "CPU thread");
            Ok((tally, format!("{used}, fp32"), Vec::new()))
        }
        On::Gpu { index, flag } => gpu::run((index, flag), cfg, &model, &state, set, progress),
    };
    let (mut tally, device, device_notes) = evaluate_on(&set, &mut progress)?;
    notes.extend(device_notes);
    // pictures that failed to decode were stood in for by others of their class: said; a class
    // none of whose pictures decode was evaluated on blank samples: evaluated again without it
    if let Some(p) = &set.pictures {
        notes.extend(
            (p.set.take_failures().into_iter())
                .map(|s| format!("{}; left out of the figures", s.message)),
        );
        let lost = p.lost.labels();
        if !lost.is_empty() {
            let kept: Vec<usize> = (0..set.len())
                .filter(|&i| !lost.contains(&set.y[i]))
                .collect();
            let whys = p.lost.unsaid().join("; ");
            if kept.is_empty() {
                return Err(EngineError::Config(format!(
                    "no class of the set has a picture that decodes ({whys}); repair or replace them"
                )));
            }
            let left_out = set.len() - kept.len();
            notes.push(format!(
                "{whys}; {} {} {} left out of the figures (the accuracy is over the other classes only); repair or replace them",
                if lost.len() == 1 { "its" } else { "their" },
                crate::text::counted(left_out, "sample"),
                if left_out == 1 { "is" } else { "are" }
            ));
            tally = evaluate_on(&set.subset(&kept), &mut progress)?.0;
        }
    }
    // (as training stops where its loss is not finite: no figure of such outputs means anything)
    if tally.not_finite > 0 {
        return Err(EngineError::Config(format!(
            "the model's outputs are not finite (NaN or infinity) on {} of {} samples: the checkpoint's weights overflow on this data (a run near divergence?); evaluate an earlier checkpoint of the run",
            tally.not_finite, tally.samples
        )));
    }
    Ok(Evaluation {
        checkpoint: point.to_path_buf(),
        step: meta.step,
        model: cfg.model.to_string(),
        data: text,
        notes,
        own: data.is_none(),
        classes,
        tally,
        elapsed: started.elapsed(),
        device,
    })
}

/// The run's validation set, its data read again as the run read it (`runs_data`).
fn own_set(
    cfg: &RunConfig,
    meta: &CheckpointMeta,
    point: &Path,
) -> Result<(Dataset, String, Vec<String>), EngineError> {
    let loaded = runs_data(cfg, meta)?;
    if loaded.val.is_empty() {
        return Err(EngineError::Config(format!(
            "the run validated on no samples ({}): give the set to evaluate, eval {} --data SPEC",
            loaded.val_text,
            point.display()
        )));
    }
    let notes = loaded.notes[loaded.val_notes.min(loaded.notes.len())..].to_vec();
    Ok((loaded.val, loaded.description, notes))
}

/// The run's data read again as the run read it, split and normalised: refused where the
/// training split is not the one the checkpoint recorded (the data changed: another split,
/// other classes).
fn runs_data(cfg: &RunConfig, meta: &CheckpointMeta) -> Result<data::LoadedData, EngineError> {
    let loaded = data::load(&cfg.data, &cfg.inputs, cfg.seed).map_err(|e| {
        EngineError::Config(format!(
            "eval of the run's own validation set reads its data again: {}; put the run's data back where it read it, or evaluate another set with --data SPEC",
            // (eval fetches nothing)
            e.to_string().replace("add --download to fetch them, or ", "").replace(", or add --download", "")
        ))
    })?;
    let split = TrainSplit::of(&loaded.train).validating(&loaded.val);
    let recorded = (meta.train_samples).zip(meta.train_fingerprint.as_deref());
    if let Some((n, fingerprint)) = recorded {
        let how = match (n == split.samples, *fingerprint == split.hex().0) {
            (true, true) => None,
            (false, _) => Some(format!("its training split has {} now, the checkpoint's run had {n}", split.samples)),
            (true, false) => Some(format!("its training split has the {n} samples the checkpoint's run had, but other contents (other files, values or classes)")),
        };
        // (the validation set's own: another file's rows, pictures replaced or removed)
        let val_now = split.hex().1;
        let val_changed = meta.val_fingerprint.is_some() && meta.val_fingerprint != val_now;
        let how = how.or_else(|| {
            val_changed.then(|| "its validation samples are not the ones the run validated on (other files, values or classes)".to_string())
        });
        if let Some(how) = how {
            return Err(EngineError::Config(format!(
                "the run's data --data {} changed since it trained: {how}, so its validation split would not be the run's: put the data back as the run read it, or evaluate a held-out set with --data SPEC",
                cfg.data
            )));
        }
    }
    Ok(loaded)
}

/// The set `spec` names, made as the checkpoint's run made its validation samples.
fn given_set(
    cfg: &RunConfig,
    meta: &CheckpointMeta,
    spec: &DataSpec,
) -> Result<(Dataset, String, Vec<String>), EngineError> {
    let older = |what: &str| {
        EngineError::Config(format!(
            "the checkpoint, from an earlier version or a table of over 65536 features, did not record {what}: evaluate the run's own validation set (eval without --data)"
        ))
    };
    let input = meta
        .input
        .as_deref()
        .ok_or_else(|| older("its model's input"))?;
    let shape = crate::engine::weights::module::parse_input(input)
        .ok_or_else(|| older("its model's input as CxHxW or N"))?;
    // a sample's shape: as the data made it (an MLP's input is its flattening)
    let sample = (meta.sample.as_deref()).and_then(|s| data::parse_shape(s).ok());
    let (image, features) = match shape {
        Shape::Image { c, h, w } => (Some([c, h, w]), c * h * w),
        Shape::Flat(n) => (sample.filter(|s| s.iter().product::<usize>() == n), n),
    };
    let pictures = matches!(cfg.data, DataSpec::Cifar { .. } | DataSpec::Images { .. });
    // a table's scaling: recorded, or none where the run used its values as given
    let as_given = (meta.inputs.as_deref()).is_some_and(|t| t.starts_with("used as given"));
    if !pictures && meta.input_affine.is_none() && !as_given {
        return Err(older("how it scaled its inputs"));
    }
    let recipe = held_out::Recipe {
        run_data: &cfg.data,
        opts: &cfg.inputs,
        names: &meta.classes,
        classes: *meta.dims.last().unwrap_or(&0),
        image,
        features,
        affine: meta.input_affine.as_ref(),
        seed: cfg.seed,
    };
    let mut h = held_out::load(spec, &recipe)?;
    if h.set.is_empty() {
        return Err(EngineError::Config(format!(
            "--data {spec}: the set holds no sample to evaluate"
        )));
    }
    if held_out::is_training_data(spec, &cfg.data) {
        h.notes.insert(0, format!(
            "--data {spec} is, or holds, the data the run trained on: these figures show how the training set is fit, not how the model does on data it has not seen; eval without --data takes the run's validation set"
        ));
    } else if !pictures {
        match trained_on(cfg, meta, &h.set) {
            Some(0) => {}
            Some(k) => h.notes.insert(0, format!(
                "{k} of the {} samples of --data {spec} have the values of a sample the run trained on (rows of its training split): figures on them show how the training set is fit, not how the model does on data it has not seen; evaluate on rows it did not train on",
                h.set.len()
            )),
            None => h.notes.push(format!(
                "whether samples of --data {spec} are ones the run trained on is not checked: the run's data (--data {}) does not read as the checkpoint recorded it (moved, changed or removed)",
                cfg.data
            )),
        }
    }
    let inputs = meta.inputs.as_deref().unwrap_or("as the run made them");
    Ok((h.set, format!("{}; inputs {inputs}", h.what), h.notes))
}

/// How many of a table's held-out samples `set` (made as the run made its validation samples)
/// are samples of the run's training split, where its data still reads as the checkpoint
/// recorded it; None where it does not. (A table's run: its file read again, as small as the
/// tables it trains on.)
fn trained_on(cfg: &RunConfig, meta: &CheckpointMeta, set: &Dataset) -> Option<usize> {
    let loaded = runs_data(cfg, meta).ok()?;
    Some(data::shared_rows(&loaded.train, set))
}

/// The checkpoint opened (its `state.json` read, its weights held), its errors as eval says
/// them (before its settings are taken).
pub fn open_checkpoint(point: &Path) -> Result<checkpoint::Opened, EngineError> {
    checkpoint::open(point).map_err(damaged)
}

/// A checkpoint error as eval says it: what to evaluate instead of a damaged one.
fn damaged(e: CheckpointError) -> EngineError {
    match e {
        CheckpointError::Corrupt { path, msg, .. } => {
            let with = |p: &Path| format!("evaluate another checkpoint of the run: mgtop-train eval {}", p.display());
            let fix = checkpoint::instead(&path, with, "");
            EngineError::Config(format!("checkpoint {} is unreadable: {msg}; {fix}", path.display()))
        }
        CheckpointError::ShapeMismatch { path, .. } => EngineError::Config(format!(
            "checkpoint {} does not fit the model its state.json records on this data (its state.json was edited, or the data is not the run's): evaluate another checkpoint",
            path.display()
        )),
        e => EngineError::Checkpoint(e),
    }
}

/// The checkpoint's class names where it recorded them for every output, else the numbers.
fn class_names(meta: &CheckpointMeta, set: &Dataset) -> Vec<String> {
    match meta.classes.len() == set.classes {
        true => meta.classes.clone(),
        false => (0..set.classes).map(|c| c.to_string()).collect(),
    }
}

/// Where the data names a class otherwise than the checkpoint at the same output (renamed in
/// place since): said once, for the first, as the figures go by the checkpoint's names.
fn renamed(theirs: &[String], ours: &[String]) -> Option<String> {
    if theirs.len() != ours.len() {
        return None;
    }
    let (i, (was, is)) = (theirs.iter().zip(ours).enumerate()).find(|(_, (a, b))| a != b)?;
    Some(format!(
        "the data names output {i} `{}` where the checkpoint's run named it `{}` (renamed since?): the figures go by the checkpoint's names",
        crate::text::excerpt(is),
        crate::text::excerpt(was)
    ))
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

/// The samples `x`, `y` of rows `lo..` without those whose picture failed to decode (another of
/// its class stood in, which would count twice for it), where any did: an evaluation counts
/// each picture once, and one it could not read not at all.
fn own_samples(set: &Dataset, lo: usize, x: &[f32], y: &[u32]) -> Option<(Vec<f32>, Vec<u32>)> {
    let own = |i: &usize| !set.stood_in(lo + i);
    if (0..y.len()).all(|i| own(&i)) {
        return None;
    }
    let d = set.features;
    let kept: Vec<usize> = (0..y.len()).filter(own).collect();
    let x = kept.iter().flat_map(|&i| &x[i * d..(i + 1) * d]).copied();
    Some((x.collect(), kept.iter().map(|&i| y[i]).collect()))
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
            let own = own_samples(set, lo, x, y);
            let (x, y) = own.as_ref().map_or((x, y), |(x, y)| (&x[..], &y[..]));
            if !y.is_empty() {
                let (loss, _) = model.evaluate(params, buffers, &mut ws, x, y, y.len());
                tally.add(ws.logits(model, y.len()), y, loss);
            }
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

#[cfg(test)]
mod tests {
    #[test]
    fn a_class_renamed_in_place_is_said_and_unrecorded_names_are_not() {
        let names = |s: &str| s.split(',').map(String::from).collect::<Vec<_>>();
        let note = super::renamed(&names("cat,dog"), &names("cat,hound")).unwrap();
        assert!(
            note.contains("output 1 `hound` where the checkpoint's run named it `dog`"),
            "{note}"
        );
        assert_eq!(super::renamed(&names("cat,dog"), &names("cat,dog")), None);
        // a checkpoint from before classes were recorded names nothing to compare
        assert_eq!(super::renamed(&[], &names("cat,dog")), None);
    }
}
