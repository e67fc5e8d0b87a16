//! Where a run starts: a fresh model, or a checkpoint's state and position.

use std::path::PathBuf;

use super::checkpoint::{self, CheckpointError, CheckpointMeta};
use super::loader::Cursor;
use super::resume::{resumed_settings, TrainSplit};
use super::weights;
use super::EngineError;
use crate::backend::TrainState;
use crate::config::strategy::Strategy;
use crate::config::{Budget, RunConfig, DEFAULT_LR, DEFAULT_LR_BATCH};
use crate::nn::model::{Model, Op};
use crate::nn::schedule::LrScaling;

/// Where a run starts: fresh or from a checkpoint.
#[derive(Clone, Debug)]
pub(super) struct Start {
    pub step: u64,
    pub cursor: Cursor,
    pub per_replica: usize,
    pub lr: f32,
    /// Where the LR and (resuming) the batch size came from, and the settings changed from
    /// the checkpoint's run, for the start-up lines.
    pub lr_note: Option<String>,
    pub resume_note: Option<String>,
    pub state: TrainState,
    /// The checkpoint resumed from (its step is `step`).
    pub checkpoint: Option<PathBuf>,
    /// What `--init` loaded, for the start-up lines.
    pub init_notes: Vec<String>,
    /// The epoch's loss sum and samples before `step` (`Worker::epoch_sum`).
    pub epoch_sum: [f64; 2],
    /// Each rank's share of the global batch, where a resumed run goes on rebalanced.
    pub shares: Option<Vec<usize>>,
    /// The parameters that began training late, and after which optimizer step
    /// (`Optimizer::began`, `checkpoint::began`).
    pub began: Vec<(std::ops::Range<usize>, u64)>,
    /// The best validation of the checkpoint's line before it (a fresh run: none).
    pub best_val: Option<checkpoint::BestVal>,
}

impl Start {
    /// This start on a training split of `samples`: a checkpoint's data position past its end
    /// (written for a larger split: the data or its split changed) takes that epoch as done,
    /// said in the resume note; where that was the `budget`'s last, there is nothing to train.
    pub fn within(mut self, samples: usize, budget: Budget) -> Result<Start, EngineError> {
        if self.cursor.offset < samples || samples == 0 {
            return Ok(self);
        }
        let past = format!(
            "data position ({}) is past the end of this training set ({samples} samples), so epoch {} is taken as done",
            self.cursor.offset,
            self.cursor.epoch + 1
        );
        self.cursor = Cursor {
            epoch: self.cursor.epoch + 1,
            offset: 0,
        };
        self.epoch_sum = [0.0, 0.0];
        if let Some(why) = super::resume::budget_reached(budget, self.step, self.cursor.epoch) {
            return Err(EngineError::Config(format!(
                "nothing to resume: the checkpoint's {past}, and the run {why}"
            )));
        }
        let note = format!(
            "its {past} and the run goes on from the start of epoch {}",
            self.cursor.epoch + 1
        );
        self.resume_note = Some(match self.resume_note.take() {
            Some(n) => format!("{n}; {note}"),
            None => note,
        });
        Ok(self)
    }
}

/// The starting point of a run of `ranks` ranks on the training split `split` (of the classes
/// named `classes`, where they are): `--resume`'s checkpoint (read by process 0 alone, `lead`;
/// the others take it from there) or a fresh model.
pub(super) fn starting_point(
    cfg: &RunConfig,
    model: &Model,
    ranks: usize,
    lead: bool,
    (split, classes): (TrainSplit, &[String]),
) -> Result<Start, EngineError> {
    let start = match cfg.resume.as_ref().filter(|_| lead) {
        Some(path) => {
            let dir = checkpoint::resolve(path)?;
            // (what a run killed there left, where this one writes elsewhere: its own
            // directory was tidied when it took its lock)
            let abs = |p: &std::path::Path| std::path::absolute(p).ok();
            if let Some(beside) = dir.parent().filter(|b| abs(b) != abs(&cfg.checkpoint_dir)) {
                checkpoint::tidy_if_free(beside);
            }
            let (meta, state) = checkpoint::read(&dir, model, &cfg.optimizer.to_string())
                .map_err(|e| same_model_other_input(e, cfg, model))?;
            local_sgd_resumable(cfg, &meta)?;
            let mut resumed = resumed_settings(cfg, &meta, ranks, split);
            resumed.resume_note += &stem_change(&meta, cfg, model).unwrap_or_default();
            resumed.resume_note += &inputs_change(&meta, cfg).unwrap_or_default();
            if let Some(newer) = checkpoint::passed_over(&dir, meta.step).last() {
                resumed.resume_note += &format!(
                    "; {} beside it is not a checkpoint (no state.json: damaged, or not written by mgtop-train) and was passed over",
                    newer.display()
                );
            }
            if let Some(theirs) = live_elsewhere(&meta, cfg) {
                resumed.resume_note += &format!(
                    "; its run {} is still running (and may be past step {}): this run trains apart from it, from that step",
                    theirs.display(),
                    meta.step
                );
            }
            Start {
                step: meta.step,
                cursor: Cursor {
                    epoch: meta.epoch,
                    offset: meta.offset,
                },
                per_replica: resumed.per_replica,
                lr: resumed.lr,
                lr_note: Some(resumed.lr_note),
                resume_note: Some(resumed.resume_note),
                checkpoint: Some(dir),
                init_notes: Vec::new(),
                epoch_sum: meta.epoch_sum.unwrap_or_default(),
                shares: resumed.shares,
                began: checkpoint::began::ranges(model, &meta, &state.opt),
                best_val: best_before(&meta, split),
                state,
            }
        }
        None => fresh(cfg, model, ranks, lead, (split.samples, classes))?,
    };
    Ok(start)
}

