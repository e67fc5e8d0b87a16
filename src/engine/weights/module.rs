//! The PyTorch module `export` writes beside the weights of a model torchvision has no class
//! for (an MLP, a layer list, a CIFAR ResNet): the checkpoint's model rebuilt from its record
//! and held to the weights it wrote.

use std::path::{Path, PathBuf};

use crate::engine::checkpoint::CheckpointMeta;
use crate::nn::model::{pytorch, Model, ModelSpec};
use crate::nn::shape::Shape;

/// Where the module of the export `out` goes: `model.safetensors` beside `model.py`.
pub fn path_for(out: &Path) -> PathBuf {
    let py = out.with_extension("py");
    match py == out {
        true => PathBuf::from(format!("{}.py", out.display())),
        false => py,
    }
}

/// Whether `export` writes a module for `--model` `model`: one torchvision has no class for
/// (a model this version cannot read too: the export then says why it wrote none).
pub fn wanted(model: &str) -> bool {
    !(model.parse::<ModelSpec>()).is_ok_and(|s| s.in_torchvision())
}

/// `path_for(out)`, where a module may be written: a new file or one an export wrote and no one
/// edited since, never another file.
pub fn target(out: &Path) -> Result<PathBuf, String> {
    let py = path_for(out);
    if std::fs::symlink_metadata(&py).is_err() || ours(&py) {
        return Ok(py);
    }
    let what = match marked(&py) {
        true => "an export's module edited since (or one an older version wrote)",
        false => "not a module an export wrote",
    };
    Err(format!(
        "{}: {} is there and {what}; the export writes the model's PyTorch module beside the weights: move it away, or give the export another name",
        out.display(),
        py.display()
    ))
}

/// The most a module read back may hold (one written holds a few kB a layer).
const MODULE_MOST: u64 = 64 << 20;

/// Whether `py` is a regular file an export wrote, unedited since (`pytorch::unedited`).
pub fn ours(py: &Path) -> bool {
    use std::io::Read;
    let regular =
        std::fs::symlink_metadata(py).is_ok_and(|m| m.is_file() && m.len() <= MODULE_MOST);
    let mut text = Vec::new();
    let read = std::fs::File::open(py).and_then(|f| f.take(MODULE_MOST).read_to_end(&mut text));
    regular && read.is_ok() && pytorch::unedited(&text)
}

/// Whether `py` starts as a module an export wrote does (edited since or not).
pub fn marked(py: &Path) -> bool {
    use std::io::Read;
    let mut head = vec![0; pytorch::MARK.len()];
    let read = std::fs::File::open(py).and_then(|mut f| f.read_exact(&mut head));
    read.is_ok() && head == pytorch::MARK.as_bytes()
}

/// Why a checkpoint's weights have no model to be checked against, or do not fit it.
#[derive(Debug)]
pub enum Unfit {
    /// No model can be built from what it recorded (none recorded, an older version's
    /// checkpoint without its input's shape, a model this version does not build).
    Unknown(String),
    /// The model it recorded has other tensors or shapes: the file is not that model's.
    Mismatch(String),
}

/// The model the checkpoint described by `meta` recorded, built, where its weights and
/// statistics `shapes` (name and shape each) fit it.
pub fn fitting(meta: &CheckpointMeta, shapes: &[(String, Vec<usize>)]) -> Result<Model, Unfit> {
    let unknown = |s: String| Unfit::Unknown(s);
    let recorded = meta.config.get("model").and_then(|m| m.as_str());
    let text = recorded.ok_or(unknown("the checkpoint recorded no --model".into()))?;
    let spec: ModelSpec = (text.parse()).map_err(|e| {
        unknown(format!(
            "its model `{text}` is not one this version builds ({e})"
        ))
    })?;
    let classes = *(meta.dims.last()).ok_or(unknown("the checkpoint recorded no sizes".into()))?;
    let mut have: Vec<&(String, Vec<usize>)> = (shapes.iter())
        .filter(|(n, _)| !n.ends_with("num_batches_tracked"))
        .collect();
    have.sort();
    let (mut built, mut mismatched) = (None, None);
    for input in inputs(meta, &spec).map_err(unknown)? {
        let model = match spec.build(input, classes) {
            Ok(m) => m,
            Err(e) => {
                built.get_or_insert(format!(
                    "its model `{spec}` does not build on {input} inputs: {e}"
                ));
                continue;
            }
        };
        let mut want: Vec<(String, Vec<usize>)> = (model.tensors.iter())
            .chain(&model.buffers)
            .map(|t| (t.name.clone(), t.shape.clone()))
            .collect();
        want.sort();
        match mismatch(&want, &have) {
            Some(why) => {
                mismatched.get_or_insert(format!(
                    "the weights do not fit its model `{spec}` on {input} inputs: {why}"
                ));
            }
            None => return Ok(model),
        }
    }
    Err(match (mismatched, built) {
        (Some(why), _) => Unfit::Mismatch(why),
        // (a model that does not build on the input it recorded was not what made the weights)
        (None, Some(why)) if meta.input.is_some() => Unfit::Mismatch(why),
        (None, Some(why)) => Unfit::Unknown(why),
        (None, None) => Unfit::Unknown(
            "the checkpoint, from an older version, did not record its input's shape".into(),
        ),
    })
}

