//! Checkpoints written, read back, damaged and locked.

use super::*;
use crate::nn::optim::OptimizerKind;
use std::fs;

/// A step's checkpoint written as a run writes it.
fn write(
    dir: &Path,
    model: &Model,
    state: &TrainState,
    meta: &CheckpointMeta,
) -> Result<PathBuf, CheckpointError> {
    super::write(dir, &step_name(meta.step), model, state, meta)
}

fn sample() -> (Model, TrainState, CheckpointMeta) {
    // batch norm: running statistics ride along
    let spec = "dense3,bn".parse().unwrap();
    let model = Model::new(crate::nn::shape::Shape::Flat(4), &spec, 2).unwrap();
    let params = model.init_params(1);
    let mut opt = OptState::new(OptimizerKind::Adam, model.n_params);
    opt.t = 7;
    opt.m
        .iter_mut()
        .enumerate()
        .for_each(|(i, x)| *x = i as f32);
    let meta = CheckpointMeta {
        step: 12,
        epoch: 1,
        offset: 40,
        per_replica: 8,
        optimizer_steps: 7,
        dims: model.dims.clone(),
        ..CheckpointMeta::example()
    };
    let buffers = (0..model.n_buffers).map(|i| 0.5 + i as f32).collect();
    (
        model,
        TrainState {
            params,
            opt,
            buffers,
        },
        meta,
    )
}

#[test]
fn a_checkpoint_opened_then_removed_by_its_run_is_still_read_whole() {
    // (eval opens it, then reads its data for seconds while --keep-checkpoints removes it)
    let dir = tempfile::tempdir().unwrap();
    let (model, state, meta) = sample();
    let p = write(dir.path(), &model, &state, &meta).unwrap();
    let opened = open(&p).unwrap();
    fs::remove_dir_all(&p).unwrap();
    let (_, read) = opened.read(&model, "adam").unwrap();
    assert_eq!((read.params, read.buffers), (state.params, state.buffers));
    // one not opened before is said to have gone, not to be damaged
    let e = read_meta(&p).unwrap_err().to_string();
    assert!(e.contains("it was removed while it was read"), "{e}");
}

#[test]
fn round_trips_and_resolves_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    let (model, state, mut meta) = sample();
    write(dir.path(), &model, &state, &meta).unwrap();
    meta.step = 30;
    let p = write(dir.path(), &model, &state, &meta).unwrap();
    assert!(p.ends_with("step-00000030"));
    let (m2, s2) = read(dir.path(), &model, "adam").unwrap();
    // (the weights' checksum is the writer's to fill in)
    assert!(m2.weights_crc32c.is_some());
    let m2 = CheckpointMeta {
        weights_crc32c: None,
        ..m2
    };
    assert_eq!((m2, s2), (meta.clone(), state.clone()));
    // a byte of the weights changed after they were written: found, named, not loaded
    let weights = p.join(WEIGHTS);
    let mut bytes = fs::read(&weights).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    fs::write(&weights, &bytes).unwrap();
    let e = read(&p, &model, "adam").unwrap_err().to_string();
    assert!(
        e.contains("does not match the checksum its state.json recorded"),
        "{e}"
    );
    // cut short (a copy that stopped): said so, with where it ends
    for (len, said) in [
        (0, "it is empty (0 bytes)".to_string()),
        (5, "it holds only 5 bytes".to_string()),
        (
            12,
            "it ends inside its header, at byte 12 of at least".to_string(),
        ),
        (
            last,
            format!(
                "it ends at byte {last} of the {} its header lays out",
                last + 1
            ),
        ),
    ] {
        fs::write(&weights, &bytes[..len]).unwrap();
        let e = read(&p, &model, "adam").unwrap_err().to_string();
        assert!(
            e.contains("was cut short after it was written") && e.contains(&said),
            "{e}"
        );
    }
    // a later run writing the same step replaces it
    let mut other = state.clone();
    other.params[0] += 1.0;
    write(dir.path(), &model, &other, &meta).unwrap();
    assert_eq!(read(&p, &model, "adam").unwrap().1, other);
    let leftovers: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty());
}

