use super::*;

pub fn stats(rank: usize, step: u64, at_ms: u64) -> StepStats {
    StepStats {
        rank,
        step,
        epoch: 1,
        samples: 10,
        global_samples: 20,
        per_replica: 10,
        loss: 1.5,
        accuracy: 0.5,
        grad_norm: 1.0,
        lr: 1e-3,
        data_wait: Duration::ZERO,
        loader_busy: None,
        compute: Duration::from_millis(1),
        compute_cpu: None,
        device_timed: false,
        comm: Duration::ZERO,
        sync_wait: Duration::ZERO,
        transfer: Duration::ZERO,
        optimizer: Duration::ZERO,
        step_time: Duration::from_millis(1),
        at: Duration::from_millis(at_ms),
        after_pause: false,
        paused: false,
        progress: 0.0,
        ends_at: None,
    }
}

#[test]
fn a_row_appears_once_every_rank_reported_and_rate_follows_time() {
    let mut m = Monitor::new(2);
    assert!(m.on_step(stats(1, 1, 10)).is_none());
    let row = m.on_step(stats(0, 1, 9)).unwrap();
    assert_eq!(
        (row.step, row.ranks.len(), row.at),
        (1, 2, Duration::from_millis(10))
    );
    assert_eq!(row.ranks[0].rank, 0);
    for step in 2..=11 {
        m.on_step(stats(0, step, step * 10));
        m.on_step(stats(1, step, step * 10));
    }
    // 10 steps of 20 samples in 100 ms
    let r = m.samples_per_sec().unwrap();
    assert!((r - 2000.0).abs() < 1.0, "{r}");
}

/// A GPU step: device-timed compute, an all-reduce (waiting included), no host wait.
pub fn gpu_stats(rank: usize, step: u64, compute_ms: u64, comm_ms: u64) -> StepStats {
    StepStats {
        compute: Duration::from_millis(compute_ms),
        comm: Duration::from_millis(comm_ms),
        step_time: Duration::from_millis(compute_ms + comm_ms),
        device_timed: true,
        ..stats(rank, step, step * 20)
    }
}

#[test]
fn a_gpu_all_reduce_is_split_into_transfer_and_waiting_for_peers() {
    let mut m = Monitor::new(3);
    m.on_step(gpu_stats(0, 1, 5, 11));
    m.on_step(gpu_stats(1, 1, 15, 1));
    let row = m.on_step(gpu_stats(2, 1, 5, 11)).unwrap();
    let ms = |d: Duration| d.as_millis() as u64;
    let split: Vec<(u64, u64)> = row
        .ranks
        .iter()
        .map(|r| (ms(r.comm), ms(r.sync_wait)))
        .collect();
    assert_eq!(split, [(1, 10), (1, 0), (1, 10)]);
    // CPU workers measure their own wait: left as they are
    let mut m = Monitor::new(2);
    let mut a = gpu_stats(0, 1, 5, 11);
    a.device_timed = false;
    a.sync_wait = Duration::from_millis(3);
    m.on_step(a);
    let row = m.on_step(gpu_stats(1, 1, 5, 11)).unwrap();
    assert_eq!(row.ranks[1].comm, Duration::from_millis(11));
}

#[test]
fn eta_follows_the_recent_pace() {
    let mut m = Monitor::new(1);
    for step in 1..=10 {
        let mut s = stats(0, step, step * 100);
        s.progress = step as f64 / 100.0;
        m.on_step(s);
    }
    // 1% per 100 ms, 90% left: 9 s
    let eta = m.eta().unwrap().as_secs_f64();
    assert!((eta - 9.0).abs() < 1e-6, "{eta}");
}

#[test]
fn a_batch_change_restarts_the_eta_s_pace() {
    // 6 s of 0.1% per 100 ms at 32 per replica, then 0.1% per 200 ms at 64
    let mut m = Monitor::new(1);
    let (mut at, mut progress) = (0, 0.0);
    let mut step = 0;
    for (per_replica, ms, steps) in [(32, 100, 60), (64, 200, 5)] {
        for _ in 0..steps {
            step += 1;
            at += ms;
            progress += 0.001;
            let mut s = stats(0, step, at);
            (s.per_replica, s.progress) = (per_replica, progress);
            m.on_step(s);
        }
    }
    // 93.5% left at 0.1% per 200 ms: 187 s (with the 6 s before in the pace, about 100 s)
    let eta = m.eta().unwrap().as_secs_f64();
    assert!((eta - 187.0).abs() < 1.0, "{eta}");
}

#[test]
fn the_eta_is_not_shaken_by_each_epoch_s_validation() {
    // 10 steps of 100 ms, then a 1 s validation, 1% per step: 2 s per 10%
    let mut m = Monitor::new(1);
    let (mut at, mut etas) = (0, Vec::new());
    for step in 1..=60u64 {
        let held = step % 10 == 1 && step > 1;
        at += if held { 1100 } else { 100 };
        let mut s = stats(0, step, at);
        s.progress = step as f64 / 100.0;
        // (the step after a validation comes after a hold, as the engine marks it)
        s.after_pause = held;
        m.on_step(s);
        if step >= 20 {
            etas.push((step, m.eta().unwrap().as_secs_f64()));
        }
    }
    for (step, eta) in etas {
        // the true pace: 0.2 s a step
        let want = (100 - step) as f64 * 0.2;
        assert!(
            (eta / want - 1.0).abs() < 0.25,
            "step {step}: {eta} s, not ~{want} s"
        );
    }
    // a long run keeps a bounded history
    for step in 61..=100_000u64 {
        at += 100;
        let mut s = stats(0, step, at);
        s.progress = step as f64 / 200_000.0;
        m.on_step(s);
    }
    assert!(m.paced.len() <= 122, "{}", m.paced.len());
}

