//! Convolutions through cuDNN, where it loads: dense and depthwise (a group per channel; the own
//! kernels' under `MGTOP_GPU_DEPTHWISE=own`, `leave_grouped`; channels-last 1x1 ones cuBLAS's
//! products under `MGTOP_GPU_POINTWISE=gemm`, `leave_pointwise`: `takes` says which), in
//! the replica's layout (`layout::Layout`: NCHW, or channels last with NHWC filters), in the
//! activations' element type (`Elem`: fp32, or bf16 with fp32 compute), forward, input gradient (written) and weight gradient (accumulated, beta 1,
//! as every backward here, or written into bf16 scratch for a bf16 run to add to its fp32
//! gradients). The bias stays with the own kernels
//! (`conv_bias_add_f32`, `conv_bias_grad_f32`). Descriptors and algorithms are planned once per
//! shape (batch rows included), the algorithms measured (`measure`, as PyTorch's
//! `cudnn.benchmark`), or with `MGTOP_CUDNN_ALGOS=deterministic` the heuristics' first
//! deterministic ones (as `cudnn.deterministic`), or with `MGTOP_CUDNN_ALGOS=heuristic` or where
//! choosing fails, cuDNN's heuristics' first pick (a deterministic run: fixed deterministic
//! algorithms); one workspace, grown to the largest plan's need up to `MAX_WORKSPACE` (a pick
//! needing more takes one that fits: for a deterministic run its deterministic fallback where
//! the shape allows, and last of all cuDNN's no-workspace algorithm, which may not be).
//!
//! Math: strict fp32 (`CUDNN_FMA_MATH`) for `--precision fp32`, TF32 tensor cores allowed
//! (`CUDNN_DEFAULT_MATH`) for `tf32`, the tensor cores (`CUDNN_TENSOR_OP_MATH`) for bf16
//! tensors. A replica checks its cuDNN once against the own kernels
//! before using it (`check`), and trains with the own kernels where that fails.
//!
//! That is the legacy API's (`cudnnConvolution*`, an algorithm enum each); with
//! `MGTOP_CUDNN_API=graph` each shape goes to the graph API's engines first (`graph`: the same
//! choosing, the same numerics), and to the legacy API where no engine takes it.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::cudnn::sys::{
    cudnnConvolutionBwdDataAlgo_t as DataAlgo, cudnnConvolutionBwdFilterAlgo_t as FilterAlgo,
    cudnnConvolutionFwdAlgo_t as FwdAlgo, cudnnConvolutionMode_t, cudnnMathType_t,
};
use cudarc::cudnn::{
    ConvBackwardData, ConvBackwardFilter, ConvDescriptor, ConvForward, Cudnn, CudnnError,
    FilterDescriptor, TensorDescriptor,
};
use cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut};

use super::elem::Elem;
use super::layout::Layout;
use super::pointwise;
use crate::nn::grouped::ConvGeom;
use crate::nn::precision::Precision;

mod backend;
mod check;
mod graph;
mod measure;

pub use check::{bf16_trusted, check, check_channels_last, for_replica};
pub use graph::Api;
pub use measure::Choice as AlgoChoice;

/// The most workspace memory the convolutions may take (as the own kernels' column scratch).
pub const MAX_WORKSPACE: usize = 256 << 20;

/// Whether cuDNN can be loaded (cudarc panics on a call into a library it cannot load) and is
/// cuDNN 9 or newer (whose API the convolutions use).
pub fn available() -> bool {
    loaded() && too_old().is_none()
}

/// Whether a cuDNN library loads, of any version.
fn loaded() -> bool {
    // SAFETY: only tries to dlopen the library under cudarc's names; nothing is called.
    unsafe { cudarc::cudnn::sys::is_culib_present() }
}

/// The version of a cuDNN that loads but is older than 9 (its convolutions are not used).
pub fn too_old() -> Option<String> {
    let v = loaded().then(cudarc::cudnn::result::get_version)?;
    (major(v) < 9).then(|| version_text(v))
}

