//! The Winograd convolutions against the naive sums (in f64), over chunks of every size the
//! planning can make: one block row, chunks that cut images, images smaller than a vector of
//! blocks, odd sizes whose last blocks hang over the edge.

use super::weights::{transform_weights, untransform_grad};
use super::*;
use crate::nn::rng::Rng;

/// (b, c, h, w, oc)
const CASES: [(usize, usize, usize, usize, usize); 8] = [
    (2, 3, 5, 7, 4),
    (3, 5, 9, 17, 6),
    (2, 2, 1, 1, 3),
    (1, 2, 3, 100, 5),
    (2, 16, 8, 8, 16),
    (3, 4, 6, 6, 5),
    (2, 7, 32, 32, 9),
    (1, 1, 2, 2, 1),
];

fn randn(n: usize, seed: u64) -> Vec<f32> {
    crate::nn::gradcheck::randn(&mut Rng::new(seed), n)
}

fn at(
    x: &[f32],
    (c, h, w): (usize, usize, usize),
    n: usize,
    ch: usize,
    y: isize,
    xx: isize,
) -> f64 {
    if y < 0 || xx < 0 || y >= h as isize || xx >= w as isize {
        return 0.0;
    }
    x[((n * c + ch) * h + y as usize) * w + xx as usize] as f64
}

/// out[n, o, y, x] = bias[o] + sum_c,ky,kx w[o, c, ky, kx] * inp[n, c, y + ky - 1, x + kx - 1].
fn naive_forward(
    inp: &[f32],
    w: &[f32],
    bias: &[f32],
    (b, c, h, wd, oc): (usize, usize, usize, usize, usize),
) -> Vec<f64> {
    let mut out = vec![0.0; b * oc * h * wd];
    for n in 0..b {
        for o in 0..oc {
            for y in 0..h {
                for x in 0..wd {
                    let mut acc = bias[o] as f64;
                    for ci in 0..c {
                        for t in 0..9 {
                            let (ky, kx) = ((t / 3) as isize, (t % 3) as isize);
                            let v = at(
                                inp,
                                (c, h, wd),
                                n,
                                ci,
                                y as isize + ky - 1,
                                x as isize + kx - 1,
                            );
                            acc += v * w[(o * c + ci) * 9 + t] as f64;
                        }
                    }
                    out[((n * oc + o) * h + y) * wd + x] = acc;
                }
            }
        }
    }
    out
}

/// (dinp, dw) of `naive_forward` for dout.
fn naive_backward(
    dout: &[f32],
    inp: &[f32],
    w: &[f32],
    (b, c, h, wd, oc): (usize, usize, usize, usize, usize),
) -> (Vec<f64>, Vec<f64>) {
    let (mut dinp, mut dw) = (vec![0.0; b * c * h * wd], vec![0.0; oc * c * 9]);
    for n in 0..b {
        for o in 0..oc {
            for y in 0..h {
                for x in 0..wd {
                    let d = dout[((n * oc + o) * h + y) * wd + x] as f64;
                    for ci in 0..c {
                        for t in 0..9 {
                            let (iy, ix) = (
                                y as isize + (t / 3) as isize - 1,
                                x as isize + (t % 3) as isize - 1,
                            );
                            if iy < 0 || ix < 0 || iy >= h as isize || ix >= wd as isize {
                                continue;
                            }
                            let i = ((n * c + ci) * h + iy as usize) * wd + ix as usize;
                            dinp[i] += d * w[(o * c + ci) * 9 + t] as f64;
                            dw[(o * c + ci) * 9 + t] += d * inp[i] as f64;
                        }
                    }
                }
            }
        }
    }
    (dinp, dw)
}

/// |got - want| within 1e-5 of the largest |want| (plus a floor for all-zero results).
fn assert_close(got: &[f32], want: &[f64], what: &str) {
    let scale = want.iter().fold(1e-3f64, |m, v| m.max(v.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (*g as f64 - w).abs() <= 1e-5 * scale,
            "{what}[{i}]: {g} vs {w} (scale {scale})"
        );
    }
}

/// The chunk sizes (block rows) each case runs with: one row, two, three, the planned one.
fn pers(g: &Blocks, channels: usize) -> Vec<usize> {
    vec![1, 2, 3, g.rows_per_chunk(channels)]
}

#[test]
fn the_weights_transform_and_its_gradient_are_adjoint() {
    let (g, s) = (randn(9, 1), randn(16, 2));
    let u = transform_weights(g[..].try_into().unwrap());
    let back = untransform_grad(s[..].try_into().unwrap());
    let lhs: f64 = u.iter().zip(&s).map(|(a, b)| *a as f64 * *b as f64).sum();
    let rhs: f64 = g
        .iter()
        .zip(&back)
        .map(|(a, b)| *a as f64 * *b as f64)
        .sum();
    assert!((lhs - rhs).abs() < 1e-5, "{lhs} vs {rhs}");
}

#[test]
fn forward_equals_the_naive_sums() {
    if !available() {
        eprintln!("skipped: this CPU has no AVX2");
        return;
    }
    for (k, case @ (b, c, h, wd, oc)) in CASES.into_iter().enumerate() {
        let inp = randn(b * c * h * wd, 10 + k as u64);
        let w = randn(oc * c * 9, 20 + k as u64);
        let bias = randn(oc, 30 + k as u64);
        let want = naive_forward(&inp, &w, &bias, case);
        let g = Blocks::new(h, wd);
        let wf = Weights::forward(&w, c, oc);
        for per in pers(&g, c + oc) {
            let mut out = vec![f32::NAN; b * oc * h * wd];
            forward_in(&mut out, &inp, &wf, &bias, b, (c, oc), g, per);
            assert_close(
                &out,
                &want,
                &format!("case {case:?}, {per} rows a chunk: out"),
            );
        }
    }
}

