use super::*;
use crate::config::log_every::AUTO_STEPS;
use crate::engine::events::EndsAt;

/// Steps 1..=`steps`, `per_s` a second, the run ending at the last; the ones kept.
fn kept(every: LogEvery, steps: u64, per_s: u64) -> Vec<u64> {
    kept_at(every, steps, per_s as f64)
}

/// `kept` at a pace of any fraction.
fn kept_at(every: LogEvery, steps: u64, per_s: f64) -> Vec<u64> {
    kept_with(every, steps, per_s, |_| 64)
}

/// `kept_at`, step s taking `global(s)` samples.
fn kept_with(every: LogEvery, steps: u64, per_s: f64, global: impl Fn(u64) -> usize) -> Vec<u64> {
    let mut k = Kept::new(every);
    (1..=steps)
        .filter(|&step| {
            let row = StepRow {
                step,
                at: Duration::from_secs_f64(step as f64 / per_s),
                global_samples: global(step),
                ends_at: Some(EndsAt {
                    epoch: steps,
                    run: steps,
                }),
                ..StepRow::example(step)
            };
            k.keep(&row)
        })
        .collect()
}

#[test]
fn a_number_asked_for_is_kept_to_the_step_however_fast() {
    let every_20: Vec<u64> = (1..=10).map(|i| i * 20).chain([205]).collect();
    assert_eq!(kept(LogEvery::Steps(20), 205, 100_000), every_20);
    assert_eq!(kept(LogEvery::Steps(1), 5, 1_000_000), [1, 2, 3, 4, 5]);
}

#[test]
fn auto_keeps_every_50th_and_round_steps_no_more_than_ten_a_second() {
    // a slow run: every 50th step
    assert_eq!(kept(LogEvery::Auto, 230, 10), [50, 100, 150, 200, 230]);
    // 50 000 steps a second for two seconds: the 50th and 100th, then every 5000th
    let fast = kept(LogEvery::Auto, 100_000, 50_000);
    let every_5000: Vec<u64> = [50, 100]
        .into_iter()
        .chain((1..=20).map(|i| i * 5000))
        .collect();
    assert_eq!(fast, every_5000);
    // 2000 a second: every 200th
    let mid = kept(LogEvery::Auto, 1000, 2000);
    assert_eq!(mid, [50, 100, 200, 400, 600, 800, 1000]);
}

#[test]
fn auto_keeps_its_stride_near_a_boundary_and_speaks_within_a_second_of_a_slowdown() {
    let kept = |paces: &mut dyn Iterator<Item = (u64, f64)>| -> Vec<u64> {
        let mut k = Kept::new(LogEvery::Auto);
        paces
            .filter(|&(step, t)| {
                let row = StepRow {
                    step,
                    at: Duration::from_secs_f64(t),
                    ..StepRow::example(step)
                };
                k.keep(&row)
            })
            .map(|(step, _)| step)
            .collect()
    };
    // `steps` steps whose pace goes from `paces.0` to `paces.1` a second and back every
    // `stretch` steps: the gaps between the kept (past the first two)
    let wavering = |steps: u64, stretch: u64, paces: (f64, f64)| {
        let mut at = 0.0;
        let mut wavering = (1..=steps).map(|step| {
            at += 1.0
                / if (step / stretch).is_multiple_of(2) {
                    paces.0
                } else {
                    paces.1
                };
            (step, at)
        });
        let steps = kept(&mut wavering);
        let gaps: std::collections::BTreeSet<u64> =
            steps.windows(2).skip(2).map(|w| w[1] - w[0]).collect();
        (gaps, steps)
    };
    // a pace wavering about 20 000 a second (the 2000th / 5000th boundary) from one stretch
    // of 20 000 steps to the next: one stride
    let (gaps, steps) = wavering(200_000, 20_000, (26_000.0, 19_000.0));
    assert_eq!(gaps.len(), 1, "{steps:?}");
    // about five a second (the 20th / 50th boundary, ten seconds apart) alike
    let (gaps, steps) = wavering(2000, 100, (4.5, 5.5));
    assert_eq!(gaps, [20].into(), "{steps:?}");
    // 10 000 a second for a second, then 50 a second: the next 50th step a second on is
    // kept, and every 50th after
    let mut slowing = (1..=10_000u64)
        .map(|s| (s, s as f64 / 10_000.0))
        .chain((10_001..=10_400).map(|s| (s, 1.0 + (s - 10_000) as f64 / 50.0)));
    let steps = kept(&mut slowing);
    let after: Vec<u64> = steps.into_iter().filter(|&s| s > 10_000).collect();
    assert_eq!(after[..3], [10_050, 10_100, 10_150], "{after:?}");
}

