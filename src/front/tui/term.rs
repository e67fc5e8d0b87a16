//! The real terminal: raw mode, the alternate screen and bracketed paste on the way in, restored
//! on every way out (normal end, error, panic, signal) and while the process is suspended
//! (Ctrl-Z, SIGTSTP), and a thread that turns key presses into inputs.

use std::io::{self, Stdout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Once, OnceLock};
use std::thread::ThreadId;

use crossbeam_channel::{unbounded, Receiver};
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::cursor::{Hide, Show};
use ratatui::crossterm::event::{
    self, DisableBracketedPaste, EnableBracketedPaste, Event as TermEvent, KeyCode, KeyModifiers,
};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::Terminal;

use super::Input;

static ACTIVE: AtomicBool = AtomicBool::new(false);
static UI_THREAD: OnceLock<ThreadId> = OnceLock::new();
static HOOK: Once = Once::new();
/// A SIGTSTP came while the UI held the terminal: the UI loop suspends (`suspend`).
static STOP_ASKED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_tstp(_: libc::c_int) {
    STOP_ASKED.store(true, Ordering::SeqCst);
}

/// Whether this process was started with SIGTSTP ignored (a shell without job control): it
/// is then never suspended, by the key or the signal.
fn tstp_ignored() -> bool {
    static IGNORED: OnceLock<bool> = OnceLock::new();
    *IGNORED.get_or_init(|| {
        // SAFETY: reading SIGTSTP's action into a zeroed sigaction
        let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
        unsafe { libc::sigaction(libc::SIGTSTP, std::ptr::null(), &mut now) };
        now.sa_sigaction == libc::SIG_IGN
    })
}

/// SIGTSTP caught (the UI's terminal is given back before the process stops) or left to its
/// default (stops the process at once); left ignored where it was inherited so.
fn catch_tstp(catch: bool) {
    if tstp_ignored() {
        return;
    }
    let action = match catch {
        true => on_tstp as extern "C" fn(libc::c_int) as libc::sighandler_t,
        false => libc::SIG_DFL,
    };
    // SAFETY: setting a standard signal's disposition; the handler only stores to an atomic
    unsafe { libc::signal(libc::SIGTSTP, action) };
}

/// Puts the terminal back as it was; safe to call any number of times, from any thread.
pub fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        catch_tstp(false);
        let _ = disable_raw_mode();
        let _ = execute!(
            io::stdout(),
            DisableBracketedPaste,
            LeaveAlternateScreen,
            Show
        );
    }
}

/// Raw mode, the alternate screen, pasted text as one event, no cursor.
fn take_terminal() -> io::Result<()> {
    enable_raw_mode()?;
    ACTIVE.store(true, Ordering::SeqCst);
    catch_tstp(true);
    execute!(
        io::stdout(),
        EnterAlternateScreen,
        EnableBracketedPaste,
        Hide
    )
}

/// Whether a SIGTSTP asked the UI to suspend since the last call.
pub fn stop_asked() -> bool {
    STOP_ASKED.swap(false, Ordering::SeqCst)
}

/// Ctrl-Z, SIGTSTP: the terminal given back as it was, the process stopped as a shell's job
/// (training stops with it), and the UI's terminal taken again once it continues (`fg`); the
/// caller then repaints the whole screen. Continued in the background (`bg`), taking the
/// terminal stops it again (SIGTTOU) until `fg`, as any full-screen program. Nothing where
/// SIGTSTP was inherited ignored.
pub fn suspend() -> io::Result<()> {
    if !ACTIVE.load(Ordering::SeqCst) || tstp_ignored() {
        return Ok(());
    }
    restore();
    // SAFETY: stopping this process as the terminal's suspend key would; returns on SIGCONT
    unsafe { libc::raise(libc::SIGTSTP) };
    let taken = take_terminal();
    // (a SIGTSTP that came meanwhile asked for the suspend just done)
    STOP_ASKED.store(false, Ordering::SeqCst);
    taken
}

