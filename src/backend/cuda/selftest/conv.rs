//! `selftest`'s checks of the convolution and pooling ops (`conv.rs`, `pool.rs`, and through
//! them every kernel of `kernels/conv.cu` and `kernels/pool.cu`) against the CPU ops they
//! mirror, on random inputs over several geometries: stride 1 and 2, padding 0, 1 and 2, odd
//! and non-square sizes, 1x1 kernels, batches cut into chunks by a small scratch, the seed's
//! conv32k3 on 1x28x28 and its pool2. Outputs start as NaN, so an element a kernel leaves
//! unwritten fails; gradients start random, so one that is overwritten instead of accumulated
//! fails.

use cudarc::cublas::CudaBlas;

use super::compare::{compare, Check};
use crate::backend::cuda::layout::Layout;
use crate::backend::cuda::shape::ConvShape;
use crate::backend::cuda::{conv, on, pool, CudaError, Gpu};
use crate::nn::rng::Rng;

/// A convolution geometry: (b, c, h, w), (oc, kh, kw), stride, pad, how many images the
/// backward scratch holds (0: the whole batch), and whether dinp is wanted.
type ConvCase = (
    (usize, usize, usize, usize),
    (usize, usize, usize),
    usize,
    usize,
    usize,
    bool,
);

const CONV_CASES: [ConvCase; 10] = [
    ((2, 3, 5, 7), (4, 3, 3), 1, 0, 0, true),
    ((2, 2, 7, 5), (3, 3, 3), 1, 1, 1, true),
    ((3, 2, 7, 6), (2, 3, 3), 2, 0, 2, true),
    ((2, 3, 7, 7), (3, 3, 3), 2, 1, 0, false),
    ((2, 2, 6, 5), (3, 2, 3), 2, 1, 0, true),
    ((2, 3, 4, 5), (4, 1, 1), 1, 0, 0, true),
    ((3, 3, 4, 5), (4, 1, 1), 1, 0, 2, true),
    ((1, 1, 3, 3), (2, 5, 5), 1, 2, 0, true),
    // the seed's conv32k3 on 1x28x28, and a second layer over its pooled output, in chunks
    ((16, 1, 28, 28), (32, 3, 3), 1, 0, 0, true),
    ((8, 32, 13, 13), (64, 3, 3), 1, 1, 3, true),
];

/// (b, c, h, w, k, stride): divisible and not (floor mode), overlapping (stride < k) and gapped
/// windows, and the seed's pool2 after conv32k3.
const POOL_CASES: [(usize, usize, usize, usize, usize, usize); 6] = [
    (2, 3, 4, 6, 2, 2),
    (2, 2, 7, 5, 2, 2),
    (1, 3, 7, 7, 3, 2),
    (2, 1, 8, 9, 2, 3),
    (3, 2, 5, 5, 3, 1),
    (16, 32, 26, 26, 2, 2),
];

/// Every conv and pool check on `gpu`.
pub fn checks(gpu: &Gpu) -> Vec<Check> {
    let mut out = Vec::new();
    let blas = match CudaBlas::new(gpu.stream.clone()) {
        Ok(b) => b,
        Err(e) => {
            let e = CudaError::new(gpu.index, "create cuBLAS handle", e);
            return vec![failed(format!("gpu{} conv2d", gpu.index), e)];
        }
    };
    let mut rng = Rng::new(23);
    out.extend(columns(gpu, &mut rng));
    for case in CONV_CASES {
        out.extend(conv_case(gpu, &blas, case, &mut rng));
    }
    for case in POOL_CASES {
        out.extend(pool_case(gpu, case, &mut rng));
    }
    crate::backend::cuda::blas::close(blas);
    out
}

fn failed(name: String, e: CudaError) -> Check {
    Check {
        name,
        worst: None,
        max_abs: f64::NAN,
        note: e.to_string(),
    }
}

fn passed_if(name: String, (max_abs, worst): (f64, f64), note: String) -> Check {
    Check {
        name,
        worst: Some(worst),
        max_abs,
        note,
    }
}

