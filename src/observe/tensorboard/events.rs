//! TensorBoard's event file, written by hand: TFRecord framing (length, masked CRC-32C of the
//! length, the data, masked CRC-32C of the data) around `tensorflow.Event` protocol buffers. A
//! scalar needs five fields, so no protobuf crate:
//!
//! ```text
//! Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//! Summary { repeated Value value = 1; }
//! Value   { string tag = 1; float simple_value = 2; }
//! ```

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// The first event of every file says which format follows.
const FILE_VERSION: &str = "brain.Event:2";

/// Protocol buffer wire types.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const BYTES: u8 = 2;
const FIXED32: u8 = 5;

fn key(buf: &mut Vec<u8>, field: u8, wire: u8) {
    buf.push((field << 3) | wire);
}

fn varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn bytes(buf: &mut Vec<u8>, field: u8, b: &[u8]) {
    key(buf, field, BYTES);
    varint(buf, b.len() as u64);
    buf.extend_from_slice(b);
}

/// An `Event` with its wall time and step; `what` appends the rest.
fn event(wall_time: f64, step: u64, what: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut e = Vec::with_capacity(64);
    key(&mut e, 1, FIXED64);
    e.extend_from_slice(&wall_time.to_le_bytes());
    key(&mut e, 2, VARINT);
    // int64 on the wire; steps are never negative
    varint(&mut e, step.min(i64::MAX as u64));
    what(&mut e);
    e
}

/// A `Summary` of scalars.
fn summary<S: AsRef<str>>(values: &[(S, f32)]) -> Vec<u8> {
    let mut s = Vec::with_capacity(values.len() * 32);
    let mut v = Vec::with_capacity(48);
    for (tag, value) in values {
        v.clear();
        bytes(&mut v, 1, tag.as_ref().as_bytes());
        key(&mut v, 2, FIXED32);
        v.extend_from_slice(&value.to_le_bytes());
        bytes(&mut s, 1, &v);
    }
    s
}

/// TFRecord's checksum: CRC-32C, rotated and offset so a CRC of data holding CRCs stays strong.
fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// One record as framed on disk.
fn record(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut r = Vec::with_capacity(data.len() + 16);
    r.extend_from_slice(&len);
    r.extend_from_slice(&masked_crc(&len).to_le_bytes());
    r.extend_from_slice(data);
    r.extend_from_slice(&masked_crc(data).to_le_bytes());
    r
}

/// The name TensorBoard looks for (`*tfevents*`), unique per host and process.
pub fn file_name(created_unix: u64) -> String {
    format!(
        "events.out.tfevents.{created_unix}.{}.{}.mgtop",
        crate::pids::hostname(),
        std::process::id()
    )
}

/// When the event file at `path` was made (its version event's wall time, to the microsecond:
/// the run's start), where it reads as one of ours.
pub fn created(path: &Path) -> Option<f64> {
    use std::io::Read;
    let mut head = [0u8; 12 + 9];
    File::open(path).ok()?.read_exact(&mut head).ok()?;
    // length, its checksum, then the event: field 1, a fixed 64-bit wall time
    (head[12] == 0x09).then(|| f64::from_le_bytes(head[13..21].try_into().expect("8 bytes")))
}

/// Whether `dir` already holds event files (TensorBoard would show both).
pub fn has_event_files(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().contains("tfevents"))
    })
}

/// An event file being written: each event written whole at once, and after a write that
/// failed (a full disk) the file cut back to its last whole record, so that it always reads as
/// whole records.
pub struct EventFile {
    out: File,
    path: PathBuf,
    /// The bytes of its whole records.
    whole: u64,
    /// When it was last looked for (a file deleted while written takes writes that are lost).
    looked: std::time::Instant,
}

/// How often an event file being written is looked for.
const LOOK_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

