use super::*;

#[test]
fn a_run_directory_inside_a_checkpoint_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("checkpoints/step-00000010");
    std::fs::create_dir_all(&ck).unwrap();
    std::fs::write(ck.join("state.json"), "{}").unwrap();
    let e = unused(&ck.join("mine"), false).unwrap_err();
    assert!(
        e.contains("is inside checkpoint") && e.contains("step-00000010"),
        "{e}"
    );
    assert!(unused(&dir.path().join("mine"), false).is_ok());
    // the checkpoint directory itself (its metrics file would make it a run directory, and
    // `--resume` of it continue this run instead of its checkpoints')
    let e = unused(&dir.path().join("checkpoints"), false).unwrap_err();
    assert!(
        e.contains("is a checkpoint directory (it holds checkpoint")
            && e.contains("step-00000010)"),
        "{e}"
    );
    // one holding a best checkpoint alone
    let best = dir.path().join("b/best");
    std::fs::create_dir_all(&best).unwrap();
    std::fs::write(best.join("state.json"), "{}").unwrap();
    let e = unused(&dir.path().join("b"), true).unwrap_err();
    assert!(e.contains("is a checkpoint directory"), "{e}");
}

#[test]
fn a_folder_of_runs_is_no_run_directory() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let one = runs.join("digits/20261203-224028");
    std::fs::create_dir_all(&one).unwrap();
    std::fs::write(one.join(METRICS), "").unwrap();
    let e = unused(&runs, false).unwrap_err();
    assert!(
        e.contains("holds other runs' directories") && e.contains("runs/NAME"),
        "{e}"
    );
    // a folder of other things is one (a run's own folders among them)
    std::fs::create_dir_all(dir.path().join("mine/sub")).unwrap();
    std::fs::create_dir_all(dir.path().join("mine/checkpoints/step-00000001")).unwrap();
    std::fs::create_dir_all(dir.path().join("mine/tensorboard")).unwrap();
    assert!(unused(&dir.path().join("mine"), false).is_ok());
}

#[test]
fn the_folder_runs_were_started_in_holds_them_and_those_given_a_run_dir_there() {
    let dir = tempfile::tempdir().unwrap();
    let run = |p: &str| {
        let d = dir.path().join(p);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(METRICS), "").unwrap();
        d
    };
    let given = run("d1");
    let default = run("runs/digits/20261203-224028");
    let found: Vec<PathBuf> = runs_under(dir.path()).into_iter().map(|r| r.0).collect();
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found.contains(&given) && found.contains(&default),
        "{found:?}"
    );
    // (another folder's grandchildren's children are not looked into)
    run("data/a/b");
    assert_eq!(runs_under(dir.path()).len(), 2);
}

#[test]
fn a_path_through_a_link_is_where_the_link_points_now() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().canonicalize().unwrap();
    std::fs::create_dir(real.join("a")).unwrap();
    std::os::unix::fs::symlink("a", real.join(LATEST)).unwrap();
    // through the link, to a folder not made yet
    let through = real.join(LATEST).join("checkpoints/x");
    assert_eq!(followed(&through), real.join("a/checkpoints/x"));
    // the link moving afterwards does not move the path taken
    std::fs::create_dir(real.join("b")).unwrap();
    std::fs::remove_file(real.join(LATEST)).unwrap();
    std::os::unix::fs::symlink("b", real.join(LATEST)).unwrap();
    assert_eq!(followed(&real.join("a/ck")), real.join("a/ck"));
    // no link on the way: as written
    assert_eq!(
        followed(Path::new("/nowhere-xyz/ck")),
        Path::new("/nowhere-xyz/ck")
    );
    assert_eq!(followed(Path::new("ck/a")), Path::new("ck/a"));
}

#[test]
fn names_become_one_safe_path_component() {
    assert_eq!(file_name_of("digits-mlp:128,64"), "digits-mlp_128_64");
    assert_eq!(file_name_of("../../etc"), "_.._etc");
    assert_eq!(file_name_of(""), "run");
    assert_eq!(file_name_of("a/b c"), "a_b_c");
}

