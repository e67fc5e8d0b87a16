//! The model: an MLP (Linear → ReLU → … → Linear, softmax cross-entropy on the logits) whose
//! parameters live in one flat buffer, so a gradient all-reduce is a single call.

use std::fmt;
use std::str::FromStr;

use crate::nn::ops::{linear_backward, linear_forward, relu_backward, relu_forward, softmax_xent};
use crate::nn::rng::{tag, Rng};

/// `mlp:H1,H2,...`: the hidden widths. Input and output widths come from the data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelSpec {
    pub hidden: Vec<usize>,
}

impl Default for ModelSpec {
    fn default() -> Self {
        ModelSpec { hidden: vec![128] }
    }
}

/// Hidden layers an MLP may have.
const MAX_HIDDEN_LAYERS: usize = 64;

impl FromStr for ModelSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let rest = s
            .strip_prefix("mlp:")
            .or_else(|| (s == "mlp").then_some(""))
            .ok_or_else(|| format!("unknown model `{s}`: use mlp:H1,H2,... (hidden widths), e.g. mlp:128 or mlp:256,128"))?;
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
        Ok(ModelSpec { hidden })
    }
}

impl fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hs: Vec<String> = self.hidden.iter().map(|h| h.to_string()).collect();
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

/// Layer widths plus where each weight and bias sits in the flat buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mlp {
    /// [input, hidden..., classes]
    pub dims: Vec<usize>,
    pub tensors: Vec<TensorInfo>,
    pub n_params: usize,
}

impl Mlp {
    pub fn new(inputs: usize, spec: &ModelSpec, classes: usize) -> Mlp {
        let mut dims = vec![inputs];
        dims.extend(&spec.hidden);
        dims.push(classes);
        let mut tensors = Vec::new();
        let mut offset = 0;
        for l in 0..dims.len() - 1 {
            let (c, oc) = (dims[l], dims[l + 1]);
            for (name, shape) in [("weight", vec![c, oc]), ("bias", vec![oc])] {
                let len = shape.iter().product();
                tensors.push(TensorInfo {
                    name: format!("mlp.{l}.{name}"),
                    shape,
                    offset,
                    len,
                });
                offset += len;
            }
        }
        Mlp {
            dims,
            tensors,
            n_params: offset,
        }
    }

    pub fn layers(&self) -> usize {
        self.dims.len() - 1
    }

    /// "64-128-10"
    pub fn shape_string(&self) -> String {
        self.dims
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("-")
    }

    fn w_range(&self, l: usize) -> std::ops::Range<usize> {
        let t = &self.tensors[2 * l];
        t.offset..t.offset + t.len
    }

    fn b_range(&self, l: usize) -> std::ops::Range<usize> {
        let t = &self.tensors[2 * l + 1];
        t.offset..t.offset + t.len
    }

    /// PyTorch's `nn.Linear` default: weights and biases ~ U(-1/sqrt(in), 1/sqrt(in)).
    pub fn init_params(&self, seed: u64) -> Vec<f32> {
        let mut p = vec![0.0; self.n_params];
        let mut rng = Rng::stream(seed, tag::INIT, 0);
        for l in 0..self.layers() {
            let bound = 1.0 / (self.dims[l] as f32).sqrt();
            for v in &mut p[self.w_range(l)] {
                *v = rng.uniform(-bound, bound);
            }
            for v in &mut p[self.b_range(l)] {
                *v = rng.uniform(-bound, bound);
            }
        }
        p
    }

