use super::*;
use crate::engine::Device;
use crate::engine::RunInfo;

#[test]
fn small_losses_keep_their_digits() {
    assert_eq!(loss_value(0.1635, 4), "0.1635");
    assert_eq!(loss_value(0.1635, 3), "0.164");
    assert_eq!(loss_value(0.0003, 3), "3.0e-4");
    assert_eq!(loss_value(0.00003, 4), "3.00e-5");
    assert_eq!(loss_value(0.0, 3), "0.000");
    assert_eq!(loss_value(99999.0, 4), "99999.0000");
    assert_eq!(loss_value(9.6954565e25, 4), "9.70e25");
    // an epoch's line too: not "train loss 0.0000" for a loss that is not 0
    let line = event_line(
        &Event::EpochDone {
            epoch: 3,
            step: 30,
            train_loss: 3.9e-9,
            val_loss: None,
            val_accuracy: None,
            elapsed: std::time::Duration::from_secs(1),
        },
        Budget::Epochs(5),
        1,
    );
    assert!(line.unwrap().ends_with("train loss 3.90e-9"));
    // a rebalanced split is a micro-batch's: the accumulation counts in the global batch
    let split = Event::Control {
        step: 50,
        applied: Applied::Split(vec![93, 35]),
    };
    assert_eq!(
        event_line(&split, Budget::Epochs(5), 2).unwrap(),
        "rebalanced from step 51: samples per rank 93/35 x 2 accumulated (global batch 256 unchanged)"
    );
}

fn gpus(mut info: RunInfo) -> RunInfo {
    info.devices = (0..info.devices.len())
        .map(|index| Device::Gpu {
            index,
            name: "NVIDIA H100 80GB HBM3".into(),
            pci_bus_id: None,
            arch: 90,
        })
        .collect();
    info
}

#[test]
fn a_gpu_run_says_when_its_step_metrics_are_read_and_a_cpu_run_does_not() {
    let mut info = RunInfo::example(2);
    info.step_metrics = Some("read one step late".into());
    let said = describe(&gpus(info.clone()));
    assert!(
        said.contains(&"step metrics: read one step late".to_string()),
        "{said:?}"
    );
    let said = describe(&info);
    assert!(
        !said.iter().any(|l| l.starts_with("step metrics")),
        "{said:?}"
    );
}

#[test]
fn the_cuda_graph_line_is_a_gpu_runs_and_a_cpu_run_asking_for_graphs_is_told() {
    use crate::config::cuda_graph::CudaGraph;
    let (on, line) = CudaGraph::On.resolve(false).unwrap();
    assert!(on);
    let mut info = RunInfo::example(2);
    info.cuda_graph = Some(line.clone());
    let said = describe(&gpus(info.clone()));
    assert!(said.contains(&format!("cuda graph: {line}")), "{said:?}");
    let said = describe(&info);
    assert!(
        !said.iter().any(|l| l.starts_with("cuda graph")),
        "{said:?}"
    );
    assert!(
        said.iter()
            .any(|l| l.contains("--cuda-graph applies to GPUs")),
        "{said:?}"
    );
    // the default (auto) and off say nothing on CPU workers
    for mode in [CudaGraph::default(), CudaGraph::Off] {
        info.cuda_graph = mode.resolve(false).ok().map(|(_, l)| l);
        assert!(
            !describe(&info).iter().any(|l| l.contains("cuda")),
            "{mode}"
        );
    }
}

#[test]
fn a_step_line_s_batch_is_what_the_ranks_took() {
    use crate::front::tui::demo;
    use crate::observe::monitor::Monitor;
    let row = |samples: usize| {
        let mut m = Monitor::new(2);
        let mut last = None;
        for r in 0..2 {
            let mut s = demo::step(r, 2, 1);
            s.samples = samples;
            s.global_samples = 2 * samples;
            last = m.on_step(s);
        }
        last.unwrap()
    };
    let info = RunInfo {
        budget: Budget::Steps(9),
        ..RunInfo::example(2)
    };
    let line = |samples| step_line(&row(samples), None, &info, None);
    assert!(line(32).contains("| batch 32x2=64 |"), "{}", line(32));
    // an epoch's short last batch at 32 per replica
    assert!(line(15).contains("| batch 15x2=30 |"), "{}", line(15));
    // three micro-batches of 32 accumulated, as the header says it
    assert!(line(96).contains("| batch 32x2x3=192 |"), "{}", line(96));
}

