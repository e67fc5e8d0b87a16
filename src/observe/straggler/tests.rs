//! The detector on synthetic timing series.

use std::time::Duration;

use super::*;
use crate::engine::events::StepStats;
use crate::engine::heartbeat::Heartbeats;

fn ms(v: f64) -> Duration {
    Duration::from_secs_f64(v / 1e3)
}

/// A step where rank r works `work[r]` ms (of which `data[r]` waiting for input) and then
/// waits for the slowest.
fn row(step: u64, work: &[f64], data: &[f64]) -> StepRow {
    let slowest = work.iter().cloned().fold(0.0, f64::max);
    let ranks = work
        .iter()
        .enumerate()
        .map(|(rank, &w)| StepStats {
            rank,
            step,
            epoch: 1,
            samples: 32,
            global_samples: 32 * work.len(),
            per_replica: 32,
            loss: 1.0,
            accuracy: 0.5,
            grad_norm: 1.0,
            lr: 1e-3,
            data_wait: ms(data[rank]),
            loader_busy: None,
            compute: ms(w - data[rank]),
            compute_cpu: None,
            device_timed: false,
            comm: ms(0.2),
            sync_wait: ms(slowest - w),
            transfer: Duration::ZERO,
            optimizer: Duration::ZERO,
            step_time: ms(slowest + 0.2),
            at: ms(step as f64 * slowest),
            after_pause: false,
            paused: false,
            progress: 0.0,
            ends_at: None,
        })
        .collect();
    StepRow {
        global_samples: 32 * work.len(),
        at: ms(step as f64),
        ranks,
        ..StepRow::example(step)
    }
}

fn detector(ranks: usize) -> Detector {
    Detector::new(
        ranks,
        DetectorConfig::default(),
        Context {
            cores: 64,
            ..Context::default()
        },
    )
}

/// Four ranks on two hosts: `a` (process 0's, ranks 0 and 1) and `b` (ranks 2 and 3).
fn on_two_hosts() -> Detector {
    let ctx = Context {
        cores: 64,
        hosts: ["a", "a", "b", "b"].map(String::from).to_vec(),
        ..Context::default()
    };
    Detector::new(4, DetectorConfig::default(), ctx)
}

/// Deterministic noise in [-1, 1).
fn noise(step: u64, rank: usize) -> f64 {
    let x = (step.wrapping_mul(2654435761) ^ (rank as u64).wrapping_mul(40503)) % 1000;
    x as f64 / 500.0 - 1.0
}

/// Feeds steps from..=to with per-rank work from `f`; returns (step, warning) pairs.
fn feed(
    d: &mut Detector,
    from: u64,
    to: u64,
    f: impl Fn(u64, usize) -> f64,
    ranks: usize,
) -> Vec<(u64, Warning)> {
    let mut out = Vec::new();
    for s in from..=to {
        let work: Vec<f64> = (0..ranks).map(|r| f(s, r)).collect();
        for w in d.on_row(&row(s, &work, &vec![0.1; ranks])) {
            out.push((s, w));
        }
    }
    out
}

#[test]
fn noise_alone_flags_nobody() {
    let mut d = detector(4);
    // +-20% noise around 10 ms on every rank
    let w = feed(&mut d, 1, 2000, |s, r| 10.0 + 2.0 * noise(s, r), 4);
    assert!(w.is_empty(), "{w:?}");
}

