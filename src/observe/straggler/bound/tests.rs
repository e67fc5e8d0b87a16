use super::super::{Context, Detector, DetectorConfig, Warning};
use super::UTIL_SETTLE;
use crate::engine::events::StepStats;
use crate::observe::monitor::StepRow;
use crate::observe::sample::DeviceSample;
use std::time::Duration;

fn ms(v: f64) -> Duration {
    Duration::from_secs_f64(v / 1e3)
}

/// A step of `ranks` ranks, each `step` ms long of which `data` waiting for input.
fn row(n: u64, ranks: usize, step: f64, data: f64, gpu: bool) -> StepRow {
    let stats = |rank| StepStats {
        rank,
        step: n,
        epoch: 1,
        samples: 32,
        global_samples: 32 * ranks,
        per_replica: 32,
        loss: 1.0,
        accuracy: 0.5,
        grad_norm: 1.0,
        lr: 1e-3,
        data_wait: ms(data),
        loader_busy: None,
        compute: ms(step - data),
        compute_cpu: None,
        device_timed: gpu,
        comm: Duration::ZERO,
        sync_wait: Duration::ZERO,
        transfer: Duration::ZERO,
        optimizer: Duration::ZERO,
        step_time: ms(step),
        at: ms(n as f64 * step),
        after_pause: false,
        paused: false,
        progress: 0.0,
        ends_at: None,
    };
    StepRow {
        global_samples: 32 * ranks,
        at: ms(n as f64 * step),
        ranks: (0..ranks).map(stats).collect(),
        ..StepRow::example(n)
    }
}

/// The warnings of steps `from..=to` (data wait `data` ms of 10 ms steps), by step.
fn feed(d: &mut Detector, from: u64, to: u64, data: f64, gpu: bool) -> Vec<(u64, Warning)> {
    (from..=to)
        .flat_map(|s| {
            d.on_row(&row(s, 2, 10.0, data, gpu))
                .into_iter()
                .map(move |w| (s, w))
        })
        .collect()
}

fn gpus(util: f32) -> Vec<DeviceSample> {
    let s = DeviceSample {
        util: Some(util),
        ..DeviceSample::default()
    };
    vec![s.clone(), s]
}

/// A first step, then `UTIL_SETTLE` readings of every GPU at `util`.
fn settle(d: &mut Detector, util: f32, gpu: bool) {
    d.on_row(&row(1, 2, 10.0, 0.1, gpu));
    for _ in 0..UTIL_SETTLE {
        d.on_telemetry(&gpus(util));
    }
}

fn gpu_detector() -> Detector {
    let ctx = Context {
        models: vec![Some("NVIDIA H100 80GB HBM3".into()); 2],
        ..Context::default()
    };
    Detector::new(2, DetectorConfig::default(), ctx)
}

#[test]
fn the_input_bound_share_is_said_with_the_wait_and_step_it_is_of() {
    // rank 0 waits 6 of its 10 ms, rank 1 (a shorter step) 7 of 8: the share said is
    // rank 0's, with its own figures, not another rank's step or a mean
    let said = |pictures: bool| {
        let ctx = Context {
            pictures,
            prefetch: 4,
            ..Context::default()
        };
        let mut d = Detector::new(2, DetectorConfig::default(), ctx);
        let w: Vec<Warning> = (1..=60)
            .flat_map(|s| {
                let mut r = row(s, 2, 10.0, 6.0, false);
                r.ranks[1].step_time = ms(8.0);
                r.ranks[1].data_wait = ms(7.0);
                // the loader threads as busy as they can be: 17.1 of the ranks' 18 ms
                r.ranks[0].loader_busy = Some(ms(9.5));
                r.ranks[1].loader_busy = Some(ms(7.6));
                d.on_row(&r)
            })
            .collect();
        w[0].to_string()
    };
    let text = said(true);
    assert!(
        text.contains(
            "at least 60% of each step (6.0 of 10.0 ms; its loader threads busy 95% of the time)"
        ),
        "{text}"
    );
    // samples held ready are copied: their loaders' share is not said
    let text = said(false);
    assert!(
        text.contains("at least 60% of each step (6.0 of 10.0 ms);"),
        "{text}"
    );
}

