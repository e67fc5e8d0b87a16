//! A model graph written as a PyTorch module: what `export` writes beside the weights of a model
//! torchvision has no class for (an MLP, a layer list, a CIFAR ResNet). Its `state_dict` has the
//! names and shapes of the exported weights, and its forward pass is the graph's, op for op.

use std::fmt::Write;

use super::op::{Act, Op};
use super::Model;
use crate::nn::shape::Shape;

/// The first line of every module written.
pub const MARK: &str = "# written by mgtop-train export";
/// The last line of every module written, before the CRC-32C of all above it: `export`
/// replaces a file that starts with `MARK` and ends with its own checksum, and no other (so
/// never one edited since).
const SEAL: &str = "# checksum of the lines above (an export replaces this file only unedited): ";

/// Whether `text` is a module an export wrote, unedited since.
pub fn unedited(text: &[u8]) -> bool {
    let Some(body) = text.strip_suffix(b"\n") else {
        return false;
    };
    let cut = body.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let (above, last) = body.split_at(cut);
    let sum = format!("{SEAL}{:08x}", crc32c::crc32c(above));
    above.starts_with(MARK.as_bytes()) && last == sum.as_bytes()
}

/// How the samples the model takes are made from the data: in words (empty where unknown), and a
/// table's per-feature (x - shift) * scale (one of each: every feature alike), which the module
/// applies itself.
#[derive(Clone, Copy, Debug, Default)]
pub struct Inputs<'a> {
    pub text: &'a str,
    pub affine: Option<(&'a [f64], &'a [f64])>,
}

