//! A checkpoint's `state.json`: where the run stands (step, position in the data, batch, LR),
//! its settings for the record, and which run and line of runs wrote it; held to the ranges of
//! the flags that set it before a resumed run relies on it.

use serde::{Deserialize, Serialize};

use super::{MAX_DIMS, MAX_RANKS, MAX_STEP};

/// `state.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMeta {
    pub format: String,
    /// Optimizer steps completed.
    pub step: u64,
    /// Where the data stream continues (epoch and offset into its seeded permutation): with
    /// the seed, this is the whole data-order RNG state.
    pub epoch: u64,
    pub offset: usize,
    pub per_replica: usize,
    pub ranks: usize,
    /// Base LR in effect (after any batch-size rescaling).
    pub lr: f32,
    pub optimizer: String,
    pub optimizer_steps: u64,
    /// Layer widths, input to classes.
    pub dims: Vec<usize>,
    pub seed: u64,
    pub data: String,
    /// The run's settings, for the record.
    pub config: serde_json::Value,
    /// The directory of the run that wrote it (absolute; absent in checkpoints from before run
    /// directories): `--resume` of a directory holding checkpoints of several runs refuses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_dir: Option<String>,
    /// The run directory the line of runs this one continues began in (absolute): a run resumed
    /// from a checkpoint keeps that checkpoint's line, a fresh run begins its own. Absent in
    /// checkpoints from before lines (their line is their `run_dir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// What torchvision's model needs changed to take these weights (`Model::torchvision_changes`),
    /// for `export` to say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torchvision_changes: Option<String>,
    /// The training split's size (absent in checkpoints from before it was recorded): a run
    /// resumed on data of another size is told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train_samples: Option<usize>,
    /// The training split's contents (`fingerprint::of_data`, hex; absent in checkpoints from
    /// before it was recorded): a run resumed on a split of the same size but other samples is
    /// told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train_fingerprint: Option<String>,
    /// The validation set's contents (`fingerprint::of_data`, hex; absent in checkpoints from
    /// before it was recorded): `eval` of the run's own set on other samples refuses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_fingerprint: Option<String>,
    /// The epoch's train loss summed over its samples, and the samples, before `step` (absent
    /// in checkpoints from before it was recorded): a resumed run's epoch line is the whole
    /// epoch's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch_sum: Option<[f64; 2]>,
    /// CRC-32C of the weights file as written (absent in checkpoints from before it was
    /// recorded): bytes changed since (a disk or copy fault) are found before they are loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights_crc32c: Option<u32>,
    /// The validation accuracy of a best checkpoint (`--checkpoint-best`): one of a later
    /// validation replaces it only where that is higher.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_accuracy: Option<f32>,
    /// The best validation of the run's line up to `step` (absent where nothing was validated,
    /// and in older checkpoints): a run resumed from it tells it where its own do not beat it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_val: Option<BestVal>,
    /// The model's input per sample (`3x32x32`, `784`; absent in older checkpoints): `export`
    /// rebuilds the model to write its PyTorch module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// A sample's shape as the data made it (`3x224x224`; an MLP's input is its flattening),
    /// for pictures and tables read as pictures; absent otherwise and in older checkpoints:
    /// `eval` makes a held-out set's pictures this size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample: Option<String>,
    /// How the data's samples were made for the model (`InputRecipe`; absent in older
    /// checkpoints): in words, and a table's per-feature (x - shift) * scale, for `export`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_affine: Option<crate::data::Affine>,
    /// Each output's class name, output 0's first (a folder's classes, CIFAR's); absent where
    /// the data names none (tables, synthetic sets) and in older checkpoints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<String>,
    /// Each rank's share of the global batch, where `--rebalance` had moved it from the even
    /// split (a resumed run on as many ranks goes on from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<Vec<usize>>,
    /// The tensors that began training after the run's first optimizer step (frozen before a
    /// resume that trained them), with that step (`began::names`): Adam's bias correction
    /// counts their steps from there. Empty where every tensor trained from the start, and in
    /// older checkpoints.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub optimizer_began: std::collections::BTreeMap<String, u64>,
}

/// A validation's accuracy (0..=1) and the step it came after.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct BestVal {
    pub accuracy: f32,
    pub step: u64,
}