#[test]
fn a_pause_does_not_count_as_slow_training() {
    let mut m = Monitor::new(1);
    for step in 1..=5 {
        let mut s = stats(0, step, step * 10);
        s.progress = step as f64 / 10.0;
        m.on_step(s);
    }
    // paused for 10 s, then steps at the same pace (20 samples per 10 ms)
    let mut resumed = stats(0, 6, 10_060);
    resumed.after_pause = true;
    resumed.step_time = Duration::from_millis(10);
    resumed.paused = true;
    resumed.progress = 0.6;
    m.on_step(resumed);
    let mut s = stats(0, 7, 10_070);
    s.progress = 0.7;
    m.on_step(s);
    let r = m.samples_per_sec().unwrap();
    assert!((r - 2000.0).abs() < 1.0, "{r}");
    // nor in the time left: 10% per 10 ms, 30% left
    let eta = m.eta().unwrap().as_secs_f64();
    assert!((eta - 0.03).abs() < 1e-6, "{eta}");
}

#[test]
fn a_pause_known_from_its_events_is_left_out_of_rows_read_back() {
    // rows as a metrics file has them: no pause flag; 10% per 10 ms, then a 10 s pause
    let mut m = Monitor::new(1);
    for step in 1..=7u64 {
        let at = if step <= 5 {
            step * 10
        } else {
            10_000 + step * 10
        };
        let mut s = stats(0, step, at);
        s.progress = step as f64 / 10.0;
        if step == 6 {
            m.leave_out(Duration::from_millis(50), Duration::from_millis(10_050));
        }
        m.on_step(s);
    }
    let eta = m.eta().unwrap().as_secs_f64();
    assert!((eta - 0.03).abs() < 1e-6, "{eta}");
}

#[test]
fn lost_samples_do_not_leak_pending_rows() {
    let mut m = Monitor::new(2);
    for step in 1..=1000 {
        m.on_step(stats(0, step, step)); // rank 1 never reports
    }
    assert!(m.pending.len() <= PENDING_STEPS as usize);
    m.on_step(stats(0, 1001, 1001));
    m.on_step(stats(1, 1001, 1001)).unwrap();
    assert!(m.pending.len() < PENDING_STEPS as usize);
}

#[test]
fn the_smoothed_loss_is_the_mean_of_the_last_window_and_a_spike_leaves_it_after() {
    let mut recent = RecentLosses::default();
    recent.push(2.0);
    assert_eq!(recent.push(4.0), 3.0);
    // a diverging step's loss among ordinary ones: gone once the window passed it
    assert!(recent.push(1e20) > 1e18);
    let mut mean = 0.0;
    for _ in 0..LOSS_WINDOW {
        mean = recent.push(5.0);
    }
    assert_eq!(mean, 5.0);
    assert_eq!(recent.push(25.0), 6.0, "19 of 5 and one of 25");
}

#[test]
fn training_time_is_each_rank_s_own_whatever_their_steps_do_not_line_up() {
    // local SGD: rank 1 is slow between averages; at the average (step 2) rank 0 waits for it
    let ms = Duration::from_millis;
    let step = |rank, step, t| StepStats {
        step_time: ms(t),
        ..stats(rank, step, 0)
    };
    let mut totals = Totals::default();
    totals.add(20, &[step(0, 1, 1), step(1, 1, 3)]);
    totals.add(20, &[step(0, 2, 5), step(1, 2, 3)]);
    // each rank trained 6 ms; the slowest of each step would say 8
    assert!((totals.train_s - 0.006).abs() < 1e-12, "{}", totals.train_s);
}

#[test]
fn the_rate_after_a_validation_keeps_the_steps_before_it() {
    // 100 steps of 10 ms at 20 samples, then a 1 s validation, then a step of 30 ms (a slow
    // one): the rate is the window's, not the one step's since the validation
    let mut m = Monitor::new(1);
    for step in 1..=100 {
        m.on_step(stats(0, step, step * 10));
    }
    let mut s = stats(0, 101, 1000 + 1000 + 30);
    s.after_pause = true;
    s.step_time = Duration::from_millis(30);
    m.on_step(s);
    // over the last 2 s of training: (100 + 1 steps) x 20 samples in 1.03 s
    let r = m.samples_per_sec().unwrap();
    assert!((r - 101.0 * 20.0 / 1.03).abs() < 20.0, "{r}");
}

#[test]
fn an_epoch_s_short_last_step_keeps_the_global_batch_and_a_batch_change_is_the_new_one() {
    let mut g = GlobalBatch::default();
    let row = |step, per_replica, global_samples| StepRow {
        per_replica,
        global_samples,
        ..StepRow::example(step)
    };
    assert_eq!(g.at(&row(1, 32, 64)), 64);
    assert_eq!(g.at(&row(2, 32, 40)), 64, "an epoch's last step, cut short");
    assert_eq!(g.at(&row(3, 32, 64)), 64);
    assert_eq!(
        g.at(&row(4, 16, 32)),
        32,
        "the batch made smaller from the keyboard"
    );
    assert_eq!(g.at(&row(5, 48, 96)), 96);
    // a data set smaller than one batch: every step is the first's
    let mut g = GlobalBatch::default();
    assert_eq!(g.at(&row(1, 32, 20)), 20);
    assert_eq!(g.at(&row(2, 32, 20)), 20);
}
