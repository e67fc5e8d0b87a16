//! `selftest`'s checks of the bf16 twins (`--precision bf16`): each op that touches activations
//! runs twice on the GPU, on fp32 buffers (checked against the CPU by the other selftests) and on
//! bf16 ones, from the same inputs (rounded to bf16 first, so both see identical values). The
//! kernels compute in fp32 either way, so the two differ by the rounding of the bf16 outputs
//! (2^-9 relative) and of what a bf16 product accumulates: an op whose twin reads or writes the
//! wrong element, or a cuDNN / cuBLAS configuration that bf16 gets wrong, is far outside that.

use cudarc::driver::CudaSlice;

use super::compare::{check, compare, Check};
use crate::backend::cuda::blas::gemm;
use crate::backend::cuda::dnn::{Api, Dnn, Key};
use crate::backend::cuda::elem::{bf16, Elem};
use crate::backend::cuda::layout::Layout;
use crate::backend::cuda::{conv, convert, dwconv, on, ops, pool, CudaError, Gpu};
use crate::nn::grouped::ConvGeom;
use crate::nn::ops::Act;
use crate::nn::precision::Precision;
use crate::nn::rng::Rng;
use crate::nn::window::Window;

pub(super) type Got = Result<Vec<(&'static str, Vec<f32>)>, CudaError>;

/// `v` on the GPU as `E` (at least one element).
pub(super) fn up<E: Elem>(gpu: &Gpu, v: &[f32]) -> Result<CudaSlice<E>, CudaError> {
    let v: Vec<E> = v.iter().map(|&x| E::from_f32(x)).collect();
    match v.is_empty() {
        true => gpu.stream.alloc_zeros::<E>(1),
        false => gpu.stream.clone_htod(&v),
    }
    .map_err(on(gpu.index, "upload"))
}

/// `n` zeros of `E` on the GPU.
fn zeros<E: Elem>(gpu: &Gpu, n: usize) -> Result<CudaSlice<E>, CudaError> {
    gpu.stream
        .alloc_zeros::<E>(n.max(1))
        .map_err(on(gpu.index, "allocate"))
}

/// The first `n` elements of `v`, as f32.
pub(super) fn down<E: Elem>(gpu: &Gpu, v: &CudaSlice<E>, n: usize) -> Result<Vec<f32>, CudaError> {
    let got = (gpu.stream.clone_dtoh(&v.slice(..n))).map_err(on(gpu.index, "download"))?;
    Ok(got.into_iter().map(E::to_f32).collect())
}

pub(super) fn down32(gpu: &Gpu, v: &CudaSlice<f32>, n: usize) -> Result<Vec<f32>, CudaError> {
    down::<f32>(gpu, v, n)
}

/// Random values already on bf16's grid.
fn randn(rng: &mut Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| <bf16 as Elem>::from_f32(scale * rng.normal()).to_f32())
        .collect()
}

/// The inputs every op reads.
pub(super) struct Inputs {
    pub(super) x: Vec<f32>,
    pub(super) y: Vec<f32>,
    mask: Vec<f32>,
    /// batch norm: weight, bias, running statistics
    pub(super) w: Vec<f32>,
    pub(super) bias: Vec<f32>,
    pub(super) running: Vec<f32>,
    /// depthwise and dense convolution weights
    dw: Vec<f32>,
    cw: Vec<f32>,
    logits: Vec<f32>,
    labels: Vec<u32>,
}

pub(super) const B: usize = 4;
pub(super) const C: usize = 6;
pub(super) const H: usize = 9;
pub(super) const W: usize = 8;
pub(super) const N: usize = B * C * H * W;
const CLASSES: usize = 7;
const OC: usize = 8;

fn window() -> Window {
    Window {
        c: C,
        h: H,
        w: W,
        k: 3,
        stride: 2,
        pad: 1,
        oh: 5,
        ow: 4,
    }
}

fn depthwise() -> ConvGeom {
    ConvGeom {
        c: C,
        h: H,
        w: W,
        oc: C,
        k: 3,
        stride: 1,
        pad: 1,
        oh: H,
        ow: W,
    }
}

fn dense() -> ConvGeom {
    ConvGeom {
        c: C,
        h: H,
        w: W,
        oc: OC,
        k: 3,
        stride: 2,
        pad: 1,
        oh: 5,
        ow: 4,
    }
}

