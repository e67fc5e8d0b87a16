//! A gradient spike is the run's, judged among norms over as many samples.

use super::*;

#[test]
fn a_step_whose_gradient_norm_leaps_is_a_gradient_spike_of_the_run_not_of_a_rank() {
    let mut d = detector(2);
    for s in 1..=40 {
        assert!(d.on_row(&row(s, &[10.0, 10.0], &[0.1, 0.1])).is_empty());
    }
    let mut leap = row(41, &[10.0, 10.0], &[0.1, 0.1]);
    leap.grad_norm = 25.0;
    let w = d.on_row(&leap);
    assert!(
        matches!(&w[..], [Warning::GradSpike(spike)] if spike.step == 41 && spike.median == 1.0 && spike.norm == 25.0),
        "{w:?}"
    );
    assert_eq!((w[0].rank(), w[0].kind()), (None, "grad_spike"));
    // an epoch's last step of 2 samples has a noisier mean gradient: left out
    let mut d = detector(2);
    for s in 1..=40 {
        let mut r = row(s, &[10.0, 10.0], &[0.1, 0.1]);
        if s == 30 {
            (r.global_samples, r.grad_norm) = (2, 12.0);
        }
        assert!(d.on_row(&r).iter().all(|w| w.kind() != "grad_spike"), "{s}");
    }
    // a batch 16x smaller (from the keyboard) has a noisier mean gradient: judged afresh
    let mut d = detector(2);
    for s in 1..=60 {
        let mut r = row(s, &[10.0, 10.0], &[0.1, 0.1]);
        if s > 40 {
            (r.per_replica, r.grad_norm) = (2, 12.0);
        }
        assert!(d.on_row(&r).iter().all(|w| w.kind() != "grad_spike"), "{s}");
    }
}
