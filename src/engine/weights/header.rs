//! What `--init` reads of a weights file before its bulk: the length of its header, and the
//! names and shapes of its tensors.

use std::path::Path;

use crate::engine::checkpoint;
use crate::files::read::{self, Expect};

/// Tensors' shapes by name.
pub(super) type Shapes = std::collections::BTreeMap<String, Vec<usize>>;

/// The tensor names in the header of safetensors file `path`, read without the rest of the
/// file, and what is wrong with the file that the header shows (an entry, the length); None
/// where the header is not one (reading the whole file then says what is wrong).
pub(super) fn names(path: &Path, expect: &Expect) -> Option<(Shapes, Option<String>)> {
    use checkpoint::tensor_file::{header_problem, read_head, read_header, tensors};
    let (mut file, len) = read::open(path, expect).ok()?;
    let head = read_head(&mut file, len)?;
    let (_, header) = read_header(&mut &head[..], head.len() as u64)?;
    let shape = |t: &serde_json::Value| -> Vec<usize> {
        (t.get("shape")
            .and_then(|s| s.as_array())
            .into_iter()
            .flatten())
        .map(|d| d.as_u64().unwrap_or(0) as usize)
        .collect()
    };
    let names = tensors(&header)
        .map(|(k, t)| (k.clone(), shape(t)))
        .collect();
    Some((names, header_problem(&head, len)))
}

/// What to say of weights file `path`'s header where it is longer than the most read
/// (`tensor_file::past_bound`), read before the file's bulk.
pub(super) fn too_long(path: &Path, expect: &Expect) -> Option<String> {
    use checkpoint::tensor_file::{header_len, past_bound};
    let (mut f, len) = read::open(path, expect).ok()?;
    past_bound(header_len(&mut f)?, len)
}
