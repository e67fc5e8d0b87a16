//! Whether a GPU's cuDNN can be trusted: two small convolutions through cuDNN and through the
//! own kernels must agree, before a replica uses it; and channels last (`check_channels_last`)
//! before a replica lays its activations out so.

use cudarc::cublas::CudaBlas;
use cudarc::driver::CudaSlice;

use super::{close, version, wanted, Dnn, Key};
use crate::backend::cuda::elem::{bf16, Elem};
use crate::backend::cuda::layout::{laid, laid_weights, unlaid, unlaid_weights, Layout};
use crate::backend::cuda::{conv, dwconv, on, CudaError, Gpu};
use crate::nn::grouped::ConvGeom;
use crate::nn::precision::Precision;

/// cuDNN for a replica's convolutions on activations of type `E` where it loads (and
/// `MGTOP_CUDNN` is not `off`) and its fp32 convolutions agree with the own kernels (`check`);
/// else none, with a note where it failed.
pub fn for_replica<E: Elem>(
    gpu: &Gpu,
    blas: &CudaBlas,
    precision: Precision,
) -> (Option<Dnn<E>>, Vec<String>) {
    if !wanted() {
        return (None, Vec::new());
    }
    match trusted(gpu, blas, precision) {
        Ok(d) => (Some(d), Vec::new()),
        Err(failed) => {
            let note = format!(
                "GPU {}: cuDNN {} failed its check against the own kernels ({failed}); its convolutions run on the own kernels (MGTOP_CUDNN=off skips cuDNN)",
                gpu.index,
                version()
            );
            (None, vec![note])
        }
    }
}

/// Whether this process's cuDNN runs bf16 convolutions that can be trusted, checked once (on
/// GPU `index`, opened for it and closed after): where it does not, `--precision auto` takes
/// TF32 (bf16 convolutions need cuDNN). Err: why not.
pub fn bf16_trusted(index: usize) -> Result<(), String> {
    static CHECKED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let on = |gpu: &Gpu| {
        let blas = CudaBlas::new(gpu.stream.clone()).map_err(|e| format!("cuBLAS: {e}"))?;
        let checked = crate::backend::cuda::blas::set_precision(&blas, Precision::Bf16)
            .map_err(|e| format!("cuBLAS's bf16 math mode: {e}"))
            .and_then(|()| {
                trusted::<bf16>(gpu, &blas, Precision::Bf16).map_err(|e| {
                    format!("cuDNN {} failed its check on GPU {index} ({e})", version())
                })
            });
        // (let go of as a replica lets go of it: after a failed check its drop may panic)
        crate::backend::cuda::blas::close(blas);
        checked.map(close)
    };
    let check = || {
        let gpu = Gpu::open(index).map_err(|e| format!("the check could not open it ({e})"))?;
        let checked = on(&gpu);
        gpu.close_for_check();
        checked
    };
    CHECKED.get_or_init(check).clone()
}

/// cuDNN for activations of type `E`, where its fp32 convolutions agree with the own kernels
/// and (bf16) its bf16 ones run. Err: why not.
fn trusted<E: Elem>(gpu: &Gpu, blas: &CudaBlas, precision: Precision) -> Result<Dnn<E>, String> {
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        check_fp32(gpu, blas, precision, Layout::Nchw)?;
        let mut d = Dnn::<E>::open(&gpu.stream, precision)?;
        match E::BF16 {
            false => Ok(d),
            true => match runs(gpu, &mut d, Layout::Nchw) {
                Ok(()) => Ok(d),
                Err(e) => {
                    close(d);
                    Err(format!("its bf16 convolutions: {e}"))
                }
            },
        }
    }));
    checked.unwrap_or_else(|_| Err("it panicked".into()))
}

