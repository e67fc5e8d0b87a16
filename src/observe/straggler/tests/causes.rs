//! Why a straggler is slow, from the evidence: input, the network, shared cores, a fault
//! injected, and the fix each is told.

use super::*;

#[test]
fn causes_come_from_the_evidence() {
    // rank 1's extra time is input wait: data-bound
    let mut d = detector(2);
    let mut found = None;
    for s in 1..=100 {
        for w in d.on_row(&row(s, &[10.0, 30.0], &[0.5, 20.5])) {
            found = Some(w);
        }
    }
    match found.unwrap() {
        Warning::Straggler {
            cause: Cause::DataBound { data_ms, .. },
            ..
        } => assert_eq!(data_ms, 20.5),
        other => panic!("{other:?}"),
    }
    // on pictures built on loader threads, with each rank's loaders' busy share
    let pictures = Context {
        pictures: true,
        prefetch: 4,
        ..Context::default()
    };
    let mut d = Detector::new(2, DetectorConfig::default(), pictures);
    let mut found = None;
    for s in 1..=100 {
        let mut r = row(s, &[10.0, 30.0], &[0.5, 20.5]);
        // (of steps of 30.2 ms)
        r.ranks[0].loader_busy = Some(ms(12.08));
        r.ranks[1].loader_busy = Some(ms(29.0));
        found = d.on_row(&r).pop().or(found);
    }
    match found.unwrap() {
        Warning::Straggler {
            cause:
                Cause::DataBound {
                    loaders: Some((mine, fastest)),
                    ..
                },
            ..
        } => assert!(
            (mine - 29.0 / 30.2).abs() < 1e-9 && (fastest - 0.4).abs() < 1e-9,
            "{mine} {fastest}"
        ),
        other => panic!("{other:?}"),
    }
    // more workers than cores
    let ctx = Context {
        cores: 2,
        ..Context::default()
    };
    let mut d = Detector::new(3, DetectorConfig::default(), ctx.clone());
    let w = feed(&mut d, 1, 100, |_, r| if r == 2 { 20.0 } else { 10.0 }, 3);
    assert!(
        matches!(
            &w[0].1,
            Warning::Straggler {
                cause: Cause::Oversubscribed {
                    workers: 3,
                    cores: 2
                },
                ..
            }
        ),
        "{w:?}"
    );
    // an injected fault says so
    let ctx = Context {
        cores: 8,
        injected: vec![None, Some("--slow-rank 1:2".into())],
        ..Context::default()
    };
    let mut d = Detector::new(2, DetectorConfig::default(), ctx);
    let w = feed(&mut d, 1, 100, |_, r| if r == 1 { 20.0 } else { 10.0 }, 2);
    assert!(
        w[0].1
            .to_string()
            .contains("likely cause: injected (--slow-rank 1:2)"),
        "{}",
        w[0].1
    );
    // a different device model
    let ctx = Context {
        cores: 8,
        models: vec![Some("A100".into()), Some("T4".into())],
        ..Context::default()
    };
    let mut d = Detector::new(2, DetectorConfig::default(), ctx);
    let w = feed(&mut d, 1, 100, |_, r| if r == 1 { 20.0 } else { 10.0 }, 2);
    assert!(
        matches!(&w[0].1, Warning::Straggler { cause: Cause::Heterogeneous { model }, .. } if model == "T4"),
        "{w:?}"
    );
    // the same GPUs, one clocked down by a power cap and heat: throttled, with the clocks
    let ctx = Context {
        cores: 8,
        models: vec![Some("H100".into()), Some("H100".into())],
        ..Context::default()
    };
    let sample = |reasons: u64, clock: u32| crate::observe::sample::DeviceSample {
        throttle_reasons: Some(reasons),
        sm_clock_mhz: Some(clock),
        sm_clock_max_mhz: Some(1980),
        ..Default::default()
    };
    let mut d = Detector::new(2, DetectorConfig::default(), ctx.clone());
    // rank 0 idles between steps (GPU idle is not throttling); rank 1 is power- and heat-capped
    d.on_telemetry(&[sample(0x1, 1980), sample(0x4 | 0x40, 1140)]);
    let w = feed(&mut d, 1, 100, |_, r| if r == 1 { 20.0 } else { 10.0 }, 2);
    let text = w[0].1.to_string();
    assert!(
        text.contains(
            "likely cause: throttled (power cap, thermal (hardware); SM clock 1140 of 1980 MHz"
        ),
        "{text}"
    );
    // both throttled alike: that does not explain the difference
    let mut d = Detector::new(2, DetectorConfig::default(), ctx);
    d.on_telemetry(&[sample(0x4, 1500), sample(0x4, 1500)]);
    let w = feed(&mut d, 1, 100, |_, r| if r == 1 { 20.0 } else { 10.0 }, 2);
    assert!(
        matches!(
            &w[0].1,
            Warning::Straggler {
                cause: Cause::Unknown,
                ..
            }
        ),
        "{w:?}"
    );
}

#[test]
fn a_host_whose_all_reduce_stands_out_is_named_as_the_network() {
    // host b's ranks work slower and move data 4x as long
    let mut d = on_two_hosts();
    let mut warnings = Vec::new();
    for step in 1..=100 {
        let work = [10.0, 10.0, 20.0, 10.0];
        let mut r = row(step, &work, &[0.0; 4]);
        for s in &mut r.ranks[2..] {
            s.comm = ms(8.0);
        }
        warnings.extend(d.on_row(&r));
    }
    let w = &warnings[0];
    match w {
        Warning::Straggler {
            rank: 2,
            cause: Cause::Network { host, .. },
            ..
        } => assert_eq!(host, "b"),
        other => panic!("{other:?}"),
    }
    let text = w.to_string();
    assert!(
        text.starts_with("straggler: rank 2 on b is") && text.contains("likely cause: network"),
        "{text}"
    );
}

/// Input slow of itself is told its fix; input slowed on purpose (`--slow-data`) is said to be
/// that, with no fix for it.
#[test]
fn data_bound_input_is_told_its_fix() {
    let cause = Cause::DataBound {
        data_ms: 20.0,
        fastest_data_ms: 1.0,
        loaders: None,
    };
    let warning = |injected: Option<&str>, cause: &Cause| {
        Warning::Straggler {
            rank: 1,
            host: None,
            step: 50,
            slowdown: 3.0,
            work_ms: 30.0,
            fastest_rank: 0,
            fastest_ms: 10.0,
            others_wait_ms: 20.0,
            cpu_time: false,
            cause: cause.clone(),
            injected: injected.map(String::from),
        }
        .to_string()
    };
    let own = warning(None, &cause);
    assert!(
        own.contains("likely cause: data-bound (waits 20.0 ms/step for input vs 1.0 ms on the fastest rank; try more --prefetch or --loader-threads)"),
        "{own}"
    );
    // its loader threads at their limit (as the fastest rank's are not): more of them
    let full = Cause::DataBound {
        data_ms: 20.0,
        fastest_data_ms: 1.0,
        loaders: Some((0.97, 0.4)),
    };
    let full = warning(None, &full);
    assert!(
        full.contains("(waits 20.0 ms/step for input vs 1.0 ms on the fastest rank; its loader threads busy 97% of the time, the fastest rank's 40%; try more --loader-threads)"),
        "{full}"
    );
    let injected = warning(Some("--slow-data 1:20"), &cause);
    assert!(
        injected.contains("likely cause: fault injected (--slow-data 1:20): data-bound (waits 20.0 ms/step for input vs 1.0 ms on the fastest rank);")
            && !injected.contains("--prefetch"),
        "{injected}"
    );
}
