//! Why ResNet's 3x3 layers (and, with AVX-512, larger pointwise layers) take `nn::direct`: GFLOP/s
//! of its forward pass, weight gradient and input gradient on ResNet-20's three layer shapes and
//! three pointwise ones (MobileNetV2 at 32x32, ResNet-50 at 224x224; a group of 8 images, one
//! thread), beside the forward pass by im2col + `sgemm` per image (what the other convolutions
//! do; a pointwise layer multiplies the image itself). Run: `cargo bench --bench direct_conv`

mod common;

use mgtop::nn::direct;
use mgtop::nn::gemm::sgemm;
use mgtop::nn::im2col::im2col;
use mgtop::nn::winograd;

fn seconds(f: impl FnMut()) -> f64 {
    common::best_seconds(20, f)
}

fn main() {
    if !direct::available() {
        println!("this CPU has neither AVX-512 nor AVX2: every convolution takes im2col + sgemm");
        return;
    }
    let b = 8;
    println!(
        "{:<20} {:>14} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "layer (GFLOP/s)", "im2col fwd", "direct fwd", "dw", "dinp", "wino fwd", "dw", "dinp"
    );
    for (c, hw, oc, k) in [
        (3usize, 32usize, 16usize, 3usize),
        (16, 32, 16, 3),
        (32, 16, 32, 3),
        (64, 8, 64, 3),
        (16, 32, 96, 1),
        (144, 16, 24, 1),
        (64, 56, 256, 1),
    ] {
        let inp: Vec<f32> = (0..b * c * hw * hw).map(|i| (i % 7) as f32 * 0.1).collect();
        let kk = k * k;
        let w: Vec<f32> = (0..oc * c * kk).map(|i| (i % 5) as f32 * 0.01).collect();
        let bias = vec![0.0f32; oc];
        let mut out = vec![0.0f32; b * oc * hw * hw];
        let mut col = vec![0.0f32; c * kk * hw * hw];
        let flops = 2.0 * (b * oc * c * kk * hw * hw) as f64;
        let (ohw, chw) = (hw * hw, c * hw * hw);
        let columns = seconds(|| {
            for n in 0..b {
                let img = &inp[n * chw..(n + 1) * chw];
                let o = &mut out[n * oc * ohw..(n + 1) * oc * ohw];
                if k == 1 {
                    sgemm(false, false, oc, ohw, c, 1.0, &w, img, 0.0, o);
                    continue;
                }
                im2col(&mut col, ohw, img, c, hw, hw, k, k, 1, k / 2, hw, hw);
                sgemm(false, false, oc, ohw, c * kk, 1.0, &w, &col, 0.0, o);
            }
        });
        let win = (hw, hw, k, 1);
        // the weights regrouped once per layer and pass, as `nn::grouped` does
        let wf = direct::dense::ForwardWeights::new(&w, c, oc, k);
        let fwd = seconds(|| direct::dense::forward(&mut out, &inp, &wf, &bias, b, c, oc, win));
        let wi = direct::dense::InputGradWeights::new(&w, c, oc, win);
        let mut dw = vec![0.0f32; w.len()];
        let mut dinp = vec![0.0f32; inp.len()];
        let mut back = |with_dinp: bool| {
            seconds(|| {
                let d = with_dinp.then_some((&mut dinp[..], &wi));
                direct::dense::backward(d, &mut dw, &out, &inp, b, c, oc, win)
            })
        };
        let (dw_only, both) = (back(false), back(true));
        let gf = |s: f64| flops / s / 1e9;
        // Winograd F(2x2, 3x3) where it applies (its GFLOP/s counted as the direct products':
        // the same convolution per second)
        let wino = (k == 3 && winograd::enabled()).then(|| {
            let wf = winograd::Weights::forward(&w, c, oc);
            let fwd = seconds(|| winograd::forward(&mut out, &inp, &wf, &bias, b, c, oc, (hw, hw)));
            let wi = winograd::Weights::input_grad(&w, c, oc);
            let mut back = |with_dinp: bool| {
                seconds(|| {
                    let d = with_dinp.then_some((&mut dinp[..], &wi));
                    winograd::backward(d, &mut dw, &out, &inp, b, c, oc, (hw, hw))
                })
            };
            let (dw_only, both) = (back(false), back(true));
            [gf(fwd), gf(dw_only), gf(both - dw_only)]
        });
        let [wf, wdw, wdi] = wino
            .map(|x| x.map(|g| format!("{g:.1}")))
            .unwrap_or_else(|| ["-".into(), "-".into(), "-".into()]);
        println!(
            "{:<20} {:>14.1} {:>10.1} {:>10.1} {:>10.1} {:>10} {:>10} {:>10}",
            format!("{c}x{hw}x{hw} -> {oc} k{k}"),
            gf(columns),
            gf(fwd),
            gf(dw_only),
            gf(both - dw_only),
            wf,
            wdw,
            wdi
        );
    }
}