impl BestVal {
    /// The better of `best` and a validation of `accuracy` after `step` (an equal one keeps
    /// the earlier).
    pub fn with(best: Option<BestVal>, accuracy: f32, step: u64) -> BestVal {
        match best {
            Some(b) if b.accuracy >= accuracy => b,
            _ => BestVal { accuracy, step },
        }
    }

    /// A resumed run's line's best before it (`before`), where the run's own best (`own`)
    /// stayed below it: what its summary and `runs` give as the best.
    pub fn unbeaten(before: Option<BestVal>, own: Option<f32>) -> Option<BestVal> {
        before.filter(|b| own.is_none_or(|a| b.accuracy > a))
    }
}

impl CheckpointMeta {
    /// Why the weights file's `bytes` are not the ones written, where the checksum says so.
    pub fn weights_changed(&self, bytes: &[u8]) -> Option<String> {
        let want = self.weights_crc32c?;
        let got = crc32c::crc32c(bytes);
        if got == want {
            return None;
        }
        if let Some(short) = super::tensor_file::cut_short(bytes) {
            return Some(format!(
                "{} was cut short after it was written: {short} (a copy that stopped, or a disk that filled)",
                super::WEIGHTS
            ));
        }
        Some(format!(
            "{} does not match the checksum its state.json recorded ({want:08x}, now {got:08x}): its bytes changed after it was written (a disk or copy fault)",
            super::WEIGHTS
        ))
    }
}

impl CheckpointMeta {
    /// The run directory the checkpoint's line of runs began in (`origin`, or for checkpoints
    /// from before lines the run that wrote it); None for checkpoints from before run directories.
    pub fn line(&self) -> Option<&str> {
        self.origin.as_deref().or(self.run_dir.as_deref())
    }

