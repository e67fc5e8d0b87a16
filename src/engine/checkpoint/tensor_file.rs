//! Safetensors files (a checkpoint's weights, an `--init` or `export` file) short of reading
//! them whole: their header, what is wrong with a damaged one in words a user can act on, and
//! whether a checkpoint looks whole.

use std::io::Read;
use std::path::Path;

use serde_json::{Map, Value};

use super::{read_regular, CheckpointMeta, MAX_STATE_BYTES, STATE, WEIGHTS};

/// Whether checkpoint `dir` reads as whole, for a message to name it in place of a damaged
/// one: its `state.json` parses and passes its checks, its weights file is as long as its
/// header says, and its bytes match the checksum recorded (read in pieces, not held).
pub(super) fn looks_whole(dir: &Path) -> bool {
    let meta = read_regular(&dir.join(STATE), MAX_STATE_BYTES)
        .ok()
        .and_then(|j| serde_json::from_slice::<CheckpointMeta>(&j).ok())
        .filter(|m| m.check().is_ok());
    let weights = dir.join(WEIGHTS);
    meta.is_some_and(|m| {
        weights_whole(&weights).unwrap_or(false)
            && m.weights_crc32c
                .is_none_or(|want| crc32c_of(&weights).ok() == Some(want))
    })
}

