//! The other end (`attach`): connects, reads the `run` record, then a thread turns every line
//! into an `Incoming` message on a channel; requests go out on the same connection.

use std::io::{self, BufReader, Write};
use std::net::Shutdown;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crossbeam_channel::Sender;
use serde_json::Value;

use super::lines::{read_line, Read};
use super::protocol::request;
use crate::engine::control::Control;
use crate::engine::RunInfo;
use crate::observe::metrics::reader::MAX_LINE;
use crate::observe::metrics::{record, run_line, Record};

/// How long the server may take to send the `run` record.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("{0}: no such file or directory; give a run directory (runs/NAME/TIMESTAMP) or its live.sock")]
    NotFound(PathBuf),
    #[error("{socket}: the run is not live (nothing listens on its socket: it has ended or was killed){see}")]
    NotLive { socket: PathBuf, see: String },
    #[error("{path}: permission denied: {why}")]
    Denied { path: PathBuf, why: String },
    #[error("{0} is neither a run directory nor a live socket; give a run directory (runs/NAME/TIMESTAMP) or its live.sock")]
    NotSocket(PathBuf),
    #[error("{0}: a metrics file, not a live socket; see it with `mgtop-train view {0}`")]
    MetricsFile(PathBuf),
    #[error("no live run under {dir}{ended}; start one (mgtop-train --headless ...) or give its run directory")]
    NoLiveRun { dir: PathBuf, ended: String },
    #[error("{run}: its run is starting (pid {pid}): it can be attached once its model is built and its devices are open; try again in a moment")]
    Starting { run: PathBuf, pid: u32 },
    #[error("{path}: the run refused the connection: {why}")]
    Refused { path: PathBuf, why: String },
    #[error("{path}: not an mgtop-train live socket ({why})")]
    Protocol { path: PathBuf, why: String },
    #[error("{path}: the run took the connection but said nothing within {secs} s: its process is stopped (kill -STOP, a debugger) or hung{see}")]
    Silent {
        path: PathBuf,
        see: String,
        secs: u64,
    },
    #[error("{}: {}; `mgtop-train view {}` shows what it recorded", run.display(), crate::engine::rundir::wake_hint(*pid), run.display())]
    Suspended { run: PathBuf, pid: u32 },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

/// A message from the run.
#[derive(Clone, Debug, PartialEq)]
pub enum Incoming {
    Record(Record),
    /// The history has been sent; the run's clock read `t` then.
    Live {
        t: Duration,
    },
    Reply {
        id: Option<u64>,
        ok: bool,
        message: String,
    },
    /// The connection ended, and why.
    Closed(String),
}

/// An attached connection.
pub struct LiveClient {
    stream: UnixStream,
    info: RunInfo,
    next_id: u64,
}

/// `path` could not be read: the run is another user's (said who), or its own user took the
/// permissions away (said how to give them back).
pub fn denied(path: &Path) -> AttachError {
    use std::os::unix::fs::MetadataExt;
    let own = super::socket::own_uid();
    let mine = std::fs::symlink_metadata(path).is_ok_and(|m| m.uid() == own);
    let why = match mine {
        true => format!(
            "it is this user's, but its permissions keep even its owner out: give them back (chmod u+rwx on the run directory, chmod u+rw on its {})",
            crate::engine::rundir::SOCKET
        ),
        false => format!(
            "the run belongs to {}; attach as that user (a live socket is owner-only)",
            owner(path)
        ),
    };
    AttachError::Denied {
        path: path.to_path_buf(),
        why,
    }
}

/// Who owns `path` (or the nearest directory above it this user can see), in words: a user
/// name where /etc/passwd has one.
pub fn owner(path: &Path) -> String {
    let uid = path
        .ancestors()
        .skip(1)
        .map(|p| std::fs::metadata(p).map(|m| m.uid()))
        .find_map(Result::ok);
    let uid = match std::fs::metadata(path).map(|m| m.uid()) {
        Ok(u) => u,
        Err(_) => match uid {
            // the nearest visible directory is ours: the run's is someone else's
            Some(u) if u != super::socket::own_uid() => u,
            _ => return "another user".into(),
        },
    };
    let name = std::fs::read_to_string("/etc/passwd").ok().and_then(|t| {
        t.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.get(2) == Some(&uid.to_string().as_str())).then(|| f[0].to_string())
        })
    });
    match name {
        Some(n) => format!("user {n} (uid {uid})"),
        None => format!("uid {uid}"),
    }
}

/// A run at `socket` that took the connection and said nothing within `waited`: its process
/// suspended here (said with how to wake it), or stopped otherwise or hung.
fn silent(socket: &Path, run: &Path, waited: std::time::Duration) -> AttachError {
    match crate::engine::rundir::suspended(run) {
        Some(pid) => AttachError::Suspended {
            run: run.to_path_buf(),
            pid,
        },
        None => AttachError::Silent {
            path: socket.to_path_buf(),
            // (a socket outside a run directory: a forwarded one, another program's)
            see: match crate::observe::metrics::MetricsReader::open(run) {
                Ok(_) => format!(
                    "; `mgtop-train view {}` shows what it recorded",
                    run.display()
                ),
                Err(_) => String::new(),
            },
            secs: waited.as_secs(),
        },
    }
}

