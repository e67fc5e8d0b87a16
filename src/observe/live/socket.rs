//! The socket file: where it goes (a path too long for `sun_path` falls back to
//! `$XDG_RUNTIME_DIR` or /tmp, with a pointer file where it was asked for), created owner-only
//! without a window in which another user could connect, a stale one replaced, a live one
//! refused, and who is at the other end; connections that never wait on a run that does not
//! accept them.

use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// The longest socket path (`sun_path` is 108 bytes with its terminating NUL).
pub const MAX_PATH: usize = 107;
/// The pointer file beside an over-long socket path: `<socket>.path`.
pub use crate::engine::rundir::pointer_of;

#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("{path}: another run is live on this socket; give this run another run directory")]
    Live { path: PathBuf },
    #[error("{path} exists and is not a socket; remove it or give this run another run directory")]
    NotSocket { path: PathBuf },
    #[error("cannot create the live socket {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> SocketError + '_ {
    move |source| SocketError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The private directory a socket for `path` is first bound in (`.s<pid>` beside it).
fn staging(path: &Path) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    dir.join(format!(".s{}", std::process::id()))
}

/// Whether a socket at `path` (and its staging path) fits in `sun_path`.
fn fits(path: &Path) -> bool {
    let len = |p: &Path| p.as_os_str().len();
    len(path) <= MAX_PATH && len(&staging(path).join("s")) <= MAX_PATH
}

/// Where a socket asked for at `asked` is created: there, or where the path is too long,
/// `$XDG_RUNTIME_DIR` (else /tmp) `/mgtop-<pid>-<hash>.sock`.
pub fn place(asked: &Path) -> PathBuf {
    if fits(asked) {
        return asked.to_path_buf();
    }
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    asked.hash(&mut h);
    let name = format!("mgtop-{}-{:016x}.sock", std::process::id(), h.finish());
    let runtime = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|d| d.is_dir() && fits(&d.join(&name)));
    let dir = runtime.unwrap_or_else(|| PathBuf::from("/tmp"));
    sweep(&dir);
    dir.join(name)
}

/// Removes the sockets runs killed before they could remove them left in `dir` (named for
/// their process, which no later run reuses): this user's `mgtop-<pid>-*.sock` whose process
/// is gone and that nobody listens on.
fn sweep(dir: &Path) {
    use std::os::unix::fs::MetadataExt;
    let me = own_uid();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name();
        let Some(rest) = (name.to_str())
            .and_then(|n| n.strip_prefix("mgtop-"))
            .filter(|n| n.ends_with(".sock"))
        else {
            continue;
        };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        let gone = pid.is_some_and(|p| p > 0 && crate::pids::gone(p));
        let path = e.path();
        let ours = std::fs::symlink_metadata(&path)
            .is_ok_and(|m| m.file_type().is_socket() && m.uid() == me);
        if gone && ours && !listened(&path) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// How long `connect` tries a socket whose queue of connections is full before it says so.
pub const KNOCK: std::time::Duration = std::time::Duration::from_secs(2);

/// Connects to the socket at `path` without waiting on a listener that does not accept: a
/// full queue of connections (the run's process stopped or hung: each probe of it added one)
/// is tried again for up to `patience`, then said as `WouldBlock`; the connection is then
/// blocking as `UnixStream::connect`'s is (which would wait on such a queue without end).
pub fn connect(path: &Path, patience: std::time::Duration) -> io::Result<UnixStream> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::io::FromRawFd;
    let name = path.as_os_str().as_bytes();
    // SAFETY: a zeroed sockaddr_un is valid; the path is copied within sun_path below
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if name.is_empty() || name.len() >= addr.sun_path.len() || name.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a socket path a connection can name (empty, or too long)",
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, &s) in addr.sun_path.iter_mut().zip(name) {
        *d = s as libc::c_char;
    }
    // SAFETY: a new socket; the stream owns the descriptor from here on
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let stream = unsafe { UnixStream::from_raw_fd(fd) };
    let len = std::mem::size_of::<libc::sa_family_t>() + name.len() + 1;
    let t0 = std::time::Instant::now();
    loop {
        // SAFETY: the address is a filled sockaddr_un of `len` bytes
        let rc = unsafe {
            libc::connect(
                fd,
                &addr as *const libc::sockaddr_un as *const libc::sockaddr,
                len as libc::socklen_t,
            )
        };
        if rc == 0 {
            break;
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock if t0.elapsed() < patience => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            io::ErrorKind::WouldBlock => {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "the process listening there takes no connections (stopped or hung)",
                ))
            }
            _ => return Err(e),
        }
    }
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// Whether a process listens at `path`: it takes connections, or holds a full queue of them
/// (stopped or hung, still there).
pub fn listened(path: &Path) -> bool {
    match connect(path, std::time::Duration::ZERO) {
        Ok(_) => true,
        Err(e) => e.kind() == io::ErrorKind::WouldBlock,
    }
}

/// Clears the way for a socket at `path`: a stale socket (nobody listening) is removed; a live
/// one or anything else there is refused.
fn clear(path: &Path) -> Result<(), SocketError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(path)(e)),
    };
    if !meta.file_type().is_socket() {
        return Err(SocketError::NotSocket {
            path: path.to_path_buf(),
        });
    }
    match listened(path) {
        true => Err(SocketError::Live {
            path: path.to_path_buf(),
        }),
        false => std::fs::remove_file(path).map_err(io_err(path)),
    }
}

