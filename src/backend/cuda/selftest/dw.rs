//! `selftest`'s checks of depthwise convolution (`cuda::dwconv`, `kernels/depthwise.cu`) and of
//! padded max, average and global average pooling (`pool.rs`, `kernels/pool.cu`,
//! `kernels/avgpool.cu`) against `nn::depthwise` and `nn::pool`, over strides 1 and 2,
//! paddings 0 to 2, odd and non-square sizes, with and without a bias or an input gradient,
//! each in both activation layouts (`kernels/depthwise_nhwc.cu` channels last).
//! Pooling is exact (the same additions in the same order; inputs in steps of 0.5 make ties,
//! so the first-maximum rule is checked too).

use super::bf16_ops as bf16;
use super::compare::{check, compare, Check};
use super::ops::{down, joined, nans, randn, scaled, up};
use crate::backend::cuda::elem::bf16 as Bf16;
use crate::backend::cuda::layout::{laid, unlaid, Layout};
use crate::backend::cuda::{dwconv, pool, CudaError, Gpu};
use crate::nn::depthwise::{dwconv_backward, dwconv_forward};
use crate::nn::grouped::ConvGeom;
use crate::nn::pool as cpu;
use crate::nn::rng::Rng;
use crate::nn::window::{out_size, Window};

/// (b, c, h, w), (k, stride, pad), bias, whether dinp is wanted.
type DwCase = (
    (usize, usize, usize, usize),
    (usize, usize, usize),
    bool,
    bool,
);

const DW_CASES: [DwCase; 10] = [
    ((2, 3, 7, 6), (3, 1, 1), true, true),
    ((2, 3, 7, 6), (3, 2, 1), false, true),
    ((3, 2, 5, 6), (2, 2, 0), true, false),
    ((1, 4, 9, 9), (5, 2, 2), true, true),
    ((2, 3, 4, 5), (1, 1, 0), false, true),
    // MobileNetV2's 3x3 on a CIFAR-sized map
    ((4, 32, 16, 16), (3, 1, 1), false, true),
    // a 3x3 weight gradient summed in several parts of a channel's outputs (13; stride 2: 2,
    // the last part shorter)
    ((8, 4, 40, 40), (3, 1, 1), false, true),
    ((6, 5, 33, 35), (3, 2, 1), true, true),
    // channels last in whole 4-float vectors (as the 32- and 4-channel cases), stride 2; over
    // two blocks of channels (34 vectors)
    ((4, 8, 15, 17), (3, 2, 1), true, true),
    ((2, 136, 6, 5), (3, 1, 1), true, true),
];

/// (b, c, h, w), (k, stride, pad) of a pooling check.
type PoolCase = ((usize, usize, usize, usize), (usize, usize, usize));

const POOL_CASES: [PoolCase; 4] = [
    ((2, 3, 7, 6), (3, 2, 1)),
    ((2, 2, 5, 5), (3, 1, 1)),
    ((1, 2, 8, 8), (2, 2, 1)),
    ((2, 3, 8, 9), (2, 2, 0)),
];

pub(super) fn checks(gpu: &Gpu, rng: &mut Rng) -> Vec<Check> {
    let mut out = Vec::new();
    for case in DW_CASES {
        for layout in [Layout::Nchw, Layout::Nhwc] {
            out.push(depthwise(gpu, case, rng, layout));
        }
    }
    // bf16 channels last against bf16 NCHW: 16-byte vectors of 8 channels, and one a thread
    // (264 channels: 33 vectors, two blocks, a spare lane)
    for (b, c, hw, stride) in [
        (4, 16, 14, 1),
        (3, 24, 15, 2),
        (4, 12, 9, 1),
        (2, 264, 6, 1),
    ] {
        out.push(bf16_layouts(gpu, (b, c, hw, stride), rng));
    }
    for ((b, c, h, w), (k, stride, pad)) in POOL_CASES {
        let (oh, ow) = out_size(h, w, k, k, stride, pad).expect("a valid geometry");
        let g = Window {
            c,
            h,
            w,
            k,
            stride,
            pad,
            oh,
            ow,
        };
        for layout in [Layout::Nchw, Layout::Nhwc] {
            out.extend(pooling(gpu, b, g, rng, layout));
        }
    }
    for (b, c, hw) in [(2, 5, 49), (1, 3, 1000), (4, 16, 1)] {
        for layout in [Layout::Nchw, Layout::Nhwc] {
            out.push(global(gpu, (b, c, hw), rng, layout));
        }
    }
    out
}

