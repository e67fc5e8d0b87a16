//! `selftest`'s checks of channels-last 1x1 convolutions as cuBLAS's products (`pointwise.rs`,
//! `MGTOP_GPU_POINTWISE=gemm`): in strict fp32 against the CPU's sums in f64, and in bf16
//! against fp32 (where the GPU has bf16 tensor cores): the output, the input gradient and the
//! weight gradient (added onto random values, as into a step's gradients; and again without
//! the input gradient, as a first layer's backward), over a few shapes
//! (MobileNetV2's expansions and projections among them). Inputs are on bf16's grid, so both
//! runs read the same values; outputs start as NaN.

use cudarc::cublas::CudaBlas;

use super::bf16_ops::{down, up};
use super::compare::{check, compare, Check};
use super::ops::scaled;
use crate::backend::cuda::elem::{bf16, Elem};
use crate::backend::cuda::layout::{laid, unlaid, Layout};
use crate::backend::cuda::{pointwise, CudaError, Gpu};
use crate::nn::grouped::ConvGeom;
use crate::nn::rng::Rng;

/// (b, c, oc, h, w).
const CASES: [(usize, usize, usize, usize, usize); 3] =
    [(3, 5, 7, 4, 6), (4, 24, 144, 7, 7), (2, 96, 24, 14, 14)];

/// One case's tensors, NCHW as the CPU keeps them.
struct Data {
    g: ConvGeom,
    b: usize,
    x: Vec<f32>,
    w: Vec<f32>,
    dy: Vec<f32>,
    dw0: Vec<f32>,
}

impl Data {
    fn new((b, c, oc, h, w): (usize, usize, usize, usize, usize), rng: &mut Rng) -> Data {
        let p = h * w;
        // on bf16's grid, so that the bf16 run reads the same values
        let mut randn = |n: usize| -> Vec<f32> {
            (0..n)
                .map(|_| <bf16 as Elem>::from_f32(rng.normal()).to_f32())
                .collect()
        };
        let g = ConvGeom {
            c,
            h,
            w,
            oc,
            k: 1,
            stride: 1,
            pad: 0,
            oh: h,
            ow: w,
        };
        Data {
            g,
            b,
            x: randn(b * c * p),
            w: randn(oc * c),
            dy: randn(b * oc * p),
            dw0: randn(oc * c),
        }
    }

    /// [out, dinp, dw] by the definition.
    fn want(&self) -> [Vec<f32>; 3] {
        by_definition(self.b, &self.g, (&self.x, &self.w, &self.dy), &self.dw0)
    }

    /// [out, dinp, dw, dw again without dinp (a first layer's backward)] on the GPU in `E`,
    /// channels last, moved back to NCHW.
    fn run<E: Elem>(&self, gpu: &Gpu, blas: &CudaBlas) -> Result<[Vec<f32>; 4], CudaError> {
        let (b, g) = (self.b, &self.g);
        let (inp, outp) = ((b, g.c, g.h * g.w), (b, g.oc, g.h * g.w));
        let (n_in, n_out) = (b * g.c * g.h * g.w, b * g.oc * g.h * g.w);
        let x = up::<E>(gpu, &laid(Layout::Nhwc, &self.x, inp))?;
        let dy = up::<E>(gpu, &laid(Layout::Nhwc, &self.dy, outp))?;
        let w = up::<E>(gpu, &self.w)?;
        let mut out = up::<E>(gpu, &vec![f32::NAN; n_out])?;
        let (xv, wv, dyv) = (x.slice(..), w.slice(..), dy.slice(..));
        pointwise::forward(gpu, blas, &mut out.slice_mut(..), &xv, &wv, b, g)?;
        let mut dx = up::<E>(gpu, &vec![f32::NAN; n_in])?;
        let mut dw = up::<f32>(gpu, &self.dw0)?;
        let d = Some(&mut dx.slice_mut(..));
        pointwise::backward(gpu, blas, d, &mut dw.slice_mut(..), (&dyv, &xv, &wv), b, g)?;
        let mut alone = up::<f32>(gpu, &self.dw0)?;
        pointwise::backward(
            gpu,
            blas,
            None,
            &mut alone.slice_mut(..),
            (&dyv, &xv, &wv),
            b,
            g,
        )?;
        Ok([
            unlaid(Layout::Nhwc, &down(gpu, &out, n_out)?, outp),
            unlaid(Layout::Nhwc, &down(gpu, &dx, n_in)?, inp),
            down(gpu, &dw, g.oc * g.c)?,
            down(gpu, &alone, g.oc * g.c)?,
        ])
    }
}