/// `--checkpoint-best` on a resume into a checkpoint directory of its own: the best
/// checkpoint of the line beside the one resumed from, brought along (`checkpoint::carry_best`),
/// with its validation; or why it could not be.
pub(super) fn carry_best(
    cfg: &RunConfig,
    start: &Start,
) -> Option<Result<(std::path::PathBuf, checkpoint::BestVal), String>> {
    let (resumed, best) = (start.checkpoint.as_deref()?, start.best_val?);
    if !cfg.checkpoint_best {
        return None;
    }
    checkpoint::carry_best(resumed, &cfg.checkpoint_dir, cfg.origin.as_deref(), best)
        .map(|to| to.map(|to| (to, best)))
        .transpose()
}

/// What the log says of `carry_best`'s outcome, as the run starts after `step`: the line's
/// best checkpoint, now this run's, or why it is not.
pub(super) fn carried_event(
    carried: Result<(std::path::PathBuf, checkpoint::BestVal), String>,
    step: u64,
) -> crate::engine::Event {
    use crate::engine::Event;
    match carried {
        Ok((path, best)) => Event::Checkpoint {
            step: best.step,
            path,
            best: Some(best.accuracy),
        },
        Err(message) => Event::Warning { step, message },
    }
}

/// The best validation of the line of the checkpoint `meta` before it (of a best checkpoint
/// from before lines carried it: its own), where this run validates on the same set.
fn best_before(meta: &CheckpointMeta, split: TrainSplit) -> Option<checkpoint::BestVal> {
    let same_set = split
        .hex()
        .1
        .is_some_and(|f| meta.val_fingerprint == Some(f));
    let own = (meta.val_accuracy).map(|accuracy| checkpoint::BestVal {
        accuracy,
        step: meta.step,
    });
    meta.best_val.or(own).filter(|_| same_set)
}

/// The run directory of the run that wrote the checkpoint `meta`, where that run is still
/// running and is not this one (a resumed run in place holds the directory itself).
fn live_elsewhere(meta: &checkpoint::CheckpointMeta, cfg: &RunConfig) -> Option<PathBuf> {
    let theirs = PathBuf::from(meta.run_dir.as_deref()?);
    let ours = cfg.run_dir.as_deref();
    (ours.is_none_or(|o| !crate::files::same_path(o, &theirs))
        && crate::engine::rundir::is_live(&theirs))
    .then_some(theirs)
}

/// A checkpoint of the same `--model` that does not fit was trained on inputs of another size
/// (a convolutional model's every layer follows the picture size): said so, with the picture
/// size it had, instead of blaming the model.
fn same_model_other_input(e: CheckpointError, cfg: &RunConfig, model: &Model) -> CheckpointError {
    let CheckpointError::ShapeMismatch { path, what } = e else {
        return e;
    };
    let Ok(meta) = checkpoint::read_meta(&path) else {
        return CheckpointError::ShapeMismatch { path, what };
    };
    let same_model =
        meta.config.get("model").and_then(|m| m.as_str()) == Some(&cfg.model.to_string());
    let same_classes = meta.dims.last() == model.dims.last();
    if !same_model || !same_classes || meta.dims.first() == model.dims.first() {
        return CheckpointError::ShapeMismatch { path, what };
    }
    let had = match meta.config.get("image_size").and_then(|s| s.as_u64()) {
        Some(s) => format!(" (it had --image-size {s})"),
        None => String::new(),
    };
    // with global pooling before the head no layer's shape need follow the picture size: a
    // checksummed checkpoint whose tensors all fit resumes as it is (`checkpoint::read`), so
    // one refused has layers the size chooses (a stem); one from before checksums was not held
    // to them, and its weights may start a run on these pictures
    let pooled = (model.nodes.iter()).any(|n| matches!(n.op, Op::GlobalAvgPool { .. }));
    let init = match (pooled, meta.weights_crc32c.is_some()) {
        (true, false) => format!(
            ", or start a new run from its weights on these pictures: --init {}",
            path.join(checkpoint::WEIGHTS).display()
        ),
        (true, true) => format!(
            ", or start without --resume: the model's layers are not the same at this picture size{}",
            model.stem.map_or(String::new(), |s| format!(" (here: {s})"))
        ),
        (false, _) => ", or start without --resume".into(),
    };
    let what = format!(
        "it is --model {} trained on inputs of {} values a sample, and this run's data gives {}: resume it with the --data and picture options it was trained with{had}{init}",
        cfg.model,
        meta.dims[0],
        model.dims[0],
    );
    CheckpointError::ShapeMismatch { path, what }
}