/// A run whose `socket` nothing listens on: `view` of its directory `run` is named where that
/// holds a metrics file it can read.
pub fn not_live(socket: &Path, run: &Path) -> AttachError {
    let shown = match run.as_os_str().is_empty() {
        true => Path::new("."),
        false => run,
    };
    let see = match crate::observe::metrics::MetricsReader::open(shown) {
        Ok(_) => format!("; see it with `mgtop-train view {}`", shown.display()),
        Err(_) => format!(
            "; {} holds no metrics file `view` can read",
            shown.display()
        ),
    };
    AttachError::NotLive {
        socket: socket.to_path_buf(),
        see,
    }
}

/// Opens `socket`, mapping each failure to what the user can do about it.
pub fn open(socket: &Path, run: &Path) -> Result<UnixStream, AttachError> {
    use std::os::unix::fs::FileTypeExt;
    // (a file put in the socket's place: not a run that ended)
    if std::fs::metadata(socket).is_ok_and(|m| !m.file_type().is_socket()) {
        return Err(AttachError::NotSocket(socket.to_path_buf()));
    }
    // (a run suspended here would keep the connection waiting for nothing)
    if let Some(pid) = crate::engine::rundir::suspended(run) {
        return Err(AttachError::Suspended {
            run: run.to_path_buf(),
            pid,
        });
    }
    super::socket::connect(socket, super::socket::KNOCK).map_err(|e| match e.kind() {
        // (gone since it was found, or named by a `live.sock.path` its run left: the run ended)
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => not_live(socket, run),
        // (its queue full: a process holds the socket and takes no one)
        io::ErrorKind::WouldBlock => silent(socket, run, super::socket::KNOCK),
        io::ErrorKind::PermissionDenied => denied(socket),
        _ => AttachError::Io {
            path: socket.to_path_buf(),
            source: e,
        },
    })
}

impl LiveClient {
    /// Connects to the run on `socket` (in run directory `run`, for the messages), reads its
    /// `run` record, and sends everything after it to `tx`, tagged with `tag`.
    pub fn connect(
        socket: &Path,
        run: &Path,
        tx: Sender<(u64, Incoming)>,
        tag: u64,
    ) -> Result<LiveClient, AttachError> {
        let mut stream = open(socket, run)?;
        let io_err = |source| AttachError::Io {
            path: socket.to_path_buf(),
            source,
        };
        // served at once rather than after the server's wait for a silent client (a run that
        // refuses the connection may have said why and closed it before this is written:
        // its words are read first)
        let hello = stream.write_all(super::protocol::HELLO.as_bytes());
        let protocol = |why: String| AttachError::Protocol {
            path: socket.to_path_buf(),
            why,
        };
        stream
            .set_read_timeout(Some(HELLO_TIMEOUT))
            .map_err(io_err)?;
        let mut r = BufReader::new(stream.try_clone().map_err(io_err)?);
        let mut buf = Vec::new();
        match read_line(&mut r, &mut buf, MAX_LINE) {
            Ok(Read::Line) => {}
            Ok(Read::Eof) if hello.is_err() => return Err(io_err(hello.unwrap_err())),
            Ok(Read::Eof) => return Err(protocol("it closed without a word".into())),
            Ok(Read::TooLong) => return Err(protocol("its first line is too long".into())),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                // (something listens, so a run's process holds the socket: one not answering)
                return Err(silent(socket, run, HELLO_TIMEOUT));
            }
            Err(e) => return Err(io_err(hello.err().unwrap_or(e))),
        }
        // a refusal (too many clients, the run has ended) comes as a reply instead
        if let Ok(Some(Incoming::Reply { message, .. })) = incoming(&buf, 0) {
            return Err(AttachError::Refused {
                path: socket.to_path_buf(),
                why: Some(message)
                    .filter(|m| !m.is_empty())
                    .unwrap_or_else(|| "no reason given".into()),
            });
        }
        hello.map_err(io_err)?;
        let info = run_line(&buf).map_err(protocol)?;
        stream.set_read_timeout(None).map_err(io_err)?;
        let ranks = info.ranks();
        std::thread::Builder::new()
            .name("attach-reader".into())
            .spawn(move || listen(r, ranks, &tx, tag))
            .map_err(io_err)?;
        Ok(LiveClient {
            stream,
            info,
            next_id: 1,
        })
    }

    /// The run as its `run` record describes it.
    pub fn info(&self) -> &RunInfo {
        &self.info
    }

    /// Makes this connection read-only on the run's side: whatever it sends after, the run
    /// refuses to change.
    pub fn declare_readonly(&mut self) -> io::Result<()> {
        self.stream.write_all(super::protocol::READONLY.as_bytes())
    }

    /// Sends a control request; its id (the reply names it).
    pub fn send(&mut self, c: Control) -> io::Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        self.stream.write_all(request(id, c).as_bytes())?;
        Ok(id)
    }
}

