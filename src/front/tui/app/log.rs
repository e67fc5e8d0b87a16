//! The events panel's entries: an epoch's line replaced by the next, a line said again counted
//! instead of repeated.

use std::time::Duration;

use super::{App, LOG_LINES};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Info,
    Warn,
    Error,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LogEntry {
    pub at: Duration,
    pub level: Level,
    pub text: String,
    /// An end-of-epoch or validation line: a newer one replaces it when nothing came between,
    /// so a fast run's epochs do not push the pauses, batch changes and checkpoints off the
    /// panel.
    pub progress: bool,
    /// The same entry again right after it (a key refused each time it is pressed) counts
    /// here instead of filling the panel: 1 for one.
    pub times: u32,
}

impl LogEntry {
    /// Its text as shown: with how many times it came, where more than once.
    pub fn shown(&self) -> String {
        match self.times {
            1 => self.text.clone(),
            n => format!("{} (x{n})", self.text),
        }
    }
}

impl App {
    pub(super) fn note(&mut self, level: Level, text: String) {
        self.push_log(level, text, false);
    }

    pub(super) fn push_log(&mut self, level: Level, text: String, progress: bool) {
        if let Some(last) = (self.log.front_mut()).filter(|l| !progress && l.text == text) {
            (last.at, last.level, last.times) = (self.now, level, last.times + 1);
            return;
        }
        if progress && self.log.front().is_some_and(|l| l.progress) {
            self.log.pop_front();
        } else if self.log_scroll > 0 {
            // the events view scrolled back stays on the same entries
            self.log_scroll += 1;
        }
        self.log.push_front(LogEntry {
            at: self.now,
            level,
            text,
            progress,
            times: 1,
        });
        self.log.truncate(LOG_LINES);
        self.log_scroll = self.log_scroll.min(self.log.len().saturating_sub(1));
    }
}