    /// What a resumed run relies on, held to the same ranges as the flags that set it.
    pub fn check(&self) -> Result<(), String> {
        if let Some(a) = self.val_accuracy.filter(|a| !(0.0..=1.0).contains(a)) {
            return Err(format!("val_accuracy {a} is out of range (0 to 1)"));
        }
        if let Some(b) = self.best_val {
            if !(0.0..=1.0).contains(&b.accuracy) || b.step > self.step {
                return Err(format!(
                    "best_val {{accuracy {}, step {}}} is not a validation of the run (an accuracy from 0 to 1 at step {} or before)",
                    b.accuracy, b.step, self.step
                ));
            }
        }
        let max_batch = crate::engine::control::MAX_BATCH;
        if self.per_replica == 0 || self.per_replica > max_batch {
            return Err(format!(
                "per_replica {} is out of range (1 to {max_batch})",
                self.per_replica
            ));
        }
        if self.ranks == 0 || self.ranks > MAX_RANKS {
            return Err(format!(
                "ranks {} is out of range (1 to {MAX_RANKS})",
                self.ranks
            ));
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(format!("lr {} is not a positive number", self.lr));
        }
        let global = self.per_replica * self.ranks;
        if let Some(s) = self.split.as_ref().filter(|s| {
            let sum = s.iter().try_fold(0usize, |a, &b| a.checked_add(b));
            s.len() != self.ranks || s.contains(&0) || sum != Some(global)
        }) {
            return Err(format!(
                "split {s:?} is not {} shares of at least 1 adding up to the global batch {global}",
                self.ranks
            ));
        }
        if self
            .optimizer
            .parse::<crate::nn::optim::OptimizerKind>()
            .is_err()
        {
            return Err(format!(
                "optimizer `{}` is not one this program trains with",
                crate::text::printable(&self.optimizer)
            ));
        }
        if self.step > MAX_STEP || self.optimizer_steps > MAX_STEP {
            return Err(format!(
                "step {} / optimizer_steps {} is out of range (up to {MAX_STEP})",
                self.step, self.optimizer_steps
            ));
        }
        if let Some((name, b)) =
            (self.optimizer_began.iter()).find(|(_, &b)| b > self.optimizer_steps)
        {
            return Err(format!(
                "optimizer_began says {} began training after step {b}, past the checkpoint's optimizer_steps {}",
                crate::text::printable(name),
                self.optimizer_steps
            ));
        }
        if self.dims.len() < 2 || self.dims.len() > MAX_DIMS {
            return Err(format!(
                "dims has {} entries (a model has 2 to {MAX_DIMS})",
                self.dims.len()
            ));
        }
        // the data position is in the split it was written on
        if let Some(n) = self.train_samples.filter(|&n| self.offset > n) {
            return Err(format!(
                "offset {} is past the end of its own training split ({n} samples)",
                self.offset
            ));
        }
        // every epoch takes at least one step
        if self.epoch > self.step + 1 {
            return Err(format!(
                "epoch {} is impossible after {} steps",
                self.epoch, self.step
            ));
        }
        // (a loss sum and a sample count: neither negative, the count whole)
        if let Some([loss, samples]) = self.epoch_sum {
            if !((0.0..1e300).contains(&loss)
                && (0.0..=9e15).contains(&samples)
                && samples.fract() == 0.0)
            {
                return Err(format!(
                    "epoch_sum [{}, {}] is not a loss sum and a whole count of samples, both 0 or more",
                    crate::text::number(loss),
                    crate::text::number(samples)
                ));
            }
        }
        // (the settings a resume takes up: a checkpoint without them would resume on defaults)
        if !self.config.is_object() {
            return Err(format!(
                "config is {}, not the run's settings (an object)",
                crate::text::excerpt(&self.config.to_string())
            ));
        }
        let outputs = self.dims.last().copied().unwrap_or(0);
        if !self.classes.is_empty() && self.classes.len() != outputs {
            return Err(format!(
                "classes names {} classes for the model's {outputs} outputs",
                self.classes.len()
            ));
        }
        if let Some((shift, scale)) = &self.input_affine {
            // (one of each, every feature alike, or one per value of the model's input, where its
            // size is recorded)
            let features = (self.input.as_deref()).and_then(|i| {
                i.split('x')
                    .map(|d| d.parse::<usize>().ok())
                    .product::<Option<usize>>()
            });
            let fits = scale.len() == shift.len()
                && (scale.len() == 1 || features.is_none_or(|n| n == scale.len()));
            if !fits || scale.is_empty() {
                return Err(format!(
                    "input_affine scales {} and shifts {} features, for a model input of {}",
                    scale.len(),
                    shift.len(),
                    (self.input.as_deref()).map_or("unrecorded size".into(), crate::text::excerpt)
                ));
            }
            if !shift.iter().chain(scale).all(|v| v.is_finite()) {
                return Err("input_affine holds a value that is not a finite number".into());
            }
        }
        let most = crate::engine::validate::MAX_GRAD_ACCUM as u64;
        match &self.config["grad_accum"] {
            serde_json::Value::Null => {}
            v if v.as_u64().is_some_and(|a| (1..=most).contains(&a)) => {}
            v => {
                return Err(format!(
                    "config.grad_accum {} is out of range (1 to {most})",
                    crate::text::excerpt(&v.to_string())
                ))
            }
        }
        // (eval's loss takes it up as the run's validation did)
        match &self.config["label_smoothing"] {
            serde_json::Value::Null => {}
            v if v.as_f64().is_some_and(|s| (0.0..1.0).contains(&s)) => {}
            v => {
                return Err(format!(
                    "config.label_smoothing {} is out of range (0 to 1, exclusive)",
                    crate::text::excerpt(&v.to_string())
                ))
            }
        }
        Ok(())
    }
    /// The accumulation the checkpoint's run used (`check` holds it in range; 1 for
    /// checkpoints from before it was recorded).
    pub fn grad_accum(&self) -> usize {
        self.config["grad_accum"].as_u64().map_or(1, |a| a as usize)
    }
}

