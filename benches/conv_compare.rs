//! Why `nn::conv` runs one GEMM per image: against one GEMM for the whole batch (the images'
//! columns side by side in one [C*KH*KW, B*OH*OW] matrix, the product then copied back into
//! NCHW order, and dout copied out of it for the backward pass), on the seed CNN's convolution
//! (conv32k3 on 1x28x28) and a second layer (conv64k3 on 32x13x13), 1 and 2 intra-op threads.
//! Run: `cargo bench --bench conv_compare`

use std::time::Instant;

use mgtop::nn::conv::{conv2d_backward, conv2d_forward, conv2d_scratch_len};
use mgtop::nn::gemm::sgemm;
use mgtop::nn::im2col::{col2im, im2col};
use mgtop::nn::intraop;
use mgtop::nn::window::out_size;

#[derive(Clone, Copy)]
struct Conv {
    b: usize,
    c: usize,
    h: usize,
    w: usize,
    oc: usize,
    k: usize,
    stride: usize,
    pad: usize,
}

impl Conv {
    fn out(&self) -> (usize, usize) {
        out_size(self.h, self.w, self.k, self.k, self.stride, self.pad).unwrap()
    }
}

/// Whole-batch buffers: the wide column matrix and the product in [OC, B*OH*OW] order.
struct Wide {
    col: Vec<f32>,
    prod: Vec<f32>,
}

fn wide_forward(out: &mut [f32], inp: &[f32], wt: &[f32], bias: &[f32], p: Conv, s: &mut Wide) {
    let (oh, ow) = p.out();
    let (ohw, ckk, chw) = (oh * ow, p.c * p.k * p.k, p.c * p.h * p.w);
    let ld = p.b * ohw;
    for n in 0..p.b {
        let img = &inp[n * chw..(n + 1) * chw];
        im2col(
            &mut s.col[n * ohw..],
            ld,
            img,
            p.c,
            p.h,
            p.w,
            p.k,
            p.k,
            p.stride,
            p.pad,
            oh,
            ow,
        );
    }
    sgemm(
        false,
        false,
        p.oc,
        ld,
        ckk,
        1.0,
        wt,
        &s.col,
        0.0,
        &mut s.prod,
    );
    for n in 0..p.b {
        for o in 0..p.oc {
            let src = &s.prod[o * ld + n * ohw..o * ld + (n + 1) * ohw];
            let dst = &mut out[(n * p.oc + o) * ohw..(n * p.oc + o + 1) * ohw];
            for (d, v) in dst.iter_mut().zip(src) {
                *d = v + bias[o];
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn wide_backward(
    dinp: Option<&mut [f32]>,
    dw: &mut [f32],
    dbias: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    wt: &[f32],
    p: Conv,
    s: &mut Wide,
) {
    let (oh, ow) = p.out();
    let (ohw, ckk, chw) = (oh * ow, p.c * p.k * p.k, p.c * p.h * p.w);
    let ld = p.b * ohw;
    for n in 0..p.b {
        for o in 0..p.oc {
            let src = &dout[(n * p.oc + o) * ohw..(n * p.oc + o + 1) * ohw];
            s.prod[o * ld + n * ohw..o * ld + (n + 1) * ohw].copy_from_slice(src);
            dbias[o] += src.iter().sum::<f32>();
        }
        let img = &inp[n * chw..(n + 1) * chw];
        im2col(
            &mut s.col[n * ohw..],
            ld,
            img,
            p.c,
            p.h,
            p.w,
            p.k,
            p.k,
            p.stride,
            p.pad,
            oh,
            ow,
        );
    }
    sgemm(false, true, p.oc, ckk, ld, 1.0, &s.prod, &s.col, 1.0, dw);
    if let Some(dinp) = dinp {
        sgemm(
            true, false, ckk, ld, p.oc, 1.0, wt, &s.prod, 0.0, &mut s.col,
        );
        dinp.fill(0.0);
        for n in 0..p.b {
            col2im(
                &mut dinp[n * chw..(n + 1) * chw],
                &s.col[n * ohw..],
                ld,
                p.c,
                p.h,
                p.w,
                p.k,
                p.k,
                p.stride,
                p.pad,
                oh,
                ow,
            );
        }
    }
}

/// Best of 5 rounds, seconds per call.
fn time(mut f: impl FnMut()) -> f64 {
    f();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let mut reps = 0;
        while reps < 3 || t.elapsed().as_secs_f64() < 0.2 {
            f();
            reps += 1;
        }
        best = best.min(t.elapsed().as_secs_f64() / reps as f64);
    }
    best
}

fn filled(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919 + seed * 104729) % 1000) as f32 / 1000.0 - 0.5)
        .collect()
}

