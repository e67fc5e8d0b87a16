//! The `/metrics` endpoint: a small HTTP/1.1 server on its own threads that answers GET (and
//! HEAD, its head alone) `/metrics` with the registry in Prometheus's text format (0.0.4) and closes each
//! connection. Hostile clients are bounded: a request head over `MAX_REQUEST` bytes gets 431,
//! one not complete within `REQUEST_DEADLINE` (slowloris) is closed, other paths get 404 and
//! other methods 405, and past `MAX_CONNECTIONS` at once a connection gets 503. None of it
//! touches a training thread.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use prometheus::{Encoder, Registry, TextEncoder};

/// The longest request head read.
pub const MAX_REQUEST: usize = 8 * 1024;
/// Connections served at once; more get 503.
pub const MAX_CONNECTIONS: usize = 8;
/// How long a client has to send its request head.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// How long writing a response may block.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a scrape gets: Prometheus's text format.
const CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

/// Held to write while a step's figures are set (they are apart, one atomic each), and to read
/// while a scrape gathers them: a scrape holds one step's figures, not some of the next's (a
/// process records one run at a time).
pub(super) static SETTING: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// The registry's metrics in Prometheus's text format (version 0.0.4).
pub fn render(registry: &Registry) -> Result<Vec<u8>, String> {
    let mut body = Vec::with_capacity(16 * 1024);
    let gathered = {
        let _together = SETTING.read().unwrap_or_else(|p| p.into_inner());
        registry.gather()
    };
    // (the run's families are registered once it has started)
    let gathered = match gathered.is_empty() {
        true => super::families::starting(),
        false => gathered,
    };
    TextEncoder::new()
        .encode(&gathered, &mut body)
        .map_err(|e| e.to_string())?;
    Ok(body)
}

/// Where `--prometheus` listens: `PORT` (on 127.0.0.1), `HOST:PORT` or `[IPv6]:PORT`.
pub fn parse_addr(spec: &str) -> Result<SocketAddr, String> {
    let fix = "give PORT (127.0.0.1), ADDR:PORT or [IPv6]:PORT, e.g. --prometheus 9400 or --prometheus 0.0.0.0:9400";
    let spec = spec.trim();
    if let Ok(port) = spec.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    if let Ok(a) = spec.parse::<SocketAddr>() {
        return Ok(a);
    }
    // (a number alone is a port: one past 65535 is said as such)
    let whole = !spec.is_empty() && spec.bytes().all(|b| b.is_ascii_digit());
    let Some((host, port)) = spec.rsplit_once(':').or(whole.then_some(("", spec))) else {
        return Err(format!(
            "--prometheus {spec:?} is not a port or address; {fix}"
        ));
    };
    if port.parse::<u16>().is_err() {
        return Err(format!(
            "--prometheus {spec:?}: {port:?} is not a port (0-65535); {fix}"
        ));
    }
    // (the resolver takes `1.2.3` for 1.2.0.3 and `0x7f.1` for 127.0.0.1, addresses no one
    // means: a host that starts with a digit and is all hex digits, `x` and dots is a number)
    let numeric = host.starts_with(|c: char| c.is_ascii_digit())
        && host
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b'x' || b == b'X' || b == b'.');
    if numeric && host.parse::<Ipv4Addr>().is_err() {
        return Err(format!(
            "--prometheus {spec:?}: {host:?} is not an IPv4 address (four numbers of 0-255, e.g. 127.0.0.1); {fix}"
        ));
    }
    match spec.to_socket_addrs().map(|mut a| a.next()) {
        Ok(Some(a)) => Ok(a),
        _ => Err(format!(
            "--prometheus {spec:?}: no address for host {host:?}; {fix}"
        )),
    }
}

/// A port after `addr`'s that is free now (of the next 100, from 1024 up), to suggest; else
/// port 0, which takes any.
fn free_port_after(addr: SocketAddr) -> String {
    let after = (1..=100).filter_map(|k| addr.port().checked_add(k));
    (after.filter(|&p| p >= 1024))
        .find(|&p| TcpListener::bind(SocketAddr::new(addr.ip(), p)).is_ok())
        .map_or_else(
            || "0 (any free port: the start-up line says which)".into(),
            |p| p.to_string(),
        )
}