#[test]
fn rejects_other_shapes_optimizers_and_damaged_files() {
    let dir = tempfile::tempdir().unwrap();
    let (model, state, meta) = sample();
    let p = write(dir.path(), &model, &state, &meta).unwrap();
    let other = Model::mlp(4, &[5], 2);
    let e = read(&p, &other, "adam").unwrap_err().to_string();
    assert!(
        e.contains("written for another model") && e.contains("--model"),
        "{e}"
    );
    // of the same inputs and classes, other tensors: another model, not a damaged file
    let spec = "dense3,relu,bn".parse().unwrap();
    let other = Model::new(crate::nn::shape::Shape::Flat(4), &spec, 2).unwrap();
    let e = read(&p, &other, "adam").unwrap_err().to_string();
    assert!(
        e.contains("written for another model: it has no tensor"),
        "{e}"
    );
    let e = read(&p, &model, "sgd").unwrap_err().to_string();
    assert!(e.contains("--optimizer adam"), "{e}");
    let bytes = fs::read(p.join(WEIGHTS)).unwrap();
    fs::write(p.join(WEIGHTS), &bytes[..bytes.len() / 2]).unwrap();
    let e = read(&p, &model, "adam").unwrap_err().to_string();
    assert!(e.contains("unreadable"), "{e}");
    let e = read(&dir.path().join("nope"), &model, "adam")
        .unwrap_err()
        .to_string();
    assert!(e.contains("no checkpoint at"), "{e}");
}

#[test]
fn the_newest_is_the_highest_step_not_the_last_name() {
    let dir = tempfile::tempdir().unwrap();
    let (model, state, mut meta) = sample();
    meta.epoch = 1;
    for step in [99_999_999, 100_000_000] {
        meta.step = step;
        write(dir.path(), &model, &state, &meta).unwrap();
    }
    assert!(resolve(dir.path()).unwrap().ends_with("step-100000000"));
}

#[test]
fn a_newer_step_directory_that_is_no_checkpoint_is_passed_over_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let (model, state, mut meta) = sample();
    for step in [100, 200, 300] {
        meta.step = step;
        write(dir.path(), &model, &state, &meta).unwrap();
    }
    // step 300's state.json lost (a disk error, a hand that tidied)
    fs::remove_file(dir.path().join("step-00000300").join(STATE)).unwrap();
    let taken = resolve(dir.path()).unwrap();
    assert!(taken.ends_with("step-00000200"), "{taken:?}");
    let passed = passed_over(&taken, 200);
    assert_eq!(passed, [dir.path().join("step-00000300")]);
    // one taken by hand from further back names the same one (step 200 is a checkpoint)
    assert!(passed_over(&dir.path().join("step-00000100"), 100) == passed);
}

#[test]
fn a_state_the_flags_would_refuse_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (model, state, meta) = sample();
    type Edit = fn(&mut CheckpointMeta);
    let bad: [(&str, Edit); 13] = [
        ("optimizer `lamb` is not one", |m| {
            m.optimizer = "lamb".into()
        }),
        ("dims has 100000 entries", |m| m.dims = vec![4; 100_000]),
        ("config.grad_accum 18446744073709551615", |m| {
            m.config = serde_json::json!({ "grad_accum": u64::MAX })
        }),
        ("config.label_smoothing 5.0", |m| {
            m.config = serde_json::json!({ "label_smoothing": 5.0 })
        }),
        ("config.grad_accum \"four\"", |m| {
            m.config = serde_json::json!({ "grad_accum": "four" })
        }),
        ("config is \"x\", not the run's settings", |m| {
            m.config = serde_json::json!("x")
        }),
        ("classes names 3 classes for the model's 2 outputs", |m| {
            m.classes = vec!["cat".into(), "dog".into(), "bird".into()]
        }),
        ("per_replica 0", |m| m.per_replica = 0),
        ("per_replica 18446744073709551615", |m| {
            m.per_replica = usize::MAX
        }),
        ("lr -0.001", |m| m.lr = -1e-3),
        ("lr 0", |m| m.lr = 0.0),
        ("epoch 18446744073709551615", |m| m.epoch = u64::MAX),
        ("ranks 0", |m| m.ranks = 0),
    ];
    // the first bad one has no other beside it; then an earlier good one is named
    let mut m = meta.clone();
    bad[0].1(&mut m);
    let p = write(dir.path(), &model, &state, &m).unwrap();
    let e = read(&p, &model, "adam").unwrap_err().to_string();
    assert!(
        e.contains("no other whole checkpoint is beside it: start without --resume"),
        "{e}"
    );
    let good = CheckpointMeta {
        step: 5,
        epoch: 0,
        ..meta.clone()
    };
    let earlier = write(dir.path(), &model, &state, &good).unwrap();
    for (want, edit) in bad {
        let mut m = meta.clone();
        edit(&mut m);
        let p = write(dir.path(), &model, &state, &m).unwrap();
        let e = read(&p, &model, "adam").unwrap_err().to_string();
        assert!(
            e.contains(want)
                && e.contains(&format!(
                    "resume from another checkpoint of the run instead: --resume {}",
                    earlier.display()
                )),
            "{want}: {e}"
        );
    }
    // a step other than its folder's name says
    let p = write(dir.path(), &model, &state, &meta).unwrap();
    let json = std::fs::read_to_string(p.join(STATE)).unwrap();
    let edited = json.replacen(
        &format!("\"step\": {}", meta.step),
        "\"step\": 1000000000000",
        1,
    );
    assert_ne!(json, edited);
    std::fs::write(p.join(STATE), edited).unwrap();
    let e = read(&p, &model, "adam").unwrap_err().to_string();
    assert!(
        e.contains(&format!(
            "its step is 1000000000000 where its folder's name says {}",
            meta.step
        )),
        "{e}"
    );
}