fn main() {
    println!(
        "{:<26} {:>5} {:>7} {:>15} {:>15} {:>15} {:>15}",
        "layer",
        "batch",
        "threads",
        "fwd per-image",
        "fwd one-gemm",
        "bwd per-image",
        "bwd one-gemm"
    );
    let layers = [
        ("conv32k3 on 1x28x28", 1, 28, 32, 1, 0, false),
        ("conv64k3 on 32x13x13", 32, 13, 64, 1, 0, true),
        ("conv32k3s2p1 on 16x28x28", 16, 28, 32, 2, 1, true),
    ];
    for threads in [1usize, 2] {
        intraop::install(intraop::for_worker(threads, "bench").unwrap());
        for (name, c, hw, oc, stride, pad, with_dinp) in layers {
            for b in [32usize, 128] {
                let p = Conv {
                    b,
                    c,
                    h: hw,
                    w: hw,
                    oc,
                    k: 3,
                    stride,
                    pad,
                };
                let (oh, ow) = p.out();
                let ckk = c * 9;
                let inp = filled(b * c * hw * hw, 1);
                let wt = filled(oc * ckk, 2);
                let bias = filled(oc, 3);
                let dout = filled(b * oc * oh * ow, 4);
                let mut out = vec![0.0; b * oc * oh * ow];
                let mut dinp = vec![0.0; inp.len()];
                let (mut dw, mut db) = (vec![0.0; wt.len()], vec![0.0; oc]);
                let mut col = vec![0.0; conv2d_scratch_len(c, (3, 3), (1, 0), (oh, ow))];
                let mut wide = Wide {
                    col: vec![0.0; ckk * b * oh * ow],
                    prod: vec![0.0; oc * b * oh * ow],
                };
                let f1 = time(|| {
                    conv2d_forward(
                        &mut out, &inp, &wt, &bias, b, c, hw, hw, oc, 3, 3, stride, pad, &mut col,
                    )
                });
                let reference = out.clone();
                let f2 = time(|| wide_forward(&mut out, &inp, &wt, &bias, p, &mut wide));
                let worst = out
                    .iter()
                    .zip(&reference)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0f32, f32::max);
                assert!(worst < 1e-3, "the two forward passes differ by {worst}");
                let b1 = time(|| {
                    let d = with_dinp.then_some(&mut dinp[..]);
                    conv2d_backward(
                        d, &mut dw, &mut db, &dout, &inp, &wt, b, c, hw, hw, oc, 3, 3, stride, pad,
                        &mut col,
                    )
                });
                let b2 = time(|| {
                    let d = with_dinp.then_some(&mut dinp[..]);
                    wide_backward(d, &mut dw, &mut db, &dout, &inp, &wt, p, &mut wide)
                });
                let ms = |t: f64| format!("{:.3} ms", t * 1e3);
                println!(
                    "{name:<26} {b:>5} {threads:>7} {:>15} {:>15} {:>15} {:>15}",
                    ms(f1),
                    ms(f2),
                    ms(b1),
                    ms(b2)
                );
            }
        }
        intraop::install(None);
    }
}