/// One depthwise geometry forward and backward in `layout` (the CPU's NCHW tensors moved there
/// and the results back), CPU vs GPU: one line.
fn depthwise(
    gpu: &Gpu,
    ((b, c, h, w), (k, stride, pad), bias, with_dinp): DwCase,
    rng: &mut Rng,
    layout: Layout,
) -> Check {
    let (oh, ow) = out_size(h, w, k, k, stride, pad).expect("a valid geometry");
    let g = ConvGeom {
        c,
        h,
        w,
        oc: c,
        k,
        stride,
        pad,
        oh,
        ow,
    };
    let name = format!(
        "gpu{} dwconv {b}x{c}x{h}x{w} k{k}s{stride}p{pad}{}{}{}",
        gpu.index,
        if bias { "" } else { " no bias" },
        if with_dinp { "" } else { " no dinp" },
        suffix(layout)
    );
    let (inp, outp) = ((b, c, h * w), (b, c, oh * ow));
    let (n_in, n_out, kk) = (b * c * h * w, b * c * oh * ow, c * k * k);
    let (x, wt, bv) = (randn(rng, n_in), randn(rng, kk), randn(rng, c));
    let (dout, dw0, db0) = (randn(rng, n_out), randn(rng, kk), randn(rng, c));
    let mut want_out = vec![0.0; n_out];
    dwconv_forward(&mut want_out, &x, &wt, bias.then_some(&bv[..]), b, &g);
    let (mut want_dx, mut want_dw, mut want_db) = (vec![0.0; n_in], dw0.clone(), db0.clone());
    let dx = with_dinp.then_some(&mut want_dx[..]);
    dwconv_backward(
        dx,
        &mut want_dw,
        bias.then_some(&mut want_db[..]),
        &dout,
        &x,
        &wt,
        b,
        &g,
    );
    let got = (|| {
        let (xd, wd, bd) = (
            up(gpu, &laid(layout, &x, inp))?,
            up(gpu, &wt)?,
            up(gpu, &bv)?,
        );
        let dy = up(gpu, &laid(layout, &dout, outp))?;
        let mut o = nans(gpu, n_out)?;
        let bview = bd.slice(..);
        dwconv::dwconv_forward(
            gpu,
            &mut o.slice_mut(..),
            &xd.slice(..),
            &wd.slice(..),
            bias.then_some(&bview),
            b,
            &g,
            layout,
        )?;
        let (mut dx, mut dw, mut db) = (nans(gpu, n_in)?, up(gpu, &dw0)?, up(gpu, &db0)?);
        let mut dxv = dx.slice_mut(..);
        let mut dbv = db.slice_mut(..);
        let mut scratch = nans(gpu, dwconv::weight_scratch_len(b, &g, layout).max(1))?;
        dwconv::dwconv_backward(
            gpu,
            with_dinp.then_some(&mut dxv),
            &mut dw.slice_mut(..),
            bias.then_some(&mut dbv),
            &mut scratch.slice_mut(..),
            (&dy.slice(..), &xd.slice(..), &wd.slice(..)),
            (b, &g, layout),
        )?;
        let mut parts = vec![
            (
                unlaid(layout, &down(gpu, &o, n_out)?, outp),
                want_out.clone(),
            ),
            (down(gpu, &dw, kk)?, want_dw.clone()),
        ];
        if with_dinp {
            parts.push((unlaid(layout, &down(gpu, &dx, n_in)?, inp), want_dx.clone()));
        }
        // without a bias its gradient must stay as it was
        parts.push((down(gpu, &db, c)?, want_db.clone()));
        Ok(parts)
    })();
    let mut chk = check(name, joined(got));
    chk.note = "out, dw, dinp, dbias".into();
    chk
}

