//! The model: a small graph of ops (convolution, depthwise convolution, batch norm, ReLU/ReLU6,
//! add, pooling, linear, dropout; softmax cross-entropy on the logits) planned once for an input
//! shape: every value's shape, every parameter's place in one flat buffer (so a gradient
//! all-reduce is one call) under PyTorch's names, the buffers that are state but not parameters
//! (batch norm's running statistics) and the FLOPs per sample. `interp` walks it forward and
//! backward; a backend implements the ops (`cpu` here, CUDA in `backend::cuda`).

mod bn_pass;
mod build;
pub mod cpu;
pub mod interp;
mod op;
mod presets;
pub mod pytorch;
mod spec;
mod summary;

pub use crate::nn::window::Window;
pub use bn_pass::BnPass;
pub use build::{Builder, WeightInit};
pub use cpu::{SumAcross, Workspace};
pub use op::{Act, Node, Op, ValueId, BN_EPS, BN_MOMENTUM};
pub use presets::{Preset, SMALL as SMALL_IMAGES};
pub use spec::ModelSpec;

use std::ops::Range;

use crate::nn::rng::{tag, Rng};
use crate::nn::shape::Shape;

/// Rows evaluated at a time, at most (`Model::eval_rows`).
pub const EVAL_ROWS: usize = 512;

/// The smallest image side `Model::dense_convs_on_large_images` counts as large (ImageNet's
/// 224 and its halves; CIFAR's 32 is small).
pub const LARGE_SIDE: usize = 112;

/// Activation floats an evaluation chunk may take (256 MiB).
const EVAL_FLOATS: usize = 1 << 26;

/// One named tensor inside a flat buffer (parameters, or batch norm's running statistics).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub shape: Vec<usize>,
    pub offset: usize,
    pub len: usize,
}

impl TensorInfo {
    pub fn range(&self) -> Range<usize> {
        self.offset..self.offset + self.len
    }
}

/// How a parameter starts.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Init {
    Uniform(f32),
    Normal(f32),
    Const(f32),
}

/// A planned model graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    pub input: Shape,
    /// Every value's shape per sample: the input first, the logits last.
    pub values: Vec<Shape>,
    /// Elements per sample of every value.
    pub dims: Vec<usize>,
    /// In order: a node's inputs are made by nodes before it.
    pub nodes: Vec<Node>,
    /// The parameters, in their flat buffer's order.
    pub tensors: Vec<TensorInfo>,
    /// The running statistics, in the buffer vector's order.
    pub buffers: Vec<TensorInfo>,
    pub n_params: usize,
    pub n_buffers: usize,
    /// Which stem a preset chose for the input size (for the start-up lines).
    pub stem: Option<&'static str>,
    /// What torchvision's model of the same name needs changed to take these weights (a
    /// small-image stem), as Python; None where it takes them as they are.
    pub torchvision_changes: Option<&'static str>,
    /// The loss's label smoothing (`--label-smoothing`; 0: plain cross-entropy).
    pub label_smoothing: f32,
    /// The `--model` it was built from (`resnet20`, `conv8k3,pool2`), for messages.
    pub spec: String,
    /// Whether `--model` gave a layer list (its tensors named by their place in it:
    /// `conv.0.weight`), not a named network (torchvision's names).
    pub layer_list: bool,
    inits: Vec<Init>,
    buffer_inits: Vec<f32>,
    /// How many nodes read each value.
    consumers: Vec<usize>,
    /// Which values' gradients backward needs: those with trainable parameters upstream.
    needs_grad: Vec<bool>,
    /// Tensors the optimizer leaves alone (`freeze`).
    pub frozen: Vec<usize>,
    /// Per node, the batch norms that normalise by their running statistics in training too
    /// (`fix_statistics`; empty: none).
    fixed_stats: Vec<bool>,
}

impl Model {
    /// The model `spec` builds on samples of shape `input` with `classes` outputs; an error
    /// names the layer at fault (a conv layer on flat data, an image shrunk below 1x1).
    pub fn new(input: Shape, spec: &ModelSpec, classes: usize) -> Result<Model, String> {
        let model = spec.build(input, classes)?;
        Ok(Model {
            spec: spec.to_string(),
            ..model
        })
    }

    /// An MLP on flat inputs (what tests and benchmarks build).
    pub fn mlp(inputs: usize, hidden: &[usize], classes: usize) -> Model {
        Model::new(Shape::Flat(inputs), &ModelSpec::mlp(hidden), classes)
            .expect("an MLP on a non-empty input with classes")
    }

    /// The logits' value.
    pub fn output(&self) -> ValueId {
        self.values.len() - 1
    }

