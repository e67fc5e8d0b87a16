//! Distribution strategies (`--strategy`): central storage trains exactly as mirrored, local SGD
//! averages exactly the ranks' parameters at its sync points, every strategy resumes from its
//! checkpoints and obeys the controls at a step every rank agrees on.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::compare::max_rel_diff;
use mgtop::backend::{CpuReplica, Replica, TrainState};
use mgtop::config::{Budget, DeviceSpec, RunConfig};
use mgtop::data::DataSpec;
use mgtop::engine::events::{Applied, Event};
use mgtop::engine::loader::{Cursor, RankLoader, Sharding};
use mgtop::engine::strategy::Strategy;
use mgtop::engine::{Engine, RunResult};
use mgtop::nn::model::{Model, ModelSpec};
use mgtop::nn::optim::{OptState, OptimizerKind};
use mgtop::nn::shape::Shape;

fn small(ranks: usize, steps: u64, n: usize, ckpt: &Path) -> RunConfig {
    RunConfig {
        devices: DeviceSpec::Cpu(ranks),
        model: ModelSpec::mlp(&[16, 8]),
        data: DataSpec::Synthetic { n, d: 12, c: 4 },
        inputs: mgtop::data::DataOptions::no_validation(),
        budget: Budget::Steps(steps),
        batch_per_replica: 8,
        checkpoint_dir: ckpt.to_path_buf(),
        final_checkpoint: false,
        ..RunConfig::default()
    }
}

fn run(cfg: RunConfig) -> RunResult {
    Engine::run(cfg).expect("run succeeds")
}

fn local(every: u64, warmup: u64, moments: bool) -> Strategy {
    Strategy::LocalSgd {
        every,
        warmup,
        moments,
    }
}

fn lr_for(kind: OptimizerKind) -> f32 {
    if kind == OptimizerKind::Sgd {
        0.1
    } else {
        3e-3
    }
}

#[test]
fn central_storage_trains_exactly_as_mirrored() {
    let dir = tempfile::tempdir().unwrap();
    // 301 samples: every 19th step is a short global batch, cut unevenly among the ranks
    for (kind, accum, ranks, rebalance) in [
        (OptimizerKind::Sgd, 1, 2, false),
        (OptimizerKind::Adam, 1, 3, false),
        (OptimizerKind::Momentum, 3, 2, false),
        (OptimizerKind::Adam, 1, 3, true),
    ] {
        let mut mirrored = small(ranks, 50, 301, dir.path());
        (mirrored.optimizer, mirrored.grad_accum) = (kind, accum);
        mirrored.lr = Some(lr_for(kind));
        if rebalance {
            (mirrored.slow_rank, mirrored.rebalance) = (Some((1, 4.0)), true);
            mirrored.budget = Budget::Steps(120);
        }
        let central = RunConfig {
            strategy: Strategy::CentralStorage,
            ..mirrored.clone()
        };
        let (m, c) = (run(mirrored), run(central));
        let what = format!("{kind}, accum {accum}, {ranks} ranks, rebalance {rebalance}");
        let d = max_rel_diff(&c.state.params, &m.state.params);
        assert!(d <= 1e-5, "{what}: weights differ by {d:e}");
        let d = max_rel_diff(&c.state.opt.m, &m.state.opt.m);
        assert!(d <= 1e-5, "{what}: optimizer state differs by {d:e}");
        assert_eq!(c.state.opt.t, m.state.opt.t);
        assert_eq!(c.losses.len(), m.losses.len());
        let d = max_rel_diff(&c.losses, &m.losses);
        assert!(d <= 1e-5, "{what}: losses differ by {d:e}");
    }
}

