//! The networks people train, in torchvision's layouts and names: the CIFAR ResNets (20/32/44/56),
//! ResNet-18/34/50 and MobileNetV2; and their blocks, which the layer language uses too.

use std::fmt;
use std::str::FromStr;

use crate::nn::shape::Shape;

use super::build::{Builder, WeightInit};
use super::op::{Act, ValueId};
use super::Model;

/// A named network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    /// He et al.'s CIFAR ResNet of depth 6n+2: 3 stages of n basic blocks, 16/32/64 channels.
    CifarResNet { depth: usize },
    /// torchvision's resnet18/34 (basic blocks) and resnet50 (bottlenecks).
    ResNet { depth: usize },
    /// torchvision's MobileNetV2 at a width multiplier (in thousandths: 1000 is width 1.0).
    MobileNetV2 { width_milli: u32 },
}

pub const NAMES: &str = "resnet20, resnet32, resnet44, resnet56, resnet18, resnet34, resnet50, mobilenetv2 or mobilenetv2:WIDTH (e.g. mobilenetv2:0.5)";

impl FromStr for Preset {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let shown = crate::text::excerpt(s);
        if let Some(rest) = s.strip_prefix("mobilenetv2") {
            let width = match rest.strip_prefix(':') {
                None if rest.is_empty() => 1.0,
                Some(w) => w.parse::<f64>().map_err(|_| {
                    format!(
                        "model `{shown}`: width `{}` is not a number; use e.g. mobilenetv2:0.5",
                        crate::text::excerpt(w)
                    )
                })?,
                None => return Err(format!("unknown model `{shown}`: use {NAMES}")),
            };
            if !(0.1..=4.0).contains(&width) {
                return Err(format!(
                    "model `{shown}`: width {width} must be between 0.1 and 4"
                ));
            }
            return Ok(Preset::MobileNetV2 {
                width_milli: (width * 1000.0).round() as u32,
            });
        }
        match s {
            "resnet20" | "resnet32" | "resnet44" | "resnet56" => Ok(Preset::CifarResNet {
                depth: s[6..].parse().expect("two digits"),
            }),
            "resnet18" | "resnet34" | "resnet50" => Ok(Preset::ResNet {
                depth: s[6..].parse().expect("two digits"),
            }),
            _ => Err(format!("unknown model `{shown}`: use {NAMES}")),
        }
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Preset::CifarResNet { depth } | Preset::ResNet { depth } => write!(f, "resnet{depth}"),
            Preset::MobileNetV2 { width_milli: 1000 } => write!(f, "mobilenetv2"),
            Preset::MobileNetV2 { width_milli } => {
                write!(f, "mobilenetv2:{}", width_milli as f64 / 1000.0)
            }
        }
    }
}

/// Images this small get the CIFAR stem (3x3 stride 1, no max pool); ImageNet's stem would
/// shrink them to nothing.
pub const SMALL: usize = 64;

impl Preset {
    pub fn build(self, input: Shape, classes: usize) -> Result<Model, String> {
        let Shape::Image { h, w, .. } = input else {
            return Err(format!(
                "model {self} needs images, but the data's samples are flat vectors of {}; \
                 use an image dataset or an MLP (mlp:128)",
                input.numel()
            ));
        };
        let mut b = Builder::new(input);
        let small = h.max(w) <= SMALL;
        let logits = match self {
            Preset::CifarResNet { depth } => cifar_resnet(&mut b, (depth - 2) / 6, classes),
            Preset::ResNet { depth } => resnet(&mut b, depth, classes, small),
            Preset::MobileNetV2 { width_milli } => {
                mobilenet_v2(&mut b, width_milli as f64 / 1000.0, classes, small)
            }
        }
        .map_err(|e| format!("model {self} on {input} inputs: {e}"))?;
        Ok(b.finish(logits))
    }
}

/// conv (no bias) + batch norm + activation, the unit these networks are made of;
/// the conv is `{conv}`, the batch norm `{bn}`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv_bn(
    b: &mut Builder,
    (conv, bn): (&str, &str),
    x: ValueId,
    oc: usize,
    k: usize,
    stride: usize,
    groups: usize,
    act: Act,
) -> Result<ValueId, String> {
    let y = b.conv(
        conv,
        x,
        oc,
        k,
        stride,
        k / 2,
        groups,
        false,
        WeightInit::KaimingOut,
    )?;
    let y = b.bn(bn, y)?;
    b.act(y, act)
}

