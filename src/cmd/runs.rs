//! `runs [DIR]`: the runs under `./runs` (or DIR), the one started last first, with their state (live,
//! paused, suspended, done, stopped, failed, ended without a word: killed, or a copy of a live run's
//! directory), step, progress, best validation accuracy and when their metrics file last
//! changed.

use std::path::PathBuf;
use std::time::SystemTime;

use crate::cli::RunsArgs;
use crate::engine::events::Ending;
use crate::engine::rundir;
use crate::front::tui::app::{App, RunState};
use crate::front::tui::replay::read_all;
use crate::observe::metrics::MetricsReader;

/// One row of the listing.
#[derive(Debug, PartialEq)]
pub struct RunRow {
    pub dir: PathBuf,
    pub state: String,
    pub step: u64,
    pub progress: Option<f64>,
    pub best_accuracy: Option<f32>,
    pub updated: SystemTime,
    /// The checkpoint it started from, where it resumed another run.
    pub resumed_from: Option<PathBuf>,
    /// The newest run listed that resumed it from one of its checkpoints.
    pub resumed_in: Option<PathBuf>,
}

pub fn command(args: &RunsArgs) -> anyhow::Result<()> {
    let root = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(rundir::RUNS));
    if !root.is_dir() {
        anyhow::bail!(
            "no runs at {}: runs are kept under ./{} of the directory they were started in (or pass the directory: mgtop-train runs DIR)",
            root.display(),
            rundir::RUNS
        );
    }
    // (and another user's run directories: mode 0700, not looked into)
    // (a run's own directory, or a folder of one: its checkpoints, one of them: that run)
    let run = match rundir::is_run_dir(&root) {
        true => Some(root.as_path()),
        false => rundir::run_of_checkpoints(&root),
    };
    let (runs, closed) = match run {
        Some(run) => (vec![(run.to_path_buf(), rundir::updated(run))], 0),
        None => rundir::runs_and_closed(&root),
    };
    let closed_note = format!(
        "{} there this user cannot read (a run directory is its owner's alone, mode 0700): list them as the user who ran them",
        crate::text::counted(closed, "folder"),
    );
    if runs.is_empty() {
        match closed {
            0 => crate::say!("no runs under {}", root.display()),
            _ => crate::say!(
                "no runs under {} that this user can read; {closed_note}",
                root.display()
            ),
        }
        return Ok(());
    }
    let mut rows: Vec<RunRow> = runs.into_iter().map(|(dir, t)| row(dir, t)).collect();
    link_resumed(&mut rows);
    for line in table(&rows, SystemTime::now()) {
        // (directory names are escaped in the table: they can hold anything)
        crate::say!("{line}");
    }
    if closed > 0 {
        crate::say!("and {closed_note}");
    }
    Ok(())
}

/// A live run's state: `suspended` where its process here is stopped (Ctrl-Z, `kill -STOP`),
/// holding its devices while it does nothing; `paused` where its file's last pause was not
/// followed by a resume (paused from a screen: it waits for `p`).
fn live_state(dir: &std::path::Path, paused: bool) -> &'static str {
    match rundir::suspended(dir) {
        Some(_) => "suspended",
        None if paused => "paused",
        None => "live",
    }
}

/// What a run's directory says of it. A damaged metrics file is a state, not an error: the
/// listing goes on.
pub fn row(dir: PathBuf, updated: SystemTime) -> RunRow {
    let live = rundir::is_live(&dir);
    let mut row = RunRow {
        dir,
        state: String::new(),
        step: 0,
        progress: None,
        best_accuracy: None,
        updated,
        resumed_from: None,
        resumed_in: None,
    };
    let mut reader = match MetricsReader::open(&row.dir.join(rundir::METRICS)) {
        Ok(r) => r.skimming(),
        Err(_) if live => {
            row.state = live_state(&row.dir, false).into();
            return row;
        }
        Err(_) => {
            row.state = "unreadable".into();
            return row;
        }
    };
    // (a run gone: its last line, without its newline, is read; one on another machine
    // that is quiet only a short while may still be writing it)
    // (`live` asked already: its socket is not asked again)
    let host = reader.info().host.clone();
    if !live && rundir::gone_if_not_live(&row.dir, host.as_deref()) {
        reader.writer_gone();
    }
    let mut app = App::watching(reader.info().clone());
    row.resumed_from = app.info.resumed_from.clone();
    let damaged = read_all(&mut reader, &mut app).is_err();
    row.step = match &app.summary {
        Some(s) => s.steps,
        None => app.step(),
    };
    // a step budget says it exactly; an epoch budget as the last step record does, carried to
    // the step the run reached (a record or two past it: its end's) toward where that record
    // said the run ends; before one (a run quit early) by the steps of an epoch at its
    // start's batch
    use crate::config::Budget;
    let by_steps = |n: u64| (n > 0).then(|| (row.step as f64 / n as f64).min(1.0));
    row.progress = match (app.info.budget, &app.last_row) {
        (Budget::Steps(n), _) => by_steps(n),
        (Budget::Epochs(_), Some(r)) => Some(match r.ends_at {
            Some(end) if end.run > r.step && row.step > r.step => {
                let past = (row.step - r.step) as f64 / (end.run - r.step) as f64;
                (r.progress + (1.0 - r.progress) * past).min(1.0)
            }
            _ => r.progress,
        }),
        (Budget::Epochs(e), None) => by_steps(e * app.info.steps_per_epoch()),
    };
    // (a resumed run's line's, as its summary leads with)
    let own = app.val_accuracy().1;
    let before = crate::engine::checkpoint::BestVal::unbeaten(app.info.best_before, own);
    row.best_accuracy = before.map(|b| b.accuracy).or(own);
    if app
        .summary
        .as_ref()
        .is_some_and(|s| !s.ending.early() && s.failed.is_none())
    {
        row.progress = Some(1.0);
    }
    row.state = match &app.summary {
        Some(s) if s.failed.is_some() => "failed",
        Some(s) => match s.ending {
            Ending::Completed => "done",
            Ending::Stopped => "stopped",
            Ending::Quit => "quit",
        },
        // (before `live`: a copy's `live.sock.path` points at the original's socket)
        None if rundir::copy_of(&row.dir, app.info.run_dir.as_deref()).is_some() => "copy",
        None if live => live_state(&row.dir, app.state == RunState::Paused),
        None if damaged => "damaged",
        None => "killed",
    }
    .into();
    row
}

