//! A run recorded in a metrics file as a UI source (`view`): its records become the `App`'s
//! events, read as the file grows.

use std::time::{Duration, Instant};

use crossbeam_channel::{never, tick, Receiver};

use super::app::{App, AppEvent, Level, Silent};
use super::source::Source;
use crate::engine::control::Control;
use crate::engine::rundir;
use crate::observe::metrics::{MetricsReader, ReadError};

/// How often a file is looked at for new records.
pub const POLL: Duration = Duration::from_millis(250);
/// How often a file without an end record asks whether its run still runs.
const ASK_LIVE: Duration = Duration::from_secs(2);
/// How long a file outside a run directory, without an end record, may go unwritten before
/// it is said to have none (a run writes its telemetry every `--sample-interval`, 1 s unless
/// told otherwise).
pub const QUIET: Duration = Duration::from_secs(60);
/// The longest the loop spends reading at a time (a big file is read over several frames, so
/// keys are answered while it loads).
const READ_BUDGET: Duration = Duration::from_millis(50);

/// Reads every record there is now into `app` (for `view --headless`).
pub fn read_all(reader: &mut MetricsReader, app: &mut App) -> Result<(), ReadError> {
    while let Some(rec) = reader.next()? {
        app.apply_record(rec);
    }
    Ok(())
}

/// A metrics file, followed as it grows.
pub struct FileSource {
    reader: MetricsReader,
    /// The run directory the file is the record of (None for a copy elsewhere), and when it
    /// was last asked whether its run still runs.
    run_dir: Option<std::path::PathBuf>,
    asked: Option<Instant>,
    /// The last read stopped at its time budget: go on at the next frame.
    behind: bool,
    /// The file is damaged past this point: nothing more is read.
    pub error: Option<ReadError>,
    /// Lines after the run's end were said.
    past_end_said: bool,
    /// A last line cut off mid-record was said.
    cut_said: bool,
    /// How long a file outside a run directory may stay as it is (its modification time)
    /// before it is said to have no end.
    quiet: Duration,
}

impl FileSource {
    pub fn new(reader: MetricsReader) -> FileSource {
        let run_dir = rundir::of_metrics(reader.path(), reader.info().run_dir.as_deref());
        FileSource {
            reader,
            run_dir,
            asked: None,
            behind: true,
            error: None,
            past_end_said: false,
            cut_said: false,
            quiet: QUIET,
        }
    }

    /// Says a file outside a run directory has no end once it stayed as it is for `quiet`
    /// (instead of `QUIET`).
    pub fn quiet_after(self, quiet: Duration) -> FileSource {
        FileSource { quiet, ..self }
    }

    fn pull(&mut self, app: &mut App) -> bool {
        if self.error.is_some() {
            return false;
        }
        let t0 = Instant::now();
        let mut any = false;
        self.behind = false;
        loop {
            match self.reader.next() {
                Ok(Some(rec)) => {
                    app.apply_record(rec);
                    any = true;
                }
                Ok(None) => {
                    if let Some(line) = self.reader.past_end().filter(|_| !self.past_end_said) {
                        self.past_end_said = true;
                        app.apply(AppEvent::Notice(
                            Level::Warn,
                            crate::front::words::past_end(line),
                        ));
                        any = true;
                    }
                    break;
                }
                Err(e) => {
                    app.apply(AppEvent::Notice(
                        Level::Error,
                        format!("error: {e}; not reading further"),
                    ));
                    self.error = Some(e);
                    return true;
                }
            }
            if t0.elapsed() >= READ_BUDGET {
                self.behind = true;
                break;
            }
        }
        any
    }
}

impl Source for FileSource {
    type Event = ();

    fn events(&self) -> Receiver<()> {
        never()
    }

    fn on_event(&mut self, _: &mut App, _: Option<()>) -> bool {
        false
    }

    fn timer(&self) -> Receiver<Instant> {
        tick(POLL)
    }

    fn on_timer(&mut self, app: &mut App) -> bool {
        let pulled = self.pull(app);
        // a run without an end record: still running, or killed (asked every few seconds);
        // a copy elsewhere has no run to ask: quiet a while, it is said to have no end
        let due = self.asked.is_none_or(|t| t.elapsed() >= ASK_LIVE);
        let silent = match &self.run_dir {
            // (read up to a line that is no record: what followed it is not known)
            _ if self.error.is_some() => Some(Silent::Damaged),
            _ if app.state.ended() => None,
            Some(d) if due => {
                self.asked = Some(Instant::now());
                match rundir::is_gone(d, app.info.host.as_deref()) {
                    true => Some(Silent::Killed),
                    false => rundir::suspended(d).map(|_| Silent::Suspended),
                }
            }
            Some(_) => app.silent,
            None => {
                let changed = std::fs::metadata(self.reader.path()).and_then(|m| m.modified());
                let quiet = changed.is_ok_and(|t| t.elapsed().is_ok_and(|e| e >= self.quiet));
                quiet.then_some(Silent::NoEnd)
            }
        };
        // (a run known gone: a last line it left without its newline is its last record, maybe
        // its end, or cut off where it was killed)
        let rest = silent == Some(Silent::Killed) && {
            self.reader.writer_gone();
            let pulled = self.pull(app);
            let cut = self.reader.cut_off().filter(|_| !self.cut_said);
            if let Some(line) = cut {
                self.cut_said = true;
                let words = format!(
                    "its last line ({line}) was cut off mid-record where the run stopped writing"
                );
                app.apply(AppEvent::Notice(Level::Warn, words));
            }
            pulled || cut.is_some()
        };
        let silent = silent.filter(|_| !app.state.ended());
        let changed = silent != app.silent;
        app.silent = silent;
        pulled || changed || rest
    }

    fn on_frame(&mut self, app: &mut App) -> bool {
        self.behind && self.pull(app)
    }

    fn control(&mut self, _: Control) -> Result<(), String> {
        // a file's `App` answers every control key itself
        Err(super::app::VIEW_ONLY.into())
    }

    fn on_signal(&mut self, _: &mut App) -> bool {
        true
    }

    fn settle(&mut self, _: &mut App) -> bool {
        false
    }

    fn ended(&self) -> bool {
        // `q` leaves at any time; the screen stays until then, following the file
        false
    }

    fn outlives_screen(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests;