/// The PyTorch module of `model`, the one the checkpoint described by `meta` recorded
/// (`fitting`).
pub fn source(meta: &CheckpointMeta, model: &Model) -> String {
    let text = meta
        .config
        .get("model")
        .and_then(|m| m.as_str())
        .unwrap_or_default();
    let spec = (text.parse::<ModelSpec>()).map_or(text.to_string(), |s| s.to_string());
    let classes = meta.dims.last().copied().unwrap_or(0);
    let about = format!(
        "--model {spec} on {} inputs, {classes} classes\n--data {}\nweights of step {}",
        model.input, meta.data, meta.step
    );
    // (a table's scaling that fits the input; one edited to another size is left out)
    let affine = (meta.input_affine.as_ref())
        .filter(|(shift, scale)| {
            shift.len() == scale.len()
                && (shift.len() == 1 || shift.len() == model.dims[0])
                && shift.iter().chain(scale).all(|v| v.is_finite())
        })
        .map(|(shift, scale)| (&shift[..], &scale[..]));
    let inputs = pytorch::Inputs {
        text: meta.inputs.as_deref().unwrap_or_default(),
        affine,
    };
    pytorch::module(model, &about, inputs)
}

/// The first difference between the model's tensors and the file's, both sorted by name.
fn mismatch(want: &[(String, Vec<usize>)], have: &[&(String, Vec<usize>)]) -> Option<String> {
    let shape = crate::text::dims::<usize>;
    for (w, h) in want.iter().zip(have) {
        match w.0.cmp(&h.0) {
            std::cmp::Ordering::Equal if w.1 != h.1 => {
                return Some(format!(
                    "{} is {} in the file, {} in the model",
                    w.0,
                    shape(&h.1),
                    shape(&w.1)
                ))
            }
            std::cmp::Ordering::Equal => {}
            std::cmp::Ordering::Less => return Some(format!("the file has no {}", w.0)),
            std::cmp::Ordering::Greater => return Some(format!("the model has no {}", h.0)),
        }
    }
    match want.len().cmp(&have.len()) {
        std::cmp::Ordering::Greater => Some(format!("the file has no {}", want[have.len()].0)),
        std::cmp::Ordering::Less => Some(format!("the model has no {}", have[want.len()].0)),
        std::cmp::Ordering::Equal => None,
    }
}

/// The model's input: as the checkpoint recorded it, or for checkpoints from before that was
/// recorded, flat for an MLP and else each square picture its values make (3 channels first).
fn inputs(meta: &CheckpointMeta, spec: &ModelSpec) -> Result<Vec<Shape>, String> {
    let len = *meta
        .dims
        .first()
        .ok_or("the checkpoint recorded no sizes")?;
    if let Some(s) = &meta.input {
        let shape = parse_input(s).ok_or_else(|| format!("its input `{s}` is not CxHxW or N"))?;
        return Ok(vec![shape]);
    }
    if spec.is_mlp() {
        return Ok(vec![Shape::Flat(len)]);
    }
    let side = |c: usize| ((len / c) as f64).sqrt().round() as usize;
    Ok([3, 1, 4, 2]
        .into_iter()
        .filter(|&c| c * side(c) * side(c) == len)
        .map(|c| Shape::Image {
            c,
            h: side(c),
            w: side(c),
        })
        .collect())
}

