//! The model: a stack of layers (dense, convolution, max pooling; ReLU after every conv and
//! dense layer but the last; softmax cross-entropy on the logits) whose parameters live in one
//! flat buffer, so a gradient all-reduce is a single call. An MLP is the dense-only case.

mod spec;

pub use spec::ModelSpec;

use std::ops::Range;

use crate::nn::grouped::{self, ConvGeom};
use crate::nn::layers::{Layer, PlannedLayer, Shape};
use crate::nn::ops::{linear_backward, linear_forward, relu_backward, relu_forward, softmax_xent};
use crate::nn::rng::{tag, Rng};

/// One named tensor inside the flat parameter buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub shape: Vec<usize>,
    pub offset: usize,
    pub len: usize,
}

/// The layers with their shapes, plus where each weight and bias sits in the flat buffer
/// (per layer with parameters: weight, then bias).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Model {
    pub input: Shape,
    /// Every layer, the implicit output layer last.
    pub plan: Vec<PlannedLayer>,
    /// Elements per sample at each layer boundary: input, then each layer's output.
    pub dims: Vec<usize>,
    pub tensors: Vec<TensorInfo>,
    pub n_params: usize,
    /// Per layer: indices into `tensors` of its weight and bias (none for pooling).
    params_at: Vec<Option<(usize, usize)>>,
}

impl Model {
    /// The model `spec` builds on samples of shape `input` with `classes` outputs; an error
    /// names the layer at fault (a conv layer on flat data, an image shrunk below 1x1).
    pub fn new(input: Shape, spec: &ModelSpec, classes: usize) -> Result<Model, String> {
        // an MLP reads any input as a flat vector
        let input = if spec.is_mlp() {
            Shape::Flat(input.numel())
        } else {
            input
        };
        let plan = spec
            .layers
            .plan(input, classes)
            .map_err(|e| format!("model `{spec}` on {input} inputs: {e}"))?;
        let family = if spec.is_mlp() { "mlp" } else { "" };
        let mut tensors = Vec::new();
        let mut params_at = Vec::new();
        let mut offset = 0;
        for (l, layer) in plan.layers.iter().enumerate() {
            let Some(wshape) = layer.weight_shape() else {
                params_at.push(None);
                continue;
            };
            let kind = match (family, layer.layer) {
                ("mlp", _) => "mlp",
                (_, Layer::Conv { .. }) => "conv",
                _ => "dense",
            };
            let units = match layer.layer {
                Layer::Conv { channels, .. } => channels,
                Layer::Dense { units } => units,
                Layer::Pool { .. } => unreachable!("pooling has no weights"),
            };
            params_at.push(Some((tensors.len(), tensors.len() + 1)));
            for (name, shape) in [("weight", wshape), ("bias", vec![units])] {
                let len = shape.iter().product();
                tensors.push(TensorInfo {
                    name: format!("{kind}.{l}.{name}"),
                    shape,
                    offset,
                    len,
                });
                offset += len;
            }
        }
        let dims = std::iter::once(input.numel())
            .chain(plan.layers.iter().map(|l| l.output.numel()))
            .collect();
        Ok(Model {
            input,
            plan: plan.layers,
            dims,
            tensors,
            n_params: offset,
            params_at,
        })
    }

    /// An MLP on flat inputs (what tests and benchmarks build).
    pub fn mlp(inputs: usize, hidden: &[usize], classes: usize) -> Model {
        Model::new(Shape::Flat(inputs), &ModelSpec::mlp(hidden), classes)
            .expect("an MLP on a non-empty input with classes")
    }

    pub fn layers(&self) -> usize {
        self.plan.len()
    }

    /// Dense layers only (what the GPU backend trains today).
    pub fn is_mlp(&self) -> bool {
        self.plan
            .iter()
            .all(|l| matches!(l.layer, Layer::Dense { .. }))
    }

    /// "64-128-10" for an MLP; "1x8x8-16x6x6-16x3x3-64-10" with images.
    pub fn shape_string(&self) -> String {
        std::iter::once(self.input)
            .chain(self.plan.iter().map(|l| l.output))
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join("-")
    }