#[test]
fn a_second_run_is_told_the_directory_is_taken_and_leftovers_are_cleared() {
    let dir = tempfile::tempdir().unwrap();
    let (model, state, meta) = sample();
    let p = write(dir.path(), &model, &state, &meta).unwrap();
    // an interrupted write, and a replacement interrupted after moving the old one aside
    fs::create_dir(dir.path().join(".tmp-step-00000040-1")).unwrap();
    // and a removal (--keep-checkpoints) interrupted half-way
    fs::create_dir_all(dir.path().join(".removed-step-00000004-1/x")).unwrap();
    let aside = dir.path().join(".old-step-00000012-1");
    fs::rename(&p, &aside).unwrap();
    // the best one's, alike: replaced half-way (put back), written half-way (cleared)
    let best = super::write(dir.path(), BEST, &model, &state, &meta).unwrap();
    fs::rename(&best, dir.path().join(".old-best-1")).unwrap();
    fs::create_dir(dir.path().join(".tmp-best-1")).unwrap();
    let held = lock(dir.path()).unwrap();
    let names: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with(".tmp") || n.starts_with(".old") || n.starts_with(".rem")),
        "{names:?}"
    );
    assert_eq!(read(&p, &model, "adam").unwrap().1, state);
    assert_eq!(read(&best, &model, "adam").unwrap().1, state);
    // (the best one is no step's: the newest step's is resumed)
    assert_eq!(resolve(dir.path()).unwrap(), p);
    let e = lock(dir.path()).unwrap_err().to_string();
    assert!(
        e.contains(&format!("(pid {})", std::process::id())) && e.contains("--checkpoint-dir"),
        "{e}"
    );
    drop(held);
    lock(dir.path()).unwrap();
    // a file where the directory should be
    let file = dir.path().join("f");
    fs::write(&file, "x").unwrap();
    let e = lock(&file).unwrap_err().to_string();
    assert!(e.contains("is a file"), "{e}");
    // a lock file that is another file's second name is not written to
    let other = tempfile::tempdir().unwrap();
    fs::write(other.path().join("notes"), "keep").unwrap();
    fs::remove_file(dir.path().join(LOCK_FILE)).unwrap();
    fs::hard_link(other.path().join("notes"), dir.path().join(LOCK_FILE)).unwrap();
    let e = lock(dir.path()).unwrap_err().to_string();
    assert!(e.contains("has other names (hard links)"), "{e}");
    assert_eq!(
        fs::read_to_string(other.path().join("notes")).unwrap(),
        "keep"
    );
    // a live run's lock, linked elsewhere since (a backup): the run holding it is named
    fs::remove_file(dir.path().join(LOCK_FILE)).unwrap();
    let held = lock(dir.path()).unwrap();
    fs::hard_link(dir.path().join(LOCK_FILE), other.path().join("backup")).unwrap();
    let e = lock(dir.path()).unwrap_err().to_string();
    assert!(e.contains(&format!("(pid {})", std::process::id())), "{e}");
    drop(held);
}

#[test]
fn a_directory_resumed_from_is_tidied_unless_a_run_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    drop(lock(dir.path()).unwrap()); // a run wrote there, then was killed mid-checkpoint
    let half = dir.path().join(".tmp-step-00000040-1");
    fs::create_dir(&half).unwrap();
    let held = lock(dir.path()).unwrap();
    fs::create_dir(&half).unwrap(); // (the run holding it is writing one now)
    tidy_if_free(dir.path());
    assert!(
        half.is_dir(),
        "a live run's checkpoint under way was removed"
    );
    drop(held);
    tidy_if_free(dir.path());
    assert!(!half.exists());
    // a directory no run wrote is left alone
    let other = tempfile::tempdir().unwrap();
    let theirs = other.path().join(".tmp-step-1");
    fs::create_dir(&theirs).unwrap();
    tidy_if_free(other.path());
    assert!(theirs.is_dir());
}

#[test]
fn adam_state_without_its_moments_is_refused_not_trained_without_them() {
    let dir = tempfile::tempdir().unwrap();
    let (model, mut state, meta) = sample();
    state.opt.m.clear();
    state.opt.v.clear();
    let p = write(dir.path(), &model, &state, &meta).unwrap();
    let e = read(&p, &model, "adam").unwrap_err().to_string();
    assert!(e.contains("optim.m.") && e.contains("missing"), "{e}");
}

