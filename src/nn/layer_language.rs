//! The layer language, e.g. `conv32k3,pool2,dense128` or
//! `conv16k3p1,bn,basic16,basic32s2,basic64s2,gap`:
//!
//! - `convNkK[sS][pP]`: N output channels, a KxK kernel, stride S (default 1), zero padding P
//!   (default 0); `dwconvK[sS][pP]`: a depthwise KxK convolution (channels kept);
//! - `denseN`: a fully connected layer of N units (flattening an image input);
//! - each of those is followed by ReLU, unless the next token says otherwise: `bn` puts batch
//!   norm between the layer and its activation (and drops the layer's bias), `relu6` makes it
//!   ReLU6, `linear` leaves it out, `relu` says the default;
//! - `poolK[sS][pP]`: KxK max pooling (stride S, default K; padding P, default 0);
//!   `avgpoolK[sS][pP]`: the same averaging; `gap`: the global average of each channel;
//! - `dropoutP`: dropout with probability P in (0, 1), e.g. dropout0.2;
//! - residual blocks: `basicN[sS]` (ResNet's: two 3x3 convs with batch norm, a projection
//!   shortcut where the shape changes, then ReLU), `bottleneckN[sS]` (1x1, 3x3, 1x1 to 4N),
//!   `invertedN[tT][sS]` (MobileNetV2's: 1x1 expansion by T (default 6), 3x3 depthwise, 1x1
//!   projection, no activation after; the input added where the shape allows).
//!
//! A final dense layer to the number of classes (no activation) is implicit.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// Layers a spec may have (the implicit output layer not counted).
pub(crate) const MAX_LAYERS: usize = 256;
/// Channel and unit counts a layer may have.
const MAX_WIDTH: usize = 1 << 16;
/// Largest kernel, stride and padding.
const MAX_WINDOW: usize = 256;

const FORMS: &str = "use convNkK[sS][pP] (e.g. conv32k3, conv64k3s2p1), dwconvK[sS][pP], denseN, bn, relu, relu6, linear, poolK[sS][pP], avgpoolK[sS][pP], gap, dropoutP (e.g. dropout0.2), basicN[sS], bottleneckN[sS] or invertedN[tT][sS]";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    Conv {
        channels: usize,
        kernel: usize,
        stride: usize,
        pad: usize,
    },
    DwConv {
        kernel: usize,
        stride: usize,
        pad: usize,
    },
    Dense {
        units: usize,
    },
    /// Batch norm between the layer before and its activation.
    Bn,
    /// The activation of the layer before: ReLU (the default), ReLU6, or none (`linear`).
    Relu,
    Relu6,
    Linear,
    /// Max pooling.
    Pool {
        kernel: usize,
        stride: usize,
        pad: usize,
    },
    AvgPool {
        kernel: usize,
        stride: usize,
        pad: usize,
    },
    Gap,
    /// Dropout probability in thousandths.
    Dropout {
        milli: u32,
    },
    Basic {
        channels: usize,
        stride: usize,
    },
    Bottleneck {
        channels: usize,
        stride: usize,
    },
    Inverted {
        channels: usize,
        expand: usize,
        stride: usize,
    },
}

impl Layer {
    /// Layers whose output takes an activation (ReLU unless the next token says otherwise).
    pub fn activates(&self) -> bool {
        matches!(
            self,
            Layer::Conv { .. }
                | Layer::DwConv { .. }
                | Layer::Dense { .. }
                | Layer::Basic { .. }
                | Layer::Bottleneck { .. }
        )
    }
}

fn window(
    f: &mut fmt::Formatter<'_>,
    kind: &str,
    kernel: usize,
    stride: usize,
    pad: usize,
    default_stride: usize,
) -> fmt::Result {
    write!(f, "{kind}{kernel}")?;
    if stride != default_stride {
        write!(f, "s{stride}")?;
    }
    if pad != 0 {
        write!(f, "p{pad}")?;
    }
    Ok(())
}

