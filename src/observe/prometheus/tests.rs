//! The metric set fed a GPU run's records, read back as text (and by promtool).

use super::*;
use crate::engine::events::{Ending, StepStats};
use crate::observe::straggler::{Cause, SaidFor, Spike};

fn info() -> RunInfo {
    crate::observe::metrics::run_info(&serde_json::json!({
        "devices": ["gpu0", "gpu1"], "hosts": ["nodeA", "nodeA"],
        "device_names": ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"],
        "name": "r", "data": "d", "model": "m", "params": 1, "per_replica": 32,
        "flops_per_sample": 1_000_000,
    }))
    .unwrap()
}

fn row(step: u64) -> StepRow {
    let rank = |rank| StepStats {
        rank,
        step,
        epoch: 1,
        samples: 32,
        global_samples: 64,
        per_replica: 32,
        loss: 0.5,
        accuracy: 0.25,
        grad_norm: 1.0,
        lr: 1e-3,
        data_wait: Duration::from_millis(1),
        // (rank 0's as in files from before it was recorded)
        loader_busy: (rank == 1).then(|| Duration::from_millis(5)),
        compute: Duration::from_millis(10),
        compute_cpu: None,
        device_timed: true,
        comm: Duration::from_millis(2),
        sync_wait: Duration::from_millis(3 * rank as u64),
        transfer: Duration::ZERO,
        optimizer: Duration::from_millis(1),
        step_time: Duration::from_millis(15),
        at: Duration::from_millis(15 * step),
        after_pause: false,
        paused: false,
        progress: 0.5,
        ends_at: None,
    };
    StepRow {
        step,
        epoch: 1,
        loss: 0.5,
        accuracy: 0.25,
        grad_norm: 1.0,
        lr: 1e-3,
        per_replica: 32,
        global_samples: 64,
        at: Duration::from_millis(15 * step),
        progress: 0.5,
        ends_at: None,
        ranks: vec![rank(0), rank(1)],
        totals: None,
    }
}

fn text(r: &Registry) -> String {
    String::from_utf8(http::render(r).unwrap()).unwrap()
}

/// The value of the series written exactly as `series` (name and labels).
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// `promtool check metrics` on the text, where promtool is installed (CI installs it). It
/// parses (exit 1 otherwise) and lints (exit 3): the one lint problem allowed is the one it
/// finds in dcgm-exporter's own output, its camelCase labels (`modelName`, `UUID`).
pub(crate) fn promtool_accepts(text: &str) {
    use std::io::Write;
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        assert!(
            std::env::var_os("MGTOP_REQUIRE_PROMTOOL").is_none(),
            "MGTOP_REQUIRE_PROMTOOL is set but promtool is missing: apt install prometheus"
        );
        eprintln!("SKIPPED promtool check: promtool is not installed (apt install prometheus)");
        return;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let dcgm_labels_only = o.status.code() == Some(3)
        && said.lines().all(|l| {
            l.starts_with("DCGM_FI_DEV_")
                && l.ends_with("label names should be written in 'snake_case' not 'camelCase'")
        });
    assert!(
        o.status.success() || dcgm_labels_only,
        "promtool ({:?}): {said}\n{text}",
        o.status.code()
    );
}

