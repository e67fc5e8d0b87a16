use super::*;

fn step(rank: usize, compute_ms: u64, wait_ms: u64) -> StepStats {
    StepStats {
        rank,
        step: 1,
        epoch: 1,
        samples: 1,
        global_samples: 2,
        per_replica: 1,
        loss: 1.0,
        accuracy: 0.0,
        grad_norm: 1.0,
        lr: 1e-3,
        data_wait: Duration::from_millis(wait_ms),
        loader_busy: None,
        compute: Duration::from_millis(compute_ms),
        compute_cpu: None,
        device_timed: false,
        comm: Duration::ZERO,
        sync_wait: Duration::from_millis(wait_ms),
        transfer: Duration::ZERO,
        optimizer: Duration::ZERO,
        step_time: Duration::from_millis(compute_ms + 2 * wait_ms),
        at: Duration::ZERO,
        after_pause: false,
        paused: false,
        progress: 0.0,
        ends_at: None,
    }
}

/// A step of `rank` that ended at `at_ms`, `busy_ms` of it computing and `idle_ms` waiting.
fn ended(rank: usize, at_ms: u64, busy_ms: u64, idle_ms: u64) -> StepStats {
    StepStats {
        at: Duration::from_millis(at_ms),
        sync_wait: Duration::from_millis(idle_ms),
        data_wait: Duration::ZERO,
        step_time: Duration::from_millis(busy_ms + idle_ms),
        ..step(rank, busy_ms, 0)
    }
}

#[test]
fn busy_counts_work_not_waiting_and_resets_each_sample() {
    let mut m = BusyMeter::new(2);
    // before a rank's first step: unknown
    assert_eq!(m.sample(Duration::from_millis(10))[0].util, None);
    for i in 1..=10 {
        m.on_step(&ended(0, 10 + 100 * i, 80, 20));
        m.on_step(&ended(1, 10 + 100 * i, 20, 80));
    }
    let s = m.sample(Duration::from_millis(1010));
    assert!((s[0].util.unwrap() - 0.8).abs() < 1e-3, "{:?}", s[0].util);
    assert!((s[1].util.unwrap() - 0.2).abs() < 1e-3, "{:?}", s[1].util);
    assert_eq!(s[0].mem_access, None);
    // then paused: the step it was taken to be in (0.1 s of it busy 80%), then 0%, not n/a
    let s = m.sample(Duration::from_millis(2010));
    assert!((s[0].util.unwrap() - 0.08).abs() < 1e-3, "{:?}", s[0].util);
    let s = m.sample(Duration::from_millis(3010));
    assert_eq!(s[0].util, Some(0.0));
}

#[test]
fn a_step_longer_than_the_interval_is_busy_through_it() {
    let mut m = BusyMeter::new(1);
    // 8 s steps, all computing, sampled every second: 100% throughout, no idle seconds
    m.on_step(&ended(0, 8000, 8000, 0));
    let mut utils = Vec::new();
    for t in 1..=20 {
        let now = 8000 + 1000 * t;
        if now % 8000 == 0 {
            m.on_step(&ended(0, now, 8000, 0));
        }
        utils.push(m.sample(Duration::from_millis(now))[0].util.unwrap());
    }
    assert!(utils.iter().all(|u| (u - 1.0).abs() < 1e-6), "{utils:?}");
    // the run ended at 24 s: idle once a step's time has passed without a step
    let idle = m.sample(Duration::from_millis(40_000))[0].util.unwrap();
    assert!(idle < 0.6, "{idle}");
    assert_eq!(m.sample(Duration::from_millis(41_000))[0].util, Some(0.0));
}

#[test]
fn another_processes_ranks_show_its_samples_and_their_own_busy_share_where_it_has_none() {
    let samples = Arc::new(Samples::new(3));
    let interval = Duration::from_millis(100);
    // process 0 holds rank 0; the other process ranks 1 and 2
    let mut t = Telemetry::of_steps(3).with_peers(Some((samples.clone(), 0..1)), interval);
    for r in 0..3 {
        t.on_step(&ended(r, 900, 500, 500));
    }
    let gpu = DeviceSample {
        util: None,
        temp_c: Some(64.0),
        mem_used: Some(1 << 30),
        ..DeviceSample::default()
    };
    let words = |r: usize| (r, gpu.to_words());
    let there = Samples::new(3);
    // (rank 0's is process 0's own: one claiming it is not taken)
    there.post(&[words(0), words(1), words(2)]);
    samples.heard(&there.take_fresh().unwrap());
    let s = t.sample(Duration::from_millis(1000));
    assert_eq!(s[0].temp_c, None);
    for r in [1, 2] {
        assert_eq!((s[r].temp_c, s[r].mem_used), (Some(64.0), Some(1 << 30)));
        // NVML's busy share missing: the step times' (half of the step)
        assert!((s[r].util.unwrap() - 0.5).abs() < 0.01, "{:?}", s[r].util);
    }
    // a process silent for longer than a few intervals (here: a millisecond): its ranks'
    // samples are not shown
    t.peers.as_mut().unwrap().within = Duration::from_millis(1);
    std::thread::sleep(Duration::from_millis(5));
    let s = t.sample(Duration::from_millis(3000));
    assert_eq!(s[1].temp_c, None);
}

#[test]
fn another_machines_load_is_given_as_it_comes_and_its_silence_once() {
    let samples = Arc::new(Samples::new(4));
    let interval = Duration::from_millis(100);
    let mut t = Telemetry::of_steps(4).with_peers(Some((samples.clone(), 0..2)), interval);
    let load = Load {
        cores: 16,
        ours: 2.0,
        others: 3.0,
        top: None,
    };
    let from = |rank: usize| {
        let there = Samples::new(4);
        there.post_load(rank, &load.to_words());
        samples.heard(&there.take_fresh().unwrap());
    };
    let given = |t: &mut Telemetry| -> Vec<(usize, bool)> {
        let heard = t.peer_loads().into_iter();
        heard
            .map(|(r, l)| (r, matches!(l, PeerLoad::Load(_))))
            .collect()
    };
    from(2);
    assert_eq!(given(&mut t), [(2, true)]);
    // (none new since: nothing, until it is overdue; process 0's own rank is not another's)
    assert_eq!(given(&mut t), []);
    from(0);
    assert_eq!(given(&mut t), []);
    t.peers.as_mut().unwrap().within = Duration::from_millis(1);
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(given(&mut t), [(2, false)]);
    assert_eq!(given(&mut t), []);
    // coming again: given again
    from(2);
    assert_eq!(given(&mut t), [(2, true)]);
}

#[test]
fn process_memory_is_plausible() {
    if let Some((rss, total)) = process_memory() {
        assert!(rss > 1 << 20 && rss < total, "{rss} {total}");
    }
}