/// A 1x1 convolution of `g` over `b` NCHW images x by w [OC, C], and its backward from dy:
/// [out, dinp, dw0 + dw], each sum in f64 (the definition the products are checked against).
pub(in crate::backend::cuda) fn by_definition(
    b: usize,
    g: &ConvGeom,
    (x, w, dy): (&[f32], &[f32], &[f32]),
    dw0: &[f32],
) -> [Vec<f32>; 3] {
    let (c, oc, p) = (g.c, g.oc, g.h * g.w);
    let (mut out, mut dx, mut dw) = (vec![0.0; b * oc * p], vec![0.0; b * c * p], dw0.to_vec());
    for n in 0..b {
        for q in 0..p {
            for o in 0..oc {
                let s: f64 = (0..c)
                    .map(|i| w[o * c + i] as f64 * x[(n * c + i) * p + q] as f64)
                    .sum();
                out[(n * oc + o) * p + q] = s as f32;
            }
            for i in 0..c {
                let s: f64 = (0..oc)
                    .map(|o| w[o * c + i] as f64 * dy[(n * oc + o) * p + q] as f64)
                    .sum();
                dx[(n * c + i) * p + q] = s as f32;
            }
        }
    }
    for (j, d) in dw.iter_mut().enumerate() {
        let (o, i) = (j / c, j % c);
        let s: f64 = (0..b * p)
            .map(|r| {
                let (n, q) = (r / p, r % p);
                dy[(n * oc + o) * p + q] as f64 * x[(n * c + i) * p + q] as f64
            })
            .sum();
        *d += s as f32;
    }
    [out, dx, dw]
}

/// The largest of several comparisons.
fn worst(parts: impl IntoIterator<Item = (f64, f64)>) -> (f64, f64) {
    (parts.into_iter()).fold((0.0, 0.0), |(a, r), (pa, pr)| (a.max(pa), r.max(pr)))
}

pub(super) fn checks(gpu: &Gpu, rng: &mut Rng) -> Vec<Check> {
    let index = gpu.index;
    let blas = match CudaBlas::new(gpu.stream.clone()) {
        Ok(b) => b,
        Err(e) => {
            let e = CudaError::new(index, "create cuBLAS handle", e);
            return vec![check(format!("gpu{index} 1x1 conv as gemm"), Err(e))];
        }
    };
    let mut out = Vec::new();
    for case in CASES {
        let d = Data::new(case, rng);
        let (b, c, oc, h, w) = case;
        let shape = format!("{b}x{c}x{h}x{w} -> {oc}");
        let f = d.run::<f32>(gpu, &blas);
        let fp32 = f.as_ref().map_err(Clone::clone).map(|f| {
            let want = d.want();
            worst((0..4).map(|i| scaled(&f[i], &want[i.min(2)])))
        });
        out.push(check(
            format!("gpu{index} 1x1 conv as gemm {shape} nhwc"),
            fp32,
        ));
        if gpu.has_tf32() {
            let got = d.run::<bf16>(gpu, &blas).and_then(|h| {
                let f = f.clone()?;
                Ok(worst((0..4).map(|i| {
                    let largest = (f[i].iter()).fold(0.0f64, |m, v| m.max(v.abs() as f64));
                    compare(&h[i], &f[i], 2e-3 * largest.max(1e-6), 1e-2)
                })))
            });
            out.push(check(
                format!("gpu{index} bf16 1x1 conv as gemm {shape} nhwc vs fp32"),
                got,
            ));
        }
    }
    crate::backend::cuda::blas::close(blas);
    out
}
