//! Weights by name in safetensors files, as PyTorch writes and reads them. `--init FILE` loads
//! what matches this model's names (torchvision's: `layer1.0.conv1.weight`), with a report of
//! what was loaded, missing, unexpected or re-initialised (a classifier head for other
//! classes); `export` writes a checkpoint's weights and running statistics so that
//! `model.load_state_dict(safetensors.torch.load_file(F))` takes them.

use std::path::Path;

use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;

use super::checkpoint;
use crate::files::read::{self, Expect};
use crate::nn::model::{Model, TensorInfo};
use crate::text::dims;
use header::Shapes;
use names::{last_of_kind, listed, masked, renumbered};

mod export;
mod exported;
mod header;
pub mod module;
mod names;
mod trained_for;
pub use export::{export, export_target};
pub use exported::Exported;
pub use trained_for::{against_run, how_apart, inputs_apart};

/// Prefixes a saved model's names may carry (DistributedDataParallel's `module.`, Lightning's
/// `model.`), tried when the names do not match as they are.
const PREFIXES: [&str; 4] = ["", "module.", "model.", "state_dict."];

fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1f) as u32;
    let frac = (h & 0x3ff) as u32;
    let bits = match (exp, frac) {
        (0, 0) => sign,
        (0, f) => {
            // subnormal: normalise
            let mut e = 127 - 15 + 1;
            let mut f = f;
            while f & 0x400 == 0 {
                f <<= 1;
                e -= 1;
            }
            sign | (e << 23) | ((f & 0x3ff) << 13)
        }
        (0x1f, f) => sign | 0x7f80_0000 | (f << 13),
        (e, f) => sign | ((e + 127 - 15) << 23) | (f << 13),
    };
    f32::from_bits(bits)
}

/// A tensor's values as f32, from any floating-point dtype.
fn values(view: &TensorView, name: &str) -> Result<Vec<f32>, String> {
    let b = view.data();
    Ok(match view.dtype() {
        Dtype::F32 => b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Dtype::F64 => b
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")) as f32)
            .collect(),
        Dtype::F16 => b
            .chunks_exact(2)
            .map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
            .collect(),
        Dtype::BF16 => b
            .chunks_exact(2)
            .map(|c| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16))
            .collect(),
        d => {
            return Err(format!(
                "tensor `{name}` is {d:?}; weights must be F32, F16, BF16 or F64"
            ))
        }
    })
}

