//! A validation (at each epoch's end, a step budget's last step, and every `--val-every`
//! steps): the replicas made one
//! (local SGD), each rank's share evaluated, the sums all-reduced.

use super::Worker;
use crate::backend::Replica;
use crate::config::Budget;
use crate::engine::heartbeat::Phase;
use crate::engine::strategy::Buffers;
use crate::engine::{EngineError, Event};

impl Worker {
    /// After a step that does not end an epoch, whether a validation is due (`--val-every`'s,
    /// or a step budget's last step, so that the weights the run ends with are validated): the
    /// epochs trained by then (1.4: 40% into the second).
    pub(super) fn validation_due(&self, epoch_end: bool) -> Option<f32> {
        let last = matches!(self.cfg.budget, Budget::Steps(n) if self.step == n);
        let every = (self.cfg.val_every).is_some_and(|e| self.step.is_multiple_of(e));
        if epoch_end || !self.validates() || !(last || every) {
            return None;
        }
        let within = self.cursor.offset as f64 / self.train.samples as f64;
        Some((self.cursor.epoch as f64 + within) as f32)
    }

    /// Whether this run validates (it has a validation set; not `scale`'s measurements).
    fn validates(&self) -> bool {
        self.cfg.epoch_validation && !self.val.is_empty()
    }

    /// Validation, sharded across ranks and summed with the collective.
    pub(super) fn validate(
        &mut self,
        replica: &mut dyn Replica,
    ) -> Result<(Option<f32>, Option<f32>), EngineError> {
        if !self.validates() {
            return Ok((None, None));
        }
        (self.beats).beat(self.rank, self.step, Phase::Validate);
        let n = self.val.len();
        if self.rank == 0 {
            let _ = self.events.send(Event::Validating {
                step: self.step,
                samples: n,
            });
        }
        self.sync_replicas(replica, Buffers::InPlace)?;
        let per = n.div_ceil(self.ranks);
        let lo = (self.rank * per).min(n);
        let hi = ((self.rank + 1) * per).min(n);
        // a class none of whose pictures decode is left out (its samples would be blank): a
        // rank finds the classes of its own samples, each process of its own files
        let lost = || (self.val.pictures.as_ref()).map_or(Vec::new(), |p| p.lost.labels());
        let known = lost();
        let held = known.is_empty().then(|| replica.evaluate_held(lo, hi));
        let (mut loss, mut correct, mut counted) = match held.flatten() {
            Some((l, c)) => (l, c, hi - lo),
            None => self.evaluate(replica, lo..hi, &known),
        };
        // (found in this pass, here or by another process, whose files may be damaged where
        // this one's are not: evaluated again without it, every process over the same classes)
        let mut now = lost();
        if let Some(p) = (self.val.pictures.as_ref()).filter(|_| self.local.len() < self.ranks) {
            let mut mask = vec![0.0f32; self.val.classes];
            now.iter().for_each(|&c| mask[c as usize] = 1.0);
            self.coll.all_reduce_sum(&mut mask)?;
            let elsewhere = (0..mask.len() as u32).filter(|&c| mask[c as usize] > 0.0);
            let tell = self.local.start == 0;
            elsewhere.for_each(|c| p.lost.add_elsewhere(c, tell));
            now = lost();
        }
        if now != known {
            (loss, correct, counted) = self.evaluate(replica, lo..hi, &now);
        }
        let mut sums = vec![loss as f32, correct as f32, counted as f32];
        self.coll.all_reduce_sum(&mut sums)?;
        // (back between steps: a stall from here on is one)
        (self.beats).beat(self.rank, self.step, Phase::Update);
        // (pictures that failed to decode are said now, every rank of the process past them:
        // the run may end with this validation)
        self.say_skipped_pictures();
        self.say_lost_validation_classes();
        if sums[2] == 0.0 {
            let why = (self.val.pictures.as_ref()).and_then(|p| p.lost.first());
            let msg = format!(
                "no validation class has a picture that decodes ({}); repair or replace them, or validate on other data (--val-data, --val-split)",
                why.unwrap_or_default()
            );
            let spec = self.cfg.data.to_string();
            return Err(crate::data::DataError::Spec { spec, msg }.into());
        }
        Ok((Some(sums[0] / sums[2]), Some(sums[1] / sums[2])))
    }

    /// Validation samples `rows` but those of the classes `lost` (summed loss, correct,
    /// count): a picture set's are made a chunk at a time.
    fn evaluate(
        &self,
        replica: &mut dyn Replica,
        rows: std::ops::Range<usize>,
        lost: &[u32],
    ) -> (f64, usize, usize) {
        let chunk = match self.val.pictures {
            Some(_) => 256,
            None => rows.len(),
        };
        let (mut loss, mut correct, mut counted, mut buf) = (0.0, 0, 0, Vec::new());
        let mut sum = |x: &[f32], y: &[u32]| {
            let (l, c) = replica.evaluate(x, y, y.len());
            (loss, correct, counted) = (loss + l, correct + c, counted + y.len());
        };
        match lost.is_empty() {
            true => {
                for a in rows.clone().step_by(chunk.max(1)) {
                    let b = (a + chunk).min(rows.end);
                    sum(self.val.rows(a, b, &mut buf), &self.val.y[a..b]);
                }
            }
            false => {
                let kept: Vec<u32> = (rows.start as u32..rows.end as u32)
                    .filter(|&i| !lost.contains(&self.val.y[i as usize]))
                    .collect();
                for part in kept.chunks(chunk.max(1)) {
                    self.val.gather(part, 0, &mut buf);
                    let y: Vec<u32> = part.iter().map(|&i| self.val.y[i as usize]).collect();
                    sum(&buf, &y);
                }
            }
        }
        (loss, correct, counted)
    }
}
