//! Convolutional models keep the engine's guarantees: data parallelism is exact (any rank count,
//! gradient accumulation, a short last batch), a checkpoint resumes the run exactly and holds
//! PyTorch-shaped `conv.L.weight` tensors, rebalancing changes the split but not the result, and
//! the defaults learn the digits.

mod common;

use std::path::Path;

use common::compare::max_rel_diff;
use mgtop::config::{Budget, DeviceSpec, RunConfig};
use mgtop::data::DataSpec;
use mgtop::engine::events::{Applied, Event};
use mgtop::engine::{Engine, RunResult};
use mgtop::nn::optim::OptimizerKind;

/// conv (padded) -> pool -> conv (strided) -> dense on 2x7x6 images, 4 classes; 301 training
/// samples, so epochs end with a short global batch.
fn small_cnn(ranks: usize, per_replica: usize, steps: u64, ckpt: &Path) -> RunConfig {
    RunConfig {
        devices: DeviceSpec::Cpu(ranks),
        model: "conv4k3p1,pool2,conv6k2s2,dense8".parse().unwrap(),
        data: DataSpec::SyntheticImages {
            n: 301,
            c: 2,
            h: 7,
            w: 6,
            k: 4,
        },
        inputs: mgtop::data::DataOptions::no_validation(),
        budget: Budget::Steps(steps),
        batch_per_replica: per_replica,
        checkpoint_dir: ckpt.to_path_buf(),
        final_checkpoint: false,
        ..RunConfig::default()
    }
}

fn run(cfg: RunConfig) -> RunResult {
    Engine::run(cfg).expect("run succeeds")
}

fn same_run(a: &RunResult, b: &RunResult, what: &str) {
    let d = max_rel_diff(&a.state.params, &b.state.params);
    assert!(d <= 1e-5, "{what}: weights differ by {d:e}");
    assert!(
        a.losses
            .iter()
            .zip(&b.losses)
            .all(|(x, y)| (x - y).abs() <= 1e-5 * y.abs().max(1.0)),
        "{what}: losses differ"
    );
}

#[test]
fn n_ranks_equal_one_rank_with_the_global_batch() {
    let dir = tempfile::tempdir().unwrap();
    for optimizer in [OptimizerKind::Sgd, OptimizerKind::Adam] {
        for accum in [1, 3] {
            for n in [2, 3] {
                let b = 8;
                let mut multi = small_cnn(n, b, 40, dir.path());
                multi.grad_accum = accum;
                multi.optimizer = optimizer;
                multi.lr = Some(if optimizer == OptimizerKind::Sgd {
                    0.05
                } else {
                    1e-3
                });
                let mut single = multi.clone();
                single.devices = DeviceSpec::Cpu(1);
                single.batch_per_replica = n * b;
                let what = format!("{optimizer} accum={accum} n={n}");
                same_run(&run(multi), &run(single), &what);
            }
        }
    }
}

#[test]
fn checkpoint_and_resume_reproduce_the_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let k = 23; // mid-epoch
    let straight = run(small_cnn(2, 8, 2 * k, dir.path()));
    let mut first = small_cnn(2, 8, k, dir.path());
    first.final_checkpoint = true;
    let half = run(first);
    let ckpt = half.last_checkpoint.clone().expect("final checkpoint");
    // PyTorch's names and layouts (nn.Linear's weight is [out, in])
    let bytes = std::fs::read(ckpt.join("model.safetensors")).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let shape = |name: &str| tensors.tensor(name).unwrap().shape().to_vec();
    assert_eq!(shape("conv.0.weight"), [4, 2, 3, 3]);
    assert_eq!(shape("conv.0.bias"), [4]);
    assert_eq!(shape("conv.2.weight"), [6, 4, 2, 2]);
    assert_eq!(shape("dense.3.weight"), [8, 6]);
    let mut second = small_cnn(2, 8, 2 * k, dir.path());
    second.resume = Some(ckpt);
    let rest = run(second);
    assert_eq!(&straight.losses[..k as usize], &half.losses[..]);
    assert_eq!(&straight.losses[k as usize..], &rest.losses[..]);
    assert_eq!(straight.state, rest.state);
}

#[test]
fn rebalancing_a_slow_rank_changes_the_split_but_not_the_result() {
    let dir = tempfile::tempdir().unwrap();
    let mut plain = small_cnn(3, 8, 160, dir.path());
    plain.slow_rank = Some((1, 4.0));
    let mut rebalanced = plain.clone();
    rebalanced.rebalance = true;
    let a = run(plain);
    let engine = Engine::start(rebalanced).expect("starts");
    let events = engine.events().clone();
    let collect = std::thread::spawn(move || events.iter().collect::<Vec<_>>());
    let b = engine.join().expect("run succeeds");
    let split = collect.join().unwrap().into_iter().any(|e| {
        matches!(e, Event::Control { applied: Applied::Split(s), .. } if s[1] < 8 && s.iter().sum::<usize>() == 24)
    });
    assert!(split, "the slow rank was given fewer samples");
    same_run(&a, &b, "rebalanced");
}