#[test]
fn an_input_bound_run_is_told_what_fits_its_input() {
    // (`busy`: the loader threads' time building each rank's batch, in ms of its 10 ms step)
    let said_busy = |ctx: Context, busy: Option<f64>| {
        let mut d = Detector::new(2, DetectorConfig::default(), ctx);
        let w: Vec<Warning> = (1..=60)
            .flat_map(|s| {
                let mut r = row(s, 2, 10.0, 4.0, false);
                r.ranks
                    .iter_mut()
                    .for_each(|r| r.loader_busy = busy.map(ms));
                d.on_row(&r)
            })
            .collect();
        w[0].to_string()
    };
    let said = |ctx: Context| said_busy(ctx, None);
    let threaded = Context {
        loader_threads: 2,
        prefetch: 4,
        ..Context::default()
    };
    let plain = said(threaded.clone());
    assert!(
        plain.ends_with("try more --loader-threads (now 2)"),
        "{plain}"
    );
    // batches built on the worker's own thread: first to build them beside it
    let inline = said(Context::default());
    assert!(
        inline.ends_with(
            "(--prefetch 0): --prefetch 4 builds them on loader threads while it computes"
        ),
        "{inline}"
    );
    let pictures = Context {
        pictures: true,
        ..threaded
    };
    // loader threads at their limit: more of them
    let full = said_busy(pictures.clone(), Some(9.5));
    assert!(
        full.ends_with("try more --loader-threads (now 2), or smaller pictures (--image-size)"),
        "{full}"
    );
    // not at their limit: more would not help, the hand-over of each batch takes the time
    let idle = said_busy(pictures.clone(), Some(3.0));
    assert!(
        idle.contains("busy 30% of the time); the loader threads are not at their limit")
            && idle.ends_with("a larger --batch-per-replica (now 32) spreads over more samples"),
        "{idle}"
    );
    // more threads than the cores: they only share them
    let crowded = Context {
        cores: 2,
        models: vec![None, None],
        threads_per_worker: 1,
        ..pictures
    };
    let crowded = said_busy(crowded, Some(9.5));
    assert!(
        crowded.ends_with("the loader threads (2 a rank) already share this machine's 2 cores with the workers: try smaller pictures (--image-size) or fewer ranks"),
        "{crowded}"
    );
    let injected = said(Context {
        injected: vec![
            Some("--slow-data 0:5".into()),
            Some("--slow-data 1:5".into()),
        ],
        ..Context::default()
    });
    assert!(
        injected.ends_with("; fault injected: --slow-data 0:5, --slow-data 1:5"),
        "{injected}"
    );
}

#[test]
fn a_run_whose_every_rank_waits_for_input_is_said_input_bound_then_cleared() {
    let mut d = Detector::new(2, DetectorConfig::default(), Context::default());
    // 4 of every 10 ms waiting for input on both ranks: evaluations at rows 30, 40, 50
    let w = feed(&mut d, 1, 100, 4.0, false);
    assert_eq!(w.len(), 1, "one warning, and no straggler: {w:?}");
    let (step, warning) = &w[0];
    assert_eq!(*step, 50);
    assert_eq!(warning.kind(), "input_bound");
    let text = warning.to_string();
    assert!(
        text.starts_with(
            "input-bound: every rank waits for its input at least 40% of each step (4.0 of 10.0 ms)"
        ) && text.contains("--prefetch 4 builds"),
        "{text}"
    );
    // a share that is "at least" so much is not rounded up to the whole step
    let nearly = super::Bound {
        limit: super::Limit::Input,
        step_ms: 50.3,
        data_ms: 50.1,
        data_step_ms: 50.3,
        data_share: 50.1 / 50.3,
        loaders: None,
        util: None,
        mfu: None,
        per_replica: 32,
        input_fix: String::new(),
    };
    let text = nearly.to_string();
    assert!(
        text.contains("at least 99% of each step (50.1 of 50.3 ms)"),
        "{text}"
    );
    // the input keeps up from step 101: cleared once the window's median says so, 3 in a row
    let w = feed(&mut d, 101, 300, 0.1, false);
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0].1.kind(), "input_bound_cleared");
    assert!(w[0].1.is_clear() && w[0].1.rank().is_none());
    // a little waiting is fine
    let mut d = Detector::new(2, DetectorConfig::default(), Context::default());
    assert!(feed(&mut d, 1, 300, 1.0, false).is_empty());
}

