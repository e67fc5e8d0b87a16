//! Builds a model graph op by op: every value's shape checked and planned as it is added,
//! parameters and buffers laid out in order in their flat buffers under PyTorch's names.

use crate::nn::grouped::ConvGeom;
use crate::nn::shape::Shape;
use crate::nn::window::out_size;

use super::op::{Act, Node, Op, ValueId};
use super::{Init, Model, TensorInfo};
use crate::nn::window::Window;

/// A model under construction; `finish` hands it over.
pub struct Builder {
    m: Model,
}

/// How a convolution's or linear layer's weight starts.
#[derive(Clone, Copy, Debug)]
pub enum WeightInit {
    /// PyTorch's layer default: weight and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    Default,
    /// torchvision's for convolutions: weight ~ N(0, 2/fan_out) (Kaiming, fan out), bias 0.
    KaimingOut,
    /// weight ~ N(0, std^2), bias 0 (MobileNetV2's classifier: 0.01).
    Normal(f32),
}

const MAX_VALUES: usize = 4096;

impl Builder {
    pub fn new(input: Shape) -> Builder {
        Builder {
            m: Model {
                input,
                values: vec![input],
                dims: vec![input.numel()],
                nodes: Vec::new(),
                tensors: Vec::new(),
                buffers: Vec::new(),
                n_params: 0,
                n_buffers: 0,
                stem: None,
                torchvision_changes: None,
                spec: String::new(),
                layer_list: false,
                label_smoothing: 0.0,
                inits: Vec::new(),
                buffer_inits: Vec::new(),
                consumers: vec![0],
                needs_grad: vec![false],
                frozen: Vec::new(),
                fixed_stats: Vec::new(),
            },
        }
    }

    /// The input value.
    pub fn input(&self) -> ValueId {
        0
    }

    pub fn shape(&self, v: ValueId) -> Shape {
        self.m.values[v]
    }

    /// A note the start-up lines show (the stem chosen for the input size).
    pub fn note_stem(&mut self, note: &'static str) {
        self.m.stem = Some(note);
    }

    /// What torchvision's model needs changed (as Python) to take this one's weights.
    pub fn torchvision_changes(&mut self, python: &'static str) {
        self.m.torchvision_changes = Some(python);
    }

    fn image(&self, v: ValueId, what: &str) -> Result<(usize, usize, usize), String> {
        match self.m.values[v] {
            Shape::Image { c, h, w } => Ok((c, h, w)),
            Shape::Flat(n) => Err(format!(
                "{what} needs an image, but its input is a flat vector of {n} \
                 (convolutions and pooling must come before dense layers and gap)"
            )),
        }
    }

    fn param(&mut self, name: String, shape: Vec<usize>, init: Init) -> Result<usize, String> {
        let len = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .filter(|&n| n <= 1 << 32)
            .ok_or_else(|| format!("{name} would have more than 2^32 weights"))?;
        self.m.tensors.push(TensorInfo {
            name,
            shape,
            offset: self.m.n_params,
            len,
        });
        self.m.inits.push(init);
        self.m.n_params = (self.m.n_params.checked_add(len))
            .filter(|&n| n <= 1 << 34)
            .ok_or("the model has more than 2^34 parameters")?;
        Ok(self.m.tensors.len() - 1)
    }

    fn node(
        &mut self,
        name: &str,
        op: Op,
        inputs: &[ValueId],
        out: Shape,
        params: Vec<usize>,
        buffers: Option<usize>,
    ) -> Result<ValueId, String> {
        let numel = match out {
            Shape::Image { c, h, w } => c.checked_mul(h).and_then(|n| n.checked_mul(w)),
            Shape::Flat(n) => Some(n),
        }
        .filter(|&n| n > 0 && n <= 1 << 30)
        .ok_or_else(|| format!("its output {out} is empty or too large"))?;
        if self.m.values.len() >= MAX_VALUES {
            return Err(format!("the model has more than {MAX_VALUES} ops"));
        }
        for &i in inputs {
            self.m.consumers[i] += 1;
        }
        self.m.values.push(out);
        self.m.dims.push(numel);
        self.m.consumers.push(0);
        let upstream = !params.is_empty() || inputs.iter().any(|&i| self.m.needs_grad[i]);
        self.m.needs_grad.push(upstream);
        let output = self.m.values.len() - 1;
        self.m.nodes.push(Node {
            name: name.to_string(),
            op,
            inputs: inputs.to_vec(),
            output,
            params,
            buffers,
        });
        Ok(output)
    }

