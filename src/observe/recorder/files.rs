//! The recorder's metrics files: written together, and on a full disk cut back to whole
//! records and ended as a run that ended (or failed), with what they lost said.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::engine::events::{Ending, Event};
use crate::observe::metrics::{records, Line, MetricsError, MetricsWriter};

/// The metrics files, and where the run is for an end record written from elsewhere.
pub(super) struct Files {
    pub(super) writers: Vec<MetricsWriter>,
    /// Those a write failed on (a full disk), cut back to their last whole record: written no
    /// more but for the run's end, tried once.
    pub(super) lost: Vec<MetricsWriter>,
    /// The newest step recorded.
    step: u64,
    /// The newest time recorded (since the start), and when.
    t: (Duration, Instant),
    /// An `end` record was written (the run's, or a quitting process's): nothing follows it.
    pub(super) ended: bool,
    /// The newest step record written, and its step: a lost file's last (its totals are the
    /// whole run's).
    pub(super) newest_step: Option<(u64, Line)>,
    /// The best validation within epochs so far: its accuracy, step and record.
    best_validation: Option<(f32, u64, Line)>,
    /// The newest epochs' records (`EPOCHS_KEPT`; a write that fails can take some already
    /// handed to the file): a lost file's per-epoch table.
    epochs: std::collections::VecDeque<(u64, Line)>,
    /// The step of the newest epoch record let go of (`EPOCHS_KEPT` newer ones are kept).
    epochs_dropped: Option<u64>,
}

/// The epochs' records kept for a file lost to a full disk: a run of many short epochs gets
/// the newest back, its memory bounded.
pub(super) const EPOCHS_KEPT: usize = 4096;

/// What a metrics file on a full disk gives up of its last records for the run's end record,
/// beyond the record itself: a file system's blocks are freed whole.
const MAKE_ROOM: u64 = 8192;

/// The longest the end record of a process quitting at once waits for a record being written.
const QUIT_WAIT: Duration = Duration::from_millis(500);

impl Files {
    pub(super) fn new(writers: Vec<MetricsWriter>) -> Files {
        Files {
            writers,
            lost: Vec::new(),
            step: 0,
            t: (Duration::ZERO, Instant::now()),
            ended: false,
            newest_step: None,
            best_validation: None,
            epochs: Default::default(),
            epochs_dropped: None,
        }
    }

    /// Does `f` to every file; the warnings of those that failed (written no more).
    pub(super) fn each(
        &mut self,
        mut f: impl FnMut(&mut MetricsWriter) -> Result<(), MetricsError>,
    ) -> Vec<String> {
        let mut warnings = Vec::new();
        for mut w in std::mem::take(&mut self.writers) {
            match f(&mut w) {
                Ok(()) => {
                    warnings.extend(w.take_warning().map(|m| format!("warning: {m}")));
                    self.writers.push(w);
                }
                Err(e) => {
                    warnings.push(format!(
                        "warning: {e}; it keeps its records up to here, whole, and takes no more (but the run's end, tried when it ends)"
                    ));
                    w.cut_back();
                    self.lost.push(w);
                }
            }
        }
        warnings
    }

    /// Keeps what a file that loses it gets back at the run's end: an epoch's record, a
    /// validation's within an epoch where it is the best so far.
    pub(super) fn keep(&mut self, ev: &Event, line: &Line) {
        match *ev {
            Event::EpochDone { step, .. } => {
                if self.epochs.len() == EPOCHS_KEPT {
                    self.epochs_dropped = self.epochs.pop_front().map(|(s, _)| s);
                }
                self.epochs.push_back((step, line.clone()));
            }
            Event::Validated {
                step, val_accuracy, ..
            } if (self.best_validation.as_ref()).is_none_or(|b| val_accuracy > b.0) => {
                self.best_validation = Some((val_accuracy, step, line.clone()))
            }
            _ => {}
        }
    }

    /// The run's end record (`end`: the run's or its failure's) in the files a write failed
    /// on, after a warning naming the steps whose records they lost, the run's best
    /// validation (where lost) and its newest step (the whole run's totals): a file that takes
    /// them reads as a run that ended or failed, with its summary, not one killed.
    pub(super) fn end_lost(&mut self, end: &Line) {
        for mut w in std::mem::take(&mut self.lost) {
            let lines = |w: &MetricsWriter| self.after_loss(last_step(w), end);
            let put = |w: &mut MetricsWriter, lines: &[Line]| {
                let ok = (lines.iter().try_for_each(|l| w.write(l)))
                    .and_then(|()| w.flush())
                    .is_ok();
                if !ok {
                    w.cut_back();
                }
                ok
            };
            // the disk still full: the last step records give way to them (a block or two)
            let bytes =
                |lines: &[Line]| lines.iter().map(|l| l.as_bytes().len() as u64).sum::<u64>();
            let first = lines(&w);
            if put(&mut w, &first) {
                continue;
            }
            // (where room is made, the records kept stop earlier: the warning says where)
            let second = w.make_room(bytes(&first) + MAKE_ROOM).then(|| lines(&w));
            let _ =
                second.is_some_and(|l| put(&mut w, &l)) || put(&mut w, std::slice::from_ref(end));
        }
    }