#[test]
fn gpus_idle_half_the_time_while_no_rank_waits_for_input_are_launch_bound() {
    let mut d = gpu_detector();
    settle(&mut d, 0.3, true);
    let w = feed(&mut d, 2, 100, 0.1, true);
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0].1.kind(), "launch_bound");
    let text = w[0].1.to_string();
    assert!(
        text.contains("busy 30% of the time") && text.contains("--batch-per-replica (now 32)"),
        "{text}"
    );
    d.on_telemetry(&gpus(0.9));
    let w = feed(&mut d, 101, 200, 0.1, true);
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0].1.kind(), "launch_bound_cleared");
    // idle GPUs that wait for input are input-bound, not launch-bound
    let mut d = gpu_detector();
    settle(&mut d, 0.3, true);
    let kinds: Vec<&str> = (feed(&mut d, 2, 100, 5.0, true).iter())
        .map(|(_, w)| w.kind())
        .collect();
    assert_eq!(kinds, ["input_bound"]);
    // a CPU worker's busy share is not a GPU's utilization
    let mut d = Detector::new(2, DetectorConfig::default(), Context::default());
    settle(&mut d, 0.3, false);
    assert!(feed(&mut d, 2, 100, 0.1, false).is_empty());
    // readings of the idle start-up (NVML's window still before the first step) say nothing:
    // only the two after the first step, before any are settled
    let mut d = gpu_detector();
    d.on_telemetry(&gpus(0.0));
    d.on_row(&row(1, 2, 10.0, 0.1, true));
    for _ in 1..UTIL_SETTLE {
        d.on_telemetry(&gpus(0.0));
    }
    assert!(feed(&mut d, 2, 100, 0.1, true).is_empty());
    // a third reading after it is taken
    d.on_telemetry(&gpus(0.0));
    let kinds: Vec<&str> = (feed(&mut d, 101, 200, 0.1, true).iter())
        .map(|(_, w)| w.kind())
        .collect();
    assert_eq!(kinds, ["launch_bound"]);
}

#[test]
fn busy_gpus_at_a_low_mfu_are_underused_where_their_peak_is_known() {
    let info = |flops: u64| {
        crate::observe::metrics::run_info(&serde_json::json!({
            "devices": ["gpu0", "gpu1"],
            "device_names": ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"],
            "name": "r", "data": "d", "model": "m", "params": 1, "per_replica": 32,
            "flops_per_sample": flops,
        }))
        .unwrap()
    };
    // 3 x 1 MFLOP x 32 samples in 10 ms: 9.6 GFLOP/s of 66.9 TFLOP/s
    let mut d = Detector::for_run(&info(1_000_000));
    settle(&mut d, 0.99, true);
    let w = feed(&mut d, 2, 100, 0.1, true);
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0].1.kind(), "underused");
    let text = w[0].1.to_string();
    assert!(
        text.contains("busy 99% of the time but at <0.1% MFU"),
        "{text}"
    );
    // 3 x 1 TFLOP x 32 in 10 ms is far past any peak: not underused
    let mut d = Detector::for_run(&info(1_000_000_000_000));
    settle(&mut d, 0.99, true);
    assert!(feed(&mut d, 2, 100, 0.1, true).is_empty());
    // no peak known (no MFU): nothing said
    let mut d = gpu_detector();
    settle(&mut d, 0.99, true);
    assert!(feed(&mut d, 2, 100, 0.1, true).is_empty());
}