    /// A KxK convolution to `oc` channels, `groups` 1 or C (depthwise: `oc` must be C).
    #[allow(clippy::too_many_arguments)]
    pub fn conv(
        &mut self,
        name: &str,
        x: ValueId,
        oc: usize,
        k: usize,
        stride: usize,
        pad: usize,
        groups: usize,
        bias: bool,
        init: WeightInit,
    ) -> Result<ValueId, String> {
        let (c, h, w) = self.image(x, "a convolution")?;
        if groups != 1 && (groups != c || oc != c) {
            return Err(format!(
                "a depthwise convolution keeps its {c} channels (asked for {oc})"
            ));
        }
        let (oh, ow) = out_size(h, w, k, k, stride, pad).map_err(|e| {
            format!(
                "{e} at this layer; use a smaller kernel or stride, fewer layers that shrink the pictures, or larger pictures"
            )
        })?;
        let g = ConvGeom {
            c,
            h,
            w,
            oc,
            k,
            stride,
            pad,
            oh,
            ow,
        };
        let fan_in = (c / groups) * k * k;
        let fan_out = oc * k * k;
        let (wi, bi) = match init {
            WeightInit::Default => {
                let bound = 1.0 / (fan_in as f32).sqrt();
                (Init::Uniform(bound), Init::Uniform(bound))
            }
            WeightInit::KaimingOut => (
                Init::Normal((2.0 / fan_out as f32).sqrt()),
                Init::Const(0.0),
            ),
            WeightInit::Normal(std) => (Init::Normal(std), Init::Const(0.0)),
        };
        let mut params =
            vec![self.param(format!("{name}.weight"), vec![oc, c / groups, k, k], wi)?];
        if bias {
            params.push(self.param(format!("{name}.bias"), vec![oc], bi)?);
        }
        let op = Op::Conv {
            g,
            groups,
            bias,
            act: Act::None,
        };
        let out = Shape::Image {
            c: oc,
            h: oh,
            w: ow,
        };
        self.node(name, op, &[x], out, params, None)
    }

    /// Batch norm over the channels of an image (or the features of a flat vector).
    pub fn bn(&mut self, name: &str, x: ValueId) -> Result<ValueId, String> {
        let (c, hw) = match self.m.values[x] {
            Shape::Image { c, h, w } => (c, h * w),
            Shape::Flat(n) => (n, 1),
        };
        let params = vec![
            self.param(format!("{name}.weight"), vec![c], Init::Const(1.0))?,
            self.param(format!("{name}.bias"), vec![c], Init::Const(0.0))?,
        ];
        let at = self.m.buffers.len();
        for (what, init) in [("running_mean", 0.0), ("running_var", 1.0)] {
            self.m.buffers.push(TensorInfo {
                name: format!("{name}.{what}"),
                shape: vec![c],
                offset: self.m.n_buffers,
                len: c,
            });
            self.m.buffer_inits.push(init);
            self.m.n_buffers += c;
        }
        let op = Op::BatchNorm {
            c,
            hw,
            act: Act::None,
        };
        let shape = self.m.values[x];
        self.node(name, op, &[x], shape, params, Some(at))
    }

    /// `x` through activation `a`: fused onto the op that made `x` when nothing else reads
    /// `x` yet (the caller then holds the activated value under the same id), else an op.
    pub fn act(&mut self, x: ValueId, a: Act) -> Result<ValueId, String> {
        if a == Act::None {
            return Ok(x);
        }
        if self.m.consumers[x] == 0 {
            if let Some(n) = self.m.nodes.iter_mut().rev().find(|n| n.output == x) {
                if n.op.fuse(a) {
                    return Ok(x);
                }
            }
        }
        let shape = self.m.values[x];
        self.node("", Op::Activation(a), &[x], shape, Vec::new(), None)
    }