/// The token, defaults left out: `conv32k3`, `conv64k3s2p1`, `pool2`, `pool3s2`, `dense128`.
impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let strided = |f: &mut fmt::Formatter<'_>, s: usize| match s {
            1 => Ok(()),
            s => write!(f, "s{s}"),
        };
        match *self {
            Layer::Conv {
                channels,
                kernel,
                stride,
                pad,
            } => window(f, &format!("conv{channels}k"), kernel, stride, pad, 1),
            Layer::DwConv {
                kernel,
                stride,
                pad,
            } => window(f, "dwconv", kernel, stride, pad, 1),
            Layer::Pool {
                kernel,
                stride,
                pad,
            } => window(f, "pool", kernel, stride, pad, kernel),
            Layer::AvgPool {
                kernel,
                stride,
                pad,
            } => window(f, "avgpool", kernel, stride, pad, kernel),
            Layer::Dense { units } => write!(f, "dense{units}"),
            Layer::Bn => write!(f, "bn"),
            Layer::Relu => write!(f, "relu"),
            Layer::Relu6 => write!(f, "relu6"),
            Layer::Linear => write!(f, "linear"),
            Layer::Gap => write!(f, "gap"),
            Layer::Dropout { milli } => write!(f, "dropout{}", milli as f64 / 1000.0),
            Layer::Basic { channels, stride } => {
                write!(f, "basic{channels}")?;
                strided(f, stride)
            }
            Layer::Bottleneck { channels, stride } => {
                write!(f, "bottleneck{channels}")?;
                strided(f, stride)
            }
            Layer::Inverted {
                channels,
                expand,
                stride,
            } => {
                write!(f, "inverted{channels}")?;
                if expand != 6 {
                    write!(f, "t{expand}")?;
                }
                strided(f, stride)
            }
        }
    }
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum SpecError {
    #[error("empty layer spec: {FORMS}, separated by commas")]
    Empty,
    #[error("{0} layers: use at most {MAX_LAYERS}")]
    TooManyLayers(usize),
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
                    token: crate::text::excerpt(tok),
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

/// Whether `s` reads like a layer spec (and not like a preset's or an MLP's name): it starts
/// with a layer, or one of its comma-separated tokens does (`,conv32k3` is a spec with an
/// empty first layer, not an unknown model).
pub fn looks_like_layers(s: &str) -> bool {
    let layer = |t: &str| KINDS.iter().any(|k| t.trim_start().starts_with(k));
    layer(s) || (s.contains(',') && s.split(',').any(layer))
}

/// Token kinds, longest first where one is a prefix of another.
const KINDS: [&str; 15] = [
    "conv",
    "dwconv",
    "dense",
    "bn",
    "relu6",
    "relu",
    "linear",
    "pool",
    "avgpool",
    "gap",
    "dropout",
    "basic",
    "bottleneck",
    "inverted",
    "maxpool",
];

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
            return Err(format!(
                "expected the {what} after `{}`; {FORMS}",
                crate::text::excerpt(read)
            ));
        }
        self.pos += digits;
        match rest[..digits].parse::<usize>() {
            Ok(n) if (lo..=max).contains(&n) => Ok(n),
            _ => Err(format!(
                "{what} {} must be between {lo} and {max}",
                crate::text::excerpt(&rest[..digits])
            )),
        }
    }

    /// `c` and a number, or `default` when `c` is not next.
    fn option(&mut self, c: char, what: &str, lo: usize, default: usize) -> Result<usize, String> {
        match self.eat(c) {
            true => self.number(what, lo, MAX_WINDOW),
            false => Ok(default),
        }
    }

    fn end(&self) -> Result<(), String> {
        match &self.tok[self.pos..] {
            "" => Ok(()),
            rest => {
                // (`conv8k3p1s2`: the options come in one order)
                let order = match rest.starts_with('s') && self.tok[..self.pos].contains('p') {
                    true => " (the stride comes before the padding, e.g. conv64k3s2p1)",
                    false => "",
                };
                Err(format!(
                    "unexpected `{}` after `{}`{order}; {FORMS}",
                    crate::text::excerpt(rest),
                    crate::text::excerpt(&self.tok[..self.pos])
                ))
            }
        }
    }
}

fn parse_layer(tok: &str) -> Result<Layer, String> {
    if tok.is_empty() {
        return Err(format!(
            "empty layer (a comma at an end, or two in a row?); {FORMS}"
        ));
    }
    let kind = KINDS
        .into_iter()
        .filter(|k| tok.starts_with(k))
        .max_by_key(|k| k.len())
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
            Layer::Conv {
                channels,
                kernel,
                stride: p.option('s', "stride", 1, 1)?,
                pad: p.option('p', "padding", 0, 0)?,
            }
        }
        "dwconv" => {
            let kernel = p.number("kernel size", 1, MAX_WINDOW)?;
            Layer::DwConv {
                kernel,
                stride: p.option('s', "stride", 1, 1)?,
                pad: p.option('p', "padding", 0, 0)?,
            }
        }
        "pool" | "maxpool" | "avgpool" => {
            let kernel = p.number("window size", 1, MAX_WINDOW)?;
            let stride = p.option('s', "stride", 1, kernel)?;
            let pad = p.option('p', "padding", 0, 0)?;
            match kind {
                "avgpool" => Layer::AvgPool {
                    kernel,
                    stride,
                    pad,
                },
                _ => Layer::Pool {
                    kernel,
                    stride,
                    pad,
                },
            }
        }
        "dense" => Layer::Dense {
            units: p.number("unit count", 1, MAX_WIDTH)?,
        },
        "bn" => Layer::Bn,
        "relu" => Layer::Relu,
        "relu6" => Layer::Relu6,
        "linear" => Layer::Linear,
        "gap" => Layer::Gap,
        "dropout" => {
            let rest = &tok[p.pos..];
            let prob: f64 = rest.parse().map_err(|_| {
                format!("expected a probability after `dropout`, e.g. dropout0.2; {FORMS}")
            })?;
            if prob == 0.0 {
                return Err(format!(
                    "dropout probability {rest} drops nothing: leave the layer out"
                ));
            }
            if !(prob > 0.0 && prob < 1.0) {
                return Err(format!(
                    "dropout probability {rest} must be more than 0 and less than 1"
                ));
            }
            // (kept in thousandths: a finer one would be trained and recorded as another)
            let milli = (prob * 1000.0).round();
            if (prob * 1000.0 - milli).abs() > 1e-6 || !(1.0..=999.0).contains(&milli) {
                return Err(format!(
                    "dropout probability {rest} is finer than thousandths: give one of 0.001 to 0.999 in steps of 0.001, e.g. dropout{}",
                    (milli.clamp(1.0, 999.0)) / 1000.0
                ));
            }
            p.pos = tok.len();
            Layer::Dropout {
                milli: milli as u32,
            }
        }
        "basic" | "bottleneck" => {
            let channels = p.number("channel count", 1, MAX_WIDTH)?;
            let stride = p.option('s', "stride", 1, 1)?;
            match kind {
                "basic" => Layer::Basic { channels, stride },
                _ => Layer::Bottleneck { channels, stride },
            }
        }
        _ => {
            let channels = p.number("channel count", 1, MAX_WIDTH)?;
            let expand = p.option('t', "expansion", 1, 6)?;
            Layer::Inverted {
                channels,
                expand,
                stride: p.option('s', "stride", 1, 1)?,
            }
        }
    };
    p.end()?;
    Ok(layer)
}

#[cfg(test)]
mod tests;
