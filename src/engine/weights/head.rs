//! An `--init` file's classifier head against the data's classes: where the file records the
//! classes its outputs were trained for (an export's `mgtop.classes`, a checkpoint's
//! `state.json` beside its weights) and the data puts one of them at another output (class
//! folders renamed, added or removed), that is said: the head starts out answering by the
//! file's places.

use std::path::Path;

use super::super::classes;
use crate::engine::checkpoint::{self, tensor_file};
use crate::nn::model::Model;

/// The classes the weights file `path` says its outputs are, output by output (empty where it
/// says none: a file PyTorch wrote).
fn file_classes(path: &Path) -> Vec<String> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let own = path.file_name() == Some(std::ffi::OsStr::new(checkpoint::WEIGHTS));
    if own && checkpoint::is_checkpoint(dir) {
        return checkpoint::read_meta(dir).map_or(Vec::new(), |m| m.classes);
    }
    let expect = crate::files::read::Expect {
        what: "a safetensors weights file",
        flag: "--init",
        max: u64::MAX,
        fix: "",
    };
    let Ok((mut file, len)) = crate::files::read::open(path, &expect) else {
        return Vec::new();
    };
    let header = tensor_file::read_header(&mut file, len).map(|(_, h)| h);
    (header.as_ref())
        .and_then(|h| h.get("__metadata__")?.get("mgtop.classes")?.as_str())
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default()
}

/// What the head `model` loaded from the weights file `path` means on data of the classes
/// `ours`, where it is not what the data means: the note saying so.
pub fn head_by_class(path: &Path, model: &Model, ours: &[String]) -> Option<String> {
    if ours.is_empty() {
        return None;
    }
    let theirs = file_classes(path);
    // (a head for another count was made anew: nothing of the file's to place)
    if theirs.len() != model.classes() {
        return None;
    }
    let (name, was, is) = classes::moved(&theirs, ours)?;
    Some(format!(
        "--init: the file's outputs were trained for classes at other places (`{}` was its output {was} and is this data's {is}): its head starts out answering by the file's places, and training relearns them",
        crate::text::excerpt(&name)
    ))
}
