//! Newline-delimited reading with a limit, for both ends of the socket: a line longer than the
//! limit is refused without reading it all into memory.

use std::io::{self, BufRead};

#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// A line (without its newline) is in the buffer; a last line without one counts.
    Line,
    /// The other end closed; nothing more.
    Eof,
    /// A line went past the limit.
    TooLong,
}

/// Reads the next line into `buf` (cleared first), at most `max` bytes.
pub fn read_line(r: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> io::Result<Read> {
    buf.clear();
    read_rest(r, buf, max)
}

/// Reads the rest of a line begun in `buf` (a read that timed out part way), at most `max`
/// bytes in all.
pub fn read_rest(r: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> io::Result<Read> {
    loop {
        let avail = match r.fill_buf() {
            Ok(a) => a,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if avail.is_empty() {
            return Ok(if buf.is_empty() {
                Read::Eof
            } else {
                Read::Line
            });
        }
        let (take, done) = match avail.iter().position(|&c| c == b'\n') {
            Some(i) => (i, true),
            None => (avail.len(), false),
        };
        if buf.len() + take > max {
            return Ok(Read::TooLong);
        }
        buf.extend_from_slice(&avail[..take]);
        r.consume(take + done as usize);
        if done {
            return Ok(Read::Line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_end_at_newlines_or_the_end_and_long_ones_are_refused() {
        let mut r = io::BufReader::with_capacity(4, &b"ab\ncdefgh\n\nxyz"[..]);
        let mut buf = Vec::new();
        let mut next = |max| {
            let got = read_line(&mut r, &mut buf, max).unwrap();
            (got, String::from_utf8_lossy(&buf).into_owned())
        };
        assert_eq!(next(10), (Read::Line, "ab".into()));
        assert_eq!(next(10), (Read::Line, "cdefgh".into()));
        assert_eq!(next(10), (Read::Line, "".into()));
        assert_eq!(next(10), (Read::Line, "xyz".into()));
        assert_eq!(next(10).0, Read::Eof);
        let mut r = io::BufReader::new(&b"0123456789abc\n"[..]);
        assert_eq!(read_line(&mut r, &mut buf, 10).unwrap(), Read::TooLong);
    }
}
