//! The grid, the medians and the noise warning, the strategies compared.
use super::repeats::median_by;
use super::*;

#[test]
fn the_grid_puts_each_series_baseline_first() {
    let plan = Plan {
        gpus: Vec::new(),
        counts: vec![1, 2],
        batches: vec![32, 128],
        prefetch: vec![true, false],
        strategies: vec![Strategy::Mirrored],
        warmup_steps: 1,
        timed: Duration::from_millis(100),
        repeat: 1,
    };
    let p = plan.points();
    assert_eq!(p.len(), 8);
    assert_eq!(
        p[..2],
        [
            Point {
                devices: 1,
                per_replica: 32,
                prefetch: true,
                strategy: Strategy::Mirrored,
            },
            Point {
                devices: 2,
                per_replica: 32,
                prefetch: true,
                strategy: Strategy::Mirrored,
            }
        ]
    );
    assert!(!p[7].prefetch && p[7].per_replica == 128 && p[7].devices == 2);
}

fn row(devices: usize, rate: f64) -> Row {
    Row {
        strategy: "mirrored".into(),
        transfer_share: 0.0,
        val_accuracy: None,
        devices,
        per_replica: 32,
        global_batch: 32 * devices,
        prefetch: true,
        samples_per_sec: rate,
        spread: None,
        speedup: None,
        efficiency: None,
        utilization: 1.0,
        memory_access: None,
        mfu: None,
        data_wait_share: 0.0,
        comm_share: 0.0,
        sync_wait_share: 0.0,
        final_loss: 1.0,
        faults: String::new(),
        outside: None,
    }
}

#[test]
fn repeats_that_disagree_are_flagged_and_steady_ones_are_not() {
    let steady = median_by(&mut [row(1, 100.0), row(1, 104.0), row(1, 98.0)]);
    assert_eq!(steady.samples_per_sec, 100.0);
    assert!((steady.spread.unwrap() - 0.06).abs() < 1e-9);
    assert_eq!(
        median_by(&mut [row(1, 100.0)]).spread,
        None,
        "one run has no spread"
    );
    let two = median_by(&mut [row(1, 104.0), row(1, 100.0)]);
    assert_eq!(two.samples_per_sec, 100.0, "of two, the slower");
    let noisy = median_by(&mut [row(2, 100.0), row(2, 175.0), row(2, 51.0)]);
    assert_eq!(noisy.samples_per_sec, 100.0);
    assert!(noise_warning(std::slice::from_ref(&steady)).is_none());
    let w = noise_warning(&[steady.clone(), noisy.clone()]).unwrap();
    assert!(
        w.contains("1 point(s) (2x32)") && w.contains("--seconds"),
        "{w}"
    );
    // a grid of both prefetch settings says which point it was
    let off = Row {
        prefetch: !noisy.prefetch,
        ..noisy.clone()
    };
    let w = noise_warning(&[steady, noisy.clone(), off]).unwrap();
    let on_off = if noisy.prefetch {
        ["on", "off"]
    } else {
        ["off", "on"]
    };
    assert!(
        w.contains(&format!(
            "(2x32 prefetch {}, 2x32 prefetch {})",
            on_off[0], on_off[1]
        )),
        "{w}"
    );
}

#[test]
fn local_sgd_points_time_local_sgd_and_the_list_is_checked() {
    let base = RunConfig::default();
    let listed = strategies("mirrored,local-sgd:8,moments", None, &base).unwrap();
    assert_eq!(listed.len(), 2);
    // unless --local-sgd-warmup is given, local SGD steps alone from the first timed step
    let timed = held::timing_local_sgd(listed.clone(), false, 20);
    let local = |warmup| Strategy::LocalSgd {
        every: 8,
        warmup,
        moments: true,
    };
    assert_eq!(timed, [Strategy::Mirrored, local(20)]);
    assert_eq!(held::timing_local_sgd(listed, true, 20)[1], local(100));
    let line = held::local_sgd_line(&[local(100)], 20).unwrap();
    assert!(line.contains("outlasts the 20 untimed steps"), "{line}");
    assert!(held::local_sgd_line(&[Strategy::Mirrored], 20).is_none());
    // a strategy twice, a local-SGD warm-up for a list without local SGD
    let e = strategies("mirrored,mirrored", None, &base).unwrap_err();
    assert!(e.contains("mirrored is given twice"), "{e}");
    let e = strategies("local-sgd:08,local-sgd:8", None, &base).unwrap_err();
    assert!(e.contains("local-sgd:8 is given twice"), "{e}");
    let e = strategies("mirrored,central-storage", Some(0), &base).unwrap_err();
    assert!(
        e.contains("--local-sgd-warmup is for the local-sgd strategies"),
        "{e}"
    );
}

#[test]
fn points_timed_while_other_work_took_the_cores_are_named_with_the_work() {
    use crate::observe::machine_load::Load;
    let quiet = row(1, 100.0);
    assert!(outside_warning(std::slice::from_ref(&quiet)).is_none());
    let load = |others: f64| Load {
        cores: 2,
        ours: 1.9,
        others,
        top: Some(("rustc (pid 7)".into(), others)),
    };
    let one = Row {
        outside: Some(load(0.6)),
        ..row(1, 90.0)
    };
    let two = Row {
        outside: Some(load(1.2)),
        ..row(2, 120.0)
    };
    let w = outside_warning(&[quiet, one, two]).unwrap();
    assert!(
        w.contains("while 2 point(s) were timed (cores it took: 1x32 0.6, 2x32 1.2, of the machine's 2; most by rustc (pid 7))")
            && w.contains("ratios mean little"),
        "{w}"
    );
}
