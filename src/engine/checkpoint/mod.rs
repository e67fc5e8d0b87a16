//! Checkpoints: `step-NNNNNNNN/` (and `--checkpoint-best`'s `best/`) holding `model.safetensors` (weights and optimizer moments)
//! and `state.json` (position in the data, batch size, LR, config). Written to a temporary
//! directory, fsynced, then renamed, so a crash mid-write never damages an earlier checkpoint.
//! A run holds a lock on its checkpoint directory (`.lock`, flock) so that two runs never write
//! into the same one, and clears what an interrupted earlier run left behind.

use std::path::{Path, PathBuf};

use safetensors::tensor::Dtype;
use safetensors::SafeTensors;

use crate::backend::TrainState;
use crate::nn::model::{Model, TensorInfo};
use crate::nn::optim::OptState;

pub mod began;
mod carry;
mod lines;
mod lock;
mod meta;
pub(crate) mod tensor_file;
mod write;

pub use carry::carry_best;
pub use lines::{lines, passed_over, refuse_others, step_of, steps, steps_lost, Line};
pub use lock::{holder, lock, tidy_if_free, DirLock, LOCK_FILE};
pub use meta::{BestVal, CheckpointMeta};
pub use tensor_file::safetensors_problem;
pub use write::{abandoned, remove, step_name, write, written};

pub const FORMAT: &str = "mgtop-checkpoint/2";
/// The name of the best validation's checkpoint (`--checkpoint-best`) beside the `step-N` ones.
pub const BEST: &str = "best";
/// A checkpoint's weights file (what `--init` and PyTorch take).
pub const WEIGHTS: &str = "model.safetensors";
const STATE: &str = "state.json";

/// Whether `dir` is a checkpoint (holds its `state.json`).
pub fn is_checkpoint(dir: &Path) -> bool {
    dir.join(STATE).is_file()
}

/// The checkpoint whose weights file `path` is, where it is one (a `model.safetensors` beside a
/// `state.json`; elsewhere the name is only Hugging Face's default).
pub fn of_weights(path: &Path) -> Option<&Path> {
    let dir = path.parent().filter(|d| is_checkpoint(d))?;
    (path.file_name() == Some(std::ffi::OsStr::new(WEIGHTS))).then_some(dir)
}
/// `state.json` is a few KiB; anything far larger is not one.
const MAX_STATE_BYTES: u64 = 1 << 20;
/// Steps and epochs beyond this are not from a real run (and would overflow counters).
pub const MAX_STEP: u64 = 1 << 48;
/// The most ranks a run can have (`--devices cpu:N` accepts up to 256).
const MAX_RANKS: usize = 256;
/// The most entries `dims` can have: one per value of a model graph (`nn::model::Builder`).
const MAX_DIMS: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("cannot write checkpoint in {path}: {source}; check that the --checkpoint-dir is writable and the disk has space{}", .last.as_ref().map(|p| format!("; the run's last whole checkpoint: {}", p.display())).unwrap_or_default())]
    Write {
        path: PathBuf,
        source: std::io::Error,
        /// The run's newest checkpoint written whole before, where it has one.
        last: Option<PathBuf>,
    },
    /// What is there already makes the directory unusable (no disk or permission matter).
    #[error("cannot keep checkpoints in {path}: {why}")]
    Unfit { path: PathBuf, why: String },
    #[error(
        "no checkpoint at {0}: pass a step-NNNNNNNN directory or a --checkpoint-dir that holds one"
    )]
    NotFound(PathBuf),
    #[error("another run{} is writing checkpoints to {path}: give this run its own --checkpoint-dir, or wait for that one to end", .pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    Locked { path: PathBuf, pid: Option<u32> },
    #[error("--checkpoint-dir {path} holds checkpoints of another run; this run's would mix with them and replace those of the same steps:\n{runs}\ngive this run its own --checkpoint-dir (or leave the flag out: each run keeps its checkpoints in its run directory), or continue one listed with the --resume shown")]
    Taken { path: PathBuf, runs: String },
    #[error("--checkpoint-dir {path} already holds this line of runs' checkpoints past step {step}, the one resumed from (up to {newest}); this run's would be a second branch beside them, and --resume {path} would then pick whichever branch has the higher step: give this run its own --checkpoint-dir, resume the newest with --resume {newest}, or move the checkpoints after step {step} (step directories, a best/ of a later step) out of {path}")]
    Ahead {
        path: PathBuf,
        step: u64,
        newest: PathBuf,
    },
    #[error("checkpoint {path} is unreadable: {msg}; {fix}")]
    Corrupt {
        path: PathBuf,
        msg: String,
        /// What to resume from instead (`instead_of`).
        fix: String,
    },
    #[error("checkpoint {path} does not fit this run's model: {what}")]
    ShapeMismatch {
        path: PathBuf,
        /// How the models differ, and what to do.
        what: String,
    },
    #[error("checkpoint {path} holds {theirs} optimizer state but this run uses --optimizer {ours}; pass --optimizer {theirs}")]
    OptimizerMismatch {
        path: PathBuf,
        theirs: String,
        ours: String,
    },
}