#[test]
fn default_dirs_are_unique_and_stamped() {
    let root = tempfile::tempdir().unwrap();
    let a = default_dir(root.path(), "x");
    Created::new(&a, true).unwrap().keep(true).settle();
    fs::write(a.join(METRICS), "").unwrap();
    let b = default_dir(root.path(), "x");
    assert_ne!(a, b);
    let stamp = a.file_name().unwrap().to_str().unwrap();
    assert_eq!(stamp.len(), 15, "{stamp}");
    assert_eq!(&stamp[8..9], "-");
    let latest = root.path().join(RUNS).join("x").join(LATEST);
    assert_eq!(fs::read_link(&latest).unwrap(), a.file_name().unwrap());
    assert!(Created::new(&a, false).err().unwrap().contains("--resume"));
    // the same default name in the same second: the next one is numbered, and one numbered
    // already that another run took goes on from its number
    let again = Created::new(&a, true).unwrap();
    assert!(
        again.path().to_str().unwrap().ends_with("-2"),
        "{:?}",
        again.path()
    );
    let third = Created::new(again.path(), true).unwrap();
    assert_eq!(
        third.path(),
        again.path().with_file_name(format!("{stamp}-3"))
    );
    // a `latest` that is not a link is the user's: left, and said
    let latest_b = root.path().join(RUNS).join("y").join(LATEST);
    fs::create_dir_all(latest_b.parent().unwrap()).unwrap();
    fs::write(&latest_b, "mine").unwrap();
    let note = Created::new(&default_dir(root.path(), "y"), true)
        .unwrap()
        .keep(true)
        .settle()
        .unwrap();
    assert!(note.contains("is not the link to the newest run"), "{note}");
    assert_eq!(fs::read_to_string(&latest_b).unwrap(), "mine");
}

#[test]
fn latest_points_at_the_run_started_last_whatever_order_they_finish_starting() {
    let root = tempfile::tempdir().unwrap();
    let parent = root.path().join("x");
    let link = |leaf: &str| {
        fs::create_dir_all(parent.join(leaf)).unwrap();
        link_latest_to(&parent.join(leaf));
        fs::read_link(parent.join(LATEST)).unwrap()
    };
    assert_eq!(link("20261202-011841-10"), Path::new("20261202-011841-10"));
    // started earlier (the same second's 2nd, 9th; a second before), kept later
    for earlier in ["20261202-011841-2", "20261202-011841-9", "20261202-011840"] {
        assert_eq!(link(earlier), Path::new("20261202-011841-10"), "{earlier}");
    }
    assert_eq!(link("20261202-011842"), Path::new("20261202-011842"));
    // a link to a run that is gone is replaced, as is one to a run that ended long ago
    // (its stamp later: the clock went back)
    fs::remove_dir(parent.join("20261202-011842")).unwrap();
    assert_eq!(link("20261202-011841"), Path::new("20261202-011841"));
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    let old = fs::File::open(parent.join("20261202-011841")).unwrap();
    old.set_modified(hour_ago).unwrap();
    assert_eq!(link("20261202-011840"), Path::new("20261202-011840"));
}

#[test]
fn a_failed_start_takes_back_only_the_empty_directories_it_made() {
    let root = tempfile::tempdir().unwrap();
    let fresh = root.path().join("fresh");
    drop(Created::new(&fresh, true).unwrap());
    assert!(!fresh.exists());
    // a --run-dir that already held the user's files keeps them
    let theirs = root.path().join("theirs");
    fs::create_dir(&theirs).unwrap();
    fs::write(theirs.join("notes.txt"), "mine").unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&theirs, fs::Permissions::from_mode(0o755)).unwrap();
    drop(Created::new(&theirs, false).unwrap());
    assert!(theirs.join("notes.txt").is_file());
    let mode = fs::metadata(&theirs).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o755, "an existing --run-dir keeps its permissions");
    // runs given one --run-dir at once: the one that made it lost the lock to one that found
    // it made, which runs on in it: its lock and directory stay; the lock it took itself goes
    let shared = root.path().join("shared");
    let made = Created::new(&shared, false).unwrap();
    let other = checkpoint::lock(&shared.join(CHECKPOINTS)).unwrap();
    fs::write(
        shared.join(CHECKPOINTS).join(checkpoint::LOCK_FILE),
        "4000000",
    )
    .unwrap();
    drop(made);
    assert!(shared
        .join(CHECKPOINTS)
        .join(checkpoint::LOCK_FILE)
        .is_file());
    drop(other);
    let mine = root.path().join("mine");
    let made = Created::new(&mine, false).unwrap();
    let held = checkpoint::lock(&mine.join(CHECKPOINTS)).unwrap();
    drop(made);
    drop(held);
    assert!(!mine.exists());
}

