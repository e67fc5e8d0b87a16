//! `mgtop-train`: parses the flags, runs the command, and owns what belongs to the process:
//! signal handling (a second signal quits at once) and exit codes.

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use clap::Parser;
use crossbeam_channel::Sender;
use mgtop::backend::cuda::symbols;
use mgtop::cli::{Cli, Command};
use mgtop::cmd;
use mgtop::engine::Engine;
use mgtop::front::tui::term;

static SIGNALS: AtomicUsize = AtomicUsize::new(0);
/// A signal stopped the run (it had not ended when the stop was asked): the exit is 130.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// A signal this soon after the one before is the same request, not a second one: GNU
/// `timeout` sends SIGTERM to the process and then to its process group microseconds apart, and
/// a closed terminal's SIGHUP can come from the kernel and from a wrapper passing it on. Only
/// a signal after this long quits at once.
const SAME_REQUEST: Duration = Duration::from_millis(500);

/// When the last signal that counted came.
static LAST_SIGNAL: Mutex<Option<Instant>> = Mutex::new(None);

/// Whether a signal at `now` repeats the one counted at `last` (see `SAME_REQUEST`).
fn repeats(last: Option<Instant>, now: Instant) -> bool {
    last.is_some_and(|t| now.saturating_duration_since(t) < SAME_REQUEST)
}

/// Whether `sig` is ignored now (at start: inherited, as `nohup` ignores SIGHUP and a
/// non-interactive shell starts background jobs with SIGINT ignored; by the Unix convention it
/// then stays ignored).
fn ignored(sig: libc::c_int) -> bool {
    // SAFETY: a null new action only reads the current disposition into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// SIGHUP and SIGINT as they were at start: ignored or not.
static INHERITED: OnceLock<(bool, bool)> = OnceLock::new();

/// What a signal does now, given how many came before it.
type Handler = Box<dyn Fn(usize) + Send>;

/// The current handler; `None` while a training run starts (loads its data, plans its model):
/// a signal then ends the process at once, nothing trained yet.
static HANDLER: Mutex<Option<Handler>> = Mutex::new(None);

/// SIGHUP's handler as installed, kept while an inherited "ignore" holds it off, for a terminal
/// UI to take back (under the UI a hang-up means the terminal is gone).
static HUP_ACTION: Mutex<Option<libc::sigaction>> = Mutex::new(None);

static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();

/// Installs the process's one handler of SIGINT, SIGTERM and SIGHUP (once): it calls the
/// current `HANDLER`. Signals the process inherited as ignored are ignored again right after.
fn install() -> anyhow::Result<()> {
    let done = INSTALLED.get_or_init(|| {
        ctrlc::set_handler(|| {
            let now = Instant::now();
            {
                let mut last = LAST_SIGNAL.lock().unwrap_or_else(|e| e.into_inner());
                if repeats(*last, now) {
                    return;
                }
                *last = Some(now);
            }
            let n = SIGNALS.fetch_add(1, Ordering::SeqCst);
            match HANDLER.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                Some(h) => h(n),
                None => {
                    // (a launcher ending the others of a job that failed to start: process 0
                    // says why; they stop quietly)
                    let launch = mgtop::comm::launch::from_env().ok().flatten();
                    match launch.filter(|l| l.is_multi()).map(|l| l.rank) {
                        None => mgtop::tell!("stopped during start-up: nothing was trained yet"),
                        Some(Some(0)) => mgtop::tell!("stopped during start-up by a signal (Ctrl-C, or the launcher ending every process of a run one of them failed to start: its error would be above or below): nothing was trained yet"),
                        Some(_) => {}
                    }
                    // (what the start made that no run will use: a --metrics-out file)
                    mgtop::quit_at_once::run();
                    term::restore();
                    std::process::exit(130);
                }
            }
        })
        .map_err(|e| e.to_string())?;
        let (hup, int) = INHERITED.get().copied().unwrap_or_default();
        // SAFETY: reading SIGHUP's action, then setting standard signals to SIG_IGN.
        unsafe {
            if hup {
                let mut ours: libc::sigaction = std::mem::zeroed();
                libc::sigaction(libc::SIGHUP, std::ptr::null(), &mut ours);
                *HUP_ACTION.lock().unwrap_or_else(|e| e.into_inner()) = Some(ours);
                libc::signal(libc::SIGHUP, libc::SIG_IGN);
            }
            if int {
                libc::signal(libc::SIGINT, libc::SIG_IGN);
            }
        }
        Ok(())
    });
    done.clone().map_err(anyhow::Error::msg)
}

