//! The live socket: an accept thread, and per client a writer thread (the `run` record, the
//! history, then live lines, from the client's queue in the hub) and a reader thread (control
//! requests, answered through the same queue). Nothing here can block training: the frontend
//! only publishes to the hub, and every socket write happens on a client's own thread, with a
//! time limit so a half-open client cannot hold it forever.
//!
//! A client is served once it speaks (`attach` sends `{"type":"hello"}` first) or has been
//! silent for `GREETING`; one that closes before either (a liveness probe: `runs`, finding the
//! newest live run) is sent nothing and never joins the hub.

use std::io::{BufReader, ErrorKind, Write};
use std::net::Shutdown;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};

use super::hub::{LiveHub, Next, Seat};
use super::lines::{read_line, read_rest, Read};
use super::protocol::{
    apply, is_hello, is_readonly_request, parse_request, reply, Refusal, Steering, MAX_REQUEST,
};
use super::socket::{bind_private, client_words, own_uid, peer, place, pointer_of, SocketError};
use crate::engine::control::Controller;
use crate::quit_at_once;

/// Where a socket was put, to remove it at the end.
#[derive(Clone)]
struct Place {
    path: PathBuf,
    /// The pointer file that says where it went, if it went elsewhere.
    pointer: Option<PathBuf>,
    /// The socket's inode: removed at the end only if it is still ours.
    ino: Option<u64>,
}