    /// The flat-buffer ranges of layer `l`'s weight and bias, if it has parameters.
    pub fn param_ranges(&self, l: usize) -> Option<(Range<usize>, Range<usize>)> {
        let (w, b) = self.params_at[l]?;
        let range = |t: &TensorInfo| t.offset..t.offset + t.len;
        Some((range(&self.tensors[w]), range(&self.tensors[b])))
    }

    /// PyTorch's defaults for `nn.Linear` and `nn.Conv2d`: weights and biases ~
    /// U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = inputs (dense) or C*K*K (conv).
    pub fn init_params(&self, seed: u64) -> Vec<f32> {
        let mut p = vec![0.0; self.n_params];
        let mut rng = Rng::stream(seed, tag::INIT, 0);
        for l in 0..self.layers() {
            let Some((w, b)) = self.param_ranges(l) else {
                continue;
            };
            let fan_in = w.len() / b.len();
            let bound = 1.0 / (fan_in as f32).sqrt();
            for v in &mut p[w] {
                *v = rng.uniform(-bound, bound);
            }
            for v in &mut p[b] {
                *v = rng.uniform(-bound, bound);
            }
        }
        p
    }

    /// Forward + backward over one micro-batch x[B,...], y[B]. Gradients are *accumulated*
    /// into `grads` as sums over samples (not means). Returns (loss sum, correct predictions).
    pub fn forward_backward(
        &self,
        params: &[f32],
        grads: &mut [f32],
        ws: &mut Workspace,
        x: &[f32],
        y: &[u32],
        b: usize,
    ) -> (f64, usize) {
        let result = self.forward(params, ws, x, y, b, true);
        for l in (0..self.layers()).rev() {
            let layer = &self.plan[l];
            let (d_in, d_out) = (self.dims[l], self.dims[l + 1]);
            let (lower, upper) = ws.grads.split_at_mut(l + 1);
            let dout = &mut upper[0][..b * d_out];
            // (a convolution masks its gradient by its ReLU itself, group by group)
            let conv = matches!(layer.layer, Layer::Conv { .. });
            if layer.relu && !conv {
                relu_backward(dout, &ws.acts[l + 1][..b * d_out]);
            }
            let inp: &[f32] = if l == 0 { x } else { &ws.acts[l][..b * d_in] };
            let dinp = (l > 0).then(|| &mut lower[l][..b * d_in]);
            let ranges = self.param_ranges(l);
            match (layer.layer, layer.input) {
                (Layer::Dense { units }, _) => {
                    let (w, bias) = ranges.expect("dense has weights");
                    let (gw, gb) = split_wb(grads, w.clone(), bias);
                    linear_backward(dinp, gw, gb, dout, inp, &params[w], b, d_in, units);
                }
                (
                    Layer::Conv {
                        channels,
                        kernel,
                        stride,
                        pad,
                    },
                    Shape::Image { c, h, w: iw },
                ) => {
                    let (w, bias) = ranges.expect("conv has weights");
                    let (gw, gb) = split_wb(grads, w.clone(), bias);
                    let g = conv_geom(layer, c, h, iw, channels, kernel, stride, pad);
                    let scratch = &mut ws.conv;
                    let relu_out = layer.relu.then(|| &ws.acts[l + 1][..b * d_out]);
                    grouped::conv_backward(
                        dinp, gw, gb, dout, relu_out, inp, &params[w], b, &g, scratch,
                    );
                }
                (Layer::Pool { kernel, stride }, Shape::Image { c, h, w: iw }) => {
                    if let Some(dinp) = dinp {
                        grouped::pool_backward(
                            dinp,
                            dout,
                            &ws.argmax[l],
                            b,
                            (c, h, iw),
                            image_hw(layer.output),
                            kernel,
                            stride,
                        );
                    }
                }
                (layer, input) => unreachable!("planned {layer} on {input}"),
            }
        }
        result
    }

    /// Loss sum and correct count over x[B,...], y[B], without gradients.
    pub fn evaluate(
        &self,
        params: &[f32],
        ws: &mut Workspace,
        x: &[f32],
        y: &[u32],
        b: usize,
    ) -> (f64, usize) {
        self.forward(params, ws, x, y, b, false)
    }

