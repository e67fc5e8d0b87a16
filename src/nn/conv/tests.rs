//! The convolution against a naive oracle and finite differences, and its two paths against
//! each other.

use super::*;
use crate::nn::gradcheck::{check, dot, randn};
use crate::nn::rng::Rng;
use crate::nn::window::out_size;

/// (b, c, h, w, oc, kh, kw, stride, pad)
type Case = (
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
);
/// Among them, the windows of `nn::direct` (odd square kernels padded by k/2, stride 1 or
/// 2): odd channel counts, widths and position counts that are not whole vectors, a 1x1
/// image, more than one tile of positions, 5x5, pointwise layers over 272 pixels.
const CASES: [Case; 16] = [
    (2, 3, 5, 7, 4, 3, 3, 1, 0),
    (2, 2, 7, 5, 3, 3, 3, 1, 1),
    (3, 5, 9, 17, 6, 3, 3, 1, 1),
    (2, 2, 1, 1, 3, 3, 3, 1, 1),
    (1, 2, 3, 100, 5, 3, 3, 1, 1),
    (2, 3, 6, 4, 9, 5, 5, 1, 2),
    (2, 5, 16, 17, 6, 1, 1, 1, 0),
    (2, 5, 8, 8, 6, 3, 3, 2, 1),
    (1, 3, 9, 17, 5, 5, 5, 2, 2),
    (2, 2, 1, 1, 3, 3, 3, 2, 1),
    (1, 3, 34, 32, 5, 1, 1, 2, 0),
    (3, 2, 7, 6, 2, 3, 3, 2, 0),
    (2, 3, 7, 7, 3, 3, 3, 2, 1),
    (2, 2, 6, 5, 3, 2, 3, 2, 1),
    (2, 3, 4, 5, 4, 1, 1, 1, 0),
    (1, 1, 3, 3, 2, 5, 5, 1, 2),
];

/// The naive 7-loop convolution, accumulated in f64: the oracle.
fn naive(inp: &[f32], w: &[f32], bias: &[f32], k: Case) -> Vec<f32> {
    let (b, c, h, wi, oc, kh, kw, s, p) = k;
    let (oh, ow) = out_size(h, wi, kh, kw, s, p).unwrap();
    let mut out = vec![0.0; b * oc * oh * ow];
    for n in 0..b {
        for o in 0..oc {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = bias[o] as f64;
                    for ci in 0..c {
                        for i in 0..kh {
                            for j in 0..kw {
                                let iy = (oy * s + i) as isize - p as isize;
                                let ix = (ox * s + j) as isize - p as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= wi as isize {
                                    continue;
                                }
                                let x = inp[((n * c + ci) * h + iy as usize) * wi + ix as usize];
                                let wv = w[((o * c + ci) * kh + i) * kw + j];
                                acc += x as f64 * wv as f64;
                            }
                        }
                    }
                    out[((n * oc + o) * oh + oy) * ow + ox] = acc as f32;
                }
            }
        }
    }
    out
}

fn forward(inp: &[f32], w: &[f32], bias: &[f32], k: Case) -> Vec<f32> {
    let (b, c, h, wi, oc, kh, kw, s, p) = k;
    let (oh, ow) = out_size(h, wi, kh, kw, s, p).unwrap();
    let mut out = vec![f32::NAN; b * oc * oh * ow];
    let mut col = vec![f32::NAN; conv2d_scratch_len(c, (kh, kw), (s, p), (oh, ow))];
    conv2d_forward(
        &mut out, inp, w, bias, b, c, h, wi, oc, kh, kw, s, p, &mut col,
    );
    out
}

fn inputs(r: &mut Rng, k: Case) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let (b, c, h, wi, oc, kh, kw, _, _) = k;
    (
        randn(r, b * c * h * wi),
        randn(r, oc * c * kh * kw),
        randn(r, oc),
    )
}

#[test]
fn forward_matches_the_naive_convolution() {
    let mut r = Rng::new(31);
    for k in CASES.iter().copied().chain([(4, 1, 28, 28, 8, 3, 3, 1, 0)]) {
        let (inp, w, bias) = inputs(&mut r, k);
        let got = forward(&inp, &w, &bias, k);
        let want = naive(&inp, &w, &bias, k);
        for (i, (g, e)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - e).abs() <= 1e-4 + 1e-4 * e.abs(),
                "{k:?} out[{i}]: {g} vs {e}"
            );
        }
    }
}