/// Whether convolutions should go through cuDNN: it loads, and `MGTOP_CUDNN` is not `off`.
pub fn wanted() -> bool {
    asked(std::env::var("MGTOP_CUDNN").ok().as_deref()).unwrap_or(true) && available()
}

/// `MGTOP_CUDNN`'s value: `off` (or `0`) keeps the own kernels; `on`, `1` or none use cuDNN;
/// anything else is a slip, said (and taken as on, the default).
pub fn asked(value: Option<&str>) -> Result<bool, String> {
    match value {
        None | Some("" | "on" | "1") => Ok(true),
        Some("off" | "0") => Ok(false),
        Some(other) => Err(format!(
            "MGTOP_CUDNN={other} is neither on nor off: cuDNN is used (MGTOP_CUDNN=off keeps the own kernels)"
        )),
    }
}

/// "9.3.0", the loaded cuDNN's version.
pub fn version() -> String {
    version_text(cudarc::cudnn::result::get_version())
}

/// A cuDNN version number's major version: cuDNN 9 writes major * 10000 + minor * 100 +
/// patch, earlier ones major * 1000 + minor * 100 + patch.
fn major(v: usize) -> usize {
    match v >= 10000 {
        true => v / 10000,
        false => v / 1000,
    }
}

/// A cuDNN version number as text ("9.3.0", "8.9.7").
fn version_text(v: usize) -> String {
    match v >= 10000 {
        true => format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100),
        false => format!("{}.{}.{}", v / 1000, v / 100 % 10, v % 100),
    }
}

/// One convolution's shape: `b` images through window `g` in `groups` groups, the activations
/// and the weights in `layout` (channels last: cuDNN's NHWC tensors and filters).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Key {
    pub b: usize,
    pub groups: usize,
    pub g: ConvGeom,
    pub layout: Layout,
}

/// What cuDNN needs for one shape, made once: tensors of `E`, fp32 compute.
struct Plan<E: Elem> {
    conv: ConvDescriptor<f32>,
    x: TensorDescriptor<E>,
    w: FilterDescriptor<E>,
    y: TensorDescriptor<E>,
    fwd: FwdAlgo,
    data: DataAlgo,
    filter: FilterAlgo,
}

/// cuDNN on one GPU's stream, with its plans and workspace, for activations of type `E`.
pub struct Dnn<E: Elem = f32> {
    stream: Arc<CudaStream>,
    handle: Arc<Cudnn>,
    math: cudnnMathType_t,
    plans: HashMap<Key, Plan<E>>,
    workspace: CudaSlice<u8>,
    /// How algorithms are chosen, and the handle that measures or lists them (see `measure`).
    how: measure::Choice,
    measurer: Option<measure::Measurer>,
    /// Whether it runs the grouped (depthwise) convolutions too, or leaves them to the own
    /// kernels (`leave_grouped`).
    grouped: bool,
    /// Whether it runs the channels-last 1x1 convolutions too, or leaves them to cuBLAS
    /// (`leave_pointwise`).
    pointwise: bool,
    /// The graph API's plans, tried first (`MGTOP_CUDNN_API=graph`).
    graph: Option<graph::Plans>,
}

fn int(v: usize) -> Result<i32, String> {
    i32::try_from(v).map_err(|_| format!("dimension {v} is beyond cuDNN's 32-bit sizes"))
}

fn say(what: &str) -> impl FnOnce(CudnnError) -> String + '_ {
    move |e| format!("cuDNN {what}: {e:?}")
}

impl<E: Elem> Dnn<E> {
    /// cuDNN on `stream`, computing in `precision` (tensor cores for bf16 tensors), through
    /// the API `MGTOP_CUDNN_API` asks for.
    pub fn open(stream: &Arc<CudaStream>, precision: Precision) -> Result<Dnn<E>, String> {
        Dnn::open_with(stream, precision, Api::from_env())
    }