    /// a + b, of the same shape.
    pub fn add(&mut self, a: ValueId, b: ValueId) -> Result<ValueId, String> {
        let (sa, sb) = (self.m.values[a], self.m.values[b]);
        if sa != sb {
            return Err(format!("cannot add a {sa} tensor to a {sb} one"));
        }
        self.node(
            "",
            Op::Add { act: Act::None },
            &[a, b],
            sa,
            Vec::new(),
            None,
        )
    }

    fn window(
        &self,
        x: ValueId,
        what: &str,
        k: usize,
        stride: usize,
        pad: usize,
    ) -> Result<Window, String> {
        let (c, h, w) = self.image(x, what)?;
        if 2 * pad > k {
            return Err(format!(
                "padding {pad} is more than half the {k}x{k} window"
            ));
        }
        let (oh, ow) = out_size(h, w, k, k, stride, pad).map_err(|e| {
            format!("{e} at this layer; use a smaller window, fewer layers that shrink the pictures, or larger pictures")
        })?;
        Ok(Window {
            c,
            h,
            w,
            k,
            stride,
            pad,
            oh,
            ow,
        })
    }

    /// KxK max pooling, stride and padding as given.
    pub fn maxpool(
        &mut self,
        x: ValueId,
        k: usize,
        stride: usize,
        pad: usize,
    ) -> Result<ValueId, String> {
        self.pool(x, "max pooling", Op::MaxPool, (k, stride, pad))
    }

    /// KxK average pooling (padding counted as zeros).
    pub fn avgpool(
        &mut self,
        x: ValueId,
        k: usize,
        stride: usize,
        pad: usize,
    ) -> Result<ValueId, String> {
        self.pool(x, "average pooling", Op::AvgPool, (k, stride, pad))
    }

    fn pool(
        &mut self,
        x: ValueId,
        what: &str,
        op: fn(Window) -> Op,
        (k, stride, pad): (usize, usize, usize),
    ) -> Result<ValueId, String> {
        let win = self.window(x, what, k, stride, pad)?;
        let out = Shape::Image {
            c: win.c,
            h: win.oh,
            w: win.ow,
        };
        self.node("", op(win), &[x], out, Vec::new(), None)
    }

    /// The mean of every channel: an image becomes a flat vector of its channels.
    pub fn gap(&mut self, x: ValueId) -> Result<ValueId, String> {
        let (c, h, w) = self.image(x, "global average pooling")?;
        let op = Op::GlobalAvgPool { c, hw: h * w };
        self.node("", op, &[x], Shape::Flat(c), Vec::new(), None)
    }

    /// A fully connected layer (flattening an image input).
    pub fn linear(
        &mut self,
        name: &str,
        x: ValueId,
        out: usize,
        bias: bool,
        init: WeightInit,
    ) -> Result<ValueId, String> {
        let inp = self.m.dims[x];
        let bound = 1.0 / (inp as f32).sqrt();
        let (wi, bi) = match init {
            WeightInit::Default => (Init::Uniform(bound), Init::Uniform(bound)),
            WeightInit::KaimingOut => (Init::Normal((2.0 / out as f32).sqrt()), Init::Const(0.0)),
            WeightInit::Normal(std) => (Init::Normal(std), Init::Const(0.0)),
        };
        let mut params = vec![self.param(format!("{name}.weight"), vec![out, inp], wi)?];
        if bias {
            params.push(self.param(format!("{name}.bias"), vec![out], bi)?);
        }
        let op = Op::Linear {
            inp,
            out,
            bias,
            act: Act::None,
        };
        self.node(name, op, &[x], Shape::Flat(out), params, None)
    }

    pub fn dropout(&mut self, x: ValueId, p: f32) -> Result<ValueId, String> {
        let shape = self.m.values[x];
        self.node("", Op::Dropout { p }, &[x], shape, Vec::new(), None)
    }

    /// The model whose logits are `out` (the last value made).
    pub fn finish(self, out: ValueId) -> Model {
        debug_assert_eq!(
            out,
            self.m.values.len() - 1,
            "the logits are the last value"
        );
        self.m
    }
}
