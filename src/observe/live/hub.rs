//! The live state a run serves on its socket: the `run` record, a bounded history, and the
//! connected clients, each with its own ordered queue. The frontend publishes (never blocking:
//! a short lock, no I/O); each client's writer thread takes its queue's lines and does the
//! socket I/O outside the lock.
//!
//! A client that lags (its queue is long) loses step and telemetry lines, never the lifecycle
//! lines (epochs, events, warnings, the end) or its replies; one whose backlog of those passes
//! `MAX_BACKLOG` is disconnected, so a stuck client costs bounded memory.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::history::{merged, Capped, Thinned};
use super::protocol;
use crate::observe::metrics::Line;

/// Step lines kept for a client that connects later.
pub const HISTORY_STEPS: usize = 2000;
/// Telemetry lines kept likewise.
pub const HISTORY_TELEMETRY: usize = 2000;
/// Epoch lines kept (thinned as the steps are, so a run of many short epochs keeps its whole
/// accuracy curve); `--val-every`'s validation lines alike, apart.
pub const HISTORY_EPOCHS: usize = 5000;
/// Event, warning and end lines kept (oldest dropped beyond).
pub const HISTORY_EVENTS: usize = 10_000;
/// Bytes kept of each thinned history (a step line of a 1024-rank run is ~200 KiB).
const HISTORY_BYTES: usize = 32 << 20;
/// Live step and telemetry lines queued for a client beyond which new ones are dropped.
pub const LAG: usize = 64;
/// Lifecycle lines and replies queued for a client beyond which it is disconnected.
pub const MAX_BACKLOG: usize = 20_000;
/// Clients served at once.
pub const MAX_CLIENTS: usize = 16;

/// What a published line is: which history keeps it and whether a lagging client may lose it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Step,
    Telemetry,
    /// The lifecycle lines, always delivered: epochs and validations within them (each thinned
    /// in the history) and events, warnings and the end (kept in the history up to a cap).
    Epoch,
    Validation,
    Event,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// Sent on connect: not counted against the lag or the backlog.
    History,
    Lossy,
    Lossless,
}

#[derive(Debug, Default)]
struct Client {
    queue: VecDeque<(Line, Class)>,
    history: usize,
    lossless: usize,
    /// Lines this client lost for lagging.
    dropped: u64,
    /// Send what is queued, then close (after a refused request).
    closing: bool,
    /// Closed now, with the reason.
    gone: Option<String>,
}

impl Client {
    fn push(&mut self, line: Line, class: Class) {
        if self.gone.is_some() || self.closing {
            return;
        }
        match class {
            Class::Lossy if self.queue.len().saturating_sub(self.history) >= LAG => {
                self.dropped += 1;
                return;
            }
            Class::Lossless if self.lossless >= MAX_BACKLOG => {
                self.queue.clear();
                self.gone = Some(format!(
                    "more than {MAX_BACKLOG} events queued: the client reads too slowly"
                ));
                return;
            }
            Class::Lossless => self.lossless += 1,
            Class::History => self.history += 1,
            Class::Lossy => {}
        }
        self.queue.push_back((line, class));
    }

    fn pop_all(&mut self) -> Vec<Line> {
        self.history = 0;
        self.lossless = 0;
        self.queue.drain(..).map(|(l, _)| l).collect()
    }
}

struct State {
    run: Option<Line>,
    steps: Thinned,
    telemetry: Thinned,
    epochs: Thinned,
    validations: Thinned,
    events: Capped,
    seq: u64,
    clients: HashMap<u64, Client>,
    /// Connections accepted whose greeting is awaited: their seats among the clients.
    seated: usize,
    next_id: u64,
    closed: bool,
}

/// A connection's seat among the clients, taken when it is accepted (the first to connect
/// are the first served, however their greetings race) and given back unless it joins.
pub struct Seat {
    hub: LiveHub,
    held: bool,
}

