//! The layer language of convolutional models, e.g. `conv32k3,pool2,conv64k3,pool2,dense128`:
//!
//! - `convNkK[sS][pP]`: N output channels, a KxK kernel, stride S (default 1), zero padding P
//!   on each side (default 0), then ReLU;
//! - `poolK[sS]`: KxK max pooling, stride S (default K), no padding, partial windows dropped;
//! - `denseN`: a fully connected layer of N units (flattening an image input), then ReLU.
//!
//! A final dense layer to the number of classes (no ReLU) is implicit. `LayerSpec::plan` walks
//! an input shape through the layers, giving every layer's output shape and parameter count.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

use crate::nn::window::out_size;

/// Layers a spec may have (the implicit output layer not counted).
const MAX_LAYERS: usize = 64;
/// Channel and unit counts a layer may have.
const MAX_WIDTH: usize = 1 << 16;
/// Largest kernel, stride and padding.
const MAX_WINDOW: usize = 256;

const FORMS: &str =
    "use convNkK[sS][pP] (e.g. conv32k3, conv64k3s2p1), poolK[sS] (e.g. pool2) or denseN (e.g. dense128)";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    Conv {
        channels: usize,
        kernel: usize,
        stride: usize,
        pad: usize,
    },
    Pool {
        kernel: usize,
        stride: usize,
    },
    Dense {
        units: usize,
    },
}

/// The token, defaults left out: `conv32k3`, `conv64k3s2p1`, `pool2`, `pool3s2`, `dense128`.
impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Layer::Conv {
                channels,
                kernel,
                stride,
                pad,
            } => {
                write!(f, "conv{channels}k{kernel}")?;
                if stride != 1 {
                    write!(f, "s{stride}")?;
                }
                if pad != 0 {
                    write!(f, "p{pad}")?;
                }
                Ok(())
            }
            Layer::Pool { kernel, stride } if stride == kernel => write!(f, "pool{kernel}"),
            Layer::Pool { kernel, stride } => write!(f, "pool{kernel}s{stride}"),
            Layer::Dense { units } => write!(f, "dense{units}"),
        }
    }
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum SpecError {
    #[error("empty layer spec: {FORMS}, separated by commas")]
    Empty,
    #[error("{0} layers: use at most {MAX_LAYERS}")]
    TooManyLayers(usize),
    #[error("a model needs at least 1 class")]
    NoClasses,
    #[error("the {0} input is empty")]
    EmptyInput(Shape),
    /// `index` counts from 1; the implicit output layer is the last index plus one.
    #[error("layer {index} `{token}`: {reason}")]
    Layer {
        index: usize,
        token: String,
        reason: String,
    },
}

/// A comma-separated list of layers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerSpec {
    pub layers: Vec<Layer>,
}

impl FromStr for LayerSpec {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, SpecError> {
        if s.trim().is_empty() {
            return Err(SpecError::Empty);
        }
        let tokens: Vec<&str> = s.split(',').map(str::trim).collect();
        if tokens.len() > MAX_LAYERS {
            return Err(SpecError::TooManyLayers(tokens.len()));
        }
        let layers = tokens
            .iter()
            .enumerate()
            .map(|(i, tok)| {
                parse_layer(tok).map_err(|reason| SpecError::Layer {
                    index: i + 1,
                    token: tok.to_string(),
                    reason,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(LayerSpec { layers })
    }
}

impl fmt::Display for LayerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tokens: Vec<String> = self.layers.iter().map(|l| l.to_string()).collect();
        write!(f, "{}", tokens.join(","))
    }
}

/// Reads a token left to right; errors quote what was read so far.
struct Scanner<'a> {
    tok: &'a str,
    pos: usize,
}

impl Scanner<'_> {
    fn eat(&mut self, c: char) -> bool {
        let hit = self.tok[self.pos..].starts_with(c);
        self.pos += hit as usize;
        hit
    }

