//! Files named on the command line (data, config, theme) are not trusted: they are read only if
//! they are regular files, never past a cap for their format, and pieces of them shown in error
//! messages are cut short with control characters escaped.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The most characters of a file's content quoted in a message.
pub const EXCERPT_CHARS: usize = 40;

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
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        let kind = kind_of(meta.file_type());
        return Err(refused(
            path,
            format!(
                "{kind}, not a regular file; {} needs the path of {} (a regular file)",
                expect.flag, expect.what
            ),
        ));
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
    let (file, len) = open(path, expect)?;
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
    let bytes = read_bytes(path, expect)?;
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

/// This machine's name.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into a live buffer
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match ok {
        true => String::from_utf8_lossy(&buf[..end]).into_owned(),
        false => "?".into(),
    }
}

/// A byte count for people: "512 bytes", "1 MiB", "2.5 GiB".
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} bytes");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    let text = format!("{v:.1}");
    format!("{} {}", text.trim_end_matches(".0"), UNITS[unit])
}

/// `s` with its control characters escaped (`\u{1b}` for ESC): text from a file or a socket
/// printed to a terminal cannot move its cursor, retitle it or clear it.
pub fn printable(s: &str) -> String {
    escaped(s, false)
}

/// `printable`, its line breaks kept: a message of several lines (an error listing runs) whose
/// parts (a directory's name) came from outside.
pub fn printable_lines(s: &str) -> String {
    escaped(s, true)
}

