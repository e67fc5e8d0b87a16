//! The whole model's backward pass against finite differences, and what training mode changes
//! (batch statistics, dropout).

use super::tests::{build, img};
use super::*;

/// The training-mode loss of `m` at `params` (batch statistics, as backward differentiates).
fn train_loss(
    m: &Model,
    params: &[f32],
    ws: &mut Workspace,
    x: &[f32],
    y: &[u32],
    b: usize,
) -> f64 {
    let mut g = vec![0.0; m.n_params];
    let mut buffers = running(m);
    m.forward_backward(params, &mut g, &mut buffers, ws, x, y, b, None)
        .0
}

/// Running statistics of a trained network's kind (means off 0, variances off 1): training on
/// the batch's statistics never reads them, batch norms on fixed statistics do.
fn running(m: &Model) -> Vec<f32> {
    let mut b = m.init_buffers();
    for t in &m.buffers {
        let var = t.name.ends_with("running_var");
        for (i, v) in b[t.range()].iter_mut().enumerate() {
            // (no mean of 0: with the biases' start of 0, pixels a ReLU zeroed below would
            // sit on batch norm's ReLU's kink, where finite differences take half its slope)
            let wave = (i as f32 * 1.7 + 0.5).sin();
            *v = if var {
                0.6 + 0.5 * wave * wave
            } else {
                0.4 * wave
            };
        }
    }
    b
}

/// Central differences of the loss against the backward pass, every `step`-th parameter.
/// ReLU and max pooling have kinks: a parameter whose difference quotient straddles one is
/// judged by a much shorter step, or not at all where two steps disagree (at most a few may).
fn gradcheck(m: &Model, b: usize, step: usize, seed: u64) {
    let params = m.init_params(seed);
    let mut rng = Rng::new(seed + 1);
    let x: Vec<f32> = (0..b * m.dims[0]).map(|_| rng.normal()).collect();
    let classes = m.classes() as u32;
    let y: Vec<u32> = (0..b as u32).map(|i| (i * 7 + 1) % classes).collect();
    let mut ws = Workspace::default();
    let mut grads = vec![0.0; m.n_params];
    let mut buffers = running(m);
    m.forward_backward(&params, &mut grads, &mut buffers, &mut ws, &x, &y, b, None);
    let mut p = params.clone();
    let mut quotient = |i: usize, h: f32| {
        let p0 = p[i];
        p[i] = p0 + h;
        let lp = train_loss(m, &p, &mut ws, &x, &y, b);
        p[i] = p0 - h;
        let lm = train_loss(m, &p, &mut ws, &x, &y, b);
        p[i] = p0;
        (lp - lm) / (2.0 * h as f64)
    };
    let near = |g: f32, q: f64, tol: f64| (g as f64 - q).abs() <= tol + 1e-2 * q.abs();
    let (mut judged, mut kinked) = (0, 0);
    for i in (0..m.n_params).step_by(step) {
        let fine = quotient(i, 2e-3);
        if near(grads[i], fine, 2e-3) {
            judged += 1;
            continue;
        }
        // a kink within 2e-3: a step too short to reach it agrees (at f32's resolution of
        // the loss), or the two steps disagree
        if near(grads[i], quotient(i, 2.5e-4), 5e-3) {
            judged += 1;
            continue;
        }
        let coarse = quotient(i, 4e-3);
        if (coarse - fine).abs() > 1e-3 + 0.02 * fine.abs() {
            kinked += 1;
            continue;
        }
        panic!("{}: param {i}: {} vs {fine}", m.shape_string(), grads[i]);
    }
    assert!(kinked * 5 <= judged, "{kinked} kinked, {judged} judged");
}

#[test]
fn whole_model_gradient_matches_finite_differences() {
    gradcheck(&Model::mlp(5, &[7, 6], 4), 3, 3, 9);
}

#[test]
fn whole_cnn_gradient_matches_finite_differences() {
    // conv (padded, then strided), pooling with a partial window dropped, dense layers
    gradcheck(
        &build("conv3k3p1,pool2,conv4k2s2,dense5", img(2, 7, 6), 3).unwrap(),
        2,
        1,
        4,
    );
    // a pooling layer first (no input gradient needed)
    gradcheck(
        &build("pool2,conv2k2,dense3", img(1, 6, 6), 2).unwrap(),
        3,
        1,
        5,
    );
}

#[test]
fn residual_blocks_with_batch_norm_match_finite_differences() {
    // ResNet's basic block (identity and projection shortcuts), padded pooling (average: max
    // pooling over random values has near-ties finite differences cannot judge; nn::pool's
    // test checks it on spread-out values)
    let m = build(
        "conv4k3p1,bn,avgpool3s2p1,basic4,basic6s2,gap",
        img(2, 6, 6),
        3,
    )
    .unwrap();
    gradcheck(&m, 3, 3, 6);
    // MobileNetV2's inverted residuals: depthwise convs, ReLU6, a residual add, average pooling
    let m = build(
        "conv4k3p1,bn,relu6,inverted4t2,inverted6t2s2,avgpool2,dense5,relu6",
        img(2, 6, 6),
        3,
    )
    .unwrap();
    gradcheck(&m, 3, 2, 7);
    // a bottleneck
    let m = build("bottleneck2s2,gap", img(3, 5, 5), 2).unwrap();
    gradcheck(&m, 2, 2, 8);
}