fn channels(b: &Builder, x: ValueId) -> usize {
    match b.shape(x) {
        Shape::Image { c, .. } => c,
        Shape::Flat(n) => n,
    }
}

/// The shortcut of a residual block: `x` itself, or a 1x1 conv + batch norm
/// (`{name}.downsample.0/1`) where the block changes the channels or the size.
fn shortcut(
    b: &mut Builder,
    name: &str,
    x: ValueId,
    out: usize,
    stride: usize,
) -> Result<ValueId, String> {
    if stride == 1 && channels(b, x) == out {
        return Ok(x);
    }
    let (c, n) = (
        format!("{name}.downsample.0"),
        format!("{name}.downsample.1"),
    );
    conv_bn(b, (&c, &n), x, out, 1, stride, 1, Act::None)
}

/// torchvision's BasicBlock: 3x3 conv/stride, bn, relu, 3x3 conv, bn, + shortcut; the sum
/// is returned before its activation (ReLU in a ResNet).
pub(crate) fn basic_block(
    b: &mut Builder,
    name: &str,
    x: ValueId,
    planes: usize,
    stride: usize,
) -> Result<ValueId, String> {
    let n = |s: &str| format!("{name}.{s}");
    let y = conv_bn(
        b,
        (&n("conv1"), &n("bn1")),
        x,
        planes,
        3,
        stride,
        1,
        Act::Relu,
    )?;
    let y = conv_bn(b, (&n("conv2"), &n("bn2")), y, planes, 3, 1, 1, Act::None)?;
    let s = shortcut(b, name, x, planes, stride)?;
    b.add(y, s)
}

/// torchvision's Bottleneck (stride on the 3x3, ResNet v1.5): 1x1, 3x3/stride, 1x1 to
/// 4 x planes, + shortcut; the sum is returned before its activation.
pub(crate) fn bottleneck_block(
    b: &mut Builder,
    name: &str,
    x: ValueId,
    planes: usize,
    stride: usize,
) -> Result<ValueId, String> {
    let n = |s: &str| format!("{name}.{s}");
    let y = conv_bn(b, (&n("conv1"), &n("bn1")), x, planes, 1, 1, 1, Act::Relu)?;
    let y = conv_bn(
        b,
        (&n("conv2"), &n("bn2")),
        y,
        planes,
        3,
        stride,
        1,
        Act::Relu,
    )?;
    let y = conv_bn(
        b,
        (&n("conv3"), &n("bn3")),
        y,
        4 * planes,
        1,
        1,
        1,
        Act::None,
    )?;
    let s = shortcut(b, name, x, 4 * planes, stride)?;
    b.add(y, s)
}

/// torchvision's InvertedResidual: 1x1 expansion by `t` (none when t is 1), 3x3 depthwise
/// /stride, both with ReLU6, a linear 1x1 projection, + the input where the shape allows.
pub(crate) fn inverted_block(
    b: &mut Builder,
    name: &str,
    x: ValueId,
    out: usize,
    t: usize,
    stride: usize,
) -> Result<ValueId, String> {
    let cin = channels(b, x);
    let hidden = cin * t;
    let mut y = x;
    let mut i = 0;
    let unit = |i: usize| (format!("{name}.conv.{i}.0"), format!("{name}.conv.{i}.1"));
    if t != 1 {
        let (c, n) = unit(i);
        y = conv_bn(b, (&c, &n), y, hidden, 1, 1, 1, Act::Relu6)?;
        i += 1;
    }
    let (c, n) = unit(i);
    y = conv_bn(b, (&c, &n), y, hidden, 3, stride, hidden, Act::Relu6)?;
    let (c, n) = (
        format!("{name}.conv.{}", i + 1),
        format!("{name}.conv.{}", i + 2),
    );
    y = conv_bn(b, (&c, &n), y, out, 1, 1, 1, Act::None)?;
    if stride == 1 && cin == out {
        y = b.add(y, x)?;
    }
    Ok(y)
}

