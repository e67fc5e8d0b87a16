//! Batch norm's passes per value: training forward (statistics, normalisation, ReLU) and
//! backward over the batch's own statistics (the ReLU mask, the sums, dx), one thread, on the
//! shapes of ResNet-20 and MobileNetV2 at 32x32, from 32x32 planes down to 2x2 (where a channel's
//! planes are 4 floats each and the per-plane work, not the values, sets the time). The backward
//! figure includes restoring dout (the backward masks it in place): one copy per value.
//! Run: `cargo bench --bench batch_norm`

mod common;

use mgtop::nn::bn::{bn_backward_own, bn_forward_train, BnGeom, BnSaved};
use mgtop::nn::ops::Act;

fn seconds(f: impl FnMut()) -> f64 {
    common::best_seconds(10, f)
}

fn main() {
    println!(
        "{:<34} {:>10} {:>12} {:>12}",
        "batch x channels x plane", "values", "fwd ns/val", "bwd ns/val"
    );
    for (what, b, c, hw) in [
        ("resnet20 stage 1", 128usize, 16usize, 32usize),
        ("resnet20 stage 1", 32, 16, 32),
        ("resnet20 stage 3", 32, 64, 8),
        ("mobilenetv2 16x16 expanded", 32, 144, 16),
        ("mobilenetv2 4x4 expanded", 32, 384, 4),
        ("mobilenetv2 2x2 expanded", 32, 960, 2),
    ] {
        let g = BnGeom { b, c, hw: hw * hw };
        let n = b * c * hw * hw;
        let x: Vec<f32> = (0..n)
            .map(|i| (i * 7919 % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let d: Vec<f32> = (0..n).map(|i| (i * 31 % 100) as f32 / 50.0 - 1.0).collect();
        let (w, bias) = (vec![1.0f32; c], vec![0.1f32; c]);
        let (mut out, mut dout, mut dx) = (vec![0.0; n], d.clone(), vec![0.0; n]);
        let (mut saved, mut running) = (vec![0.0; 2 * c], vec![0.0; 2 * c]);
        let (mut dw, mut db) = (vec![0.0; c], vec![0.0; c]);
        let consts = (1e-5, 0.1);
        let (wb, relu) = ((&w[..], &bias[..]), Act::Relu);
        let fwd = seconds(|| {
            bn_forward_train(
                &mut out,
                &mut saved,
                &mut running,
                &x,
                wb,
                g,
                None,
                relu,
                consts,
            )
        });
        let bwd = seconds(|| {
            let f = BnSaved {
                x: &x,
                out: &out,
                act: relu,
                saved: &saved,
            };
            dout.copy_from_slice(&d);
            bn_backward_own(Some(&mut dx), (&mut dw, &mut db), &mut dout, f, &w, g);
        });
        let ns = |s: f64| s * 1e9 / n as f64;
        println!(
            "{:<34} {:>10} {:>12.2} {:>12.2}",
            format!("{what}: {b}x{c}x{hw}x{hw}"),
            n,
            ns(fwd),
            ns(bwd)
        );
    }
}
