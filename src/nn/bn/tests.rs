use super::*;
use crate::nn::gradcheck::{check, dot, randn};
use crate::nn::rng::Rng;

const CONSTS: (f32, f32) = (1e-5, 0.1);

#[test]
fn training_statistics_and_running_updates_are_pytorchs() {
    // one channel, values 1..=4 over 2 samples of 2 positions
    let g = BnGeom { b: 2, c: 1, hw: 2 };
    let x = [1.0, 2.0, 3.0, 4.0];
    let (mut out, mut saved, mut run) = ([0.0; 4], [0.0; 2], [0.0, 1.0]);
    let wb: (&[f32], &[f32]) = (&[2.0], &[0.5]);
    bn_forward_train(
        &mut out,
        &mut saved,
        &mut run,
        &x,
        wb,
        g,
        None,
        Act::None,
        CONSTS,
    );
    // mean 2.5, biased variance 1.25, unbiased 5/3
    assert!((saved[0] - 2.5).abs() < 1e-6);
    let inv = 1.0 / (1.25f32 + 1e-5).sqrt();
    assert!((saved[1] - inv).abs() < 1e-5);
    assert!((out[0] - ((1.0 - 2.5) * inv * 2.0 + 0.5)).abs() < 1e-5);
    assert!((run[0] - 0.25).abs() < 1e-6, "{run:?}");
    assert!((run[1] - (0.9 + 0.1 * 5.0 / 3.0)).abs() < 1e-6, "{run:?}");
    // inference reads the running statistics
    let mut e = [0.0; 4];
    bn_forward_eval(&mut e, &run, &x, wb, g, Act::None, 1e-5);
    assert!((e[3] - ((4.0 - run[0]) / (run[1] + 1e-5).sqrt() * 2.0 + 0.5)).abs() < 1e-5);
    // ReLU applied after: the negative first output is cut to 0, the rest kept
    let mut r = [0.0; 4];
    let mut run2 = [0.0, 1.0];
    bn_forward_train(
        &mut r,
        &mut saved,
        &mut run2,
        &x,
        wb,
        g,
        None,
        Act::Relu,
        CONSTS,
    );
    assert_eq!(r[0], 0.0);
    assert_eq!(r[3], out[3]);
}

/// The statistics taken in the normalising task equal `BnStats::of`'s (what sync batch
/// norm's one-rank run and the GPU's reference use), to the bit.
#[test]
fn own_statistics_equal_the_given_ones() {
    let g = BnGeom { b: 4, c: 3, hw: 50 };
    let x = randn(&mut Rng::new(9), g.b * g.c * g.hw);
    let wb: (&[f32], &[f32]) = (&[1.0, 2.0, 0.5], &[0.0, -1.0, 0.3]);
    let run = |st: Option<&BnStats>| {
        let (mut out, mut saved, mut run) = (vec![0.0; x.len()], vec![0.0; 6], vec![0.5; 6]);
        bn_forward_train(
            &mut out,
            &mut saved,
            &mut run,
            &x,
            wb,
            g,
            st,
            Act::Relu6,
            CONSTS,
        );
        (out, saved, run)
    };
    assert_eq!(run(None), run(Some(&BnStats::of(&x, g))));
}