/// A listening endpoint; dropping it stops the server.
pub struct Endpoint {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Endpoint {
    /// Listens on `addr` and serves `registry` (its metrics may be registered later).
    pub fn start(addr: SocketAddr, registry: Registry) -> Result<Endpoint, String> {
        let listener = TcpListener::bind(addr).map_err(|e| match e.kind() {
            ErrorKind::AddrInUse => format!(
                "--prometheus: {addr} is already in use (another run's endpoint, or another exporter); choose another port, e.g. --prometheus {}",
                free_port_after(addr)
            ),
            ErrorKind::PermissionDenied => format!(
                "--prometheus: no permission to listen on {addr} (ports below 1024 need root); choose a port from 1024 up, e.g. --prometheus 9400"
            ),
            ErrorKind::AddrNotAvailable => format!(
                "--prometheus: {} is not an address of this machine; use one of its own, 127.0.0.1 or 0.0.0.0",
                addr.ip()
            ),
            _ => format!("--prometheus: cannot listen on {addr} ({e})"),
        })?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("--prometheus: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let active = Arc::new(AtomicUsize::new(0));
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("prometheus".into())
                .spawn(move || accept(listener, &registry, &stop, &active))
                .map_err(|e| format!("--prometheus: cannot start its thread ({e})"))?
        };
        Ok(Endpoint {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// The start-up line: the URL, and a warning where it is reachable from other machines.
    pub fn describe(&self) -> String {
        let url = format!("prometheus: http://{}/metrics", self.addr);
        match self.addr.ip().is_loopback() {
            true => url,
            false => format!(
                "{url} (listening on {}: anyone who can reach this machine there can read the run's metrics)",
                self.addr.ip()
            ),
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // wake the accept: a connection to itself (on loopback where it listens on all)
        let ip = match self.addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        let woke =
            TcpStream::connect_timeout(&SocketAddr::new(ip, self.addr.port()), WRITE_TIMEOUT)
                .is_ok();
        if let Some(t) = self.thread.take().filter(|_| woke) {
            let _ = t.join();
        }
    }
}

/// Takes connections until `stop`, each on its own thread, at most `MAX_CONNECTIONS` at once.
fn accept(
    listener: TcpListener,
    registry: &Registry,
    stop: &AtomicBool,
    active: &Arc<AtomicUsize>,
) {
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(conn) = conn else {
            // out of descriptors, or a connection reset before it was taken: go on
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        if active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::SeqCst);
            let _ = conn.set_write_timeout(Some(Duration::from_millis(100)));
            respond(
                &mut Answer { conn, body: true },
                "503 Service Unavailable",
                "text/plain",
                b"busy: too many connections; try again\n",
            );
            continue;
        }
        let registry = registry.clone();
        let active2 = active.clone();
        let spawned = std::thread::Builder::new()
            .name("prometheus-conn".into())
            .spawn(move || {
                serve(conn, &registry);
                active2.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            active.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Request {
    Metrics,
    NotFound,
    BadMethod,
    Malformed,
}

/// Reads the request head: `Some(head)`, or `None` where it is too long (`Err` where the client
/// went away or ran out of time).
fn read_head(conn: &mut TcpStream) -> Result<Option<Vec<u8>>, ()> {
    let deadline = Instant::now() + REQUEST_DEADLINE;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || conn.set_read_timeout(Some(left)).is_err() {
            return Err(());
        }
        let n = match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return Err(()),
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        // bytes no HTTP request line holds (TLS, binary): answered now (400), not waited on
        let line = buf.split(|&b| b == b'\n').next().unwrap_or_default();
        if line
            .iter()
            .any(|&b| !(b == b'\r' || b == b'\t' || (0x20..0x7f).contains(&b)))
        {
            return Ok(Some(buf));
        }
        let end = buf
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|i| i + 4)
            .or_else(|| buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2));
        match end {
            // the head, blank line included, is what the limit counts
            Some(end) if end > MAX_REQUEST => return Ok(None),
            Some(_) => return Ok(Some(buf)),
            None if buf.len() > MAX_REQUEST => return Ok(None),
            None => {}
        }
    }
}

fn parse(head: &[u8]) -> Request {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let (Some(method), Some(target), Some(version)) = (words.next(), words.next(), words.next())
    else {
        return Request::Malformed;
    };
    if !version.starts_with("HTTP/1.") {
        return Request::Malformed;
    }
    if method != "GET" && method != "HEAD" {
        return Request::BadMethod;
    }
    let path = target.split(['?', '#']).next().unwrap_or_default();
    match path {
        "/metrics" => Request::Metrics,
        _ => Request::NotFound,
    }
}

fn serve(mut conn: TcpStream, registry: &Registry) {
    let _ = conn.set_write_timeout(Some(WRITE_TIMEOUT));
    let head = match read_head(&mut conn) {
        Ok(Some(h)) => h,
        Ok(None) => {
            return respond(
                &mut Answer { conn, body: true },
                "431 Request Header Fields Too Large",
                "text/plain",
                b"request head too large\n",
            )
        }
        Err(()) => {
            let _ = conn.shutdown(Shutdown::Both);
            return;
        }
    };
    // HEAD: GET's answer without its body (HTTP/1.1 servers answer both)
    let mut conn = Answer {
        conn,
        body: !head.starts_with(b"HEAD "),
    };
    match parse(&head) {
        Request::Metrics => match render(registry) {
            Ok(body) => respond(&mut conn, "200 OK", CONTENT_TYPE, &body),
            Err(e) => respond(
                &mut conn,
                "500 Internal Server Error",
                "text/plain",
                format!("{e}\n").as_bytes(),
            ),
        },
        Request::NotFound => respond(
            &mut conn,
            "404 Not Found",
            "text/plain",
            b"mgtop-train serves only GET /metrics\n",
        ),
        Request::BadMethod => respond(
            &mut conn,
            "405 Method Not Allowed",
            "text/plain",
            b"only GET /metrics\n",
        ),
        Request::Malformed => respond(
            &mut conn,
            "400 Bad Request",
            "text/plain",
            b"not an HTTP/1 request\n",
        ),
    }
}

/// A connection, and whether its answer carries a body.
struct Answer {
    conn: TcpStream,
    body: bool,
}

fn respond(answer: &mut Answer, status: &str, content_type: &str, body: &[u8]) {
    let allow = if status.starts_with("405") {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}; charset=utf-8\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n",
        body.len()
    );
    let conn = &mut answer.conn;
    let body = if answer.body { body } else { &[] };
    let _ = conn
        .write_all(head.as_bytes())
        .and_then(|()| conn.write_all(body))
        .and_then(|()| conn.flush());
    let _ = conn.shutdown(Shutdown::Write);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_default_to_loopback_and_bad_ones_say_the_forms() {
        assert_eq!(
            parse_addr("9400").unwrap(),
            "127.0.0.1:9400".parse().unwrap()
        );
        assert_eq!(
            parse_addr("0.0.0.0:9400").unwrap(),
            "0.0.0.0:9400".parse().unwrap()
        );
        assert_eq!(parse_addr("[::1]:9").unwrap(), "[::1]:9".parse().unwrap());
        assert!(parse_addr("localhost:9400").unwrap().ip().is_loopback());
        for bad in ["", "http://x", "99999", "host:port", "127.0.0.1:70000"] {
            let e = parse_addr(bad).unwrap_err();
            assert!(e.contains("--prometheus 9400"), "{bad}: {e}");
        }
        // a number alone past the ports is said to be one
        let e = parse_addr("70000").unwrap_err();
        assert!(e.contains("\"70000\" is not a port (0-65535)"), "{e}");
        // a dotted number short of four is no address (the resolver would make 1.2.0.3 of it)
        for short in ["1.2.3", "0x7f.1", "0x7f000001", "127.1"] {
            let e = parse_addr(&format!("{short}:99")).unwrap_err();
            assert!(
                e.contains(&format!("{short:?} is not an IPv4 address")),
                "{e}"
            );
        }
    }

    #[test]
    fn only_get_metrics_is_served() {
        assert_eq!(parse(b"GET /metrics HTTP/1.1\r\n\r\n"), Request::Metrics);
        assert_eq!(
            parse(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"),
            Request::Metrics
        );
        assert_eq!(parse(b"GET / HTTP/1.1\r\n\r\n"), Request::NotFound);
        assert_eq!(parse(b"HEAD /metrics HTTP/1.1\r\n\r\n"), Request::Metrics);
        assert_eq!(parse(b"POST /metrics HTTP/1.1\r\n\r\n"), Request::BadMethod);
        assert_eq!(parse(b"\x16\x03\x01 tls"), Request::Malformed);
        assert_eq!(parse(b""), Request::Malformed);
    }
}