#[test]
fn a_step_line_says_the_gradient_s_norm_and_whether_it_was_clipped() {
    use crate::front::tui::demo;
    use crate::observe::monitor::Monitor;
    let mut m = Monitor::new(1);
    let mut s = demo::step(0, 1, 1);
    s.grad_norm = 2.5;
    let row = m.on_step(s).unwrap();
    let clip = |c| RunInfo {
        clip_grad_norm: c,
        ..RunInfo::example(1)
    };
    let line = step_line(&row, None, &clip(None), None);
    assert!(line.contains("| grad norm 2.500 |"), "{line}");
    let line = step_line(&row, None, &clip(Some(1.0)), None);
    assert!(line.contains("| grad norm 2.500 clipped |"), "{line}");
    let line = step_line(&row, None, &clip(Some(4.0)), None);
    assert!(line.contains("| grad norm 2.500 |"), "{line}");
    // a file from before norms were recorded
    let mut old = row.clone();
    old.grad_norm = f32::NAN;
    assert!(step_line(&old, None, &clip(None), None).contains("| grad norm - |"));
}

#[test]
fn the_batch_line_says_a_step_takes_the_whole_split_where_the_cut_batch_rounds_past_it() {
    let batch_line = |per_replica, train_samples| {
        let info = RunInfo {
            per_replica,
            train_samples,
            budget: Budget::Steps(3),
            ..RunInfo::example(50)
        };
        (describe(&info).into_iter())
            .find(|l| l.starts_with("batch: "))
            .unwrap()
    };
    // 29 x 50 = 1450 of a split of 1438
    assert_eq!(
        batch_line(29, 1438),
        "batch: 29 per replica x 50 ranks = 1438 global (the whole training split: the last shares take fewer); 3 steps"
    );
    assert_eq!(
        batch_line(28, 1438),
        "batch: 28 per replica x 50 ranks = 1400 global; 3 steps"
    );
}

#[test]
fn a_step_line_of_many_ranks_sums_them_up() {
    use crate::front::tui::demo;
    use crate::observe::monitor::Monitor;
    assert_eq!(per_rank(&[170, 86]), "170/86");
    let sizes: Vec<usize> = (0..50).map(|r| if r < 38 { 29 } else { 28 }).collect();
    assert_eq!(per_rank(&sizes), "29x38+28x12");
    // a rebalanced split of 16: each size counted wherever its ranks are, the slow one named
    let split = [
        17, 16, 18, 5, 18, 17, 18, 16, 17, 17, 15, 16, 17, 17, 17, 15,
    ];
    assert_eq!(per_rank(&split), "18x3+17x7+16x3+15x2+5x1");
    assert_eq!(super::fewest(&split), "; fewest: r3");
    assert_eq!(super::fewest(&sizes[..12]), "");
    let ranks = 12;
    let mut m = Monitor::new(ranks);
    let mut last = None;
    for r in 0..ranks {
        let mut s = demo::step(r, ranks, 1);
        s.compute = std::time::Duration::from_millis(10 + r as u64);
        (s.data_wait, s.optimizer, s.compute_cpu) = Default::default();
        last = m.on_step(s);
    }
    let line = step_line(&last.unwrap(), None, &RunInfo::example(ranks), None);
    assert!(
        line.contains("| work ms median 16.00, fastest r0 10.00, slowest r11 21.00 |"),
        "{line}"
    );
    assert!(!line.contains(" r5 "), "{line}");
}

/// Local SGD's exchange every few steps, a slow batch now and then: the step line's shares are
/// the ranks' time since the previous line, not the one step's that happens to be logged.
#[test]
fn a_step_line_s_shares_are_over_the_steps_since_the_last_line() {
    use crate::front::tui::demo;
    use crate::observe::monitor::Monitor;
    use std::time::Duration;
    let mut m = Monitor::new(1);
    let mut rows = Vec::new();
    for step in 1..=4 {
        let mut s = demo::step(0, 1, step);
        // steps of 10 ms; the 4th waits 8 ms of its 10 at an exchange, the others none
        s.step_time = Duration::from_millis(10);
        s.data_wait = Duration::ZERO;
        s.comm = Duration::ZERO;
        s.transfer = Duration::ZERO;
        s.sync_wait = Duration::from_millis(if step == 4 { 8 } else { 0 });
        rows.extend(m.on_step(s));
    }
    let (first, last) = (rows[0].totals.unwrap(), rows[3].totals.unwrap());
    let window = last.since(&first);
    assert_eq!(window.steps, 3);
    let line = step_line(&rows[3], None, &RunInfo::example(1), Some(&window));
    // 8 ms of the 30 since step 1, where the step alone waited 80%
    assert!(line.contains("| data 0% comm 0% wait 27%"), "{line}");
    let alone = step_line(&rows[3], None, &RunInfo::example(1), None);
    assert!(alone.contains("| data 0% comm 0% wait 80%"), "{alone}");
}