    /// A whole number in lo..=MAX after the text read so far, called `what`.
    fn number(&mut self, what: &str, lo: usize, max: usize) -> Result<usize, String> {
        let rest = &self.tok[self.pos..];
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let read = &self.tok[..self.pos];
        if digits == 0 {
            return Err(format!("expected the {what} after `{read}`; {FORMS}"));
        }
        self.pos += digits;
        match rest[..digits].parse::<usize>() {
            Ok(n) if (lo..=max).contains(&n) => Ok(n),
            _ => Err(format!(
                "{what} {} must be between {lo} and {max}",
                &rest[..digits]
            )),
        }
    }

    fn end(&self) -> Result<(), String> {
        match &self.tok[self.pos..] {
            "" => Ok(()),
            rest => Err(format!(
                "unexpected `{rest}` after `{}`; {FORMS}",
                &self.tok[..self.pos]
            )),
        }
    }
}

fn parse_layer(tok: &str) -> Result<Layer, String> {
    if tok.is_empty() {
        return Err(format!("empty layer (two commas in a row?); {FORMS}"));
    }
    let kind = ["conv", "pool", "dense"]
        .into_iter()
        .find(|k| tok.starts_with(k))
        .ok_or_else(|| format!("unknown layer; {FORMS}"))?;
    let mut p = Scanner {
        tok,
        pos: kind.len(),
    };
    let layer = match kind {
        "conv" => {
            let channels = p.number("output channel count", 1, MAX_WIDTH)?;
            if !p.eat('k') {
                return Err(format!(
                    "expected `k` and the kernel size after `{}`; {FORMS}",
                    &tok[..p.pos]
                ));
            }
            let kernel = p.number("kernel size", 1, MAX_WINDOW)?;
            let stride = match p.eat('s') {
                true => p.number("stride", 1, MAX_WINDOW)?,
                false => 1,
            };
            let pad = match p.eat('p') {
                true => p.number("padding", 0, MAX_WINDOW)?,
                false => 0,
            };
            Layer::Conv {
                channels,
                kernel,
                stride,
                pad,
            }
        }
        "pool" => {
            let kernel = p.number("window size", 1, MAX_WINDOW)?;
            let stride = match p.eat('s') {
                true => p.number("stride", 1, MAX_WINDOW)?,
                false => kernel,
            };
            Layer::Pool { kernel, stride }
        }
        _ => Layer::Dense {
            units: p.number("unit count", 1, MAX_WIDTH)?,
        },
    };
    p.end()?;
    Ok(layer)
}

/// A tensor shape per sample: an image CxHxW or a flat vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Image { c: usize, h: usize, w: usize },
    Flat(usize),
}

impl Shape {
    /// Elements per sample (shapes out of a `Plan` never overflow).
    pub fn numel(&self) -> usize {
        self.checked_numel().expect("shape overflows usize")
    }

    fn checked_numel(&self) -> Option<usize> {
        match *self {
            Shape::Image { c, h, w } => c.checked_mul(h)?.checked_mul(w),
            Shape::Flat(n) => Some(n),
        }
    }
}

/// `1x28x28`, or `784` for a flat vector.
impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Image { c, h, w } => write!(f, "{c}x{h}x{w}"),
            Shape::Flat(n) => write!(f, "{n}"),
        }
    }
}

/// One layer with its input and output shapes per sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedLayer {
    pub layer: Layer,
    pub input: Shape,
    pub output: Shape,
    /// Weights plus biases: conv OC*C*KH*KW + OC, dense IN*N + N, pool 0.
    pub params: usize,
    /// ReLU applied to the output (every conv and dense layer but the implicit last one).
    pub relu: bool,
}

impl PlannedLayer {
    /// conv [OC, C, K, K] (PyTorch's layout, `conv2d_forward`'s), dense [IN, N]
    /// (`linear_forward`'s, the transpose of PyTorch's), pool none.
    pub fn weight_shape(&self) -> Option<Vec<usize>> {
        match (self.layer, self.input) {
            (
                Layer::Conv {
                    channels, kernel, ..
                },
                Shape::Image { c, .. },
            ) => Some(vec![channels, c, kernel, kernel]),
            (Layer::Dense { units }, input) => Some(vec![input.numel(), units]),
            _ => None,
        }
    }
}