fn cifar_resnet(b: &mut Builder, n: usize, classes: usize) -> Result<ValueId, String> {
    b.note_stem("CIFAR ResNet: 3x3 stem, 3 stages of basic blocks at 16/32/64 channels");
    let x = conv_bn(b, ("conv1", "bn1"), b.input(), 16, 3, 1, 1, Act::Relu)?;
    stages(b, x, &[n; 3], &[16, 32, 64], false, classes)
}

fn resnet(b: &mut Builder, depth: usize, classes: usize, small: bool) -> Result<ValueId, String> {
    let counts = match depth {
        18 => [2, 2, 2, 2],
        34 | 50 => [3, 4, 6, 3],
        _ => unreachable!("resnet{depth} is not a preset"),
    };
    let x = if small {
        b.note_stem("CIFAR stem for pictures of 64x64 or less (3x3 stride 1 conv, no max pool): the whole picture reaches layer1, about 10 times the compute of ImageNet's stem at that size; --image-size 65 or more takes ImageNet's stem (and ImageNet's weights)");
        b.torchvision_changes(
            "model.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False); model.maxpool = torch.nn.Identity()",
        );
        conv_bn(b, ("conv1", "bn1"), b.input(), 64, 3, 1, 1, Act::Relu)?
    } else {
        b.note_stem("ImageNet stem: 7x7 stride 2 conv, 3x3 stride 2 max pool");
        let x = b.conv(
            "conv1",
            b.input(),
            64,
            7,
            2,
            3,
            1,
            false,
            WeightInit::KaimingOut,
        )?;
        let x = b.bn("bn1", x)?;
        let x = b.act(x, Act::Relu)?;
        b.maxpool(x, 3, 2, 1)?
    };
    stages(b, x, &counts, &[64, 128, 256, 512], depth >= 50, classes)
}

/// `layer1`.. of ResNet: the first block of each stage but the first strides by 2.
fn stages(
    b: &mut Builder,
    mut x: ValueId,
    counts: &[usize],
    widths: &[usize],
    bottleneck: bool,
    classes: usize,
) -> Result<ValueId, String> {
    for (s, (&n, &w)) in counts.iter().zip(widths).enumerate() {
        for i in 0..n {
            let stride = if i == 0 && s > 0 { 2 } else { 1 };
            let name = format!("layer{}.{i}", s + 1);
            x = match bottleneck {
                true => bottleneck_block(b, &name, x, w, stride)?,
                false => basic_block(b, &name, x, w, stride)?,
            };
            x = b.act(x, Act::Relu)?;
        }
    }
    let x = b.gap(x)?;
    b.linear("fc", x, classes, true, WeightInit::Default)
}

/// torchvision's `_make_divisible`: the nearest multiple of 8, never 10% below `v`.
fn divisible(v: f64) -> usize {
    let r = (((v + 4.0) as usize) / 8 * 8).max(8);
    if (r as f64) < 0.9 * v {
        r + 8
    } else {
        r
    }
}

fn mobilenet_v2(
    b: &mut Builder,
    width: f64,
    classes: usize,
    small: bool,
) -> Result<ValueId, String> {
    // (expansion t, channels c, blocks n, stride s) of each stage
    const STAGES: [(usize, usize, usize, usize); 7] = [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ];
    let first = divisible(32.0 * width);
    let last = divisible(1280.0 * width.max(1.0));
    let stem_stride = match small {
        true => {
            b.note_stem("small images: the stem conv has stride 1");
            b.torchvision_changes("model.features[0][0].stride = (1, 1)");
            1
        }
        false => 2,
    };
    let mut x = conv_bn(
        b,
        ("features.0.0", "features.0.1"),
        b.input(),
        first,
        3,
        stem_stride,
        1,
        Act::Relu6,
    )?;
    let mut f = 1;
    for (t, c, n, s) in STAGES {
        let out = divisible(c as f64 * width);
        for i in 0..n {
            let stride = if i == 0 { s } else { 1 };
            x = inverted_block(b, &format!("features.{f}"), x, out, t, stride)?;
            f += 1;
        }
    }
    let (c, n) = (format!("features.{f}.0"), format!("features.{f}.1"));
    x = conv_bn(b, (&c, &n), x, last, 1, 1, 1, Act::Relu6)?;
    let x = b.gap(x)?;
    let x = b.dropout(x, 0.2)?;
    b.linear("classifier.1", x, classes, true, WeightInit::Normal(0.01))
}