    pub fn classes(&self) -> usize {
        self.dims[self.output()]
    }

    /// How many nodes read value `v`.
    pub fn consumers(&self, v: ValueId) -> usize {
        self.consumers[v]
    }

    /// Linear layers and activations only (an MLP: trains on the GPU backend as on the CPU).
    pub fn is_mlp(&self) -> bool {
        self.nodes
            .iter()
            .all(|n| matches!(n.op, Op::Linear { .. } | Op::Activation(_)))
    }

    /// Whether the model has batch norm (running statistics to keep in step across replicas).
    pub fn has_batch_norm(&self) -> bool {
        self.n_buffers > 0
    }

    /// Whether the model has dropout (random per replica: N ranks then differ from 1).
    pub fn has_dropout(&self) -> bool {
        self.nodes
            .iter()
            .any(|n| matches!(n.op, Op::Dropout { .. }))
    }

    /// "64-128-10" for an MLP; with images the shapes where they change,
    /// "1x8x8-16x6x6-16x3x3-64-10".
    pub fn shape_string(&self) -> String {
        let mut shapes: Vec<Shape> = vec![self.input];
        for n in &self.nodes {
            let s = self.values[n.output];
            // every dense layer (an MLP's widths: 64-512-512-10); a convolution or pooling
            // where it changes the shape (a residual stage's convolutions keep it)
            let dense = matches!(n.op, Op::Linear { .. });
            let spatial = matches!(
                n.op,
                Op::Conv { .. } | Op::MaxPool(_) | Op::AvgPool(_) | Op::GlobalAvgPool { .. }
            );
            if dense || (spatial && shapes.last() != Some(&s)) {
                shapes.push(s);
            }
        }
        let parts: Vec<String> = shapes.iter().map(|s| s.to_string()).collect();
        if parts.len() <= 12 {
            return parts.join("-");
        }
        format!(
            "{}-...-{}",
            parts[..4].join("-"),
            parts[parts.len() - 3..].join("-")
        )
    }

    /// Rows to evaluate at a time: up to `EVAL_ROWS`, fewer where the activations of that many
    /// would pass `EVAL_FLOATS` (a ResNet-50 at 224x224 holds ~13M floats per sample).
    pub fn eval_rows(&self) -> usize {
        let width: usize = self.dims.iter().sum();
        (EVAL_FLOATS / width.max(1)).clamp(1, EVAL_ROWS)
    }

    /// The CPU's column scratch for the dense convolutions, in floats: grown to the largest's
    /// (`grouped::Scratch`), per rank, whatever the batch.
    pub fn conv_scratch_floats(&self) -> usize {
        crate::nn::grouped::Scratch::floats_for(self.nodes.iter().filter_map(|n| match &n.op {
            Op::Conv { g, groups: 1, .. } => Some(g),
            _ => None,
        }))
    }

    /// Forward FLOPs per sample (a multiply-add counts 2; batch norm, pooling and adds their
    /// elementwise work). A training step is about 3x this.
    pub fn flops_per_sample(&self) -> u64 {
        self.nodes
            .iter()
            .map(|n| n.op.flops(self.dims[n.output]))
            .sum()
    }

    /// Whether every convolution is dense (none grouped) and the first reads an image of at
    /// least `LARGE_SIDE` on each side: the ResNets on ImageNet-sized images, which an H100
    /// trained faster channels last (1.24-1.29x) and in bf16 (1.21-1.27x over TF32), where
    /// MobileNetV2 (depthwise) and the CIFAR ResNets (32x32) ran slower both ways. GPUs' `auto`
    /// layout and precision follow it.
    pub fn dense_convs_on_large_images(&self) -> bool {
        let convs = || {
            self.nodes.iter().filter_map(|n| match n.op {
                Op::Conv { g, groups, .. } => Some((g, groups)),
                _ => None,
            })
        };
        let dense = convs().all(|(_, groups)| groups == 1);
        let large = convs()
            .next()
            .is_some_and(|(g, _)| g.h.min(g.w) >= LARGE_SIDE);
        dense && large
    }

    /// Parameters of node `n`.
    pub fn node_params(&self, n: &Node) -> usize {
        n.params.iter().map(|&t| self.tensors[t].len).sum()
    }

    /// Node `n`'s inputs and output: `16x32x32 + 16x32x32 -> 16x32x32`.
    pub fn shapes(&self, n: &Node) -> String {
        let ins: Vec<String> = n
            .inputs
            .iter()
            .map(|&i| self.values[i].to_string())
            .collect();
        format!("{} -> {}", ins.join(" + "), self.values[n.output])
    }

