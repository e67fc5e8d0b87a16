//! `--model`: an MLP's hidden widths, the layer language, or a preset; parsed, written back,
//! and built into a graph.

use std::fmt;
use std::str::FromStr;

use crate::nn::layer_language::{looks_like_layers, Layer, LayerSpec, SpecError};
use crate::nn::shape::Shape;

use super::build::{Builder, WeightInit};
use super::op::{Act, ValueId};
use super::presets::{basic_block, bottleneck_block, inverted_block, Preset, NAMES};
use super::Model;

/// What `--model` says: `mlp:H1,H2,...` (hidden widths), the layer language of `nn::layer_language`
/// (`conv32k3,pool2,dense128`), or a preset (`resnet20`, `mobilenetv2:0.5`). An MLP is a
/// spec of dense layers only, and is written `mlp:...` either way. Input and output sizes
/// come from the data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelSpec {
    Layers(LayerSpec),
    Preset(Preset),
}

impl ModelSpec {
    /// An MLP with these hidden widths.
    pub fn mlp(hidden: &[usize]) -> ModelSpec {
        ModelSpec::Layers(LayerSpec {
            layers: hidden.iter().map(|&units| Layer::Dense { units }).collect(),
        })
    }

    /// Only dense layers: trains on any input, flat or image.
    pub fn is_mlp(&self) -> bool {
        match self {
            ModelSpec::Layers(l) => l.layers.iter().all(|l| matches!(l, Layer::Dense { .. })),
            ModelSpec::Preset(_) => false,
        }
    }

    /// Whether torchvision has a class of these names (resnet18/34/50, mobilenet_v2): `export`
    /// names it, where for the others it writes the module (`pytorch::module`).
    pub fn in_torchvision(&self) -> bool {
        matches!(
            self,
            ModelSpec::Preset(Preset::ResNet { .. } | Preset::MobileNetV2 { .. })
        )
    }

    /// The graph on samples of shape `input` with `classes` outputs.
    pub fn build(&self, input: Shape, classes: usize) -> Result<Model, String> {
        if classes == 0 {
            return Err("a model needs at least 1 class".into());
        }
        if input.numel() == 0 {
            return Err(format!("the {input} input is empty"));
        }
        match self {
            ModelSpec::Preset(p) => p.build(input, classes),
            ModelSpec::Layers(spec) => {
                // an MLP reads any input as a flat vector
                let input = match self.is_mlp() {
                    true => Shape::Flat(input.numel()),
                    false => input,
                };
                let built = build_layers(spec, input, classes, self.is_mlp());
                let built = built.map_err(|e| format!("model `{self}` on {input} inputs: {e}"))?;
                Ok(Model {
                    layer_list: true,
                    ..built
                })
            }
        }
    }
}

impl Default for ModelSpec {
    fn default() -> Self {
        ModelSpec::mlp(&[128])
    }
}

