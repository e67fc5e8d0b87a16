//! `export`: a checkpoint's weights and running statistics written for PyTorch, under its names,
//! with `num_batches_tracked` beside each batch norm; and what PyTorch module takes them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;

use crate::data::host_memory;
use crate::engine::checkpoint;
use crate::engine::output::Output;
use crate::files::read::{self, Expect};

use super::exported::Exported;
use super::module;

/// What to export in place of the damaged checkpoint `dir`.
fn export_instead(dir: &Path) -> String {
    let with = |p: &Path| {
        format!(
            "export a whole one beside it: mgtop-train export {} FILE",
            p.display()
        )
    };
    checkpoint::instead(dir, with, "")
}

/// Writes the weights and running statistics of the checkpoint at `from` (a run directory, a
/// checkpoint directory or a step directory) to `out`, under PyTorch's names, with
/// `num_batches_tracked` beside each batch norm's statistics (as `load_state_dict` expects).
/// Written beside and renamed: a failure leaves no partial file.
pub fn export(from: &Path, out: &Path) -> Result<Exported, String> {
    if !from.exists() {
        return Err(format!(
            "{}: no such file or directory; export a run directory (runs/<name>/<time>), a checkpoint directory or a step-NNNNNNNN checkpoint",
            from.display()
        ));
    }
    use crate::engine::rundir::{checkpoint_for, Purpose};
    let point = checkpoint_for(from, Purpose::Export)?;
    // (a damaged checkpoint's message is for exporting, not resuming)
    let exporting = |e: checkpoint::CheckpointError| match e {
        checkpoint::CheckpointError::Corrupt { path, msg, .. } => format!(
            "checkpoint {} is unreadable: {msg}; {}",
            path.display(),
            export_instead(&path)
        ),
        e => e.to_string(),
    };
    let dir = checkpoint::resolve(&point).map_err(exporting)?;
    let meta = checkpoint::read_meta(&dir).map_err(exporting)?;
    let file = dir.join(checkpoint::WEIGHTS);
    let expect = Expect {
        what: "a checkpoint's weights",
        flag: "export",
        max: host_memory::machine_memory().0 / 2,
        fix: "it must fit in memory to be exported",
    };
    let instead = || export_instead(&dir);
    let bytes = read::read_bytes(&file, &expect).map_err(|e| {
        let e = match e {
            read::ReadError::Io { source, .. } => source.to_string(),
            other => other.to_string(),
        };
        format!(
            "checkpoint {} is unreadable: {}: {e}; {}",
            dir.display(),
            checkpoint::WEIGHTS,
            instead()
        )
    })?;
    if let Some(why) =
        (meta.weights_changed(&bytes)).or_else(|| checkpoint::tensor_file::header_too_long(&bytes))
    {
        return Err(format!("{}: {why}; {}", dir.display(), instead()));
    }
    let st = SafeTensors::deserialize(&bytes).map_err(|e| {
        format!(
            "{}: not a whole safetensors file ({}); {}",
            file.display(),
            checkpoint::safetensors_problem(&e, &bytes),
            instead()
        )
    })?;
    // (PyTorch counts a batch norm's training passes: --grad-accum of them a step)
    let passes = meta.optimizer_steps * meta.grad_accum() as u64;
    let steps = (passes as i64).to_le_bytes();
    let mut views: Vec<(String, TensorView)> = Vec::new();
    let mut shapes: Vec<(String, Vec<usize>)> = Vec::new();
    let mut names: Vec<String> = st.names().into_iter().cloned().collect();
    names.sort();
    for name in names.iter().filter(|n| !n.starts_with("optim.")) {
        let v = st.tensor(name).map_err(|e| e.to_string())?;
        // (what --resume refuses is not handed to PyTorch either)
        let bad = match v.dtype() {
            Dtype::F32 => (v.data().chunks_exact(4))
                .any(|c| !f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_finite())
                .then(|| {
                    "holds NaN or infinity (the run had diverged by then, or the file is damaged)"
                        .to_string()
                }),
            other => Some(format!(
                "is {other:?}, where a checkpoint's tensors are F32"
            )),
        };
        if let Some(why) = bad {
            return Err(format!(
                "{}: tensor `{name}` {why}; {}",
                file.display(),
                instead()
            ));
        }
        shapes.push((name.clone(), v.shape().to_vec()));
        views.push((name.clone(), v));
        if let Some(bn) = name.strip_suffix("running_mean") {
            let t = TensorView::new(Dtype::I64, Vec::new(), &steps).expect("one i64 scalar");
            views.push((format!("{bn}num_batches_tracked"), t));
        }
    }
    let n = views.len();
    let mut info: HashMap<String, String> = [
        ("format".to_string(), "pt".to_string()),
        ("mgtop.step".to_string(), meta.step.to_string()),
        ("mgtop.data".to_string(), meta.data.clone()),
    ]
    .into();
    // (what made the weights: the recorded --model and the input it was built for)
    let model = (meta.config.get("model").and_then(|m| m.as_str()))
        .unwrap_or_default()
        .to_string();
    let init = (meta.config.get("init").and_then(|i| i.as_str())).map(str::to_string);
    for (key, value) in [
        ("mgtop.model", Some(&model)),
        ("mgtop.init", init.as_ref()),
        ("mgtop.input", meta.input.as_ref()),
        ("mgtop.inputs", meta.inputs.as_ref()),
    ] {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            info.insert(key.to_string(), v.clone());
        }
    }
    // (output i's class: what a classifier's user maps its argmax with)
    if !meta.classes.is_empty() {
        let names = serde_json::to_string(&meta.classes).map_err(|e| e.to_string())?;
        info.insert("mgtop.classes".into(), names);
    }
    // weights that are not of the model the checkpoint records are not handed on (as --resume
    // and eval refuse them); a model torchvision has no class for: its module beside them
    let fit = match module::fitting(&meta, &shapes) {
        Ok(model) => Ok(model),
        Err(module::Unfit::Mismatch(why)) => {
            return Err(format!(
                "{}: {why} (its state.json or its weights were edited); {}",
                file.display(),
                instead()
            ))
        }
        // (no model to hold them to: they go out, without a module)
        Err(module::Unfit::Unknown(why)) => Err(why),
    };
    let bytes = safetensors::serialize(views, &Some(info)).map_err(|e| e.to_string())?;
    let bytes = metadata_in_order(bytes);
    // (the file written, a link's target: its module beside it, not beside the link)
    let target = &export_target(out)?;
    let (module, no_module) = match (module::wanted(&model), fit) {
        (true, Ok(fitted)) => (
            Some((module::target(target)?, module::source(&meta, &fitted))),
            None,
        ),
        (true, Err(why)) => (None, Some(why)),
        (false, _) => (None, None),
    };
    let cannot_write = |p: &Path, e: std::io::Error| {
        format!(
            "cannot write {}: {e}; check the folder exists, is writable and has space",
            p.display()
        )
    };
    let there = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.len() > 0);
    let replaced = there(target);
    let module_replaced = module.as_ref().is_some_and(|(py, _)| there(py));
    // (the weights and their module replaced together, or neither: a module never describes
    // other weights than those beside it)
    let mut files = vec![(target.as_path(), &bytes[..])];
    files.extend((module.as_ref()).map(|(py, source)| (py.as_path(), source.as_bytes())));
    crate::files::write::replace_files(&files).map_err(|(p, e)| cannot_write(&p, e))?;
    let (mut stale_module, mut edited_module) = (None, None);
    // an earlier export's module beside the file describes other weights: not left there
    if module.is_none() {
        let py = module::path_for(target);
        if module::ours(&py) && std::fs::remove_file(&py).is_ok() {
            stale_module = Some(py);
        } else if module::marked(&py) {
            edited_module = Some(py);
        }
    }
    Ok(Exported {
        checkpoint: dir,
        tensors: n,
        torchvision_changes: meta.torchvision_changes,
        model,
        classes: meta.dims.last().copied().unwrap_or(0),
        named: !meta.classes.is_empty(),
        module: module.map(|(py, _)| py),
        no_module,
        replaced,
        module_replaced,
        stale_module,
        edited_module,
        inputs: meta.inputs,
    })
}