    fn forward(
        &self,
        params: &[f32],
        ws: &mut Workspace,
        x: &[f32],
        y: &[u32],
        b: usize,
        want_grad: bool,
    ) -> (f64, usize) {
        ws.ensure(self, b);
        for l in 0..self.layers() {
            let layer = &self.plan[l];
            let (d_in, d_out) = (self.dims[l], self.dims[l + 1]);
            let (lower, upper) = ws.acts.split_at_mut(l + 1);
            let inp: &[f32] = if l == 0 { x } else { &lower[l][..b * d_in] };
            let out = &mut upper[0][..b * d_out];
            let ranges = self.param_ranges(l);
            match (layer.layer, layer.input) {
                (Layer::Dense { units }, _) => {
                    let (w, bias) = ranges.expect("dense has weights");
                    linear_forward(out, inp, &params[w], &params[bias], b, d_in, units);
                }
                (
                    Layer::Conv {
                        channels,
                        kernel,
                        stride,
                        pad,
                    },
                    Shape::Image { c, h, w: iw },
                ) => {
                    let (w, bias) = ranges.expect("conv has weights");
                    let g = conv_geom(layer, c, h, iw, channels, kernel, stride, pad);
                    let (w, bias) = (&params[w], &params[bias]);
                    grouped::conv_forward(out, inp, w, bias, b, &g, layer.relu, &mut ws.conv);
                }
                (Layer::Pool { kernel, stride }, Shape::Image { c, h, w: iw }) => {
                    grouped::pool_forward(
                        out,
                        &mut ws.argmax[l],
                        inp,
                        b,
                        (c, h, iw),
                        image_hw(layer.output),
                        kernel,
                        stride,
                    );
                }
                (layer, input) => unreachable!("planned {layer} on {input}"),
            }
            if layer.relu && !matches!(layer.layer, Layer::Conv { .. }) {
                relu_forward(out);
            }
        }
        let classes = self.dims[self.layers()];
        let logits = &ws.acts[self.layers()][..b * classes];
        let dlogits = want_grad.then(|| &mut ws.grads[self.layers()][..b * classes]);
        softmax_xent(dlogits, logits, y, b, classes)
    }
}

/// A planned convolution's geometry.
#[allow(clippy::too_many_arguments)]
fn conv_geom(
    layer: &PlannedLayer,
    c: usize,
    h: usize,
    w: usize,
    oc: usize,
    k: usize,
    stride: usize,
    pad: usize,
) -> ConvGeom {
    let (oh, ow) = image_hw(layer.output);
    ConvGeom {
        c,
        h,
        w,
        oc,
        k,
        stride,
        pad,
        oh,
        ow,
    }
}

/// The height and width of an image shape (planned conv and pool layers output images).
fn image_hw(s: Shape) -> (usize, usize) {
    match s {
        Shape::Image { h, w, .. } => (h, w),
        Shape::Flat(_) => unreachable!("conv and pool layers output images"),
    }
}

fn split_wb(grads: &mut [f32], w: Range<usize>, b: Range<usize>) -> (&mut [f32], &mut [f32]) {
    debug_assert_eq!(w.end, b.start);
    let (head, tail) = grads[w.start..b.end].split_at_mut(w.len());
    (head, tail)
}

/// Activation and activation-gradient buffers per layer boundary, pooling's argmax per pool
/// layer and one convolution's column scratch, grown to the largest batch seen. acts[0] and
/// grads[0] are unused (the input is borrowed from the batch).
#[derive(Default)]
pub struct Workspace {
    acts: Vec<Vec<f32>>,
    grads: Vec<Vec<f32>>,
    argmax: Vec<Vec<u32>>,
    conv: grouped::Scratch,
}

impl Workspace {
    fn ensure(&mut self, model: &Model, b: usize) {
        let dims = &model.dims;
        if self.acts.len() != dims.len() {
            self.acts = vec![Vec::new(); dims.len()];
            self.grads = vec![Vec::new(); dims.len()];
            self.argmax = vec![Vec::new(); dims.len()];
        }
        for (l, &d) in dims.iter().enumerate().skip(1) {
            if self.acts[l].len() < b * d {
                self.acts[l].resize(b * d, 0.0);
                self.grads[l].resize(b * d, 0.0);
            }
        }
        for (l, layer) in model.plan.iter().enumerate() {
            match (layer.layer, layer.input, layer.output) {
                (Layer::Pool { .. }, _, out) if self.argmax[l].len() < b * out.numel() => {
                    self.argmax[l].resize(b * out.numel(), 0)
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests;