#[test]
fn the_defaults_learn_the_digits_with_a_small_cnn() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = RunConfig {
        model: "conv16k3,pool2,dense64".parse().unwrap(),
        checkpoint_dir: dir.path().into(),
        final_checkpoint: false,
        ..RunConfig::default()
    };
    let r = run(cfg);
    let acc = r.best_val_accuracy.expect("validation ran");
    assert!(acc >= 0.97, "val accuracy {acc}");
}

#[test]
fn a_batch_norm_model_resumes_with_its_running_statistics() {
    let dir = tempfile::tempdir().unwrap();
    let bn = |steps: u64| RunConfig {
        model: "conv4k3p1,bn,basic4,basic6s2,gap".parse().unwrap(),
        // validation every epoch: the replicas' running statistics averaged, then used; 240
        // training samples, so that every rank updates its statistics at every step
        inputs: mgtop::data::DataOptions {
            val_fraction: Some(0.2),
            ..Default::default()
        },
        data: DataSpec::SyntheticImages {
            n: 300,
            c: 2,
            h: 7,
            w: 6,
            k: 4,
        },
        ..small_cnn(2, 8, steps, dir.path())
    };
    let k = 23; // mid-epoch
    let straight = run(bn(2 * k));
    let mut first = bn(k);
    first.final_checkpoint = true;
    let half = run(first);
    let ckpt = half.last_checkpoint.clone().expect("final checkpoint");
    let bytes = std::fs::read(ckpt.join("model.safetensors")).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let var = tensors.tensor("basic.3.bn2.running_var").unwrap();
    assert_eq!(var.shape(), [6]);
    let mut second = bn(2 * k);
    second.resume = Some(ckpt);
    let rest = run(second);
    assert_eq!(&straight.losses[..k as usize], &half.losses[..]);
    // training losses do not read the running statistics: the same to the bit
    assert_eq!(&straight.losses[k as usize..], &rest.losses[..]);
    assert_eq!(straight.state.params, rest.state.params);
    // averaging the replicas' statistics at the checkpoint commutes with their updates: the
    // same numbers, up to rounding
    assert!(!rest.state.buffers.is_empty());
    let d = max_rel_diff(&straight.state.buffers, &rest.state.buffers);
    assert!(d <= 1e-5, "running statistics differ by {d:e}");
    assert_ne!(
        rest.state.buffers, half.state.buffers,
        "the statistics moved after the resume"
    );
}

#[test]
fn sync_batch_norm_makes_n_ranks_equal_one_rank() {
    let dir = tempfile::tempdir().unwrap();
    for optimizer in [OptimizerKind::Sgd, OptimizerKind::Adam] {
        for n in [2, 3] {
            let b = 8;
            // 301 samples: each epoch ends with a short batch, some ranks' shares empty
            let multi = RunConfig {
                model: "conv4k3p1,bn,basic4,basic6s2,gap".parse().unwrap(),
                sync_bn: true,
                optimizer,
                lr: Some(if optimizer == OptimizerKind::Sgd {
                    0.05
                } else {
                    1e-3
                }),
                ..small_cnn(n, b, 40, dir.path())
            };
            let mut single = multi.clone();
            single.devices = DeviceSpec::Cpu(1);
            single.batch_per_replica = n * b;
            let (a, one) = (run(multi), run(single));
            let what = format!("sync-bn {optimizer} n={n}");
            same_run(&a, &one, &what);
            let d = max_rel_diff(&a.state.buffers, &one.state.buffers);
            assert!(d <= 1e-5, "{what}: running statistics differ by {d:e}");
        }
    }
    // without it, each replica normalises over its own batch: not the one-rank run
    let own = small_cnn(2, 8, 40, dir.path());
    let own = RunConfig {
        model: "conv4k3p1,bn,basic4,basic6s2,gap".parse().unwrap(),
        ..own
    };
    let mut single = own.clone();
    single.devices = DeviceSpec::Cpu(1);
    single.batch_per_replica = 16;
    let d = max_rel_diff(&run(own).state.params, &run(single).state.params);
    assert!(
        d > 1e-4,
        "per-replica statistics differ from the global batch's ({d:e})"
    );
}

#[test]
fn the_reference_recipe_trains_a_resnet_preset_with_every_option() {
    // resnet20's recipe (SGD momentum, weight decay, cosine) with the rest of the options, on
    // a few small images: a run that starts, learns, and keeps what a user relies on
    let dir = tempfile::tempdir().unwrap();
    let cfg = RunConfig {
        model: "resnet20".parse().unwrap(),
        data: DataSpec::SyntheticImages {
            n: 96,
            c: 3,
            h: 12,
            w: 12,
            k: 3,
        },
        inputs: mgtop::data::DataOptions {
            val_fraction: Some(0.25),
            ..Default::default()
        },
        optimizer: OptimizerKind::Nesterov,
        momentum: Some(0.9),
        weight_decay: 5e-4,
        no_decay_bn_bias: true,
        label_smoothing: 0.1,
        schedule: "multistep:0.5,0.75".parse().unwrap(),
        lr: Some(0.05),
        sync_bn: true,
        ..small_cnn(2, 12, 24, dir.path())
    };
    let r = run(cfg);
    assert_eq!(r.losses.len(), 24);
    let (first, last) = (r.losses[0], *r.losses.last().unwrap());
    assert!(last < first, "the loss fell: {first} -> {last}");
    assert!(r.best_val_accuracy.is_some());
    assert_eq!(r.state.buffers.len(), 1_568);
}