/// The graph of a layer spec: each layer named `{kind}.{index}` (`conv.0.weight`; an MLP's
/// `mlp.{index}`), the implicit output layer after the last.
fn build_layers(
    spec: &LayerSpec,
    input: Shape,
    classes: usize,
    mlp: bool,
) -> Result<Model, SpecError> {
    let mut b = Builder::new(input);
    let mut x = b.input();
    // the value awaiting the activation of the layer that made it
    let mut pending = false;
    let layers = &spec.layers;
    for (i, &layer) in layers.iter().enumerate() {
        let fail = |reason: String| SpecError::Layer {
            index: i + 1,
            token: layer.to_string(),
            reason,
        };
        let then_bn = layers.get(i + 1) == Some(&Layer::Bn);
        let act = match layer {
            Layer::Relu => Some(Act::Relu),
            Layer::Relu6 => Some(Act::Relu6),
            Layer::Linear => Some(Act::None),
            _ => None,
        };
        if let Some(a) = act {
            if !pending {
                let does = match a {
                    Act::None => "leaves out",
                    _ => "sets",
                };
                let before = match i {
                    0 => "there is none".to_string(),
                    _ => format!("`{}` has none to set", layers[i - 1]),
                };
                return Err(fail(format!(
                    "`{layer}` {does} the activation of the layer before, but {before} \
                     (it follows conv, dwconv, dense, basic or bottleneck, or their bn, once)"
                )));
            }
            x = b.act(x, a).map_err(fail)?;
            pending = false;
            continue;
        }
        if pending && layer != Layer::Bn {
            x = b.act(x, Act::Relu).map_err(fail)?;
            pending = false;
        }
        let kind = match (mlp, layer) {
            (true, _) => "mlp",
            _ => layer_kind(layer),
        };
        let name = format!("{kind}.{i}");
        x = add_layer(&mut b, &name, x, layer, !then_bn).map_err(fail)?;
        pending = pending || layer.activates();
    }
    let i = layers.len();
    let fail = |reason: String| SpecError::Layer {
        index: i + 1,
        token: format!("dense{classes} (output)"),
        reason,
    };
    if pending {
        x = b.act(x, Act::Relu).map_err(fail)?;
    }
    let kind = if mlp { "mlp" } else { "dense" };
    let out = b
        .linear(
            &format!("{kind}.{i}"),
            x,
            classes,
            true,
            WeightInit::Default,
        )
        .map_err(fail)?;
    Ok(b.finish(out))
}

/// `conv`, `pool`, `basic`, ...: the token's word, which names its parameters.
fn layer_kind(layer: Layer) -> &'static str {
    match layer {
        Layer::Conv { .. } => "conv",
        Layer::DwConv { .. } => "dwconv",
        Layer::Dense { .. } => "dense",
        Layer::Bn => "bn",
        Layer::Pool { .. } => "pool",
        Layer::AvgPool { .. } => "avgpool",
        Layer::Gap => "gap",
        Layer::Dropout { .. } => "dropout",
        Layer::Basic { .. } => "basic",
        Layer::Bottleneck { .. } => "bottleneck",
        Layer::Inverted { .. } => "inverted",
        Layer::Relu | Layer::Relu6 | Layer::Linear => "act",
    }
}

fn add_layer(
    b: &mut Builder,
    name: &str,
    x: ValueId,
    layer: Layer,
    bias: bool,
) -> Result<ValueId, String> {
    let default = WeightInit::Default;
    match layer {
        Layer::Conv {
            channels,
            kernel,
            stride,
            pad,
        } => b.conv(name, x, channels, kernel, stride, pad, 1, bias, default),
        Layer::DwConv {
            kernel,
            stride,
            pad,
        } => {
            let c = match b.shape(x) {
                Shape::Image { c, .. } => c,
                Shape::Flat(_) => 1,
            };
            b.conv(name, x, c, kernel, stride, pad, c, bias, default)
        }
        Layer::Dense { units } => b.linear(name, x, units, bias, default),
        Layer::Bn => b.bn(name, x),
        Layer::Pool {
            kernel,
            stride,
            pad,
        } => b.maxpool(x, kernel, stride, pad),
        Layer::AvgPool {
            kernel,
            stride,
            pad,
        } => b.avgpool(x, kernel, stride, pad),
        Layer::Gap => b.gap(x),
        Layer::Dropout { milli } => b.dropout(x, milli as f32 / 1000.0),
        Layer::Basic { channels, stride } => basic_block(b, name, x, channels, stride),
        Layer::Bottleneck { channels, stride } => bottleneck_block(b, name, x, channels, stride),
        Layer::Inverted {
            channels,
            expand,
            stride,
        } => inverted_block(b, name, x, channels, expand, stride),
        Layer::Relu | Layer::Relu6 | Layer::Linear => unreachable!("activations are not layers"),
    }
}

/// Hidden layers an MLP may have: as many as a layer list (whose dense layers alone are said,
/// and recorded in checkpoints, as the MLP).
const MAX_HIDDEN_LAYERS: usize = crate::nn::layer_language::MAX_LAYERS;

const FORMS: &str = "use mlp:H1,H2,... (hidden widths, e.g. mlp:128 or mlp:256,128), a network";