#[test]
fn backward_matches_finite_differences() {
    let mut r = Rng::new(32);
    for k in CASES {
        let (b, c, h, wi, oc, kh, kw, s, p) = k;
        let (oh, ow) = out_size(h, wi, kh, kw, s, p).unwrap();
        let (mut inp, mut w, mut bias) = inputs(&mut r, k);
        let g = randn(&mut r, b * oc * oh * ow); // loss = sum(out * g)
        let mut dinp = vec![f32::NAN; inp.len()]; // overwritten
        let mut dw = vec![0.0; w.len()];
        let mut db = vec![0.0; oc];
        let mut col = vec![f32::NAN; conv2d_scratch_len(c, (kh, kw), (s, p), (oh, ow))];
        conv2d_backward(
            Some(&mut dinp),
            &mut dw,
            &mut db,
            &g,
            &inp,
            &w,
            b,
            c,
            h,
            wi,
            oc,
            kh,
            kw,
            s,
            p,
            &mut col,
        );
        let (w0, b0) = (w.clone(), bias.clone());
        check(&format!("{k:?} dinp"), &mut inp, &dinp, &mut |x| {
            dot(&forward(x, &w0, &b0, k), &g)
        });
        let i0 = inp.clone();
        check(&format!("{k:?} dw"), &mut w, &dw, &mut |x| {
            dot(&forward(&i0, x, &b0, k), &g)
        });
        check(&format!("{k:?} dbias"), &mut bias, &db, &mut |x| {
            dot(&forward(&i0, &w0, x, k), &g)
        });
    }
}

/// The ways besides im2col this CPU can compute a convolution with.
fn fast_paths(kh: usize, kw: usize, s: usize, p: usize) -> Vec<Path> {
    let mut paths = Vec::new();
    if dense::applies(kh, kw, s, p) {
        paths.push(Path::Direct);
    }
    if winograd::available() && winograd::computes(kh, kw, s, p) {
        paths.push(Path::Winograd);
    }
    paths
}

/// Every output and gradient of each way of computing a convolution against im2col's, for the
/// cases the direct (and where this CPU has it, the Winograd) path can take.
#[test]
fn direct_winograd_and_column_paths_agree() {
    if !direct::available() {
        eprintln!("skipped: this CPU has neither AVX-512 nor AVX2, so there is no direct path");
        return;
    }
    let mut r = Rng::new(34);
    let same = CASES
        .iter()
        .copied()
        .filter(|&(_, _, _, _, _, kh, kw, s, p)| !fast_paths(kh, kw, s, p).is_empty());
    let (mut checked, mut winograd) = (0, 0);
    // then larger batches, of small images too, strided and pointwise
    let more = [
        (4, 16, 32, 32, 16, 3, 3, 1, 1),
        (37, 3, 8, 8, 5, 3, 3, 1, 1),
        (37, 3, 9, 7, 5, 3, 3, 2, 1),
        (70, 4, 4, 4, 6, 1, 1, 1, 0),
    ];
    for k in same.chain(more) {
        let (b, c, h, wi, oc, kh, kw, s, p) = k;
        let (oh, ow) = out_size(h, wi, kh, kw, s, p).unwrap();
        let (inp, w, bias) = inputs(&mut r, k);
        let g = randn(&mut r, b * oc * oh * ow);
        if Path::choose(c, (kh, kw), s, p, oh * ow) != Path::Columns {
            assert_eq!(conv2d_scratch_len(c, (kh, kw), (s, p), (oh, ow)), 0);
        }
        let mut col = vec![f32::NAN; columns::len(c, kh, kw, oh, ow)];
        let lens = [("inp", inp.len()), ("w", w.len()), ("out", g.len())];
        let shape = geometry(b, c, h, wi, oc, kh, kw, s, p, lens);
        let run = |path: Path, col: &mut [f32]| {
            let mut out = vec![f32::NAN; b * oc * oh * ow];
            let none = Prepared::Nothing;
            forward_by(path, &mut out, &inp, &w, &none, &bias, &shape, col);
            let mut dinp = vec![f32::NAN; inp.len()];
            let (mut dw, mut db) = (vec![0.5; w.len()], vec![0.5; oc]);
            bias_sums(&mut db, &g, &shape);
            backward_by(
                path,
                Some(&mut dinp),
                &mut dw,
                &g,
                &inp,
                &w,
                &Prepared::Nothing,
                &shape,
                col,
            );
            [out, dinp, dw, db]
        };
        let columns = run(Path::Columns, &mut col);
        for path in fast_paths(kh, kw, s, p) {
            let fast = run(path, &mut col);
            for (name, (d, e)) in ["out", "dinp", "dw", "dbias"]
                .iter()
                .zip(fast.iter().zip(&columns))
            {
                let scale = e.iter().fold(1.0f32, |m, v| m.max(v.abs()));
                for (i, (d, e)) in d.iter().zip(e).enumerate() {
                    assert!(
                        (d - e).abs() <= 1e-5 * scale,
                        "{k:?} {path:?} {name}[{i}]: {d} vs {e}"
                    );
                }
            }
            winograd += usize::from(path == Path::Winograd);
        }
        checked += 1;
    }
    assert!(checked >= 11, "only {checked} cases took the direct path");
    if winograd::available() {
        assert!(
            winograd >= 5,
            "only {winograd} cases took the Winograd path"
        );
    }
}