    /// `open` through `api`.
    pub fn open_with(
        stream: &Arc<CudaStream>,
        precision: Precision,
        api: Api,
    ) -> Result<Dnn<E>, String> {
        let handle = Cudnn::new(stream.clone()).map_err(say("create a handle"))?;
        let how = measure::Choice::from_env();
        let workspace = stream
            .alloc_zeros::<u8>(1)
            .map_err(|e| format!("allocate cuDNN's workspace: {e:?}"))?;
        Ok(Dnn {
            stream: stream.clone(),
            handle,
            math: math(E::BF16, precision),
            graph: match api {
                Api::Legacy => None,
                Api::Graph => Some(graph::Plans::open(
                    stream,
                    (E::DATA_TYPE, std::mem::size_of::<E>()),
                    graph::Numerics {
                        tensor_cores: E::BF16 || precision == Precision::Tf32,
                        deterministic: how == measure::Choice::Deterministic,
                    },
                    how,
                )?),
            },
            plans: HashMap::new(),
            workspace,
            how,
            // without its handle, every shape takes the heuristics' first pick
            measurer: match how {
                measure::Choice::Heuristic => None,
                _ => measure::Measurer::open(stream).ok(),
            },
            grouped: true,
            pointwise: true,
        })
    }

    /// From now on the grouped convolutions are the own kernels' (`MGTOP_GPU_DEPTHWISE=own`).
    pub fn leave_grouped(&mut self) {
        self.grouped = false;
    }

    /// From now on the channels-last 1x1 convolutions are cuBLAS's products
    /// (`MGTOP_GPU_POINTWISE=gemm`).
    pub fn leave_pointwise(&mut self) {
        self.pointwise = false;
    }

    /// Whether it runs a convolution of `g` in `groups` groups over `layout` activations.
    pub fn takes(&self, groups: usize, g: &ConvGeom, layout: Layout) -> bool {
        match groups {
            1 => self.pointwise || !pointwise::takes(layout, g, groups),
            _ => self.grouped,
        }
    }

    /// Makes the plan for `k` on first use (the workspace grown to what it needs).
    fn plan(&mut self, k: Key) -> Result<(), String> {
        if !self.plans.contains_key(&k) {
            let plan = self.make(k)?;
            self.plans.insert(k, plan);
        }
        Ok(())
    }

    fn make(&mut self, k: Key) -> Result<Plan<E>, String> {
        let g = &k.g;
        // (the dimensions in N, C, H, W order whatever the format)
        let format = k.layout.format();
        let h = &self.handle;
        let x = h
            .create_4d_tensor::<E>(format, [int(k.b)?, int(g.c)?, int(g.h)?, int(g.w)?])
            .map_err(say("describe the input"))?;
        let y = h
            .create_4d_tensor::<E>(format, [int(k.b)?, int(g.oc)?, int(g.oh)?, int(g.ow)?])
            .map_err(say("describe the output"))?;
        let w = h
            .create_4d_filter::<E>(
                format,
                [int(g.oc)?, int(g.c / k.groups)?, int(g.k)?, int(g.k)?],
            )
            .map_err(say("describe the weights"))?;
        let mut conv = h
            .create_conv2d::<f32>(
                [int(g.pad)?, int(g.pad)?],
                [int(g.stride)?, int(g.stride)?],
                [1, 1],
                cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
            )
            .map_err(say("describe the convolution"))?;
        conv.set_math_type(self.math)
            .map_err(say("set the math type"))?;
        conv.set_group_count(int(k.groups)?)
            .map_err(say("set the group count"))?;
        let f = ConvForward {
            conv: &conv,
            x: &x,
            w: &w,
            y: &y,
        };
        let d = ConvBackwardData {
            conv: &conv,
            dx: &x,
            w: &w,
            dy: &y,
        };
        let b = ConvBackwardFilter {
            conv: &conv,
            x: &x,
            dw: &w,
            dy: &y,
        };
        // measured (or deterministic) where it can be (each fits MAX_WORKSPACE)
        let chosen = self.measurer.as_ref().and_then(|m| {
            m.choose(k, self.how, self.math, E::DATA_TYPE, MAX_WORKSPACE)
                .ok()
        });
        // where nothing was chosen: the heuristics' first pick, or a deterministic run's fixed
        // algorithms; past the workspace bound the fallback, then the no-workspace algorithms
        let (fallback, last) = (self.how.fallback(), measure::NO_WORKSPACE);
        let chosen = match (chosen, self.how) {
            (None, measure::Choice::Deterministic) => Some(fallback),
            (c, _) => c,
        };
        let (fwd, need_f) = measure::fitting(
            "pick a forward algorithm",
            chosen.map_or_else(|| f.pick_algorithm(), |a| Ok(a.fwd)),
            |a| f.get_workspace_size(a),
            [fallback.fwd, last.fwd],
        )?;
        let (data, need_d) = measure::fitting(
            "pick an input-gradient algorithm",
            chosen.map_or_else(|| d.pick_algorithm(), |a| Ok(a.data)),
            |a| d.get_workspace_size(a),
            [fallback.data, last.data],
        )?;
        let (filter, need_w) = measure::fitting(
            "pick a weight-gradient algorithm",
            chosen.map_or_else(|| b.pick_algorithm(), |a| Ok(a.filter)),
            |a| b.get_workspace_size(a),
            [fallback.filter, last.filter],
        )?;
        let need = need_f.max(need_d).max(need_w);
        if need > self.workspace.len() {
            self.workspace = self
                .stream
                .alloc_zeros::<u8>(need)
                .map_err(|e| format!("allocate {need} bytes of cuDNN workspace: {e:?}"))?;
        }
        Ok(Plan {
            conv,
            x,
            w,
            y,
            fwd,
            data,
            filter,
        })
    }

