//! The start-up notes of settings asked for that change nothing in this run.

use super::RunInfo;
use crate::config::{BnStats, RunConfig};
use crate::engine::Device;
use crate::nn::model::Model;

/// Settings asked for that change nothing in this run, said so (a user who asked for one
/// expects it to do something).
pub(super) fn settings(cfg: &RunConfig, model: &Model, info: &RunInfo) -> Vec<String> {
    let mut notes = Vec::new();
    if cfg.sync_bn && !model.has_batch_norm() {
        notes.push("--sync-bn: the model has no batch norm; nothing changes".to_string());
    } else if cfg.sync_bn && !model.has_batch_statistics() {
        notes.push(format!(
            "--sync-bn: --bn-stats {} leaves no batch norm on the batch's statistics, so nothing is summed; leave it out",
            cfg.bn_stats,
        ));
    } else if cfg.sync_bn && info.ranks() == 1 {
        notes.push("--sync-bn: one replica's batch is the global batch; nothing changes".into());
    }
    notes.extend(bn_stats(cfg, model));
    if cfg.rebalance && info.ranks() == 1 {
        notes.push(
            "--rebalance: one rank has no other to share the batch with; nothing changes".into(),
        );
    }
    let steps = match cfg.budget {
        crate::config::Budget::Steps(s) => s,
        crate::config::Budget::Epochs(e) => e * info.steps_per_epoch(),
    };
    let run_of = |steps: u64| {
        format!(
            "the run is {}",
            crate::text::counted(steps as usize, "step")
        )
    };
    let every = crate::engine::rebalance::EVERY;
    if cfg.rebalance && info.ranks() > 1 && steps <= every {
        notes.push(format!(
            "--rebalance: {}: its first decision comes after step {every}; nothing changes",
            run_of(steps)
        ));
    } else if cfg.rebalance && info.ranks() > 1 && info.per_replica == 1 {
        notes.push(
            "--rebalance: a batch of 1 per replica leaves no sample to move; nothing changes"
                .into(),
        );
    }
    if cfg.warmup > steps {
        notes.push(format!(
            "--warmup {}: {}: the LR rises all run and never reaches {:.2e}",
            cfg.warmup,
            run_of(steps),
            info.lr
        ));
    }
    if let Some(every) = cfg.checkpoint_every.filter(|&n| n > steps) {
        notes.push(format!(
            "--checkpoint-every {every}: {}: none falls due before its end",
            run_of(steps)
        ));
    }
    if let Some(every) = cfg.val_every {
        let epoch = info.steps_per_epoch();
        if info.val_samples == 0 {
            notes.push(format!(
                "--val-every {every}: no sample is held out for validation (--val-split, --val-data); nothing is validated"
            ));
        } else if every.is_multiple_of(epoch) {
            notes.push(format!(
                "--val-every {every}: an epoch is {}: each step it names ends one, which validates anyway",
                crate::text::counted(epoch as usize, "step")
            ));
        } else if every > steps {
            notes.push(format!(
                "--val-every {every}: {}: none falls due before its end",
                run_of(steps)
            ));
        }
    }
    if cfg.checkpoint_best && info.val_samples == 0 {
        notes.push(
            "--checkpoint-best: no sample is held out for validation (--val-split, --val-data); no best checkpoint is written".into(),
        );
    }
    // (given: a resumed run's record gives none to an optimizer without momentum)
    if let Some(m) = cfg.momentum.filter(|_| !cfg.optimizer.has_momentum()) {
        notes.push(match cfg.optimizer {
            crate::nn::optim::OptimizerKind::Sgd => format!(
                "--momentum {m}: --optimizer sgd is plain SGD and takes no momentum; for SGD with momentum (PyTorch's SGD(momentum={m})) give --optimizer momentum, or nesterov"
            ),
            o => format!(
                "--momentum {m}: --optimizer {o} takes no momentum (its betas are 0.9 and 0.999); --optimizer momentum (or nesterov) does"
            ),
        });
    }
    if cfg.no_decay_bn_bias && cfg.weight_decay == 0.0 {
        notes.push("--no-decay-bn-bias: --weight-decay is 0; nothing changes".into());
    }
    if cfg.calibrate && info.ranks() == 1 {
        notes.push(
            "--calibrate: one rank is its own one-device baseline; the speed-up is 1x".into(),
        );
    }
    let cpu_only = info.devices.iter().all(|d| matches!(d, Device::Cpu { .. }));
    let threads = info.ranks() * info.threads_per_worker;
    // (the ranks of this machine: a run over several processes is left to their launcher)
    if cpu_only && info.processes == 1 && cfg.threads_per_worker.is_some() && threads > info.cores {
        notes.push(format!(
            "--threads-per-worker {}: {} x {} threads share {} cores and will slow each other; --threads-per-worker {} fits",
            info.threads_per_worker,
            crate::text::counted(info.ranks(), "rank"),
            info.threads_per_worker,
            info.cores,
            (info.cores / info.ranks()).max(1)
        ));
    }
    if info.ranks() == 1 && cfg.strategy != Default::default() {
        notes.push(format!(
            "--strategy {}: one rank has no other to share with; it trains as mirrored{}",
            cfg.strategy,
            match cfg.strategy {
                crate::config::strategy::Strategy::CentralStorage => {
                    ", with the host's copy of the weights costing transfers each step"
                }
                _ => "",
            }
        ));
    }
    // `mlp` with no widths: no hidden layer (softmax regression), which may not be what was meant
    if matches!(&cfg.model, crate::nn::model::ModelSpec::Layers(l) if l.layers.is_empty()) {
        notes.push(
            "--model mlp: no hidden layer: a linear model (softmax regression); mlp:128 gives one hidden layer of 128"
                .into(),
        );
    }
    // (frozen at their random start: a head trained over features nobody learnt)
    if cfg.freeze.is_some() && cfg.init.is_none() && cfg.resume.is_none() {
        notes.push(format!(
            "--freeze {} without --init: the frozen tensors stay at their random initialisation; --init FILE starts them from trained weights",
            cfg.freeze.as_ref().map_or(String::new(), |f| f.to_string())
        ));
    }
    if let crate::config::strategy::Strategy::LocalSgd {
        every,
        warmup,
        moments,
    } = cfg.strategy
    {
        if warmup >= steps && info.ranks() > 1 {
            notes.push(format!(
                "--local-sgd-warmup {warmup}: {}: its replicas never step alone \
                 (mirrored throughout); a lower --local-sgd-warmup lets them",
                run_of(steps),
            ));
        } else if warmup + every > steps && info.ranks() > 1 {
            notes.push(format!(
                "--strategy {}: {}: no scheduled average falls due; the replicas are averaged for validations and at its end",
                cfg.strategy,
                run_of(steps),
            ));
        }
        // (the statistics are exchanged in every forward pass: the ranks meet each step)
        if cfg.sync_bn && model.has_batch_statistics() && info.ranks() > 1 {
            notes.push(format!(
                "--sync-bn with --strategy {}: the ranks still exchange batch-norm statistics in every step's forward pass, so each waits for the slowest every step (counted in its compute); --sync-bn=false lets them step alone between averages",
                cfg.strategy
            ));
        }
        if moments && !cfg.optimizer.keeps_moments() && info.ranks() > 1 {
            notes.push(format!(
                "--strategy {}: --optimizer {} keeps no moments; only the parameters are averaged",
                cfg.strategy, cfg.optimizer
            ));
        }
    }
    notes
}

/// `--bn-stats` where it fixes nothing, or fixes statistics no weights were trained with.
fn bn_stats(cfg: &RunConfig, model: &Model) -> Option<String> {
    let asked = cfg.bn_stats;
    if asked == BnStats::Batch {
        return None;
    }
    if !model.has_batch_norm() {
        return Some(format!(
            "--bn-stats {asked}: the model has no batch norm; nothing changes"
        ));
    }
    if model.fixed_batch_norms() == 0 {
        let why = match cfg.freeze {
            None => "no --freeze leaves a batch norm",
            Some(_) => "--freeze freezes no batch norm's weight and bias together",
        };
        return Some(format!("--bn-stats {asked}: {why}; nothing changes"));
    }
    // (a resumed run's statistics are its own: from its data, or its --init's)
    match cfg.init.is_none() && cfg.resume.is_none() {
        true => Some(format!(
            "--bn-stats {asked}: the run starts from random weights (no --init or --resume), so the fixed batch norms keep PyTorch's starting statistics (means 0, variances 1) and normalise nothing; it is for fine-tuning from --init"
        )),
        false => None,
    }
}
