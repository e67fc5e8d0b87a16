//! A run recorded in a metrics file as a UI source (`view`): its records become the `App`'s
//! events, read as the file grows.

use std::time::{Duration, Instant};

use crossbeam_channel::{never, tick, Receiver};

use super::app::{App, AppEvent, Level, RunState};
use super::source::Source;
use crate::engine::control::Control;
use crate::observe::metrics::{MetricsReader, ReadError, Record};

/// How often a file is looked at for new records.
pub const POLL: Duration = Duration::from_millis(250);
/// The longest the loop spends reading at a time (a big file is read over several frames, so
/// keys are answered while it loads).
const READ_BUDGET: Duration = Duration::from_millis(50);

/// One record into the `App`, at the time it was written.
pub fn apply_record(app: &mut App, rec: Record) {
    match rec {
        Record::Step { row, samples_per_s } => {
            app.apply(AppEvent::Tick(row.at));
            app.apply(AppEvent::Row {
                row,
                samples_per_sec: samples_per_s,
            });
        }
        Record::Event { t, event } => {
            app.apply(AppEvent::Tick(t));
            app.apply(AppEvent::Engine(event));
        }
        Record::Warning { t, kind, message } => {
            app.apply(AppEvent::Tick(t));
            let level = if kind.ends_with("_cleared") {
                Level::Info
            } else {
                Level::Warn
            };
            app.apply(AppEvent::Notice(level, message));
        }
        Record::Telemetry {
            t,
            devices,
            process_memory,
        } => app.apply(AppEvent::Telemetry {
            at: t,
            devices,
            process_memory,
        }),
    }
    // a failed run writes no `end`: its failure is its end
    if app.state == RunState::Failed && app.summary.is_none() {
        app.finish(None);
    }
}

/// Reads every record there is now into `app` (for `view --headless`).
pub fn read_all(reader: &mut MetricsReader, app: &mut App) -> Result<(), ReadError> {
    while let Some(rec) = reader.next()? {
        apply_record(app, rec);
    }
    Ok(())
}

/// A metrics file, followed as it grows.
pub struct FileSource {
    reader: MetricsReader,
    /// The last read stopped at its time budget: go on at the next frame.
    behind: bool,
    /// The file is damaged past this point: nothing more is read.
    pub error: Option<ReadError>,
}

impl FileSource {
    pub fn new(reader: MetricsReader) -> FileSource {
        FileSource {
            reader,
            behind: true,
            error: None,
        }
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
                    apply_record(app, rec);
                    any = true;
                }
                Ok(None) => break,
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
        self.pull(app)
    }

    fn on_frame(&mut self, app: &mut App) -> bool {
        self.behind && self.pull(app)
    }

    fn control(&mut self, _: Control) -> Result<(), String> {
        // a file's `App` answers every control key itself
        Err("viewing a metrics file: the run cannot be changed from here".into())
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