#[test]
fn local_sgd_1_is_mirrored_for_sgd() {
    let dir = tempfile::tempdir().unwrap();
    // 336 samples: every global batch (16 or 24) is whole, so each rank's mean gradient weighs the same
    for (ranks, warmup) in [(2, 0), (3, 7)] {
        let mut mirrored = small(ranks, 40, 336, dir.path());
        mirrored.optimizer = OptimizerKind::Sgd;
        mirrored.lr = Some(0.1);
        let local = RunConfig {
            strategy: local(1, warmup, false),
            ..mirrored.clone()
        };
        let (m, l) = (run(mirrored), run(local));
        let d = max_rel_diff(&l.state.params, &m.state.params);
        assert!(d <= 1e-5, "{ranks} ranks: weights differ by {d:e}");
    }
}

/// Local SGD by hand: each rank's replica steps on its own shard, and every `every` steps (and
/// at the end) the ranks' parameters (and moments) become their mean.
fn by_hand(cfg: &RunConfig, ranks: usize, every: u64, steps: u64, moments: bool) -> TrainState {
    let data = mgtop::data::load(&cfg.data, &cfg.inputs, cfg.seed).unwrap();
    let train = Arc::new(data.train);
    let model = Model::new(Shape::Flat(train.features), &cfg.model, train.classes).unwrap();
    let init = TrainState {
        params: model.init_params(cfg.seed),
        opt: OptState::new(cfg.optimizer, model.n_params),
        buffers: model.init_buffers(),
    };
    let sharding = Sharding {
        per_replica: cfg.batch_per_replica,
        ranks,
        accum: 1,
        split: None,
    };
    let mut loaders: Vec<RankLoader> = (0..ranks)
        .map(|r| {
            RankLoader::new(
                train.clone(),
                cfg.seed,
                r,
                Cursor::default(),
                sharding.clone(),
                0,
                1,
            )
            .unwrap()
        })
        .collect();
    let mut replicas: Vec<CpuReplica> = (0..ranks)
        .map(|_| CpuReplica::new(model.clone(), cfg.optimizer, 0.0, init.clone()))
        .collect();
    let lr = cfg.lr.unwrap();
    let average = |replicas: &mut Vec<CpuReplica>| {
        let states: Vec<TrainState> = replicas.iter().map(|r| r.export()).collect();
        let mean = |get: &dyn Fn(&TrainState) -> &Vec<f32>| -> Vec<f32> {
            (0..get(&states[0]).len())
                .map(|i| states.iter().map(|s| get(s)[i]).sum::<f32>() / ranks as f32)
                .collect()
        };
        let params = mean(&|s| &s.params);
        for (r, s) in replicas.iter_mut().zip(&states) {
            let mut opt = s.opt.clone();
            if moments {
                (opt.m, opt.v) = (mean(&|s| &s.opt.m), mean(&|s| &s.opt.v));
            }
            r.import(&TrainState {
                params: params.clone(),
                opt,
                buffers: s.buffers.clone(),
            });
        }
    };
    for step in 1..=steps {
        for (l, r) in loaders.iter_mut().zip(replicas.iter_mut()) {
            let batch = l.next_batch();
            r.compute_grads(&batch.micro, None);
            r.apply_update(lr);
        }
        if step % every == 0 || step == steps {
            average(&mut replicas);
        }
    }
    replicas[0].export()
}

#[test]
fn local_sgd_averages_exactly_the_ranks_parameters_at_each_sync() {
    let dir = tempfile::tempdir().unwrap();
    // 7 steps, H = 3: averages after steps 3 and 6, and at the end of the run (7)
    for (kind, moments) in [
        (OptimizerKind::Sgd, false),
        (OptimizerKind::Adam, false),
        (OptimizerKind::Adam, true),
    ] {
        let mut cfg = small(2, 7, 301, dir.path());
        cfg.optimizer = kind;
        cfg.lr = Some(lr_for(kind));
        cfg.strategy = local(3, 0, moments);
        let engine = run(cfg.clone());
        let hand = by_hand(&cfg, 2, 3, 7, moments);
        assert_eq!(
            engine.state, hand,
            "{kind}, moments {moments}: the engine's local SGD is not the hand computation"
        );
        // and the replicas did diverge between averages: one average at the end only differs
        let once = by_hand(&cfg, 2, 7, 7, moments);
        assert_ne!(engine.state.params, once.params);
    }
}

