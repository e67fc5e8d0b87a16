//! A run's picture sets as its ranks read them: the files that failed to decode said, a
//! training class none of whose pictures decode an error, and a validation class's left out
//! of the figures.

use super::Worker;
use crate::engine::events::Event;
use crate::engine::EngineError;

impl Worker {
    /// An error where a class of the training split has no picture that decodes (its samples
    /// would be blank), after saying the files that failed.
    pub(super) fn pictures_usable(&self) -> Result<(), EngineError> {
        let Some(why) = self.train_lost.as_ref().and_then(|l| l.first()) else {
            return Ok(());
        };
        self.say_skipped_pictures();
        let spec = self.cfg.data.to_string();
        let msg =
            format!("{why}; repair or replace them, or move the class's folder out of the data");
        Err(crate::data::DataError::Spec { spec, msg }.into())
    }

    /// The validation classes none of whose pictures decode (their samples are left out of
    /// the figures), each told once as a warning by the process's first rank.
    pub(super) fn say_lost_validation_classes(&self) {
        let Some(p) = (self.val.pictures.as_ref()).filter(|_| self.rank == self.local.start) else {
            return;
        };
        for why in p.lost.unsaid() {
            let message = format!("{why}; validation leaves the class out for the rest of this run (its loss and accuracy are over the other classes); repair or replace them before the next");
            let step = self.step;
            let _ = self.events.send(Event::Warning { step, message });
        }
    }

    /// Picture files that failed to decode since the last look, one event each, told by the
    /// process's first rank (the picture sets are the process's).
    pub(super) fn say_skipped_pictures(&self) {
        // (the process's first rank: another process's files are its own to tell of)
        if self.rank != self.local.start {
            return;
        }
        for skipped in self.picture_sets.iter().flat_map(|s| s.take_failures()) {
            let message = match skipped.stood_in {
                true => format!(
                    "{}; another picture of its class stands in for it",
                    skipped.message
                ),
                false => skipped.message,
            };
            let step = self.step;
            let _ = self.events.send(Event::DataSkipped { step, message });
        }
    }
}
