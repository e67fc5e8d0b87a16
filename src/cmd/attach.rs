//! `attach [RUN_DIR | SOCKET]`: the terminal UI of a run in another process, over its live
//! socket: the same screens and keys as a local run; `q` can detach and leave it going.

use std::process::ExitCode;

use crossbeam_channel::unbounded;

use crate::cli::AttachArgs;
use crate::cmd::view::OnSignals;
use crate::front::tui::attach::AttachSource;
use crate::front::tui::{self, term, theme::Theme, Screen};
use crate::observe::live::locate;

pub fn command(args: &AttachArgs, on_signals: &OnSignals) -> anyhow::Result<ExitCode> {
    let no_color = Theme::colourless();
    let theme = Theme::choose(args.theme.as_deref(), no_color)?;
    let target = locate(args.target.as_deref())?;
    // connected first, so what is wrong with the run is said before what is wrong here
    let run_dir = target.run.clone();
    let run = run_dir.display().to_string();
    // attached again by the run directory, or by the socket given where none is beside it (a
    // socket forwarded over SSH: the run's files are on its machine)
    let own_dir = crate::engine::rundir::is_run_dir(&run_dir);
    let again = match own_dir {
        true => run.clone(),
        false => target.socket.display().to_string(),
    };
    let progress = match own_dir {
        true => format!("mgtop-train view --headless {run}"),
        false => "mgtop-train view --headless RUN_DIR where the run's files are".into(),
    };
    let (mut source, app) = AttachSource::connect(target, args.readonly)?;
    if !term::can_draw() {
        anyhow::bail!(
            "attach shows the terminal UI and stdout is not a terminal that draws one (or TERM=dumb): run it in one (for the run's progress without one: {progress})"
        );
    }
    if term::in_background() {
        anyhow::bail!(
            "attach shows the terminal UI and {}: run it in the foreground (for the run's progress without one: {progress})",
            term::BACKGROUND
        );
    }
    let (sig_tx, sig_rx) = unbounded();
    on_signals(sig_tx)?;
    let (mut terminal, guard) = match term::enter() {
        Ok(t) => t,
        Err(e) => {
            term::restore();
            anyhow::bail!("cannot start the terminal UI ({e}); attach needs a terminal");
        }
    };
    let screen = Screen {
        theme,
        exit_when_done: false,
    };
    let (app, _) = tui::run(
        &mut terminal,
        app,
        &mut source,
        screen,
        term::inputs(),
        sig_rx,
    );
    term::close(terminal);
    drop(guard);
    if app.summary.is_some() {
        // (names and paths come from the socket, as view's from the file)
        let run = format!("run: {}", app.info.name);
        for line in std::iter::once(run).chain(tui::summary_lines(&app)) {
            crate::say!("{}", crate::text::printable(&line));
        }
    } else if let Some(why) = &app.disconnected {
        // asked again as the screen closes: the connection may have gone with the run
        // (a socket outside a run directory has nothing else to ask)
        let live = own_dir
            .then(|| crate::engine::rundir::liveness(&run_dir, app.info.host.as_deref()))
            .flatten();
        let state = match live {
            Some(false) => format!(
                "the run is not running (it ended or was killed): see it with mgtop-train view {run}"
            ),
            Some(true) => format!("the run goes on: mgtop-train attach {again}"),
            None => format!("the run may still be going: mgtop-train attach {again}"),
        };
        crate::say!(
            "left at step {} with the connection lost ({why}); {state}",
            app.step()
        );
    } else {
        let (leaves, resume) = app.detach_leaves();
        crate::say!(
            "detached at step {}: {leaves}; attach again with: mgtop-train attach {again}{resume}",
            app.step()
        );
    }
    // (a script waiting on a run through attach learns how it ended, as from the run itself:
    // failed, or lost with its connection)
    let failed = app.summary.as_ref().is_some_and(|s| s.failed.is_some());
    match failed || (app.summary.is_none() && app.disconnected.is_some()) {
        true => Ok(ExitCode::FAILURE),
        false => Ok(ExitCode::SUCCESS),
    }
}