/// `3x32x32` or `784`, as `Shape` writes them.
pub fn parse_input(s: &str) -> Option<Shape> {
    match crate::data::parse_shape(s) {
        Ok([c, h, w]) => Some(Shape::Image { c, h, w }),
        Err(_) => s.parse().ok().filter(|&n| n > 0).map(Shape::Flat),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tensors' names and shapes `spec` has on `input`, and a checkpoint of it that did not
    /// record its input (as before it was recorded).
    fn older(
        spec: &str,
        input: Shape,
        classes: usize,
    ) -> (CheckpointMeta, Vec<(String, Vec<usize>)>) {
        let m = (spec.parse::<ModelSpec>().unwrap())
            .build(input, classes)
            .unwrap();
        let shapes = (m.tensors.iter().chain(&m.buffers))
            .map(|t| (t.name.clone(), t.shape.clone()))
            .collect();
        let meta = CheckpointMeta {
            dims: vec![input.numel(), classes],
            config: serde_json::json!({ "model": spec }),
            ..CheckpointMeta::example()
        };
        (meta, shapes)
    }

    /// The module `fitting` and `source` make.
    fn made(meta: &CheckpointMeta, shapes: &[(String, Vec<usize>)]) -> Result<String, Unfit> {
        fitting(meta, shapes).map(|m| source(meta, &m))
    }

    #[test]
    fn an_older_checkpoint_s_input_is_the_square_picture_its_weights_fit() {
        let (meta, shapes) = older("resnet20", Shape::Image { c: 3, h: 8, w: 8 }, 10);
        let py = made(&meta, &shapes).unwrap();
        assert!(
            py.contains("--model resnet20 on 3x8x8 inputs, 10 classes"),
            "{py}"
        );
        // 64 values: 1x8x8 or 4x4x4, and the first convolution's weights say which
        let (meta, shapes) = older("conv8k3,dense4", Shape::Image { c: 4, h: 4, w: 4 }, 2);
        let py = made(&meta, &shapes).unwrap();
        assert!(py.contains("x.reshape(x.shape[0], 4, 4, 4)"), "{py}");
        let (meta, shapes) = older("mlp:5", Shape::Flat(7), 2);
        assert!(made(&meta, &shapes).unwrap().contains("nn.Linear(7, 5)"));
        // recorded: taken as it is, and held to the weights
        let (mut meta, shapes) = older("conv8k3,dense4", Shape::Image { c: 1, h: 4, w: 16 }, 2);
        meta.input = Some("1x4x16".into());
        assert!(made(&meta, &shapes)
            .unwrap()
            .contains("x.reshape(x.shape[0], 1, 4, 16)"));
        meta.input = Some("1x8x8".into());
        let Err(Unfit::Mismatch(e)) = made(&meta, &shapes) else {
            panic!("weights of another input fit")
        };
        assert!(
            e.contains("do not fit its model `conv8k3,dense4` on 1x8x8 inputs"),
            "{e}"
        );
        let (meta, _) = older("mlp:5", Shape::Flat(7), 2);
        let none = CheckpointMeta {
            config: serde_json::json!({}),
            ..meta
        };
        let Err(Unfit::Unknown(e)) = made(&none, &[]) else {
            panic!("a model with none recorded")
        };
        assert_eq!(e, "the checkpoint recorded no --model");
    }

    #[test]
    fn a_module_is_wanted_but_for_torchvision_s_models() {
        assert!(!wanted("resnet50") && !wanted("mobilenetv2:0.5"));
        assert!(wanted("resnet20") && wanted("mlp:128"));
        // (a model this version cannot read: the export says why it wrote no module)
        assert!(wanted("mlp:12x8") && wanted(""));
    }

    #[test]
    fn a_recorded_model_that_does_not_build_on_its_recorded_input_did_not_make_the_weights() {
        // an MLP's checkpoint whose state.json was edited to say resnet50
        let (mut meta, shapes) = older("mlp:5", Shape::Flat(64), 10);
        meta.input = Some("64".into());
        meta.config = serde_json::json!({ "model": "resnet50" });
        let Err(Unfit::Mismatch(e)) = made(&meta, &shapes) else {
            panic!("exported as a resnet50")
        };
        assert!(e.contains("`resnet50` does not build on 64 inputs"), "{e}");
    }
}