#[test]
fn gpus_show_under_dcgm_names_and_labels_and_training_under_mgtop_names() {
    let reg = Registry::new();
    let ids = [
        GpuIdentity {
            index: Some(3),
            uuid: Some("GPU-5b4f".into()),
            minor: Some(3),
        },
        GpuIdentity::default(),
    ];
    let mut p = Prometheus::new(&reg, &info(), &ids).unwrap();
    let t = text(&reg);
    // nothing is shown as 0 before it is known
    for absent in [
        "DCGM_FI_DEV_GPU_UTIL{",
        "mgtop_validation_loss ",
        "mgtop_samples_per_second ",
        "mgtop_mfu_ratio{",
        "mgtop_learning_rate ",
        "mgtop_batch_size_per_replica ",
        "mgtop_progress_ratio ",
        "mgtop_process_resident_memory_bytes ",
    ] {
        assert!(!t.contains(absent), "{absent} before any value:\n{t}");
    }
    assert_eq!(value(&t, r#"mgtop_run_state{state="running"}"#), Some(1.0));
    for s in 1..=4 {
        p.step(&row(s), Some(1000.0), s % 2 == 0).unwrap();
    }
    let gpu0 = DeviceSample {
        util: Some(0.5),
        mem_access: Some(0.25),
        mem_used: Some(2048 << 20),
        mem_total: Some(80 << 30),
        temp_c: Some(61.0),
        power_w: Some(350.5),
        sm_clock_mhz: Some(1980),
        pcie_tx_kbs: Some(1200),
        ..DeviceSample::default()
    };
    let gpu1 = DeviceSample {
        util: Some(1.0),
        ..DeviceSample::default()
    };
    // (at the last step's time: no stall in between)
    p.telemetry(
        Duration::from_millis(60),
        &[gpu0, gpu1],
        Some((1 << 20, 1 << 30)),
    )
    .unwrap();
    p.warning(
        &Warning::Straggler {
            rank: 1,
            host: None,
            step: 4,
            slowdown: 2.0,
            work_ms: 20.0,
            fastest_rank: 0,
            fastest_ms: 10.0,
            others_wait_ms: 10.0,
            cpu_time: false,
            cause: Cause::DataBound {
                data_ms: 9.0,
                fastest_data_ms: 1.0,
                loaders: None,
            },
            injected: None,
        },
        Duration::from_secs(1),
    )
    .unwrap();
    let spike = Spike {
        step: 4,
        // (a warning said for the three spikes of a minute)
        said_for: SaidFor {
            count: 3,
            first: 2,
            last: 4,
        },
        norm: 30.0,
        median: 1.0,
        steps: 100,
        clip: None,
        bound: 2.0,
    };
    p.warning(&Warning::GradSpike(spike), Duration::from_secs(1))
        .unwrap();
    p.event(
        &Event::EpochDone {
            epoch: 1,
            step: 4,
            train_loss: 0.5,
            val_loss: Some(0.4),
            val_accuracy: Some(0.9),
            elapsed: Duration::from_secs(1),
        },
        Duration::from_secs(1),
        true,
    )
    .unwrap();
    p.event(
        &Event::Checkpoint {
            step: 4,
            path: "c".into(),
            best: None,
        },
        Duration::from_secs(1),
        true,
    )
    .unwrap();
    let t = text(&reg);
    let gpu0 = r#"{Hostname="nodeA",UUID="GPU-5b4f",device="nvidia3",gpu="3",modelName="NVIDIA H100 80GB HBM3",pci_bus_id="",rank="0"}"#;
    let want = [
        ("DCGM_FI_DEV_GPU_UTIL", 50.0),
        ("DCGM_FI_DEV_MEM_COPY_UTIL", 25.0),
        ("DCGM_FI_DEV_FB_USED", 2048.0),
        ("DCGM_FI_DEV_FB_FREE", 80.0 * 1024.0 - 2048.0),
        ("DCGM_FI_DEV_GPU_TEMP", 61.0),
        ("DCGM_FI_DEV_POWER_USAGE", 350.5),
        ("DCGM_FI_DEV_SM_CLOCK", 1980.0),
        ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", 1200.0),
    ];
    for (name, v) in want {
        assert_eq!(value(&t, &format!("{name}{gpu0}")), Some(v), "{name}:\n{t}");
    }
    // what NVML did not give is left out; a GPU NVML does not know keeps its CUDA ordinal
    assert!(!t.contains("DCGM_FI_DEV_PCIE_RX_THROUGHPUT{"), "{t}");
    let gpu1 = r#"{Hostname="nodeA",UUID="",device="",gpu="1",modelName="NVIDIA H100 80GB HBM3",pci_bus_id="",rank="1"}"#;
    assert_eq!(
        value(&t, &format!("DCGM_FI_DEV_GPU_UTIL{gpu1}")),
        Some(100.0)
    );
    assert!(!t.contains(&format!("DCGM_FI_DEV_GPU_TEMP{gpu1}")), "{t}");
    let training = [
        ("mgtop_step", 4.0),
        ("mgtop_steps_total", 4.0),
        ("mgtop_samples_total", 256.0),
        ("mgtop_samples_per_second", 1000.0),
        ("mgtop_learning_rate", 0.001),
        ("mgtop_train_loss", 0.5),
        ("mgtop_validation_loss", 0.4),
        ("mgtop_validation_accuracy_ratio", 0.9),
        ("mgtop_global_batch_size", 64.0),
        ("mgtop_checkpoints_total", 1.0),
        (
            r#"mgtop_step_time_seconds_total{part="compute",rank="0",worker="nodeA/gpu0"}"#,
            0.04,
        ),
        (
            r#"mgtop_step_time_seconds_total{part="wait",rank="1",worker="nodeA/gpu1"}"#,
            0.012,
        ),
        (
            r#"mgtop_loader_busy_seconds_total{rank="1",worker="nodeA/gpu1"}"#,
            0.02,
        ),
        (
            r#"mgtop_loader_busy_seconds_total{rank="0",worker="nodeA/gpu0"}"#,
            0.0,
        ),
        (
            r#"mgtop_straggler_warnings_total{cause="data-bound",rank="1"}"#,
            1.0,
        ),
        // the series no warning has touched are there, at 0
        (
            r#"mgtop_straggler_warnings_total{cause="network",rank="0"}"#,
            0.0,
        ),
        (r#"mgtop_degraded_warnings_total{rank="1"}"#, 0.0),
        ("mgtop_grad_spike_warnings_total", 3.0),
        (r#"mgtop_bound{limit="launch-bound"}"#, 0.0),
        (
            r#"mgtop_device_utilization_ratio{rank="0",worker="nodeA/gpu0"}"#,
            0.5,
        ),
        (r#"mgtop_run_state{state="running"}"#, 1.0),
        ("mgtop_process_resident_memory_bytes", 1048576.0),
    ];
    for (series, v) in training {
        let got = value(&t, series).unwrap_or_else(|| panic!("no {series}:\n{t}"));
        assert!((got - v).abs() < 1e-9, "{series} = {got}, not {v}");
    }
    // 32 samples x 3 MFLOP in 15 ms on an H100's 66.9 fp32 TFLOP/s
    let mfu = r#"mgtop_mfu_ratio{precision="fp32",rank="1",worker="nodeA/gpu1"}"#;
    let want = 3e6 * 32.0 / 0.015 / 66.9e12;
    let got = value(&t, mfu).unwrap_or_else(|| panic!("no {mfu}:\n{t}"));
    assert!((got / want - 1.0).abs() < 1e-9, "{got} vs {want}");
    promtool_accepts(&t);
    p.event(
        &Event::Finished {
            step: 4,
            ending: Ending::Stopped,
        },
        Duration::from_secs(1),
        true,
    )
    .unwrap();
    let t = text(&reg);
    assert_eq!(value(&t, r#"mgtop_run_state{state="stopped"}"#), Some(1.0));
    assert_eq!(value(&t, r#"mgtop_run_state{state="running"}"#), Some(0.0));
    promtool_accepts(&t);
}

#[test]
fn the_rate_falls_in_a_stall_and_is_0_while_paused_and_a_resumed_run_starts_at_its_step() {
    let reg = Registry::new();
    let resumed = RunInfo {
        start_step: 195,
        ..info()
    };
    let mut p = Prometheus::new(&reg, &resumed, &[]).unwrap();
    assert_eq!(value(&text(&reg), "mgtop_step"), Some(195.0));
    assert_eq!(value(&text(&reg), "mgtop_samples_per_second"), None);
    // steps of 64 samples at 1000 samples/s, the last at 60 ms; no step for 2 s after it
    for s in 1..=4 {
        p.step(&row(s), Some(1000.0), true).unwrap();
    }
    let sample = |p: &mut Prometheus, ms| {
        p.telemetry(Duration::from_millis(ms), &[], None).unwrap();
        value(&text(&reg), "mgtop_samples_per_second").unwrap()
    };
    assert_eq!(sample(&mut p, 100), 1000.0);
    assert!((sample(&mut p, 2060) - 32.0).abs() < 1e-9);
    // paused: 0, whatever the samples say; resumed, the next step's rate
    let control = |p: &mut Prometheus, applied| {
        let ev = Event::Control { step: 4, applied };
        p.event(&ev, Duration::from_secs(3), true).unwrap();
    };
    control(&mut p, Applied::Paused);
    assert_eq!(sample(&mut p, 2500), 0.0);
    assert_eq!(sample(&mut p, 9000), 0.0);
    control(&mut p, Applied::Resumed);
    p.step(&row(5), Some(900.0), true).unwrap();
    assert_eq!(value(&text(&reg), "mgtop_samples_per_second"), Some(900.0));
}

#[test]
fn a_failure_stays_the_state_after_the_end() {
    let reg = Registry::new();
    let mut p = Prometheus::new(&reg, &info(), &[]).unwrap();
    let fail = Event::Failed {
        rank: 1,
        step: 3,
        message: "x".into(),
    };
    p.event(&fail, Duration::ZERO, true).unwrap();
    p.event(
        &Event::Finished {
            step: 3,
            ending: Ending::Stopped,
        },
        Duration::ZERO,
        true,
    )
    .unwrap();
    let t = text(&reg);
    assert_eq!(value(&t, r#"mgtop_run_state{state="failed"}"#), Some(1.0));
    assert_eq!(value(&t, r#"mgtop_run_state{state="stopped"}"#), Some(0.0));
}

#[test]
fn a_scrape_before_the_run_has_started_says_it_is_starting() {
    let reg = Registry::new();
    let t = text(&reg);
    assert_eq!(value(&t, r#"mgtop_run_state{state="starting"}"#), Some(1.0));
    promtool_accepts(&t);
    let _p = Prometheus::new(&reg, &info(), &[]).unwrap();
    let t = text(&reg);
    assert_eq!(value(&t, r#"mgtop_run_state{state="starting"}"#), Some(0.0));
    assert_eq!(value(&t, r#"mgtop_run_state{state="running"}"#), Some(1.0));
}

#[test]
fn another_machines_gpus_are_shown_from_their_samples_without_this_machines_identities() {
    let mut info = info();
    info.hosts = vec!["nodeA".into(), "nodeB".into()];
    let reg = Registry::new();
    let here = |uuid: &str| GpuIdentity {
        index: Some(0),
        uuid: Some(uuid.into()),
        minor: Some(0),
    };
    // (NVML here finds a GPU at the other machine's GPU's bus id too: another GPU)
    let mut p = Prometheus::new(&reg, &info, &[here("GPU-here"), here("GPU-wrong")]).unwrap();
    let busy = |u| DeviceSample {
        util: Some(u),
        ..DeviceSample::default()
    };
    p.telemetry(Duration::ZERO, &[busy(0.5), busy(0.25)], None)
        .unwrap();
    let t = text(&reg);
    assert_eq!(t.matches("DCGM_FI_DEV_GPU_UTIL{").count(), 2, "{t}");
    assert!(!t.contains("GPU-wrong"), "{t}");
    let there = |name: &str| {
        (t.lines())
            .find(|l| l.starts_with(name) && l.contains(r#"Hostname="nodeB""#))
            .map(str::to_string)
    };
    let util = there("DCGM_FI_DEV_GPU_UTIL{").unwrap_or_default();
    assert!(
        util.contains(r#"UUID="""#) && util.contains(r#"rank="1""#),
        "{t}"
    );
    assert!(util.ends_with(" 25"), "{util}");
    let series = r#"mgtop_device_utilization_ratio{rank="1",worker="nodeB/gpu1"}"#;
    assert_eq!(value(&t, series), Some(0.25));
    // a sample with nothing read (the other machine not heard from): left out
    p.telemetry(Duration::ZERO, &[busy(0.5), DeviceSample::default()], None)
        .unwrap();
    let t = text(&reg);
    assert_eq!(t.matches("DCGM_FI_DEV_GPU_UTIL{").count(), 1, "{t}");
}

#[test]
fn a_run_that_ended_trains_nothing_and_its_gpus_are_no_longer_read() {
    let ids = [GpuIdentity::default(), GpuIdentity::default()];
    for end in [
        Event::Finished {
            step: 4,
            ending: Ending::Completed,
        },
        Event::Failed {
            rank: 1,
            step: 4,
            message: "x".into(),
        },
    ] {
        let reg = Registry::new();
        let mut p = Prometheus::new(&reg, &info(), &ids).unwrap();
        for s in 1..=4 {
            p.step(&row(s), Some(1000.0), true).unwrap();
        }
        let busy = DeviceSample {
            util: Some(0.8),
            ..DeviceSample::default()
        };
        let devices = [busy.clone(), busy];
        p.telemetry(Duration::from_millis(70), &devices, None)
            .unwrap();
        let util = r#"mgtop_device_utilization_ratio{rank="0",worker="nodeA/gpu0"}"#;
        assert_eq!(value(&text(&reg), util), Some(0.8));
        assert!(text(&reg).contains("DCGM_FI_DEV_GPU_UTIL{"));
        p.event(&end, Duration::from_millis(80), true).unwrap();
        // (the screen's summary keeps the endpoint up: a telemetry sample after the end
        // changes nothing)
        p.telemetry(Duration::from_millis(90), &devices, None)
            .unwrap();
        let t = text(&reg);
        assert_eq!(value(&t, "mgtop_samples_per_second"), Some(0.0), "{end:?}");
        assert_eq!(value(&t, util), Some(0.0), "{end:?}");
        assert!(!t.contains("DCGM_FI_DEV_GPU_UTIL{"), "{end:?}:\n{t}");
        // what it did stays
        assert_eq!(value(&t, "mgtop_step"), Some(4.0));
    }
}

mod together;