#[cfg(test)]
impl CheckpointMeta {
    /// A checkpoint of step 10: 2 ranks x 32 each, Adam at 1e-3, on the digits.
    pub(crate) fn example() -> CheckpointMeta {
        CheckpointMeta {
            format: super::FORMAT.into(),
            step: 10,
            epoch: 0,
            offset: 0,
            per_replica: 32,
            ranks: 2,
            lr: 1e-3,
            optimizer: "adam".into(),
            optimizer_steps: 10,
            dims: vec![4, 2],
            seed: 0,
            data: "digits".into(),
            config: serde_json::json!({}),
            run_dir: None,
            origin: None,
            torchvision_changes: None,
            input: None,
            sample: None,
            inputs: None,
            input_affine: None,
            train_samples: None,
            train_fingerprint: None,
            val_fingerprint: None,
            epoch_sum: None,
            weights_crc32c: None,
            val_accuracy: None,
            best_val: None,
            classes: Vec::new(),
            split: None,
            optimizer_began: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::CheckpointMeta;

    #[test]
    fn an_epoch_sum_that_no_run_writes_is_refused() {
        let with = |sum: [f64; 2]| CheckpointMeta {
            epoch_sum: Some(sum),
            ..CheckpointMeta::example()
        };
        assert_eq!(with([12.5, 64.0]).check(), Ok(()));
        assert_eq!(with([0.0, 0.0]).check(), Ok(()));
        for bad in [
            [-1.0, 64.0],
            [1.0, -64.0],
            [1.0, 2.5],
            [1e308, 64.0],
            [1.0, 1e300],
        ] {
            let e = with(bad).check().unwrap_err();
            assert!(e.starts_with("epoch_sum ["), "{bad:?}: {e}");
        }
    }

    #[test]
    fn a_best_validation_after_the_checkpoints_step_or_out_of_range_is_refused() {
        let best = |accuracy: f32, step: u64| CheckpointMeta {
            step: 10,
            best_val: Some(super::BestVal { accuracy, step }),
            ..CheckpointMeta::example()
        };
        assert_eq!(best(0.97, 10).check(), Ok(()));
        for (a, s) in [(0.97, 11), (1.5, 4), (-0.1, 4), (f32::NAN, 4)] {
            let e = best(a, s).check().unwrap_err();
            assert!(e.starts_with("best_val {accuracy "), "{a} {s}: {e}");
        }
        // (absent in older checkpoints)
        let old = serde_json::to_value(CheckpointMeta::example()).unwrap();
        assert!(old.get("best_val").is_none());
        let read: CheckpointMeta = serde_json::from_value(old).unwrap();
        assert_eq!(read.best_val, None);
    }

    #[test]
    fn a_tensor_cannot_have_begun_training_after_the_checkpoints_last_step() {
        let began = |b: u64| CheckpointMeta {
            optimizer_began: [("mlp.0.weight".to_string(), b)].into(),
            ..CheckpointMeta::example()
        };
        assert_eq!(began(10).check(), Ok(()));
        let e = began(11).check().unwrap_err();
        assert!(
            e.contains("mlp.0.weight began training after step 11, past"),
            "{e}"
        );
    }

    #[test]
    fn a_tables_scaling_is_of_the_models_input() {
        let with = |input: Option<&str>, scale: Vec<f64>, shift: Vec<f64>| CheckpointMeta {
            input: input.map(String::from),
            input_affine: Some((shift, scale)),
            ..CheckpointMeta::example()
        };
        assert_eq!(with(Some("3"), vec![1.0; 3], vec![0.5; 3]).check(), Ok(()));
        assert_eq!(
            with(Some("1x2x2"), vec![1.0; 4], vec![0.; 4]).check(),
            Ok(())
        );
        assert_eq!(with(None, vec![1.0; 5], vec![0.; 5]).check(), Ok(()));
        // (every feature alike)
        assert_eq!(with(Some("64"), vec![0.0625], vec![0.]).check(), Ok(()));
        let e = with(Some("64"), vec![1.0, 2.0], vec![3.0])
            .check()
            .unwrap_err();
        assert_eq!(
            e,
            "input_affine scales 2 and shifts 1 features, for a model input of 64"
        );
        assert!(with(Some("64"), vec![1.0; 2], vec![0.; 2]).check().is_err());
        assert!(with(None, vec![], vec![]).check().is_err());
        let e = with(None, vec![f64::NAN], vec![0.]).check().unwrap_err();
        assert_eq!(e, "input_affine holds a value that is not a finite number");
    }

    #[test]
    fn a_data_position_past_its_own_split_is_refused() {
        let at = |offset, train_samples| CheckpointMeta {
            offset,
            train_samples,
            ..CheckpointMeta::example()
        };
        assert_eq!(at(1437, Some(1438)).check(), Ok(()));
        // (before the split's size was recorded, or at the end of its epoch)
        assert_eq!(at(5000, None).check(), Ok(()));
        assert_eq!(at(1438, Some(1438)).check(), Ok(()));
        let e = at(1_000_000_000, Some(1438)).check().unwrap_err();
        assert_eq!(
            e,
            "offset 1000000000 is past the end of its own training split (1438 samples)"
        );
    }
}