    /// Forward + backward over one micro-batch x[B,D], y[B]. Gradients are *accumulated* into
    /// `grads` as sums over samples (not means). Returns (loss sum, correct predictions).
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
        let last = self.layers() - 1;
        for l in (0..self.layers()).rev() {
            let (c, oc) = (self.dims[l], self.dims[l + 1]);
            let (lower, upper) = ws.grads.split_at_mut(l + 1);
            let dout = &mut upper[0][..b * oc];
            if l != last {
                relu_backward(dout, &ws.acts[l + 1][..b * oc]);
            }
            let inp: &[f32] = if l == 0 { x } else { &ws.acts[l][..b * c] };
            let dinp = if l == 0 {
                None
            } else {
                Some(&mut lower[l][..b * c])
            };
            let (gw, gb) = split_wb(grads, self.w_range(l), self.b_range(l));
            linear_backward(dinp, gw, gb, dout, inp, &params[self.w_range(l)], b, c, oc);
        }
        result
    }

    /// Loss sum and correct count over x[B,D], y[B], without gradients.
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
        ws.ensure(&self.dims, b);
        let last = self.layers() - 1;
        for l in 0..self.layers() {
            let (c, oc) = (self.dims[l], self.dims[l + 1]);
            let (lower, upper) = ws.acts.split_at_mut(l + 1);
            let inp: &[f32] = if l == 0 { x } else { &lower[l][..b * c] };
            let out = &mut upper[0][..b * oc];
            linear_forward(
                out,
                inp,
                &params[self.w_range(l)],
                &params[self.b_range(l)],
                b,
                c,
                oc,
            );
            if l != last {
                relu_forward(out);
            }
        }
        let classes = self.dims[self.layers()];
        let logits = &ws.acts[self.layers()][..b * classes];
        let dlogits = want_grad.then(|| &mut ws.grads[self.layers()][..b * classes]);
        softmax_xent(dlogits, logits, y, b, classes)
    }
}

fn split_wb(
    grads: &mut [f32],
    w: std::ops::Range<usize>,
    b: std::ops::Range<usize>,
) -> (&mut [f32], &mut [f32]) {
    debug_assert_eq!(w.end, b.start);
    let (head, tail) = grads[w.start..b.end].split_at_mut(w.len());
    (head, tail)
}

/// Activation and activation-gradient buffers, grown to the largest batch seen.
/// acts[0] and grads[0] are unused (the input is borrowed from the batch).
#[derive(Default)]
pub struct Workspace {
    acts: Vec<Vec<f32>>,
    grads: Vec<Vec<f32>>,
}

impl Workspace {
    fn ensure(&mut self, dims: &[usize], b: usize) {
        if self.acts.len() != dims.len() {
            self.acts = vec![Vec::new(); dims.len()];
            self.grads = vec![Vec::new(); dims.len()];
        }
        for (l, &d) in dims.iter().enumerate().skip(1) {
            if self.acts[l].len() < b * d {
                self.acts[l].resize(b * d, 0.0);
                self.grads[l].resize(b * d, 0.0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs_and_rejects_bad_ones() {
        assert_eq!("mlp:128".parse::<ModelSpec>().unwrap().hidden, vec![128]);
        assert_eq!(
            "mlp:256,64".parse::<ModelSpec>().unwrap().hidden,
            vec![256, 64]
        );
        assert_eq!(
            "mlp:".parse::<ModelSpec>().unwrap().hidden,
            Vec::<usize>::new()
        );
        assert!("cnn:3".parse::<ModelSpec>().unwrap_err().contains("mlp:H1"));
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
        let m = Mlp::new(64, &ModelSpec { hidden: vec![128] }, 10);
        assert_eq!(m.n_params, 64 * 128 + 128 + 128 * 10 + 10);
        assert_eq!(m.shape_string(), "64-128-10");
        assert_eq!(m.tensors[1].name, "mlp.0.bias");
        assert_eq!(m.tensors[3].offset + m.tensors[3].len, m.n_params);
    }

    #[test]
    fn whole_model_gradient_matches_finite_differences() {
        let m = Mlp::new(5, &ModelSpec { hidden: vec![7, 6] }, 4);
        let params = m.init_params(9);
        let mut rng = Rng::new(5);
        let b = 3;
        let x: Vec<f32> = (0..b * 5).map(|_| rng.normal()).collect();
        let y = [1u32, 3, 0];
        let mut ws = Workspace::default();
        let mut grads = vec![0.0; m.n_params];
        m.forward_backward(&params, &mut grads, &mut ws, &x, &y, b);
        let mut p = params.clone();
        for i in (0..m.n_params).step_by(3) {
            let h = 1e-2f32;
            let p0 = p[i];
            p[i] = p0 + h;
            let lp = m.evaluate(&p, &mut ws, &x, &y, b).0;
            p[i] = p0 - h;
            let lm = m.evaluate(&p, &mut ws, &x, &y, b).0;
            p[i] = p0;
            let num = (lp - lm) / (2.0 * h as f64);
            assert!(
                (grads[i] as f64 - num).abs() <= 3e-3 + 3e-3 * num.abs(),
                "param {i}: {} vs {num}",
                grads[i]
            );
        }
    }
}
