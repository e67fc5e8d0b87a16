//! Why ResNet's 3x3 layers take `nn::direct` on AVX-512 CPUs: GFLOP/s of its forward pass, weight
//! gradient and input gradient on ResNet-20's three layer shapes (a group of 8 images, one
//! thread), beside the forward pass by im2col + `sgemm` per image (what every other
//! convolution does). Run: `cargo bench --bench direct_conv`

use std::time::Instant;

use mgtop::nn::direct;
use mgtop::nn::gemm::sgemm;
use mgtop::nn::im2col::im2col;

fn seconds(mut f: impl FnMut()) -> f64 {
    f();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let reps = 20;
        let t = Instant::now();
        for _ in 0..reps {
            f();
        }
        best = best.min(t.elapsed().as_secs_f64() / reps as f64);
    }
    best
}

fn main() {
    if !direct::available() {
        println!("this CPU has no AVX-512: every convolution takes im2col + sgemm");
        return;
    }
    let b = 8;
    println!(
        "{:<20} {:>14} {:>10} {:>10} {:>10}",
        "layer (GFLOP/s)", "im2col fwd", "direct fwd", "dw", "dinp"
    );
    for (c, hw, oc) in [(16usize, 32usize, 16usize), (32, 16, 32), (64, 8, 64)] {
        let inp: Vec<f32> = (0..b * c * hw * hw).map(|i| (i % 7) as f32 * 0.1).collect();
        let w: Vec<f32> = (0..oc * c * 9).map(|i| (i % 5) as f32 * 0.01).collect();
        let bias = vec![0.0f32; oc];
        let mut out = vec![0.0f32; b * oc * hw * hw];
        let mut col = vec![0.0f32; c * 9 * hw * hw];
        let flops = 2.0 * (b * oc * c * 9 * hw * hw) as f64;
        let (ohw, chw) = (hw * hw, c * hw * hw);
        let columns = seconds(|| {
            for n in 0..b {
                im2col(
                    &mut col,
                    ohw,
                    &inp[n * chw..],
                    c,
                    hw,
                    hw,
                    3,
                    3,
                    1,
                    1,
                    hw,
                    hw,
                );
                let o = &mut out[n * oc * ohw..(n + 1) * oc * ohw];
                sgemm(false, false, oc, ohw, c * 9, 1.0, &w, &col, 0.0, o);
            }
        });
        let fwd =
            seconds(|| direct::dense::forward(&mut out, &inp, &w, &bias, b, c, hw, hw, oc, 3));
        let (mut dw, mut db) = (vec![0.0f32; w.len()], vec![0.0f32; oc]);
        let dw_only = seconds(|| {
            direct::dense::backward(None, &mut dw, &mut db, &out, &inp, &w, b, c, hw, hw, oc, 3)
        });
        let mut dinp = vec![0.0f32; inp.len()];
        let both = seconds(|| {
            let d = Some(&mut dinp[..]);
            direct::dense::backward(d, &mut dw, &mut db, &out, &inp, &w, b, c, hw, hw, oc, 3)
        });
        let gf = |s: f64| flops / s / 1e9;
        println!(
            "{:<20} {:>14.1} {:>10.1} {:>10.1} {:>10.1}",
            format!("{c}x{hw}x{hw} -> {oc}"),
            gf(columns),
            gf(fwd),
            gf(dw_only),
            gf(both - dw_only)
        );
    }
}
