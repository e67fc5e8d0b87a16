use super::*;

#[test]
fn every_optimizer_minimises_a_quadratic() {
    for kind in [
        OptimizerKind::Sgd,
        OptimizerKind::Momentum,
        OptimizerKind::Nesterov,
        OptimizerKind::Adam,
        OptimizerKind::AdamW,
    ] {
        let mut p = vec![3.0f32, -2.0];
        let mut st = OptState::new(kind, 2);
        let o = Optimizer::new(kind, 0.0);
        for _ in 0..500 {
            let g: Vec<f32> = p.iter().map(|x| 2.0 * x).collect(); // d/dx x^2
            step(&o, &mut p, &g, &mut st, 0.05, 1.0);
        }
        assert!(p.iter().all(|x| x.abs() < 0.05), "{kind}: {p:?}");
    }
}

#[test]
fn adam_first_step_moves_by_lr_in_the_gradient_sign() {
    let mut p = vec![1.0f32, 1.0];
    let mut st = OptState::new(OptimizerKind::Adam, 2);
    let o = Optimizer::new(OptimizerKind::Adam, 0.0);
    step(&o, &mut p, &[4.0, -0.5], &mut st, 0.1, 0.5);
    assert!(
        (p[0] - 0.9).abs() < 1e-5 && (p[1] - 1.1).abs() < 1e-5,
        "{p:?}"
    );
}

#[test]
fn nesterov_and_momentum_follow_pytorch_and_excluded_ranges_are_not_decayed() {
    // two steps of PyTorch's SGD(momentum=0.5, nesterov=True, weight_decay=0.1) by hand
    let o = Optimizer {
        momentum: 0.5,
        no_decay: std::iter::once(1..2).collect(),
        ..Optimizer::new(OptimizerKind::Nesterov, 0.1)
    };
    let mut p = vec![1.0f32, 1.0];
    let mut st = OptState::new(o.kind, 2);
    step(&o, &mut p, &[2.0, 2.0], &mut st, 0.1, 1.0);
    // decayed: g = 2 + 0.1 = 2.1, buf = 2.1, p -= 0.1 * (2.1 + 0.5 * 2.1)
    assert!((p[0] - (1.0 - 0.1 * 3.15)).abs() < 1e-6, "{p:?}");
    // not decayed: g = 2, p -= 0.1 * (2 + 0.5 * 2)
    assert!((p[1] - 0.7).abs() < 1e-6, "{p:?}");
    let p0 = p[0];
    step(&o, &mut p, &[1.0, 1.0], &mut st, 0.1, 1.0);
    let g = 1.0 + 0.1 * p0;
    let buf = 0.5 * 2.1 + g;
    assert!((p[0] - (p0 - 0.1 * (g + 0.5 * buf))).abs() < 1e-6, "{p:?}");
    // heavy ball with the same coefficient steps by the buffer alone
    let o = Optimizer {
        kind: OptimizerKind::Momentum,
        ..o
    };
    let (mut q, mut st) = (vec![1.0f32], OptState::new(o.kind, 1));
    step(&o, &mut q, &[2.0], &mut st, 0.1, 1.0);
    step(&o, &mut q, &[2.0], &mut st, 0.1, 1.0);
    let g1 = 2.1f32;
    let q1 = 1.0 - 0.1 * g1;
    let g2 = 2.0 + 0.1 * q1;
    assert!((q[0] - (q1 - 0.1 * (0.5 * g1 + g2))).abs() < 1e-6, "{q:?}");
}

#[test]
fn pieces_cover_each_trained_parameter_once_with_its_decay_and_compact_moments() {
    let o = Optimizer {
        frozen: vec![0..2, 5..7],
        no_decay: vec![3..6, 8..9],
        ..Optimizer::new(OptimizerKind::Adam, 0.1)
    };
    let got: Vec<(Range<usize>, usize, bool)> = (o.pieces(10).into_iter())
        .map(|p| (p.range, p.moment, p.decay))
        .collect();
    assert_eq!(
        got,
        vec![
            (2..3, 0, true),
            (3..5, 1, false),
            (7..8, 3, true),
            (8..9, 4, false),
            (9..10, 5, true)
        ]
    );
    // nothing frozen or excluded: one piece
    let plain = Optimizer::new(OptimizerKind::Sgd, 0.0).pieces(7);
    assert_eq!(plain.len(), 1);
    assert_eq!((plain[0].range.clone(), plain[0].decay), (0..7, true));
    assert!(Optimizer::new(OptimizerKind::Sgd, 0.0).pieces(0).is_empty());
    // a range that began late is a piece of its own, with its step
    let late = Optimizer {
        began: vec![(2..5, 40)],
        ..Optimizer::new(OptimizerKind::Adam, 0.0)
    };
    let got: Vec<(Range<usize>, u64)> = (late.pieces(7).into_iter())
        .map(|p| (p.range, p.began))
        .collect();
    assert_eq!(got, vec![(0..2, 0), (2..5, 40), (5..7, 0)]);
}

#[test]
fn adam_counts_the_steps_of_a_range_that_began_late_from_its_beginning() {
    // at the run's step 41, a range begun after step 40 steps as a fresh Adam does: by lr
    let late = Optimizer {
        began: vec![(1..2, 40)],
        ..Optimizer::new(OptimizerKind::Adam, 0.0)
    };
    let mut st = OptState::new(late.kind, 2);
    st.t = 40;
    st.m[0] = 0.5;
    st.v[0] = 0.25;
    let mut p = vec![0.0f32, 0.0];
    step(&late, &mut p, &[0.3, 0.3], &mut st, 0.01, 1.0);
    assert!((p[1] + 0.01).abs() < 1e-6, "{p:?}");
    // the other goes on with the run's count
    let (ss, inv) = adam_factors(0.01, 41);
    let (m, v) = (0.9 * 0.5 + 0.1 * 0.3f32, 0.999 * 0.25 + 0.001 * 0.09f32);
    assert!(
        (p[0] + ss * m / (v.sqrt() * inv + EPS)).abs() < 1e-6,
        "{p:?}"
    );
}

