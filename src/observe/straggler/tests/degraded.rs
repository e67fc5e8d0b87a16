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

/// A step whose ranks take `samples` each at `work` ms.
fn split_row(step: u64, work: &[f64], samples: &[usize]) -> StepRow {
    let mut r = row(step, work, &vec![0.0; work.len()]);
    for (k, &n) in r.ranks.iter_mut().zip(samples) {
        k.samples = n;
    }
    r.global_samples = samples.iter().sum();
    r
}

#[test]
fn a_rebalanced_split_is_measured_against_its_own_best_not_degraded() {
    let mut d = detector(2);
    let mut warnings = Vec::new();
    for s in 1..=500 {
        // --rebalance moves samples from rank 1 to rank 0: the same global batch, the same
        // time, and rank 1's 16 samples cost it more each than its 32 did
        let r = match s {
            ..=200 => split_row(s, &[10.0, 10.0], &[32, 32]),
            _ => split_row(s, &[14.0, 14.0], &[48, 16]),
        };
        warnings.extend(d.on_row(&r));
    }
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn an_epoch_s_shorter_last_step_keeps_the_best_speeds() {
    let mut d = detector(2);
    let mut found = Vec::new();
    for s in 1..=500 {
        let slow = if s > 250 { 1.4 } else { 1.0 };
        // every 20th step ends an epoch with 24 samples per rank
        let r = match s % 20 {
            0 => split_row(s, &[7.5 * slow, 7.5 * slow], &[24, 24]),
            _ => split_row(s, &[10.0 * slow, 10.0 * slow], &[32, 32]),
        };
        found.extend(d.on_row(&r));
    }
    let kinds: Vec<&str> = found.iter().map(|w| w.kind()).collect();
    assert_eq!(kinds, ["degraded", "degraded"], "{found:?}");
}

#[test]
fn a_degraded_rank_whose_batch_changes_is_cleared_as_measured_afresh_not_recovered() {
    let mut d = detector(2);
    let mut found = Vec::new();
    for s in 1..=700 {
        let r = match s {
            ..=200 => split_row(s, &[10.0, 10.0], &[32, 32]),
            201..=400 => split_row(s, &[14.0, 14.0], &[32, 32]),
            // the batch halves from the keyboard, still slow
            _ => {
                let mut r = split_row(s, &[7.0, 7.0], &[16, 16]);
                r.per_replica = 16;
                r
            }
        };
        found.extend(d.on_row(&r).into_iter().map(|w| (s, w)));
    }
    let seen: Vec<(u64, &str)> = found.iter().map(|(s, w)| (*s, w.kind())).collect();
    assert_eq!(seen.len(), 4, "{found:?}");
    assert!(seen[..2].iter().all(|&(s, k)| k == "degraded" && s <= 400));
    assert_eq!(
        seen[2..],
        [(401, "degraded_cleared"), (401, "degraded_cleared")],
        "{found:?}"
    );
    let said = found[2].1.to_string();
    assert!(
        said.contains("measured afresh") && !said.contains("back near its best"),
        "{said}"
    );
}

/// A job slowed by other work on its machine, which the outside-load warning said: the
/// degraded warning names that as its likely cause (it read as a second, unexplained fault).
#[test]
fn a_slowdown_under_outside_load_says_it_is_the_likely_cause() {
    let mut d = detector(2);
    let load = |others| crate::observe::machine_load::Load {
        cores: 2,
        ours: 1.0,
        others,
        top: Some(("rustc".into(), others)),
    };
    let mut said = Vec::new();
    for s in 1..=400u64 {
        let work = if s <= 200 { 10.0 } else { 14.0 };
        said.extend(d.on_row(&row(s, &[work, work], &[0.0, 0.0])));
        if s > 200 {
            said.extend(d.on_load(None, &load(1.0)));
        }
    }
    let degraded: Vec<String> = (said.iter())
        .filter(|w| w.kind() == "degraded")
        .map(|w| w.to_string())
        .collect();
    assert_eq!(degraded.len(), 2, "{said:?}");
    assert!(
        degraded[0].ends_with(
            "; likely cause: outside load (other work takes 1.0 of its machine's 2 cores, 1.0 of them rustc)"
        ),
        "{}",
        degraded[0]
    );
    // without it, nothing is guessed
    let mut d = detector(2);
    let w = feed(&mut d, 1, 400, |s, _| if s <= 200 { 10.0 } else { 14.0 }, 2);
    assert!(!w[0].1.to_string().contains("likely cause"), "{}", w[0].1);
}