/// The Python source of a module `Net` computing `m`'s logits from samples made as `inputs`
/// says; `about` says what it is (the model's spec and data), in its first lines.
pub fn module(m: &Model, about: &str, inputs: Inputs) -> String {
    // (in a comment and a docstring: no line break, quote or backslash, which would start an
    // escape, gets out of them)
    let text: String = (inputs.text.chars())
        .map(|c| match c {
            '"' => '\'',
            '\\' => '/',
            c if c.is_control() => '?',
            c => c,
        })
        .collect();
    let inputs = Inputs {
        text: &text,
        ..inputs
    };
    let mut init = String::new();
    let mut forward = String::new();
    if let Some((shift, scale)) = inputs.affine {
        let _ = writeln!(
            init,
            "        # the run's scaling of the table's values ({}), applied in forward",
            inputs.text
        );
        for (name, v) in [("input_shift", shift), ("input_scale", scale)] {
            let _ = writeln!(
                init,
                "        self.register_buffer(\"{name}\", torch.tensor({}, dtype=torch.float64), persistent=False)",
                python_list(v)
            );
        }
        let _ = writeln!(
            forward,
            "        x = ((x.flatten(1).double() - self.input_shift) * self.input_scale).float()"
        );
    }
    let first = match m.input {
        // (rows of a table or flat vectors alike)
        Shape::Image { c, h, w } => format!("x.reshape(x.shape[0], {c}, {h}, {w})"),
        Shape::Flat(_) => "x.flatten(1)".to_string(),
    };
    let _ = writeln!(forward, "        x0 = {first}");
    for node in &m.nodes {
        let x = |i: usize| format!("x{}", node.inputs[i]);
        let module = |name: &str, arg: String| format!("m(\"{name}\")({arg})");
        let image = matches!(m.values[node.inputs[0]], Shape::Image { .. });
        let expr = match node.op {
            Op::Conv {
                g, groups, bias, ..
            } => {
                let mut args = format!("{}, {}, {}", g.c, g.oc, g.k);
                for (key, value, default) in [
                    ("stride", g.stride, 1),
                    ("padding", g.pad, 0),
                    ("groups", groups, 1),
                ] {
                    if value != default {
                        let _ = write!(args, ", {key}={value}");
                    }
                }
                if !bias {
                    args.push_str(", bias=False");
                }
                add(&mut init, &node.name, &format!("nn.Conv2d({args})"));
                module(&node.name, x(0))
            }
            Op::BatchNorm { c, .. } => {
                let dims = if image { "2d" } else { "1d" };
                add(&mut init, &node.name, &format!("nn.BatchNorm{dims}({c})"));
                module(&node.name, x(0))
            }
            Op::Linear { inp, out, bias, .. } => {
                let b = if bias { "" } else { ", bias=False" };
                add(
                    &mut init,
                    &node.name,
                    &format!("nn.Linear({inp}, {out}{b})"),
                );
                let arg = match image {
                    true => format!("{}.flatten(1)", x(0)),
                    false => x(0),
                };
                module(&node.name, arg)
            }
            Op::Activation(_) => x(0),
            Op::Add { .. } => format!("{} + {}", x(0), x(1)),
            Op::MaxPool(w) => format!("F.max_pool2d({}, {}, {}, {})", x(0), w.k, w.stride, w.pad),
            // (PyTorch's count_include_pad, as ours)
            Op::AvgPool(w) => format!("F.avg_pool2d({}, {}, {}, {})", x(0), w.k, w.stride, w.pad),
            Op::GlobalAvgPool { .. } => format!("{}.mean((2, 3))", x(0)),
            Op::Dropout { p } => format!("F.dropout({}, {p}, self.training)", x(0)),
        };
        let expr = match node.op.act() {
            Act::None => expr,
            Act::Relu => format!("F.relu({expr})"),
            Act::Relu6 => format!("F.relu6({expr})"),
        };
        let shape = m.values[node.output];
        let _ = writeln!(forward, "        x{} = {expr}  # {shape}", node.output);
    }
    let _ = writeln!(forward, "        return x{}", m.output());
    // (comments only: a control character in a path cannot start a line of code)
    let about: String = (about.lines())
        .map(|l| {
            (l.chars()).map(|c| match c.is_control() {
                true => c.escape_default().to_string(),
                false => c.to_string(),
            })
        })
        .map(|l| l.collect::<String>())
        .map(|l| format!("# {l}\n"))
        .collect();
    let input = match m.input {
        Shape::Image { c, h, w } => format!("[N, {c}, {h}, {w}] (or [N, {}])", c * h * w),
        Shape::Flat(n) => format!("[N, {n}]"),
    };
    let made = match (inputs.affine, inputs.text) {
        (Some(_), text) => format!(
            "as the table's file holds its values (it scales them as the run did:\n    {text})"
        ),
        (None, "") => "as the run's data fed the model (pictures resized and\n    normalised as its start-up `data:` line says)".to_string(),
        (None, text) => format!("made as the run made its samples:\n    {text}"),
    };
    let text = format!(
        r#"{MARK}: a PyTorch module whose state_dict has the names and shapes
# of the exported weights, with mgtop-train's forward pass, op for op.
{about}import torch
from torch import nn
import torch.nn.functional as F


class Net(nn.Module):
    """Takes x of shape {input}, {made};
    returns [N, {classes}] logits."""

    def __init__(self):
        super().__init__()
{init}
    def _add(self, name, module):
        # under its dotted name, as the weights have it: `layer1.0.conv1` is conv1 of 0 of layer1
        parent = self
        *path, last = name.split(".")
        for part in path:
            if part not in parent._modules:
                parent.add_module(part, nn.Module())
            parent = parent._modules[part]
        parent.add_module(last, module)

    def forward(self, x):
        m = self.get_submodule
{forward}"#,
        classes = m.classes(),
    );
    format!("{text}{SEAL}{:08x}\n", crc32c::crc32c(text.as_bytes()))
}

/// `[0.5, 1.25, ...]`, eight values a line.
fn python_list<T: std::fmt::Debug>(v: &[T]) -> String {
    let lines: Vec<String> = (v.chunks(8))
        .map(|c| {
            c.iter()
                .map(|x| format!("{x:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .collect();
    format!("[{}]", lines.join(",\n            "))
}

/// One `self._add(NAME, MODULE)` line of `__init__`.
fn add(init: &mut String, name: &str, module: &str) {
    let _ = writeln!(init, "        self._add(\"{name}\", {module})");
}

#[cfg(test)]
mod tests;
