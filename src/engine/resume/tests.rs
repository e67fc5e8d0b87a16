use super::*;

fn split(samples: usize) -> TrainSplit {
    TrainSplit {
        samples,
        fingerprint: 7,
        val_fingerprint: None,
    }
}

fn meta() -> CheckpointMeta {
    CheckpointMeta::example()
}

/// The defaults under linear LR scaling (SGD's rule; these tests' figures follow it).
fn linear() -> RunConfig {
    RunConfig {
        lr_scaling: Some(crate::nn::schedule::LrScaling::Linear),
        ..RunConfig::default()
    }
}

#[test]
fn settings_compare_as_the_run_reads_them() {
    use serde_json::json;
    // an older checkpoint spelled the default label column out; floats were widened
    let old = json!("csv:/d/t.csv,label=last");
    assert!(same_setting("data", &json!("csv:/d/t.csv"), &old));
    assert!(!same_setting(
        "data",
        &json!("csv:/d/t.csv,label=first"),
        &old
    ));
    assert!(same_setting(
        "lr",
        &json!(0.1f32),
        &json!(0.10000000149011612)
    ));
    assert!(!same_setting("name", &json!("csv:/d/t.csv"), &old));
}

#[test]
fn the_checkpoint_s_values_unless_the_flags_say_otherwise() {
    let plain = resumed_settings(&linear(), &meta(), 2, split(1438));
    assert_eq!((plain.per_replica, plain.lr), (32, 1e-3));
    assert!(
        plain.resume_note.contains("from the checkpoint"),
        "{plain:?}"
    );
    assert_eq!(plain.lr_note, "from the checkpoint");

    let bigger = RunConfig {
        batch_per_replica: 64,
        batch_from: Some(BatchFrom::Given("--batch-per-replica".into())),
        ..linear()
    };
    let r = resumed_settings(&bigger, &meta(), 2, split(1438));
    assert_eq!(r.per_replica, 64);
    assert!((r.lr - 2e-3).abs() < 1e-9, "linear scaling: {r:?}");
    assert!(r.resume_note.contains("the checkpoint had 32"), "{r:?}");
    assert!(r.lr_note.contains("64 to 128"), "{r:?}");

    let given = RunConfig {
        lr: Some(5e-4),
        ..bigger
    };
    let r = resumed_settings(&given, &meta(), 2, split(1438));
    assert_eq!((r.per_replica, r.lr), (64, 5e-4));
    assert!(r.lr_note.contains("--lr"), "{r:?}");

    // fewer ranks than the checkpoint's: the same per-replica batch, a smaller global one
    let r = resumed_settings(&linear(), &meta(), 1, split(1438));
    assert!((r.lr - 5e-4).abs() < 1e-9, "{r:?}");
}

#[test]
fn a_training_split_of_another_size_is_said() {
    let recorded = CheckpointMeta {
        train_samples: Some(1438),
        ..meta()
    };
    assert!(!resumed_settings(&linear(), &recorded, 2, split(1438))
        .resume_note
        .contains("training split"));
    let r = resumed_settings(&linear(), &recorded, 2, split(1500));
    assert!(
        r.resume_note.contains(
            "a training split of 1500 samples (the checkpoint's run had 1438: the data or its validation split changed"
        ),
        "{r:?}"
    );
    // a checkpoint from before the size was recorded says nothing
    let r = resumed_settings(&linear(), &meta(), 2, split(1500));
    assert!(!r.resume_note.contains("training split"), "{r:?}");
}

#[test]
fn a_training_split_of_the_same_size_and_other_contents_is_said() {
    let cfg = linear();
    let recorded = CheckpointMeta {
        train_samples: Some(1438),
        train_fingerprint: Some(format!("{:016x}", 7)),
        config: cfg.record(),
        seed: cfg.seed,
        ..meta()
    };
    let other = TrainSplit {
        fingerprint: 8,
        ..split(1438)
    };
    let r = resumed_settings(&cfg, &recorded, 2, other);
    assert!(
        r.resume_note.contains(
            "the training data changed (the same --data and 1438 samples, other contents"
        ),
        "{r:?}"
    );
    assert!(
        !(resumed_settings(&cfg, &recorded, 2, split(1438)).resume_note).contains("other contents")
    );
    // another seed draws another split: that is said as the seed, not as changed files
    let reseeded = RunConfig { seed: 3, ..cfg };
    let r = resumed_settings(&reseeded, &recorded, 2, other);
    assert!(!r.resume_note.contains("data changed"), "{r:?}");
    assert!(r.resume_note.contains("--seed 3"), "{r:?}");
}

#[test]
fn accumulation_counts_in_the_global_batch_the_lr_follows() {
    let accum = |a: usize| CheckpointMeta {
        config: serde_json::json!({ "grad_accum": a }),
        ..meta()
    };
    let with = |a: usize| RunConfig {
        grad_accum: a,
        ..linear()
    };
    // the same accumulation: the checkpoint's LR
    let r = resumed_settings(&with(4), &accum(4), 2, split(1438));
    assert_eq!(r.lr, 1e-3, "{r:?}");
    assert!(!r.resume_note.contains("grad-accum"), "{r:?}");
    // 4 micro-batches then, 1 now: a quarter of the global batch, a quarter of the LR
    let r = resumed_settings(&with(1), &accum(4), 2, split(1438));
    assert!((r.lr - 2.5e-4).abs() < 1e-9, "{r:?}");
    assert!(
        r.resume_note
            .contains("--grad-accum 1 (the checkpoint had 4)"),
        "{r:?}"
    );
    assert!(r.lr_note.contains("256 to 64"), "{r:?}");
    // 2 ranks without accumulation resumed on 1 rank accumulating 2: the same global batch
    let r = resumed_settings(&with(2), &accum(1), 1, split(1438));
    assert_eq!(r.lr, 1e-3, "{r:?}");
}

/// Other ranks with the same global batch take the same samples a step; with another, the
/// batch per replica that keeps it is named where there is one.
#[test]
fn other_ranks_are_said_by_what_they_keep_of_the_global_batch() {
    let same = other_ranks(64, 64, 4);
    assert!(
        same.starts_with("the same global batch of 64, so each step takes the same samples"),
        "{same}"
    );
    let other = other_ranks(64, 32, 2);
    assert!(
        other
            .contains("a global batch of 32 where it had 64: its batches and so its losses differ")
            && other.ends_with("--batch-per-replica 32 keeps its global batch of 64"),
        "{other}"
    );
    let uneven = other_ranks(64, 48, 3);
    assert!(
        uneven.ends_with("as many ranks keep it (each process's --devices, times the processes)"),
        "{uneven}"
    );
}

#[test]
fn a_budget_in_epochs_for_one_in_steps_is_a_change_said() {
    let steps = CheckpointMeta {
        config: serde_json::json!({ "steps": 100 }),
        ..meta()
    };
    let epochs = RunConfig {
        budget: Budget::Epochs(3),
        ..linear()
    };
    let r = resumed_settings(&epochs, &steps, 2, split(1438));
    assert!(
        r.resume_note
            .contains("--epochs 3 (the checkpoint had --steps 100)"),
        "{r:?}"
    );
    let r = resumed_settings(
        &RunConfig {
            budget: Budget::Steps(200),
            ..linear()
        },
        &steps,
        2,
        split(1438),
    );
    assert!(
        r.resume_note
            .contains("--steps 200 (the checkpoint had 100)"),
        "{r:?}"
    );
    assert!(!r.resume_note.contains("--epochs"), "{r:?}");
}