/// Each run's `resumed_in`: the newest listed run (rows newest first) whose checkpoint it
/// started from is in that run's directory, so a stopped run says where it went on.
fn link_resumed(rows: &mut [RunRow]) {
    let real = |p: &std::path::Path| std::fs::canonicalize(p).ok();
    let dirs: Vec<Option<PathBuf>> = rows.iter().map(|r| real(&r.dir)).collect();
    for later in 0..rows.len() {
        let Some(from) = rows[later].resumed_from.as_deref().and_then(real) else {
            continue;
        };
        let earlier = (0..rows.len())
            .find(|&i| i != later && dirs[i].as_deref().is_some_and(|d| from.starts_with(d)));
        if let Some(i) = earlier.filter(|&i| rows[i].resumed_in.is_none()) {
            rows[i].resumed_in = Some(rows[later].dir.clone());
        }
    }
}

/// The listing's lines: a header, then a row per run.
pub fn table(rows: &[RunRow], now: SystemTime) -> Vec<String> {
    // (names as they are printed: escaped, counted in characters)
    let names: Vec<String> = (rows.iter())
        .map(|r| crate::text::printable(&r.dir.display().to_string()))
        .collect();
    let width = names
        .iter()
        .map(|n| n.chars().count())
        .max()
        .unwrap_or(3)
        .max(3);
    // (`unreadable`, the longest state)
    let mut lines = vec![format!(
        "{:<width$}  {:<10} {:>9} {:>8} {:>9}  updated",
        "run", "state", "step", "progress", "best acc"
    )];
    for (r, name) in rows.iter().zip(&names) {
        // (where another run went on from it)
        let next = (r.resumed_in.as_ref()).map_or(String::new(), |d| {
            format!(
                "  (resumed in {})",
                crate::text::printable(&d.display().to_string())
            )
        });
        lines.push(format!(
            "{:<width$}  {:<10} {:>9} {:>8} {:>9}  {}{next}",
            name,
            r.state,
            r.step,
            r.progress
                .map_or("-".into(), |p| format!("{:.0}%", p * 100.0)),
            r.best_accuracy
                .map_or("-".into(), |a| format!("{:.2}%", a * 100.0)),
            ago(now.duration_since(r.updated).unwrap_or_default()),
        ));
    }
    lines
}