/// Through batch norm and its activation, both backward paths: the one-task-per-channel one
/// over the replica's own statistics, and sums-then-dx (sync batch norm's, here over one
/// replica); they agree.
#[test]
fn backward_matches_finite_differences() {
    for act in [Act::None, Act::Relu6, Act::Relu] {
        let g = BnGeom { b: 3, c: 2, hw: 19 };
        let n = g.b * g.c * g.hw;
        let mut r = Rng::new(3);
        let mut x = randn(&mut r, n);
        let mut w = randn(&mut r, 2);
        let mut bias = randn(&mut r, 2);
        let dout = randn(&mut r, n);
        let fwd = |x: &[f32], w: &[f32], bias: &[f32]| {
            let (mut out, mut saved, mut run) = (vec![0.0; n], vec![0.0; 4], vec![0.0; 4]);
            bn_forward_train(
                &mut out,
                &mut saved,
                &mut run,
                x,
                (w, bias),
                g,
                None,
                act,
                CONSTS,
            );
            (out, saved)
        };
        let (out, saved) = fwd(&x, &w, &bias);
        let f = BnSaved {
            x: &x,
            out: &out,
            act,
            saved: &saved,
        };
        let (mut dx, mut dw, mut db) = (vec![0.0; n], vec![0.0; 2], vec![0.0; 2]);
        let mut d = dout.clone();
        bn_backward_own(Some(&mut dx), (&mut dw, &mut db), &mut d, f, &w, g);
        let (mut dx2, mut dw2, mut db2) = (vec![0.0; n], vec![0.0; 2], vec![0.0; 2]);
        let mut d2 = dout.clone();
        let sums = bn_grad_sums(&mut d2, f, g);
        let s = (&sums[..], &sums[..], (g.b * g.hw) as f64);
        bn_backward(Some(&mut dx2), (&mut dw2, &mut db2), &d2, f, &w, g, s);
        assert_eq!((&dx, &dw, &db), (&dx2, &dw2, &db2), "{act:?}");
        let (w0, b0, x0) = (w.clone(), bias.clone(), x.clone());
        check("bn dx", &mut x, &dx, &mut |x| {
            dot(&fwd(x, &w0, &b0).0, &dout)
        });
        check("bn dweight", &mut w, &dw, &mut |w| {
            dot(&fwd(&x0, w, &b0).0, &dout)
        });
        check("bn dbias", &mut bias, &db, &mut |b| {
            dot(&fwd(&x0, &w0, b).0, &dout)
        });
    }
}

/// Over planes of at most 16 values the blocks of channels give the per-channel loops' results
/// bit for bit: forward (own and given statistics, each activation) and backward (dout masked,
/// dx, dweight, dbias), with channel counts that leave a short last block.
#[test]
fn blocks_of_short_planes_equal_the_per_channel_loops() {
    for (b, c, hw) in [(3, 5, 1), (1, 300, 1), (4, 70, 4), (2, 33, 9), (5, 17, 16)] {
        let g = BnGeom { b, c, hw };
        assert!(blocks::applies(g));
        let n = b * c * hw;
        let mut r = Rng::new(5);
        let (x, dout) = (randn(&mut r, n), randn(&mut r, n));
        let (w, bias) = (randn(&mut r, c), randn(&mut r, c));
        let given = BnStats::of(&x, g);
        for (act, stats) in [
            (Act::None, None),
            (Act::Relu, None),
            (Act::Relu6, None),
            (Act::Relu, Some(&given)),
        ] {
            let run = |by_blocks: bool| {
                let (mut out, mut saved) = (vec![0.0; n], vec![0.0; 2 * c]);
                let mut running = vec![0.5; 2 * c];
                let (o, s, rn) = (
                    Disjoint::new(&mut out),
                    Disjoint::new(&mut saved),
                    Disjoint::new(&mut running),
                );
                let wb = (&w[..], &bias[..]);
                match by_blocks {
                    true => blocks::forward_train(&o, (&s, &rn), &x, wb, g, stats, act, CONSTS),
                    false => by_channel_forward(&o, (&s, &rn), &x, wb, g, stats, act, CONSTS),
                }
                let (mut d, mut dx) = (dout.clone(), vec![0.0; n]);
                let (mut dw, mut db) = (vec![0.1; c], vec![0.2; c]);
                let f = BnSaved {
                    x: &x,
                    out: &out,
                    act,
                    saved: &saved,
                };
                let (ds, dxs) = (Disjoint::new(&mut d), Disjoint::new(&mut dx));
                let grads = (&Disjoint::new(&mut dw), &Disjoint::new(&mut db));
                match by_blocks {
                    true => blocks::backward_own(Some(&dxs), grads, &ds, f, &w, g),
                    false => by_channel_backward_own(Some(&dxs), grads, &ds, f, &w, g),
                }
                (out.clone(), saved.clone(), running, d, dx, dw, db)
            };
            assert_eq!(run(true), run(false), "{b}x{c}x{hw} {act:?}");
        }
    }
}