/// What a SIGHUP inherited as ignored (nohup) does once the handler is set.
#[derive(Clone, Copy, PartialEq)]
enum Hup {
    /// A terminal UI shows the run: a hang-up stops it.
    Handled,
    /// A headless run: it stays ignored, and the log says how to stop the run instead.
    IgnoredSaid,
    /// It stays ignored, without a word.
    Ignored,
}

/// Makes `h` what a signal does (`hup`: what a SIGHUP inherited as ignored does).
fn set_handler(h: Handler, hup: Hup) -> anyhow::Result<()> {
    install()?;
    *HANDLER.lock().unwrap_or_else(|e| e.into_inner()) = Some(h);
    if let Some(ours) = HUP_ACTION.lock().unwrap_or_else(|e| e.into_inner()).take() {
        match hup {
            // SAFETY: putting back the action ctrlc installed for SIGHUP.
            Hup::Handled => unsafe {
                libc::sigaction(libc::SIGHUP, &ours, std::ptr::null_mut());
            },
            Hup::IgnoredSaid => mgtop::tell!("note: SIGHUP is ignored (nohup): the run survives the end of the session; stop it with SIGTERM (kill PID) for a checkpoint"),
            Hup::Ignored => {}
        }
    }
    // (a script's `cmd &` starts it so: Ctrl-C and kill -INT would do nothing, unsaid)
    let int = INHERITED.get().is_some_and(|&(_, int)| int);
    if int && hup == Hup::IgnoredSaid {
        mgtop::tell!("note: SIGINT is ignored (inherited so, as a script's `cmd &` starts it): Ctrl-C and kill -INT do nothing; stop it with SIGTERM (kill PID) for a checkpoint");
    }
    Ok(())
}

