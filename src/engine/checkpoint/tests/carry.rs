//! `carry_best`: a resumed run's best begins as its line's.

use super::*;
use crate::engine::checkpoint::carry_best;

/// A line's best beside the resumed checkpoint comes along into a new directory, whole and
/// linked; one of another accuracy, step or line, or a directory with a best of its own,
/// keeps its own.
#[test]
fn the_lines_best_follows_a_resume_into_a_new_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let (old, new) = (
        tmp.path().join("a/checkpoints"),
        tmp.path().join("b/checkpoints"),
    );
    for d in [&old, &new] {
        fs::create_dir_all(d).unwrap();
    }
    let (model, state, base) = sample();
    let line = Some("runs/a".to_string());
    let meta = |step: u64, acc: Option<f32>| CheckpointMeta {
        step,
        val_accuracy: acc,
        origin: line.clone(),
        ..base.clone()
    };
    crate::engine::checkpoint::write(&old, BEST, &model, &state, &meta(20, Some(0.9))).unwrap();
    let resumed =
        crate::engine::checkpoint::write(&old, "step-00000030", &model, &state, &meta(30, None))
            .unwrap();
    let best = BestVal {
        accuracy: 0.9,
        step: 20,
    };
    let line = line.as_deref();
    for other in [
        BestVal {
            accuracy: 0.8,
            ..best
        },
        BestVal { step: 10, ..best },
    ] {
        assert_eq!(carry_best(&resumed, &new, line, other), Ok(None));
    }
    assert_eq!(carry_best(&resumed, &new, Some("runs/z"), best), Ok(None));
    // (its own directory: nothing to bring)
    assert_eq!(carry_best(&resumed, &old, line, best), Ok(None));
    assert!(!new.join(BEST).exists());
    let to = carry_best(&resumed, &new, line, best).unwrap().unwrap();
    assert_eq!(to, new.join(BEST));
    let carried = read_meta(&to).unwrap();
    assert_eq!((carried.step, carried.val_accuracy), (20, Some(0.9)));
    assert_eq!(
        fs::read(to.join(WEIGHTS)).unwrap(),
        fs::read(old.join(BEST).join(WEIGHTS)).unwrap()
    );
    let names: Vec<_> = fs::read_dir(&new)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [BEST], "nothing left beside it");
    // once there, a second start keeps it
    assert_eq!(carry_best(&resumed, &new, line, best), Ok(None));
    // a damaged best is not brought: said, and nothing left behind
    let third = tmp.path().join("c/checkpoints");
    fs::create_dir_all(&third).unwrap();
    let weights = old.join(BEST).join(WEIGHTS);
    let mut bytes = fs::read(&weights).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    fs::remove_file(&weights).unwrap();
    fs::write(&weights, bytes).unwrap();
    let e = carry_best(&resumed, &third, line, best).unwrap_err();
    assert!(e.contains("not the ones its state.json records"), "{e}");
    assert_eq!(fs::read_dir(&third).unwrap().count(), 0);
}
