//! Files named on the command line (data, config, theme) are not trusted: they are read only if
//! they are regular files, never past a cap for their format, and pieces of them shown in error
//! messages are cut short with control characters escaped (`text::excerpt`).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::text::bytes;

/// The most bytes a config or theme file may hold (real ones hold a few hundred).
pub const SETTINGS_MAX: u64 = 1 << 20;

/// What a file is for, for its messages, and the most bytes it may hold.
pub struct Expect<'a> {
    /// What the file should be, with its article: "a config file".
    pub what: &'a str,
    /// The flag that named it: "--config".
    pub flag: &'a str,
    /// The most bytes it may hold.
    pub max: u64,
    /// Why `max`, and what to do about a larger file (after "; ").
    pub fix: &'a str,
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The operating system's error (missing, permissions); callers add which flag to check.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Read but refused: `problem` says why and what to do.
    #[error("{}: {problem}", path.display())]
    Refused { path: PathBuf, problem: String },
}

fn refused(path: &Path, problem: String) -> ReadError {
    ReadError::Refused {
        path: path.to_path_buf(),
        problem,
    }
}

/// Opens `path` for reading if it is a regular file of at most `expect.max` bytes; returns the
/// file and its length. FIFOs are opened without blocking, so a FIFO without a writer is refused
/// rather than waited on.
pub fn open(path: &Path, expect: &Expect) -> Result<(File, u64), ReadError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let not_regular = |meta: &std::fs::Metadata| {
        (!meta.is_file()).then(|| {
            refused(
                path,
                format!(
                    "{}, not a regular file; {} needs the path of {} (a regular file)",
                    kind_of(meta.file_type()),
                    expect.flag,
                    expect.what
                ),
            )
        })
    };
    // (a device is not even opened: a tape's would rewind, a terminal's could become this
    // process's; what is opened is looked at again, as the path may change between)
    if let Some(e) = std::fs::metadata(path).ok().as_ref().and_then(not_regular) {
        return Err(e);
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if let Some(e) = not_regular(&meta) {
        return Err(e);
    }
    if meta.len() > expect.max {
        return Err(too_large(path, expect, &bytes(meta.len())));
    }
    Ok((file, meta.len()))
}