/// A checkpoint directory, or the newest complete `step-*` inside a checkpoint dir. (Its
/// callers pass what `rundir::checkpoint_for` found there a moment before: a `step-*` gone
/// since was removed by the run still writing beside it.)
pub fn resolve(path: &Path) -> Result<PathBuf, CheckpointError> {
    if path.join(STATE).is_file() {
        return Ok(path.to_path_buf());
    }
    let a_step = (path.file_name()).is_some_and(|n| n.to_string_lossy().starts_with("step-"));
    if let Some(e) = gone(path).filter(|_| a_step) {
        return Err(e);
    }
    steps(path)
        .pop()
        .map(|(_, p)| p)
        .ok_or_else(|| CheckpointError::NotFound(path.to_path_buf()))
}

/// The newest checkpoint beside the damaged `dir` that looks whole, if any.
fn whole_beside(dir: &Path) -> Option<PathBuf> {
    let beside = dir.parent().map(steps).unwrap_or_default();
    (beside.into_iter().rev())
        .map(|(_, p)| p)
        .find(|p| p != dir && tensor_file::looks_whole(p))
}

/// What to use instead of the damaged checkpoint `dir`: `with` the newest other checkpoint
/// beside it that looks whole, or `none` (for `--resume`, `--init`, `export`: each says it).
pub fn instead(dir: &Path, with: impl Fn(&Path) -> String, none: &str) -> String {
    match whole_beside(dir) {
        Some(p) => with(&p),
        None => format!("no other whole checkpoint is beside it{none}"),
    }
}

/// What to do instead of resuming the damaged checkpoint `dir`: the newest other checkpoint
/// beside it that looks whole, or starting anew.
fn instead_of(dir: &Path) -> String {
    let with = |p: &Path| {
        // (moved aside, the damaged one neither stands newest in the directory nor stops a
        // run resumed from an older step from writing there)
        format!(
            "resume from another checkpoint of the run instead: --resume {} (and move the damaged {} out of {}, or give the resumed run its own --checkpoint-dir)",
            p.display(),
            dir.file_name().unwrap_or_default().to_string_lossy(),
            dir.parent().unwrap_or(Path::new(".")).display()
        )
    };
    instead(dir, with, ": start without --resume")
}

/// A checkpoint that went while it was read (its run, still running, keeps only its newest
/// with `--keep-checkpoints`): said so, rather than taken for damaged.
fn gone(dir: &Path) -> Option<CheckpointError> {
    (!dir.exists()).then(|| CheckpointError::Corrupt {
        path: dir.to_path_buf(),
        msg: "it was removed while it was read (a running run's --keep-checkpoints removes its older checkpoints)".into(),
        fix: "try again: its run's newest checkpoint is another now".into(),
    })
}