#[test]
fn backward_accumulates_weight_gradients_and_may_skip_dinp() {
    let mut r = Rng::new(33);
    let k @ (b, c, h, wi, oc, kh, kw, s, p) = CASES[3];
    let (oh, ow) = out_size(h, wi, kh, kw, s, p).unwrap();
    let (inp, w, _) = inputs(&mut r, k);
    let g = randn(&mut r, b * oc * oh * ow);
    let mut col = vec![0.0; conv2d_scratch_len(c, (kh, kw), (s, p), (oh, ow))];
    let (mut dw1, mut db1) = (vec![0.0; w.len()], vec![0.0; oc]);
    let mut dinp = vec![0.0; inp.len()];
    conv2d_backward(
        Some(&mut dinp),
        &mut dw1,
        &mut db1,
        &g,
        &inp,
        &w,
        b,
        c,
        h,
        wi,
        oc,
        kh,
        kw,
        s,
        p,
        &mut col,
    );
    let (mut dw2, mut db2) = (dw1.clone(), db1.clone());
    conv2d_backward(
        None, &mut dw2, &mut db2, &g, &inp, &w, b, c, h, wi, oc, kh, kw, s, p, &mut col,
    );
    for (a, b) in dw1.iter().zip(&dw2).chain(db1.iter().zip(&db2)) {
        assert!((2.0 * a - b).abs() <= 1e-5 + 1e-5 * b.abs(), "{a} then {b}");
    }
}

#[test]
#[should_panic(expected = "1x1 input is smaller than the 3x3 window")]
fn refuses_an_image_smaller_than_the_kernel() {
    let (mut out, mut col) = (vec![0.0; 4], vec![0.0; 9]);
    conv2d_forward(
        &mut out,
        &[1.0],
        &[0.0; 9],
        &[0.0],
        1,
        1,
        1,
        1,
        1,
        3,
        3,
        1,
        0,
        &mut col,
    );
}

#[test]
fn the_cpu_convolutions_line_names_the_instruction_set_and_what_it_leaves_to_gemm() {
    use crate::nn::direct::Isa;
    let avx512 = kernels(Some(Isa::Avx512), false, false);
    assert!(avx512.contains("AVX-512") && avx512.contains("pointwise layers of 256+"));
    let avx2 = kernels(Some(Isa::Avx2), false, false);
    assert!(
        avx2.contains("AVX2 + FMA")
            && avx2.contains("except pointwise")
            && !avx2.contains("Winograd"),
        "{avx2}"
    );
    let winograd = kernels(Some(Isa::Avx2), true, false);
    assert!(
        winograd.contains("Winograd F(2x2, 3x3)")
            && winograd.contains("MGTOP_WINOGRAD=off")
            && winograd.contains("other odd square windows"),
        "{winograd}"
    );
    // AVX-512 taking Winograd too (on 256-bit units, or asked for): the line says so
    let on = kernels(Some(Isa::Avx512), true, false);
    assert!(
        on.contains("Winograd F(2x2, 3x3)")
            && on.contains("MGTOP_WINOGRAD=off")
            && on.contains("AVX-512"),
        "{on}"
    );
    let none = kernels(None, false, true);
    assert!(
        none.contains("(MGTOP_DIRECT=off)") && none.contains("im2col"),
        "{none}"
    );
    let lacking = kernels(None, false, false);
    assert!(
        lacking.contains("(no AVX2 or AVX-512 on this CPU)"),
        "{lacking}"
    );
}