/// Binds and listens at `path`, mode 0600. The socket is made in a fresh 0700 directory,
/// given its mode there and then renamed into place, so no other user can ever reach it.
pub fn bind_private(path: &Path) -> Result<UnixListener, SocketError> {
    clear(path)?;
    let stage = staging(path);
    let _ = std::fs::remove_dir_all(&stage);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&stage)
        .map_err(io_err(&stage))?;
    let inner = stage.join("s");
    let made = (|| {
        let l = UnixListener::bind(&inner).map_err(io_err(path))?;
        std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o600))
            .map_err(io_err(path))?;
        std::fs::rename(&inner, path).map_err(io_err(path))?;
        Ok(l)
    })();
    let _ = std::fs::remove_dir_all(&stage);
    made
}

/// The process at the other end of a connection (`SO_PEERCRED`): its pid (0 where it is in
/// another pid namespace) and user id.
pub fn peer(s: &UnixStream) -> io::Result<(i32, u32)> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes of the sizes given; the fd is open.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((cred.pid, cred.uid))
}

/// A connected client as the run's log names it: `an attached client (pid 4242, mgtop-train)`,
/// `, as root` where the run is another user's.
pub fn client_words(pid: i32, uid: u32) -> String {
    // (the command's name, as the kernel keeps it: at most 15 bytes, the client's to choose)
    let name = std::fs::read(format!("/proc/{pid}/comm")).ok().map(|b| {
        let text = String::from_utf8_lossy(&b).trim_end().to_string();
        crate::text::printable(&text)
    });
    let mut who = match (pid, name) {
        (0, _) => "an attached client".to_string(),
        (pid, Some(n)) if !n.is_empty() => format!("an attached client (pid {pid}, {n}"),
        (pid, _) => format!("an attached client (pid {pid}"),
    };
    if uid == 0 && own_uid() != 0 {
        who += if pid == 0 { " (as root" } else { ", as root" };
    }
    if who.contains('(') {
        who.push(')');
    }
    who
}

/// This process's effective user id.
pub fn own_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {

    #[test]
    fn sockets_left_by_gone_processes_are_swept_and_live_ones_kept() {
        let d = tempfile::tempdir().unwrap();
        // a process that has ended
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let left = d.path().join(format!("mgtop-{dead}-0123456789abcdef.sock"));
        drop(UnixListener::bind(&left).unwrap());
        let mine = d.path().join(format!(
            "mgtop-{}-0123456789abcdef.sock",
            std::process::id()
        ));
        drop(UnixListener::bind(&mine).unwrap());
        let other = d.path().join(format!("other-{dead}.sock"));
        drop(UnixListener::bind(&other).unwrap());
        sweep(d.path());
        assert!(!left.exists());
        assert!(mine.exists() && other.exists());
    }
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_listener_that_takes_no_one_is_said_busy_not_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("live.sock");
        // a run's process stopped: it listens, and accepts nothing; its queue fills
        let _l = UnixListener::bind(&p).unwrap();
        let mut held = Vec::new();
        let full = loop {
            match connect(&p, std::time::Duration::ZERO) {
                Ok(s) => held.push(s),
                Err(e) => break e,
            }
            assert!(held.len() < 100_000, "the queue never filled");
        };
        assert_eq!(full.kind(), io::ErrorKind::WouldBlock, "{full}");
        let t0 = std::time::Instant::now();
        let e = connect(&p, std::time::Duration::from_millis(200)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert!(t0.elapsed() < std::time::Duration::from_secs(2));
        assert!(listened(&p), "a full queue is a process still there");
        // and a socket nobody listens on is no listener
        drop(_l);
        assert!(!listened(&p));
        assert!(connect(&dir.path().join("none.sock"), KNOCK).is_err());
    }

    #[test]
    fn a_socket_is_owner_only_and_a_stale_one_is_replaced_a_live_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("live.sock");
        let l = bind_private(&p).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        assert!(matches!(bind_private(&p), Err(SocketError::Live { .. })));
        drop(l);
        // nobody listens now: the file left behind is stale (a process another test forks
        // meanwhile holds the listener until it execs: a moment, not a listener)
        let _l = (0..200)
            .find_map(|_| match bind_private(&p) {
                Ok(l) => Some(l),
                Err(SocketError::Live { .. }) => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    None
                }
                Err(e) => panic!("{e}"),
            })
            .expect("the socket let go of");
        assert!(UnixStream::connect(&p).is_ok());
        // no staging directory is left
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["live.sock"]);
        let f = dir.path().join("file");
        std::fs::write(&f, "x").unwrap();
        assert!(matches!(
            bind_private(&f),
            Err(SocketError::NotSocket { .. })
        ));
    }

    #[test]
    fn a_path_too_long_for_a_socket_goes_elsewhere() {
        let short = Path::new("/tmp/x/live.sock");
        assert_eq!(place(short), short);
        let long = PathBuf::from(format!("/tmp/{}/live.sock", "d".repeat(120)));
        let p = place(&long);
        assert!(p.as_os_str().len() <= MAX_PATH, "{}", p.display());
        assert!(p
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("mgtop-"));
        assert_eq!(place(&long), p, "the same place each time");
        assert_eq!(pointer_of(&long).file_name().unwrap(), "live.sock.path");
    }

    #[test]
    fn the_peer_is_this_user() {
        let (a, _b) = UnixStream::pair().unwrap();
        let (pid, uid) = peer(&a).unwrap();
        assert_eq!((pid, uid), (std::process::id() as i32, own_uid()));
        let words = client_words(pid, uid);
        assert!(
            words.starts_with(&format!("an attached client (pid {pid}, ")),
            "{words}"
        );
    }
}