/// A checkpoint directory's `state.json`, held to the ranges the flags accept.
pub fn read_meta(dir: &Path) -> Result<CheckpointMeta, CheckpointError> {
    let corrupt = |msg: String| {
        gone(dir).unwrap_or_else(|| CheckpointError::Corrupt {
            path: dir.to_path_buf(),
            msg,
            fix: instead_of(dir),
        })
    };
    let json = read_regular(&dir.join(STATE), MAX_STATE_BYTES)
        .map_err(|e| corrupt(format!("{STATE}: {e}")))?;
    let meta: CheckpointMeta =
        serde_json::from_slice(&json).map_err(|e| corrupt(format!("{STATE}: {e}")))?;
    if meta.format == "mgtop-checkpoint/1" {
        // (its run's other checkpoints are of that version too: no use resuming one)
        return Err(CheckpointError::Corrupt {
            path: dir.to_path_buf(),
            msg: "it was written by an older mgtop-train (format mgtop-checkpoint/1, linear weights [in, out]); this one reads mgtop-checkpoint/2 (PyTorch's [out, in])".into(),
            fix: "start a new run, or resume it with the version that wrote it".into(),
        });
    }
    if meta.format != FORMAT {
        return Err(corrupt(format!("format `{}` is not {FORMAT}", meta.format)));
    }
    meta.check()
        .map_err(|e| corrupt(format!("{STATE}: {e}; it was edited or damaged")))?;
    // (a `step-N` folder holds the checkpoint of step N)
    if let Some(n) = step_of(dir).filter(|&n| n != meta.step) {
        return Err(corrupt(format!(
            "{STATE}: its step is {} where its folder's name says {n}; it was edited or damaged",
            meta.step
        )));
    }
    Ok(meta)
}

/// How a checkpoint's model (`meta.dims`, input to classes) differs from this run's (`ours`),
/// in the words of the flag that changed, and the fix.
fn model_difference(meta: &CheckpointMeta, ours: &[usize], dir: &Path) -> String {
    let theirs = &meta.dims;
    let (n, m) = (theirs.len(), ours.len());
    let same = |a: &[usize], b: &[usize]| a == b;
    if n == m && n >= 2 && same(&theirs[..n - 1], &ours[..m - 1]) {
        return format!(
            "it classifies into {} classes and this run's data has {}: resume it on the data it was trained on, or start a new run from its weights with --init {} (the classifier head is made anew for the new classes)",
            theirs[n - 1],
            ours[m - 1],
            dir.join(WEIGHTS).display()
        );
    }
    if n == m && n >= 2 && same(&theirs[1..], &ours[1..]) {
        return format!(
            "its model takes {} values a sample and this run's data gives {}: resume it with the --data and picture options (--image-size) it was trained with, or start without --resume",
            theirs[0], ours[0]
        );
    }
    // (where they part said, not every size of a deep model: where the model it records is
    // this run's, its state.json was edited)
    let at = (theirs.iter().zip(ours))
        .take_while(|(a, b)| a == b)
        .count();
    let detail = match (theirs.get(at), ours.get(at)) {
        (Some(a), Some(b)) if at == 0 => {
            format!(", which takes {a} values a sample where this run's takes {b}")
        }
        (Some(a), Some(b)) => {
            format!(", whose layer {at} gives {a} values where this run's gives {b}")
        }
        _ => format!(
            ", of {} layers where this run's has {}",
            n.saturating_sub(1),
            m.saturating_sub(1)
        ),
    };
    another_model(meta, &detail)
}

/// That the checkpoint `meta` was written for another model (with `detail`, where there is one
/// to say), and the fix.
fn another_model(meta: &CheckpointMeta, detail: &str) -> String {
    let model = meta
        .config
        .get("model")
        .and_then(|m| m.as_str())
        .map_or(String::new(), |m| format!(" (--model {m})"));
    format!(
        "it was written for another model{model}{detail}; resume it with the --model it was trained with, or start without --resume"
    )
}

/// Reads a checkpoint and checks it fits `model` and the optimizer named `optimizer`.
pub fn read(
    path: &Path,
    model: &Model,
    optimizer: &str,
) -> Result<(CheckpointMeta, TrainState), CheckpointError> {
    open(path)?.read(model, optimizer)
}

/// A checkpoint opened to be read later: its `state.json` read and its weights file held open,
/// so that a run removing it meanwhile (`--keep-checkpoints` keeps its newest only) leaves the
/// reader what it opened.
pub struct Opened {
    dir: PathBuf,
    meta: CheckpointMeta,
    /// (an error said when the weights are read: a model that differs is told first)
    weights: Result<(std::fs::File, u64), String>,
}