#[test]
fn local_sgd_learns_the_digits_with_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = RunConfig {
        checkpoint_dir: dir.path().into(),
        final_checkpoint: false,
        strategy: "local-sgd:8".parse().unwrap(),
        ..RunConfig::default()
    };
    let r = run(cfg);
    let acc = r.best_val_accuracy.expect("validation ran");
    assert!(acc >= 0.95, "validation accuracy {acc}");
}

#[test]
fn every_strategy_resumes_from_its_checkpoint_as_if_never_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let k = 37; // mid-epoch, and a sync point of local-sgd:3 after 4 warm-up steps
    for (strategy, kind) in [
        (Strategy::CentralStorage, OptimizerKind::Adam),
        (local(3, 4, false), OptimizerKind::Sgd),
        (local(3, 4, true), OptimizerKind::Adam),
    ] {
        let ckpt = dir.path().join(strategy.to_string());
        let mut base = small(2, 2 * k, 301, &ckpt);
        (base.strategy, base.optimizer) = (strategy, kind);
        base.lr = Some(lr_for(kind));
        let straight = run(base.clone());
        let half = run(RunConfig {
            budget: Budget::Steps(k),
            final_checkpoint: true,
            ..base.clone()
        });
        assert!(half.last_checkpoint.is_some());
        let rest = run(RunConfig {
            resume: Some(ckpt.clone()),
            ..base
        });
        assert_eq!(
            &straight.losses[..k as usize],
            &half.losses[..],
            "{strategy}"
        );
        assert_eq!(
            &straight.losses[k as usize..],
            &rest.losses[..],
            "{strategy}"
        );
        assert_eq!(straight.state, rest.state, "{strategy}");
    }
}

#[test]
fn controls_apply_at_a_step_every_rank_agrees_on_with_every_strategy() {
    let dir = tempfile::tempdir().unwrap();
    for strategy in [Strategy::CentralStorage, local(4, 2, false)] {
        let mut cfg = small(2, 1_000_000, 4800, &dir.path().join(strategy.to_string()));
        (cfg.strategy, cfg.lr) = (strategy, Some(1e-3));
        let engine = Engine::start(cfg).unwrap();
        let ctl = engine.controller();
        let events = engine.events().clone();
        let wait_for = |pred: &dyn Fn(&Event) -> bool| common::next_event(&events, pred);
        ctl.pause().unwrap();
        let paused = wait_for(&|e| {
            matches!(
                e,
                Event::Control {
                    applied: Applied::Paused,
                    ..
                }
            )
        });
        ctl.set_batch_per_replica(16).unwrap();
        ctl.resume().unwrap();
        let Event::Control { step: at, .. } = wait_for(&|e| {
            matches!(
                e,
                Event::Control {
                    applied: Applied::BatchSize { .. },
                    ..
                }
            )
        }) else {
            unreachable!()
        };
        let Event::Control { step: p, .. } = paused else {
            unreachable!()
        };
        // local SGD: only where the ranks hold one model (warm-up steps or every 4th after)
        assert!(
            strategy.synced_after(p) && strategy.synced_after(at),
            "{strategy}: {p} {at}"
        );
        ctl.checkpoint().unwrap();
        let Event::Checkpoint { step: saved, .. } =
            wait_for(&|e| matches!(e, Event::Checkpoint { .. }))
        else {
            unreachable!()
        };
        assert!(strategy.synced_after(saved), "{strategy}: saved at {saved}");
        ctl.stop(true).unwrap();
        let steps = engine.steps().clone();
        let r = engine.join().unwrap();
        assert!(r.stopped && r.last_checkpoint.is_some(), "{strategy}");
        for s in steps.try_iter() {
            let expect = if s.step <= at { 8 } else { 16 };
            assert_eq!(
                s.per_replica, expect,
                "{strategy}: rank {} step {}",
                s.rank, s.step
            );
        }
    }
}

