//! A resumed run's settings: what a checkpoint records and what the command line takes
//! back from it.

use super::tests::cli;
use super::*;
use crate::config::Budget;
use crate::engine::checkpoint::CheckpointMeta;

/// A checkpoint standing for a run of `config` (`RunConfig::record`, or an older subset).
fn checkpoint_of(config: serde_json::Value, seed: u64, data: &str) -> CheckpointMeta {
    CheckpointMeta {
        ranks: 1,
        seed,
        data: data.into(),
        config,
        ..CheckpointMeta::example()
    }
}

#[test]
fn a_checkpoint_records_every_setting_a_resumed_run_takes_back() {
    let flags = [
        "--model",
        "conv8k3p1,bn,gap",
        "--data",
        "synthetic-images:64,3,8,8,3",
        "--devices",
        "cpu:2",
        "--steps",
        "77",
        "--optimizer",
        "momentum",
        "--momentum",
        "0.8",
        "--weight-decay",
        "0.1",
        "--no-decay-bn-bias",
        "--label-smoothing",
        "0.1",
        "--clip-grad-norm",
        "2.5",
        "--sync-bn",
        "--precision",
        "tf32",
        "--grad-dtype",
        "bf16",
        "--schedule",
        "multistep:0.5,0.9",
        "--warmup",
        "5",
        "--lr-scaling",
        "sqrt",
        "--grad-accum",
        "2",
        "--strategy",
        "local-sgd:4,moments",
        "--local-sgd-warmup",
        "7",
        "--rebalance",
        "--freeze",
        "backbone",
        "--bn-stats",
        "frozen",
        "--checkpoint-every",
        "9",
        "--val-every",
        "12",
        "--checkpoint-best",
        "--log-every",
        "3",
        "--seed",
        "11",
        "--val-split",
        "0.3",
        "--val-data",
        "synthetic-images:32,3,8,8,3",
        "--image-size",
        "16",
        "--augment",
        "crop:2,flip",
        "--normalize",
        "unit",
        "--name",
        "n1",
    ];
    let (cfg, _) = cli(&flags).unwrap();
    let meta = checkpoint_of(cfg.record(), cfg.seed, &cfg.data.to_string());
    let (args, said) = resumed::under_checkpoint(TrainArgs::default(), &meta).unwrap();
    let (back, _) = args.resolve().unwrap();
    assert_eq!(back.record(), cfg.record());
    assert!(
        said.contains("--schedule multistep:0.5,0.9")
            && said.contains("--sync-bn")
            && said.contains("--clip-grad-norm 2.5"),
        "{said}"
    );
    assert_eq!((back.clip_grad_norm, back.val_every), (Some(2.5), Some(12)));
    assert!(back.checkpoint_best);
    // flags (and the config file) win; a budget or strategy given replaces the recorded one
    let given = TrainArgs {
        epochs: Some(3),
        strategy: Some("mirrored".into()),
        schedule: Some("constant".into()),
        ..TrainArgs::default()
    };
    let (args, said) = resumed::under_checkpoint(given, &meta).unwrap();
    let (back, _) = args.resolve().unwrap();
    assert_eq!(back.budget, Budget::Epochs(3));
    assert_eq!(back.schedule.to_string(), "constant");
    assert_eq!(back.strategy.to_string(), "mirrored");
    assert_eq!(back.seed, 11);
    assert!(
        !said.contains("--schedule") && !said.contains("--steps"),
        "{said}"
    );
    // another local-SGD period keeps the run's warm-up
    let given = TrainArgs {
        strategy: Some("local-sgd:16".into()),
        ..TrainArgs::default()
    };
    let (args, _) = resumed::under_checkpoint(given, &meta).unwrap();
    let (back, _) = args.resolve().unwrap();
    assert_eq!(back.strategy.to_string(), "local-sgd:16");
    assert_eq!(back.record()["local_sgd_warmup"], 7);
    // a switch the run had is turned off with =false, clipping with 0; one left off stays as
    // recorded
    let off = Cli::try_parse_from([
        "mgtop-train",
        "--sync-bn=false",
        "--rebalance=false",
        "--clip-grad-norm",
        "0",
    ])
    .unwrap()
    .train;
    let (args, said) = resumed::under_checkpoint(off, &meta).unwrap();
    let (back, _) = args.resolve().unwrap();
    assert!(!back.sync_bn && !back.rebalance && back.no_decay_bn_bias);
    assert_eq!(back.clip_grad_norm, None);
    assert!(
        !said.contains("--sync-bn") && said.contains("--no-decay-bn-bias"),
        "{said}"
    );
}

#[test]
fn a_resume_with_another_optimizer_takes_its_lr_scaling_unless_the_run_gave_one() {
    use crate::nn::schedule::LrScaling;
    let resume_as = |flags: &[&str], optimizer: &str| {
        let (cfg, _) = cli(flags).unwrap();
        let meta = checkpoint_of(cfg.record(), cfg.seed, &cfg.data.to_string());
        let given = TrainArgs {
            optimizer: Some(optimizer.into()),
            ..TrainArgs::default()
        };
        let (args, _) = resumed::under_checkpoint(given, &meta).unwrap();
        args.resolve().unwrap().0.lr_scaling()
    };
    // AdamW's sqrt was its optimizer's rule, not the run's choice: SGD's linear follows
    assert_eq!(
        resume_as(&["--optimizer", "adamw"], "sgd"),
        LrScaling::Linear
    );
    // one given stays
    let given = ["--optimizer", "adamw", "--lr-scaling", "sqrt"];
    assert_eq!(resume_as(&given, "sgd"), LrScaling::Sqrt);
}

