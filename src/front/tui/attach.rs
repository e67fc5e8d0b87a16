//! A run in another process as a UI source (`attach`): the records its live socket sends
//! become the `App`'s events (as a metrics file's do for `view`), the keys' controls go back
//! over the socket, and a dropped connection is said on screen; `r` connects again, on a
//! thread of its own (a run that does not answer takes up to 10 s to give up on; the keys stay
//! live meanwhile).

use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};

use super::app::{App, AppEvent, Level, Silent};
use super::source::Source;
use crate::engine::control::Control;
use crate::engine::events::Event;
use crate::engine::rundir;
use crate::observe::live::{AttachError, Incoming, LiveClient, Target};
use crate::observe::metrics::Record;

/// How long a connected run may say nothing before the screen says it is not responding (it
/// sends its `live` marker after every second of nothing else).
pub const QUIET: Duration = Duration::from_secs(5);

/// How long after a suspend a lost connection is taken for one the run let go of meanwhile.
const RESUME_GRACE: Duration = Duration::from_secs(5);

pub struct AttachSource {
    target: Target,
    readonly: bool,
    tx: Sender<(u64, Incoming)>,
    rx: Receiver<(u64, Incoming)>,
    /// Which connection the messages that count come from (older ones' are dropped).
    tag: u64,
    client: Option<LiveClient>,
    /// The run's clock: its time at the newest record, and when that came.
    clock: Option<(Duration, Instant)>,
    /// When the connection last carried anything (the run sends its `live` marker after a
    /// second of nothing else).
    heard: Instant,
    /// The run has ended (its `end` record, or its failure, came).
    over: bool,
    /// The controls sent and not yet answered, by request id: a refusal undoes what its key
    /// set in motion (a pending batch, pause or checkpoint), as on the run's own screen.
    asked: std::collections::HashMap<u64, Control>,
    /// A reconnection under way (its tag), its result, and the wake-up it sends when done.
    connecting: Option<u64>,
    /// When the screen came back from a suspend: a connection the run let go of meanwhile
    /// (this process read nothing, stopped) is taken up again by itself (`again`, said when
    /// it is).
    resumed: Option<Instant>,
    again: Option<&'static str>,
    /// The reconnection's note, said where the history it brings ends.
    reconnected: Option<String>,
    results: (Sender<Connected>, Receiver<Connected>),
    wake: (Sender<Instant>, Receiver<Instant>),
}

/// A reconnection's answer, and the tag its messages carry.
type Connected = (u64, Result<LiveClient, AttachError>);

/// Connects to `target`, read-only if asked, sending what comes to `tx` tagged `tag`.
fn open(
    target: &Target,
    readonly: bool,
    tx: Sender<(u64, Incoming)>,
    tag: u64,
) -> Result<LiveClient, AttachError> {
    let mut client = LiveClient::connect(&target.socket, &target.run, tx, tag)?;
    if readonly {
        client
            .declare_readonly()
            .map_err(|source| AttachError::Io {
                path: target.socket.clone(),
                source,
            })?;
    }
    Ok(client)
}

/// How many times (50 ms apart) a lost connection looks for its run's end record.
const QUIT_LOOKS: usize = 10;

impl AttachSource {
    /// Connects to the run at `target`; the source and the state it starts from.
    pub fn connect(target: Target, readonly: bool) -> Result<(AttachSource, App), AttachError> {
        let (tx, rx) = unbounded();
        let client = open(&target, readonly, tx.clone(), 1)?;
        let app = App::attached(client.info().clone(), readonly);
        let source = AttachSource {
            target,
            readonly,
            tx,
            rx,
            tag: 1,
            client: Some(client),
            clock: None,
            heard: Instant::now(),
            over: false,
            asked: Default::default(),
            connecting: None,
            resumed: None,
            again: None,
            reconnected: None,
            results: unbounded(),
            wake: unbounded(),
        };
        Ok((source, app))
    }

