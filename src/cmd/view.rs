//! `view PATH`: the terminal UI over a metrics file written by an earlier or still running run
//! (read-only, followed as it grows), or with `--headless` the run's summary lines.

use std::fs;
use std::path::Path;
use std::process::ExitCode;

use crossbeam_channel::{unbounded, Sender};

use crate::cli::ViewArgs;
use crate::engine::events::Ending;
use crate::engine::rundir;
use crate::front::tui::app::{App, RunState};
use crate::front::tui::replay::{read_all, FileSource};
use crate::front::tui::{self, term, theme::Theme, Screen};
use crate::observe::live::locate;
use crate::observe::metrics::{self, MetricsReader, ReadError};
use crate::observe::tensorboard;

/// Installs the process's signal handling for the UI; the first signal is sent on the channel.
pub type OnSignals = dyn Fn(Sender<()>) -> anyhow::Result<()>;

pub fn command(args: &ViewArgs, on_signals: &OnSignals) -> anyhow::Result<ExitCode> {
    let no_color = Theme::colourless();
    let theme = Theme::choose(args.theme.as_deref(), no_color)?;
    // a directory of runs (runs/, runs/NAME): the live run started last, as `attach` takes,
    // else the run its `latest` names (runs/NAME), else the run started last
    let newest = (args.path.is_dir() && !rundir::is_run_dir(&args.path))
        .then(|| match locate::newest_live(&args.path) {
            Ok(live) => Some(live.run),
            Err(_) => rundir::latest_in(&args.path)
                .or_else(|| Some(rundir::runs_under(&args.path).into_iter().next()?.0)),
        })
        .flatten();
    let path = match newest {
        Some(run) => {
            crate::tell!(
                "the newest run under {}: {}",
                args.path.display(),
                crate::text::printable(&run.display().to_string())
            );
            run
        }
        None => args.path.clone(),
    };
    let mut reader = MetricsReader::open(&path).map_err(|e| {
        // an empty record of a run no longer running is not one that "has just started"
        let dir = if path.is_dir() { Some(path.as_path()) } else { path.parent() };
        let dead = dir.is_some_and(|d| rundir::is_run_dir(d) && !rundir::is_live(d));
        match &e {
            ReadError::File { path, what } if what == metrics::reader::EMPTY && dead => {
                anyhow::anyhow!(
                    "{}: empty, and no run is running there: it ended before it wrote anything (killed as it started?), so there is nothing to view",
                    path.display()
                )
            }
            _ => e.into(),
        }
    })?;
    // as the training flag: `=true` is the default folder, `=false` none (the run is shown)
    if let Some(dir) = crate::cli::switch_or_folder(&args.tensorboard) {
        // (under a DIR given, in a folder of its own, as a run given it writes; one made here is
        // taken away again where nothing is written in it)
        let made = dir.as_deref().is_some_and(|d| !d.exists());
        let (dir, logdir) = match dir {
            Some(d) => {
                let info = reader.info();
                let run_dir = (info.run_dir.clone())
                    .unwrap_or_else(|| tensorboard::run_dir_of(reader.path()));
                let held = (info.started)
                    .and_then(|t| tensorboard::holding_run(&d, &info.name, Some(&run_dir), t));
                if let Some(held) = held {
                    anyhow::bail!(
                        "{} already holds this run's TensorBoard events (written by --tensorboard during the run, or an earlier conversion), and TensorBoard would show it twice; remove that folder to write them again",
                        held.display()
                    );
                }
                let run = tensorboard::own_run_folder(&d, &info.name, Some(&run_dir))
                    .map_err(anyhow::Error::msg)?;
                (run, d)
            }
            None => {
                let d = tensorboard::default_dir_for(reader.path());
                (d.clone(), d)
            }
        };
        tensorboard::preflight(&dir).map_err(anyhow::Error::msg)?;
        let (file, n) = tensorboard::convert(&mut reader, &dir).map_err(|e| {
            // (the folders made for it go with its file: empty, as they were made; DIR, given,
            // stays where it was there before)
            if dir != logdir {
                let _ = std::fs::remove_dir(&dir);
                let _ = dir
                    .parent()
                    .filter(|&p| p != logdir)
                    .map(std::fs::remove_dir);
            }
            if made {
                let _ = std::fs::remove_dir(&logdir);
            }
            anyhow::Error::msg(e)
        })?;
        crate::say!(
            "wrote the scalars of {n} records to {} (tensorboard --logdir {})",
            file.display(),
            logdir.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut app = App::watching(reader.info().clone());
    if args.headless || !term::can_draw() || term::in_background() {
        let run_dir = rundir::of_metrics(reader.path(), app.info.run_dir.as_deref());
        // running, gone, or not known (on another machine and quiet only a short while)
        let host = app.info.host.as_deref();
        let live = run_dir.as_deref().and_then(|d| rundir::liveness(d, host));
        if live == Some(false) {
            reader.writer_gone();
        }
        read_all(&mut reader, &mut app)?;
        let after = reader.past_end().map(crate::front::words::past_end);
        // (a copy of a run directory made while its run ran: that run goes on, or went on, in
        // the original; whether this copy's process runs says nothing)
        let recorded = app.info.run_dir.as_deref();
        let original = (run_dir.as_deref())
            .filter(|_| app.summary.is_none())
            .and_then(|d| rundir::copy_of(d, recorded));
        let live = live.filter(|_| original.is_none());
        let copy = original.is_some();
        let original = original.map(|o| {
            let runs = match rundir::is_live(&o) {
                true => "whose run still runs",
                false => "where its run went on",
            };
            let o = o.display();
            format!("a copy of run directory {o}, {runs}: mgtop-train view {o}")
        });
        // a killed or stopped run's way on (a killed run's summary does not name it)
        let killed = live == Some(false) && app.summary.is_none();
        let stopped = (app.summary.as_ref()).is_some_and(|s| s.ending != Ending::Completed);
        let resume = (killed || stopped && live != Some(true))
            .then(|| {
                let stopped_at = app.summary.as_ref().map(|s| s.steps);
                let recorded = app.last_checkpoint.as_deref();
                way_on(run_dir.as_deref(), recorded, killed, stopped_at)
            })
            .flatten()
            // (killed with no checkpoint found: said, not left to be wondered at)
            .or_else(|| {
                (killed && run_dir.is_some()).then(|| match app.last_checkpoint.as_deref() {
                    Some(p) => format!(
                        "its last checkpoint recorded, {}, is not there now (moved or removed?), nor any other of the run: put it back to resume from it",
                        p.display()
                    ),
                    None => "no checkpoint to resume it from: it wrote none, so its steps are lost; start it again (--checkpoint-every N writes checkpoints as a run goes)".to_string(),
                })
            });
        let cut = (reader.cut_off()).map(|l| {
            format!("its last line ({l}) was cut off mid-record where the run stopped writing")
        });
        for line in (summary(&app, live, copy).into_iter())
            .chain(moved(&app))
            .chain(validations(&app))
            .chain(original)
            .chain(cut)
            .chain(after)
            .chain(resume)
        {
            // names and paths come from the file
            crate::say!("{}", crate::text::printable(&line));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let (sig_tx, sig_rx) = unbounded();
    on_signals(sig_tx)?;
    let (mut terminal, guard) = match term::enter() {
        Ok(t) => t,
        Err(e) => {
            term::restore();
            anyhow::bail!("cannot start the terminal UI ({e}); use --headless for the summary");
        }
    };
    let mut source = FileSource::new(reader);
    let screen = Screen {
        theme,
        exit_when_done: false,
    };
    let (_app, _) = tui::run(
        &mut terminal,
        app,
        &mut source,
        screen,
        term::inputs(),
        sig_rx,
    );
    term::close(terminal);
    drop(guard);
    match source.error {
        Some(e) => Err(e.into()),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// How a run that did not complete goes on: from the checkpoint `--resume RUN_DIR` takes, its
/// newest on disk (which can be newer than the last its file records: a kill between a
/// checkpoint and its record, a copy made while it ran), else from the newest recorded itself.
/// A killed run's line names the checkpoint too; a stopped one's, the steps a resume leaves out
/// (those after the checkpoint up to `stopped_at`).
fn way_on(
    run_dir: Option<&Path>,
    recorded: Option<&Path>,
    killed: bool,
    stopped_at: Option<u64>,
) -> Option<String> {
    use crate::engine::checkpoint::{is_checkpoint, step_of};
    let (newest, arg) = match (run_dir.map(|d| (d, rundir::resume_point(d))), recorded) {
        // (the run directory, whose checkpoints may be elsewhere: --checkpoint-dir)
        (Some((d, Ok(p))), _) => (p, d.canonicalize().unwrap_or_else(|_| d.to_path_buf())),
        // (refused as it stands: the checkpoint is named itself)
        (_, Some(r)) if is_checkpoint(r) => (r.to_path_buf(), r.to_path_buf()),
        _ => return None,
    };
    let arg = arg.display();
    if !killed {
        let lost = (stopped_at.zip(step_of(&newest))).map_or(String::new(), |(at, saved)| {
            crate::engine::checkpoint::steps_lost(saved, at)
        });
        return Some(format!("resume with: --resume {arg}{lost}"));
    }
    let (what, unrecorded) = match (recorded.map(step_of), step_of(&newest)) {
        (None, _) => ("its newest checkpoint", " (its file records none)".into()),
        (Some(Some(r)), Some(n)) if n > r => (
            "its newest checkpoint",
            format!(" (newer than the last its file records, of step {r})"),
        ),
        (Some(r), n) if r == n => ("its newest checkpoint recorded", String::new()),
        _ => ("its newest checkpoint", String::new()),
    };
    Some(format!(
        "{what}: {}{unrecorded}; resume with: --resume {arg}",
        newest.display()
    ))
}

/// A line for the checkpoints a run's summary names that are not there now (moved or removed
/// since), where the run ran on this machine (another's paths are not this one's to ask).
fn moved(app: &App) -> Option<String> {
    let s = app.summary.as_ref()?;
    let here = crate::pids::hostname();
    (app.info.host.as_deref() == Some(here.as_str())).then_some(())?;
    let mut gone: Vec<&Path> = (s.last_checkpoint.iter())
        .chain(s.best_checkpoint.iter().map(|(p, _)| p))
        .map(|p| p.as_path())
        .filter(|p| p.is_absolute() && fs::symlink_metadata(p).is_err())
        .collect();
    gone.dedup();
    let (its, are) = match gone.len() {
        0 => return None,
        1 => ("its checkpoint", "is"),
        _ => ("its checkpoints", "are"),
    };
    let named: Vec<String> = gone.iter().map(|p| p.display().to_string()).collect();
    Some(format!(
        "{its} {} {are} not there now: moved or removed since",
        named.join(" and ")
    ))
}

/// The most validations `view --headless` lists one by one.
const LISTED: usize = 12;

/// The run's validations, a line each, as a table: how it learned, not only where it ended
/// (where there are more than `LISTED`, the first, the best, the last and others evenly
/// between, said so). None where it validated none.
fn validations(app: &App) -> Vec<String> {
    let all = &app.validations;
    // (the first to reach the best accuracy, as the run's best checkpoint is)
    let Some(best) = (0..all.len()).reduce(|a, b| match all[b].accuracy > all[a].accuracy {
        true => b,
        false => a,
    }) else {
        return Vec::new();
    };
    // (evenly from the first to the last, the best in place of the one nearest it)
    let n = all.len();
    let mut shown: Vec<usize> = match n {
        n if n <= LISTED => (0..n).collect(),
        n => (0..LISTED).map(|i| i * (n - 1) / (LISTED - 1)).collect(),
    };
    let nearest = (1..shown.len().saturating_sub(1)).min_by_key(|&k| shown[k].abs_diff(best));
    if let Some(k) = nearest.filter(|_| !shown.contains(&best)) {
        shown[k] = best;
        shown.sort_unstable();
    }
    let of = match shown.len() < all.len() {
        true => format!(
            " ({} of {}: the first, the best, the last and some evenly between)",
            shown.len(),
            all.len()
        ),
        false => String::new(),
    };
    let mut lines = vec![
        format!("validations{of}:"),
        format!(
            "  {:>9} {:>8} {:>10} {:>9}",
            "step", "epochs", "val loss", "val acc"
        ),
    ];
    for &i in &shown {
        let v = &all[i];
        lines.push(format!(
            "  {:>9} {:>8.2} {:>10} {:>8.2}%{}",
            v.step,
            v.epochs,
            crate::front::units::loss_value(f64::from(v.loss), 4),
            v.accuracy * 100.0,
            if i == best && n > 1 { "  best" } else { "" }
        ));
    }
    lines
}

/// The run's name and its end-of-run summary; for a run without an end yet, how far it got
/// and, where the file is a run directory's record (`live`), whether the run still runs (a
/// `copy` of one made while it ran knows neither).
pub fn summary(app: &App, live: Option<bool>, copy: bool) -> Vec<String> {
    let mut lines = vec![format!("run: {}", app.info.name)];
    if app.summary.is_some() {
        lines.extend(tui::summary_lines(app));
    } else {
        let steps = app.step();
        let state = match (live, app.state) {
            _ if copy => "no end recorded in this copy, made while its run ran",
            (Some(false), _) => "no end recorded, and the run is not running: it was killed (or its machine went down)",
            (Some(true), _) => "still running",
            (None, RunState::Starting) if steps == 0 => "no step recorded yet",
            (None, _) => "no end recorded: still running, or killed",
        };
        lines.push(format!("{state}; last step recorded {steps}"));
    }
    lines
}