#[test]
fn a_run_directory_is_made_though_another_start_takes_back_its_parent_meanwhile() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
    let root = tempfile::tempdir().unwrap();
    let parent = root.path().join("runs/name");
    let (stop, taken) = (AtomicBool::new(false), AtomicUsize::new(0));
    let failed: Vec<String> = std::thread::scope(|s| {
        // (failed starts' taking back, one after another: the parent removed where empty)
        s.spawn(|| {
            while !stop.load(Relaxed) {
                if fs::remove_dir(&parent).is_ok() {
                    taken.fetch_add(1, Relaxed);
                }
                std::thread::sleep(std::time::Duration::from_micros(20));
            }
        });
        let failed = (0..1000)
            .filter_map(|i| {
                let run = parent.join(format!("run{i}"));
                let made = Created::new(&run, true).err();
                let _ = fs::remove_dir(&run);
                made
            })
            .collect();
        stop.store(true, Relaxed);
        failed
    });
    assert!(failed.is_empty(), "{failed:?}");
    assert!(taken.load(Relaxed) > 0);
}

/// A signal as a run has just started (its directory kept, its metrics file, socket and
/// TensorBoard folder made, the front not yet handling signals) ends the process at once: what
/// the start made goes, and `latest` names it only once the front handles signals.
#[test]
fn a_run_quit_before_its_front_handles_signals_leaves_no_directory_behind() {
    let root = tempfile::tempdir().unwrap();
    let parent = root.path().join("runs/name");
    let kept = Created::new(&parent.join("20261206-200000"), true)
        .unwrap()
        .keep(true);
    let dir = kept.path().to_path_buf();
    let held = checkpoint::lock(&dir.join(CHECKPOINTS)).unwrap();
    fs::write(dir.join(METRICS), "{\"type\":\"run\"}\n").unwrap();
    fs::write(pointer_of(&dir.join(SOCKET)), "/tmp/elsewhere.sock").unwrap();
    fs::create_dir_all(dir.join(TENSORBOARD).join("name")).unwrap();
    fs::write(dir.join(TENSORBOARD).join("name/events.out"), "x").unwrap();
    assert!(
        fs::symlink_metadata(parent.join(LATEST)).is_err(),
        "latest points at a run only once it is settled"
    );
    // what the quit's task does (the handler runs it, then the process exits)
    created::take_back(&dir, &[parent.clone(), root.path().join("runs")], true);
    drop(held);
    assert!(!root.path().join("runs").exists());
    // a checkpoint written meanwhile keeps the directory, and with it the run's files
    let kept = Created::new(&parent.join("20261206-200001"), true)
        .unwrap()
        .keep(true);
    let dir = kept.path().to_path_buf();
    let held = checkpoint::lock(&dir.join(CHECKPOINTS)).unwrap();
    fs::create_dir_all(dir.join(CHECKPOINTS).join("step-00000001")).unwrap();
    created::take_back(&dir, std::slice::from_ref(&parent), true);
    drop(held);
    assert!(dir.join(CHECKPOINTS).join("step-00000001").is_dir());
    // settled: the run's for good, and `latest` names it
    assert_eq!(kept.settle(), None);
    assert_eq!(
        fs::read_link(parent.join(LATEST)).unwrap(),
        Path::new("20261206-200001")
    );
}

/// Two live runs write in turn: the one started last stays first whichever wrote last; a
/// file that does not say when its run started goes by its last change.
#[test]
fn runs_are_found_the_one_started_last_first() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, record: &str| {
        let d = dir.path().join(name);
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join(METRICS), format!("{record}\n")).unwrap();
        d
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let new = run(
        "new",
        &format!("{{\"type\":\"run\",\"started_unix\":{}}}", now - 60.0),
    );
    // (written after the newer one started: its file changed last)
    std::thread::sleep(std::time::Duration::from_millis(20));
    let old = run(
        "old",
        &format!("{{\"type\":\"run\",\"started_unix\":{}}}", now - 600.0),
    );
    let unsaid = run("unsaid", "{\"type\":\"run\"}");
    let old_enough = std::time::SystemTime::now() - std::time::Duration::from_secs(300);
    fs::File::options()
        .write(true)
        .open(unsaid.join(METRICS))
        .unwrap()
        .set_modified(old_enough)
        .unwrap();
    let order: Vec<PathBuf> = runs_under(dir.path()).into_iter().map(|r| r.0).collect();
    assert_eq!(order, [new, unsaid, old]);
    assert_eq!(runs_and_closed(dir.path()).1, 0);
}