/// Opens the checkpoint `path` (a checkpoint directory, or the newest in a checkpoint dir).
pub fn open(path: &Path) -> Result<Opened, CheckpointError> {
    let dir = resolve(path)?;
    let meta = read_meta(&dir)?;
    let weights =
        crate::files::read::open(&dir.join(WEIGHTS), &file_expect(u64::MAX)).map_err(said);
    Ok(Opened { dir, meta, weights })
}

impl Opened {
    pub fn meta(&self) -> &CheckpointMeta {
        &self.meta
    }

    /// The checkpoint's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The checkpoint's state, checked to fit `model` and the optimizer named `optimizer`.
    pub fn read(
        self,
        model: &Model,
        optimizer: &str,
    ) -> Result<(CheckpointMeta, TrainState), CheckpointError> {
        let Opened { dir, meta, weights } = self;
        read_state(dir, meta, weights, model, optimizer)
    }
}

/// Whether the checkpoint holds this very model (its `--model` and classes) trained on inputs of
/// another size, to be taken as it is where every tensor is the same (a network that pools
/// globally before its head: a resume at another `--image-size`, progressive resizing). Only a
/// checksummed file's tensors are held to the model's names and shapes below, so only such a file.
fn other_input_size(meta: &CheckpointMeta, model: &Model) -> bool {
    let model_of = meta.config.get("model").and_then(|m| m.as_str());
    model_of == Some(model.spec.as_str())
        && meta.dims.first() != model.dims.first()
        && meta.dims.last() == model.dims.last()
        && meta.weights_crc32c.is_some()
}