/// Restores the terminal when dropped.
pub struct Guard(());

impl Drop for Guard {
    fn drop(&mut self) {
        restore();
    }
}

/// Switches to the full-screen UI. A panic on the UI thread restores the terminal before its
/// message is printed; a worker's panic is reported by the engine as a failure event instead,
/// so its message does not scribble over the screen.
pub fn enter() -> io::Result<(Terminal<CrosstermBackend<Stdout>>, Guard)> {
    let _ = UI_THREAD.set(std::thread::current().id());
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let on_ui = UI_THREAD.get() == Some(&std::thread::current().id());
            if on_ui || !ACTIVE.load(Ordering::SeqCst) {
                restore();
                previous(info);
            }
        }));
    });
    // NO_COLOR is honoured by the theme (mono unless one is asked for by --theme or `t`); a
    // theme asked for overrides it, as no-color.org asks, so crossterm must not drop its colours
    ratatui::crossterm::style::force_color_output(true);
    take_terminal()?;
    let guard = Guard(());
    // keys typed while the run started (echoed on the shell's screen) are not acted on now
    while event::poll(std::time::Duration::ZERO).unwrap_or(false) {
        if event::read().is_err() {
            break;
        }
    }
    let terminal = Terminal::new(CrosstermBackend::new(io::stdout()))?;
    Ok((terminal, guard))
}

/// Whether stdout is a terminal that can draw the UI: a terminal, and not one that says it
/// draws nothing (`TERM=dumb`, as Emacs' shell and some CI consoles set).
pub fn can_draw() -> bool {
    use std::io::IsTerminal;
    io::stdout().is_terminal() && !dumb_terminal()
}

/// Whether `TERM` says the terminal draws nothing (`dumb`).
pub fn dumb_terminal() -> bool {
    std::env::var("TERM").is_ok_and(|t| t == "dumb")
}

/// Whether this process is in the background of the terminal it writes to (started with `&`,
/// or under `timeout` without `--foreground`): taking the terminal's modes would stop it
/// (SIGTTOU) until it is brought to the foreground, where no signal but a kill reaches it.
pub fn in_background() -> bool {
    // SAFETY: two queries, of the terminal's foreground process group and of this process's
    let (foreground, own) = unsafe { (libc::tcgetpgrp(libc::STDOUT_FILENO), libc::getpgrp()) };
    foreground > 0 && foreground != own
}

/// What a process in the background of its terminal is told (`in_background`).
pub const BACKGROUND: &str = "this process is in the background of its terminal (started with &, or under `timeout` without --foreground), where the terminal UI would stop it";

/// Lets the screen go, its cursor shown; where the terminal is gone (a closed window, a dropped
/// connection) silently: ratatui's own drop would print an error there.
pub fn close(mut terminal: Terminal<CrosstermBackend<Stdout>>) {
    if terminal.show_cursor().is_err() {
        std::mem::forget(terminal);
    }
}

/// Key presses, pastes and resizes, read on their own thread (reading blocks). The channel
/// closes when the terminal can no longer be read (e.g. the SSH connection dropped).
pub fn inputs() -> Receiver<Input> {
    let (tx, rx) = unbounded();
    let _ = std::thread::Builder::new()
        .name("tui-input".into())
        .spawn(move || loop {
            let input = match event::read() {
                // (raw mode sends the suspend key as a key, not as SIGTSTP)
                Ok(TermEvent::Key(k))
                    if k.code == KeyCode::Char('z') && k.modifiers == KeyModifiers::CONTROL =>
                {
                    Input::Suspend
                }
                Ok(TermEvent::Key(k)) => Input::Key(k),
                Ok(TermEvent::Paste(_)) => Input::Paste,
                Ok(TermEvent::Resize(..)) => Input::Resize,
                Ok(_) => continue,
                Err(_) => return,
            };
            if tx.send(input).is_err() {
                return;
            }
        });
    rx
}
