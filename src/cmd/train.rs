//! Training, the default command: start the engine and its live socket, then watch it in the
//! terminal UI or as log lines until it ends.

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use std::sync::Arc;

use crossbeam_channel::{unbounded, Sender};

use crate::cli::{Frontend, TensorboardDir, TrainArgs};
use crate::comm::Processes;
use crate::engine::Device;
use crate::engine::{checkpoint, rundir, weights, Engine, EngineError, RunResult};
use crate::front::headless;
use crate::front::tui::{self, term, theme::Theme, TuiOptions};
use crate::observe::live::{LiveHub, LiveServer, SOCKET_NAME};
use crate::observe::metrics::{records, Line, MetricsWriter};
use crate::observe::nvml::Nvml;
use crate::observe::prometheus::{http::Endpoint, Prometheus};
use crate::observe::recorder::Sink;
use crate::observe::tensorboard::TensorBoard;
use crate::observe::Recorder;

/// Installs the process's signal handling for a started run (the binary's: a second signal
/// quits the process); the UI passes a channel to hear of the first, and says it is a terminal
/// UI (the last argument: a hang-up then stops the run even under nohup).
pub type OnSignals = dyn Fn(&Engine, Option<Sender<()>>, bool) -> anyhow::Result<()>;

/// Serves the run on `<dir>/live.sock`; the server (none where it could not start) and the
/// start-up line that says where it is, or why there is none.
fn serve(dir: &Path, engine: &Engine) -> (Option<(LiveServer, LiveHub)>, String) {
    let hub = LiveHub::new(Instant::now() - engine.elapsed());
    // a client may connect before the frontend records the start: it is served this
    hub.set_run(Line::new(&records::run(engine.info())));
    match LiveServer::start(&dir.join(SOCKET_NAME), hub.clone(), engine.controller()) {
        Ok(server) => {
            let line = format!(
                "live: {} (mgtop-train attach {})",
                server.path().display(),
                dir.display()
            );
            (Some((server, hub)), line)
        }
        Err(e) => (
            None,
            format!("warning: no live socket for this run ({e}); training goes on, but `attach` cannot reach it"),
        ),
    }
}