/// Whether cuDNN's channels-last convolutions can be trusted on this GPU (where a replica of
/// activations `E` computing in `precision` is to lay its activations out so): the check's
/// convolutions in NHWC, with NHWC filters, against the own kernels in fp32, and for bf16 its
/// plans run. Err: why not.
pub fn check_channels_last<E: Elem>(
    gpu: &Gpu,
    blas: &CudaBlas,
    precision: Precision,
    dnn: &mut Dnn<E>,
) -> Result<(), String> {
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        check_fp32(gpu, blas, precision, Layout::Nhwc)?;
        match E::BF16 {
            true => runs(gpu, dnn, Layout::Nhwc),
            false => Ok(()),
        }
    }));
    checked.unwrap_or_else(|_| Err("it panicked".into()))
}

/// `check` in `layout` through an fp32 cuDNN of its own, computing in `precision`.
fn check_fp32(
    gpu: &Gpu,
    blas: &CudaBlas,
    precision: Precision,
    layout: Layout,
) -> Result<(), String> {
    let mut d = Dnn::<f32>::open(&gpu.stream, precision)?;
    let checked = check(gpu, blas, &mut d, precision == Precision::Tf32, layout);
    close(d);
    checked
}

/// Two small convolutions (a dense 3x3 stride-2 padded one, a depthwise 3x3 one) through cuDNN
/// with activations in `layout` and through the own kernels (NCHW): the output and both
/// gradients must agree, to TF32's rounding where the math allows it (`tf32`). What a replica
/// runs before it trusts cuDNN.
pub fn check(
    gpu: &Gpu,
    blas: &CudaBlas,
    dnn: &mut Dnn,
    tf32: bool,
    layout: Layout,
) -> Result<(), String> {
    let tol = if tf32 { 2e-2 } else { 1e-4 };
    for (g, groups) in shapes() {
        let own_key = Key {
            b: 2,
            groups,
            g,
            layout: Layout::Nchw,
        };
        let k = Key { layout, ..own_key };
        let own = through(gpu, own_key, |t| {
            own_conv(gpu, blas, own_key, t).map_err(|e| e.to_string())
        })?;
        let theirs = through(gpu, k, |t| {
            dnn.forward(k, &mut t.y.slice_mut(..), &t.x.slice(..), &t.w.slice(..))?;
            let (x, w, dy) = (t.x.slice(..), t.w.slice(..), t.dy.slice(..));
            dnn.backward(
                k,
                Some(&mut t.dx.slice_mut(..)),
                (&mut t.dw.slice_mut(..), 1.0),
                &dy,
                &x,
                &w,
            )
        })?;
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

/// The check's two convolutions in `layout` through a cuDNN of activations `E` on zeros (for
/// bf16: its tensor-core configuration, which the fp32 check does not reach): each plan made
/// and run in both directions without an error. `selftest` compares bf16's values.
fn runs<E: Elem>(gpu: &Gpu, dnn: &mut Dnn<E>, layout: Layout) -> Result<(), String> {
    for (g, groups) in shapes() {
        let k = Key {
            b: 2,
            groups,
            g,
            layout,
        };
        let (nx, nw, ny) = (
            k.b * g.c * g.h * g.w,
            g.oc * (g.c / groups) * g.k * g.k,
            k.b * g.oc * g.oh * g.ow,
        );
        let zeros = |n| (gpu.stream.alloc_zeros::<E>(n)).map_err(|e| format!("allocate: {e:?}"));
        let (x, w, dy) = (zeros(nx)?, zeros(nw)?, zeros(ny)?);
        let (mut y, mut dx, mut dw) = (zeros(ny)?, zeros(nx)?, zeros(nw)?);
        dnn.forward(k, &mut y.slice_mut(..), &x.slice(..), &w.slice(..))?;
        let (xv, wv, dyv) = (x.slice(..), w.slice(..), dy.slice(..));
        let dx = Some(&mut dx.slice_mut(..));
        dnn.backward(k, dx, (&mut dw.slice_mut(..), 0.0), &dyv, &xv, &wv)?;
    }
    (gpu.stream.synchronize()).map_err(|e| format!("run: {e:?}"))
}

/// The checked convolutions: a dense 3x3 stride-2 padded one, a depthwise 3x3 one (groups).
fn shapes() -> [(ConvGeom, usize); 2] {
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
    [(dense, 1), (depthwise, 4)]
}

/// One convolution's buffers on the GPU: input, weights and output gradient (from a fixed
/// seed), and the output and both gradients, zeroed.
struct Tensors {
    x: CudaSlice<f32>,
    w: CudaSlice<f32>,
    dy: CudaSlice<f32>,
    y: CudaSlice<f32>,
    dx: CudaSlice<f32>,
    dw: CudaSlice<f32>,
}

/// `path`'s output, input gradient and weight gradient for `k`, on the check's inputs: laid
/// out as `k` says (channels last: NHWC activations, NHWC filters) on their way in, and the
/// results moved back to NCHW and PyTorch's filter layout on their way out.
fn through(
    gpu: &Gpu,
    k: Key,
    path: impl FnOnce(&mut Tensors) -> Result<(), String>,
) -> Result<[Vec<f32>; 3], String> {
    let s = &gpu.stream;
    let g = &k.g;
    let mut rng = crate::nn::rng::Rng::new(23);
    let mut draw = |n: usize| (0..n).map(|_| rng.normal()).collect::<Vec<f32>>();
    let (nx, nw, ny) = (
        k.b * g.c * g.h * g.w,
        g.oc * (g.c / k.groups) * g.k * g.k,
        k.b * g.oc * g.oh * g.ow,
    );
    let (l, cin, kk) = (k.layout, g.c / k.groups, g.k * g.k);
    let (xs, ys, ws) = (
        (k.b, g.c, g.h * g.w),
        (k.b, g.oc, g.oh * g.ow),
        (g.oc, cin, kk),
    );
    let up = |v: Vec<f32>| s.clone_htod(&v).map_err(|e| format!("upload: {e:?}"));
    let mut t = Tensors {
        x: up(laid(l, &draw(nx), xs))?,
        w: up(laid_weights(l, &draw(nw), ws))?,
        dy: up(laid(l, &draw(ny), ys))?,
        y: up(vec![0.0; ny])?,
        dx: up(vec![0.0; nx])?,
        dw: up(vec![0.0; nw])?,
    };
    path(&mut t)?;
    let down = |v: &CudaSlice<f32>| s.clone_dtoh(v).map_err(|e| format!("download: {e:?}"));
    Ok([
        unlaid(l, &down(&t.y)?, ys),
        unlaid(l, &down(&t.dx)?, xs),
        unlaid_weights(l, &down(&t.dw)?, ws),
    ])
}

/// The own kernels' convolution of `k` over `t`.
fn own_conv(gpu: &Gpu, blas: &CudaBlas, k: Key, t: &mut Tensors) -> Result<(), CudaError> {
    let s = &gpu.stream;
    let g = &k.g;
    let on = |what| on(gpu.index, what);
    let (xv, wv, dyv) = (t.x.slice(..), t.w.slice(..), t.dy.slice(..));
    let (y, dx, dw) = (&mut t.y, &mut t.dx, &mut t.dw);
    if k.groups == 1 {
        let len = conv::conv2d_scratch_len(g.c, g.oc, g.k, g.k, g.oh, g.ow, k.b);
        let mut col = s.alloc_zeros::<f32>(len).map_err(on("allocate"))?;
        let zeros = s.alloc_zeros::<f32>(g.oc).map_err(on("allocate"))?;
        let mut db = s.alloc_zeros::<f32>(g.oc).map_err(on("allocate"))?;
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
        let nchw = Layout::Nchw;
        dwconv::dwconv_forward(gpu, &mut y.slice_mut(..), &xv, &wv, None, k.b, g, nchw)?;
        let (dxv, dwv) = (&mut dx.slice_mut(..), &mut dw.slice_mut(..));
        let mut scratch = s
            .alloc_zeros::<f32>(dwconv::weight_scratch_len(k.b, g, nchw).max(1))
            .map_err(on("allocate"))?;
        let ins = (&dyv, &xv, &wv);
        let scratch = &mut scratch.slice_mut(..);
        dwconv::dwconv_backward(gpu, Some(dxv), dwv, None, scratch, ins, (k.b, g, nchw))?;
    }
    Ok(())
}