    /// Through the graph API: how much of what was asked it runs; the legacy API: `None`.
    pub fn graph_coverage(&self) -> Option<graph::Coverage> {
        self.graph.as_ref().map(graph::Plans::coverage)
    }

    /// The bytes of workspace held: a graph captured over it is stale once it grows.
    pub fn workspace_len(&self) -> usize {
        self.workspace.len()
    }

    /// y[b, oc, oh, ow] = x (*) w (no bias), overwritten.
    pub fn forward(
        &mut self,
        k: Key,
        y: &mut CudaViewMut<'_, E>,
        x: &CudaView<'_, E>,
        w: &CudaView<'_, E>,
    ) -> Result<(), String> {
        let by_graph = {
            let s = self.stream.clone();
            let ((px, _rx), (pw, _rw), (py, _ry)) =
                (x.device_ptr(&s), w.device_ptr(&s), y.device_ptr_mut(&s));
            self.by_graph(k, (graph::Dir::Forward, 0.0), [px, pw, py])
        };
        if by_graph.map_err(|e| format!("convolution forward: {e}"))? {
            return Ok(());
        }
        self.plan(k)?;
        let Dnn {
            plans, workspace, ..
        } = self;
        let p = &plans[&k];
        let f = ConvForward {
            conv: &p.conv,
            x: &p.x,
            w: &p.w,
            y: &p.y,
        };
        let mut ws = workspace.slice_mut(..);
        let (one, zero) = (E::from_f32(1.0), E::from_f32(0.0));
        // SAFETY: the descriptors were made for these buffers' shapes (`Key`), type and layout,
        // and the callers check each buffer's length against them before a launch
        unsafe { f.launch(p.fwd, Some(&mut ws), (one, zero), x, w, y) }
            .map_err(say("convolution forward"))
    }

    /// dx = d/dx (overwritten; skipped when `None`), dw = d/dw + `dw_beta` * dw (1: added to
    /// it, 0: overwritten), from dy.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &mut self,
        k: Key,
        dx: Option<&mut CudaViewMut<'_, E>>,
        (dw, dw_beta): (&mut CudaViewMut<'_, E>, f32),
        dy: &CudaView<'_, E>,
        x: &CudaView<'_, E>,
        w: &CudaView<'_, E>,
    ) -> Result<(), String> {
        self.weight_gradient(k, (dw, dw_beta), dy, x)?;
        match dx {
            Some(dx) => self.input_gradient(k, dx, dy, w),
            None => Ok(()),
        }
    }