/// Trains in this process, alone or as process 0 of several (`procs`), which watches the run
/// for all of them: its frontend, metrics file, run directory and live socket; `launcher`:
/// what started it, where a launcher did (`mpirun -np 1` too).
pub(super) fn train(
    args: TrainArgs,
    on_signals: &OnSignals,
    procs: Option<Arc<dyn Processes>>,
    launcher: Option<&crate::comm::launch::Launch>,
) -> anyhow::Result<()> {
    let (cfg, front, origins) = args
        .resolve_noted(Default::default())
        .map_err(anyhow::Error::msg)?;
    let export = front.export.clone();
    // a refusal of a setting the config file gave names its line (as the engine's do)
    let noted = |e: anyhow::Error| anyhow::anyhow!(origins.explain(e.to_string()));
    // (refused before training, not after it; into the --run-dir the run is to make, checked
    // at its end, but for the names of the run's own files)
    // (absolute with `..` worked out by name: `ck/../w` is not in `ck`)
    let abs = crate::engine::places::tidy_absolute;
    let into_run_dir = |out: &Path| {
        let folder = out.parent().filter(|p| !p.as_os_str().is_empty());
        let run_dir = cfg.run_dir.as_deref().filter(|d| !d.exists());
        run_dir.is_some_and(|d| abs(d) == abs(folder.unwrap_or(Path::new("."))))
    };
    let exported = |out: &Path| -> anyhow::Result<()> {
        if cfg
            .metrics_out
            .as_deref()
            .is_some_and(|m| abs(m) == abs(out))
        {
            anyhow::bail!(
                "--export {}: the run's --metrics-out file; give the export another name",
                out.display()
            );
        }
        // (the weights it starts from, an earlier export perhaps: kept)
        let same_file = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => abs(a) == abs(b),
        };
        if cfg.init.as_deref().is_some_and(|i| same_file(i, out)) {
            anyhow::bail!(
                "--export {}: the --init file this run starts from; give the export another name",
                out.display()
            );
        }
        // (a checkpoint's folder is the run's to make and replace)
        if abs(out).starts_with(abs(&cfg.checkpoint_dir)) {
            anyhow::bail!(
                "--export {}: inside the checkpoint directory the run writes ({}); give a path outside it",
                out.display(),
                cfg.checkpoint_dir.display()
            );
        }
        match into_run_dir(out) {
            true if out.file_name().is_some_and(rundir::own_name) => anyhow::bail!(
                "--export {}: a file of the run directory the run makes (what view, runs and attach read); give the export another name",
                out.display()
            ),
            true => {}
            false => {
                weights::export_target(out).map_err(|e| anyhow::anyhow!("--export {e}"))?;
                if !cfg.model.in_torchvision() {
                    weights::module::target(out).map_err(|e| anyhow::anyhow!("--export {e}"))?;
                }
            }
        }
        Ok(())
    };
    if let Some(out) = export.as_deref() {
        exported(out).map_err(noted)?;
    }
    // under a launcher the keyboard is not this process's (mpirun forwards its stdin, orted has
    // no terminal), even one process's (`mpirun -np 1`): process 0 logs, `attach` gives the screen
    let mut tui = !front.headless && term::can_draw() && procs.is_none() && launcher.is_none();
    // (a terminal that says it draws nothing: the log instead, said why)
    let on_terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
    if !front.headless && on_terminal && term::dumb_terminal() && procs.is_none() {
        crate::tell!("note: TERM=dumb: this terminal draws no screens, so the run logs (for the UI: run it in a terminal with another TERM, e.g. TERM=xterm-256color)");
    }
    if tui && term::in_background() {
        crate::tell!(
            "note: {}: the run goes on headless (for the UI: start it in the foreground, or under timeout --foreground ...; `fg` later keeps the log; `mgtop-train attach` shows the screen)",
            term::BACKGROUND
        );
        tui = false;
    }
    // the screen's own switches, where there is no screen
    let screen_only: Vec<String> = [
        ("--readonly", front.readonly),
        ("--exit-when-done", front.exit_when_done),
    ]
    .into_iter()
    .filter(|&(_, on)| on && !tui)
    .map(|(flag, _)| {
        format!("note: {flag}: there is no terminal UI here (it logs); nothing changes")
    })
    .collect();
    // a bad theme is refused before anything starts, even where the log is shown instead
    let no_color = Theme::colourless();
    let theme = Theme::choose(front.theme.as_deref(), no_color)
        .map_err(|e| noted(anyhow::anyhow!("--{e}")))?;
    let theme = tui.then_some(theme);
    // (--metrics-out naming the run directory's own metrics.jsonl: the file the run writes)
    let own = |p: &PathBuf| {
        let run = cfg.run_dir.as_ref().map(|d| d.join(rundir::METRICS));
        run.is_some_and(|r| abs(&r) == abs(p))
    };
    let (log_every, metrics_out) = (cfg.log_every, cfg.metrics_out.clone().filter(|p| !own(p)));
    // (claimed: of two runs started together with one --metrics-out, the second is refused
    // here, before it makes its run directory)
    let metrics_out = metrics_out
        .map(|p| MetricsWriter::preflight(&p))
        .transpose()
        .map_err(|e| noted(anyhow::anyhow!("--metrics-out: {e}")))?;
    if let Some(TensorboardDir::At(dir)) = &front.tensorboard {
        crate::observe::tensorboard::preflight(dir).map_err(|e| noted(anyhow::Error::msg(e)))?;
    }
    // listening before the run starts: a port in use is said before minutes of start-up
    let registry = prometheus::Registry::new();
    let endpoint = front
        .prometheus
        .map(|addr| Endpoint::start(addr, registry.clone()))
        .transpose()
        .map_err(|e| noted(anyhow::Error::msg(e)))?;
    // (one device named is its own baseline: the run says so, and trains nothing first)
    let one = cfg.devices.named() == Some(1) && procs.is_none();
    if cfg.calibrate && !one {
        crate::tell!("calibrating: training one device alone first (--calibrate: seconds, or a pass over pictures decoded on their first use)");
    }
    if tui {
        // (the screen opens once the run has started: a large data set takes a while)
        crate::tell!(
            "starting: loading --data {} and opening the devices (Ctrl-C stops)",
            cfg.data
        );
    }
    let patience = cfg.stall_timeout;
    let taken = (front.taken_from_checkpoint.as_ref())
        .map(|t| format!("settings from the checkpoint: {t} (flags and --config override them)"));
    // (whether a stopped run's checkpoint resumes as it was)
    let (strategy, optimizer) = (cfg.strategy, cfg.optimizer);
    let engine = match Engine::start_in(cfg, procs.clone()) {
        Ok(engine) => engine,
        Err(e) => {
            // (a setting the run did not give, such as a data path, may be what failed)
            if let Some(t) = &taken {
                crate::tell!("{t}");
            }
            // a setting refused (devices and data too): where it came from, if not a flag
            return Err(match e {
                EngineError::Config(refusal) => EngineError::Config(origins.explain(refusal)),
                e @ (EngineError::Devices(_) | EngineError::Data(_)) => {
                    EngineError::Config(origins.explain(e.to_string()))
                }
                // (a checkpoint that does not fit the model the config file asked for)
                EngineError::Checkpoint(e @ checkpoint::CheckpointError::ShapeMismatch { .. }) => {
                    match origins.set_by_file(&["model", "data", "image-size"]) {
                        Some(set) => EngineError::Config(format!("{e}{set}")),
                        None => EngineError::Checkpoint(e),
                    }
                }
                e => e,
            }
            .into());
        }
    };
    if let Some(p) = &procs {
        // the processes met: from now on one that stops answering is taken for lost
        p.set_patience(crate::engine::peer_patience(patience));
    }
    let run_dir = engine.info().run_dir.clone();
    // opened only once the run is valid, so a bad input never truncates an earlier metrics file
    let own = (run_dir.iter()).map(|d| MetricsWriter::create(&d.join(rundir::METRICS)));
    let metrics = match own
        .chain(metrics_out.into_iter().map(MetricsWriter::claimed))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(m) => m,
        Err(e) => {
            let _ = engine.controller().stop(false);
            let _ = engine.join();
            return Err(e.into());
        }
    };
    let (live, mut notes) = match &run_dir {
        Some(dir) => {
            let (live, note) = serve(dir, &engine);
            (live, vec![note])
        }
        None => (None, Vec::new()),
    };
    notes.extend(origins.config_note());
    notes.extend(taken);
    notes.extend(screen_only);
    let (server, hub) = live.unzip();
    let mut recorder = Recorder::new(metrics, hub, log_every);
    match exporters(&engine, &front, endpoint.as_ref(), &registry, &mut notes) {
        Ok(sinks) => {
            for s in sinks {
                recorder = recorder.with(s);
            }
        }
        Err(e) => {
            let _ = engine.controller().stop(false);
            let _ = engine.join();
            return Err(anyhow::Error::msg(e));
        }
    }
    if (procs.is_some() || launcher.is_some()) && !front.headless {
        let which = match procs.is_some() {
            true => "a run over several processes".to_string(),
            false => format!(
                "the launcher keeps the keyboard ({}): a run under it",
                launcher.map_or("mpirun, srun", |l| l.launcher)
            ),
        };
        notes.push(format!(
            "note: {which} logs here; for the terminal UI: mgtop-train attach {}",
            run_dir
                .as_deref()
                .map_or("RUN_DIR".into(), |d| d.display().to_string())
        ));
    }
    let result = match theme {
        Some(theme) => run_tui(engine, theme, &front, recorder, notes, on_signals),
        None => on_signals(&engine, None, false).and_then(|()| {
            let mut engine = engine;
            engine.settle_run_dir();
            let mut out = std::io::stdout().lock();
            let interval = front.sample_interval;
            Ok(headless::run(engine, interval, &mut out, recorder, &notes)?)
        }),
    };
    // clients get the end of the run, then the socket and the endpoint go
    drop(server);
    drop(endpoint);
    // (a failed run's directory too: its metrics file tells what happened)
    if let Some(dir) = &run_dir {
        match dir.join(crate::engine::rundir::METRICS).is_file() {
            true => crate::say!(
                "run dir: {} (mgtop-train view {})",
                dir.display(),
                dir.display()
            ),
            false => crate::say!(
                "run dir: {} (its metrics file was removed during the run: nothing to view)",
                dir.display()
            ),
        }
    }
    let result = result?;
    super::ran(&result);
    if result.data_skipped > 0 {
        // (the screen's events are gone once it closes; the metrics file keeps them)
        let named = match (tui, &run_dir) {
            (false, _) => "the WARNING lines name them".to_string(),
            (true, Some(dir)) => format!(
                "the data_skipped records of {} name them",
                dir.join(rundir::METRICS).display()
            ),
            (true, None) => "the screen's events named them".into(),
        };
        crate::say!(
            "note: {} image file(s) could not be decoded during the run; another picture of the same class stood in for each where its class had one ({named})",
            result.data_skipped
        );
    }
    if let Some(out) = &export {
        match &result.last_checkpoint {
            Some(p) => {
                // (the folder was writable at the start: the run's weights are kept either way)
                let done = weights::export(p, out).map_err(|e| {
                    let arg = rundir::resume_arg(run_dir.as_deref(), p);
                    anyhow::anyhow!("{e}; the weights are in the checkpoint: mgtop-train export {} FILE writes them", arg.display())
                })?;
                crate::say!(
                    "exported {} to {} (--export; {})",
                    crate::text::counted(done.tensors, "tensor"),
                    done.written(out),
                    done.how_to_load(out)
                );
            }
            None => crate::tell!(
                "--export {}: the run wrote no checkpoint to export",
                out.display()
            ),
        }
    }
    if result.stopped {
        match &result.last_checkpoint {
            Some(p) => {
                let arg = rundir::resume_arg(run_dir.as_deref(), p);
                let meta = checkpoint::read_meta(p).ok();
                let step = meta.as_ref().map_or(0, |m| m.step);
                // (stopped without a checkpoint after an earlier one: the steps since are lost)
                let lost = crate::engine::checkpoint::steps_lost(step, result.steps);
                let ranks = meta.as_ref().map_or(1, |m| m.ranks);
                match strategy.unresumable(optimizer, step, ranks, strategy) {
                    None => crate::say!("resume with: --resume {}{lost}", arg.display()),
                    Some((why, flags)) => crate::say!(
                        "to go on: --resume {} {flags} (or --strategy mirrored; {why}){lost}",
                        arg.display()
                    ),
                }
            }
            None => crate::say!(
                "no checkpoint: the run was stopped without one, so it cannot be resumed (a stop with one: q then s on the screen, a signal, or attach; --checkpoint-every N writes them as it goes)"
            ),
        }
    }
    Ok(())
}