#[test]
fn a_slow_rank_is_flagged_after_exactly_three_slow_evaluations() {
    let mut d = detector(3);
    // rank 1 takes 2x from the start: evaluations at rows 30, 40, 50 are slow (20 is warm-up)
    let w = feed(&mut d, 1, 200, |_, r| if r == 1 { 20.0 } else { 10.0 }, 3);
    assert_eq!(w.len(), 1, "{w:?}");
    let (step, warning) = &w[0];
    assert_eq!(*step, 50);
    match warning {
        Warning::Straggler {
            rank,
            slowdown,
            fastest_ms,
            work_ms,
            others_wait_ms,
            ..
        } => {
            assert_eq!(*rank, 1);
            assert!((slowdown - 2.0).abs() < 1e-9);
            assert_eq!((*fastest_ms, *work_ms), (10.0, 20.0));
            assert!((others_wait_ms - 10.0).abs() < 1e-6);
        }
        other => panic!("{other:?}"),
    }
    let text = warning.to_string();
    assert!(
        text.contains("rank 1 is 2.00x slower than rank 0"),
        "{text}"
    );
}

#[test]
fn a_rank_a_rebalance_relieved_is_judged_on_the_new_split_only() {
    let mut d = detector(2);
    // rank 1 twice as slow at 32 samples each: two slow evaluations (rows 30, 40)...
    let w = feed(&mut d, 1, 45, |_, r| if r == 1 { 20.0 } else { 10.0 }, 2);
    assert!(w.is_empty(), "{w:?}");
    // ...then --rebalance splits the batch 43/21 and both take 13.3 ms: the third evaluation
    // would have flagged it on the steps before
    let mut said = Vec::new();
    for s in 46..=200 {
        let mut r = row(s, &[13.3, 13.3], &[0.1, 0.1]);
        r.ranks[0].samples = 43;
        r.ranks[1].samples = 21;
        said.extend(d.on_row(&r));
    }
    assert!(said.is_empty(), "{said:?}");
    // still slow after a re-split: flagged on the new split's own evaluations
    let mut said = Vec::new();
    for s in 201..=300 {
        let mut r = row(s, &[10.0, 20.0], &[0.1, 0.1]);
        r.ranks[0].samples = 40;
        r.ranks[1].samples = 24;
        said.extend(d.on_row(&r).into_iter().map(|w| (s, w)));
    }
    assert!(
        matches!(said.as_slice(), [(s, Warning::Straggler { rank: 1, .. })] if *s >= 230),
        "{said:?}"
    );
}

#[test]
fn clearing_needs_three_good_evaluations_and_a_flapping_rank_stays_flagged() {
    let mut d = detector(2);
    let slow = |s: u64, r: usize| if r == 1 && s <= 100 { 20.0 } else { 10.0 };
    let w = feed(&mut d, 1, 100, slow, 2);
    assert_eq!(w.len(), 1);
    // back to normal from step 101: the 50-step median recovers after 25 steps (step 125),
    // then evaluations at 130, 140, 150 are good: cleared at 150
    let w = feed(&mut d, 101, 200, slow, 2);
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(
        w[0],
        (150, Warning::StragglerCleared { rank: 1, step: 150 })
    );
    // in-between scores (0.8: neither slow nor clear) never clear a flagged rank
    let mut d = detector(2);
    feed(&mut d, 1, 100, |_, r| if r == 1 { 20.0 } else { 10.0 }, 2);
    let w = feed(&mut d, 101, 600, |_, r| if r == 1 { 12.5 } else { 10.0 }, 2);
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(d.stragglers(), vec![1]);
}

#[test]
fn under_two_milliseconds_is_noise_however_large_the_ratio() {
    let mut d = detector(2);
    let w = feed(&mut d, 1, 500, |_, r| if r == 1 { 1.9 } else { 0.1 }, 2);
    assert!(w.is_empty(), "{w:?}");
}