/// A comparison whose absolute limit scales with the tensor: sums of thousands of products
/// (a weight gradient over a batch) round differently on the GPU by more than a fixed limit
/// allows near zero, while any indexing error is of the size of the terms, far above it.
fn scaled(got: &[f32], want: &[f32]) -> (f64, f64) {
    let big = want.iter().fold(0.0f64, |m, v| m.max((*v as f64).abs()));
    compare(got, want, 1e-4 * big + 1e-6, 1e-4)
}

fn randn(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.normal()).collect()
}

/// im2col_f32 and col2im_f32 alone over three images, exactly (the same copies and the same
/// order of additions as the CPU).
fn columns(gpu: &Gpu, rng: &mut Rng) -> Vec<Check> {
    let (index, st) = (gpu.index, &gpu.stream);
    let s = ConvShape::new(3, 2, 7, 6, 1, 3, 3, 2, 1).expect("a valid geometry");
    let (chw, ckk, ohw) = (s.chw(), s.ckk(), s.ohw());
    let inp = randn(rng, s.inp_len());
    let y = randn(rng, s.b * s.col_len());
    let mut want_col = vec![0.0; y.len()];
    let mut want_img = vec![0.0; inp.len()];
    for n in 0..s.b {
        let col = &mut want_col[n * ckk * ohw..(n + 1) * ckk * ohw];
        let img = &inp[n * chw..(n + 1) * chw];
        let (st, p) = (s.stride, s.pad);
        crate::nn::im2col::im2col(col, ohw, img, s.c, s.h, s.w, s.kh, s.kw, st, p, s.oh, s.ow);
        let dimg = &mut want_img[n * chw..(n + 1) * chw];
        let dcol = &y[n * ckk * ohw..(n + 1) * ckk * ohw];
        crate::nn::im2col::col2im(
            dimg, dcol, ohw, s.c, s.h, s.w, s.kh, s.kw, st, p, s.oh, s.ow,
        );
    }
    let got = (|| {
        let x = st.clone_htod(&inp).map_err(on(index, "upload"))?;
        let mut col = st
            .clone_htod(&vec![f32::NAN; y.len()])
            .map_err(on(index, "upload"))?;
        conv::im2col(gpu, &mut col.slice_mut(..), &x.slice(..), &s)?;
        let dy = st.clone_htod(&y).map_err(on(index, "upload"))?;
        let mut img = st
            .clone_htod(&vec![f32::NAN; inp.len()])
            .map_err(on(index, "upload"))?;
        conv::col2im(gpu, &mut img.slice_mut(..), &dy.slice(..), &s)?;
        let col = st.clone_dtoh(&col).map_err(on(index, "download"))?;
        let img = st.clone_dtoh(&img).map_err(on(index, "download"))?;
        Ok::<_, CudaError>((col, img))
    })();
    let geom = "3x2x7x6 k3s2p1";
    let (c1, c2) = (
        format!("gpu{index} im2col_f32 {geom}"),
        format!("gpu{index} col2im_f32 {geom}"),
    );
    match got {
        Ok((col, img)) => vec![
            passed_if(c1, compare(&col, &want_col, 0.0, 0.0), "exact".into()),
            passed_if(c2, compare(&img, &want_img, 0.0, 0.0), "exact".into()),
        ],
        Err(e) => vec![failed(c1, e.clone()), failed(c2, e)],
    }
}