    /// A run that quit at once (a second signal; a third Ctrl-C in its UI) ends its metrics file
    /// with its end record, not its clients' stream: that record, where its file has it (the
    /// socket may go a moment before it is written), so that the run is shown ended, not lost.
    fn ended_on_record(&mut self, app: &mut App) {
        let metrics = self.target.run.join(crate::engine::rundir::METRICS);
        for _ in 0..QUIT_LOOKS {
            let end = crate::engine::rundir::end_record(&metrics)
                .and_then(|l| crate::observe::metrics::record_line(&l, app.info.ranks()).ok())
                .flatten();
            if let Some(rec) = end {
                return self.on_record(app, rec);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn on_record(&mut self, app: &mut App, rec: Record) {
        let t = match &rec {
            Record::Step { row, .. } => row.at,
            Record::Event { t, .. } | Record::Warning { t, .. } | Record::Telemetry { t, .. } => *t,
        };
        let end = matches!(
            rec,
            Record::Event {
                event: Event::Finished { .. },
                ..
            }
        );
        app.apply_record(rec);
        self.clock = Some((t, Instant::now()));
        self.over |= end || app.state.ended();
    }
}

impl Source for AttachSource {
    type Event = (u64, Incoming);

    fn events(&self) -> Receiver<(u64, Incoming)> {
        self.rx.clone()
    }

    fn on_event(&mut self, app: &mut App, ev: Option<(u64, Incoming)>) -> bool {
        let Some((tag, msg)) = ev else {
            return false;
        };
        if tag != self.tag {
            return false;
        }
        self.heard = Instant::now();
        match msg {
            Incoming::Record(rec) => self.on_record(app, rec),
            Incoming::Live { t } => {
                self.clock = Some((t, Instant::now()));
                if let Some(note) = self.reconnected.take() {
                    app.apply(AppEvent::Notice(Level::Info, note));
                }
            }
            Incoming::Reply { id, ok: true, .. } => {
                if let Some(id) = id {
                    self.asked.remove(&id);
                }
                return false;
            }
            Incoming::Reply {
                id,
                ok: false,
                message,
                ..
            } => match id.and_then(|id| self.asked.remove(&id)) {
                Some(c) => app.apply(AppEvent::Refused(c, format!("the run says: {message}"))),
                None => {
                    app.apply(AppEvent::Notice(
                        Level::Warn,
                        format!("the run says: {message}"),
                    ));
                    app.apply(AppEvent::Flash(message));
                }
            },
            Incoming::Closed(why) => {
                self.client = None;
                if !self.over {
                    self.ended_on_record(app);
                }
                if self.over {
                    app.apply(AppEvent::Notice(
                        Level::Info,
                        "the run has ended and closed the connection".into(),
                    ));
                } else if self.resumed.is_some_and(|t| t.elapsed() < RESUME_GRACE) {
                    self.resumed = None;
                    app.disconnected = Some(why);
                    self.reconnect(app);
                    self.again = Some(" (the run let go of this screen while it was suspended: stopped, it read nothing)");
                } else {
                    app.apply(AppEvent::Notice(
                        Level::Error,
                        format!("connection lost: {why}; r reconnects"),
                    ));
                    // (the answer to an earlier key is of a run this screen no longer reaches)
                    app.flash = Some(format!("connection lost: {why}"));
                    app.disconnected = Some(why);
                }
            }
        }
        true
    }

    /// Wakes the loop when a reconnection has its answer.
    fn timer(&self) -> Receiver<Instant> {
        self.wake.1.clone()
    }

    fn on_timer(&mut self, app: &mut App) -> bool {
        let Ok((tag, connected)) = self.results.1.try_recv() else {
            return false;
        };
        self.connecting = None;
        match connected {
            Ok(client) => {
                let mut fresh = App::attached(client.info().clone(), self.readonly);
                (fresh.view, fresh.window, fresh.focus) = (app.view, app.window, app.focus);
                *app = fresh;
                // (said once the run's history is in, at the run's time: newest, not at 00:00
                // below it)
                self.reconnected = Some(format!(
                    "reconnected to {}{}",
                    self.target.socket.display(),
                    self.again.take().unwrap_or_default()
                ));
                self.tag = tag;
                self.client = Some(client);
                self.asked.clear();
                self.clock = None;
                self.heard = Instant::now();
                self.over = false;
            }
            Err(e) => {
                self.again = None;
                app.apply(AppEvent::Notice(
                    Level::Error,
                    format!("cannot reconnect: {e}"),
                ));
                app.apply(AppEvent::Flash("cannot reconnect: see the events".into()));
            }
        }
        true
    }

    fn on_frame(&mut self, app: &mut App) -> bool {
        let connected = !self.over && self.client.is_some();
        // (a run's process that says nothing for a while: stopped, or its machine stalled)
        let quiet = connected && self.heard.elapsed() >= QUIET;
        let suspended = || rundir::suspended(&self.target.run);
        let silent = match (app.silent, quiet) {
            // (its process here suspended: said as that, with how to wake it, once)
            (None | Some(Silent::NotResponding), true) => match suspended() {
                Some(pid) => {
                    app.apply(AppEvent::Notice(Level::Warn, rundir::wake_hint(pid)));
                    Some(Silent::Suspended)
                }
                None => Some(Silent::NotResponding),
            },
            (Some(Silent::NotResponding | Silent::Suspended), false) => None,
            (s, _) => s,
        };
        let changed = silent != app.silent;
        app.silent = silent;
        match self.clock {
            // (the clock of a run not heard from stands still)
            Some((t, at)) if connected && !quiet => {
                app.apply(AppEvent::Tick(t + at.elapsed()));
                true
            }
            _ => changed,
        }
    }

    fn control(&mut self, c: Control) -> Result<(), String> {
        let client = self
            .client
            .as_mut()
            .ok_or("not connected to the run: r reconnects")?;
        let id = (client.send(c)).map_err(|e| format!("could not reach the run: {e}"))?;
        self.asked.insert(id, c);
        Ok(())
    }

    fn reconnect(&mut self, app: &mut App) -> bool {
        if self.connecting.is_some() {
            app.apply(AppEvent::Flash("connecting already: wait for it".into()));
            return true;
        }
        let tag = self.tag + 1;
        self.connecting = Some(tag);
        let (target, readonly, tx) = (self.target.clone(), self.readonly, self.tx.clone());
        let (results, wake) = (self.results.0.clone(), self.wake.0.clone());
        let started = std::thread::Builder::new()
            .name("reconnect".into())
            .spawn(move || {
                let _ = results.send((tag, open(&target, readonly, tx, tag)));
                let _ = wake.send(Instant::now());
            });
        if let Err(e) = started {
            self.connecting = None;
            app.apply(AppEvent::Flash(format!("cannot reconnect: {e}")));
            return true;
        }
        app.apply(AppEvent::Flash(format!(
            "connecting to {}...",
            self.target.socket.display()
        )));
        true
    }

    fn resumed(&mut self, _: &mut App) {
        self.resumed = Some(Instant::now());
        // (silent while stopped: not the run's silence)
        self.heard = Instant::now();
    }

    fn on_signal(&mut self, _: &mut App) -> bool {
        // the run is another process's: a signal here only closes this screen
        true
    }

    fn settle(&mut self, _: &mut App) -> bool {
        false
    }

    fn ended(&self) -> bool {
        self.over
    }

    fn outlives_screen(&self) -> bool {
        false
    }
}
