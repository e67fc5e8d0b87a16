//! `--rebalance`: per-rank micro-batch sizes in proportion to measured speed, the global batch
//! unchanged. Exactness comes for free: every rank sums its samples' gradients and the update
//! divides the all-reduced sum by the global sample count, so how the global batch is cut
//! among ranks does not change the result (beyond float rounding of the sums).
//!
//! Every rank computes the same split from the same all-reduced speeds, so no extra agreement
//! is needed.

use crate::engine::loader::proportional;

/// Steps between two rebalancing decisions (the first after this many steps too).
pub const EVERY: u64 = 50;
/// The fewest steps a decision's speeds are measured over: one due sooner after the run's
/// resume or a batch change (which measure afresh) waits for the next.
pub const MEASURED: u64 = EVERY / 2;
/// The most a decision cuts a rank's share by, against the largest share: a quarter of what it
/// had (one noisy first stretch, a rank starved of a core for a while, cannot take it to a
/// sample; a rank that stays slow gets there over decisions).
const MAX_CUT: f64 = 4.0;
/// A new split is applied only where it shortens the slowest rank's step, as the speeds predict
/// it, by more than this fraction (a small share moved by a few samples of noise does not, a
/// straggler that slowed further does).
const MIN_GAIN: f64 = 0.1;

/// The speeds a decision goes by: the mean of the newest and the last decision's (`before`),
/// every rank's measured (a rank that measured nothing keeps its last speed).
pub fn smoothed(before: Option<&[f32]>, newest: &[f32]) -> Vec<f32> {
    let ok = |s: f32| s.is_finite() && s > 0.0;
    match before.filter(|b| b.len() == newest.len()) {
        None => newest.to_vec(),
        Some(b) => (b.iter().zip(newest))
            .map(|(&b, &n)| match (ok(b), ok(n)) {
                (true, true) => 0.5 * (b + n),
                (true, false) => b,
                _ => n,
            })
            .collect(),
    }
}