/// The own depthwise kernels in bf16 (a 3x3 window, padded by 1, over `b` images of C
/// channels of `hw` x `hw`) channels last against NCHW, on the same bf16 values: the output and
/// the input gradient the same bits once moved back (the same sums in the same order), the
/// weight and bias gradients (other parts) to float's rounding. One line.
fn bf16_layouts(
    gpu: &Gpu,
    (b, c, hw, stride): (usize, usize, usize, usize),
    rng: &mut Rng,
) -> Check {
    let g = ConvGeom {
        c,
        h: hw,
        w: hw,
        oc: c,
        k: 3,
        stride,
        pad: 1,
        oh: (hw - 1) / stride + 1,
        ow: (hw - 1) / stride + 1,
    };
    let (inp, outp) = ((b, c, hw * hw), (b, c, g.oh * g.ow));
    let (n_in, n_out) = (b * c * hw * hw, b * c * g.oh * g.ow);
    let (x, dout) = (randn(rng, n_in), randn(rng, n_out));
    let (wt, bv) = (randn(rng, c * 9), randn(rng, c));
    let run = |layout: Layout| -> Result<Vec<Vec<f32>>, CudaError> {
        let xd = bf16::up::<Bf16>(gpu, &laid(layout, &x, inp))?;
        let dy = bf16::up::<Bf16>(gpu, &laid(layout, &dout, outp))?;
        let (wd, bd) = (up(gpu, &wt)?, up(gpu, &bv)?);
        let mut o = bf16::up::<Bf16>(gpu, &vec![f32::NAN; n_out])?;
        let bview = bd.slice(..);
        let (wv, xv, dyv) = (wd.slice(..), xd.slice(..), dy.slice(..));
        dwconv::dwconv_forward(
            gpu,
            &mut o.slice_mut(..),
            &xv,
            &wv,
            Some(&bview),
            b,
            &g,
            layout,
        )?;
        let mut dx = bf16::up::<Bf16>(gpu, &vec![f32::NAN; n_in])?;
        let (mut dw, mut db) = (up(gpu, &vec![0.0; c * 9])?, up(gpu, &vec![0.0; c])?);
        let mut scratch = nans(gpu, dwconv::weight_scratch_len(b, &g, layout).max(1))?;
        dwconv::dwconv_backward(
            gpu,
            Some(&mut dx.slice_mut(..)),
            &mut dw.slice_mut(..),
            Some(&mut db.slice_mut(..)),
            &mut scratch.slice_mut(..),
            (&dyv, &xv, &wv),
            (b, &g, layout),
        )?;
        Ok(vec![
            unlaid(layout, &bf16::down(gpu, &o, n_out)?, outp),
            unlaid(layout, &bf16::down(gpu, &dx, n_in)?, inp),
            down(gpu, &dw, c * 9)?,
            down(gpu, &db, c)?,
        ])
    };
    let got = (|| {
        let (nchw, nhwc) = (run(Layout::Nchw)?, run(Layout::Nhwc)?);
        let exact = [0, 1].map(|i| compare(&nhwc[i], &nchw[i], 0.0, 0.0));
        let sums = [2, 3].map(|i| scaled(&nhwc[i], &nchw[i]));
        let worst = exact.into_iter().chain(sums);
        Ok(worst.fold((0.0f64, 0.0f64), |(a, r), (pa, pr)| (a.max(pa), r.max(pr))))
    })();
    let name = format!(
        "gpu{} dwconv bf16 {b}x{c}x{hw}x{hw} k3s{stride}p1 nhwc vs nchw",
        gpu.index
    );
    let mut chk = check(name, got);
    chk.note = "out, dinp exact; dw, dbias".into();
    chk
}

/// The name's suffix of a check in `layout` (none for NCHW).
fn suffix(layout: Layout) -> &'static str {
    match layout {
        Layout::Nchw => "",
        Layout::Nhwc => " nhwc",
    }
}

