//! A whole job slowing down (degraded), against each rank's own best at its batch size.

use super::*;

#[test]
fn a_whole_job_slowing_down_is_degraded_not_a_straggler() {
    let mut d = detector(2);
    let w = feed(&mut d, 1, 400, |s, _| if s <= 200 { 10.0 } else { 14.0 }, 2);
    let kinds: Vec<(&str, Option<usize>)> = w.iter().map(|(_, w)| (w.kind(), w.rank())).collect();
    assert_eq!(
        kinds,
        vec![("degraded", Some(0)), ("degraded", Some(1))],
        "{w:?}"
    );
    assert!(
        w[0].1
            .to_string()
            .contains("40% more than its best 10.0 ms"),
        "{}",
        w[0].1
    );
}

#[test]
fn a_smaller_batch_is_measured_against_its_own_best_not_degraded() {
    let mut d = detector(2);
    let mut warnings = Vec::new();
    for s in 1..=400 {
        let mut r = row(s, &[10.0, 10.0], &[0.0, 0.0]);
        if s > 200 {
            // the batch halved from the keyboard: 7 ms for 16 samples is 40% more per sample
            r = row(s, &[7.0, 7.0], &[0.0, 0.0]);
            r.per_replica = 16;
            r.ranks.iter_mut().for_each(|k| k.samples = 16);
        }
        warnings.extend(d.on_row(&r));
    }
    assert!(warnings.is_empty(), "{warnings:?}");
    // and it still tells a real slowdown at that batch size
    let mut found = Vec::new();
    for s in 401..=700 {
        let mut r = row(s, &[10.0, 10.0], &[0.0, 0.0]);
        r.per_replica = 16;
        r.ranks.iter_mut().for_each(|k| k.samples = 16);
        found.extend(d.on_row(&r));
    }
    assert!(found.iter().any(|w| w.kind() == "degraded"), "{found:?}");
}
