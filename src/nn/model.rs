//! The model: a stack of layers (dense, convolution, max pooling; ReLU after every conv and
//! dense layer but the last; softmax cross-entropy on the logits) whose parameters live in one
//! flat buffer, so a gradient all-reduce is a single call. An MLP is the dense-only case.

use std::fmt;
use std::str::FromStr;

use std::ops::Range;

use crate::nn::grouped::{self, ConvGeom};
use crate::nn::layers::{Layer, LayerSpec, PlannedLayer, Shape};
use crate::nn::ops::{linear_backward, linear_forward, relu_backward, relu_forward, softmax_xent};
use crate::nn::rng::{tag, Rng};

/// What `--model` says: `mlp:H1,H2,...` (hidden widths) or the layer language of
/// `nn::layers` (`conv32k3,pool2,dense128`). An MLP is a spec of dense layers only, and is
/// written `mlp:...` either way. Input and output sizes come from the data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelSpec {
    pub layers: LayerSpec,
}

impl ModelSpec {
    /// An MLP with these hidden widths.
    pub fn mlp(hidden: &[usize]) -> ModelSpec {
        ModelSpec {
            layers: LayerSpec {
                layers: hidden.iter().map(|&units| Layer::Dense { units }).collect(),
            },
        }
    }

    /// Only dense layers: trains on any input, flat or image.
    pub fn is_mlp(&self) -> bool {
        self.layers
            .layers
            .iter()
            .all(|l| matches!(l, Layer::Dense { .. }))
    }
}

impl Default for ModelSpec {
    fn default() -> Self {
        ModelSpec::mlp(&[128])
    }
}

/// Hidden layers an MLP may have.
const MAX_HIDDEN_LAYERS: usize = 64;

const FORMS: &str = "use mlp:H1,H2,... (hidden widths, e.g. mlp:128 or mlp:256,128) or layers like conv32k3,pool2,dense128 (convNkK[sS][pP], poolK[sS], denseN)";

impl FromStr for ModelSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let Some(rest) = s
            .strip_prefix("mlp:")
            .or_else(|| (s == "mlp").then_some(""))
        else {
            if ["conv", "pool", "dense"].iter().any(|k| s.starts_with(k)) {
                return s
                    .parse::<LayerSpec>()
                    .map(|layers| ModelSpec { layers })
                    .map_err(|e| format!("model `{s}`: {e}"));
            }
            return Err(format!("unknown model `{s}`: {FORMS}"));
        };
        let mut hidden = Vec::new();
        for part in rest.split(',').filter(|_| !rest.trim().is_empty()) {
            if part.trim().is_empty() {
                return Err(format!(
                    "model `{s}`: an empty hidden width between commas; use e.g. mlp:128,64"
                ));
            }
            let h: usize = part.trim().parse().map_err(|_| {
                format!(
                    "model `{s}`: hidden width `{part}` is not a whole number; use e.g. mlp:128,64"
                )
            })?;
            if h == 0 || h > 1 << 16 {
                return Err(format!(
                    "model `{s}`: hidden width {h} must be between 1 and 65536"
                ));
            }
            hidden.push(h);
        }
        if hidden.len() > MAX_HIDDEN_LAYERS {
            return Err(format!(
                "model `{s}`: {} hidden layers; use at most {MAX_HIDDEN_LAYERS}",
                hidden.len()
            ));
        }
        Ok(ModelSpec::mlp(&hidden))
    }
}

/// `mlp:128,64` for dense layers only, else the layer list (`conv16k3,pool2,dense64`).
impl fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.is_mlp() {
            return write!(f, "{}", self.layers);
        }
        let hs: Vec<String> = self
            .layers
            .layers
            .iter()
            .map(|l| match l {
                Layer::Dense { units } => units.to_string(),
                _ => unreachable!("an MLP has dense layers only"),
            })
            .collect();
        write!(f, "mlp:{}", hs.join(","))
    }
}

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
mod tests {
    use super::*;