impl Drop for LiveClient {
    fn drop(&mut self) {
        // ends the reader thread too
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

/// Whether `text` is JSON that ends before its value does (a record cut short).
fn cut_short(text: &[u8]) -> bool {
    serde_json::from_slice::<Value>(text).is_err_and(|e| e.is_eof())
}

/// One line from the server as a message.
pub fn incoming(text: &[u8], ranks: usize) -> Result<Option<Incoming>, String> {
    if text.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let v: Value = serde_json::from_slice(text).map_err(|e| format!("not JSON ({e})"))?;
    Ok(match v["type"].as_str() {
        Some("live") => Some(Incoming::Live {
            t: v["t"]
                .as_f64()
                .and_then(|t| Duration::try_from_secs_f64(t).ok())
                .unwrap_or_default(),
        }),
        Some("reply") => Some(Incoming::Reply {
            id: v["id"].as_u64(),
            ok: v["ok"].as_bool().unwrap_or(false),
            message: v["message"].as_str().unwrap_or("").to_string(),
        }),
        _ => record(&v, ranks)?.map(Incoming::Record),
    })
}

fn listen(mut r: BufReader<UnixStream>, ranks: usize, tx: &Sender<(u64, Incoming)>, tag: u64) {
    let mut buf = Vec::new();
    let why = loop {
        match read_line(&mut r, &mut buf, MAX_LINE) {
            Ok(Read::Line) => match incoming(&buf, ranks) {
                Ok(Some(m)) => {
                    if tx.send((tag, m)).is_err() {
                        return;
                    }
                }
                Ok(None) => {}
                // (a record cut short where the connection ended: the run let go of this
                // client, which read nothing for a while, or was killed)
                Err(_) if cut_short(&buf) && matches!(read_line(&mut r, &mut buf, 1), Ok(Read::Eof)) => {
                    break "the connection ended in the middle of a record (the run lets go of a client that reads nothing for 10 s, or it was killed)".into()
                }
                Err(e) => break format!("the run sent a damaged record: {e}"),
            },
            Ok(Read::TooLong) => break format!("the run sent a line over {} MiB", MAX_LINE >> 20),
            // (a run that ends says so first: this one was killed, or let go of this client)
            Ok(Read::Eof) => {
                break "the connection ended without the run saying it ended (killed, or it let go of this client)".into()
            }
            Err(e) => break format!("the connection broke: {e}"),
        }
    };
    let _ = tx.send((tag, Incoming::Closed(why)));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run directory of this user's that it cannot read is said as its permissions, not as
    /// another user's run.
    #[test]
    fn this_user_s_own_run_kept_out_by_its_permissions_is_said_so() {
        let dir = tempfile::tempdir().unwrap();
        let e = denied(dir.path()).to_string();
        assert!(
            e.contains("it is this user's, but its permissions keep even its owner out"),
            "{e}"
        );
        assert!(!e.contains("attach as that user"), "{e}");
    }

    /// A server that answers the hello with `answer`.
    fn answering(answer: &'static str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("live.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut hello = [0u8; 16];
            let _ = std::io::Read::read(&mut s, &mut hello);
            let _ = s.write_all(answer.as_bytes());
        });
        (dir, path)
    }

    #[test]
    fn a_record_cut_short_by_the_connection_s_end_is_said_as_such() {
        let said = |sent: &[u8]| {
            let (mut w, r) = UnixStream::pair().unwrap();
            w.write_all(sent).unwrap();
            drop(w);
            let (tx, rx) = crossbeam_channel::unbounded();
            listen(BufReader::new(r), 1, &tx, 0);
            match rx.try_iter().last() {
                Some((_, Incoming::Closed(why))) => why,
                other => panic!("{other:?}"),
            }
        };
        let cut = said(b"{\"type\":\"live\",\"t\":1}\n{\"type\":\"li");
        assert!(cut.contains("ended in the middle of a record"), "{cut}");
        let damaged = said(b"{\"type\":\"live\",\"t\":1}\nnot json\n{\"type\":\"live\",\"t\":2}\n");
        assert!(
            damaged.contains("the run sent a damaged record"),
            "{damaged}"
        );
    }

    #[test]
    fn a_refusal_in_place_of_the_run_record_says_why() {
        let (dir, path) = answering(
            "{\"type\":\"reply\",\"id\":null,\"ok\":false,\"message\":\"16 clients are attached already; detach one first\"}\n",
        );
        let (tx, _rx) = crossbeam_channel::unbounded();
        match LiveClient::connect(&path, dir.path(), tx, 0) {
            Err(AttachError::Refused { why, .. }) => {
                assert_eq!(why, "16 clients are attached already; detach one first")
            }
            other => panic!("{:?}", other.err()),
        }
        // a refusal without words says so
        let (dir, path) = answering("{\"type\":\"reply\",\"ok\":false}\n");
        let (tx, _rx) = crossbeam_channel::unbounded();
        match LiveClient::connect(&path, dir.path(), tx, 0) {
            Err(AttachError::Refused { why, .. }) => assert_eq!(why, "no reason given"),
            other => panic!("{:?}", other.err()),
        }
    }
}
