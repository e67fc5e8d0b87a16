//! What is wrong with a damaged safetensors file (a checkpoint's weights, an `--init` or
//! `export` file), in words a user can act on; whether a checkpoint looks whole.

use std::io::Read;
use std::path::Path;

use super::{read_regular, CheckpointMeta, MAX_STATE_BYTES, STATE, WEIGHTS};

/// Whether checkpoint `dir` reads as whole without reading its weights: its `state.json`
/// parses and passes its checks, and its weights file is as long as its header says.
pub(super) fn looks_whole(dir: &Path) -> bool {
    let meta = read_regular(&dir.join(STATE), MAX_STATE_BYTES)
        .ok()
        .and_then(|j| serde_json::from_slice::<CheckpointMeta>(&j).ok());
    meta.is_some_and(|m| m.check().is_ok()) && weights_whole(&dir.join(WEIGHTS)).unwrap_or(false)
}

/// Whether a safetensors file is as long as its header's tensors add up to (a FIFO or device
/// in its place is not waited on: not whole).
fn weights_whole(path: &Path) -> std::io::Result<bool> {
    let expect = crate::data::read::Expect {
        what: "a checkpoint's weights",
        flag: "--resume",
        max: u64::MAX,
        fix: "",
    };
    let Ok((mut f, len)) = crate::data::read::open(path, &expect) else {
        return Ok(false);
    };
    let mut n = [0u8; 8];
    f.read_exact(&mut n)?;
    let n = u64::from_le_bytes(n);
    if n > len.saturating_sub(8) || n > MAX_STATE_BYTES * 100 {
        return Ok(false);
    }
    let mut header = vec![0u8; n as usize];
    f.read_exact(&mut header)?;
    let Ok(serde_json::Value::Object(tensors)) = serde_json::from_slice(&header) else {
        return Ok(false);
    };
    let end = tensors
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .filter_map(|(_, t)| t.get("data_offsets")?.get(1)?.as_u64())
        .max()
        .unwrap_or(0);
    Ok((8 + n).checked_add(end) == Some(len))
}

/// What is wrong with a safetensors file, in words (the crate's own Display is its Debug).
pub fn safetensors_problem(e: &safetensors::SafeTensorError) -> String {
    use safetensors::SafeTensorError as E;
    let name = |n: &str| crate::data::read::excerpt(n);
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
        E::TensorInvalidInfo | E::InvalidTensorView(..) => {
            "a tensor's shape, type and byte offsets disagree".into()
        }
        E::MetadataIncompleteBuffer => {
            "its length is not what its header's tensors add up to".into()
        }
        E::ValidationOverflow => "a tensor's shape is too large to be real".into(),
        E::IoError(e) => e.to_string(),
    }
}