    fn hidden(spec: &str) -> Vec<usize> {
        let m: ModelSpec = spec.parse().unwrap();
        assert!(m.is_mlp(), "{spec}");
        m.layers
            .layers
            .iter()
            .map(|l| match l {
                Layer::Dense { units } => *units,
                _ => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn parses_specs_and_rejects_bad_ones() {
        assert_eq!(hidden("mlp:128"), vec![128]);
        assert_eq!(hidden("mlp:256,64"), vec![256, 64]);
        assert_eq!(hidden("mlp:"), Vec::<usize>::new());
        // dense layers are an MLP, however written
        assert_eq!(hidden("dense32,dense16"), vec![32, 16]);
        assert_eq!(
            "dense32".parse::<ModelSpec>().unwrap().to_string(),
            "mlp:32"
        );
        let cnn: ModelSpec = "conv32k3,pool2".parse().unwrap();
        assert!(!cnn.is_mlp());
        assert_eq!(cnn.to_string(), "conv32k3,pool2");
        assert!("cnn:3".parse::<ModelSpec>().unwrap_err().contains("mlp:H1"));
        assert!("cnn:3"
            .parse::<ModelSpec>()
            .unwrap_err()
            .contains("conv32k3"));
        let e = "conv32k3,pool,dense8".parse::<ModelSpec>().unwrap_err();
        assert!(e.contains("layer 2 `pool`"), "{e}");
        assert!("mlp:12x".parse::<ModelSpec>().unwrap_err().contains("12x"));
        assert!("mlp:0".parse::<ModelSpec>().is_err());
        assert!("mlp:1,,2"
            .parse::<ModelSpec>()
            .unwrap_err()
            .contains("empty hidden width"));
        assert!("mlp:8,".parse::<ModelSpec>().is_err());
        let deep = format!("mlp:{}", vec!["4"; 65].join(","));
        assert!(deep
            .parse::<ModelSpec>()
            .unwrap_err()
            .contains("at most 64"));
    }

    #[test]
    fn layout_is_contiguous() {
        let m = Model::mlp(64, &[128], 10);
        assert_eq!(m.n_params, 64 * 128 + 128 + 128 * 10 + 10);
        assert_eq!(m.shape_string(), "64-128-10");
        assert_eq!(m.tensors[1].name, "mlp.0.bias");
        assert_eq!(m.tensors[3].offset + m.tensors[3].len, m.n_params);
        // an MLP reads an image as a flat vector
        let img = Shape::Image { c: 1, h: 8, w: 8 };
        let flat = Model::new(img, &ModelSpec::mlp(&[128]), 10).unwrap();
        assert_eq!(flat, m);
    }

    #[test]
    fn the_seed_cnn_has_pytorch_shapes_and_names() {
        let input = Shape::Image { c: 1, h: 28, w: 28 };
        let m = Model::new(input, &"conv32k3,pool2".parse().unwrap(), 10).unwrap();
        assert_eq!(m.n_params, 320 + 54090);
        let names: Vec<(&str, &[usize])> = m
            .tensors
            .iter()
            .map(|t| (t.name.as_str(), t.shape.as_slice()))
            .collect();
        assert_eq!(
            names,
            [
                ("conv.0.weight", &[32, 1, 3, 3][..]),
                ("conv.0.bias", &[32][..]),
                ("dense.2.weight", &[5408, 10][..]),
                ("dense.2.bias", &[10][..]),
            ]
        );
        assert_eq!(m.shape_string(), "1x28x28-32x26x26-32x13x13-10");
        assert_eq!(m.dims, vec![784, 21632, 5408, 10]);
        // conv layers need an image, and the error names the layer
        let e = Model::new(Shape::Flat(64), &"conv8k3".parse().unwrap(), 10).unwrap_err();
        assert!(
            e.contains("layer 1 `conv8k3`") && e.contains("flat vector"),
            "{e}"
        );
        let tiny = Shape::Image { c: 1, h: 4, w: 4 };
        let e = Model::new(tiny, &"conv8k3,pool2,pool2".parse().unwrap(), 10).unwrap_err();
        assert!(e.contains("layer 3 `pool2`"), "{e}");
    }

    /// Central differences of the loss against the backward pass, every `step`-th parameter.
    /// ReLU and max pooling have kinks: a parameter whose difference quotient still moves
    /// between two step sizes straddles one and is not judged (at most a few may).
    fn gradcheck(m: &Model, b: usize, step: usize, seed: u64) {
        let params = m.init_params(seed);
        let mut rng = Rng::new(seed + 1);
        let x: Vec<f32> = (0..b * m.dims[0]).map(|_| rng.normal()).collect();
        let classes = m.dims[m.layers()] as u32;
        let y: Vec<u32> = (0..b as u32).map(|i| (i * 7 + 1) % classes).collect();
        let mut ws = Workspace::default();
        let mut grads = vec![0.0; m.n_params];
        m.forward_backward(&params, &mut grads, &mut ws, &x, &y, b);
        let mut p = params.clone();
        let mut quotient = |i: usize, h: f32| {
            let p0 = p[i];
            p[i] = p0 + h;
            let lp = m.evaluate(&p, &mut ws, &x, &y, b).0;
            p[i] = p0 - h;
            let lm = m.evaluate(&p, &mut ws, &x, &y, b).0;
            p[i] = p0;
            (lp - lm) / (2.0 * h as f64)
        };
        let (mut judged, mut kinked) = (0, 0);
        for i in (0..m.n_params).step_by(step) {
            let (coarse, fine) = (quotient(i, 4e-3), quotient(i, 2e-3));
            if (coarse - fine).abs() > 1e-3 + 0.02 * fine.abs() {
                kinked += 1;
                continue;
            }
            judged += 1;
            assert!(
                (grads[i] as f64 - fine).abs() <= 2e-3 + 1e-2 * fine.abs(),
                "{}: param {i}: {} vs {fine}",
                m.shape_string(),
                grads[i]
            );
        }
        assert!(kinked * 5 <= judged, "{kinked} kinked, {judged} judged");
    }

    #[test]
    fn whole_model_gradient_matches_finite_differences() {
        gradcheck(&Model::mlp(5, &[7, 6], 4), 3, 3, 9);
    }

    #[test]
    fn whole_cnn_gradient_matches_finite_differences() {
        // conv (padded, then strided), pooling with a partial window dropped, dense layers
        let input = Shape::Image { c: 2, h: 7, w: 6 };
        let spec = "conv3k3p1,pool2,conv4k2s2,dense5".parse().unwrap();
        gradcheck(&Model::new(input, &spec, 3).unwrap(), 2, 1, 4);
        // a pooling layer first (no input gradient needed)
        let spec = "pool2,conv2k2,dense3".parse().unwrap();
        let input = Shape::Image { c: 1, h: 6, w: 6 };
        gradcheck(&Model::new(input, &spec, 2).unwrap(), 3, 1, 5);
    }
}