    /// Direction `dir` of shape `k` on the buffers at `ptrs` through the graph API: false
    /// where it is not asked for or has no plan for the shape.
    fn by_graph(&mut self, k: Key, dir: (graph::Dir, f32), ptrs: [u64; 3]) -> Result<bool, String> {
        match self.graph.as_mut() {
            // SAFETY: the callers pass buffers of shape `k` (checked against it before a
            // launch), of type `E` in the replica's layout, as the plans are made for
            Some(g) => unsafe { g.run(k, dir, ptrs, &mut self.workspace) },
            None => Ok(false),
        }
    }

    fn weight_gradient(
        &mut self,
        k: Key,
        (dw, dw_beta): (&mut CudaViewMut<'_, E>, f32),
        dy: &CudaView<'_, E>,
        x: &CudaView<'_, E>,
    ) -> Result<(), String> {
        let by_graph = {
            let s = self.stream.clone();
            let ((px, _rx), (pdw, _rdw), (pdy, _rdy)) =
                (x.device_ptr(&s), dw.device_ptr_mut(&s), dy.device_ptr(&s));
            self.by_graph(k, (graph::Dir::Filter, dw_beta), [px, pdw, pdy])
        };
        if by_graph.map_err(|e| format!("weight gradient: {e}"))? {
            return Ok(());
        }
        self.plan(k)?;
        let p = &self.plans[&k];
        let b = ConvBackwardFilter {
            conv: &p.conv,
            x: &p.x,
            dw: &p.w,
            dy: &p.y,
        };
        let mut ws = self.workspace.slice_mut(..);
        let (one, beta) = (E::from_f32(1.0), E::from_f32(dw_beta));
        // SAFETY: as `forward`
        unsafe { b.launch(p.filter, Some(&mut ws), (one, beta), x, dw, dy) }
            .map_err(say("weight gradient"))
    }

    fn input_gradient(
        &mut self,
        k: Key,
        dx: &mut CudaViewMut<'_, E>,
        dy: &CudaView<'_, E>,
        w: &CudaView<'_, E>,
    ) -> Result<(), String> {
        let by_graph = {
            let s = self.stream.clone();
            let ((pdx, _rdx), (pw, _rw), (pdy, _rdy)) =
                (dx.device_ptr_mut(&s), w.device_ptr(&s), dy.device_ptr(&s));
            self.by_graph(k, (graph::Dir::Data, 0.0), [pdx, pw, pdy])
        };
        if by_graph.map_err(|e| format!("input gradient: {e}"))? {
            return Ok(());
        }
        self.plan(k)?;
        let p = &self.plans[&k];
        let d = ConvBackwardData {
            conv: &p.conv,
            dx: &p.x,
            w: &p.w,
            dy: &p.y,
        };
        let mut ws = self.workspace.slice_mut(..);
        let (one, zero) = (E::from_f32(1.0), E::from_f32(0.0));
        // SAFETY: as `forward`
        unsafe { d.launch(p.data, Some(&mut ws), (one, zero), dx, w, dy) }
            .map_err(say("input gradient"))
    }
}

/// The math a convolution of bf16 tensors (`bf16`) or fp32 ones computes in under `precision`.
fn math(bf16: bool, precision: Precision) -> cudnnMathType_t {
    match (bf16, precision) {
        // (the legacy API runs half-precision types on the tensor cores only when asked to:
        // PyTorch sets this for its fp16 / bf16 convolutions)
        (true, _) => cudnnMathType_t::CUDNN_TENSOR_OP_MATH,
        (false, Precision::Tf32) => cudnnMathType_t::CUDNN_DEFAULT_MATH,
        // fp32 tensors of a bf16 run are none of the products' (checks only): strict
        (false, Precision::Fp32 | Precision::Bf16) => cudnnMathType_t::CUDNN_FMA_MATH,
    }
}

/// Ends a cuDNN context, whose descriptors' and handle's drops panic after a sticky CUDA
/// error: while the thread is already panicking it is leaked instead (a second panic would
/// abort the process), otherwise a failure is ignored.
pub fn close<E: Elem>(dnn: Dnn<E>) {
    if std::thread::panicking() {
        std::mem::forget(dnn);
    } else {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(dnn)));
    }
}

#[cfg(test)]
mod tests;