#[test]
fn scale_compares_strategies_side_by_side_even_with_a_straggler() {
    let dir = tempfile::tempdir().unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_mgtop-train"))
        .current_dir(dir.path())
        .args([
            "scale",
            "--counts",
            "1,2",
            "--strategies",
            "mirrored,central-storage,local-sgd:4,moments",
            "--local-sgd-warmup",
            "3",
            "--slow-rank",
            "1:2.0",
            "--prefetch-modes",
            "on",
            "--warmup-steps",
            "5",
            "--seconds",
            "0.1",
            "--repeat",
            "1",
            "--out",
            "s.json",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{out}");
    // (the fault is part of what was measured: said with the workload)
    assert!(out.contains("--slow-rank 1:2\n"), "{out}");
    assert!(out.contains("strategy") && out.contains("val acc"), "{out}");
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("s.json")).unwrap()).unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "mirrored",
            "mirrored",
            "central-storage",
            "central-storage",
            "local-sgd:4,moments",
            "local-sgd:4,moments"
        ]
    );
    for r in &rows {
        // each strategy's speedup is against its own 1-device point
        if r["devices"] == 1 {
            assert_eq!(r["speedup"], 1.0, "{r}");
        }
        // each row names the faults its ranks had: rank 1 is slow only where there is one
        let faults = if r["devices"] == 1 {
            ""
        } else {
            "--slow-rank 1:2"
        };
        assert_eq!(r["faults"], faults, "{r}");
        let acc = r["val_accuracy"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&acc), "{r}");
        // central storage moves parameters and gradients through the host every step,
        // mirrored never
        let transfer = r["transfer_share"].as_f64().unwrap();
        match r["strategy"].as_str().unwrap() {
            "mirrored" => assert_eq!(transfer, 0.0, "{r}"),
            "central-storage" => assert!(transfer > 0.0, "{r}"),
            _ => {}
        }
    }
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_mgtop-train"))
        .current_dir(dir.path())
        .args(["scale", "--strategies", "mirrored,ring"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("--strategies: unknown strategy `ring`"),
        "{err}"
    );
}