/// A checkpoint taken on inputs of another size (its tensors all fit, `checkpoint::read`)
/// whose stem that size chose otherwise (mobilenetv2's first stride across 64 pixels): said,
/// since the same weights then make another network.
fn stem_change(meta: &CheckpointMeta, cfg: &RunConfig, model: &Model) -> Option<String> {
    if meta.dims.first() == model.dims.first() {
        return None;
    }
    let input = weights::module::parse_input(meta.input.as_deref()?)?;
    let theirs = Model::new(input, &cfg.model, model.classes()).ok()?;
    (theirs.stem != model.stem).then(|| {
        let said = |s: Option<&str>| s.unwrap_or("the network's usual one").to_string();
        format!(
            "; the stem is not the checkpoint's at this picture size (this run's: {}; on the checkpoint's {}: {})",
            said(model.stem),
            theirs.input,
            said(theirs.stem)
        )
    })
}

/// Inputs this run makes otherwise than the checkpoint's run made them (another --data's scaling,
/// another normalisation), as `--init` says of a file's: the weights go on from values prepared
/// otherwise. Pictures only sized otherwise are left to the `--image-size` change said.
fn inputs_change(meta: &CheckpointMeta, cfg: &RunConfig) -> Option<String> {
    use crate::data::InputRecipe;
    let ours = cfg.recipe.text.as_str();
    let theirs = (meta.inputs.as_deref()).filter(|t| !ours.is_empty() && *t != ours)?;
    let values = InputRecipe::values_part;
    if values(theirs).is_some() && values(theirs) == values(ours) {
        return None;
    }
    let (was, is) = weights::inputs_apart(theirs, ours);
    Some(format!(
        "; the checkpoint's weights learned on inputs {was}, this run's are {is}: {}",
        weights::how_apart(theirs, ours)
    ))
}

/// Local SGD without `,moments` past its warm-up: each rank's optimizer moments are its own,
/// and a checkpoint keeps one replica's, so a resumed run could not be the uninterrupted one.
/// Refused with the reason and the ways on (`Strategy::unresumable`).
fn local_sgd_resumable(cfg: &RunConfig, meta: &CheckpointMeta) -> Result<(), EngineError> {
    let written = Strategy::recorded(&meta.config);
    let why =
        written.and_then(|w| w.unresumable(cfg.optimizer, meta.step, meta.ranks, cfg.strategy));
    match why {
        Some((why, flags)) => Err(EngineError::Config(format!(
            "{why}; go on from it with every rank taking those moments: {flags} (averages them at every sync, and resumes exactly from then on) or --strategy mirrored; or start the run again"
        ))),
        None => Ok(()),
    }
}

/// A fresh run: the model's seeded initialisation, then `--init`'s weights (read by process 0
/// alone, `lead`), with what they were trained for where this run (of the data's `classes`)
/// differs.
fn fresh(
    cfg: &RunConfig,
    model: &Model,
    ranks: usize,
    lead: bool,
    (samples, classes): (usize, &[String]),
) -> Result<Start, EngineError> {
    let global = crate::config::step_samples(cfg.batch_per_replica, ranks, cfg.grad_accum, samples);
    let mut state = TrainState::initial(model, cfg.optimizer, cfg.seed);
    let init_notes = match cfg.init.as_ref().filter(|_| lead) {
        Some(path) => {
            let (params, buffers) = (&mut state.params, &mut state.buffers);
            let mut notes = weights::import(path, model, params, buffers, cfg.init_partial)
                .map_err(EngineError::Config)?;
            notes.extend(weights::against_run(path, model, classes, &cfg.recipe.text));
            notes
        }
        None => Vec::new(),
    };
    Ok(Start {
            step: 0,
            cursor: Cursor::default(),
            per_replica: cfg.batch_per_replica,
            lr: cfg.start_lr(global),
            lr_note: match (cfg.lr, cfg.lr_scaling()) {
                (None, LrScaling::None) => Some(format!(
                    "default: {DEFAULT_LR:e} at any global batch (--lr-scaling none)"
                )),
                (None, s) => Some(format!(
                    "default: {DEFAULT_LR:e} for a global batch of {DEFAULT_LR_BATCH}, {s} scaling to {global}"
                )),
                // (a given LR is the run's as it starts: an asked scaling acts on batch changes)
                (Some(_), s) if cfg.lr_scaling.is_some() && s != LrScaling::None => Some(format!(
                    "--lr as given; --lr-scaling {s} rescales it when the batch changes"
                )),
                (Some(_), _) => None,
            },
            resume_note: None,
            epoch_sum: [0.0, 0.0],
            shares: None,
            began: Vec::new(),
            best_val: None,
            state,
            checkpoint: None,
            init_notes,
    })
}