#[test]
fn validation_uses_the_running_statistics() {
    let m = build("conv4k3p1,bn,gap", img(2, 5, 5), 3).unwrap();
    let params = m.init_params(1);
    let mut rng = Rng::new(2);
    let x: Vec<f32> = (0..4 * 50).map(|_| rng.normal() * 3.0 + 2.0).collect();
    let y = [0u32, 1, 2, 0];
    let mut ws = Workspace::default();
    let fresh = m.init_buffers();
    let eval = |buffers: &[f32], ws: &mut Workspace| m.evaluate(&params, buffers, ws, &x, &y, 4).0;
    let before = eval(&fresh, &mut ws);
    // training steps move the running statistics; evaluation reads them (and only them)
    let mut buffers = fresh.clone();
    let mut g = vec![0.0; m.n_params];
    for _ in 0..3 {
        m.forward_backward(&params, &mut g, &mut buffers, &mut ws, &x, &y, 4, None);
    }
    assert_ne!(buffers, fresh);
    assert_ne!(eval(&buffers, &mut ws), before);
    assert_eq!(eval(&fresh, &mut ws), before);
    // with momentum 0.1, three batches move the mean 1 - 0.9^3 of the way
    let first = m.buffers[0].range();
    assert!(buffers[first].iter().any(|&v| v.abs() > 0.01));
}

#[test]
fn dropout_zeroes_about_p_and_only_in_training() {
    let m = build("dense64,dropout0.5", Shape::Flat(8), 2).unwrap();
    let params = m.init_params(3);
    let x = vec![1.0; 8 * 16];
    let y = vec![0u32; 16];
    let mut ws = Workspace::default();
    let buffers = m.init_buffers();
    let a = m.evaluate(&params, &buffers, &mut ws, &x, &y, 16);
    assert_eq!(a, m.evaluate(&params, &buffers, &mut ws, &x, &y, 16));
    let mut g = vec![0.0; m.n_params];
    let mut b = buffers.clone();
    let t1 = m.forward_backward(&params, &mut g, &mut b, &mut ws, &x, &y, 16, None);
    let t2 = m.forward_backward(&params, &mut g, &mut b, &mut ws, &x, &y, 16, None);
    assert_ne!(t1.0, t2.0, "a new mask each step");
    assert_ne!(t1.0, a.0);
}

#[test]
fn batch_norm_on_fixed_statistics_matches_finite_differences() {
    let mut m = build(
        "conv4k3p1,bn,avgpool3s2p1,basic4,basic6s2,gap",
        img(2, 6, 6),
        3,
    )
    .unwrap();
    m.fix_statistics(&m.batch_norms());
    gradcheck(&m, 3, 3, 6);
    // ReLU6 after it, and a batch norm of the input itself (no gradient below it)
    let mut m = build("bn,conv4k3p1,bn,relu6,inverted4t2,gap", img(2, 5, 5), 3).unwrap();
    m.fix_statistics(&m.batch_norms());
    gradcheck(&m, 2, 2, 7);
}

#[test]
fn fixed_statistics_normalise_as_inference_and_stay_as_they_are() {
    let mut m = build("conv4k3p1,bn,basic4,gap", img(2, 5, 5), 3).unwrap();
    let params = m.init_params(1);
    let mut rng = Rng::new(2);
    let x: Vec<f32> = (0..4 * 50).map(|_| rng.normal() * 3.0 + 2.0).collect();
    let y = [0u32, 1, 2, 0];
    let mut ws = Workspace::default();
    let start = running(&m);
    let pass = |m: &Model, ws: &mut Workspace| {
        let (mut g, mut buffers) = (vec![0.0; m.n_params], start.clone());
        let (loss, _) = m.forward_backward(&params, &mut g, &mut buffers, ws, &x, &y, 4, None);
        (loss, g, buffers)
    };
    let inference = m.evaluate(&params, &start, &mut ws, &x, &y, 4).0;
    // on the batch's statistics: another loss than inference's, and the running ones move
    let (loss, _, moved) = pass(&m, &mut ws);
    assert!((loss - inference).abs() > 1e-3, "{loss} vs {inference}");
    assert_ne!(moved, start);
    // fixed: inference's loss, the statistics left bit for bit
    m.fix_statistics(&m.batch_norms());
    let (loss, fixed, kept) = pass(&m, &mut ws);
    assert!(
        (loss - inference).abs() <= 1e-5 * inference.abs(),
        "{loss} vs {inference}"
    );
    assert_eq!(kept, start);
    let bn = m.batch_norms()[0];
    assert_eq!(m.bn_pass(bn, true), BnPass::Fixed);
    assert_eq!(m.bn_pass(bn, false), BnPass::Running);
    // under a frozen backbone nothing is kept for backward (inference's pass), and the head's
    // gradients are those of the pass that keeps it
    let mut frozen = m.clone();
    let backbone: Vec<usize> = (0..m.tensors.len())
        .filter(|t| !m.head_tensors().contains(t))
        .collect();
    frozen.freeze(&backbone);
    assert_eq!(frozen.bn_pass(bn, true), BnPass::Running);
    let (_, head_only, kept) = pass(&frozen, &mut ws);
    assert_eq!(kept, start);
    for t in m.head_tensors() {
        let r = m.tensors[t].range();
        let worst = (head_only[r.clone()].iter().zip(&fixed[r]))
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(worst <= 1e-5, "{}: {worst}", m.tensors[t].name);
    }
}