impl Inputs {
    fn new(rng: &mut Rng) -> Inputs {
        Inputs {
            x: randn(rng, N, 2.0),
            y: randn(rng, N, 1.0),
            mask: (0..N).map(|i| [0.0, 2.0][i % 3 % 2]).collect(),
            w: randn(rng, C, 1.0),
            bias: randn(rng, C, 1.0),
            running: (0..2 * C).map(|i| 0.5 + (i % C) as f32 * 0.25).collect(),
            dw: randn(rng, C * 9, 0.5),
            cw: randn(rng, OC * C * 9, 0.2),
            logits: randn(rng, B * CLASSES, 3.0),
            labels: (0..B as u32)
                .map(|i| (i * 3 + 1) % CLASSES as u32)
                .collect(),
        }
    }
}

/// Every op of `E` on `inp`: named outputs, as f32.
fn run<E: Elem>(gpu: &Gpu, inp: &Inputs) -> Got {
    let s = &gpu.stream;
    let mut out = Vec::new();
    let x = up::<E>(gpu, &inp.x)?;
    let y = up::<E>(gpu, &inp.y)?;
    let (xv, yv) = (x.slice(..), y.slice(..));
    let mask = s.clone_htod(&inp.mask).map_err(on(gpu.index, "upload"))?;

    // elementwise
    let mut t = up::<E>(gpu, &inp.x)?;
    ops::relu_forward(gpu, &mut t.slice_mut(..), N)?;
    out.push(("relu forward", down(gpu, &t, N)?));
    let mut d = up::<E>(gpu, &inp.y)?;
    ops::relu_backward(gpu, &mut d.slice_mut(..), &t.slice(..), N)?;
    out.push(("relu backward", down(gpu, &d, N)?));
    let mut t = up::<E>(gpu, &inp.x)?;
    ops::relu6_forward(gpu, &mut t.slice_mut(..), N)?;
    out.push(("relu6 forward", down(gpu, &t, N)?));
    let mut d = up::<E>(gpu, &inp.y)?;
    ops::relu6_backward(gpu, &mut d.slice_mut(..), &t.slice(..), N)?;
    out.push(("relu6 backward", down(gpu, &d, N)?));
    let mut t = up::<E>(gpu, &inp.x)?;
    ops::add(gpu, &mut t.slice_mut(..), (&xv, &yv), N, Act::Relu)?;
    out.push(("add+relu", down(gpu, &t, N)?));
    ops::accumulate(gpu, &mut t.slice_mut(..), &yv, N)?;
    out.push(("accumulate", down(gpu, &t, N)?));
    ops::mul(gpu, &mut t.slice_mut(..), &xv, &mask.slice(..), N)?;
    out.push(("mul (dropout)", down(gpu, &t, N)?));

    // batch norm over [B, C, H*W] and [4, 16, 27], in each layout
    out.extend(super::bf16_bn::batch_norms::<E>(gpu, inp)?);

    // pooling: padded max, average, global average
    let win = window();
    let n_out = B * C * win.oh * win.ow;
    let mut p = zeros::<E>(gpu, n_out)?;
    let mut arg = s
        .alloc_zeros::<u32>(n_out)
        .map_err(on(gpu.index, "allocate"))?;
    pool::maxpool2d_padded_forward(
        gpu,
        &mut p.slice_mut(..),
        &mut arg.slice_mut(..),
        &xv,
        B,
        &win,
        Layout::Nchw,
    )?;
    out.push(("max pool forward", down(gpu, &p, n_out)?));
    let mut d = up::<E>(gpu, &inp.x)?;
    let dp = up::<E>(gpu, &inp.y[..n_out])?;
    pool::maxpool2d_padded_backward(
        gpu,
        &mut d.slice_mut(..),
        &dp.slice(..),
        &arg.slice(..),
        B,
        &win,
        Layout::Nchw,
    )?;
    out.push(("max pool backward", down(gpu, &d, N)?));
    pool::avgpool2d_forward(gpu, &mut p.slice_mut(..), &xv, B, &win, Layout::Nchw)?;
    out.push(("average pool forward", down(gpu, &p, n_out)?));
    pool::avgpool2d_backward(
        gpu,
        &mut d.slice_mut(..),
        &dp.slice(..),
        B,
        &win,
        Layout::Nchw,
    )?;
    out.push(("average pool backward", down(gpu, &d, N)?));
    let mut gp = zeros::<E>(gpu, B * C)?;
    pool::gap_forward(gpu, &mut gp.slice_mut(..), &xv, (B, C), H * W, Layout::Nchw)?;
    out.push(("global average pool forward", down(gpu, &gp, B * C)?));
    pool::gap_backward(
        gpu,
        &mut d.slice_mut(..),
        &yv.slice(..B * C),
        (B, C),
        H * W,
        Layout::Nchw,
    )?;
    out.push(("global average pool backward", down(gpu, &d, N)?));

    // depthwise convolution (own kernels), its bias through the conv bias kernels
    let dg = depthwise();
    let dwv = up::<f32>(gpu, &inp.dw)?;
    let mut t = up::<E>(gpu, &inp.y)?;
    let bias = up::<f32>(gpu, &inp.bias)?;
    let bv = bias.slice(..);
    dwconv::dwconv_forward(
        gpu,
        &mut t.slice_mut(..),
        &xv,
        &dwv.slice(..),
        Some(&bv),
        B,
        &dg,
        Layout::Nchw,
    )?;
    out.push(("depthwise forward", down(gpu, &t, N)?));
    let mut ddw = s
        .alloc_zeros::<f32>(C * 9)
        .map_err(on(gpu.index, "allocate"))?;
    let mut ddb = s.alloc_zeros::<f32>(C).map_err(on(gpu.index, "allocate"))?;
    let mut d = up::<E>(gpu, &inp.x)?;
    let mut scratch = zeros::<f32>(gpu, dwconv::weight_scratch_len(B, &dg, Layout::Nchw))?;
    dwconv::dwconv_backward(
        gpu,
        Some(&mut d.slice_mut(..)),
        &mut ddw.slice_mut(..),
        Some(&mut ddb.slice_mut(..)),
        &mut scratch.slice_mut(..),
        (&yv, &xv, &dwv.slice(..)),
        (B, &dg, Layout::Nchw),
    )?;
    out.push(("depthwise input gradient", down(gpu, &d, N)?));
    out.push(("depthwise weight gradient", down32(gpu, &ddw, C * 9)?));
    out.push(("depthwise bias gradient", down32(gpu, &ddb, C)?));
    let mut t = up::<E>(gpu, &inp.x)?;
    conv::bias_add(gpu, &mut t.slice_mut(..), &bv, B, C, H * W, Layout::Nchw)?;
    out.push(("convolution bias", down(gpu, &t, N)?));

    // softmax cross-entropy: per-row loss (fp32) and the logits' gradient (E)
    let logits = up::<E>(gpu, &inp.logits)?;
    let labels = s.clone_htod(&inp.labels).map_err(on(gpu.index, "upload"))?;
    let mut loss = s.alloc_zeros::<f32>(B).map_err(on(gpu.index, "allocate"))?;
    let mut correct = s.alloc_zeros::<i32>(B).map_err(on(gpu.index, "allocate"))?;
    let mut dlogits = zeros::<E>(gpu, B * CLASSES)?;
    ops::softmax_xent(
        gpu,
        &logits.slice(..),
        &labels.slice(..),
        (&mut loss.slice_mut(..), &mut correct.slice_mut(..)),
        &mut dlogits.slice_mut(..),
        (B, CLASSES),
        0.1,
    )?;
    out.push(("softmax cross-entropy loss", down32(gpu, &loss, B)?));
    out.push((
        "softmax cross-entropy gradient",
        down(gpu, &dlogits, B * CLASSES)?,
    ));

    // a linear layer's products: x[B, 54] @ w[OC, 54]^T, dW += dout^T x (fp32), dx = dout w
    let k = C * 9;
    let (lx, lw) = (x.slice(..B * k), up::<E>(gpu, &inp.cw[..OC * k])?);
    let mut lo = zeros::<E>(gpu, B * OC)?;
    let product = |e| CudaError::new(gpu.index, "gemm", e);
    let blas = cudarc::cublas::CudaBlas::new(s.clone()).map_err(on(gpu.index, "cuBLAS"))?;
    gemm(
        &blas,
        s,
        (false, true),
        (B, OC, k),
        1.0,
        &lx,
        &lw.slice(..),
        0.0,
        &mut lo.slice_mut(..),
    )
    .map_err(product)?;
    out.push(("linear forward (gemm)", down(gpu, &lo, B * OC)?));
    let mut lgw = up::<f32>(gpu, &inp.cw[..OC * k])?;
    gemm(
        &blas,
        s,
        (true, false),
        (OC, k, B),
        1.0,
        &yv.slice(..B * OC),
        &lx,
        1.0,
        &mut lgw.slice_mut(..),
    )
    .map_err(product)?;
    out.push((
        "linear weight gradient (gemm into fp32)",
        down32(gpu, &lgw, OC * k)?,
    ));
    let mut ldx = zeros::<E>(gpu, B * k)?;
    gemm(
        &blas,
        s,
        (false, false),
        (B, k, OC),
        1.0,
        &yv.slice(..B * OC),
        &lw.slice(..),
        0.0,
        &mut ldx.slice_mut(..),
    )
    .map_err(product)?;
    out.push(("linear input gradient (gemm)", down(gpu, &ldx, B * k)?));
    crate::backend::cuda::blas::close(blas);

    // a dense convolution through cuDNN, each API (strict fp32 math for f32; bf16 tensors,
    // fp32 compute)
    if crate::backend::cuda::dnn::available() {
        out.extend(cudnn_conv::<E>(gpu, inp, Api::Legacy, CUDNN_LEGACY)?);
        out.extend(cudnn_conv::<E>(gpu, inp, Api::Graph, CUDNN_GRAPH)?);
    }
    Ok(out)
}