    /// The flat-buffer ranges of node `n`'s weight and bias (an empty range without bias).
    pub fn weight_bias(&self, n: &Node) -> (Range<usize>, Range<usize>) {
        let w = self.tensors[n.params[0]].range();
        let b = match n.params.get(1) {
            Some(&t) => self.tensors[t].range(),
            None => w.end..w.end,
        };
        (w, b)
    }

    /// The parameters weight decay leaves alone with `--no-decay-bn-bias`: batch norm's weights
    /// and biases, and every bias; contiguous ranges merged, in order.
    pub fn no_decay_ranges(&self) -> Vec<Range<usize>> {
        let mut out: Vec<Range<usize>> = Vec::new();
        for n in &self.nodes {
            let bn = matches!(n.op, Op::BatchNorm { .. });
            for (k, &t) in n.params.iter().enumerate() {
                if !(bn || k == 1) {
                    continue;
                }
                let r = self.tensors[t].range();
                match out.last_mut() {
                    Some(last) if last.end == r.start => last.end = r.end,
                    _ => out.push(r),
                }
            }
        }
        out
    }

    /// The classifier head: the tensors of the last linear layer (what a fine-tuning run with
    /// other classes starts afresh, and what `--freeze backbone` leaves trainable).
    pub fn head_tensors(&self) -> Vec<usize> {
        (self.nodes.iter().rev())
            .find(|n| matches!(n.op, Op::Linear { .. }))
            .map_or(Vec::new(), |n| n.params.clone())
    }

    /// Freezes the tensors `frozen` (indices into `tensors`): backward then runs only where a
    /// trainable parameter is upstream (a frozen backbone under a trainable head: the head
    /// alone). The optimizer leaves their ranges alone (`frozen_ranges`).
    pub fn freeze(&mut self, frozen: &[usize]) {
        let mut is_frozen = vec![false; self.tensors.len()];
        for &t in frozen {
            is_frozen[t] = true;
        }
        let mut need = vec![false; self.values.len()];
        for n in &self.nodes {
            need[n.output] =
                n.params.iter().any(|&t| !is_frozen[t]) || n.inputs.iter().any(|&i| need[i]);
        }
        self.needs_grad = need;
        self.frozen = frozen.to_vec();
    }

    /// The flat buffer's ranges of the frozen tensors, in order, neighbours merged.
    pub fn frozen_ranges(&self) -> Vec<Range<usize>> {
        let mut rs: Vec<Range<usize>> = self
            .frozen
            .iter()
            .map(|&t| self.tensors[t].range())
            .collect();
        rs.sort_by_key(|r| r.start);
        let mut out: Vec<Range<usize>> = Vec::new();
        for r in rs {
            match out.last_mut() {
                Some(last) if last.end == r.start => last.end = r.end,
                _ => out.push(r),
            }
        }
        out
    }

    /// The starting parameters: each tensor drawn from its initialisation (PyTorch's layer
    /// defaults, or torchvision's for the presets) from one seeded stream, in order.
    pub fn init_params(&self, seed: u64) -> Vec<f32> {
        let mut p = vec![0.0; self.n_params];
        let mut rng = Rng::stream(seed, tag::INIT, 0);
        for (t, init) in self.tensors.iter().zip(&self.inits) {
            let mut draw = || match *init {
                Init::Uniform(b) => rng.uniform(-b, b),
                Init::Normal(std) => rng.normal() * std,
                Init::Const(c) => c,
            };
            let dst = &mut p[t.range()];
            match t.shape[..] {
                // a linear weight [out, in] drawn input-major, as this program laid it out
                // before it took PyTorch's layout: the same seed still gives the same network
                [out, inp] => {
                    for i in 0..inp {
                        for o in 0..out {
                            dst[o * inp + i] = draw();
                        }
                    }
                }
                _ => dst.iter_mut().for_each(|v| *v = draw()),
            }
        }
        p
    }

    /// The starting running statistics: means 0, variances 1 (PyTorch's).
    pub fn init_buffers(&self) -> Vec<f32> {
        let mut b = vec![0.0; self.n_buffers];
        for (t, &v) in self.buffers.iter().zip(&self.buffer_inits) {
            b[t.range()].fill(v);
        }
        b
    }
}

/// `4.7 MFLOP`, `1.2 GFLOP`.
pub fn flops_text(f: u64) -> String {
    let f = f as f64;
    match f {
        f if f >= 1e9 => format!("{:.2} GFLOP", f / 1e9),
        f if f >= 1e6 => format!("{:.1} MFLOP", f / 1e6),
        f if f >= 1e3 => format!("{:.1} kFLOP", f / 1e3),
        f => format!("{f:.0} FLOP"),
    }
}

#[cfg(test)]
mod grad_tests;
#[cfg(test)]
mod tests;