impl EventFile {
    /// Creates `dir` (and its parents) and a new event file in it, which starts with the
    /// version event.
    pub fn create(dir: &Path, created_unix: f64) -> io::Result<EventFile> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(file_name(created_unix as u64));
        let out = File::options().write(true).create_new(true).open(&path)?;
        let mut f = EventFile {
            out,
            path,
            whole: 0,
            looked: std::time::Instant::now(),
        };
        let version = event(created_unix, 0, |e| bytes(e, 3, FILE_VERSION.as_bytes()));
        f.append(&record(&version))?;
        Ok(f)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One event holding these scalars at `step`.
    pub fn scalars<S: AsRef<str>>(
        &mut self,
        wall_time: f64,
        step: u64,
        values: &[(S, f32)],
    ) -> io::Result<()> {
        if values.is_empty() {
            return Ok(());
        }
        let e = event(wall_time, step, |e| bytes(e, 5, &summary(values)));
        self.append(&record(&e))
    }

    /// `r` after the whole records, or (the write failing) nothing of it.
    fn append(&mut self, r: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::{FileExt, MetadataExt};
        if self.looked.elapsed() >= LOOK_EVERY {
            self.looked = std::time::Instant::now();
            if self.out.metadata().is_ok_and(|m| m.nlink() == 0) {
                return Err(io::Error::other(
                    "it was deleted while the run wrote it; after the run, mgtop-train view RUN_DIR --tensorboard DIR writes its events again from the metrics file",
                ));
            }
        }
        match self.out.write_all_at(r, self.whole) {
            Ok(()) => {
                self.whole += r.len() as u64;
                Ok(())
            }
            Err(e) => {
                let _ = self.out.set_len(self.whole);
                Err(e)
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Reads the records of an event file back, checking every checksum.
    pub fn records(data: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < data.len() {
            let len_bytes = &data[at..at + 8];
            let len = u64::from_le_bytes(len_bytes.try_into().unwrap()) as usize;
            let crc = u32::from_le_bytes(data[at + 8..at + 12].try_into().unwrap());
            assert_eq!(crc, masked_crc(len_bytes), "length checksum");
            let body = &data[at + 12..at + 12 + len];
            let crc = u32::from_le_bytes(data[at + 12 + len..at + 16 + len].try_into().unwrap());
            assert_eq!(crc, masked_crc(body), "data checksum");
            out.push(body.to_vec());
            at += 16 + len;
        }
        out
    }

    #[test]
    fn crc32c_is_castagnoli_and_masked_as_tfrecord_says() {
        // the standard check value of CRC-32C
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        // ((crc >> 15) | (crc << 17)) + 0xa282ead8, worked out by hand
        assert_eq!(masked_crc(b"123456789"), 0xc78a_b0e5);
    }

    #[test]
    fn varints_are_little_endian_base_128() {
        let mut b = Vec::new();
        varint(&mut b, 1);
        varint(&mut b, 300);
        varint(&mut b, u64::from(u32::MAX) + 1);
        assert_eq!(b, [0x01, 0xac, 0x02, 0x80, 0x80, 0x80, 0x80, 0x10]);
    }

    #[test]
    fn a_scalar_event_encodes_wall_time_step_and_tagged_values() {
        let e = event(1.5, 300, |e| bytes(e, 5, &summary(&[("loss", 0.25f32)])));
        let mut want = vec![0x09];
        want.extend_from_slice(&1.5f64.to_le_bytes());
        want.extend_from_slice(&[0x10, 0xac, 0x02]);
        // summary (field 5) > value (field 1) > tag (field 1) "loss", simple_value (field 2)
        want.extend_from_slice(&[0x2a, 13, 0x0a, 11, 0x0a, 4]);
        want.extend_from_slice(b"loss");
        want.push(0x15);
        want.extend_from_slice(&0.25f32.to_le_bytes());
        assert_eq!(e, want);
    }

    #[test]
    fn a_file_starts_with_its_version_and_frames_every_event() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("a/b");
        let mut f = EventFile::create(&sub, 1_700_000_000.0).unwrap();
        assert!(f.path().starts_with(&sub));
        assert!(has_event_files(&sub));
        f.scalars(1_700_000_001.0, 7, &[("x", 1.0f32), ("y", 2.0)])
            .unwrap();
        f.scalars::<&str>(1_700_000_002.0, 8, &[]).unwrap();
        let data = std::fs::read(f.path()).unwrap();
        let recs = records(&data);
        assert_eq!(recs.len(), 2, "an empty set of scalars writes nothing");
        assert!(recs[0].ends_with(FILE_VERSION.as_bytes()));
        assert_eq!(recs[1][9..11], [0x10, 7]);
    }
}
