//! What `export` wrote, and the lines that load it in PyTorch.

use std::path::{Path, PathBuf};

/// What `export` wrote.
#[derive(Debug)]
pub struct Exported {
    /// The checkpoint read.
    pub checkpoint: PathBuf,
    pub tensors: usize,
    /// What torchvision's model needs changed before it takes them (a small-image stem).
    pub torchvision_changes: Option<String>,
    /// The checkpoint's `--model` (empty where it did not record one), and its classes.
    pub model: String,
    pub classes: usize,
    /// Whether the file's metadata names the classes (`mgtop.classes`).
    pub named: bool,
    /// The PyTorch module written beside the weights (`module`), or why none could be (for a
    /// model torchvision has no class for).
    pub module: Option<PathBuf>,
    pub no_module: Option<String>,
    /// Whether a file was there that the weights, and the module, replaced.
    pub replaced: bool,
    pub module_replaced: bool,
    /// An earlier export's module beside the file, removed (it describes other weights).
    pub stale_module: Option<PathBuf>,
    /// One edited since it was written: left there, said.
    pub edited_module: Option<PathBuf>,
    /// How the run made its samples (`InputRecipe`'s words; None in older checkpoints).
    pub inputs: Option<String>,
}

impl Exported {
    /// Where the export went (`out`, its module), and what it replaced there.
    pub fn written(&self, out: &Path) -> String {
        let mut s = out.display().to_string();
        if self.replaced {
            s.push_str(" (replacing the file there)");
        }
        // (a name PyTorch's pickles go by: torch.load would fail on it)
        if out.extension().is_some_and(|e| {
            ["pt", "pth", "bin", "ckpt"]
                .iter()
                .any(|x| e.eq_ignore_ascii_case(x))
        }) {
            s.push_str(" (a safetensors file, whatever its name says: torch.load cannot read it)");
        }
        if let Some(py) = &self.module {
            s.push_str(&format!(" and its PyTorch module to {}", py.display()));
            if self.module_replaced {
                s.push_str(" (replacing an earlier export's)");
            }
        }
        if let Some(py) = &self.stale_module {
            s.push_str(&format!(
                "; removed {}, an earlier export's module, which does not fit these weights",
                py.display()
            ));
        }
        if let Some(py) = &self.edited_module {
            s.push_str(&format!(
                "; left {}, an earlier export's module edited since, which does not fit these weights: move it away",
                py.display()
            ));
        }
        s
    }

    /// How PyTorch loads the file written to `out` (lines of Python where they can be), and
    /// where its class names are.
    pub fn how_to_load(&self, out: &Path) -> String {
        let mut load = self.loading(out);
        // (a module says it in its docstring)
        if let Some(text) = self.inputs.as_ref().filter(|_| self.module.is_none()) {
            load.push_str(&format!("; inputs made as the run made them: {text}"));
        }
        match self.named {
            true => format!(
                "{load}; output i's class is json.loads(safetensors.safe_open({}, \"pt\").metadata()[\"mgtop.classes\"])[i]",
                python_string(out)
            ),
            false => load,
        }
    }

    fn loading(&self, out: &Path) -> String {
        let load = format!(
            "model.load_state_dict(safetensors.torch.load_file({})); model.eval()",
            python_string(out)
        );
        if let Some(py) = &self.module {
            return format!(
                "load in PyTorch: model = runpy.run_path({})[\"Net\"](); {load}",
                python_string(py)
            );
        }
        let why = match &self.no_module {
            Some(why) => format!(" (no module was written beside it: {why})"),
            None => String::new(),
        };
        // the PyTorch module whose names these are
        let classes = self.classes;
        let torchvision = match self.model.split(':').collect::<Vec<_>>()[..] {
            [m @ ("resnet18" | "resnet34" | "resnet50" | "mobilenetv2")] => Some(format!(
                "torchvision.models.{}(num_classes={classes})",
                m.replace("mobilenetv2", "mobilenet_v2")
            )),
            ["mobilenetv2", w] => Some(format!(
                "torchvision.models.mobilenet_v2(num_classes={classes}, width_mult={w})"
            )),
            _ => None,
        };
        match (&self.torchvision_changes, torchvision) {
            (None, Some(m)) => format!("load in PyTorch: model = {m}; {load}"),
            (Some(c), Some(m)) => format!(
                "load in PyTorch (the model was built for small pictures: torchvision's takes its stem first): model = {m}; {c}; {load}"
            ),
            // (a checkpoint that recorded no --model)
            (Some(c), None) if self.model.is_empty() => format!(
                "the model was built for small pictures: in PyTorch first `{c}` on torchvision's model, then {load}"
            ),
            (_, None) if self.model.starts_with("resnet") => format!(
                "load in PyTorch: {load}, on a CIFAR ResNet (torchvision has none) named as torchvision's ResNet: conv1, bn1, layer1.0.conv1, ..., fc{why}"
            ),
            // an MLP or a layer list: a module of the file's names and shapes
            (_, None) => format!(
                "load in PyTorch: {load}, on a torch.nn.Module whose parameters have the file's names and shapes (safetensors.safe_open({}, \"pt\") lists them); linear weights are [out, in]{why}",
                python_string(out)
            ),
        }
    }
}

/// `p` as a Python string literal: in double quotes, with quotes, backslashes and control
/// characters escaped.
fn python_string(p: &Path) -> String {
    let mut s = String::from('"');
    for c in p.to_string_lossy().chars() {
        match c {
            '"' | '\\' => {
                s.push('\\');
                s.push(c);
            }
            c if c.is_control() => s.push_str(&format!("\\u{:04x}", c as u32)),
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_said_as_python_strings() {
        assert_eq!(
            python_string(Path::new("w.safetensors")),
            r#""w.safetensors""#
        );
        assert_eq!(
            python_string(Path::new("my \"w\"\\x\n.st")),
            r#""my \"w\"\\x\u000a.st""#
        );
    }
}