/// One geometry forward and backward, CPU vs GPU: two lines.
fn conv_case(gpu: &Gpu, blas: &CudaBlas, case: ConvCase, rng: &mut Rng) -> Vec<Check> {
    let ((b, c, h, w), (oc, kh, kw), stride, pad, images, with_dinp) = case;
    let index = gpu.index;
    let k = if kh == kw {
        format!("{kh}")
    } else {
        format!("{kh}x{kw}")
    };
    let geom = format!("{b}x{c}x{h}x{w} {oc}k{k}s{stride}p{pad}");
    let (fwd, bwd) = (
        format!("gpu{index} conv2d fwd {geom}"),
        format!("gpu{index} conv2d bwd {geom}"),
    );
    let s = ConvShape::new(b, c, h, w, oc, kh, kw, stride, pad).expect("a valid geometry");
    let scratch = if images == 0 {
        conv::conv2d_scratch_len(c, oc, kh, kw, s.oh, s.ow, b)
    } else {
        images * s.scratch_per_image(true)
    };
    let chunks = |backward| {
        let n = s.images_per_chunk(scratch, backward).unwrap_or(0);
        if n < b {
            format!("chunks of {n}")
        } else {
            String::new()
        }
    };
    let (inp, wt, bias) = (
        randn(rng, s.inp_len()),
        randn(rng, s.w_len()),
        randn(rng, oc),
    );
    let (dout, dw0, db0) = (
        randn(rng, s.out_len()),
        randn(rng, s.w_len()),
        randn(rng, oc),
    );
    let mut cpu_col =
        vec![0.0; crate::nn::conv::conv2d_scratch_len(c, (kh, kw), (stride, pad), (s.oh, s.ow))];
    let mut want_out = vec![0.0; s.out_len()];
    crate::nn::conv::conv2d_forward(
        &mut want_out,
        &inp,
        &wt,
        &bias,
        b,
        c,
        h,
        w,
        oc,
        kh,
        kw,
        stride,
        pad,
        &mut cpu_col,
    );
    let mut want_dinp = vec![0.0; s.inp_len()];
    let (mut want_dw, mut want_db) = (dw0.clone(), db0.clone());
    crate::nn::conv::conv2d_backward(
        with_dinp.then_some(&mut want_dinp[..]),
        &mut want_dw,
        &mut want_db,
        &dout,
        &inp,
        &wt,
        b,
        c,
        h,
        w,
        oc,
        kh,
        kw,
        stride,
        pad,
        &mut cpu_col,
    );
    let st = &gpu.stream;
    let got = (|| {
        let up = |v: &[f32]| st.clone_htod(v).map_err(on(index, "upload"));
        let (x, wd, bd, dy) = (up(&inp)?, up(&wt)?, up(&bias)?, up(&dout)?);
        let mut out = up(&vec![f32::NAN; s.out_len()])?;
        let mut col = up(&vec![f32::NAN; scratch])?;
        conv::conv2d_forward(
            gpu,
            blas,
            &mut out.slice_mut(..),
            &x.slice(..),
            &wd.slice(..),
            &bd.slice(..),
            b,
            c,
            h,
            w,
            oc,
            kh,
            kw,
            stride,
            pad,
            &mut col.slice_mut(..),
        )?;
        let (mut dw, mut db) = (up(&dw0)?, up(&db0)?);
        let mut dinp = up(&vec![f32::NAN; s.inp_len()])?;
        let mut dinp_view = dinp.slice_mut(..);
        conv::conv2d_backward(
            gpu,
            blas,
            with_dinp.then_some(&mut dinp_view),
            &mut dw.slice_mut(..),
            &mut db.slice_mut(..),
            &dy.slice(..),
            &x.slice(..),
            &wd.slice(..),
            b,
            c,
            h,
            w,
            oc,
            kh,
            kw,
            stride,
            pad,
            &mut col.slice_mut(..),
        )?;
        let down = |v| st.clone_dtoh(v).map_err(on(index, "download"));
        Ok::<_, CudaError>((down(&out)?, down(&dinp)?, down(&dw)?, down(&db)?))
    })();
    let (out, dinp, dw, db) = match got {
        Ok(v) => v,
        Err(e) => return vec![failed(fwd, e.clone()), failed(bwd, e)],
    };
    let pct = |r: (f64, f64)| format!("{:.0}%", r.1 * 100.0);
    let parts = [
        with_dinp.then(|| ("dinp", scaled(&dinp, &want_dinp))),
        Some(("dw", scaled(&dw, &want_dw))),
        Some(("dbias", scaled(&db, &want_db))),
    ];
    let parts: Vec<_> = parts.into_iter().flatten().collect();
    let worst = parts
        .iter()
        .fold((0.0f64, 0.0f64), |(a, r), (_, (pa, pr))| {
            (a.max(*pa), r.max(*pr))
        });
    let mut note: Vec<String> = parts
        .iter()
        .map(|(n, r)| format!("{n} {}", pct(*r)))
        .collect();
    if !with_dinp {
        note.push("dinp skipped".into());
    }
    note.push(chunks(true));
    note.retain(|n| !n.is_empty());
    vec![
        passed_if(fwd, scaled(&out, &want_out), chunks(false)),
        passed_if(bwd, worst, note.join(", ")),
    ]
}