#[test]
fn bad_strategy_values_exit_1_naming_the_value_and_the_fix() {
    for (args, says) in [
        (
            &["--strategy", "local-sgd:0"][..],
            &["local-sgd:0", "local-sgd:1 averages after every step"][..],
        ),
        (
            &["--strategy", "parameter-server"][..],
            &["unknown strategy `parameter-server`", "central-storage"][..],
        ),
        (
            &["--local-sgd-warmup", "10"][..],
            &["--local-sgd-warmup", "--strategy local-sgd:8"][..],
        ),
    ] {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_mgtop-train"))
            .args(["--headless", "--steps", "1"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(says.iter().all(|s| err.contains(s)), "{args:?}: {err}");
    }
}

#[test]
fn the_ui_header_says_replicas_diverge_and_when_they_next_meet() {
    use mgtop::front::tui::{demo, render, theme::Theme};
    use ratatui::{backend::TestBackend, layout::Rect, Terminal};
    let header_of = |strategy: Strategy, budget: Option<Budget>| {
        let mut app = demo::app(2, 150);
        app.info.strategy = strategy;
        if let Some(b) = budget {
            app.info.budget = b;
            // (the engine's rows say where a step budget ends)
            if let (Budget::Steps(n), Some(r)) = (b, app.last_row.as_mut()) {
                r.ends_at = r
                    .ends_at
                    .map(|e| mgtop::engine::events::EndsAt { run: n, ..e });
            }
        }
        let theme = Theme::embedded("dark").unwrap();
        let mut t = Terminal::new(TestBackend::new(200, 3)).unwrap();
        t.draw(|f| render::render_header(f, Rect::new(0, 0, 200, 3), &app, &theme))
            .unwrap();
        t.backend().to_string()
    };
    let header = |strategy: Strategy| header_of(strategy, None);
    let s = header(local(8, 100, false));
    assert!(
        s.contains(
            "local-sgd:8: replicas diverge by design (loss: rank 0's shard); next sync at step 156"
        ),
        "{s}"
    );
    // a run of 153 steps is averaged at its end, before step 156
    let s = header_of(local(8, 100, false), Some(Budget::Steps(153)));
    assert!(s.contains("; averaged at the end, step 153"), "{s}");
    // an epoch budget: the epoch's validation (after step 161 of the demo's 23-step epochs)
    // comes before the scheduled sync at 164
    let s = header(local(32, 100, false));
    assert!(
        s.contains("; averaged for the epoch's validation after step 161"),
        "{s}"
    );
    let s = header(local(8, 200, false));
    assert!(
        s.contains("synchronous warm-up: replicas step alone after step 200"),
        "{s}"
    );
    assert!(header(Strategy::CentralStorage).contains("central-storage"));
    assert!(!header(Strategy::Mirrored).contains("mirrored"));
}

#[test]
fn local_sgd_with_per_rank_moments_refuses_a_resume_it_could_not_make_exact() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("ck");
    let mut base = small(2, 80, 301, &ckpt);
    (base.strategy, base.optimizer) = (local(3, 4, false), OptimizerKind::Momentum);
    base.lr = Some(lr_for(OptimizerKind::Momentum));
    run(RunConfig {
        budget: Budget::Steps(37),
        final_checkpoint: true,
        ..base.clone()
    });
    let e = Engine::run(RunConfig {
        resume: Some(ckpt.clone()),
        ..base.clone()
    })
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.contains("--strategy local-sgd:3 cannot be resumed as it was at step 37")
            && e.contains(": --strategy local-sgd:3,moments (averages")
            && e.contains("--strategy mirrored"),
        "{e}"
    );
    // the ways on it names take it, as does another period (a run of its own)
    for strategy in [local(3, 4, true), Strategy::Mirrored, local(5, 4, false)] {
        let r = Engine::run(RunConfig {
            resume: Some(ckpt.clone()),
            strategy,
            budget: Budget::Steps(40),
            ..base.clone()
        });
        assert!(r.is_ok(), "{strategy}: {:?}", r.err());
    }
    // a checkpoint whose ranks held one set of moments goes on as local SGD: one of a
    // mirrored run, or of local SGD on one rank (the only moments there are)
    for (written, ranks) in [(Strategy::Mirrored, 2), (local(3, 4, false), 1)] {
        let ckpt = dir.path().join(format!("{written}-{ranks}"));
        let one = RunConfig {
            strategy: written,
            devices: DeviceSpec::Cpu(ranks),
            checkpoint_dir: ckpt.clone(),
            ..base.clone()
        };
        run(RunConfig {
            budget: Budget::Steps(37),
            final_checkpoint: true,
            ..one.clone()
        });
        let r = Engine::run(RunConfig {
            resume: Some(ckpt),
            strategy: local(3, 4, false),
            budget: Budget::Steps(40),
            ..one
        });
        assert!(r.is_ok(), "{written} on {ranks}: {:?}", r.err());
    }
}