/// The Prometheus metrics (served by `endpoint`) and TensorBoard's event file, as the flags
/// ask; each adds its start-up line to `notes`.
fn exporters(
    engine: &Engine,
    front: &Frontend,
    endpoint: Option<&Endpoint>,
    registry: &prometheus::Registry,
    notes: &mut Vec<String>,
) -> Result<Vec<Box<dyn Sink>>, String> {
    let info = engine.info();
    let mut sinks: Vec<Box<dyn Sink>> = Vec::new();
    if let Some(endpoint) = endpoint {
        let ids: Vec<String> = info
            .devices
            .iter()
            .filter_map(|d| match d {
                Device::Gpu { pci_bus_id, .. } => Some(pci_bus_id.clone().unwrap_or_default()),
                Device::Cpu { .. } => None,
            })
            .collect();
        let identities = match ids.is_empty() {
            true => Vec::new(),
            false => Nvml::open(&ids).map(|n| n.identities()).unwrap_or_default(),
        };
        sinks.push(Box::new(Prometheus::new(registry, info, &identities)?));
        notes.push(endpoint.describe());
    }
    // (where the events go, and the folder to give `tensorboard --logdir`)
    let tensorboard = match &front.tensorboard {
        Some(TensorboardDir::InRunDir) => (info.run_dir.as_ref())
            .map(|d| d.join(crate::observe::tensorboard::DIR))
            .map(|d| (d.clone(), d)),
        Some(TensorboardDir::At(dir)) => Some((
            crate::observe::tensorboard::own_run_folder(dir, &info.name, info.run_dir.as_deref())?,
            dir.clone(),
        )),
        None => None,
    };
    if let Some((dir, logdir)) = &tensorboard {
        let started = SystemTime::now() - engine.elapsed();
        let tb = TensorBoard::create(dir, info, info.started.unwrap_or(started))?;
        notes.push(format!(
            "tensorboard: {} (tensorboard --logdir {})",
            tb.path().display(),
            logdir.display()
        ));
        sinks.push(Box::new(tb));
    }
    Ok(sinks)
}

fn run_tui(
    mut engine: Engine,
    theme: Theme,
    front: &Frontend,
    recorder: Recorder,
    notes: Vec<String>,
    on_signals: &OnSignals,
) -> anyhow::Result<RunResult> {
    let (sig_tx, sig_rx) = unbounded();
    on_signals(&engine, Some(sig_tx), true)?;
    engine.settle_run_dir();
    let opts = TuiOptions {
        theme,
        readonly: front.readonly,
        exit_when_done: front.exit_when_done,
        sample_interval: front.sample_interval,
        notes,
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
        recorder,
    );
    term::close(terminal);
    drop(guard);
    for line in tui::summary_lines(&end.app) {
        crate::say!("{line}");
    }
    Ok(end.result?)
}