/// The names of the cuDNN convolution's three products through each API.
const CUDNN_LEGACY: [&str; 3] = [
    "cuDNN convolution forward",
    "cuDNN convolution input gradient",
    "cuDNN convolution weight gradient",
];
const CUDNN_GRAPH: [&str; 3] = [
    "cuDNN graph API convolution forward",
    "cuDNN graph API convolution input gradient",
    "cuDNN graph API convolution weight gradient",
];

/// `dense()` through cuDNN's `api` in `E`: the output, the input gradient and the weight
/// gradient, named `names`.
fn cudnn_conv<E: Elem>(gpu: &Gpu, inp: &Inputs, api: Api, names: [&'static str; 3]) -> Got {
    let precision = if E::BF16 {
        Precision::Bf16
    } else {
        Precision::Fp32
    };
    let cudnn = |e| CudaError::new(gpu.index, "cuDNN", e);
    let mut dnn = Dnn::<E>::open_with(&gpu.stream, precision, api).map_err(cudnn)?;
    let x = up::<E>(gpu, &inp.x)?;
    let cg = dense();
    let n_out = B * OC * cg.oh * cg.ow;
    let key = Key {
        b: B,
        groups: 1,
        g: cg,
        layout: Layout::Nchw,
    };
    let cw = up::<E>(gpu, &inp.cw)?;
    let mut co = zeros::<E>(gpu, n_out)?;
    dnn.forward(key, &mut co.slice_mut(..), &x.slice(..), &cw.slice(..))
        .map_err(cudnn)?;
    let mut out = vec![(names[0], down(gpu, &co, n_out)?)];
    // the weight gradient written (beta 0) into E, as a bf16 replica's scratch, then added
    // into fp32 gradients (bf16) or compared as it is (f32)
    let mut cgw = zeros::<E>(gpu, OC * C * 9)?;
    let mut cdx = zeros::<E>(gpu, N)?;
    let dy = up::<E>(gpu, &inp.y[..n_out])?;
    dnn.backward(
        key,
        Some(&mut cdx.slice_mut(..)),
        (&mut cgw.slice_mut(..), 0.0),
        &dy.slice(..),
        &x.slice(..),
        &cw.slice(..),
    )
    .map_err(cudnn)?;
    out.push((names[1], down(gpu, &cdx, N)?));
    let wgrad = match E::BF16 {
        true => {
            let mut acc = up::<f32>(gpu, &inp.cw)?;
            convert::add_to_f32(gpu, &mut acc.slice_mut(..), &cgw.slice(..), OC * C * 9)?;
            let sum = down32(gpu, &acc, OC * C * 9)?;
            sum.iter().zip(&inp.cw).map(|(s, w)| s - w).collect()
        }
        false => down(gpu, &cgw, OC * C * 9)?,
    };
    out.push((names[2], wgrad));
    crate::backend::cuda::dnn::close(dnn);
    Ok(out)
}

/// One check per op: bf16 against fp32, each output within 1% of itself plus 0.2% of the
/// output's largest value (bf16's rounding of its outputs and of its products' inputs).
pub fn checks(gpu: &Gpu) -> Vec<Check> {
    let index = gpu.index;
    let inp = Inputs::new(&mut Rng::new(91));
    let (f, h) = (run::<f32>(gpu, &inp), run::<bf16>(gpu, &inp));
    let name = |op: &str| format!("gpu{index} bf16 {op} vs fp32");
    match (f, h) {
        (Ok(f), Ok(h)) => (f.iter().zip(&h))
            .map(|((op, want), (_, got))| {
                let largest = want.iter().fold(0.0f64, |m, v| m.max(v.abs() as f64));
                check(
                    name(op),
                    Ok(compare(got, want, 2e-3 * largest.max(1e-6), 1e-2)),
                )
            })
            .collect(),
        (Err(e), _) | (_, Err(e)) => vec![check(name("ops"), Err(e))],
    }
}