/// The CRC32C of a file's bytes, read a piece at a time.
pub(super) fn crc32c_of(path: &Path) -> std::io::Result<u32> {
    let mut f = std::fs::File::open(path)?;
    let (mut crc, mut buf) = (0u32, vec![0u8; 1 << 20]);
    loop {
        match f.read(&mut buf) {
            Ok(0) => return Ok(crc),
            Ok(n) => crc = crc32c::crc32c_append(crc, &buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Whether a safetensors file is as long as its header's tensors add up to (a FIFO or device
/// in its place is not waited on: not whole).
fn weights_whole(path: &Path) -> std::io::Result<bool> {
    let expect = crate::files::read::Expect {
        what: "a checkpoint's weights",
        flag: "--resume",
        max: u64::MAX,
        fix: "",
    };
    let Ok((mut f, len)) = crate::files::read::open(path, &expect) else {
        return Ok(false);
    };
    Ok(read_header(&mut f, len).is_some_and(|(n, tensors)| laid_out(n, &tensors) == Some(len)))
}

/// The most bytes of a safetensors header this program reads: an entry of a hundred bytes or so
/// a tensor, so a model's, with its optimizer's, takes kilobytes (the format's own bound, 100
/// MB, takes gigabytes to read as JSON).
pub const MAX_HEADER: u64 = 8 << 20;

/// Where the safetensors file `bytes` has a header longer than `MAX_HEADER`: what to say of it.
pub fn header_too_long(bytes: &[u8]) -> Option<String> {
    let n = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    past_bound(n, bytes.len() as u64)
}

/// What to say of a header of `n` bytes in a file of `len`, where it is longer than
/// `MAX_HEADER` and within the file (one past its end is a file cut short, said as such).
pub fn past_bound(n: u64, len: u64) -> Option<String> {
    (n > MAX_HEADER && n <= len.saturating_sub(8)).then(|| {
        format!(
            "its header is {} long where a model's takes kilobytes (an entry a tensor)",
            crate::text::bytes(n)
        )
    })
}

/// The header of the safetensors file `f` (at its start, `len` bytes long): its length and
/// its JSON object; `None` where it is none (reading the whole file says what is wrong).
pub fn read_header(f: &mut impl Read, len: u64) -> Option<(u64, Map<String, Value>)> {
    let head = read_head(f, len)?;
    Some((
        (head.len() - 8) as u64,
        serde_json::from_slice(&head[8..]).ok()?,
    ))
}

/// The length of the header of the safetensors file `f` (its first 8 bytes), unread.
pub fn header_len(f: &mut impl Read) -> Option<u64> {
    let mut n = [0u8; 8];
    f.read_exact(&mut n).ok()?;
    Some(u64::from_le_bytes(n))
}

/// The start of the safetensors file `f` (`len` bytes long) as bytes: its 8-byte header
/// length and its header; `None` where the length runs past the file or the bound.
pub fn read_head(f: &mut impl Read, len: u64) -> Option<Vec<u8>> {
    let m = header_len(f)?;
    if m > len.saturating_sub(8) || m > MAX_HEADER {
        return None;
    }
    let mut head = vec![0u8; 8 + m as usize];
    head[..8].copy_from_slice(&m.to_le_bytes());
    f.read_exact(&mut head[8..]).ok()?;
    Some(head)
}

/// What is wrong with a safetensors file of `len` bytes, judged from its start `head`
/// (`read_head`) alone, as reading it whole would say it: an entry safetensors cannot take,
/// or a length other than its tensors lay out.
pub fn header_problem(head: &[u8], len: u64) -> Option<String> {
    if let Some(entry) = bad_entry(head).or_else(|| disagreeing_entry(head)) {
        return Some(format!("its header's entry {entry}"));
    }
    let (n, header) = read_header(&mut &head[..], head.len() as u64)?;
    let whole = laid_out(n, &header)?;
    match whole.cmp(&len) {
        std::cmp::Ordering::Equal => None,
        std::cmp::Ordering::Greater => Some(format!(
            "it ends at byte {len} of the {whole} its header lays out"
        )),
        std::cmp::Ordering::Less => Some(format!(
            "it is {len} bytes long where its header lays out {whole}"
        )),
    }
}

/// The tensors' entries of a header (its `__metadata__` left out).
pub fn tensors(header: &Map<String, Value>) -> impl Iterator<Item = (&String, &Value)> {
    header.iter().filter(|(k, _)| *k != "__metadata__")
}

/// How long a safetensors file of a header of `n` bytes and these entries is: the length,
/// the header and the furthest tensor's bytes.
fn laid_out(n: u64, header: &Map<String, Value>) -> Option<u64> {
    let end = tensors(header)
        .filter_map(|(_, t)| t.get("data_offsets")?.get(1)?.as_u64())
        .max()
        .unwrap_or(0);
    (8 + n).checked_add(end)
}

/// How a safetensors file's `bytes` fall short of what they lay out, where they do: empty,
/// ended inside its header, or before its last tensor's bytes.
pub fn cut_short(bytes: &[u8]) -> Option<String> {
    let len = bytes.len() as u64;
    let Some(n) = bytes.get(..8) else {
        return Some(match len {
            0 => "it is empty (0 bytes)".into(),
            _ => format!(
                "it holds only {}",
                crate::text::counted(len as usize, "byte")
            ),
        });
    };
    let n = u64::from_le_bytes(n.try_into().ok()?);
    if n > MAX_HEADER {
        return None;
    }
    if 8 + n > len {
        return Some(format!(
            "it ends inside its header, at byte {len} of at least {}",
            8 + n
        ));
    }
    let whole = read_header(&mut &bytes[..], len).and_then(|(n, h)| laid_out(n, &h))?;
    (whole > len).then(|| format!("it ends at byte {len} of the {whole} its header lays out"))
}

/// The dtypes a safetensors header may name, as the safetensors crate this program reads
/// with knows them.
const DTYPES: [&str; 15] = [
    "BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32", "F32",
    "F64", "I64", "U64",
];

/// The first entry of a JSON header that is no safetensors tensor entry, and why (a header
/// that is no JSON object at all: `None`).
fn bad_entry(bytes: &[u8]) -> Option<String> {
    let (_, header) = read_header(&mut &bytes[..], bytes.len() as u64)?;
    if let Some(m) = header.get("__metadata__") {
        let strings = m
            .as_object()
            .is_some_and(|o| o.values().all(Value::is_string));
        if !strings {
            return Some(
                "`__metadata__` holds more than text: safetensors metadata maps names to strings"
                    .into(),
            );
        }
    }
    let whole = |v: &Value| v.as_array().is_some_and(|a| a.iter().all(|x| x.is_u64()));
    let bad = tensors(&header).find_map(|(k, t)| {
        let why = match (
            t.get("dtype").and_then(|d| d.as_str()),
            t.get("shape"),
            t.get("data_offsets"),
        ) {
            (None, _, _) => "has no dtype".to_string(),
            (Some(d), _, _) if !DTYPES.contains(&d) => format!(
                "has dtype `{}`, one this program does not read",
                crate::text::excerpt(d)
            ),
            (_, Some(s), _) if !whole(s) => {
                "has a shape that is not a list of whole numbers".into()
            }
            (_, None, _) => "has no shape".into(),
            (_, _, Some(o)) if !whole(o) || o.as_array().map(|a| a.len()) != Some(2) => {
                "has data_offsets that are not two whole numbers".into()
            }
            (_, _, None) => "has no data_offsets".into(),
            _ => return None,
        };
        Some(format!("`{}` {why}", crate::text::excerpt(k)))
    });
    bad
}

/// Bytes per element of a safetensors dtype.
fn dtype_bytes(d: &str) -> Option<u64> {
    Some(match d {
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" => 1,
        "I16" | "U16" | "F16" | "BF16" => 2,
        "I32" | "U32" | "F32" => 4,
        "F64" | "I64" | "U64" => 8,
        _ => return None,
    })
}

/// The first tensor entry whose shape and type need other bytes than its data_offsets hold.
fn disagreeing_entry(bytes: &[u8]) -> Option<String> {
    let (_, header) = read_header(&mut &bytes[..], bytes.len() as u64)?;
    let found = tensors(&header).find_map(|(k, t)| {
        let dtype = t.get("dtype")?.as_str()?;
        let shape: Vec<u64> = (t.get("shape")?.as_array()?.iter())
            .map(Value::as_u64)
            .collect::<Option<_>>()?;
        let o = t.get("data_offsets")?.as_array()?;
        let (begin, end) = (o.first()?.as_u64()?, o.get(1)?.as_u64()?);
        let need = (shape.iter()).try_fold(dtype_bytes(dtype)?, |a, &d| a.checked_mul(d));
        let held = end.checked_sub(begin);
        (need != held).then(|| {
            let held = match held {
                Some(h) => format!("its data_offsets [{begin}, {end}] hold {h}"),
                None => format!("its data_offsets [{begin}, {end}] end before they begin"),
            };
            let need = need.map_or("more than can be".into(), |n| n.to_string());
            format!(
                "`{}` is {} of {dtype}, {need} bytes, but {held}",
                crate::text::excerpt(k),
                crate::text::dims(&shape)
            )
        })
    });
    found
}

/// What is wrong with a safetensors file of `bytes`, in words (the crate's own Display is its
/// Debug).
pub fn safetensors_problem(e: &safetensors::SafeTensorError, bytes: &[u8]) -> String {
    use safetensors::SafeTensorError as E;
    if let (E::InvalidHeaderDeserialization, Some(entry)) = (e, bad_entry(bytes)) {
        return format!("its header's entry {entry}");
    }
    let name = |n: &str| crate::text::excerpt(n);
    match e {
        E::HeaderTooSmall => "shorter than its 8-byte header length".into(),
        E::InvalidHeaderLength => "its header length runs past the end of the file".into(),
        E::HeaderTooLarge => "its first 8 bytes claim a header of over 100 MB".into(),
        E::InvalidHeader => "its header is not UTF-8 text".into(),
        E::InvalidHeaderStart => "its header does not start with `{`".into(),
        E::InvalidHeaderDeserialization | E::JsonError(_) => {
            "its header is not a safetensors JSON header".into()
        }
        E::TensorNotFound(n) => format!("tensor `{}` is missing", name(n)),
        E::InvalidOffset(n) => format!("tensor `{}`'s byte offsets are out of place", name(n)),
        E::TensorInvalidInfo | E::InvalidTensorView(..) => match disagreeing_entry(bytes) {
            Some(entry) => format!("its header's entry {entry}"),
            None => "a tensor's shape, type and byte offsets disagree".into(),
        },
        E::MetadataIncompleteBuffer => cut_short(bytes)
            .unwrap_or_else(|| "its length is not what its header's tensors add up to".into()),
        E::ValidationOverflow => "a tensor's shape is too large to be real".into(),
        E::IoError(e) => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_header_past_the_bound_is_refused_unread_one_past_the_end_left_to_the_cut_short() {
        let file = |n: u64, body: usize| [&n.to_le_bytes()[..], &vec![b' '; body]].concat();
        let big = super::MAX_HEADER + 1;
        let e = super::header_too_long(&file(big, big as usize)).unwrap();
        assert_eq!(
            e,
            "its header is 8 MiB long where a model's takes kilobytes (an entry a tensor)"
        );
        // (a length past the file's end: a file cut short, which reading it says)
        assert!(super::header_too_long(&file(big, 10)).is_none());
        assert!(super::header_too_long(&file(2, 2)).is_none());
        assert!(super::header_too_long(b"short").is_none());
    }
}