/// What a path that is not a regular file is instead: "a directory", "a FIFO (named pipe)", ...
pub fn kind_of(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_file() {
        "a regular file"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

fn too_large(path: &Path, expect: &Expect, size: &str) -> ReadError {
    refused(
        path,
        format!(
            "{size}, more than the {} mgtop-train reads as {}; {}",
            bytes(expect.max),
            expect.what,
            expect.fix
        ),
    )
}

/// The whole file, if it is a regular file of at most `expect.max` bytes (checked while reading
/// too: a file can grow, and some report no length).
pub fn read_bytes(path: &Path, expect: &Expect) -> Result<Vec<u8>, ReadError> {
    read_opened(path, open(path, expect)?, expect)
}

/// [`read_bytes`] of a file `open` opened (`path`, of `len` bytes then) a while ago, held to
/// `expect` as it is now.
pub fn read_opened(
    path: &Path,
    (file, len): (File, u64),
    expect: &Expect,
) -> Result<Vec<u8>, ReadError> {
    if len > expect.max {
        return Err(too_large(path, expect, &bytes(len)));
    }
    let mut out = Vec::with_capacity(len as usize);
    file.take(expect.max.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|source| ReadError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if out.len() as u64 > expect.max {
        return Err(too_large(path, expect, "found while reading it"));
    }
    Ok(out)
}

/// [`read_bytes`] for a UTF-8 text file.
pub fn read_text(path: &Path, expect: &Expect) -> Result<String, ReadError> {
    text_of(path, expect, read_bytes(path, expect)?)
}

/// [`read_text`], where a pipe is read too (`--config <(envsubst < run.toml)`, a named FIFO):
/// what its writer writes until it closes, within `wait` (then refused: never waited on
/// without end), and never empty (a FIFO no process has open for writing: a writer started
/// before, even one still waiting to open it, counts).
pub fn read_text_or_pipe(
    path: &Path,
    expect: &Expect,
    wait: std::time::Duration,
) -> Result<String, ReadError> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::metadata(path) {
        Ok(m) if m.file_type().is_fifo() => text_of(path, expect, read_pipe(path, expect, wait)?),
        _ => read_text(path, expect),
    }
}

/// A pipe's bytes (see [`read_text_or_pipe`]).
fn read_pipe(
    path: &Path,
    expect: &Expect,
    wait: std::time::Duration,
) -> Result<Vec<u8>, ReadError> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    let kind = file.metadata().map_err(io)?.file_type();
    if !kind.is_fifo() {
        return Err(refused(
            path,
            format!("{}, not a pipe any more", kind_of(kind)),
        ));
    }
    let deadline = std::time::Instant::now() + wait;
    let (mut out, mut buf) = (Vec::new(), vec![0u8; 1 << 16]);
    loop {
        match (&file).read(&mut buf) {
            // no process has it open for writing (any more): all there is was read
            Ok(0) => break,
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                if out.len() as u64 > expect.max {
                    return Err(too_large(path, expect, "found while reading it"));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() != std::io::ErrorKind::WouldBlock => return Err(io(e)),
            Err(_) => {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    return Err(refused(
                        path,
                        format!(
                            "a pipe whose writer did not finish within {} s; {} reads {} from a pipe once its writer has written it all and closed it",
                            wait.as_secs_f32(),
                            expect.flag,
                            expect.what
                        ),
                    ));
                }
                let mut fd = libc::pollfd {
                    fd: file.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                let ms = left.as_millis().min(100) as libc::c_int;
                // SAFETY: one pollfd of a file this function holds open
                unsafe { libc::poll(&mut fd, 1, ms) };
            }
        }
    }
    if out.is_empty() {
        return Err(refused(
            path,
            format!(
                "a FIFO (named pipe) with nothing written to it (no process has it open for writing); {} needs {}",
                expect.flag, expect.what
            ),
        ));
    }
    Ok(out)
}

/// The text of a file's `bytes`, where they are UTF-8 text.
fn text_of(path: &Path, expect: &Expect, bytes: Vec<u8>) -> Result<String, ReadError> {
    if let Some(why) = not_text(&bytes) {
        return Err(refused(
            path,
            format!("{why}; {} must be plain UTF-8 text", expect.what),
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        refused(
            path,
            format!(
                "not UTF-8 text (byte {at}, line {line}); {} must be saved as UTF-8",
                expect.what
            ),
        )
    })
}

/// What a file that is not text is, where its first bytes tell: packed (gzip, zip, xz, zstd,
/// bzip2: unpack it first), UTF-16 text (saved as "Unicode" by a spreadsheet), or a NUL byte.
fn not_text(bytes: &[u8]) -> Option<String> {
    let packed = [
        (&b"\x1f\x8b"[..], "gzip-compressed", "gunzip -k FILE"),
        (b"PK\x03\x04", "a zip archive", "unzip FILE"),
        (b"\xfd7zXZ\0", "xz-compressed", "unxz -k FILE"),
        (b"\x28\xb5\x2f\xfd", "zstd-compressed", "unzstd FILE"),
    ];
    // (bzip2's `BZh` is followed by its block size, a digit)
    let bzip2 =
        bytes.starts_with(b"BZh") && bytes.get(3).is_some_and(|b| (b'1'..=b'9').contains(b));
    let packed = (packed.iter().find(|(magic, ..)| bytes.starts_with(magic)))
        .map(|&(_, what, how)| (what, how))
        .or(bzip2.then_some(("bzip2-compressed", "bunzip2 -k FILE")));
    if let Some((what, how)) = packed {
        return Some(format!("it is {what}: unpack it first ({how})"));
    }
    let utf16 = bytes.starts_with(b"\xff\xfe") || bytes.starts_with(b"\xfe\xff");
    if utf16 || ascii_utf16(bytes) {
        return Some("it is UTF-16 text (as a spreadsheet saves \"Unicode text\"): convert it, e.g. iconv -f UTF-16 -t UTF-8 FILE > FILE.utf8".into());
    }
    let nul = bytes.iter().position(|&b| b == 0);
    nul.map(|at| format!("it holds a NUL byte (byte {at}): it is a binary file, not text"))
}

/// Whether `bytes` begin as UTF-16 text of ASCII characters without a byte order mark: every
/// other byte NUL, the bytes between printable (a binary file's NULs fall anywhere).
fn ascii_utf16(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(128) & !1];
    let text = |b: &u8| b.is_ascii_graphic() || b" \t\r\n".contains(b);
    head.len() >= 4
        && [0, 1]
            .into_iter()
            .any(|nul_at| (head.chunks(2)).all(|pair| pair[nul_at] == 0 && text(&pair[1 - nul_at])))
}

/// A short text file this program writes beside a run (a pid, a socket's path), trimmed; None
/// when it is missing or anything but a regular file of at most `max` bytes of text, so that a
/// FIFO or a device in its place is never waited on or read without end.
pub fn read_note(path: &Path, max: u64) -> Option<String> {
    let expect = Expect {
        what: "a note of this program's",
        flag: "",
        max,
        fix: "",
    };
    read_text(path, &expect).ok().map(|t| t.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A FIFO made in `dir`.
    fn fifo_in(dir: &Path) -> std::path::PathBuf {
        let fifo = dir.join("pipe");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        fifo
    }

    fn small() -> Expect<'static> {
        Expect {
            what: "a test file",
            flag: "--test",
            max: 8,
            fix: "use a smaller one",
        }
    }

    #[test]
    fn a_pipe_is_read_once_written_and_never_waited_on_without_end() {
        use std::io::Write;
        use std::time::Duration;
        let dir = tempfile::tempdir().unwrap();
        let fifo = fifo_in(dir.path());
        let wait = Duration::from_millis(300);
        // no process has it open for writing: said at once
        let e = read_text_or_pipe(&fifo, &small(), wait)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a FIFO (named pipe) with nothing written to it"),
            "{e}"
        );
        // a writer that writes, then closes a while later, as a shell's `<(...)` does: its
        // text (the test holds a read-write end while it opens its writer, so no open waits)
        let writer = |text: &[u8]| {
            let both = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&fifo)
                .unwrap();
            let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
            w.write_all(text).unwrap();
            drop(both);
            w
        };
        let w = writer(b"a = 1\n");
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            drop(w);
        });
        let text = read_text_or_pipe(&fifo, &small(), Duration::from_secs(30)).unwrap();
        assert_eq!(text, "a = 1\n");
        closer.join().unwrap();
        // one that keeps it open past the wait: refused, not waited on
        let w = writer(b"a = 1");
        let e = read_text_or_pipe(&fifo, &small(), wait)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("whose writer did not finish within 0.3 s"),
            "{e}"
        );
        drop(w);
    }

    #[test]
    fn refuses_what_is_not_a_regular_file_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let e = read_bytes(dir.path(), &small()).unwrap_err().to_string();
        assert!(
            e.contains("a directory, not a regular file") && e.contains("--test needs"),
            "{e}"
        );
        let e = read_bytes(Path::new("/dev/zero"), &small())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("/dev/zero: a character device, not a regular file"),
            "{e}"
        );
        // a FIFO with no writer: opening it must not wait for one
        let fifo = fifo_in(dir.path());
        let e = read_bytes(&fifo, &small()).unwrap_err().to_string();
        assert!(e.contains("a FIFO (named pipe), not a regular file"), "{e}");
    }

    #[test]
    fn caps_the_bytes_and_says_which_limit() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, b"12345678").unwrap();
        assert_eq!(read_bytes(&f, &small()).unwrap(), b"12345678");
        std::fs::write(&f, b"123456789").unwrap();
        let e = read_bytes(&f, &small()).unwrap_err().to_string();
        assert!(
            e.contains(
                "9 bytes, more than the 8 bytes mgtop-train reads as a test file; use a smaller"
            ),
            "{e}"
        );
        // a sparse file far larger than the cap is refused from its length, not read
        let big = File::create(&f).unwrap();
        big.set_len(1 << 32).unwrap();
        let e = read_bytes(&f, &small()).unwrap_err().to_string();
        assert!(e.contains(": 4 GiB, more than"), "{e}");
        std::fs::write(&f, b"ok\n\xff").unwrap();
        let e = read_text(&f, &small()).unwrap_err().to_string();
        assert!(e.contains("not UTF-8 text (byte 3, line 2)"), "{e}");
        let e = read_text(&dir.path().join("none"), &small()).unwrap_err();
        assert!(matches!(e, ReadError::Io { .. }), "{e}");
    }
}