/// Where `export` may write `out`: as `Output::target` says (a new file or an earlier export it
/// replaces, never a file of a checkpoint: replacing its weights would lose the optimizer
/// state, nor weights from elsewhere: a pretrained file, perhaps the run's `--init`), and not
/// under a Python file's name.
pub fn export_target(out: &Path) -> Result<PathBuf, String> {
    // (`-`, standard output elsewhere, would be a file named `-`, and its module `-.py`)
    if out == Path::new("-") {
        return Err(
            "- is not a file: the weights (and a module beside them) are written as files; give a name such as model.safetensors"
                .into(),
        );
    }
    if out.extension().is_some_and(|e| e == "py") {
        return Err(format!(
            "{} is a Python file's name: give the weights a name such as model.safetensors (a model torchvision lacks gets its module beside them, model.py)",
            out.display()
        ));
    }
    let weights = Output {
        flag: "",
        kind: "weights mgtop-train exported (weights from elsewhere, such as pretrained ones, are not replaced)",
        example: "model.safetensors",
        ours: exported_here,
    };
    weights.target(out)
}

/// Whether `p` is a safetensors file an export wrote (its header's metadata has the step
/// `mgtop.step`).
fn exported_here(p: &Path) -> bool {
    let Ok(mut f) = std::fs::File::open(p) else {
        return false;
    };
    let len = f.metadata().map_or(0, |m| m.len());
    crate::engine::checkpoint::tensor_file::read_header(&mut f, len).is_some_and(|(_, h)| {
        (h.get("__metadata__")).is_some_and(|m| m.get("mgtop.step").is_some())
    })
}