fn read_state(
    dir: PathBuf,
    meta: CheckpointMeta,
    weights: Result<(std::fs::File, u64), String>,
    model: &Model,
    optimizer: &str,
) -> Result<(CheckpointMeta, TrainState), CheckpointError> {
    let corrupt = |msg: String| {
        gone(&dir).unwrap_or_else(|| CheckpointError::Corrupt {
            path: dir.clone(),
            msg,
            fix: instead_of(&dir),
        })
    };
    if meta.dims != model.dims && !other_input_size(&meta, model) {
        let what = model_difference(&meta, &model.dims, &dir);
        return Err(CheckpointError::ShapeMismatch { path: dir, what });
    }
    if meta.optimizer != optimizer {
        return Err(CheckpointError::OptimizerMismatch {
            path: dir,
            theirs: meta.optimizer,
            ours: optimizer.to_string(),
        });
    }
    // weights and two optimizer moments, plus the header's names and shapes
    let most = ((model.n_params * 12 + model.n_buffers * 4) as u64).saturating_add(1 << 20);
    let path = dir.join(WEIGHTS);
    let bytes = weights
        .and_then(|held| {
            crate::files::read::read_opened(&path, held, &file_expect(most)).map_err(said)
        })
        .map_err(|e| corrupt(format!("{WEIGHTS}: {e}")))?;
    if let Some(why) = meta.weights_changed(&bytes) {
        return Err(corrupt(why));
    }
    if let Some(why) = tensor_file::header_too_long(&bytes) {
        return Err(corrupt(format!("{WEIGHTS}: {why}")));
    }
    let st = SafeTensors::deserialize(&bytes).map_err(|e| {
        corrupt(format!(
            "{WEIGHTS} is not a whole safetensors file ({}): it was cut short or damaged",
            safetensors_problem(&e, &bytes)
        ))
    })?;
    // a file whose bytes are as written (its checksum held) and lacks this model's tensors, or
    // holds them in other shapes, is of another model (of the same inputs and classes)
    if meta.weights_crc32c.is_some() {
        let differs =
            (model.tensors.iter().chain(&model.buffers)).find_map(|t| match st.tensor(&t.name) {
                Err(_) => Some(format!(": it has no tensor `{}`", t.name)),
                Ok(v) if v.shape() != t.shape.as_slice() => Some(format!(
                    ": its `{}` is {}, this model's {}",
                    t.name,
                    crate::text::dims(v.shape()),
                    crate::text::dims(&t.shape)
                )),
                Ok(_) => None,
            });
        if let Some(detail) = differs {
            let what = another_model(&meta, &detail);
            return Err(CheckpointError::ShapeMismatch { path: dir, what });
        }
    }
    let n = model.n_params;
    let mut params = vec![0.0; n];
    let mut m = Vec::new();
    let mut v = Vec::new();
    // the moments this optimizer needs, whatever the file holds: a file without them is damaged
    let kind: crate::nn::optim::OptimizerKind = optimizer
        .parse()
        .map_err(|e: String| corrupt(format!("optimizer: {e}")))?;
    let blank = OptState::new(kind, 0);
    let needs = OptState::new(kind, 1);
    let (has_m, has_v) = (needs.m.len() > blank.m.len(), needs.v.len() > blank.v.len());
    if has_m {
        m = vec![0.0; n];
    }
    if has_v {
        v = vec![0.0; n];
    }
    let fill = |t: &TensorInfo, name: &str, dst: &mut [f32]| -> Result<(), CheckpointError> {
        let view = st
            .tensor(name)
            .map_err(|_| corrupt(format!("tensor `{name}` is missing")))?;
        if view.dtype() != Dtype::F32 || view.shape() != t.shape.as_slice() {
            return Err(corrupt(format!(
                "tensor `{name}` is {:?} {}, expected F32 {}",
                view.dtype(),
                crate::text::dims(view.shape()),
                crate::text::dims(&t.shape)
            )));
        }
        for (d, c) in dst.iter_mut().zip(view.data().chunks_exact(4)) {
            *d = f32::from_le_bytes(c.try_into().expect("4 bytes"));
        }
        Ok(())
    };
    for t in &model.tensors {
        let r = t.range();
        fill(t, &t.name, &mut params[r.clone()])?;
        if has_m {
            fill(t, &format!("optim.m.{}", t.name), &mut m[r.clone()])?;
        }
        if has_v {
            fill(t, &format!("optim.v.{}", t.name), &mut v[r])?;
        }
    }
    let mut buffers = model.init_buffers();
    for t in &model.buffers {
        fill(t, &t.name, &mut buffers[t.range()])?;
    }
    // a running variance must be a variance
    if buffers.iter().any(|x| !x.is_finite())
        || (model.buffers.iter())
            .filter(|t| t.name.ends_with("running_var"))
            .any(|t| buffers[t.range()].iter().any(|&x| x < 0.0))
    {
        return Err(corrupt(
            "batch norm's running statistics (*.running_mean, *.running_var) contain NaN, infinity or negative variances".into(),
        ));
    }
    if params.iter().any(|p| !p.is_finite()) {
        return Err(corrupt("weights contain NaN or infinity".into()));
    }
    // the optimizer state too: a damaged moment trains on garbage and diverges later, when the
    // error would blame the learning rate
    if m.iter().any(|x| !x.is_finite()) {
        return Err(corrupt(
            "the optimizer's first moments (optim.m.*) contain NaN or infinity".into(),
        ));
    }
    // +infinity can be real (a square that overflowed; the step it scales is then 0)
    if v.iter().any(|x| x.is_nan() || *x < 0.0) {
        return Err(corrupt(
            "the optimizer's second moments (optim.v.*) contain NaN or negative values (a sum of squares cannot be negative)".into(),
        ));
    }
    let opt = OptState {
        t: meta.optimizer_steps,
        m,
        v,
    };
    Ok((
        meta,
        TrainState {
            params,
            opt,
            buffers,
        },
    ))
}

/// A file's bytes through the bounded reader every input file goes through (a FIFO or a device
/// is refused, never waited on; nothing past `most` bytes is read).
fn read_regular(path: &Path, most: u64) -> Result<Vec<u8>, String> {
    crate::files::read::read_bytes(path, &file_expect(most)).map_err(said)
}

/// What a checkpoint's file is expected to be: at most `most` bytes.
fn file_expect(most: u64) -> crate::files::read::Expect<'static> {
    crate::files::read::Expect {
        what: "a checkpoint file",
        flag: "--resume",
        max: most,
        fix: "a file that large is not one a checkpoint of this model holds (damaged, or replaced)",
    }
}

/// A read error as a checkpoint's error says it (the path is said there).
fn said(e: crate::files::read::ReadError) -> String {
    match e {
        crate::files::read::ReadError::Io { source, .. } => source.to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests;