/// The split to use from now on, or `None` to keep `current`. `speeds` are samples per second
/// of each rank's own work (data wait + compute) since the last decision; every rank keeps
/// `least` samples at least (2 where one would make a batch norm of one value per channel)
/// and, of what its device holds (`caps`), nine tenths at most (or its current share): the
/// rest of a GPU's memory is for what a run allocates later (workspaces, graphs).
pub fn new_split(
    global: usize,
    speeds: &[f32],
    current: &[usize],
    (least, caps): (usize, &[usize]),
) -> Option<Vec<usize>> {
    let ranks = speeds.len();
    debug_assert!(
        caps.len() == ranks && current.len() == ranks,
        "a cap and a share a rank"
    );
    let caps: Vec<usize> = (caps.iter().zip(current))
        .map(|(&c, &n)| (c - c / 10).max(n))
        .collect();
    let bad = speeds.iter().any(|s| !(s.is_finite() && *s > 0.0));
    let room = caps.iter().sum::<usize>();
    let tight = caps.iter().any(|&c| c < least);
    if ranks < 2 || global < ranks * least || bad || caps.len() != ranks || room < global || tight {
        return None;
    }
    // integer weights (fixed point) so every rank rounds identically, none below a quarter of
    // its current share against the largest
    let top = speeds.iter().cloned().fold(0.0f32, f32::max) as f64;
    let most = current.iter().copied().max().unwrap_or(1).max(1) as f64;
    let weights: Vec<usize> = (speeds.iter().zip(current))
        .map(|(&s, &n)| {
            let floor = n as f64 / most / MAX_CUT;
            ((s as f64 / top).max(floor) * 1e6).round().max(1.0) as usize
        })
        .collect();
    let mut sizes = proportional(global, &weights);
    // a rank given more than its device holds keeps what it holds, the rest going to the
    // others by their speeds (each round fills one rank or more: `ranks` rounds at most)
    let mut full = vec![false; ranks];
    while (0..ranks).any(|r| !full[r] && sizes[r] > caps[r]) {
        for r in 0..ranks {
            full[r] |= sizes[r] > caps[r];
        }
        let kept: usize = (0..ranks).filter(|&r| full[r]).map(|r| caps[r]).sum();
        let open: Vec<usize> = (0..ranks).filter(|&r| !full[r]).collect();
        let shared = proportional(
            global - kept,
            &open.iter().map(|&r| weights[r]).collect::<Vec<_>>(),
        );
        for (r, size) in sizes.iter_mut().enumerate() {
            if full[r] {
                *size = caps[r];
            }
        }
        for (&r, n) in open.iter().zip(shared) {
            sizes[r] = n;
        }
    }
    // every rank keeps at least `least` samples, taken from the largest
    while let Some(z) = sizes.iter().position(|&s| s < least) {
        let big = (0..ranks).max_by_key(|&r| (sizes[r], usize::MAX - r))?;
        sizes[big] -= 1;
        sizes[z] += 1;
    }
    // (a step takes as long as its slowest rank)
    let slowest = |split: &[usize]| {
        (split.iter().zip(speeds))
            .map(|(&n, &s)| n as f64 / s as f64)
            .fold(0.0, f64::max)
    };
    (slowest(current) > (1.0 + MIN_GAIN) * slowest(&sizes)).then_some(sizes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rank_twice_as_slow_gets_half_the_samples_and_the_total_is_kept() {
        let s = new_split(96, &[1000.0, 500.0, 1000.0], &[32, 32, 32], (1, &[96; 3])).unwrap();
        assert_eq!(s, vec![39, 19, 38]); // 38.4, 19.2, 38.4: the spare sample to the lower rank
        assert_eq!(s.iter().sum::<usize>(), 96);
    }

    #[test]
    fn a_fast_rank_gets_no_more_than_its_device_holds() {
        // the fast GPU holds 44 of the 96, and is given nine tenths of it: the rest go to the
        // others by their speeds
        let s = new_split(96, &[4000.0, 1000.0, 1000.0], &[32; 3], (1, &[44, 96, 96])).unwrap();
        assert_eq!(s, vec![40, 28, 28]);
        // capped in rounds: rank 0 fills first (48 of 40), then rank 1 on what is left (42 of
        // 36, where its first share, 36, fitted)
        let s = new_split(96, &[4000.0, 3000.0, 1000.0], &[32; 3], (1, &[44, 40, 96])).unwrap();
        assert_eq!(s, vec![40, 36, 20]);
        // already where the caps put it: kept
        assert_eq!(
            new_split(
                96,
                &[4000.0, 1000.0, 1000.0],
                &[40, 28, 28],
                (1, &[44, 96, 96])
            ),
            None
        );
        // the devices are full at the current split (a share already past nine tenths of its
        // cap is kept, never cut for the margin), and one too small for the least share
        assert_eq!(
            new_split(96, &[4000.0, 1000.0], &[48; 2], (1, &[48, 48])),
            None
        );
        assert_eq!(
            new_split(96, &[4000.0, 1000.0], &[95, 1], (2, &[96, 1])),
            None
        );
    }

    #[test]
    fn one_noisy_measurement_moves_the_speeds_half_way() {
        assert_eq!(smoothed(None, &[1000.0, 500.0]), vec![1000.0, 500.0]);
        let before = [1000.0, 500.0];
        // rank 1 measured as fast as rank 0 once (a stretch of noise): half way, so the split
        // moves towards even only in part
        assert_eq!(
            smoothed(Some(&before), &[1000.0, 1000.0]),
            vec![1000.0, 750.0]
        );
        // a rank that measured nothing keeps its speed
        assert_eq!(smoothed(Some(&before), &[1000.0, 0.0]), vec![1000.0, 500.0]);
    }

    #[test]
    fn small_moves_and_bad_measurements_keep_the_current_split() {
        assert_eq!(
            new_split(96, &[1000.0, 950.0, 1000.0], &[32, 32, 32], (1, &[96; 3])),
            None
        );
        // a slow rank's small share moved by 8 samples, more than a tenth of its own, for a
        // step 3% shorter (noise on a steady load): kept
        assert_eq!(
            new_split(256, &[3000.0, 1000.0], &[200, 56], (1, &[256; 2])),
            None
        );
        // a straggler that slowed from a tenth of the speed to a twentieth: its step would take
        // twice the other's, re-cut however few samples move
        assert_eq!(
            new_split(256, &[1.0, 0.05], &[233, 23], (1, &[1024; 2])),
            Some(vec![244, 12])
        );
        assert_eq!(
            new_split(96, &[1000.0, 0.0, 1000.0], &[32, 32, 32], (1, &[96; 3])),
            None
        );
        assert_eq!(
            new_split(96, &[1000.0, f32::NAN, 1.0], &[32, 32, 32], (1, &[96; 3])),
            None
        );
        assert_eq!(new_split(96, &[1000.0], &[96], (1, &[96])), None);
    }

    /// One decision cuts a rank to a quarter of the largest share at most: a healthy rank
    /// measured forty times slower once (starved of a core on an oversubscribed machine) keeps
    /// a quarter of the others' share, where it was cut to one sample; a straggler four times
    /// as slow gets its share at once, and one that stays slower goes on down.
    #[test]
    fn one_decision_cuts_a_share_to_a_quarter_at_most() {
        let mut speeds = vec![1000.0f32; 10];
        speeds[0] = 25.0;
        let s = new_split(320, &speeds, &[32; 10], (1, &[320; 10])).unwrap();
        assert_eq!(s.iter().sum::<usize>(), 320);
        assert!(
            (8..=9).contains(&s[0]) && s[1..].iter().all(|&n| n >= 33),
            "{s:?}"
        );
        let next = new_split(320, &speeds, &s, (1, &[320; 10])).unwrap();
        assert!(next[0] < s[0] && next[0] >= 2, "{next:?}");
        // four times as slow: its share at once
        let s = new_split(256, &[1000.0, 250.0], &[128, 128], (1, &[256; 2])).unwrap();
        assert_eq!(s, vec![205, 51]);
    }

    #[test]
    fn every_rank_keeps_at_least_one_sample() {
        let s = new_split(
            4,
            &[1000.0, 1.0, 1000.0, 1000.0],
            &[1, 1, 1, 1],
            (1, &[4; 4]),
        )
        .unwrap_or(vec![1; 4]);
        assert!(
            s.iter().all(|&n| n >= 1) && s.iter().sum::<usize>() == 4,
            "{s:?}"
        );
        // (cut to a quarter of the other's share first, then further)
        let s = new_split(10, &[1e6, 1.0], &[5, 5], (1, &[10; 2])).unwrap();
        assert_eq!(s, vec![8, 2]);
        let s = new_split(10, &[1e6, 1.0], &s, (1, &[10; 2])).unwrap();
        assert_eq!(s, vec![9, 1]);
        // a batch norm of one value per channel: 2 a rank
        let s = new_split(10, &[1e6, 1.0], &[8, 2], (2, &[10; 2]));
        assert_eq!(s, None);
        assert_eq!(new_split(3, &[1e6, 1.0], &[2, 1], (2, &[3; 2])), None);
    }
}
