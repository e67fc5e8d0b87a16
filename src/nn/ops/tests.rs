//! The ops' tests (finite differences perturb x[i] in place while reading the analytic
//! gradient at i, hence the range loops).
#![allow(clippy::needless_range_loop)]

use super::*;

#[test]
fn dropout_keys_differ_by_seed_pass_and_node() {
    let keys = [
        dropout_key(0, 1, 0),
        dropout_key(1, 1, 0),
        dropout_key(0, 2, 0),
        dropout_key(0, 1, 1),
    ];
    for (i, a) in keys.iter().enumerate() {
        for b in &keys[i + 1..] {
            assert_ne!(a, b);
        }
    }
    assert_eq!(dropout_key(7, 3, 2), dropout_key(7, 3, 2));
}

#[test]
fn a_dropout_mask_drops_about_p_and_each_element_is_its_own_draw() {
    let key = dropout_key(3, 1, 4);
    let mut long = vec![f32::NAN; 100_000];
    dropout_mask(&mut long, key, 0.3);
    let dropped = long.iter().filter(|&&m| m == 0.0).count() as f64 / long.len() as f64;
    assert!((dropped - 0.3).abs() < 0.01, "{dropped}");
    assert!(long.iter().all(|&m| m == 0.0 || m == 1.0 / 0.7));
    // element i's draw does not depend on the mask's length
    let mut short = vec![0.0; 100];
    dropout_mask(&mut short, key, 0.3);
    assert_eq!(short[..], long[..100]);
    // another key, other elements
    dropout_mask(&mut short, dropout_key(3, 2, 4), 0.3);
    assert_ne!(short[..], long[..100]);
}
use crate::nn::rng::Rng;

fn randn(r: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| r.normal()).collect()
}

/// Central finite difference of a scalar function f at x[i], in f64 around f32 data.
fn fd(x: &mut [f32], i: usize, f: &mut dyn FnMut(&[f32]) -> f64) -> f64 {
    let h = 1e-2f32;
    let x0 = x[i];
    x[i] = x0 + h;
    let fp = f(x);
    x[i] = x0 - h;
    let fm = f(x);
    x[i] = x0;
    (fp - fm) / (2.0 * h as f64)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 2e-3 + 2e-3 * b.abs()
}

#[test]
fn linear_backward_matches_finite_differences() {
    let (b, c, oc) = (3, 4, 5);
    let mut r = Rng::new(1);
    let mut inp = randn(&mut r, b * c);
    let mut w = randn(&mut r, c * oc);
    let mut bias = randn(&mut r, oc);
    let g = randn(&mut r, b * oc); // loss = sum(out * g)
    let loss = |inp: &[f32], w: &[f32], bias: &[f32]| {
        let mut out = vec![0.0; b * oc];
        linear_forward(&mut out, inp, w, bias, b, c, oc);
        out.iter()
            .zip(&g)
            .map(|(o, g)| (*o as f64) * (*g as f64))
            .sum::<f64>()
    };
    let mut dinp = vec![0.0; b * c];
    let mut dw = vec![0.0; c * oc];
    let mut db = vec![0.0; oc];
    linear_backward(Some(&mut dinp), &mut dw, &mut db, &g, &inp, &w, b, c, oc);
    for i in 0..inp.len() {
        let (w2, b2) = (w.clone(), bias.clone());
        let num = fd(&mut inp, i, &mut |x| loss(x, &w2, &b2));
        assert!(close(dinp[i] as f64, num), "dinp[{i}] {} vs {num}", dinp[i]);
    }
    for i in 0..w.len() {
        let (i2, b2) = (inp.clone(), bias.clone());
        let num = fd(&mut w, i, &mut |x| loss(&i2, x, &b2));
        assert!(close(dw[i] as f64, num), "dw[{i}] {} vs {num}", dw[i]);
    }
    for i in 0..bias.len() {
        let (i2, w2) = (inp.clone(), w.clone());
        let num = fd(&mut bias, i, &mut |x| loss(&i2, &w2, x));
        assert!(close(db[i] as f64, num), "db[{i}] {} vs {num}", db[i]);
    }
}

#[test]
fn linear_backward_accumulates_into_weight_gradients() {
    let (b, c, oc) = (2, 3, 2);
    let mut r = Rng::new(2);
    let inp = randn(&mut r, b * c);
    let w = randn(&mut r, c * oc);
    let g = randn(&mut r, b * oc);
    let mut dw1 = vec![0.0; c * oc];
    let mut db1 = vec![0.0; oc];
    linear_backward(None, &mut dw1, &mut db1, &g, &inp, &w, b, c, oc);
    let mut dw2 = dw1.clone();
    let mut db2 = db1.clone();
    linear_backward(None, &mut dw2, &mut db2, &g, &inp, &w, b, c, oc);
    for (a, b) in dw1.iter().zip(&dw2) {
        assert!((2.0 * a - b).abs() < 1e-5);
    }
    for (a, b) in db1.iter().zip(&db2) {
        assert!((2.0 * a - b).abs() < 1e-5);
    }
}

