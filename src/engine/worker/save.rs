//! Checkpoints: rank 0 writes the one model the ranks hold, with where the run stands; and
//! under `--checkpoint-best`, the best validation's.

use super::Worker;
use crate::backend::Replica;
use crate::engine::checkpoint::{self, CheckpointMeta};
use crate::engine::events::Event;
use crate::engine::heartbeat::Phase;
use crate::engine::strategy::Buffers;
use crate::engine::EngineError;

/// The most features whose statistics a checkpoint's state.json records (`input_affine`).
const MAX_AFFINE: usize = 1 << 16;

impl Worker {
    /// Rank 0 writes a checkpoint of the one model (local SGD: averaged first); all ranks call it.
    /// One of this step is written once; `asked` (a control asked for it) is answered with it
    /// again where it is written already (pressed twice while paused).
    pub(super) fn save(
        &mut self,
        replica: &mut dyn Replica,
        asked: bool,
    ) -> Result<(), EngineError> {
        self.sync_replicas(replica, Buffers::Aside)?;
        let saved = (self.last_checkpoint.as_ref()).filter(|(s, _)| *s == self.step);
        if let Some((step, path)) = saved.filter(|_| asked && self.rank == 0) {
            let _ = self.events.send(Event::Checkpoint {
                step: *step,
                path: path.clone(),
                best: None,
            });
        }
        let name = checkpoint::step_name(self.step);
        if self.rank != 0 || saved.is_some() {
            if self.rank != 0 && self.local.start == 0 {
                // (rank 0 of this process writes it there: this rank's own errors name it)
                self.last_checkpoint = Some((self.step, self.cfg.checkpoint_dir.join(&name)));
            }
            return Ok(());
        }
        let path = self.write_checkpoint(replica, &name, None)?;
        let _ = self.events.send(Event::Checkpoint {
            step: self.step,
            path: path.clone(),
            best: None,
        });
        self.written.push_back(path.clone());
        self.last_checkpoint = Some((self.step, path));
        self.keep_newest();
        Ok(())
    }

    /// `--checkpoint-best`, after a validation of `accuracy` (which made the replicas one):
    /// where it beats the best so far (`best`: this run's, or that of the best checkpoint of
    /// its line found at its start), rank 0 writes the model as `best`, replacing the one
    /// before.
    pub(super) fn save_best(
        &mut self,
        replica: &mut dyn Replica,
        best: &mut Option<f32>,
        accuracy: f32,
    ) -> Result<(), EngineError> {
        let beaten = best.is_none_or(|b| accuracy > b);
        if !self.cfg.checkpoint_best || self.rank != 0 || !beaten {
            return Ok(());
        }
        *best = Some(accuracy);
        let path = self.write_checkpoint(replica, checkpoint::BEST, Some(accuracy))?;
        let _ = self.events.send(Event::Checkpoint {
            step: self.step,
            path,
            best: Some(accuracy),
        });
        Ok(())
    }

    /// Rank 0: the one model written as checkpoint `name`, with the validation accuracy of a
    /// best one; its heartbeat says so meanwhile (a long write is not a stall).
    fn write_checkpoint(
        &mut self,
        replica: &mut dyn Replica,
        name: &str,
        val_accuracy: Option<f32>,
    ) -> Result<std::path::PathBuf, EngineError> {
        self.beats.beat(self.rank, self.step, Phase::Checkpoint);
        let written = self.write_files(replica, name, val_accuracy);
        // (back between steps: a stall from here on is one)
        self.beats.beat(self.rank, self.step, Phase::Update);
        written
    }

    fn write_files(
        &mut self,
        replica: &mut dyn Replica,
        name: &str,
        val_accuracy: Option<f32>,
    ) -> Result<std::path::PathBuf, EngineError> {
        let state = self.strategy.export(replica, self.step);
        if state.params.iter().any(|p| !p.is_finite()) {
            // a finite loss can still come with an overflowing update; never save such weights
            // (after an update: the training's settings to blame, the first step's too)
            return Err(EngineError::NonFinite {
                step: self.step,
                epoch: self.cursor.epoch + 1,
                checkpoint: self.last_checkpoint_path(),
                started_from: None,
            });
        }
        let cfg = &self.cfg;
        let meta = CheckpointMeta {
            format: checkpoint::FORMAT.into(),
            step: self.step,
            epoch: self.cursor.epoch,
            offset: self.cursor.offset,
            per_replica: self.per_replica,
            ranks: self.ranks,
            lr: self.lr_base,
            optimizer: cfg.optimizer.to_string(),
            optimizer_steps: state.opt.t,
            dims: self.model.dims.clone(),
            seed: cfg.seed,
            data: cfg.data.to_string(),
            config: cfg.record(),
            run_dir: cfg.run_dir.as_ref().map(|p| p.display().to_string()),
            origin: cfg.origin.clone(),
            torchvision_changes: self.model.torchvision_changes.map(String::from),
            train_samples: Some(self.train.samples),
            train_fingerprint: Some(self.train.hex().0),
            val_fingerprint: self.train.hex().1,
            epoch_sum: Some(self.epoch_sum),
            // (filled in as the weights are written)
            weights_crc32c: None,
            val_accuracy,
            best_val: self.line_best,
            input: Some(self.model.input.to_string()),
            sample: cfg.recipe.sample.map(|s| crate::data::shape_text(&s)),
            inputs: Some(cfg.recipe.text.clone()).filter(|t| !t.is_empty()),
            // (a table's per-feature statistics, up to a size state.json carries well)
            input_affine: (cfg.recipe.affine.clone()).filter(|(s, _)| s.len() <= MAX_AFFINE),
            classes: self.classes.clone(),
            split: self.split.as_deref().cloned(),
            optimizer_began: self.optimizer_began.clone(),
        };
        let dir = &cfg.checkpoint_dir;
        // (a full disk: the error names the checkpoint to resume from)
        checkpoint::write(dir, name, &self.model, &state, &meta).map_err(|e| match e {
            checkpoint::CheckpointError::Write { path, source, .. } => {
                let last = self.last_checkpoint_path();
                checkpoint::CheckpointError::Write { path, source, last }.into()
            }
            e => e.into(),
        })
    }

    /// `--checkpoint-best`: the accuracy of the best checkpoint of this run's line in its
    /// directory, which a validation must beat to replace it (rank 0, which writes them).
    pub(super) fn best_to_beat(&self) -> Option<f32> {
        if !self.cfg.checkpoint_best || self.rank != 0 {
            return None;
        }
        let meta = checkpoint::read_meta(&self.cfg.checkpoint_dir.join(checkpoint::BEST)).ok()?;
        meta.val_accuracy
            .filter(|_| meta.line() == self.cfg.origin.as_deref())
    }

    /// `--keep-checkpoints N`: the checkpoints this run wrote before its newest N removed.
    fn keep_newest(&mut self) {
        let keep = self.cfg.keep_checkpoints.unwrap_or(u64::MAX);
        while self.written.len() as u64 > keep {
            let Some(old) = self.written.pop_front() else {
                break;
            };
            if let Err(e) = checkpoint::remove(&old) {
                let stays = match old.is_dir() {
                    true => "it stays",
                    false => "what is left of it is cleared at the next start in its directory",
                };
                let message = format!(
                    "--keep-checkpoints: cannot remove {}: {e}; {stays}",
                    old.display()
                );
                let step = self.step;
                let _ = self.events.send(Event::Warning { step, message });
            }
        }
    }
}