#[test]
fn backward_equals_the_naive_sums_and_adds_to_dw() {
    if !available() {
        eprintln!("skipped: this CPU has no AVX2");
        return;
    }
    for (k, case @ (b, c, h, wd, oc)) in CASES.into_iter().enumerate() {
        let inp = randn(b * c * h * wd, 40 + k as u64);
        let w = randn(oc * c * 9, 50 + k as u64);
        let dout = randn(b * oc * h * wd, 60 + k as u64);
        let (want_dinp, mut want_dw) = naive_backward(&dout, &inp, &w, case);
        let before = randn(oc * c * 9, 70 + k as u64);
        for (d, b0) in want_dw.iter_mut().zip(&before) {
            *d += *b0 as f64;
        }
        let g = Blocks::new(h, wd);
        let wi = Weights::input_grad(&w, c, oc);
        for per in pers(&g, c + 2 * oc) {
            let mut dinp = vec![f32::NAN; b * c * h * wd];
            let mut dw = before.clone();
            backward_in(
                Some((&mut dinp, &wi)),
                &mut dw,
                &dout,
                &inp,
                b,
                (c, oc),
                g,
                per,
            );
            let what = format!("case {case:?}, {per} rows a chunk");
            assert_close(&dinp, &want_dinp, &format!("{what}: dinp"));
            assert_close(&dw, &want_dw, &format!("{what}: dw"));
            let mut dw_only = before.clone();
            backward_in(None, &mut dw_only, &dout, &inp, b, (c, oc), g, per);
            assert_eq!(dw_only, dw, "{what}: dw without dinp");
        }
    }
}

#[test]
fn a_non_finite_value_outside_the_blocks_does_not_reach_the_weight_gradient() {
    if !available() {
        eprintln!("skipped: this CPU has no AVX2");
        return;
    }
    // a run that diverged once leaves NaN in this thread's buffers; lanes past a chunk's last
    // block must not carry it into the next layer's sums
    let case @ (b, c, h, wd, oc) = (1, 3, 6, 6, 4);
    let g = Blocks::new(h, wd);
    let nan = vec![f32::NAN; 2 * 4 * 10 * 10];
    let mut sink = vec![0.0; 9 * 9 * 3];
    let wi = Weights::input_grad(&sink[..4 * 3 * 9], 3, 4);
    let mut d = vec![0.0; 2 * 3 * 100];
    backward_in(
        Some((&mut d, &wi)),
        &mut sink[..4 * 3 * 9],
        &nan[..2 * 4 * 100],
        &nan[..2 * 3 * 100],
        2,
        (3, 4),
        Blocks::new(10, 10),
        64,
    );
    let (inp, dout, w) = (
        randn(b * c * h * wd, 1),
        randn(b * oc * h * wd, 2),
        randn(oc * c * 9, 3),
    );
    let (_, want) = naive_backward(&dout, &inp, &w, case);
    let mut dw = vec![0.0; oc * c * 9];
    backward_in(None, &mut dw, &dout, &inp, b, (c, oc), g, 64);
    assert_close(&dw, &want, "dw after a NaN run");
}

#[test]
fn it_runs_where_avx2_is_the_widest_or_avx512_half_width_unless_asked() {
    use direct::Isa::*;
    assert!(decide("", Some(Avx2), true, false));
    assert!(!decide("", Some(Avx512), true, false));
    assert!(decide("", Some(Avx512), true, true));
    assert!(decide("on", Some(Avx512), true, false));
    assert!(!decide("off", Some(Avx2), true, false));
    assert!(!decide("off", Some(Avx512), true, true));
    assert!(!decide("", None, false, false));
    assert!(!decide("on", None, true, true));
}

#[test]
fn the_memory_counted_covers_what_both_passes_grow() {
    if !available() {
        eprintln!("skipped: this CPU has no AVX2");
        return;
    }
    for case @ (b, c, h, wd, oc) in [(9, 16, 32, 32, 16), (3, 64, 8, 8, 40), (2, 5, 9, 17, 6)] {
        // a fresh thread: its buffers start empty
        let grown = std::thread::spawn(move || {
            let (inp, w) = (randn(b * c * h * wd, 1), randn(oc * c * 9, 2));
            let mut out = vec![0.0; b * oc * h * wd];
            forward(
                &mut out,
                &inp,
                &Weights::forward(&w, c, oc),
                &vec![0.0; oc],
                b,
                c,
                oc,
                (h, wd),
            );
            let (wi, mut dw, mut dinp) = (
                Weights::input_grad(&w, c, oc),
                vec![0.0; w.len()],
                vec![0.0; inp.len()],
            );
            backward(
                Some((&mut dinp, &wi)),
                &mut dw,
                &out,
                &inp,
                b,
                c,
                oc,
                (h, wd),
            );
            let weights = wi.u.len().max(Weights::forward(&w, c, oc).u.len());
            BUFFERS.with(|s| {
                let s = s.borrow();
                weights + s.halves.len() + s.v.len() + s.y.len() + s.m.len() + s.s.len()
            })
        })
        .join()
        .unwrap();
        let counted = floats(c, oc, (h, wd));
        assert!(
            grown <= counted,
            "{case:?}: grew {grown} floats, counted {counted}"
        );
        // (a chunk is at most the batch's block rows: tiny batches of small images fill less)
        assert!(
            counted < 4 * grown + (1 << 20),
            "{case:?}: counted {counted} floats for {grown}"
        );
    }
}