/// A safetensors file's bytes with its header's `__metadata__` keys in order: `serialize` takes
/// them from a HashMap, in another order every time, and two exports of one checkpoint are to
/// be the same bytes (content hashes, DVC, git-lfs). Left as they are where the header cannot
/// be read back or would not keep its length.
fn metadata_in_order(mut bytes: Vec<u8>) -> Vec<u8> {
    let n = match bytes.get(..8) {
        Some(b) => u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize,
        None => return bytes,
    };
    let Some(Ok(mut header)) =
        (bytes.get(8..8 + n)).map(serde_json::from_slice::<serde_json::Value>)
    else {
        return bytes;
    };
    if let Some(m) = header.get_mut("__metadata__") {
        let sorted: std::collections::BTreeMap<String, serde_json::Value> =
            (m.as_object().cloned().unwrap_or_default().into_iter()).collect();
        *m = serde_json::json!(sorted);
    }
    let Ok(mut text) = serde_json::to_vec(&header) else {
        return bytes;
    };
    if text.len() > n {
        return bytes;
    }
    // (the header's padding: spaces to its length, as written)
    text.resize(n, b' ');
    bytes[8..8 + n].copy_from_slice(&text);
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_refuses_devices_directories_checkpoints_other_files_and_missing_folders() {
        let tmp = tempfile::tempdir().unwrap();
        let e = export_target(Path::new("/dev/null")).unwrap_err();
        assert!(e.contains("a character device, not a regular file"), "{e}");
        let e = export_target(Path::new("-")).unwrap_err();
        assert!(e.starts_with("- is not a file"), "{e}");
        let e = export_target(tmp.path()).unwrap_err();
        assert!(e.contains("is a directory"), "{e}");
        let ckpt = tmp.path().join("step-00000090");
        std::fs::create_dir(&ckpt).unwrap();
        std::fs::write(ckpt.join("state.json"), "{}").unwrap();
        let e = export_target(&ckpt.join("model.safetensors")).unwrap_err();
        assert!(
            e.contains("is in the checkpoint") && e.contains("elsewhere"),
            "{e}"
        );
        // an earlier export is replaced; weights from elsewhere are not
        let pretrained = tmp.path().join("resnet.safetensors");
        std::fs::write(&pretrained, b"\x02\0\0\0\0\0\0\0{}").unwrap();
        let e = export_target(&pretrained).unwrap_err();
        assert!(
            e.contains("is not weights mgtop-train exported") && e.contains("another name"),
            "{e}"
        );
        let real = tmp.path().join("real.safetensors");
        let ours = br#"{"__metadata__":{"mgtop.step":"5"}}"#;
        let bytes = [&(ours.len() as u64).to_le_bytes()[..], ours].concat();
        std::fs::write(&real, bytes).unwrap();
        let link = tmp.path().join("link.safetensors");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert_eq!(export_target(&link).unwrap(), real.canonicalize().unwrap());
        let new = tmp.path().join("new.safetensors");
        assert_eq!(export_target(&new).unwrap(), new);
        // an empty file is written; a file holding something else is kept, as is training's
        // time: a missing folder is an error before the run, not after
        let empty = tmp.path().join("empty.st");
        std::fs::write(&empty, b"").unwrap();
        assert_eq!(
            export_target(&empty).unwrap(),
            empty.canonicalize().unwrap()
        );
        let notes = tmp.path().join("notes.txt");
        std::fs::write(&notes, "precious").unwrap();
        let e = export_target(&notes).unwrap_err();
        assert!(
            e.contains("not weights mgtop-train exported") && e.contains("another name"),
            "{e}"
        );
        let e = export_target(&tmp.path().join("nope/x.safetensors")).unwrap_err();
        assert!(
            e.contains("does not exist") && e.contains("mkdir -p"),
            "{e}"
        );
        // a file where a folder is asked for: no mkdir can make it
        let e = export_target(&notes.join("x.safetensors")).unwrap_err();
        assert!(
            e.contains("notes.txt is a file, not a folder") && !e.contains("mkdir"),
            "{e}"
        );
        // a folder named with its file left out, before training rather than after it
        let slashed = format!("{}/", notes.display());
        let e = export_target(Path::new(&slashed)).unwrap_err();
        assert!(e.contains("without the /"), "{e}");
        let new_folder = format!("{}/new/", tmp.path().display());
        let e = export_target(Path::new(&new_folder)).unwrap_err();
        assert!(e.contains("new/model.safetensors"), "{e}");
        let e = export_target(Path::new("")).unwrap_err();
        assert!(e.contains("empty path"), "{e}");
        // the weights under a Python file's name: the module would go to w.py.py
        let e = export_target(&tmp.path().join("w.py")).unwrap_err();
        assert!(
            e.contains("a Python file's name") && e.contains("model.safetensors"),
            "{e}"
        );
        // a checkpoint's and a run's own files are not offered for removal
        let e = export_target(&ckpt.join("state.json")).unwrap_err();
        assert!(
            e.contains("is in the checkpoint") && !e.contains("remove"),
            "{e}"
        );
        let run = tmp.path().join("run");
        std::fs::create_dir(&run).unwrap();
        std::fs::write(run.join("metrics.jsonl"), "{}").unwrap();
        let e = export_target(&run.join("metrics.jsonl")).unwrap_err();
        assert!(
            e.contains("is a file of the run directory") && !e.contains("remove"),
            "{e}"
        );
        assert!(export_target(&run.join("w.safetensors")).is_ok());
    }
}