#[test]
fn strides_go_50_100_200_500_and_on_by_tens_and_down_to_1_for_slow_steps() {
    let paces = [5.0, 500.0, 501.0, 1500.0, 4000.0, 9000.0, 3e5, 1e12];
    let strides = paces.map(|per_s| stride_for(per_s, AUTO_STEPS));
    assert_eq!(
        strides,
        [50, 50, 100, 200, 500, 1000, 50_000, 100_000_000_000]
    );
    // where 50 steps take more than ten seconds: the most round steps within ten
    let slow = [4.9, 2.0, 1.0, 0.3, 0.05].map(|per_s| stride_for(per_s, AUTO_STEPS));
    assert_eq!(slow, [20, 20, 10, 2, 1]);
    // (epochs, base 1: never below 1)
    assert_eq!(stride_for(0.01, 1), 1);
}

#[test]
fn auto_speaks_within_ten_seconds_from_a_slow_runs_start() {
    // a step every two seconds, the first after 20 s of start-up: the first (late), then
    // every 5th
    let mut k = Kept::new(LogEvery::Auto);
    let kept: Vec<u64> = (1..=40)
        .filter(|&step| {
            let at = Duration::from_secs(18 + 2 * step);
            k.keep(&StepRow {
                at,
                ..StepRow::example(step)
            })
        })
        .collect();
    assert_eq!(kept[..3], [1, 5, 10], "{kept:?}");
    assert!(kept[1..].windows(2).all(|w| w[1] - w[0] == 5), "{kept:?}");
    // three steps a second: every 20th (within ten seconds), not every 50th
    assert_eq!(kept_at(LogEvery::Auto, 100, 3.0), [20, 40, 60, 80, 100]);
}

/// Epochs 1..=`epochs`, `per_s` a second, with validation accuracy `accuracy(epoch)`; the
/// ones kept (now or, a best, soon).
fn scores(every: LogEvery, epochs: u64, per_s: f64, accuracy: fn(u64) -> f32) -> Vec<u64> {
    let mut k = Scores::new(every);
    (1..=epochs)
        .filter(|&epoch| {
            let done = Event::epoch_example(epoch, epoch * 23, accuracy(epoch));
            k.keep(&done, Duration::from_secs_f64(epoch as f64 / per_s)) != Verdict::Thinned
        })
        .collect()
}

#[test]
fn auto_keeps_every_epoch_but_where_they_come_faster_than_ten_a_second() {
    let flat = |_| 0.9;
    assert_eq!(
        scores(LogEvery::Auto, 30, 2.0, flat),
        (1..=30).collect::<Vec<_>>()
    );
    // a thousand epochs a second: the first 100, then every 100th
    let fast = scores(LogEvery::Auto, 1000, 1000.0, flat);
    let every_100: Vec<u64> = (1..=100).chain((2..=10).map(|i| i * 100)).collect();
    assert_eq!(fast, every_100);
    // a number asked for keeps them all
    assert_eq!(scores(LogEvery::Steps(50), 1000, 1000.0, flat).len(), 1000);
}

#[test]
fn auto_keeps_every_epoch_with_the_best_accuracy_so_far() {
    // a new best at epochs 150, 333 and 777 (else worse), a NaN at 550
    let accuracy = |epoch| match epoch {
        150 => 0.95,
        333 => 0.96,
        550 => f32::NAN,
        777 => 0.97,
        _ => 0.5,
    };
    let kept = scores(LogEvery::Auto, 1000, 1000.0, accuracy);
    for best in [150, 333, 777] {
        assert!(kept.contains(&best), "{best} in {kept:?}");
    }
    let every_100 = (1..=10).map(|i| i * 100);
    let want: Vec<u64> = (1..=100).chain([150, 333, 777]).chain(every_100).collect();
    assert_eq!(
        kept.iter()
            .copied()
            .collect::<std::collections::BTreeSet<_>>(),
        want.into_iter().collect()
    );
}

