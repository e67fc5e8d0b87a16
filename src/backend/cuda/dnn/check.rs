//! Whether a GPU's cuDNN can be trusted: two small convolutions through cuDNN and through the
//! own kernels must agree, before a replica uses it.

use cudarc::cublas::CudaBlas;
use cudarc::driver::CudaSlice;

use super::{close, version, wanted, Dnn, Key};
use crate::backend::cuda::{conv, dwconv, on, CudaError, Gpu};
use crate::nn::grouped::ConvGeom;
use crate::nn::precision::Precision;

/// cuDNN for a replica's convolutions where it loads (and `MGTOP_CUDNN` is not `off`) and
/// agrees with the own kernels (`check`); else none, with a note where it failed.
pub fn for_replica(gpu: &Gpu, blas: &CudaBlas, precision: Precision) -> (Option<Dnn>, Vec<String>) {
    if !wanted() {
        return (None, Vec::new());
    }
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut d = Dnn::open(&gpu.stream, precision)?;
        match check(gpu, blas, &mut d, precision == Precision::Tf32) {
            Ok(()) => Ok(d),
            Err(e) => {
                close(d);
                Err(e)
            }
        }
    }));
    let failed = match checked {
        Ok(Ok(d)) => return (Some(d), Vec::new()),
        Ok(Err(e)) => e,
        Err(_) => "it panicked".to_string(),
    };
    let note = format!(
        "GPU {}: cuDNN {} failed its check against the own kernels ({failed}); its convolutions run on the own kernels (MGTOP_CUDNN=off skips cuDNN)",
        gpu.index,
        version()
    );
    (None, vec![note])
}

/// Two small convolutions (a dense 3x3 stride-2 padded one, a depthwise 3x3 one) through cuDNN
/// and through the own kernels: the output and both gradients must agree, to TF32's rounding
/// where the math allows it (`tf32`). What a replica runs before it trusts cuDNN.
pub fn check(gpu: &Gpu, blas: &CudaBlas, dnn: &mut Dnn, tf32: bool) -> Result<(), String> {
    let dense = ConvGeom {
        c: 3,
        h: 7,
        w: 6,
        oc: 5,
        k: 3,
        stride: 2,
        pad: 1,
        oh: 4,
        ow: 3,
    };
    let depthwise = ConvGeom {
        c: 4,
        h: 6,
        w: 5,
        oc: 4,
        k: 3,
        stride: 1,
        pad: 1,
        oh: 6,
        ow: 5,
    };
    let tol = if tf32 { 2e-2 } else { 1e-4 };
    for (g, groups) in [(dense, 1), (depthwise, 4)] {
        let k = Key { b: 2, groups, g };
        let own = own_conv(gpu, blas, k).map_err(|e| e.to_string())?;
        let theirs = (|| {
            let s = &gpu.stream;
            let (x, w, dy) = inputs(k);
            let up = |v: &[f32]| s.clone_htod(v).map_err(|e| format!("upload: {e:?}"));
            let (x, w, dy) = (up(&x)?, up(&w)?, up(&dy)?);
            let mut y = up(&vec![0.0; dy.len()])?;
            let mut dx = up(&vec![0.0; x.len()])?;
            let mut dw = up(&vec![0.0; w.len()])?;
            dnn.forward(k, &mut y.slice_mut(..), &x.slice(..), &w.slice(..))?;
            let d = &mut dx.slice_mut(..);
            dnn.backward(
                k,
                Some(d),
                &mut dw.slice_mut(..),
                &dy.slice(..),
                &x.slice(..),
                &w.slice(..),
            )?;
            let down = |v: &CudaSlice<f32>| s.clone_dtoh(v).map_err(|e| format!("download: {e:?}"));
            Ok::<_, String>([down(&y)?, down(&dx)?, down(&dw)?])
        })()?;
        for ((what, a), b) in ["output", "input gradient", "weight gradient"]
            .iter()
            .zip(&theirs)
            .zip(&own)
        {
            let scale = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let off = (a.iter().zip(b)).fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
            if a.len() != b.len() || off > tol * scale + 1e-6 {
                return Err(format!(
                    "{} convolution's {what} is off by {off:.2e} (largest value {scale:.2e})",
                    if groups == 1 {
                        "a dense"
                    } else {
                        "a depthwise"
                    }
                ));
            }
        }
    }
    Ok(())
}