/// A momentum is the run's where its optimizer has one: resumed with another optimizer, it is
/// left behind (not said to be given); given for one without, it is kept for its note.
#[test]
fn a_recorded_momentum_goes_with_its_optimizer() {
    let (cfg, _) = cli(&["--optimizer", "momentum", "--momentum", "0.5"]).unwrap();
    let meta = checkpoint_of(cfg.record(), cfg.seed, &cfg.data.to_string());
    let resume = |given: TrainArgs| {
        let (args, said) = resumed::under_checkpoint(given, &meta).unwrap();
        args.resolve()
            .map(|(cfg, _)| (cfg.optimizer.to_string(), cfg.momentum, said))
    };
    let (optimizer, momentum, said) = resume(TrainArgs::default()).unwrap();
    assert_eq!((optimizer.as_str(), momentum), ("momentum", Some(0.5)));
    assert!(said.contains("--momentum 0.5"), "{said}");
    let adam = TrainArgs {
        optimizer: Some("adam".into()),
        ..TrainArgs::default()
    };
    let (optimizer, momentum, said) = resume(adam).unwrap();
    assert_eq!((optimizer.as_str(), momentum), ("adam", None));
    assert!(!said.contains("--momentum"), "{said}");
    let sgd = TrainArgs {
        optimizer: Some("sgd".into()),
        momentum: Some(0.9),
        ..TrainArgs::default()
    };
    assert_eq!(resume(sgd).unwrap().1, Some(0.9));
}

#[test]
fn a_checkpoint_from_before_every_setting_was_recorded_gives_what_it_has() {
    // session 30's state.json: its settings with float32s widened, and the LR as given
    let config = serde_json::json!({
        "model": "mlp:16", "devices": "auto", "optimizer": "adamw", "weight_decay": 0.10000000149011612,
        "momentum": 0.8999999761581421, "no_decay_bn_bias": false, "label_smoothing": 0.0,
        "sync_bn": false, "schedule": "cosine", "warmup": 0, "lr_scaling": "linear",
        "grad_accum": 1, "lr_flag": null, "strategy": "mirrored",
    });
    let meta = checkpoint_of(config, 5, "synthetic:100,4,2");
    let (args, said) = resumed::under_checkpoint(TrainArgs::default(), &meta).unwrap();
    let (back, _) = args.resolve().unwrap();
    assert_eq!(back.weight_decay, 0.1);
    assert_eq!(
        (back.seed, back.data.to_string()),
        (5, "synthetic:100,4,2".into())
    );
    assert_eq!(back.schedule.to_string(), "cosine");
    assert!(
        said.contains("--seed 5") && said.contains("--optimizer adamw"),
        "{said}"
    );
    // widened float32s read as the run held them: the default momentum is not listed
    assert!(
        said.contains("--weight-decay 0.1") && !said.contains("0.1000"),
        "{said}"
    );
    assert!(!said.contains("--momentum"), "{said}");
    // AdamW's default rule is sqrt: the recorded linear is said
    assert!(said.contains("--lr-scaling linear"), "{said}");
    // a value of the wrong kind is the checkpoint's problem, said as such
    let meta = checkpoint_of(serde_json::json!({ "warmup": "soon" }), 0, "digits");
    let e = resumed::under_checkpoint(TrainArgs::default(), &meta).unwrap_err();
    assert!(
        e.contains("records settings this version cannot read"),
        "{e}"
    );
}

#[test]
fn a_validation_set_given_replaces_the_recorded_one_of_either_kind() {
    let resume = |first: &[&str], given: TrainArgs| {
        let (cfg, _) = cli(first).unwrap();
        let meta = checkpoint_of(cfg.record(), cfg.seed, &cfg.data.to_string());
        let (args, _) = resumed::under_checkpoint(given, &meta).unwrap();
        let inputs = args.resolve().unwrap().0.inputs;
        (inputs.val_fraction, inputs.val_data.map(|v| v.to_string()))
    };
    let val_data = |v: &str| TrainArgs {
        val_data: Some(v.into()),
        ..TrainArgs::default()
    };
    let val_split = |f: f64| TrainArgs {
        val_split: Some(f),
        ..TrainArgs::default()
    };
    let split = ["--val-split", "0.3"];
    assert_eq!(resume(&split, TrainArgs::default()), (Some(0.3), None));
    let (fraction, data) = resume(&split, val_data("csv:va.csv"));
    assert_eq!(fraction, None);
    assert!(data.unwrap().contains("va.csv"));
    let held = ["--val-data", "csv:va.csv"];
    assert_eq!(resume(&held, val_split(0.2)), (Some(0.2), None));
    assert_eq!(resume(&held, val_split(0.0)), (Some(0.0), None));
}