/// `conv 1x28x28 -> 32x26x26`
impl fmt::Display for PlannedLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.layer {
            Layer::Conv { .. } => "conv",
            Layer::Pool { .. } => "pool",
            Layer::Dense { .. } => "dense",
        };
        write!(f, "{kind} {} -> {}", self.input, self.output)
    }
}

/// Every layer of a spec, the implicit output layer last, and the total parameter count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub layers: Vec<PlannedLayer>,
    pub n_params: usize,
}

/// One line per layer, `conv 1x28x28 -> 32x26x26 (320 params)`, then the total.
impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for l in &self.layers {
            writeln!(f, "{l} ({} params)", l.params)?;
        }
        write!(f, "{} params", self.n_params)
    }
}

impl LayerSpec {
    /// Walks `input` through the layers and a final dense layer to `classes`, refusing a layer
    /// that would shrink the image below 1x1 or follow a dense layer with conv or pool.
    pub fn plan(&self, input: Shape, classes: usize) -> Result<Plan, SpecError> {
        if classes == 0 {
            return Err(SpecError::NoClasses);
        }
        if input.checked_numel().is_none_or(|n| n == 0) {
            return Err(SpecError::EmptyInput(input));
        }
        let output = Layer::Dense { units: classes };
        let mut shape = input;
        let mut layers = Vec::new();
        let mut n_params = 0usize;
        for (i, &layer) in self.layers.iter().chain([&output]).enumerate() {
            let last = i == self.layers.len();
            let fail = |reason: String| SpecError::Layer {
                index: i + 1,
                token: if last {
                    format!("{layer} (output)")
                } else {
                    layer.to_string()
                },
                reason,
            };
            let (out, params) = step(layer, shape).map_err(fail)?;
            n_params = n_params
                .checked_add(params)
                .ok_or_else(|| fail("the parameter count overflows".into()))?;
            layers.push(PlannedLayer {
                layer,
                input: shape,
                output: out,
                params,
                relu: !last && !matches!(layer, Layer::Pool { .. }),
            });
            shape = out;
        }
        Ok(Plan { layers, n_params })
    }
}

/// One layer's output shape and parameter count.
fn step(layer: Layer, input: Shape) -> Result<(Shape, usize), String> {
    let overflow = || "its sizes overflow".to_string();
    let image = |kind: &str| match input {
        Shape::Image { c, h, w } => Ok((c, h, w)),
        Shape::Flat(n) => Err(format!(
            "{kind} needs an image, but its input is a flat vector of {n} \
             (conv and pool layers must come before dense ones)"
        )),
    };
    match layer {
        Layer::Conv {
            channels,
            kernel,
            stride,
            pad,
        } => {
            let (c, h, w) = image("conv")?;
            let (oh, ow) =
                out_size(h, w, kernel, kernel, stride, pad).map_err(|e| e.to_string())?;
            let out = Shape::Image {
                c: channels,
                h: oh,
                w: ow,
            };
            let params = c
                .checked_mul(kernel * kernel)
                .and_then(|n| n.checked_add(1))
                .and_then(|n| n.checked_mul(channels));
            match (out.checked_numel(), params) {
                (Some(_), Some(p)) => Ok((out, p)),
                _ => Err(overflow()),
            }
        }
        Layer::Pool { kernel, stride } => {
            let (c, h, w) = image("pool")?;
            let (oh, ow) = out_size(h, w, kernel, kernel, stride, 0).map_err(|e| e.to_string())?;
            Ok((Shape::Image { c, h: oh, w: ow }, 0))
        }
        Layer::Dense { units } => {
            let params = input
                .checked_numel()
                .and_then(|n| n.checked_add(1))
                .and_then(|n| n.checked_mul(units))
                .ok_or_else(overflow)?;
            Ok((Shape::Flat(units), params))
        }
    }
}

#[cfg(test)]
mod tests;