/// What a run of local SGD says of itself where it would not do what its name says: on one
/// rank it is mirrored (and its header and records say so), a period past the run's end makes
/// no scheduled average, `,moments` with SGD averages no moments.
#[test]
fn local_sgd_says_what_it_will_not_do() {
    let dir = tempfile::tempdir().unwrap();
    let started = |ranks, strategy, optimizer| {
        let cfg = RunConfig {
            strategy,
            optimizer,
            ..small(ranks, 30, 301, dir.path())
        };
        let engine = Engine::start(cfg).expect("starts");
        let info = engine.info().clone();
        engine.join().expect("runs");
        (info.strategy, info.model_notes.join("\n"))
    };
    let (strategy, notes) = started(1, local(4, 0, false), OptimizerKind::Adam);
    assert_eq!(strategy, Strategy::Mirrored);
    assert!(
        notes.contains("one rank has no other to share with; it trains as mirrored"),
        "{notes}"
    );
    let (strategy, notes) = started(2, local(1000, 0, false), OptimizerKind::Adam);
    assert_eq!(strategy, local(1000, 0, false));
    assert!(
        notes.contains(
            "--strategy local-sgd:1000: the run is 30 steps: no scheduled average falls due"
        ),
        "{notes}"
    );
    let (_, notes) = started(2, local(4, 0, true), OptimizerKind::Sgd);
    assert!(
        notes.contains("--optimizer sgd keeps no moments; only the parameters are averaged"),
        "{notes}"
    );
    let (_, notes) = started(2, local(4, 0, false), OptimizerKind::Adam);
    assert!(!notes.contains("--strategy"), "{notes}");
    // batch norm's statistics summed across the ranks meet them every step
    let cfg = RunConfig {
        strategy: local(4, 0, false),
        model: "dense16,bn,dense8".parse().unwrap(),
        sync_bn: true,
        ..small(2, 5, 301, dir.path())
    };
    let engine = Engine::start(cfg).expect("starts");
    let notes = engine.info().model_notes.join("\n");
    engine.join().expect("runs");
    assert!(
        notes.contains("--sync-bn with --strategy local-sgd:4: the ranks still exchange batch-norm statistics in every step's forward pass"),
        "{notes}"
    );
}

/// Local SGD on one rank trains as mirrored, stops included: a stop is taken after the step
/// under way (it waited for an average that one rank never makes, and trained on).
#[test]
fn local_sgd_on_one_rank_stops_after_the_step_under_way() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = RunConfig {
        strategy: local(1_000_000, 0, false),
        ..small(1, 100_000_000, 301, dir.path())
    };
    let engine = Engine::start(cfg).expect("starts");
    assert_eq!(engine.info().stops_at_average(), None);
    std::thread::sleep(std::time::Duration::from_millis(300));
    engine.controller().stop(false).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(engine.join());
    });
    let r = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the stop was taken")
        .unwrap();
    // (not at the first average, a million steps on)
    assert!(r.stopped && r.steps < 1_000_000, "{}", r.steps);
}

#[test]
fn batch_norm_statistics_reach_checkpoints_under_every_strategy_and_checkpoints_leave_them_be() {
    let dir = tempfile::tempdir().unwrap();
    let base = RunConfig {
        model: "conv4k3p1,bn,pool2,dense8".parse().unwrap(),
        data: DataSpec::SyntheticImages {
            n: 240,
            c: 2,
            h: 6,
            w: 6,
            k: 3,
        },
        optimizer: OptimizerKind::Momentum,
        lr: Some(0.05),
        ..small(2, 30, 240, dir.path())
    };
    let mirrored = run(base.clone());
    let b = &mirrored.state.buffers;
    // (the running means start at 0 and the variances at 1: trained, they moved)
    assert!(b.iter().any(|&v| v != 0.0 && v != 1.0), "{b:?}");
    for strategy in [Strategy::CentralStorage, local(4, 0, false)] {
        let other = run(RunConfig {
            strategy,
            ..base.clone()
        });
        let d = max_rel_diff(&other.state.buffers, b);
        // (local SGD's replicas normalise as mirrored's do: only their weights drift apart)
        let within = if strategy == Strategy::CentralStorage {
            1e-5
        } else {
            0.5
        };
        assert!(
            d <= within,
            "{strategy}: running statistics differ by {d:e}"
        );
    }
    // a checkpoint averages the statistics into what it saves, not into the replicas: the run
    // goes on bit for bit as one that saved nothing
    let saving = run(RunConfig {
        checkpoint_every: Some(7),
        ..base.clone()
    });
    assert_eq!(saving.state, mirrored.state);
    assert_eq!(saving.losses, mirrored.losses);
}
