//! The batch a run trains at, within its training split: cut to the split where the split is
//! smaller than a global batch (and asked for again by a resumed run on more data), and a split
//! too small for its ranks refused.

use crate::config::{BatchFrom, RunConfig};
use crate::engine::checkpoint::CheckpointMeta;
use crate::engine::EngineError;

/// A training split of fewer samples than there are ranks (over every process) would leave a
/// rank without a sample to train on: refused.
pub(in crate::engine) fn a_sample_per_rank(
    samples: usize,
    ranks: usize,
) -> Result<(), EngineError> {
    match ranks {
        r if samples < r => Err(EngineError::Config(format!(
            "the training split has {} for {r} ranks, and each rank trains on at least one a step: lower --val-split, give more data, or fewer --devices",
            crate::text::counted(samples, "sample")
        ))),
        _ => Ok(()),
    }
}

/// A global batch past the training split of `samples` takes it all each step: `cfg` trained
/// (its learning rate scaled, its memory counted) with the batch and the accumulation cut to
/// about that, and a note saying so. A resumed run keeps the batch it resumes with (`resumed`'s,
/// or --batch-per-replica's), but its accumulation is cut alike (a command run again with
/// `--resume` brings the flag back).
/// `ranks`: None in a run over several processes, which may hold unequal device counts (their
/// caps would differ): there the keyboard's cap alone applies.
pub(in crate::engine) fn batch_within_data(
    cfg: RunConfig,
    samples: usize,
    ranks: Option<usize>,
    resumed: Option<&CheckpointMeta>,
    notes: &mut Vec<String>,
) -> RunConfig {
    let Some(ranks) = ranks else {
        return cfg;
    };
    // (a resumed run's batch is its checkpoint's, unless given: a given one is cut as a fresh
    // run's, and its LR follows the batch it trains at; so is the batch a checkpoint's run
    // asked for where its own training split cut it)
    let asked = (resumed.filter(|_| cfg.batch_from.is_none()))
        .and_then(|m| Some((crate::engine::resume::batch_asked(m)?, m.per_replica)));
    let cfg = match asked {
        Some((asked, cut_to)) => RunConfig {
            batch_per_replica: asked,
            batch_from: Some(BatchFrom::AskedAgain { asked, cut_to }),
            ..cfg
        },
        None => cfg,
    };
    let cfg = RunConfig {
        batch_cut: None,
        grad_accum_cut: None,
        ..cfg
    };
    let accum = cfg.grad_accum.min(samples.div_ceil(ranks).max(1));
    let theirs = resumed.filter(|_| cfg.batch_from.is_none());
    let per_replica = match theirs {
        Some(m) => m.per_replica,
        None => cfg
            .batch_per_replica
            .min(crate::engine::control::data_batch_cap(
                samples, ranks, accum,
            )),
    };
    // (the batch rounded up: the accumulation again, so the global batch ends near the split)
    let accum = accum.min(samples.div_ceil(ranks * per_replica).max(1));
    // (recorded where cut, so that a run resumed on more data accumulates as asked again)
    let grad_accum_cut = (accum != cfg.grad_accum).then_some([cfg.grad_accum, accum]);
    if theirs.is_some() {
        return RunConfig {
            grad_accum: accum,
            grad_accum_cut,
            ..cfg
        };
    }
    let cut = (per_replica, accum) != (cfg.batch_per_replica, cfg.grad_accum);
    if !cut {
        return cfg;
    }
    let shares = |b: usize, a: usize| {
        let accumulated = match a {
            1 => String::new(),
            a => format!(" x {a} accumulated"),
        };
        format!(
            "{b} per replica x {}{accumulated}",
            crate::text::counted(ranks, "rank")
        )
    };
    // (the cut batch rounds up, so its product can pass the split by a few: the last shares
    // take fewer, and the note names the split, not the product)
    let all = match samples {
        1 => "it".to_string(),
        n => format!("all {n}"),
    };
    let most = match per_replica * ranks * accum > samples {
        true => "at most ",
        false => "",
    };
    notes.push(format!(
        "a global batch of {} = {} is more than the training split's {}: {most}{}, each step takes {all}",
        shares(cfg.batch_per_replica, cfg.grad_accum),
        cfg.batch_per_replica * ranks * cfg.grad_accum,
        crate::text::counted(samples, "sample"),
        shares(per_replica, accum),
    ));
    RunConfig {
        // (the batch cut, not the accumulation alone: the batch a resume asks for again)
        batch_cut: (per_replica != cfg.batch_per_replica)
            .then_some([cfg.batch_per_replica, per_replica]),
        grad_accum_cut,
        batch_per_replica: per_replica,
        grad_accum: accum,
        ..cfg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(
        batch: usize,
        accum: usize,
        samples: usize,
        ranks: usize,
    ) -> (usize, usize, Vec<String>) {
        let cfg = RunConfig {
            batch_per_replica: batch,
            grad_accum: accum,
            ..RunConfig::default()
        };
        let mut notes = Vec::new();
        let c = batch_within_data(cfg, samples, Some(ranks), None, &mut notes);
        (c.batch_per_replica, c.grad_accum, notes)
    }

    #[test]
    fn a_global_batch_past_the_training_split_is_cut_to_it_accumulation_counted() {
        assert_eq!(cut(32, 1, 1438, 2), (32, 1, vec![]));
        // 32 x 2 x 32 = 2048 of 1438: 23 a replica
        let (b, a, notes) = cut(32, 32, 1438, 2);
        assert_eq!((b, a), (23, 32));
        assert_eq!(
            notes,
            ["a global batch of 32 per replica x 2 ranks x 32 accumulated = 2048 is more than the training split's 1438 samples: at most 23 per replica x 2 ranks x 32 accumulated, each step takes all 1438"]
        );
        // one sample a replica is still 2000: the accumulation is cut too
        let (b, a, notes) = cut(1, 1000, 80, 2);
        assert_eq!((b, a), (1, 40));
        assert!(
            notes[0].ends_with("1 per replica x 2 ranks x 40 accumulated, each step takes all 80"),
            "{notes:?}"
        );
        let (b, a, _) = cut(64, 1, 100, 1);
        assert_eq!((b, a), (64, 1));
        assert_eq!(cut(200, 1, 100, 1).0, 100);
        // 2 a replica (1438 / 1000, rounded up) x 500 would be 2000: the accumulation follows
        let (b, a, _) = cut(32, 500, 1438, 2);
        assert_eq!((b, a), (2, 360), "2 x 2 x 360 = 1440");
    }

    #[test]
    fn a_resumed_run_s_batch_flag_is_cut_to_the_split_as_a_fresh_run_s() {
        let meta = crate::engine::checkpoint::CheckpointMeta::example();
        let cfg = RunConfig {
            batch_per_replica: 100_000,
            batch_from: Some(BatchFrom::Given("--batch-per-replica".into())),
            ..RunConfig::default()
        };
        let mut notes = Vec::new();
        let c = batch_within_data(cfg.clone(), 1438, Some(2), Some(&meta), &mut notes);
        assert_eq!(c.batch_per_replica, 719);
        assert!(notes[0].contains("each step takes all 1438"), "{notes:?}");
        // without the flag, the checkpoint's batch stands (its run took it)
        let theirs = RunConfig {
            batch_from: None,
            ..cfg
        };
        let c = batch_within_data(theirs, 1438, Some(2), Some(&meta), &mut Vec::new());
        assert_eq!(
            c.batch_per_replica, 100_000,
            "left to the resume's own settings"
        );
    }

    #[test]
    fn a_training_split_smaller_than_the_ranks_is_refused() {
        let e = a_sample_per_rank(1, 2).unwrap_err().to_string();
        assert!(
            e.contains("the training split has 1 sample for 2 ranks") && e.contains("--val-split"),
            "{e}"
        );
        assert!(a_sample_per_rank(2, 2).is_ok());
        // the one-sample note counts its sample
        assert_eq!(
            cut(32, 1, 1, 1).2,
            ["a global batch of 32 per replica x 1 rank = 32 is more than the training split's 1 sample: 1 per replica x 1 rank, each step takes it"]
        );
    }

    #[test]
    fn a_resumed_run_keeps_its_batch_but_its_accumulation_is_cut_alike() {
        // the checkpoint's 1 a replica; the flags' 32 and 1000 again
        let cfg = RunConfig {
            grad_accum: 1000,
            ..RunConfig::default()
        };
        let mut notes = Vec::new();
        let meta: CheckpointMeta = serde_json::from_value(serde_json::json!({
            "format": "mgtop-checkpoint/2", "step": 1, "epoch": 0, "offset": 0, "per_replica": 1,
            "ranks": 2, "lr": 1e-3, "optimizer": "adam", "optimizer_steps": 1, "dims": [4, 2],
            "seed": 0, "data": "synthetic:100,4,2", "config": {},
        }))
        .unwrap();
        let c = batch_within_data(cfg, 80, Some(2), Some(&meta), &mut notes);
        assert_eq!(c.grad_accum, 40, "{notes:?}");
    }

    #[test]
    fn a_batch_its_checkpoint_s_split_cut_is_asked_for_again_on_more_data() {
        // a run of 19 samples on 2 ranks: 32 asked, cut to 10 (and recorded so)
        let mut notes = Vec::new();
        let first = batch_within_data(RunConfig::default(), 19, Some(2), None, &mut notes);
        assert_eq!(first.batch_cut, Some([32, 10]));
        // (the accumulation alone cut: no batch to ask for again)
        let accumulated = RunConfig {
            batch_per_replica: 2,
            grad_accum: 8,
            ..RunConfig::default()
        };
        let c = batch_within_data(accumulated, 20, Some(2), None, &mut notes);
        assert_eq!(
            (c.batch_per_replica, c.grad_accum, c.batch_cut),
            (2, 5, None)
        );
        // (recorded, for the resume to accumulate 8 again: cli::resumed::recorded)
        assert_eq!(c.grad_accum_cut, Some([8, 5]));
        assert_eq!(c.record()["grad_accum_cut"], serde_json::json!([8, 5]));
        assert_eq!(first.record()["batch_cut"], serde_json::json!([32, 10]));
        let meta = CheckpointMeta {
            per_replica: 10,
            config: first.record(),
            ..CheckpointMeta::example()
        };
        // resumed on 180 samples: 32 again, nothing cut
        let c = batch_within_data(RunConfig::default(), 180, Some(2), Some(&meta), &mut notes);
        assert_eq!((c.batch_per_replica, c.batch_cut), (32, None));
        let split = crate::engine::resume::TrainSplit {
            samples: 180,
            fingerprint: 0,
            val_fingerprint: None,
        };
        let r = crate::engine::resume::resumed_settings(&c, &meta, 2, split);
        assert_eq!(r.per_replica, 32);
        assert!(
            r.resume_note.starts_with("batch 32 per replica: the checkpoint's run asked for 32, which its training split cut to 10"),
            "{}",
            r.resume_note
        );
        // a batch the keyboard changed since is the run's own: kept
        let changed = CheckpointMeta {
            per_replica: 8,
            ..meta.clone()
        };
        let c = batch_within_data(
            RunConfig::default(),
            180,
            Some(2),
            Some(&changed),
            &mut notes,
        );
        let r = crate::engine::resume::resumed_settings(&c, &changed, 2, split);
        assert_eq!(r.per_replica, 8);
    }
}