fn main() -> ExitCode {
    mgtop::data::host_memory::reuse_freed_memory();
    mgtop::clock::install();
    INHERITED.get_or_init(|| (ignored(libc::SIGHUP), ignored(libc::SIGINT)));
    // a file-size limit (`ulimit -f`, a batch scheduler's) killed the process mid-write, its
    // metrics file cut mid-record, with no word: ignored, a write past it fails (EFBIG) and is
    // handled as a full disk is (said, the file cut back to whole records)
    // SAFETY: setting a standard signal's disposition to SIG_IGN (process-wide, whatever
    // threads run: the clock's tick thread has started).
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    // (the processes of an MPI job mostly share one command line: its first says what is wrong
    // with it, or prints the help, once for the job; another says its error only where it is
    // still running a moment later, its own (`mpirun A : B`): the launcher ends the others of a
    // job whose first process failed)
    let launch = mgtop::comm::launch::from_env().ok().flatten();
    let not_first = (launch.filter(|l| l.is_multi())).is_some_and(|l| l.rank != Some(0));
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        // --help and --version print as clap writes them; errors as one line
        Err(e) if !e.use_stderr() => {
            if !not_first {
                let _ = e.print();
            }
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let args: Vec<String> = (std::env::args_os().skip(1))
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            if not_first {
                std::thread::sleep(Duration::from_secs(2));
            }
            eprintln!("{}", mgtop::cli::one_line(&e, &args));
            return ExitCode::from(1);
        }
    };
    // GPU ids in nvidia-smi's order (PCI bus order) rather than CUDA's default fastest-first
    if std::env::var_os("CUDA_DEVICE_ORDER").is_none() {
        std::env::set_var("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
    }
    // cudarc's panic where a CUDA library lacks a function is said as an error where it is
    // caught (`lacking`, a worker's end), not as a panic
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let text = symbols::panic_text(info.payload()).unwrap_or("");
        if !symbols::is_missing_symbol(text) {
            default_hook(info);
        }
    }));
    // the CUDA libraries, where a GPU needs them and they are installed under other names
    // (this may start the program again)
    let selftest = matches!(cli.command, Some(Command::Selftest));
    let loadable = lacking(|| {
        mgtop::backend::cuda::libs::make_loadable(selftest);
        Ok(())
    });
    if let Err(e) = loadable {
        mgtop::tell!("error: {e}");
        return ExitCode::from(1);
    }
    // a training run takes signals from the start: one while it loads its data ends it with a
    // word, not by the default action
    if cli.command.is_none() {
        if let Err(e) = install() {
            mgtop::tell!("error: cannot handle signals: {e}");
            return ExitCode::from(1);
        }
    }
    // one process of several (mpirun, srun) trains or measures `scale`; the other commands run
    // in one process
    if let (Some(c), Ok(Some(launch))) = (&cli.command, mgtop::comm::launch::from_env()) {
        let spans = matches!(c, Command::Scale(_) | Command::MpiAllreduceBench { .. });
        if launch.is_multi() && !spans {
            mgtop::tell!(
                "error: `{}` runs in one process, but this one was {}: run it without the launcher",
                c.name(),
                launch.describe()
            );
            return ExitCode::from(1);
        }
    }
    // (a report cut short by a full disk fails; a training run's results are its run directory)
    let reports = cli.command.is_some();
    let result = lacking(|| match cli.command {
        Some(Command::Bench(args)) => cmd::bench::command(&args),
        Some(Command::Scale(args)) => cmd::scale::command(*args, &on_scale_signals),
        Some(Command::Selftest) => cmd::selftest::command(),
        Some(Command::View(args)) => cmd::view::command(&args, &on_view_signals),
        Some(Command::Runs(args)) => cmd::runs::command(&args).map(|()| ExitCode::SUCCESS),
        Some(Command::Models(args)) => cmd::models::command(&args).map(|()| ExitCode::SUCCESS),
        Some(Command::Export(args)) => cmd::export::command(&args).map(|()| ExitCode::SUCCESS),
        Some(Command::Eval(args)) => cmd::eval::command(&args).map(|()| ExitCode::SUCCESS),
        Some(Command::Attach(args)) => cmd::attach::command(&args, &on_view_signals),
        Some(Command::MpiAllreduceBench { repeat }) => {
            cmd::bench_processes::allreduce_processes(repeat).map(|()| ExitCode::SUCCESS)
        }
        None => cmd::train(cli.train, &on_signals).map(|()| {
            if INTERRUPTED.load(Ordering::SeqCst) && !cmd::completed() {
                ExitCode::from(130)
            } else {
                ExitCode::SUCCESS
            }
        }),
    });
    match result {
        // (a report's code other than success, an interrupted one's 130, stands)
        Ok(code) => match cmd::stdout_lost().filter(|_| reports && code == ExitCode::SUCCESS) {
            Some(why) => {
                mgtop::tell!("error: standard output could not be written ({why}): what it holds is cut short; write it where it fits");
                ExitCode::from(1)
            }
            None => code,
        },
        Err(e) => {
            // (a name from outside, such as a directory's, cannot drive the terminal; a value
            // of thousands of characters is named, not printed whole)
            let e = mgtop::text::clip_quotes(&e.to_string(), mgtop::text::QUOTED_CHARS);
            let e = mgtop::text::printable_lines(&e);
            // (as a flag error: the job's shared settings fail alike on every process, and its
            // first says so; another's own error is said where the launcher has not ended it)
            if not_first {
                std::thread::sleep(Duration::from_secs(2));
            }
            mgtop::tell!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// Runs `f`; cudarc's panic where a CUDA library lacks a function comes back as that error,
/// said with its mend (another panic goes on as a panic).
fn lacking<T>(f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => match symbols::panic_text(&*payload) {
            Some(text) if symbols::is_missing_symbol(text) => {
                Err(anyhow::anyhow!(symbols::explained(text.to_string())))
            }
            _ => std::panic::resume_unwind(payload),
        },
    }
}

/// `scale` in one process: SIGINT / SIGTERM / SIGHUP end the measuring after the run under
/// way, with the table of what was measured; a second signal quits at once.
fn on_scale_signals(notify: Sender<()>) -> anyhow::Result<()> {
    // (a hang-up under nohup stays ignored, as the measuring is meant to outlive the session)
    let h = move |n: usize| {
        if n == 0 {
            mgtop::tell!("interrupted: finishing the run under way, then the table of the points measured (signal again to quit at once)");
            let _ = notify.send(());
        } else {
            mgtop::tell!("interrupted again: quitting at once, without the table");
            std::process::exit(130);
        }
    };
    set_handler(Box::new(h), Hup::Ignored)
}

/// This process's number among a launch's several (mpirun), where it is one of them.
fn launched_process() -> Option<usize> {
    let launched = mgtop::comm::launch::from_env().ok().flatten();
    launched.filter(|l| l.is_multi()).and_then(|l| l.rank)
}

/// The step of the newest checkpoint this process wrote whole.
fn written() -> Option<u64> {
    mgtop::engine::checkpoint::written()
}

/// Whether this process is process 0 of a launch's several: it speaks for the run.
fn launched_lead() -> bool {
    launched_process() == Some(0)
}

/// `view` and `attach`: SIGINT / SIGTERM / SIGHUP close the UI (the run watched is not this
/// process's: it goes on); a second signal quits at once, restoring the terminal first.
fn on_view_signals(notify: Sender<()>) -> anyhow::Result<()> {
    let h = move |n: usize| {
        if n == 0 {
            let _ = notify.send(());
        } else {
            term::restore();
            std::process::exit(130);
        }
    };
    set_handler(Box::new(h), Hup::Handled)
}

/// SIGINT / SIGTERM / SIGHUP: the first asks the run to stop with a checkpoint, a second (not a
/// repeat within `SAME_REQUEST`) quits at once (restoring the terminal first). `ui`: a terminal
/// UI shows the run.
fn on_signals(engine: &Engine, notify: Option<Sender<()>>, ui: bool) -> anyhow::Result<()> {
    let controller = engine.controller();
    let stops = match engine.info().stops_at_average() {
        Some(h) => format!("the steps to the ranks' next average (local SGD: up to {h} on)"),
        None => "this step".into(),
    };
    let run = engine.info().run_dir.clone();
    let checkpoints = engine.checkpoint_dir().map(Path::to_path_buf);
    let resumed_from = engine.info().resumed_from.clone();
    // what continues the run, as it stands when the process quits
    let continued = move || {
        mgtop::engine::rundir::continuing(
            run.as_deref(),
            checkpoints.as_deref(),
            resumed_from.as_deref(),
        )
    };
    let h = move |n: usize| {
        if n == 0 {
            // (a run that had ended, its process still writing its last lines or its screen on
            // the summary, was not interrupted: it exits as it would have)
            let asked = controller.stop(true);
            let stopping = asked.is_ok();
            INTERRUPTED.store(stopping, Ordering::SeqCst);
            match (&notify, asked) {
                (Some(tx), _) => {
                    let _ = tx.send(());
                }
                (None, Ok(())) => {
                    mgtop::tell!("stopping: finishing {stops} and writing a checkpoint (signal again to quit at once)");
                    // (mpirun signals every process when one of them has ended, and kills the
                    // rest a second later: then no step finishes, and this is the last word,
                    // said where the stop has written no checkpoint half a second on)
                    if launched_lead() {
                        let (continued, before) = (continued.clone(), written());
                        std::thread::spawn(move || {
                            std::thread::sleep(Duration::from_millis(500));
                            if written() == before && !mgtop::observe::recorder::run_ended() {
                                mgtop::tell!("  where a process of this run has ended (mpirun then stops the others), no checkpoint follows: {}", continued());
                            }
                        });
                    }
                }
                (None, Err(mgtop::engine::control::ControlError::Finishing)) => mgtop::tell!("the run has trained its last step and is finishing (its last validation and checkpoint; signal again to quit at once)"),
                (None, Err(_)) => mgtop::tell!("the run has ended: writing its last lines (signal again to quit now)"),
            }
        } else if n == 1
            && INTERRUPTED.load(Ordering::SeqCst)
            && mgtop::observe::recorder::run_ended()
        {
            // the run the first signal stopped has ended and its records are whole: the
            // process is writing its last lines (the run directory, how to resume), which a
            // third signal would cut (where the first found the run ended, this one quits)
            mgtop::tell!("the run has ended: writing its last lines (signal again to quit now)");
        } else {
            // (a checkpoint half written goes, the metrics files get their end, the socket goes)
            mgtop::quit_at_once::run();
            term::restore();
            let ended = mgtop::observe::recorder::run_ended();
            let lost = match mgtop::engine::checkpoint::abandoned() {
                Some(step) => format!("the checkpoint of step {step} being written was removed"),
                None if ended => "the run had ended, its records whole".into(),
                // (a second signal after the first's stop wrote its checkpoint, the run still
                // finishing; or before, a periodic one the newest)
                None => match mgtop::engine::checkpoint::written() {
                    Some(step) => format!(
                        "the checkpoint of step {step}, the newest, is whole: training after it is lost; resume from it"
                    ),
                    None => "the step under way was neither finished nor checkpointed".into(),
                },
            };
            // (a process other than process 0 of a launched run has no run directory of its own:
            // process 0 speaks for the run)
            match launched_process() {
                Some(p) if p > 0 => mgtop::tell!(
                    "quit at once (process {p}): {lost}; process 0 says where the run continues from"
                ),
                _ => mgtop::tell!("quit at once: {lost}; {}", continued()),
            }
            std::process::exit(130);
        }
    };
    set_handler(
        Box::new(h),
        if ui { Hup::Handled } else { Hup::IgnoredSaid },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_right_after_another_is_the_same_request_and_a_later_one_a_second() {
        let t = Instant::now();
        assert!(!repeats(None, t), "the first signal counts");
        // GNU timeout's two SIGTERMs, microseconds apart
        assert!(repeats(Some(t), t + Duration::from_micros(40)));
        assert!(repeats(
            Some(t),
            t + SAME_REQUEST - Duration::from_millis(1)
        ));
        // a person pressing Ctrl-C again
        assert!(!repeats(Some(t), t + SAME_REQUEST));
        assert!(!repeats(Some(t), t + Duration::from_secs(3)));
        // a clock read before the last one (threads) is a repeat, not a panic
        assert!(repeats(Some(t + Duration::from_millis(5)), t));
    }
}