/// Loads the tensors of `path` that this model has, by name, into `params` and `buffers`;
/// returns the report's lines. A classifier head of another class count is left as
/// initialised (said so); any other shape mismatch, a damaged file or a file that matches
/// nothing is an error; so is, unless `partial` (`--init-partial`), a file that lacks some of
/// the model's tensors or has layers of its kind the model lacks (another depth).
pub fn import(
    path: &Path,
    model: &Model,
    params: &mut [f32],
    buffers: &mut [f32],
    partial: bool,
) -> Result<Vec<String>, String> {
    let at = |m: String| format!("--init {}: {m}", path.display());
    // a run or checkpoint directory: the weights file of its newest checkpoint
    if path.is_dir() {
        use super::rundir::{checkpoint_for, Purpose};
        if let Ok(dir) = checkpoint_for(path, Purpose::Export)
            .and_then(|p| checkpoint::resolve(&p).map_err(|e| e.to_string()))
        {
            return Err(at(format!(
                "a directory; give the weights file of its checkpoint: --init {}",
                dir.join(checkpoint::WEIGHTS).display()
            )));
        }
    }
    // a file for this model with 8-byte floats, or a checkpoint of it with Adam's two moments
    // (12 bytes a parameter), a larger head and some extras fits easily
    let most = ((model.n_params + model.n_buffers) as u64 * 16).saturating_add(1 << 30);
    let expect = Expect {
        what: "a safetensors weights file",
        flag: "--init",
        max: most,
        fix: "more than any weights file for this model holds; is it the right file?",
    };
    let ours: Vec<(&TensorInfo, bool)> = (model.tensors.iter().map(|t| (t, true)))
        .chain(model.buffers.iter().map(|t| (t, false)))
        .collect();
    // (a hidden layer's: a classifier head of as many classes fits whatever the widths, so
    // its shape says nothing of a layer renumbered)
    let head: Vec<&str> = (model.head_tensors().iter())
        .map(|&i| model.tensors[i].name.as_str())
        .collect();
    let shape_of_ours = |name: &str| {
        (ours.iter())
            .find(|(t, _)| t.name == name && !head.contains(&name))
            .map(|(t, _)| t.shape.clone())
    };
    // (the file's tensors by name, with their shapes)
    let matches_nothing = |file: &Shapes| {
        // (a checkpoint's optimizer state is no model's tensors)
        let file_names: Vec<&String> = (file.keys()).filter(|n| !n.starts_with("optim.")).collect();
        if file_names.is_empty() {
            return at("it holds no tensors; is it the right file?".into());
        }
        let ex: Vec<String> = file_names
            .iter()
            .take(3)
            .map(|n| crate::text::excerpt(n))
            .collect();
        let fits = |o: &str, t: &str| shape_of_ours(o).is_some_and(|s| file.get(t) == Some(&s));
        let hint = renumbered(
            model.tensors.iter().map(|t| t.name.as_str()),
            &file_names,
            fits,
        )
        .filter(|_| model.layer_list)
        .unwrap_or_default();
        at(format!(
            "none of its {} is named as this model's ({}, ...; the file has {}){}{hint} (mgtop-train models {} --input {} --classes {} --tensors lists every name and shape this model takes)",
            crate::text::counted(file_names.len(), "tensor"),
            model.tensors.first().map_or("", |t| &t.name),
            ex.join(", "),
            trained_for::not_this_model(path, model),
            model.spec,
            model.input,
            model.dims.last().copied().unwrap_or(0)
        ))
    };
    if let Some(why) = header::too_long(path, &expect) {
        return Err(at(format!("{why}; is it the right file?")));
    }
    // a file of another model is refused from its header, before its bulk is read
    if let Some((names, problem)) = header::names(path, &expect) {
        let named = |t: &TensorInfo| {
            PREFIXES
                .iter()
                .any(|p| names.contains_key(&format!("{p}{}", t.name)))
        };
        if !ours.iter().any(|(t, _)| named(t)) {
            return Err(matches_nothing(&names));
        }
        // (nor is a file its header shows damaged read whole to be refused; a checkpoint's
        // own is held to its checksum below, which says what to take instead)
        let own = checkpoint::of_weights(path).is_some();
        if let Some(why) = problem.filter(|_| !own) {
            return Err(at(format!(
                "not a whole safetensors file ({why}): cut short, damaged, or another format (a PyTorch .pth converts with scripts/pth_to_safetensors.py)"
            )));
        }
    }
    let bytes = read::read_bytes(path, &expect).map_err(|e| match e {
        read::ReadError::Io { source, .. } => at(format!(
            "cannot read it ({source}); check the path given to --init"
        )),
        read::ReadError::Refused { problem, .. } => at(problem),
    })?;
    // a checkpoint's own weights file: held to the checksum its state.json beside it recorded
    // (as --resume and export hold it)
    if let Some(dir) = checkpoint::of_weights(path) {
        let meta = checkpoint::read_meta(dir).ok();
        if let Some(why) = meta.and_then(|m| m.weights_changed(&bytes)) {
            let with = |p: &Path| {
                format!(
                    "give the weights of another checkpoint of the run: --init {}",
                    p.join(checkpoint::WEIGHTS).display()
                )
            };
            let instead = checkpoint::instead(dir, with, "");
            return Err(at(format!("{why}; {instead}")));
        }
    }
    // (torch.save's zip archive: a .pt/.pth, the usual mistake)
    if bytes.starts_with(b"PK\x03\x04") {
        return Err(at(
            "a zip archive, as PyTorch's torch.save writes (.pt, .pth), not safetensors: convert it with scripts/pth_to_safetensors.py".into(),
        ));
    }
    let st = SafeTensors::deserialize(&bytes).map_err(|e| {
        at(format!(
            "not a whole safetensors file ({}): cut short, damaged, or another format (a PyTorch .pth converts with scripts/pth_to_safetensors.py)",
            checkpoint::safetensors_problem(&e, &bytes)
        ))
    })?;
    let mut file_names: Vec<String> = st.names().into_iter().cloned().collect();
    file_names.sort();
    // the prefix under which most of our names are found
    let prefix = PREFIXES
        .iter()
        .max_by_key(|p| {
            let hits = ours
                .iter()
                .filter(|(t, _)| st.tensor(&format!("{p}{}", t.name)).is_ok())
                .count();
            (hits, std::cmp::Reverse(p.len()))
        })
        .copied()
        .unwrap_or("");
    let head = model.head_tensors();
    let our_names: std::collections::HashSet<String> = (ours.iter())
        .map(|(t, _)| format!("{prefix}{}", t.name))
        .collect();
    let (mut loaded, mut missing, mut head_reset) = (0usize, Vec::new(), Vec::new());
    // (the model's parameter tensors the file does not give)
    let mut unloaded = Vec::new();
    let mut used = std::collections::HashSet::new();
    for (i, (t, is_param)) in ours.iter().enumerate() {
        let name = format!("{prefix}{}", t.name);
        let Ok(view) = st.tensor(&name) else {
            missing.push(t.name.clone());
            unloaded.extend(is_param.then_some(i));
            continue;
        };
        used.insert(name.clone());
        if view.shape() != t.shape.as_slice() {
            // a head for another class count: other rows, each the same, and no layer of the
            // file after it (no layer this model lacks takes its rows as inputs: a deeper
            // model's hidden layer)
            let rows = view.shape().first().copied();
            let other_count =
                rows != t.shape.first().copied() && view.shape().get(1..) == t.shape.get(1..);
            let fed = |rows| {
                st.iter().any(|(n, v)| {
                    !our_names.contains(n)
                        && n.ends_with(".weight")
                        && v.shape().len() == 2
                        && v.shape()[1] == rows
                })
            };
            if *is_param && head.contains(&i) && other_count && !rows.is_some_and(fed) {
                let (theirs, ours) = (dims(view.shape()), dims(&t.shape));
                head_reset.push(format!("{} {theirs} -> {ours}", t.name));
                unloaded.push(i);
                continue;
            }
            // (ImageNet's 7x7 stem where this model has the small-image one)
            let imagenet_stem = view.shape().get(2..) == Some(&[7, 7][..]);
            let (theirs, ours) = (view.shape().get(1).copied(), t.shape.get(1).copied());
            let why = if i == 0 && view.shape().len() == 4 && theirs != ours {
                format!(
                    "the file's first layer takes {} input channels and this data gives {}: train on pictures of as many channels (--data of RGB pictures for ImageNet's weights)",
                    theirs.unwrap_or(0),
                    ours.unwrap_or(0)
                )
            } else if i == 0 && view.shape().len() == 2 && theirs != ours {
                format!(
                    "the file's first layer takes {} inputs and this data gives {}: train on data of as many values per sample (pictures of the size the file's run used)",
                    theirs.unwrap_or(0),
                    ours.unwrap_or(0)
                )
            } else if i == 0
                && model.torchvision_changes.is_none()
                && view.shape().get(2..) == Some(&[3, 3][..])
                && t.shape.get(2..) == Some(&[7, 7][..])
            {
                let small = crate::nn::model::SMALL_IMAGES;
                format!(
                    "the file has the small-image stem (a 3x3 conv, for pictures of at most {small}x{small}) and this model ImageNet's 7x7 one (pictures of {} pixels or more): train on --image-size {small} or less to keep the stem they were trained with",
                    small + 1
                )
            } else if i == 0 && model.torchvision_changes.is_some() && imagenet_stem {
                let small = crate::nn::model::SMALL_IMAGES;
                format!(
                    "pictures of at most {small}x{small} pixels get a small-image stem, which these weights do not fit: train on pictures of {} pixels or more to keep the stem they were trained with (e.g. --image-size 224, ImageNet's, for picture folders and CIFAR)",
                    small + 1
                )
            } else {
                // (a layer list with a layer more or less before this one: the file's tensor
                // of this shape is named for another place)
                let moved = (file_names.iter()).find(|n| {
                    model.layer_list
                        && **n != name
                        && masked(n) == masked(&name)
                        && st.tensor(n).is_ok_and(|v| v.shape() == t.shape.as_slice())
                });
                let hint = moved
                    .and_then(|n| renumbered([name.as_str()], &[n], |_, _| true))
                    .unwrap_or_default();
                format!("the file is for another --model (or width, or input channels){hint}")
            };
            return Err(at(format!(
                "tensor `{name}` is {} but this model's `{}` is {}: {why}",
                dims(view.shape()),
                t.name,
                dims(&t.shape),
            )));
        }
        let v = values(&view, &name).map_err(at)?;
        if v.iter().any(|x| !x.is_finite()) {
            let beyond = match view.dtype() {
                Dtype::F64 => " (or values past f32's range, 3.4e38: the model trains in f32)",
                _ => "",
            };
            return Err(at(format!("tensor `{name}` holds NaN or infinity{beyond}")));
        }
        if t.name.ends_with("running_var") && v.iter().any(|&x| x < 0.0) {
            return Err(at(format!("tensor `{name}` holds negative variances")));
        }
        let dst = if *is_param {
            &mut params[t.range()]
        } else {
            &mut buffers[t.range()]
        };
        dst.copy_from_slice(&v);
        loaded += 1;
    }
    // (a head whose weight fits and whose bias is for another count, or the other way: no
    // count of classes it is for, half of it would start afresh)
    let head_loaded = head.iter().any(|i| !unloaded.contains(i));
    if !head_reset.is_empty() && head_loaded {
        return Err(at(format!(
            "the classifier head is in part for this model's {} classes and in part for another count ({}): is it a whole checkpoint of one run?",
            model.classes(),
            head_reset.join(", ")
        )));
    }
    if loaded == 0 && !head_reset.is_empty() {
        return Err(at(format!(
            "only the classifier head is named as this model's, and it is for another class count ({}): nothing to load; is it a checkpoint of this --model?",
            head_reset.join(", ")
        )));
    }
    let shape_in_file = |n: &str| st.tensor(n).map(|v| v.shape().to_vec()).ok();
    if loaded == 0 {
        let file = (file_names.iter())
            .map(|n| (n.clone(), shape_in_file(n).unwrap_or_default()))
            .collect();
        return Err(matches_nothing(&file));
    }
    // (PyTorch's batch-norm step counters are bookkeeping this program does not keep; a
    // checkpoint's optimizer state is said apart)
    let optimizer_state = file_names.iter().any(|n| n.starts_with("optim."));
    let unexpected: Vec<String> = (file_names.into_iter())
        .filter(|n| !used.contains(n) && !n.ends_with("num_batches_tracked"))
        .filter(|n| !n.starts_with("optim."))
        .collect();
    // (this model's head is said to be the file's where the file's is its last layer of the
    // kind: a layer list with a dropout less before it)
    let whole_file: Vec<&String> = unexpected.iter().chain(used.iter()).collect();
    let head_of_file = |o: &str, t: &str| {
        head.iter().any(|&i| model.tensors[i].name == o)
            && last_of_kind(t, &whole_file)
            && (model.tensors.iter())
                .any(|m| m.name == o && shape_in_file(t) == Some(m.shape.clone()))
    };
    let renamed = || {
        renumbered(missing.iter().map(String::as_str), &unexpected, |o, t| {
            shape_of_ours(o).is_some_and(|s| shape_in_file(t) == Some(s)) || head_of_file(o, t)
        })
        .filter(|_| model.layer_list)
        .unwrap_or_default()
    };
    // (a file of another depth: this model's layers it lacks would start at random, or its
    // layers of a kind this model has, but more of them, would be dropped; PyTorch's
    // load_state_dict refuses both unless strict=False)
    let kinds: std::collections::HashSet<String> = (ours.iter())
        .map(|(t, _)| masked(&format!("{prefix}{}", t.name)))
        .collect();
    let deeper: Vec<String> = (unexpected.iter())
        .filter(|n| kinds.contains(&masked(n)))
        .cloned()
        .collect();
    // (a backbone's file, its classifier head left out as fine-tuning exports do: the head
    // starts at random, as one for another class count does; not one named at another place)
    let head_names: Vec<&str> = (head.iter())
        .map(|&i| model.tensors[i].name.as_str())
        .collect();
    let no_head = !missing.is_empty()
        && missing.len() == head_names.len()
        && missing.iter().all(|m| head_names.contains(&m.as_str()))
        && renamed().is_empty();
    // (a file of the parameters alone: `named_parameters()`, not `state_dict()`)
    let stats = |n: &String| n.ends_with(".running_mean") || n.ends_with(".running_var");
    if !partial && !missing.is_empty() && missing.iter().all(stats) {
        return Err(at(format!(
            "it has no batch-norm running statistics ({}): the parameters alone, as named_parameters() gives them; save model.state_dict(), which has them, or add --init-partial to start them at mean 0 and variance 1",
            listed(&missing)
        )));
    }
    if !partial && !missing.is_empty() && !no_head {
        return Err(at(format!(
            "{} of this model's {} tensors are not in the file ({}): a file of another depth or layer list, whose missing layers would start at random{}; give the weights of this --model, or add --init-partial to load the {loaded} that match and start the rest at random",
            missing.len(),
            ours.len(),
            listed(&missing),
            renamed()
        )));
    }
    if !partial && !deeper.is_empty() {
        return Err(at(format!(
            "the file has {} of layers this model lacks ({}): the weights of a deeper model, which would load only in part; give the weights of this --model, or add --init-partial to load the {loaded} that match and leave the file's others out",
            crate::text::counted(deeper.len(), "tensor"),
            listed(&deeper)
        )));
    }
    let mut notes = vec![format!(
        "--init {}: loaded {loaded} of this model's {} tensors{}",
        path.display(),
        ours.len(),
        if prefix.is_empty() {
            String::new()
        } else {
            format!(" (names prefixed `{prefix}` in the file)")
        }
    )];
    if !head_reset.is_empty() {
        notes.push(format!(
            "--init: classifier head re-initialised for {} classes (the file's is for another count): {}",
            model.classes(),
            head_reset.join(", ")
        ));
    }
    if no_head {
        notes.push(format!(
            "--init: the file has no classifier head ({}): it starts at random for this data's {} classes",
            missing.join(", "),
            model.classes()
        ));
    } else if !missing.is_empty() {
        notes.push(format!(
            "--init: {} of this model's tensors are missing from the file and start as a new model's do (weights at random, batch-norm statistics at mean 0 and variance 1; a file of another depth or width loads only in part): {}",
            missing.len(),
            listed(&missing)
        ));
    }
    if !unexpected.is_empty() {
        notes.push(format!(
            "--init: in the file but not in this model, ignored: {}{}",
            listed(&unexpected),
            renamed()
        ));
    }
    // (frozen at their random start: nothing will ever train them)
    let frozen: Vec<String> = (unloaded.iter())
        .filter(|i| model.frozen.contains(i))
        .map(|&i| model.tensors[i].name.clone())
        .collect();
    if !frozen.is_empty() {
        notes.push(format!(
            "--init: {} frozen tensors (--freeze) are not loaded from the file and stay at their random start, never trained: {}; freeze less, or --init from a file that has them",
            frozen.len(),
            listed(&frozen)
        ));
    }
    // (fixed at PyTorch's start: nothing will ever move them)
    let unfed: Vec<String> = (model.batch_norms().into_iter())
        .filter(|&n| model.statistics_fixed(n))
        .filter_map(|n| Some(model.buffers[model.nodes[n].buffers?].name.clone()))
        .filter(|name| missing.contains(name))
        .collect();
    if !unfed.is_empty() {
        notes.push(format!(
            "--init: the file has no running statistics for {} on fixed statistics (--bn-stats), which keep PyTorch's start (means 0, variances 1) and normalise nothing: {}",
            crate::text::counted(unfed.len(), "batch norm"),
            listed(&unfed)
        ));
    }
    if optimizer_state {
        notes.push(
            "--init: the file's optimizer state (optim.*, a checkpoint's) is not taken: the optimizer starts anew (--resume continues a run with it)".into(),
        );
    }
    Ok(notes)
}

#[cfg(test)]
mod tests;
