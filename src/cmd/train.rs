//! Training, the default command: start the engine, then watch it in the terminal UI or as log
//! lines until it ends.

use std::io::IsTerminal;
use std::path::PathBuf;

use crossbeam_channel::{unbounded, Sender};

use crate::cli::{Frontend, TrainArgs};
use crate::engine::{rundir, Engine, RunResult};
use crate::front::headless;
use crate::front::tui::{self, term, theme::Theme, TuiOptions};
use crate::observe::metrics::MetricsWriter;

/// Installs the process's signal handling for a started run (the binary's: a second signal
/// quits the process); the UI passes a channel to hear of the first.
pub type OnSignals = dyn Fn(&Engine, Option<Sender<()>>) -> anyhow::Result<()>;

pub fn command(args: TrainArgs, on_signals: &OnSignals) -> anyhow::Result<()> {
    let (cfg, front) = args.resolve().map_err(anyhow::Error::msg)?;
    let tui = !front.headless && std::io::stdout().is_terminal();
    // a bad theme is refused before anything starts, even where the log is shown instead
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let theme = Theme::choose(front.theme.as_deref(), no_color)?;
    let theme = tui.then_some(theme);
    let (log_every, metrics_out) = (cfg.log_every, cfg.metrics_out.clone());
    if let Some(p) = &metrics_out {
        MetricsWriter::preflight(p)?;
    }
    if cfg.calibrate {
        crate::tell!("calibrating: training one device for 120 steps first (--calibrate)");
    }
    let engine = Engine::start(cfg)?;
    let run_dir = engine.info().run_dir.clone();
    // opened only once the run is valid, so a bad input never truncates an earlier metrics file
    let paths: Vec<PathBuf> = run_dir
        .iter()
        .map(|d| d.join(rundir::METRICS))
        .chain(metrics_out)
        .collect();
    let metrics = match (!paths.is_empty())
        .then(|| MetricsWriter::create(&paths))
        .transpose()
    {
        Ok(m) => m,
        Err(e) => {
            let _ = engine.controller().stop(false);
            let _ = engine.join();
            return Err(e.into());
        }
    };
    let result = match theme {
        Some(theme) => run_tui(engine, theme, &front, log_every, metrics, on_signals)?,
        None => {
            on_signals(&engine, None)?;
            let mut out = std::io::stdout().lock();
            headless::run(engine, log_every, front.sample_interval, &mut out, metrics)?
        }
    };
    if let Some(dir) = &run_dir {
        crate::say!(
            "run dir: {} (mgtop-train view {})",
            dir.display(),
            dir.display()
        );
    }
    if result.stopped {
        if let Some(p) = &result.last_checkpoint {
            // the run's directory where its checkpoints are there, else the checkpoint itself
            let inside = run_dir.as_ref().filter(|d| {
                std::fs::canonicalize(p).is_ok_and(|p| p.starts_with(d.join(rundir::CHECKPOINTS)))
            });
            crate::say!("resume with: --resume {}", inside.unwrap_or(p).display());
        }
    }
    Ok(())
}

fn run_tui(
    engine: Engine,
    theme: Theme,
    front: &Frontend,
    log_every: u64,
    metrics: Option<MetricsWriter>,
    on_signals: &OnSignals,
) -> anyhow::Result<RunResult> {
    let (sig_tx, sig_rx) = unbounded();
    on_signals(&engine, Some(sig_tx))?;
    let opts = TuiOptions {
        theme,
        readonly: front.readonly,
        exit_when_done: front.exit_when_done,
        sample_interval: front.sample_interval,
        log_every,
    };
    let (mut terminal, guard) = match term::enter() {
        Ok(t) => t,
        Err(e) => {
            term::restore();
            let _ = engine.controller().stop(false);
            let _ = engine.join();
            anyhow::bail!("cannot start the terminal UI ({e}); use --headless for log lines");
        }
    };
    let end = tui::drive(
        &mut terminal,
        engine,
        &opts,
        term::inputs(),
        sig_rx,
        metrics,
    );
    drop(terminal);
    drop(guard);
    for line in tui::summary_lines(&end.app) {
        crate::say!("{line}");
    }
    Ok(end.result?)
}