/// Whether `c` would drive a terminal rather than show: a control character, or one that
/// reorders the text after it (Unicode's bidirectional embeddings, overrides and isolates:
/// U+202E turns the rest of a line right to left; the marks, as in right-to-left names, stay).
pub fn unprintable(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn escaped(s: &str, keep_lines: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if unprintable(c) && !(keep_lines && c == '\n') {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Untrusted text for a message: at most [`EXCERPT_CHARS`] characters, then an ellipsis, with
/// control characters escaped (`\r`, `\u{1b}`), so a field can neither flood nor drive the
/// terminal.
pub fn excerpt(s: &str) -> String {
    let head: String = s.chars().take(EXCERPT_CHARS).collect();
    let mut out = printable(&head);
    if s.chars().nth(EXCERPT_CHARS).is_some() {
        out.push('…');
    }
    out
}

/// A parser's message about untrusted text (such as a TOML error) with each quoted part, `…`
/// or "…", made an [`excerpt`].
pub fn excerpt_quotes(msg: &str) -> String {
    let mut out = String::new();
    let mut rest = msg;
    while let Some(i) = rest.find(['`', '"']) {
        let quote = &rest[i..i + 1];
        out.push_str(&rest[..=i]);
        rest = &rest[i + 1..];
        let end = rest.find(quote).unwrap_or(rest.len());
        out.push_str(&excerpt(&rest[..end]));
        out.push_str(&rest[end..(end + 1).min(rest.len())]);
        rest = &rest[(end + 1).min(rest.len())..];
    }
    out.push_str(rest);
    out
}

/// A TOML parser's error about `text` in one line: the line it is on, and what is wrong (an
/// unknown key with the known one it likely misspells, quoted parts made excerpts).
pub fn toml_error(text: &str, e: &toml::de::Error) -> (Option<usize>, String) {
    let line = e.span().map(|s| text[..s.start].matches('\n').count() + 1);
    let msg = e.message();
    let unknown = msg.strip_prefix("unknown field `").and_then(|rest| {
        let (key, rest) = rest.split_once('`')?;
        let known: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
        Some(match crate::text::nearest(key, &known) {
            Some(k) => format!("unknown key `{}`: did you mean `{k}`?", excerpt(key)),
            None => format!("unknown key `{}`", excerpt(key)),
        })
    });
    let msg = unknown.unwrap_or_else(|| {
        let lines: Vec<&str> = msg
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        let mut msg = excerpt_quotes(&lines.join(": "));
        // a whole number of 0 or more that does not fit: too large, not of the wrong kind
        let too_large = (msg.strip_prefix("invalid value: integer `"))
            .and_then(|rest| rest.split_once("`, expected "))
            .filter(|(n, _)| !n.starts_with('-'))
            .and_then(|(n, ty)| {
                let most = match ty {
                    "u32" => u32::MAX as u64,
                    "u64" | "usize" => u64::MAX,
                    _ => return None,
                };
                Some(format!("the number `{n}` is too large: at most {most}"))
            });
        if let Some(m) = too_large {
            msg = m;
        }
        // serde's words for types are Rust's: said in a config file's
        for (rust, said) in [
            ("invalid type: string", "a text"),
            ("invalid type: floating point", "a fraction"),
            ("invalid type: integer", "a whole number"),
            ("invalid type: boolean", "true/false"),
            ("invalid value: integer", "the number"),
            (
                "invalid string: expected `\"`, `'`",
                "no value (a text goes in quotes, a number without)",
            ),
            ("expected u64", "expected a whole number of 0 or more"),
            ("expected usize", "expected a whole number of 0 or more"),
            ("expected u32", "expected a whole number of 0 or more"),
            ("expected f64", "expected a number"),
            ("expected f32", "expected a number"),
            ("expected a boolean", "expected true or false"),
        ] {
            msg = msg.replace(rust, said);
        }
        if msg.starts_with("a text") && msg.contains("expected a") && msg.contains("number") {
            msg += " (numbers go without quotes)";
        }
        if msg.starts_with("invalid type: sequence") && msg.ends_with("expected a string") {
            msg = "a list, expected one text: give its items in one, comma-separated (\"crop:4,flip\", not [\"crop:4\", \"flip\"])".into();
        } else if !msg.starts_with("a text") && msg.ends_with("expected a string") {
            msg = msg.replace("expected a string", "expected a text (texts go in quotes)");
        }
        msg
    });
    // the key the line sets, where the message does not name it (a value's error)
    let at = line.and_then(|l| text.lines().nth(l - 1)).map(str::trim);
    let msg = match at {
        Some(l) if l.starts_with('[') => format!(
            "{msg}: the file's keys are at its top level, without sections such as {}",
            excerpt(l)
        ),
        Some(l) if !msg.starts_with("unknown key") => match l.split_once('=') {
            Some((key, _))
                if !key.trim().is_empty() && !msg.contains(&format!("`{}`", key.trim())) =>
            {
                format!("`{}`: {msg}", excerpt(key.trim()))
            }
            _ => msg,
        },
        _ => msg,
    };
    (line, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_from_outside_cannot_drive_the_terminal() {
        let name = "runs/evil\u{1b}[31mred\nline";
        assert_eq!(printable(name), "runs/evil\\u{1b}[31mred\\nline");
        // a message of several lines keeps its lines, not its escapes
        let message = format!("2 runs:\n  {name}");
        assert_eq!(
            printable_lines(&message),
            "2 runs:\n  runs/evil\\u{1b}[31mred\nline"
        );
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
        let fifo = dir.path().join("pipe");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
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

    #[test]
    fn excerpts_are_short_and_escaped() {
        assert_eq!(excerpt("abc"), "abc");
        let long = "x".repeat(10_000_000);
        assert_eq!(excerpt(&long), format!("{}…", "x".repeat(EXCERPT_CHARS)));
        assert_eq!(excerpt("a\rb\x1b[2J"), "a\\rb\\u{1b}[2J");
        // text-direction controls are escaped too: the rest of the line stays in order
        assert_eq!(printable("run\u{202e}txt.exe"), "run\\u{202e}txt.exe");
        assert_eq!(printable("日本 ü \u{200f}"), "日本 ü \u{200f}");
        let msg = format!("invalid type: string \"{long}\", expected f64 at `lr`");
        let short = excerpt_quotes(&msg);
        assert_eq!(
            short,
            format!(
                "invalid type: string \"{}…\", expected f64 at `lr`",
                "x".repeat(EXCERPT_CHARS)
            )
        );
        assert_eq!(excerpt_quotes("unclosed `abc"), "unclosed `abc");
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(bytes(512), "512 bytes");
        assert_eq!(bytes(1 << 20), "1 MiB");
        assert_eq!(bytes(5 << 29), "2.5 GiB");
    }
}