impl FromStr for ModelSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        ModelSpec::parse_exact(s).map_err(|e| {
            // a name as torchvision or a capital spells it (mobilenet_v2, ResNet20, Conv32k3)
            const NETWORKS: [&str; 9] = [
                "resnet20",
                "resnet32",
                "resnet44",
                "resnet56",
                "resnet18",
                "resnet34",
                "resnet50",
                "mobilenetv2",
                "mlp",
            ];
            let lower = s.to_ascii_lowercase();
            let meant = match crate::text::nearest(s, &NETWORKS) {
                Some(n) if n != s => Some(n.to_string()),
                _ => (lower != s && ModelSpec::parse_exact(&lower).is_ok()).then_some(lower),
            };
            match meant {
                Some(m) if e.starts_with("unknown model") => format!("{e}; did you mean {m}?"),
                _ => e,
            }
        })
    }
}

impl ModelSpec {
    /// `--model` as written (`from_str` adds what a misspelt one likely means).
    fn parse_exact(s: &str) -> Result<Self, String> {
        // (spaces about it, from a quoted flag or a config file, are no part of it)
        let s = s.trim();
        // a spec in a message: its start, however long it is
        let shown = crate::text::excerpt(s);
        let Some(rest) = s
            .strip_prefix("mlp:")
            .or_else(|| (s == "mlp").then_some(""))
        else {
            if looks_like_layers(s) {
                return s
                    .parse::<LayerSpec>()
                    .map(ModelSpec::Layers)
                    .map_err(|e| format!("model `{shown}`: {e}"));
            }
            if s.starts_with("resnet") || s.starts_with("mobilenet") {
                return s.parse().map(ModelSpec::Preset);
            }
            return Err(format!(
                "unknown model `{shown}`: {FORMS} ({NAMES}) or layers like conv32k3,pool2,dense128 \
                 (convNkK[sS][pP], poolK[sS][pP], denseN, bn, basicN[sS], ...; mgtop-train models lists them all)"
            ));
        };
        if s != "mlp" && rest.trim().is_empty() {
            return Err(format!(
                "model `{shown}`: no hidden width after the colon; use e.g. mlp:128 or mlp:256,128, \
                 or `mlp` alone for a linear classifier (no hidden layer)"
            ));
        }
        let mut hidden = Vec::new();
        for part in rest.split(',').filter(|_| s != "mlp") {
            if part.trim().is_empty() {
                return Err(format!(
                    "model `{shown}`: an empty hidden width between commas; use e.g. mlp:128,64"
                ));
            }
            let h: usize = part.trim().parse().map_err(|_| {
                format!(
                    "model `{shown}`: hidden width `{}` is not a whole number; use e.g. mlp:128,64",
                    crate::text::excerpt(part)
                )
            })?;
            if h == 0 || h > 1 << 16 {
                return Err(format!(
                    "model `{shown}`: hidden width {h} must be between 1 and 65536"
                ));
            }
            hidden.push(h);
        }
        if hidden.len() > MAX_HIDDEN_LAYERS {
            return Err(format!(
                "model `{shown}`: {} hidden layers; use at most {MAX_HIDDEN_LAYERS}",
                hidden.len()
            ));
        }
        Ok(ModelSpec::mlp(&hidden))
    }
}

/// `mlp:128,64` for dense layers only, else the layer list or the preset's name.
impl fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelSpec::Preset(p) => write!(f, "{p}"),
            ModelSpec::Layers(l) if !self.is_mlp() => write!(f, "{l}"),
            ModelSpec::Layers(l) => {
                let hs: Vec<String> = (l.layers.iter())
                    .map(|l| match l {
                        Layer::Dense { units } => units.to_string(),
                        _ => unreachable!("an MLP has dense layers only"),
                    })
                    .collect();
                match hs.is_empty() {
                    // no hidden layer: a linear classifier
                    true => write!(f, "mlp"),
                    false => write!(f, "mlp:{}", hs.join(",")),
                }
            }
        }
    }
}
