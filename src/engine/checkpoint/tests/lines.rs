//! Lines of runs in a checkpoint directory: whose checkpoints a run may write beside.

use super::*;
use crate::engine::checkpoint;

#[test]
fn a_resumed_run_continues_its_line_and_unnamed_checkpoints_go_with_any() {
    let dir = tempfile::tempdir().unwrap();
    let (model, state, meta) = sample();
    let at = |step, run_dir: Option<&str>, origin: Option<&str>| {
        let m = CheckpointMeta {
            step,
            run_dir: run_dir.map(str::to_string),
            origin: origin.map(str::to_string),
            ..meta.clone()
        };
        write(dir.path(), &model, &state, &m).unwrap();
    };
    at(3, None, None);
    // before lines were recorded: the run directory is the line
    at(5, Some("/runs/a"), None);
    at(9, Some("/runs/b"), Some("/runs/a"));
    let found = lines(&steps(dir.path()));
    let line = |origin: Option<&str>, first, last| Line {
        origin: origin.map(str::to_string),
        first,
        last,
        newest: dir.path().join(format!("step-{last:08}")),
    };
    assert_eq!(found, [line(None, 3, 3), line(Some("/runs/a"), 5, 9)]);
    let resumed = |step, origin: &str| CheckpointMeta {
        step,
        origin: Some(origin.into()),
        ..meta.clone()
    };
    // a fresh run, and a run of another line: refused, each line's newest offered
    for other in [None, Some(resumed(20, "/runs/c"))] {
        let e = refuse_others(dir.path(), other.as_ref())
            .unwrap_err()
            .to_string();
        let newest = dir.path().join("step-00000009");
        let want = format!(
            "  /runs/a: steps 5 to 9, continue it with --resume {}",
            newest.display()
        );
        assert!(e.contains(&want), "{e}");
        assert!(
            !e.contains("before run directories"),
            "unnamed ones go with any: {e}"
        );
    }
    // the line's newest continued: fine; an older step of it would fork the line
    assert!(refuse_others(dir.path(), Some(&resumed(9, "/runs/a"))).is_ok());
    let e = refuse_others(dir.path(), Some(&resumed(5, "/runs/a")))
        .unwrap_err()
        .to_string();
    assert!(e.contains("past step 5, the one resumed from"), "{e}");
    assert!(e.contains("step-00000009"), "{e}");
    // an unnamed checkpoint goes with any line: past it, the line forks too
    let unnamed = CheckpointMeta {
        step: 1,
        ..meta.clone()
    };
    let e = refuse_others(dir.path(), Some(&unnamed)).unwrap_err();
    assert!(matches!(e, CheckpointError::Taken { .. }), "{e}");
    at(11, None, None);
    let e = refuse_others(dir.path(), Some(&resumed(9, "/runs/a"))).unwrap_err();
    assert!(e.to_string().contains("step-00000011"), "{e}");
    at(12, Some("/runs/c"), Some("/runs/c"));
    assert_eq!(lines(&steps(dir.path())).len(), 3);
}

#[test]
fn the_best_checkpoint_is_replaced_whole_and_counts_as_its_line_s() {
    let dir = tempfile::tempdir().unwrap();
    let (model, state, meta) = sample();
    let best = |step, accuracy, origin: &str| {
        let m = CheckpointMeta {
            step,
            val_accuracy: Some(accuracy),
            origin: Some(origin.into()),
            ..meta.clone()
        };
        checkpoint::write(dir.path(), BEST, &model, &state, &m).unwrap()
    };
    best(4, 0.5, "/runs/a");
    let p = best(8, 0.75, "/runs/a");
    let (m, s) = read(&p, &model, "adam").unwrap();
    assert_eq!((m.step, m.val_accuracy, s), (8, Some(0.75), state.clone()));
    let names: Vec<String> = (fs::read_dir(dir.path()).unwrap())
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["best"], "nothing left beside it");
    // another line's best alone in the directory: refused, not replaced
    let fresh = refuse_others(dir.path(), None).unwrap_err();
    assert!(matches!(fresh, CheckpointError::Taken { .. }), "{fresh}");
    // its own line's, of a step past the one resumed from: a fork, as a step's would be
    let resumed = |step| CheckpointMeta {
        step,
        origin: Some("/runs/a".into()),
        ..meta.clone()
    };
    let e = refuse_others(dir.path(), Some(&resumed(6))).unwrap_err();
    assert!(e.to_string().contains("past step 6"), "{e}");
    assert!(refuse_others(dir.path(), Some(&resumed(8))).is_ok());
}

/// Two runs started together into one `--checkpoint-dir`: one may check the directory, the
/// other take its lock, write there and let go, and then the first take the lock. The check is
/// made again under the lock, so the first is refused (it replaced the other's checkpoint).
#[test]
fn checkpoints_written_between_the_check_and_the_lock_are_found_under_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let cfg = crate::config::RunConfig {
        checkpoint_dir: ck.clone(),
        final_checkpoint: true,
        ..Default::default()
    };
    let places = crate::engine::places::check(&cfg, true, None).unwrap();
    let (model, state, meta) = sample();
    let other = CheckpointMeta {
        step: 50,
        run_dir: Some("/runs/other".into()),
        origin: Some("/runs/other".into()),
        ..meta
    };
    write(&ck, &model, &state, &other).unwrap();
    let e = places.lock(&cfg, None).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("holds checkpoints of another run"), "{e}");
    assert!(e.contains("/runs/other: step 50, continue it"), "{e}");
    // the directory free of others: locked
    std::fs::remove_dir_all(ck.join("step-00000050")).unwrap();
    assert!(places.lock(&cfg, None).unwrap().is_some());
}