    /// What a lost file whose records stop at step `kept` takes before `end`: a warning
    /// naming the gap, then the records it lost that were kept for it, in step order.
    fn after_loss(&self, kept: Option<u64>, end: &Line) -> Vec<Line> {
        let kept = kept.unwrap_or(0);
        let best = (self.best_validation.iter()).map(|(_, s, l)| (*s, "best validation", l));
        let epochs = (self.epochs.iter()).map(|(s, l)| (*s, "epochs", l));
        let newest = (self.newest_step.iter()).map(|(s, l)| (*s, "newest step", l));
        let mut back: Vec<_> = (best.chain(epochs).chain(newest))
            .filter(|&(s, ..)| s > kept)
            .collect();
        back.sort_by_key(|&(s, ..)| s);
        let mut what: Vec<&str> = (["epochs", "best validation", "newest step"].into_iter())
            .filter(|w| back.iter().any(|b| b.1 == *w))
            .collect();
        // (some after `kept` let go of: the newest are what follow)
        if self.epochs_dropped.is_some_and(|s| s > kept) && what.first() == Some(&"epochs") {
            what[0] = "newest epochs";
        }
        let what = match what.split_last() {
            Some((last, [])) => last.to_string(),
            Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
            None => String::new(),
        };
        let message = match what.is_empty() {
            true => format!("this metrics file lost records after step {kept} (its disk was full)"),
            false => format!(
                "this metrics file lost the records after step {kept} (its disk was full); the run's {what} follow"
            ),
        };
        let warning = Event::Warning {
            step: self.step,
            message,
        };
        let gap = records::event(&warning, self.t.0).map(|v| Line::new(&v));
        let back = back.into_iter().map(|(.., l)| l.clone());
        gap.into_iter().chain(back).chain([end.clone()]).collect()
    }

    /// Writes `line` to every file (flushed where `flush`); the warnings of those that failed.
    /// Nothing is written after an `end` record.
    pub(super) fn write(&mut self, line: &Line, flush: bool) -> Vec<String> {
        if self.ended {
            return Vec::new();
        }
        self.each(|w| {
            w.write(line)
                .and_then(|()| if flush { w.flush() } else { Ok(()) })
        })
    }

    /// The newest step recorded.
    pub(super) fn step(&self) -> u64 {
        self.step
    }

    pub(super) fn at(&mut self, step: Option<u64>, t: Duration) {
        self.step = step.map_or(self.step, |s| s.max(self.step));
        self.t = (t.max(self.t.0), Instant::now());
    }

    /// The `end` record of a process quitting at once, after the newest record: nothing is
    /// written where a record being written holds the files past `QUIT_WAIT`.
    pub(super) fn quit(files: &Mutex<Files>) {
        let deadline = Instant::now() + QUIT_WAIT;
        let mut files = loop {
            match files.try_lock() {
                Ok(f) => break f,
                Err(std::sync::TryLockError::Poisoned(e)) => break e.into_inner(),
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => return,
            }
        };
        if files.ended {
            return; // the run's own end is written
        }
        let (t, at) = files.t;
        let end = Event::Finished {
            step: files.step,
            ending: Ending::Quit,
        };
        if let Some(v) = records::event(&end, t + at.elapsed()) {
            let line = Line::new(&v);
            files.write(&line, true);
            files.end_lost(&line);
        }
        // (a pipe's records go by a thread of its own: given what is left of the wait)
        for w in &files.writers {
            w.drain(deadline);
        }
        // (the process exits next: a line the UI thread writes meanwhile goes nowhere)
        files.ended = true;
    }
}

/// The newest step the last records of `w`'s file name, events' included (the step up to
/// which a lost file is whole: an event may follow a later step's record).
fn last_step(w: &MetricsWriter) -> Option<u64> {
    (crate::engine::rundir::tail_lines(w.path()).iter())
        .filter_map(|l| serde_json::from_slice::<serde_json::Value>(l).ok())
        .filter_map(|v| v.get("step")?.as_u64())
        .max()
}
