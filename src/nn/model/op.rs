//! The ops a model graph is made of, with their geometry, and the nodes that apply them.

use std::fmt;

use crate::nn::grouped::ConvGeom;
pub use crate::nn::window::Window;

/// Index of a value (an activation tensor) of the graph; value 0 is the input.
pub type ValueId = usize;

pub use crate::nn::ops::Act;

/// Batch norm's constants, PyTorch's defaults.
pub const BN_EPS: f32 = 1e-5;
pub const BN_MOMENTUM: f32 = 0.1;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    /// A dense convolution (groups 1) or a depthwise one (groups = C = OC); weight
    /// [OC, C/groups, K, K], bias [OC] when `bias`.
    Conv {
        g: ConvGeom,
        groups: usize,
        bias: bool,
        act: Act,
    },
    /// Batch norm over C channels of `hw` positions: weight, bias [C]; running mean and
    /// variance [C] as buffers.
    BatchNorm {
        c: usize,
        hw: usize,
        act: Act,
    },
    /// An activation alone (where it could not be fused onto its producer).
    Activation(Act),
    /// The sum of two values of the same shape.
    Add {
        act: Act,
    },
    MaxPool(Window),
    /// Average over each window, zero padding counted (PyTorch's `count_include_pad`).
    AvgPool(Window),
    /// The mean over each of C planes of `hw` positions: [C, H, W] -> [C].
    GlobalAvgPool {
        c: usize,
        hw: usize,
    },
    /// out[OUT] = w[OUT, IN] @ x[IN] + bias (PyTorch's layout).
    Linear {
        inp: usize,
        out: usize,
        bias: bool,
        act: Act,
    },
    /// Zeroes each element with probability `p` in training, scaling the rest by 1/(1-p).
    Dropout {
        p: f32,
    },
}

impl Op {
    /// The activation applied to this op's output.
    pub fn act(&self) -> Act {
        match *self {
            Op::Conv { act, .. }
            | Op::BatchNorm { act, .. }
            | Op::Add { act }
            | Op::Linear { act, .. } => act,
            Op::Activation(a) => a,
            _ => Act::None,
        }
    }

    /// Sets the activation of an op that can carry one; false for the others.
    pub(super) fn fuse(&mut self, a: Act) -> bool {
        match self {
            Op::Conv { act, .. }
            | Op::BatchNorm { act, .. }
            | Op::Add { act }
            | Op::Linear { act, .. }
                if *act == Act::None =>
            {
                *act = a;
                true
            }
            _ => false,
        }
    }

    /// Multiply-accumulates of the forward pass per sample.
    pub fn macs(&self) -> u64 {
        let m = match *self {
            Op::Conv { g, groups, .. } => g.oc * g.oh * g.ow * (g.c / groups) * g.k * g.k,
            Op::Linear { inp, out, .. } => inp * out,
            _ => 0,
        };
        m as u64
    }

    /// Elementwise work of the forward pass per sample (normalising, pooling, adding).
    fn elementwise(&self, out_len: usize) -> u64 {
        let n = match *self {
            Op::BatchNorm { .. } => 2 * out_len,
            Op::MaxPool(w) | Op::AvgPool(w) => out_len * w.k * w.k,
            Op::GlobalAvgPool { c, hw } => c * hw,
            Op::Conv { .. } | Op::Linear { .. } => 0,
            _ => out_len,
        };
        n as u64
    }

    /// Floating-point operations of the forward pass per sample (a multiply-add is 2).
    pub fn flops(&self, out_len: usize) -> u64 {
        2 * self.macs() + self.elementwise(out_len)
    }

    /// `conv3x3/2`, `dwconv3x3`, `bn+relu`, `linear`: what the start-up table shows.
    pub fn kind(&self) -> String {
        let base = match *self {
            Op::Conv { g, groups, .. } => {
                let dw = if groups > 1 { "dw" } else { "" };
                let s = if g.stride > 1 {
                    format!("/{}", g.stride)
                } else {
                    String::new()
                };
                format!("{dw}conv{}x{}{s}", g.k, g.k)
            }
            Op::BatchNorm { .. } => "bn".into(),
            Op::Activation(_) => "act".into(),
            Op::Add { .. } => "add".into(),
            Op::MaxPool(w) => format!("maxpool{}x{}/{}", w.k, w.k, w.stride),
            Op::AvgPool(w) => format!("avgpool{}x{}/{}", w.k, w.k, w.stride),
            Op::GlobalAvgPool { .. } => "gap".into(),
            Op::Linear { .. } => "linear".into(),
            Op::Dropout { p } => format!("dropout{p}"),
        };
        let act = self.act().suffix();
        match self {
            Op::Activation(_) => act.trim_start_matches('+').to_string(),
            _ => format!("{base}{act}"),
        }
    }
}

/// One op applied to its inputs, with where its parameters and buffers sit.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The module's name, PyTorch style (`layer1.0.conv1`); empty for ops without parameters.
    pub name: String,
    pub op: Op,
    /// One value, two for `Add`.
    pub inputs: Vec<ValueId>,
    pub output: ValueId,
    /// Indices into `Model::tensors`: weight, then bias where there is one.
    pub params: Vec<usize>,
    /// Index into `Model::buffers` of batch norm's running mean (its variance follows).
    pub buffers: Option<usize>,
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.op.kind())?;
        if !self.name.is_empty() {
            write!(f, " {}", self.name)?;
        }
        Ok(())
    }
}