/// Padded max pooling (values and argmax; backward from the CPU's argmax) and average pooling,
/// forward and backward, exactly, on tensors in `layout` (the CPU's NCHW ones moved there and
/// the results back): two lines.
fn pooling(gpu: &Gpu, b: usize, g: Window, rng: &mut Rng, layout: Layout) -> Vec<Check> {
    let geom = format!(
        "{b}x{}x{}x{} k{}s{}p{}{}",
        g.c,
        g.h,
        g.w,
        g.k,
        g.stride,
        g.pad,
        suffix(layout)
    );
    let (inp, outp) = ((b, g.c, g.h * g.w), (b, g.c, g.oh * g.ow));
    let (n_in, n_out) = (b * g.c * g.h * g.w, b * g.c * g.oh * g.ow);
    let x: Vec<f32> = (0..n_in)
        .map(|_| (rng.normal() * 2.0).round() / 2.0)
        .collect();
    let dout = randn(rng, n_out);
    let (mut mo, mut ma) = (vec![0.0; n_out], vec![0u32; n_out]);
    cpu::maxpool2d_padded_forward(&mut mo, &mut ma, &x, b, &g);
    let mut mdx = vec![0.0; n_in];
    cpu::maxpool2d_padded_backward(&mut mdx, &dout, &ma, b, &g);
    let mut ao = vec![0.0; n_out];
    cpu::avgpool2d_forward(&mut ao, &x, b, &g);
    let mut adx = vec![0.0; n_in];
    cpu::avgpool2d_backward(&mut adx, &dout, b, &g);
    let as_f32 = |a: &[u32]| a.iter().map(|&v| v as f32).collect::<Vec<f32>>();
    let got = (|| {
        let (xd, dy, cpu_arg) = (
            up(gpu, &laid(layout, &x, inp))?,
            up(gpu, &laid(layout, &dout, outp))?,
            gpu.stream
                .clone_htod(&laid(layout, &ma, outp))
                .map_err(crate::backend::cuda::on(gpu.index, "upload"))?,
        );
        let mut o = nans(gpu, n_out)?;
        let mut arg = gpu
            .stream
            .clone_htod(&vec![u32::MAX - 1; n_out])
            .map_err(crate::backend::cuda::on(gpu.index, "upload"))?;
        pool::maxpool2d_padded_forward(
            gpu,
            &mut o.slice_mut(..),
            &mut arg.slice_mut(..),
            &xd.slice(..),
            b,
            &g,
            layout,
        )?;
        let mut dx = nans(gpu, n_in)?;
        pool::maxpool2d_padded_backward(
            gpu,
            &mut dx.slice_mut(..),
            &dy.slice(..),
            &cpu_arg.slice(..),
            b,
            &g,
            layout,
        )?;
        let arg = gpu
            .stream
            .clone_dtoh(&arg)
            .map_err(crate::backend::cuda::on(gpu.index, "download"))?;
        let mut got = unlaid(layout, &down(gpu, &o, n_out)?, outp);
        got.extend(as_f32(&unlaid(layout, &arg, outp)));
        got.extend(unlaid(layout, &down(gpu, &dx, n_in)?, inp));
        let mut ao_d = nans(gpu, n_out)?;
        pool::avgpool2d_forward(gpu, &mut ao_d.slice_mut(..), &xd.slice(..), b, &g, layout)?;
        let mut adx_d = nans(gpu, n_in)?;
        pool::avgpool2d_backward(gpu, &mut adx_d.slice_mut(..), &dy.slice(..), b, &g, layout)?;
        let mut avg = unlaid(layout, &down(gpu, &ao_d, n_out)?, outp);
        avg.extend(unlaid(layout, &down(gpu, &adx_d, n_in)?, inp));
        Ok::<_, CudaError>((got, avg))
    })();
    let want_max = [mo, as_f32(&ma), mdx].concat();
    let want_avg = [ao, adx].concat();
    let (max_name, avg_name) = (
        format!("gpu{} padded maxpool {geom}", gpu.index),
        format!("gpu{} avgpool {geom}", gpu.index),
    );
    match got {
        Ok((m, a)) => vec![
            check(max_name, Ok(compare(&m, &want_max, 0.0, 0.0))),
            check(avg_name, Ok(compare(&a, &want_avg, 0.0, 0.0))),
        ],
        Err(e) => vec![check(max_name, Err(e.clone())), check(avg_name, Err(e))],
    }
}

/// Global average pooling forward and backward: one line.
fn global(gpu: &Gpu, (b, c, hw): (usize, usize, usize), rng: &mut Rng, layout: Layout) -> Check {
    let planes = b * c;
    let x = randn(rng, planes * hw);
    let dout = randn(rng, planes);
    let mut want = vec![0.0; planes];
    cpu::gap_forward(&mut want, &x, planes, hw);
    let mut want_dx = vec![0.0; planes * hw];
    cpu::gap_backward(&mut want_dx, &dout, planes, hw);
    let got = (|| {
        let (xd, dy) = (up(gpu, &laid(layout, &x, (b, c, hw)))?, up(gpu, &dout)?);
        let (mut o, mut dx) = (nans(gpu, planes)?, nans(gpu, planes * hw)?);
        pool::gap_forward(gpu, &mut o.slice_mut(..), &xd.slice(..), (b, c), hw, layout)?;
        pool::gap_backward(
            gpu,
            &mut dx.slice_mut(..),
            &dy.slice(..),
            (b, c),
            hw,
            layout,
        )?;
        Ok(vec![
            (down(gpu, &o, planes)?, want),
            (
                unlaid(layout, &down(gpu, &dx, planes * hw)?, (b, c, hw)),
                want_dx,
            ),
        ])
    })();
    check(
        format!(
            "gpu{} global avgpool {b}x{c}x{hw}{}",
            gpu.index,
            suffix(layout)
        ),
        joined(got),
    )
}