/// Three CPU workers on two cores, rank 1 doing twice the CPU work: the scheduler gives it the
/// others' cores, so nobody waits at the all-reduce, yet rank 1 costs the job.
#[test]
fn a_rank_taking_shared_cores_is_flagged_though_nobody_waits() {
    let run = |cores: usize, threads_per_worker: usize| {
        let mut d = Detector::new(
            3,
            DetectorConfig::default(),
            Context {
                cores,
                threads_per_worker,
                ..Context::default()
            },
        );
        let mut out = Vec::new();
        for s in 1..=100 {
            let mut r = row(s, &[6.0, 6.0, 6.0], &[0.1; 3]);
            for st in &mut r.ranks {
                let cpu = if st.rank == 1 { 12.0 } else { 6.0 };
                st.compute_cpu = Some(ms(cpu + noise(s, st.rank) * 0.3));
                st.sync_wait = Duration::ZERO;
            }
            out.extend(d.on_row(&r));
        }
        out
    };
    let shared = run(2, 1);
    assert_eq!(shared.len(), 1, "{shared:?}");
    assert!(
        matches!(shared[0], Warning::Straggler { rank: 1, .. }),
        "{shared:?}"
    );
    // with a core each, a rank nobody waits for is not on the critical path
    assert!(run(64, 1).is_empty());
    // 3 workers of 2 intra-op threads want 6 of 4 cores: shared again
    assert_eq!(run(4, 2).len(), 1);
}

/// GPUs: a rank whose compute takes 2x, seen only through the device's event timings (the
/// others' waiting is inside their all-reduce until the monitor splits it out).
#[test]
fn a_slow_gpu_is_flagged_from_device_timings() {
    use crate::observe::monitor::Monitor;
    let mut m = Monitor::new(3);
    let mut d = detector(3);
    let mut warnings = Vec::new();
    for step in 1..=100u64 {
        for rank in 0..3 {
            let compute = if rank == 1 { 20.0 } else { 10.0 } + noise(step, rank);
            // every all-reduce ends when the slowest rank arrives, then moves data for 1 ms
            let comm = 21.0 + noise(step, 1) - compute + 1.0;
            let s = StepStats {
                compute: ms(compute),
                comm: ms(comm),
                step_time: ms(compute + comm),
                ..row(step, &[0.0; 3], &[0.0; 3]).ranks[rank].clone()
            };
            let s = StepStats {
                sync_wait: Duration::ZERO,
                transfer: Duration::ZERO,
                compute_cpu: None,
                device_timed: true,
                data_wait: Duration::ZERO,
                ..s
            };
            if let Some(r) = m.on_step(s) {
                warnings.extend(d.on_row(&r));
            }
        }
    }
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        matches!(warnings[0], Warning::Straggler { rank: 1, .. }),
        "{warnings:?}"
    );
}

/// Local SGD: ranks meet only every `h` steps, where the others wait for a slow rank's whole
/// period at once.
fn local_sgd_rows(d: &mut Detector, h: u64, steps: u64, work: &[f64]) -> Vec<Warning> {
    let mut out = Vec::new();
    let slowest = work.iter().cloned().fold(0.0, f64::max);
    for s in 1..=steps {
        let mut r = row(s, work, &vec![0.1; work.len()]);
        for (st, w) in r.ranks.iter_mut().zip(work) {
            st.sync_wait = match s % h {
                0 => ms(h as f64 * (slowest - w)),
                _ => Duration::ZERO,
            };
        }
        out.extend(d.on_row(&r));
    }
    out
}

#[test]
fn under_local_sgd_a_straggler_is_judged_per_sync_period() {
    let work = [10.0, 20.0];
    let cfg = DetectorConfig {
        sync_every: 8,
        window: 64,
        ..DetectorConfig::default()
    };
    let ctx = Context {
        cores: 64,
        ..Context::default()
    };
    let mut d = Detector::new(2, cfg, ctx.clone());
    let w = local_sgd_rows(&mut d, 8, 300, &work);
    assert!(
        w.iter()
            .any(|w| matches!(w, Warning::Straggler { rank: 1, .. })),
        "the others wait 80 ms per period of 8 steps for rank 1: {w:?}"
    );
    // judged step by step (a median), the wait at one step in 8 would hide it
    let mut d = Detector::new(2, DetectorConfig::default(), ctx);
    assert!(local_sgd_rows(&mut d, 8, 300, &work).is_empty());
}

mod causes;
mod degraded;
mod outside;
mod spike;
mod stall;