impl Seat {
    /// Registers the client: its queue starts with the `run` record, the history and a `live`
    /// line (the history ends there; `t` is the run's clock now). `Err` says why not.
    pub fn join(mut self) -> Result<u64, String> {
        let hub = self.hub.clone();
        let mut s = hub.lock();
        s.seated -= 1;
        self.held = false;
        hub.join_locked(&mut s)
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        if self.held {
            self.hub.lock().seated -= 1;
        }
    }
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    started: Instant,
}

/// What a client's writer gets from `LiveHub::next`.
#[derive(Debug)]
pub enum Next {
    Lines(Vec<Line>),
    /// Nothing within the wait.
    Idle,
    /// Done: send nothing more (the reason, where there is one to give).
    Gone(Option<String>),
}

/// The run's live state; clones share it.
#[derive(Clone)]
pub struct LiveHub(Arc<Shared>);

impl LiveHub {
    /// The `live` marker again, with the run's clock now: what a client is sent after a
    /// second with nothing else, so that it can tell a run that says nothing (its process
    /// stopped) from one between records.
    pub fn alive(&self) -> Line {
        protocol::live(self.0.started.elapsed().as_secs_f64(), None)
    }

    /// A hub for a run that started at `started` (the `live` marker's clock).
    pub fn new(started: Instant) -> LiveHub {
        LiveHub(Arc::new(Shared {
            state: Mutex::new(State {
                run: None,
                steps: Thinned::new(HISTORY_STEPS, HISTORY_BYTES),
                telemetry: Thinned::new(HISTORY_TELEMETRY, HISTORY_BYTES),
                epochs: Thinned::new(HISTORY_EPOCHS, HISTORY_BYTES),
                validations: Thinned::new(HISTORY_EPOCHS, HISTORY_BYTES),
                events: Capped::new(HISTORY_EVENTS),
                seq: 0,
                clients: HashMap::new(),
                seated: 0,
                next_id: 1,
                closed: false,
            }),
            wake: Condvar::new(),
            started,
        }))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // a panicking writer thread cannot leave the state half-changed: take it as it is
        self.0.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The `run` record every client gets first.
    pub fn set_run(&self, line: Line) {
        self.lock().run = Some(line);
    }

    /// Whether a step due for the hub is worth building: a client is connected, or the
    /// history keeps it. A `false` answer counts the step as skipped.
    pub fn step_slot(&self) -> bool {
        let mut s = self.lock();
        if !s.clients.is_empty() || s.steps.keeps_next() {
            return true;
        }
        s.steps.skip();
        false
    }

    /// How many clients are connected.
    pub fn clients(&self) -> usize {
        self.lock().clients.len()
    }

    /// One record to the history and every client.
    pub fn publish(&self, kind: Kind, line: Line) {
        let mut s = self.lock();
        s.seq += 1;
        let seq = s.seq;
        let class = match kind {
            Kind::Step => {
                s.steps.offer(seq, &line);
                Class::Lossy
            }
            Kind::Telemetry => {
                s.telemetry.offer(seq, &line);
                Class::Lossy
            }
            Kind::Epoch => {
                s.epochs.offer(seq, &line);
                Class::Lossless
            }
            Kind::Validation => {
                s.validations.offer(seq, &line);
                Class::Lossless
            }
            Kind::Event => {
                s.events.push(seq, &line);
                Class::Lossless
            }
        };
        if s.clients.is_empty() {
            return;
        }
        for c in s.clients.values_mut() {
            c.push(line.clone(), class);
        }
        drop(s);
        self.0.wake.notify_all();
    }

    /// A seat for a connection just accepted, among the `MAX_CLIENTS`; `Err` says why not.
    pub fn seat(&self) -> Result<Seat, String> {
        let mut s = self.lock();
        if s.closed {
            return Err("the run has ended".into());
        }
        if s.clients.len() + s.seated >= MAX_CLIENTS {
            return Err(format!(
                "{MAX_CLIENTS} clients are attached already; detach one first"
            ));
        }
        s.seated += 1;
        Ok(Seat {
            hub: self.clone(),
            held: true,
        })
    }

    /// A seat taken and joined at once (see [`Seat::join`]).
    pub fn join(&self) -> Result<u64, String> {
        self.seat()?.join()
    }

    fn join_locked(&self, s: &mut State) -> Result<u64, String> {
        if s.closed {
            return Err("the run has ended".into());
        }
        let Some(run) = s.run.clone() else {
            return Err("the run has not started yet; try again".into());
        };
        let history = merged(
            s.steps
                .iter()
                .chain(s.telemetry.iter())
                .chain(s.epochs.iter())
                .chain(s.validations.iter())
                .chain(s.events.iter()),
        );
        let mut c = Client::default();
        c.push(run, Class::History);
        for l in history {
            c.push(l, Class::History);
        }
        let t = self.0.started.elapsed().as_secs_f64();
        let clients = s.clients.len() + 1;
        c.push(protocol::live(t, Some(clients)), Class::History);
        let id = s.next_id;
        s.next_id += 1;
        s.clients.insert(id, c);
        Ok(id)
    }

    /// A line for one client only (a reply): never dropped.
    pub fn send_to(&self, id: u64, line: Line) {
        if let Some(c) = self.lock().clients.get_mut(&id) {
            c.push(line, Class::Lossless);
        }
        self.0.wake.notify_all();
    }

    /// Sends what is queued for `id`, then closes it.
    pub fn close_client(&self, id: u64) {
        if let Some(c) = self.lock().clients.get_mut(&id) {
            c.closing = true;
        }
        self.0.wake.notify_all();
    }

    /// The client is gone: forget it.
    pub fn leave(&self, id: u64) {
        self.lock().clients.remove(&id);
        self.0.wake.notify_all();
    }

    /// The lines queued for `id`, waiting up to `wait` for some.
    pub fn next(&self, id: u64, wait: Duration) -> Next {
        let mut s = self.lock();
        let deadline = Instant::now() + wait;
        loop {
            let closed = s.closed;
            let Some(c) = s.clients.get_mut(&id) else {
                return Next::Gone(None);
            };
            if let Some(why) = &c.gone {
                return Next::Gone(Some(why.clone()));
            }
            if !c.queue.is_empty() {
                return Next::Lines(c.pop_all());
            }
            if closed || c.closing {
                return Next::Gone(None);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Next::Idle;
            }
            s = match self.0.wake.wait_timeout(s, left) {
                Ok((s, _)) => s,
                Err(e) => e.into_inner().0,
            };
        }
    }

    /// Lines a client lost for lagging so far.
    pub fn dropped(&self, id: u64) -> u64 {
        self.lock().clients.get(&id).map_or(0, |c| c.dropped)
    }

    /// The run is over: clients get what is queued, then are closed; nobody new joins.
    pub fn close(&self) {
        self.lock().closed = true;
        self.0.wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(kind: &str, i: u64) -> Line {
        Line::new(&json!({ "type": kind, "i": i }))
    }

    fn texts(n: Next) -> Vec<String> {
        match n {
            Next::Lines(v) => v.iter().map(|l| l.as_str().trim().to_string()).collect(),
            other => panic!("{other:?}"),
        }
    }

    fn hub() -> LiveHub {
        let h = LiveHub::new(Instant::now());
        h.set_run(line("run", 0));
        h
    }

    #[test]
    fn a_client_gets_the_run_the_history_in_order_a_live_marker_then_live_lines() {
        let h = hub();
        h.publish(Kind::Step, line("step", 1));
        h.publish(Kind::Epoch, line("epoch", 2));
        h.publish(Kind::Telemetry, line("telemetry", 3));
        let id = h.join().unwrap();
        h.publish(Kind::Step, line("step", 4));
        let got = texts(h.next(id, Duration::ZERO));
        let types: Vec<String> = got
            .iter()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["type"].to_string())
            .map(|t| t.trim_matches('"').to_string())
            .collect();
        assert_eq!(
            types,
            ["run", "step", "epoch", "telemetry", "live", "step"],
            "{got:?}"
        );
        assert!(matches!(h.next(id, Duration::ZERO), Next::Idle));
        h.close();
        assert!(matches!(h.next(id, Duration::ZERO), Next::Gone(None)));
    }

    #[test]
    fn a_client_that_reads_nothing_loses_steps_not_events_and_is_cut_off_past_the_backlog() {
        let h = hub();
        let id = h.join().unwrap();
        // publishing never waits for the client
        for i in 0..10_000 {
            h.publish(Kind::Step, line("step", i));
            h.publish(Kind::Telemetry, line("telemetry", i));
        }
        for i in 0..100 {
            h.publish(Kind::Event, line("event", i));
        }
        assert!(h.dropped(id) >= 19_000, "{}", h.dropped(id));
        let got = texts(h.next(id, Duration::ZERO));
        assert_eq!(got.iter().filter(|l| l.contains("\"event\"")).count(), 100);
        assert!(got.len() < 100 + LAG + 10, "{}", got.len());
        // a backlog of events past the cap disconnects it
        for i in 0..=MAX_BACKLOG as u64 {
            h.publish(Kind::Event, line("event", i));
        }
        assert!(matches!(h.next(id, Duration::ZERO), Next::Gone(Some(_))));
        // the others are not affected
        let other = h.join().unwrap();
        assert!(!texts(h.next(other, Duration::ZERO)).is_empty());
    }

    #[test]
    fn replies_go_to_one_client_and_closing_sends_them_first() {
        let h = hub();
        let (a, b) = (h.join().unwrap(), h.join().unwrap());
        let _ = (h.next(a, Duration::ZERO), h.next(b, Duration::ZERO));
        h.send_to(a, line("reply", 1));
        h.close_client(a);
        assert_eq!(texts(h.next(a, Duration::ZERO)).len(), 1);
        assert!(matches!(h.next(a, Duration::ZERO), Next::Gone(None)));
        assert!(matches!(h.next(b, Duration::ZERO), Next::Idle));
        h.leave(a);
        assert_eq!(h.clients(), 1);
    }

    #[test]
    fn without_clients_only_what_the_history_keeps_is_built() {
        let h = hub();
        let mut built = 0;
        for i in 0..100_000 {
            if h.step_slot() {
                built += 1;
                h.publish(Kind::Step, line("step", i));
            }
        }
        assert!(built < 10_000, "{built} of 100000 built");
        let id = h.join().unwrap();
        let n = texts(h.next(id, Duration::ZERO)).len();
        assert!(n <= HISTORY_STEPS + 2, "{n}");
    }

    #[test]
    fn seats_go_to_connections_in_the_order_they_came() {
        let h = hub();
        let seats: Vec<Seat> = (0..MAX_CLIENTS).map(|_| h.seat().unwrap()).collect();
        // the 17th to connect is refused, though none of the first has spoken yet
        assert!(h.seat().err().unwrap().contains("detach one"));
        let mut seats = seats.into_iter();
        // one that leaves without joining (a probe) gives its seat back
        drop(seats.next());
        let late = h.seat().unwrap();
        for s in seats.chain([late]) {
            s.join().unwrap();
        }
        assert!(h.join().unwrap_err().contains("detach one"));
    }

    #[test]
    fn clients_are_limited_and_nobody_joins_an_ended_run() {
        let h = hub();
        for _ in 0..MAX_CLIENTS {
            h.join().unwrap();
        }
        assert!(h.join().unwrap_err().contains("detach one"));
        h.close();
        assert!(h.join().unwrap_err().contains("ended"));
    }
}