/// One pooling geometry forward (values and argmax, exactly) and backward (exactly: the same
/// additions in the same order), CPU vs GPU. Inputs are multiples of 0.5, so windows hold ties
/// and the first-maximum rule is checked too.
fn pool_case(
    gpu: &Gpu,
    (b, c, h, w, k, stride): (usize, usize, usize, usize, usize, usize),
    rng: &mut Rng,
) -> Vec<Check> {
    let index = gpu.index;
    let geom = format!("{b}x{c}x{h}x{w} k{k}s{stride}");
    let (fwd, bwd) = (
        format!("gpu{index} maxpool2d fwd {geom}"),
        format!("gpu{index} maxpool2d bwd {geom}"),
    );
    let (oh, ow) = crate::nn::window::out_size(h, w, k, k, stride, 0).expect("a valid geometry");
    let (n_in, n_out) = (b * c * h * w, b * c * oh * ow);
    let inp: Vec<f32> = (0..n_in)
        .map(|_| (rng.normal() * 2.0).round() / 2.0)
        .collect();
    let dout = randn(rng, n_out);
    let (mut want_out, mut want_arg) = (vec![0.0; n_out], vec![0u32; n_out]);
    crate::nn::pool::maxpool2d_forward(&mut want_out, &mut want_arg, &inp, b, c, h, w, k, stride);
    let mut want_dinp = vec![0.0; n_in];
    crate::nn::pool::maxpool2d_backward(&mut want_dinp, &dout, &want_arg, b, c, h, w, k, stride);
    let st = &gpu.stream;
    let got = (|| {
        let x = st.clone_htod(&inp).map_err(on(index, "upload"))?;
        let mut out = st
            .clone_htod(&vec![f32::NAN; n_out])
            .map_err(on(index, "upload"))?;
        let mut arg = st
            .clone_htod(&vec![u32::MAX; n_out])
            .map_err(on(index, "upload"))?;
        pool::maxpool2d_forward(
            gpu,
            &mut out.slice_mut(..),
            &mut arg.slice_mut(..),
            &x.slice(..),
            b,
            c,
            h,
            w,
            k,
            stride,
            Layout::Nchw,
        )?;
        // backward from the CPU's argmax: each op is checked on its own
        let cpu_arg = st.clone_htod(&want_arg).map_err(on(index, "upload"))?;
        let dy = st.clone_htod(&dout).map_err(on(index, "upload"))?;
        let mut dinp = st
            .clone_htod(&vec![f32::NAN; n_in])
            .map_err(on(index, "upload"))?;
        pool::maxpool2d_backward(
            gpu,
            &mut dinp.slice_mut(..),
            &dy.slice(..),
            &cpu_arg.slice(..),
            b,
            c,
            h,
            w,
            k,
            stride,
            Layout::Nchw,
        )?;
        let out = st.clone_dtoh(&out).map_err(on(index, "download"))?;
        let arg = st.clone_dtoh(&arg).map_err(on(index, "download"))?;
        let dinp = st.clone_dtoh(&dinp).map_err(on(index, "download"))?;
        Ok::<_, CudaError>((out, arg, dinp))
    })();
    match got {
        Ok((out, arg, dinp)) => {
            // the argmax as floats (indices within a plane, exact in f32 at these sizes)
            let as_f32 = |a: &[u32]| a.iter().map(|&v| v as f32).collect::<Vec<f32>>();
            let mut got_f = out;
            got_f.extend(as_f32(&arg));
            let mut want_f = want_out;
            want_f.extend(as_f32(&want_arg));
            vec![
                passed_if(
                    fwd,
                    compare(&got_f, &want_f, 0.0, 0.0),
                    "max and argmax, exact".into(),
                ),
                passed_if(bwd, compare(&dinp, &want_dinp, 0.0, 0.0), "exact".into()),
            ]
        }
        Err(e) => vec![failed(fwd, e.clone()), failed(bwd, e)],
    }
}