#[test]
fn a_fifo_in_place_of_a_checkpoint_file_is_refused_not_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let (model, state, meta) = sample();
    let p = write(dir.path(), &model, &state, &meta).unwrap();
    fs::remove_file(p.join(WEIGHTS)).unwrap();
    let fifo = std::ffi::CString::new(p.join(WEIGHTS).to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let e = read(&p, &model, "adam").unwrap_err().to_string();
    assert!(e.contains("FIFO"), "{e}");
}

#[test]
fn damaged_optimizer_moments_are_refused_naming_them() {
    let (model, state, meta) = sample();
    for (which, value, says) in [
        ("m", f32::NAN, "first moments (optim.m.*)"),
        ("v", -1.0, "second moments (optim.v.*)"),
        ("v", f32::NEG_INFINITY, "second moments (optim.v.*)"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut bad = state.clone();
        match which {
            "m" => bad.opt.m[3] = value,
            _ => bad.opt.v[5] = value,
        }
        let p = write(dir.path(), &model, &bad, &meta).unwrap();
        let e = read(&p, &model, "adam").unwrap_err().to_string();
        assert!(e.contains(says), "{which}={value}: {e}");
    }
}

#[test]
fn damaged_running_statistics_and_the_old_format_are_refused() {
    let (model, state, mut meta) = sample();
    let dir = tempfile::tempdir().unwrap();
    let mut bad = state.clone();
    // the running variance of `bn.1` (mean first, then variance)
    bad.buffers[4] = -2.0;
    let p = write(dir.path(), &model, &bad, &meta).unwrap();
    let e = read(&p, &model, "adam").unwrap_err().to_string();
    assert!(
        e.contains("running statistics") && e.contains("negative variances"),
        "{e}"
    );
    // a checkpoint of the layout before PyTorch's linear weights
    meta.format = "mgtop-checkpoint/1".into();
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), &model, &state, &meta).unwrap();
    meta.step += 1;
    let p = write(dir.path(), &model, &state, &meta).unwrap();
    let e = read(&p, &model, "adam").unwrap_err().to_string();
    assert!(
        e.contains("older mgtop-train") && e.contains("start a new run"),
        "{e}"
    );
    // its run's other checkpoints are of that version too: not offered instead
    assert!(!e.contains("resume from another checkpoint"), "{e}");
}

#[test]
fn a_checkpoint_of_another_model_says_what_changed_and_what_to_do() {
    let (model, _, meta) = sample();
    let dir = Path::new("/ck/step-00000012");
    let with = |dims: Vec<usize>, model: &str| CheckpointMeta {
        dims,
        config: serde_json::json!({ "model": model }),
        ..meta.clone()
    };
    let mut more_classes = model.dims.clone();
    *more_classes.last_mut().unwrap() += 1;
    let why = model_difference(&with(model.dims.clone(), "dense3,bn"), &more_classes, dir);
    assert!(
        why.starts_with("it classifies into 2 classes and this run's data has 3")
            && why.contains("--init /ck/step-00000012/model.safetensors"),
        "{why}"
    );
    let mut wider_input = model.dims.clone();
    wider_input[0] = 9;
    let why = model_difference(&with(model.dims.clone(), "dense3,bn"), &wider_input, dir);
    assert!(
        why.starts_with("its model takes 4 values a sample and this run's data gives 9"),
        "{why}"
    );
    let why = model_difference(&with(vec![4, 7, 7, 2], "resnet20"), &model.dims, dir);
    assert!(
        why.starts_with("it was written for another model (--model resnet20)"),
        "{why}"
    );
}

#[test]
fn a_damaged_checkpoint_points_past_other_damaged_ones_to_a_whole_one() {
    let dir = tempfile::tempdir().unwrap();
    let (model, state, meta) = sample();
    let at = |step| {
        let m = CheckpointMeta {
            step,
            ..meta.clone()
        };
        write(dir.path(), &model, &state, &m).unwrap()
    };
    let (two, four, six) = (at(2), at(4), at(6));
    // step 4's weights cut short, step 6's state damaged
    let w = four.join(WEIGHTS);
    let bytes = fs::read(&w).unwrap();
    fs::write(&w, &bytes[..bytes.len() - 10]).unwrap();
    fs::write(six.join(STATE), "{").unwrap();
    for damaged in [&four, &six] {
        let e = read(damaged, &model, "adam").unwrap_err().to_string();
        assert!(
            e.contains(&format!("instead: --resume {} (", two.display())),
            "{e}"
        );
    }
    fs::write(two.join(STATE), "{").unwrap();
    let e = read(&six, &model, "adam").unwrap_err().to_string();
    assert!(e.contains("no other whole checkpoint is beside it"), "{e}");
}

mod carry;
mod lines;

mod gone;