#[test]
fn other_events_are_all_kept_and_validations_are_thinned_apart() {
    let mut k = Scores::new(LogEvery::Auto);
    let at = |ms: u64| Duration::from_millis(ms);
    let checkpoint = Event::Checkpoint {
        step: 5,
        path: "c".into(),
        best: None,
    };
    assert!((0..100).all(|i| k.keep(&checkpoint, at(i)) == Verdict::Kept));
    // a validation every millisecond, none better than the first: the first 100, then every
    // 100th
    let validated = |step| Event::Validated {
        step,
        epochs: step as f32 / 100.0,
        val_loss: 0.5,
        val_accuracy: 0.8,
        elapsed: Duration::ZERO,
    };
    let kept: Vec<u64> = (1..=300)
        .filter(|&i| k.keep(&validated(i), at(i)) == Verdict::Kept)
        .collect();
    assert_eq!(kept, (1..=100).chain([200, 300]).collect::<Vec<_>>());
}

#[test]
fn bests_that_come_faster_than_ten_a_second_wait_for_the_next_record() {
    // every epoch better than the last, a thousand a second for a second: past the first
    // 100, about ten to twenty written at once (the stride's and the bests a tenth of a
    // second after the last), the rest wait (the newest of them written before the next
    // record)
    let mut k = Scores::new(LogEvery::Auto);
    let verdicts: Vec<Verdict> = (1..=1000u64)
        .map(|epoch| {
            let done = Event::epoch_example(epoch, epoch * 23, epoch as f32 / 1000.0);
            k.keep(&done, Duration::from_millis(epoch))
        })
        .collect();
    let now = verdicts.iter().filter(|&&v| v == Verdict::Kept).count();
    assert!((105..=125).contains(&now), "{now} kept at once");
    assert!(!verdicts.contains(&Verdict::Thinned));
    // epochs and validations each keep their own best: an epoch as good as an earlier
    // validation is the best epoch
    let mut k = Scores::new(LogEvery::Auto);
    let validated = Event::Validated {
        step: 5,
        epochs: 0.5,
        val_loss: 0.5,
        val_accuracy: 0.9,
        elapsed: Duration::ZERO,
    };
    let epoch = |epoch, val_accuracy| Event::epoch_example(epoch, epoch * 10, val_accuracy);
    let ms = Duration::from_millis;
    for e in 1..=100 {
        assert_eq!(k.keep(&epoch(e, 0.5), ms(e)), Verdict::Kept);
    }
    assert_eq!(k.keep(&validated, ms(101)), Verdict::Kept);
    assert_eq!(k.keep(&epoch(101, 0.6), ms(102)), Verdict::Best);
    assert_eq!(k.keep(&epoch(107, 0.9), ms(500)), Verdict::Kept);
}

#[test]
fn auto_puts_a_step_due_off_an_epochs_short_last_batch() {
    // 5 steps an epoch, the 5th of 16 samples of 32: every 50th step due is an epoch's last,
    // so the one after it is kept; the run's last is kept, short or not
    let short_5th = |step: u64| if step.is_multiple_of(5) { 16 } else { 32 };
    assert_eq!(
        kept_with(LogEvery::Auto, 250, 10.0, short_5th),
        [51, 101, 151, 201, 250]
    );
    // a set smaller than a batch (every step the same, cut to it): kept as due
    assert_eq!(kept_with(LogEvery::Auto, 120, 10.0, |_| 5), [50, 100, 120]);
    // a slow run keeps every step: none is put off, so none is lost
    let short_3rd = |step: u64| if step.is_multiple_of(3) { 8 } else { 32 };
    let every: Vec<u64> = (1..=10).collect();
    assert_eq!(kept_with(LogEvery::Auto, 10, 1.0 / 6.0, short_3rd), every);
}