fn ago(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s} s ago"),
        60..=3599 => format!("{} min ago", s / 60),
        3600..=86399 => format!("{} h ago", s / 3600),
        _ => format!("{} days ago", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_that_quit_between_logged_steps_shows_the_progress_of_its_last_step() {
        use crate::engine::events::Event;
        use crate::front::tui::demo;
        use crate::observe::metrics::records;
        let dir = tempfile::tempdir().unwrap();
        // an epoch budget (30 epochs of 45 steps: 1350), the step of 350 logged, quit at 373
        let mut monitor = crate::observe::monitor::Monitor::new(1);
        let row = monitor.on_step(demo::step(0, 1, 350)).unwrap();
        let end = Event::Finished {
            step: 373,
            ending: Ending::Quit,
        };
        let lines = [
            records::run(&crate::engine::RunInfo::example(1)),
            records::step(&row, None, None),
            records::event(&end, std::time::Duration::from_secs(9)).unwrap(),
        ];
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(dir.path().join(rundir::METRICS), text).unwrap();
        let r = super::row(dir.path().to_path_buf(), SystemTime::now());
        assert_eq!((r.state.as_str(), r.step), ("quit", 373));
        let p = r.progress.unwrap();
        assert!((p - 373.0 / 1350.0).abs() < 1e-9, "{p}");
    }

    #[test]
    fn a_finished_run_whose_file_lost_its_last_newline_is_listed_done_not_killed() {
        use crate::engine::events::Event;
        let dir = tempfile::tempdir().unwrap();
        let end = Event::Finished {
            step: 40,
            ending: Ending::Completed,
        };
        // (a run of this machine, not running: known gone)
        let info = crate::engine::RunInfo {
            host: Some(crate::pids::hostname().to_string()),
            ..crate::engine::RunInfo::example(1)
        };
        let lines = [
            crate::observe::metrics::records::run(&info),
            crate::observe::metrics::records::event(&end, std::time::Duration::from_secs(3))
                .unwrap(),
        ];
        // (as a copy or an editor may leave it: no newline after the `end` record)
        std::fs::write(
            dir.path().join(rundir::METRICS),
            format!("{}\n{}", lines[0], lines[1]),
        )
        .unwrap();
        let r = super::row(dir.path().to_path_buf(), SystemTime::now());
        assert_eq!((r.state.as_str(), r.step), ("done", 40));
        // killed while writing its end: the half record is where it stopped, not damage
        let end = &lines[1].to_string();
        let torn = format!("{}\n{}", lines[0], &end[..end.len() / 2]);
        std::fs::write(dir.path().join(rundir::METRICS), torn).unwrap();
        let r = super::row(dir.path().to_path_buf(), SystemTime::now());
        assert_eq!(r.state, "killed");
    }

    #[test]
    fn a_run_whose_metrics_file_is_no_file_is_listed_unreadable_without_waiting() {
        let tmp = tempfile::tempdir().unwrap();
        let (fifo, device) = (tmp.path().join("a/1"), tmp.path().join("b/2"));
        for d in [&fifo, &device] {
            std::fs::create_dir_all(d).unwrap();
        }
        let path = std::ffi::CString::new(fifo.join(rundir::METRICS).to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
        std::os::unix::fs::symlink("/dev/zero", device.join(rundir::METRICS)).unwrap();
        let runs = rundir::runs_under(tmp.path());
        assert_eq!(runs.len(), 2);
        for (dir, t) in runs {
            assert_eq!(row(dir, t).state, "unreadable");
        }
    }

    /// A run resumed in a later one says where it went on (newest first: the newest that
    /// resumed it); one resumed from a checkpoint elsewhere, or none, says nothing.
    #[test]
    fn a_resumed_run_says_which_run_went_on_from_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = |n: &str| {
            let d = tmp.path().join(n);
            std::fs::create_dir_all(d.join("checkpoints/step-00000010")).unwrap();
            d
        };
        let row = |d: PathBuf, from: Option<PathBuf>| RunRow {
            dir: d,
            state: "stopped".into(),
            step: 10,
            progress: None,
            best_accuracy: None,
            updated: SystemTime::now(),
            resumed_from: from,
            resumed_in: None,
        };
        let (a, b, c) = (dir("a"), dir("b"), dir("c"));
        let ck = |d: &PathBuf| Some(d.join("checkpoints/step-00000010"));
        let mut rows = [
            row(c.clone(), ck(&a)),
            row(b.clone(), ck(&a)),
            row(a.clone(), None),
            row(
                tmp.path().join("d"),
                Some(tmp.path().join("elsewhere/step-00000010")),
            ),
        ];
        link_resumed(&mut rows);
        let resumed: Vec<Option<PathBuf>> = rows.iter().map(|r| r.resumed_in.clone()).collect();
        assert_eq!(resumed, [None, None, Some(c.clone()), None]);
        let lines = table(&rows, SystemTime::now());
        assert!(
            lines[3].ends_with(&format!("  (resumed in {})", c.display())),
            "{lines:?}"
        );
    }

    #[test]
    fn columns_line_up_whatever_the_names_and_states() {
        let now = SystemTime::now();
        let row = |dir: &str, state: &str| RunRow {
            dir: dir.into(),
            state: state.into(),
            step: 46,
            progress: Some(0.5),
            best_accuracy: None,
            updated: now,
            resumed_from: None,
            resumed_in: None,
        };
        let rows = [
            row("runs/a", "unreadable"),
            row("runs/evil\u{1b}[31mred", "done"),
        ];
        let lines = table(&rows, now);
        assert!(
            lines[2].starts_with("runs/evil\\u{1b}[31mred  done"),
            "{lines:?}"
        );
        // every row's step ends where the header's does
        let end = |l: &str| l.find("step").map(|i| i + 4);
        let step_end = end(&lines[0]).unwrap();
        for l in &lines[1..] {
            assert_eq!(l.chars().nth(step_end - 1), Some('6'), "{lines:?}");
        }
    }
}
