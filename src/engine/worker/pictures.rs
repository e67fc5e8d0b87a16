//! A run's picture sets as its ranks read them: the files that failed to decode said, and a
//! class none of whose pictures decode an error.

use super::Worker;
use crate::engine::events::Event;
use crate::engine::EngineError;

impl Worker {
    /// An error where a class of a picture set has no picture that decodes (its samples would
    /// be blank), after saying the files that failed.
    pub(super) fn pictures_usable(&self) -> Result<(), EngineError> {
        let Some(why) = self.picture_sets.iter().find_map(|s| s.unusable()) else {
            return Ok(());
        };
        self.say_skipped_pictures();
        let spec = self.cfg.data.to_string();
        let msg = why.to_string();
        Err(crate::data::DataError::Spec { spec, msg }.into())
    }

    /// Picture files that failed to decode since the last look, one event each, told by the
    /// process's first rank (the picture sets are the process's).
    pub(super) fn say_skipped_pictures(&self) {
        // (the process's first rank: another process's files are its own to tell of)
        if self.rank != self.local.start {
            return;
        }
        for message in self.picture_sets.iter().flat_map(|s| s.take_failures()) {
            let step = self.step;
            let _ = self.events.send(Event::DataSkipped { step, message });
        }
    }
}