impl Place {
    fn remove(&self) {
        let ours = std::fs::metadata(&self.path).ok().map(|m| {
            use std::os::unix::fs::MetadataExt;
            m.ino()
        }) == self.ino;
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
        if let Some(p) = &self.pointer {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// How long a silent client waits before it is served (one that closes first is a probe).
pub const GREETING: Duration = Duration::from_millis(200);

/// The most bytes of lines a client's writer gathers before it writes them.
const WRITE_CHUNK: usize = 64 << 10;

/// How long the rest of a first line begun within `GREETING` is waited for.
const REST_OF_LINE: Duration = Duration::from_secs(30);
/// How long one write to a client may take before the client is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// At the end, how long clients get to take what is queued for them (the `end` record; a
/// client that reads is done in milliseconds, one that does not is not waited for longer).
const DRAIN: Duration = Duration::from_secs(1);

pub struct LiveServer {
    place: Place,
    /// Removes the socket if the process quits at once (a second signal).
    _quit: quit_at_once::Armed,
    hub: LiveHub,
    stop: Arc<AtomicBool>,
    /// A handle on the listening socket, to wake the accept thread at the end.
    wake: Option<UnixListener>,
    accept: Option<JoinHandle<()>>,
    active: Arc<AtomicUsize>,
    done: Receiver<()>,
}

impl LiveServer {
    /// Serves `hub` on a socket at `asked` (mode 0600; a path too long for a socket is served
    /// from `$XDG_RUNTIME_DIR` or /tmp, with a pointer file `<asked>.path` holding it).
    pub fn start(
        asked: &Path,
        hub: LiveHub,
        controller: Controller,
    ) -> Result<LiveServer, SocketError> {
        let path = place(asked);
        let pointer = (path != asked).then(|| pointer_of(asked));
        let listener = bind_private(&path)?;
        let ino = std::fs::metadata(&path).ok().map(|m| {
            use std::os::unix::fs::MetadataExt;
            m.ino()
        });
        if let Some(p) = &pointer {
            let text = format!("{}\n", path.display());
            if let Err(source) = std::fs::write(p, text) {
                let _ = std::fs::remove_file(&path);
                return Err(SocketError::Io {
                    path: p.clone(),
                    source,
                });
            }
        }
        let wake = listener.try_clone().ok();
        let stop = Arc::new(AtomicBool::new(false));
        let active = Arc::new(AtomicUsize::new(0));
        let (done_tx, done) = unbounded();
        let accept = {
            let (hub, stop, active) = (hub.clone(), stop.clone(), active.clone());
            std::thread::Builder::new()
                .name("live-accept".into())
                .spawn(move || accept_loop(listener, hub, controller, stop, active, done_tx))
                .map_err(|source| SocketError::Io {
                    path: path.clone(),
                    source,
                })?
        };
        let place = Place { path, pointer, ino };
        Ok(LiveServer {
            _quit: quit_at_once::arm({
                let place = place.clone();
                move || place.remove()
            }),
            place,
            hub,
            stop,
            wake,
            accept: Some(accept),
            active,
            done,
        })
    }

    /// Where the socket is (the fallback path where the one asked for was too long).
    pub fn path(&self) -> &Path {
        &self.place.path
    }
}

impl Drop for LiveServer {
    /// Clients get what is queued (within `DRAIN`), then the socket is closed and removed.
    fn drop(&mut self) {
        self.hub.close();
        self.stop.store(true, Ordering::SeqCst);
        match &self.wake {
            // SAFETY: shutting down a listening socket we own; it only wakes `accept`.
            Some(w) => unsafe {
                libc::shutdown(w.as_raw_fd(), libc::SHUT_RDWR);
            },
            // no second handle: a connection of our own wakes `accept`, which then sees `stop`
            None => {
                let _ = std::os::unix::net::UnixStream::connect(&self.place.path);
            }
        }
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
        let deadline = Instant::now() + DRAIN;
        while self.active.load(Ordering::SeqCst) > 0 {
            if self.done.recv_deadline(deadline).is_err() {
                break;
            }
        }
        self.place.remove();
    }
}

fn accept_loop(
    listener: UnixListener,
    hub: LiveHub,
    controller: Controller,
    stop: Arc<AtomicBool>,
    active: Arc<AtomicUsize>,
    done: Sender<()>,
) {
    loop {
        let conn = listener.accept();
        if stop.load(Ordering::SeqCst) {
            return;
        }
        match conn {
            Ok((stream, _)) => serve(stream, &hub, &controller, &active, &done),
            // out of file descriptors, say: try again later rather than spin
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Refuses a connection with one line saying why.
fn refuse(mut stream: UnixStream, why: &str) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = stream.write_all(reply(None, false, why).as_bytes());
}

fn serve(
    stream: UnixStream,
    hub: &LiveHub,
    controller: &Controller,
    active: &Arc<AtomicUsize>,
    done: &Sender<()>,
) {
    // the socket's mode keeps other users out; root is let in as it could read the run anyway
    let by = match peer(&stream) {
        Ok((pid, uid)) if uid == own_uid() || uid == 0 => client_words(pid, uid),
        _ => return refuse(stream, "this run belongs to another user"),
    };
    // its seat is taken in the order the connections came
    let seat = match hub.seat() {
        Ok(p) => p,
        Err(why) => return refuse(stream, &why),
    };
    let reader = match stream.try_clone() {
        Ok(r) => r,
        Err(e) => return refuse(stream, &format!("cannot serve this connection: {e}")),
    };
    let steering = Steering {
        controller: controller.clone(),
        by,
    };
    let (hub, active, done) = (hub.clone(), active.clone(), done.clone());
    // the greeting is waited for on the client's own thread: accept goes on meanwhile
    let _ = std::thread::Builder::new()
        .name("live-client".into())
        .spawn(move || {
            let mut r = BufReader::new(reader);
            let mut buf = Vec::new();
            let _ = r.get_ref().set_read_timeout(Some(GREETING));
            let first = read_line(&mut r, &mut buf, MAX_REQUEST);
            if matches!(first, Ok(Read::Eof)) {
                // a probe: it learned that the run is live, and is sent nothing
                return;
            }
            if r.get_ref().set_read_timeout(None).is_err() {
                return;
            }
            // a silent client (the time ran out) reads from the start, as one that spoke; one
            // whose first line came in part (over a slow forward) is waited for to its end
            let timed_out = |e: &std::io::Error| {
                matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
            };
            let first = match first {
                Err(e) if timed_out(&e) && buf.is_empty() => None,
                Err(e) if timed_out(&e) => {
                    // (not without end: one that never ends it is let go)
                    let _ = r.get_ref().set_read_timeout(Some(REST_OF_LINE));
                    let rest = read_rest(&mut r, &mut buf, MAX_REQUEST);
                    if rest.is_err() || r.get_ref().set_read_timeout(None).is_err() {
                        return;
                    }
                    Some(rest)
                }
                other => Some(other),
            };
            join(seat, stream, r, buf, first, &hub, &steering, &active, &done);
        });
}

/// Serves a client that has spoken (its first line read into `buf` as `first`) or waited.
#[allow(clippy::too_many_arguments)]
fn join(
    seat: Seat,
    stream: UnixStream,
    r: BufReader<UnixStream>,
    buf: Vec<u8>,
    first: Option<std::io::Result<Read>>,
    hub: &LiveHub,
    steering: &Steering,
    active: &Arc<AtomicUsize>,
    done: &Sender<()>,
) {
    let id = match seat.join() {
        Ok(id) => id,
        Err(why) => return refuse(stream, &why),
    };
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    active.fetch_add(1, Ordering::SeqCst);
    let (w_hub, w_active, w_done) = (hub.clone(), active.clone(), done.clone());
    let writer = std::thread::Builder::new()
        .name(format!("live-writer-{id}"))
        .spawn(move || {
            write_loop(stream, &w_hub, id);
            w_active.fetch_sub(1, Ordering::SeqCst);
            let _ = w_done.send(());
        });
    if writer.is_err() {
        hub.leave(id);
        active.fetch_sub(1, Ordering::SeqCst);
        return;
    }
    read_loop(r, buf, first, hub, steering, id);
}

/// Sends the client's queue as it fills, until the client or the run is gone.
fn write_loop(mut stream: UnixStream, hub: &LiveHub, id: u64) {
    let mut buf = Vec::new();
    loop {
        match hub.next(id, Duration::from_secs(1)) {
            Next::Lines(lines) => {
                // (written a chunk at a time: a copy of the whole history, megabytes, for each
                // connection grew the run's memory with every client)
                let mut sent = true;
                buf.clear();
                for l in &lines {
                    buf.extend_from_slice(l.as_bytes());
                    if buf.len() >= WRITE_CHUNK {
                        sent = stream.write_all(&buf).is_ok();
                        buf.clear();
                        if !sent {
                            break;
                        }
                    }
                }
                if !sent || stream.write_all(&buf).is_err() {
                    break;
                }
            }
            Next::Idle => {
                if stream.write_all(hub.alive().as_bytes()).is_err() {
                    break;
                }
            }
            Next::Gone(why) => {
                if let Some(why) = why {
                    let _ = stream
                        .write_all(reply(None, false, &format!("disconnected: {why}")).as_bytes());
                }
                break;
            }
        }
    }
    hub.leave(id);
    // wakes the reader thread too
    let _ = stream.shutdown(Shutdown::Both);
}

/// After refusing a client: what it sent besides is read and thrown away (for up to a second
/// and `MAX_REQUEST` bytes more) until the writer has sent the refusal and closed, since
/// closing a socket with unread input resets it and the refusal would be lost.
fn discard(r: &mut BufReader<UnixStream>) {
    let _ = r.get_ref().set_read_timeout(Some(Duration::from_secs(1)));
    let mut sink = [0u8; 4096];
    let mut left = MAX_REQUEST + r.buffer().len();
    while left > 0 {
        match std::io::Read::read(r, &mut sink) {
            Ok(0) | Err(_) => return,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}

/// Answers the client's requests, `first` (read into `buf`) first; input that is not a
/// request closes this client only.
fn read_loop(
    mut r: BufReader<UnixStream>,
    mut buf: Vec<u8>,
    mut first: Option<std::io::Result<Read>>,
    hub: &LiveHub,
    steering: &Steering,
    id: u64,
) {
    // set by the client's read-only request, for the rest of the connection
    let mut readonly = false;
    loop {
        let got = match first.take() {
            Some(got) => got,
            None => read_line(&mut r, &mut buf, MAX_REQUEST),
        };
        match got {
            Ok(Read::Line) if buf.iter().all(u8::is_ascii_whitespace) => {}
            Ok(Read::Line) if is_readonly_request(&buf) => readonly = true,
            Ok(Read::Line) if is_hello(&buf) => {}
            Ok(Read::Line) => match parse_request(&buf) {
                Ok(req) if readonly => hub.send_to(
                    id,
                    reply(
                        Some(req.id),
                        false,
                        "this client attached read-only: it cannot change the run (attach without --readonly to steer it)",
                    ),
                ),
                Ok(req) => {
                    let (ok, message) = apply(steering, req.control);
                    hub.send_to(id, reply(Some(req.id), ok, &message));
                }
                Err(Refusal::Refused { id: rid, message }) => {
                    hub.send_to(id, reply(Some(rid), false, &message))
                }
                Err(Refusal::Malformed(why)) => {
                    hub.send_to(
                        id,
                        reply(None, false, &format!("{why}; closing this connection")),
                    );
                    hub.close_client(id);
                    return discard(&mut r);
                }
            },
            Ok(Read::TooLong) => {
                let why = format!(
                    "a request line longer than {} KiB; closing this connection",
                    MAX_REQUEST >> 10
                );
                hub.send_to(id, reply(None, false, &why));
                hub.close_client(id);
                return discard(&mut r);
            }
            // the client has closed its side, or is gone: the writer finds out when it writes
            Ok(Read::Eof) | Err(_) => return,
        }
    }
}