/// The check's input, weights and output gradient for `k`, from a fixed seed.
fn inputs(k: Key) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let g = &k.g;
    let mut rng = crate::nn::rng::Rng::new(23);
    let mut draw = |n: usize| (0..n).map(|_| rng.normal()).collect::<Vec<f32>>();
    let x = draw(k.b * g.c * g.h * g.w);
    let w = draw(g.oc * (g.c / k.groups) * g.k * g.k);
    let dy = draw(k.b * g.oc * g.oh * g.ow);
    (x, w, dy)
}

/// The own kernels' output, input gradient and weight gradient for the check.
fn own_conv(gpu: &Gpu, blas: &CudaBlas, k: Key) -> Result<[Vec<f32>; 3], CudaError> {
    let s = &gpu.stream;
    let g = &k.g;
    let (x, w, dy) = inputs(k);
    let on = |what| on(gpu.index, what);
    let x = s.clone_htod(&x).map_err(on("upload"))?;
    let w = s.clone_htod(&w).map_err(on("upload"))?;
    let dy = s.clone_htod(&dy).map_err(on("upload"))?;
    let mut y = s.alloc_zeros::<f32>(dy.len()).map_err(on("allocate"))?;
    let mut dx = s.alloc_zeros::<f32>(x.len()).map_err(on("allocate"))?;
    let mut dw = s.alloc_zeros::<f32>(w.len()).map_err(on("allocate"))?;
    let mut db = s.alloc_zeros::<f32>(g.oc).map_err(on("allocate"))?;
    let (xv, wv, dyv) = (x.slice(..), w.slice(..), dy.slice(..));
    if k.groups == 1 {
        let len = conv::conv2d_scratch_len(g.c, g.oc, g.k, g.k, g.oh, g.ow, k.b);
        let mut col = s.alloc_zeros::<f32>(len).map_err(on("allocate"))?;
        let zeros = s.alloc_zeros::<f32>(g.oc).map_err(on("allocate"))?;
        let (b, c, h, wi, oc, kk, st, p) = (k.b, g.c, g.h, g.w, g.oc, g.k, g.stride, g.pad);
        let col = &mut col.slice_mut(..);
        let yv = &mut y.slice_mut(..);
        conv::conv2d_forward(
            gpu,
            blas,
            yv,
            &xv,
            &wv,
            &zeros.slice(..),
            b,
            c,
            h,
            wi,
            oc,
            kk,
            kk,
            st,
            p,
            col,
        )?;
        let (dxv, dwv, dbv) = (
            &mut dx.slice_mut(..),
            &mut dw.slice_mut(..),
            &mut db.slice_mut(..),
        );
        conv::conv2d_backward(
            gpu,
            blas,
            Some(dxv),
            dwv,
            dbv,
            &dyv,
            &xv,
            &wv,
            b,
            c,
            h,
            wi,
            oc,
            kk,
            kk,
            st,
            p,
            col,
        )?;
    } else {
        dwconv::dwconv_forward(gpu, &mut y.slice_mut(..), &xv, &wv, None, k.b, g)?;
        let (dxv, dwv) = (&mut dx.slice_mut(..), &mut dw.slice_mut(..));
        dwconv::dwconv_backward(gpu, Some(dxv), dwv, None, &dyv, &xv, &wv, k.b, g)?;
    }
    let down = |v: &CudaSlice<f32>| s.clone_dtoh(v).map_err(on("download"));
    Ok([down(&y)?, down(&dx)?, down(&dw)?])
}