#[test]
fn the_norm_counts_trained_gradients_and_clipping_scales_as_pytorch_does() {
    let o = Optimizer {
        frozen: std::iter::once(0..1).collect(),
        ..Optimizer::new(OptimizerKind::Sgd, 0.0)
    };
    // the frozen gradient (100) is left out: 3-4-0 over 2 samples is a mean of norm 2.5
    let sums = [100.0, 6.0, 8.0, 0.0];
    assert_eq!(o.grad_sumsq(&sums), 100.0);
    assert_eq!(mean_grad_norm(o.grad_sumsq(&sums), 2.0), 5.0);
    assert_eq!(mean_grad_norm(0.0, 0.0), 0.0, "a step of no samples");
    assert!(
        mean_grad_norm(f64::NAN, 2.0).is_nan(),
        "a NaN gradient is said"
    );
    // an exploding gradient's squares past float32's range: its norm, not infinity
    let huge = [0.0, 3e20, 4e20, 0.0];
    assert_eq!(mean_grad_norm(o.grad_sumsq(&huge), 1.0), 5e20);
    assert!(o.grad_sumsq(&[0.0, f32::INFINITY]).is_infinite());
    // no bound: never scaled; a bound: max / (norm + 1e-6) where the norm is past it
    assert_eq!(o.clip_factor(1e9), 1.0);
    let clipped = Optimizer {
        clip_norm: Some(1.0),
        ..o.clone()
    };
    assert_eq!(clipped.clip_factor(0.5), 1.0);
    assert!((clipped.clip_factor(5.0) - 0.2).abs() < 1e-6);
    // the update with the factor is the update of the clipped gradient
    let mut a = vec![1.0f32; 4];
    let mut b = a.clone();
    let mut sa = OptState::new(OptimizerKind::Sgd, 4);
    let mut sb = sa.clone();
    let f = clipped.clip_factor(5.0);
    step(&clipped, &mut a, &sums, &mut sa, 0.1, 0.5 * f);
    let clipped_mean: Vec<f32> = sums.iter().map(|g| g * 0.5 * f).collect();
    step(&clipped, &mut b, &clipped_mean, &mut sb, 0.1, 1.0);
    assert_eq!(a, b);
    assert_eq!(a[0], 1.0, "frozen");
    let moved: f32 = a.iter().map(|p| (p - 1.0) * (p - 1.0)).sum::<f32>().sqrt();
    assert!((moved - 0.1).abs() < 1e-6, "lr x the bound: {moved}");
}

#[test]
fn parses_names() {
    assert_eq!(
        "AdamW".parse::<OptimizerKind>().unwrap(),
        OptimizerKind::AdamW
    );
    assert!("lion"
        .parse::<OptimizerKind>()
        .unwrap_err()
        .contains("sgd, momentum, nesterov, adam or adamw"));
}

#[test]
fn frozen_parameters_have_no_moments_and_the_rest_step_as_if_alone() {
    let (n, frozen) = (9, vec![0..2, 5..7]);
    let kept: Vec<usize> = vec![2, 3, 4, 7, 8];
    for kind in [
        OptimizerKind::Momentum,
        OptimizerKind::Adam,
        OptimizerKind::AdamW,
    ] {
        let o = Optimizer {
            frozen: frozen.clone(),
            no_decay: std::iter::once(3..6).collect(),
            ..Optimizer::new(kind, 0.01)
        };
        let mut st = o.compact(&OptState::new(kind, n), n);
        assert_eq!(
            st.m.len(),
            kept.len(),
            "{kind}: moments for the trained only"
        );
        let mut p: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 1.0).collect();
        let before = p.clone();
        // the same parameters alone, with the no-decay range where it falls among them
        let alone_o = Optimizer {
            frozen: Vec::new(),
            no_decay: std::iter::once(1..3).collect(),
            ..o.clone()
        };
        let mut alone: Vec<f32> = kept.iter().map(|&i| before[i]).collect();
        let mut alone_st = OptState::new(kind, kept.len());
        for s in 0..5 {
            let g: Vec<f32> = (0..n).map(|i| (i as f32 - 4.0) * (s + 1) as f32).collect();
            step(&o, &mut p, &g, &mut st, 0.1, 0.5);
            let ga: Vec<f32> = kept.iter().map(|&i| g[i]).collect();
            step(&alone_o, &mut alone, &ga, &mut alone_st, 0.1, 0.5);
        }
        for r in &frozen {
            assert_eq!(p[r.clone()], before[r.clone()], "{kind}: frozen moved");
        }
        let got: Vec<f32> = kept.iter().map(|&i| p[i]).collect();
        assert_eq!(got, alone, "{kind}");
        // laid out over every parameter again (a checkpoint's), frozen moments zero
        let full = o.expand(&st, n);
        assert_eq!(full.m.len(), n);
        assert!(frozen
            .iter()
            .all(|r| full.m[r.clone()].iter().all(|&x| x == 0.0)));
        assert_eq!(o.compact(&full, n), st, "{kind}: the round trip");
    }
}