#[test]
fn relu_backward_matches_finite_differences() {
    let mut r = Rng::new(3);
    // keep inputs away from the kink at 0, where the derivative is undefined
    let mut x: Vec<f32> = randn(&mut r, 20)
        .into_iter()
        .map(|v| if v.abs() < 0.1 { v + 0.5 } else { v })
        .collect();
    let g = randn(&mut r, 20);
    let loss = |x: &[f32]| {
        let mut y = x.to_vec();
        relu_forward(&mut y);
        y.iter()
            .zip(&g)
            .map(|(a, b)| (*a as f64) * (*b as f64))
            .sum::<f64>()
    };
    let mut out = x.clone();
    relu_forward(&mut out);
    let mut dx = g.clone();
    relu_backward(&mut dx, &out);
    for i in 0..x.len() {
        let num = fd(&mut x, i, &mut |v| loss(v));
        assert!(close(dx[i] as f64, num), "dx[{i}] {} vs {num}", dx[i]);
    }
}

#[test]
fn softmax_xent_gradient_matches_finite_differences_and_loss_is_right() {
    let (b, c) = (4, 6);
    let mut r = Rng::new(4);
    let mut logits = randn(&mut r, b * c);
    let labels = [0u32, 5, 2, 2];
    let mut d = vec![0.0; b * c];
    let (loss, _) = softmax_xent(Some(&mut d), &logits, &labels, b, c);
    // direct formula for the first row
    let row = &logits[0..c];
    let lse = row.iter().map(|v| (*v as f64).exp()).sum::<f64>().ln();
    let mut expect = lse - row[0] as f64;
    for i in 1..b {
        let row = &logits[i * c..(i + 1) * c];
        let lse = row.iter().map(|v| (*v as f64).exp()).sum::<f64>().ln();
        expect += lse - row[labels[i] as usize] as f64;
    }
    assert!((loss - expect).abs() < 1e-4, "{loss} vs {expect}");
    for i in 0..logits.len() {
        let num = fd(&mut logits, i, &mut |x| {
            softmax_xent(None, x, &labels, b, c).0
        });
        assert!(close(d[i] as f64, num), "dlogits[{i}] {} vs {num}", d[i]);
    }
}

#[test]
fn label_smoothing_matches_its_definition_and_finite_differences() {
    let (b, c, eps) = (3, 5, 0.1f32);
    let mut r = Rng::new(8);
    let mut logits = randn(&mut r, b * c);
    let labels = [4u32, 0, 2];
    let mut d = vec![0.0; b * c];
    let (loss, _) = softmax_xent_smoothed(Some(&mut d), &logits, &labels, b, c, eps);
    // -sum over classes of target * log softmax, target = (1 - eps) onehot + eps / C
    let mut expect = 0.0;
    for i in 0..b {
        let row = &logits[i * c..(i + 1) * c];
        let lse = row.iter().map(|v| (*v as f64).exp()).sum::<f64>().ln();
        for (j, &v) in row.iter().enumerate() {
            let t = eps as f64 / c as f64
                + if j == labels[i] as usize {
                    1.0 - eps as f64
                } else {
                    0.0
                };
            expect -= t * (v as f64 - lse);
        }
    }
    assert!((loss - expect).abs() < 1e-4, "{loss} vs {expect}");
    for i in 0..logits.len() {
        let num = fd(&mut logits, i, &mut |x| {
            softmax_xent_smoothed(None, x, &labels, b, c, eps).0
        });
        assert!(close(d[i] as f64, num), "dlogits[{i}] {} vs {num}", d[i]);
    }
}

#[test]
fn softmax_xent_is_stable_for_huge_logits_and_counts_correct() {
    let logits = [1000.0f32, 0.0, -1000.0, 0.0, 3.0, 1.0];
    let (loss, correct) = softmax_xent(None, &logits, &[0, 2], 2, 3);
    assert!(loss.is_finite());
    assert_eq!(correct, 1);
}

/// The fused passes of a residual add and its ReLU give, to the bit, what the separate ones
/// give: the add then the ReLU; the mask then a copy, or the mask then an accumulation.
#[test]
fn fused_add_relu_passes_equal_the_separate_ones() {
    let n = 1000;
    let wave = |k: f32| {
        (0..n)
            .map(|i| ((i as f32) * k).sin() * 3.0)
            .collect::<Vec<f32>>()
    };
    let (a, b, dout, acc) = (wave(0.37), wave(0.11), wave(0.53), wave(0.29));
    let mut want = vec![0.0; n];
    add_forward(&mut want, &a, &b);
    relu_forward(&mut want);
    let mut out = vec![f32::NAN; n];
    add_relu_forward(&mut out, &a, &b);
    assert!(out
        .iter()
        .zip(&want)
        .all(|(x, y)| x.to_bits() == y.to_bits()));
    assert!(out.contains(&0.0) && out.iter().any(|&v| v > 0.0));

    let mut masked = dout.clone();
    relu_backward(&mut masked, &out);
    let mut summed = acc.clone();
    accumulate(&mut summed, &masked);
    let (mut d, mut got) = (dout.clone(), acc.clone());
    relu_backward_accumulate(&mut d, &mut got, &out);
    assert_eq!((&d, &got), (&masked, &summed));
    let (mut d, mut copy) = (dout.clone(), vec![f32::NAN; n]);
    relu_backward_copy(&mut d, &mut copy, &out);
    assert_eq!((&d, &copy), (&masked, &masked));
}
