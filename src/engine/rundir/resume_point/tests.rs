use super::*;

#[test]
fn a_runs_checkpoints_elsewhere_are_found_from_its_metrics_file() {
    let root = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(root.path()).unwrap();
    let (run, ck) = (root.join("run"), root.join("ck"));
    fs::create_dir(&run).unwrap();
    // a checkpoint's state.json, written by run `by`
    let state = |step: &str, by: &Path| {
        fs::create_dir_all(ck.join(step)).unwrap();
        let n: u64 = step.trim_start_matches("step-").parse().unwrap();
        let meta = serde_json::json!({
            "format": checkpoint::FORMAT, "step": n, "epoch": 0, "offset": 0,
            "per_replica": 8, "ranks": 1, "lr": 1e-3, "optimizer": "adam",
            "optimizer_steps": 1, "dims": [4, 2], "seed": 0, "data": "digits",
            "config": {}, "run_dir": by.display().to_string(),
        });
        fs::write(ck.join(step).join("state.json"), meta.to_string()).unwrap();
    };
    state("step-00000005", &run);
    state("step-00000009", &run);
    // the same step written since by another run (resumed into the same directory)
    state("step-00000011", &root.join("another"));
    let event = |path: &Path| {
        format!(
            "{{\"type\":\"event\",\"kind\":\"checkpoint\",\"step\":1,\"path\":\"{}\"}}\n",
            path.display()
        )
    };
    // an overlong line, ending in a whole event for a checkpoint of the run: passed over
    let long = format!(
        "{}{}",
        " ".repeat(2 << 20),
        event(&ck.join("step-00000009"))
    );
    let lines = [
        event(&ck.join("step-00000005")),
        long.clone(),
        // a relative path, a checkpoint since removed, another run's: passed over
        event(Path::new("ck/step-00000009")),
        event(&ck.join("step-00000012")),
        event(&ck.join("step-00000011")),
    ];
    fs::write(run.join(METRICS), lines.concat()).unwrap();
    assert_eq!(last_written(&run), Some(ck.join("step-00000005")));
    fs::write(
        run.join(METRICS),
        [long, event(&ck.join("step-00000009"))].concat(),
    )
    .unwrap();
    assert_eq!(last_written(&run), Some(ck.join("step-00000009")));
    fs::write(run.join(METRICS), &lines[2]).unwrap();
    assert_eq!(last_written(&run), None);
    assert!(no_checkpoint(&run, Purpose::Resume).contains("has no checkpoint to resume from"));
    // checkpoints it recorded, moved or removed since: said so, the newest named
    fs::write(run.join(METRICS), event(&ck.join("step-00000012"))).unwrap();
    let e = no_checkpoint(&run, Purpose::Resume);
    assert!(
        e.contains("recorded checkpoints (the newest ")
            && e.contains("step-00000012), and none is there now: moved or removed"),
        "{e}"
    );
    // there, and another run's (a copy of its directory): named, to be taken by name
    fs::write(run.join(METRICS), event(&ck.join("step-00000011"))).unwrap();
    let e = no_checkpoint(&run, Purpose::Resume);
    assert!(
        e.contains("that say they are another run's")
            && e.contains(&format!("--resume {}", ck.join("step-00000011").display())),
        "{e}"
    );
    fs::write(run.join(METRICS), &lines[2]).unwrap();
    // only best/ left: said, with how to name it (never taken unasked)
    let best = run.join(CHECKPOINTS).join("best");
    fs::create_dir_all(&best).unwrap();
    fs::write(best.join("state.json"), "{}").unwrap();
    let e = no_checkpoint(&run, Purpose::Resume);
    assert!(
        e.contains(&format!(
            "only its best validation's checkpoint is left: --resume {}",
            best.display()
        )),
        "{e}"
    );
    fs::remove_dir_all(&best).unwrap();
    // no checkpoint event left (lost on a full disk): the run record's --checkpoint-dir
    // has its newest, not another run's newer one
    let record = serde_json::json!({"type": "run", "checkpoint_dir": ck.display().to_string()});
    fs::write(run.join(METRICS), format!("{record}\n")).unwrap();
    assert_eq!(last_written(&run), None);
    let found = checkpoint_for(&run, Purpose::Resume).unwrap();
    assert_eq!(found, ck.join("step-00000009"));
}

#[test]
fn export_is_answered_in_its_own_words() {
    let root = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(root.path()).unwrap();
    let runs = root.join("runs");
    for name in ["a", "b"] {
        let run = runs.join(name);
        fs::create_dir_all(&run).unwrap();
        fs::write(run.join(METRICS), "").unwrap();
    }
    let e = checkpoint_for(&runs, Purpose::Export).unwrap_err();
    let a = runs.join("a").display().to_string();
    assert!(
        e.starts_with(&format!(
            "export {} holds 2 runs; pass the one to export:",
            runs.display()
        )) && e.contains(&format!("  mgtop-train export {a} FILE"))
            && !e.contains("--resume"),
        "{e}"
    );
    let e = checkpoint_for(&runs.join("a"), Purpose::Export).unwrap_err();
    assert!(
        e.contains("has no checkpoint to export") && !e.contains("resume"),
        "{e}"
    );
    let e = checkpoint_for(&runs, Purpose::Resume).unwrap_err();
    assert!(
        e.contains("pass the one to continue") && e.contains(&format!("  --resume {a}")),
        "{e}"
    );
    // a run with a checkpoint is listed as it is, one without says so
    let ck = runs.join("b/checkpoints/step-00000001");
    fs::create_dir_all(&ck).unwrap();
    fs::write(ck.join("state.json"), "{}").unwrap();
    let e = checkpoint_for(&runs, Purpose::Resume).unwrap_err();
    let b = runs.join("b").display().to_string();
    assert!(
        e.contains(&format!("  --resume {a}   (no checkpoint to take)"))
            && e.lines().any(|l| l == format!("  --resume {b}")),
        "{e}"
    );
}

#[test]
fn a_checkpoint_that_lost_its_state_is_named_so() {
    let dir = tempfile::tempdir().unwrap();
    let step = fs::canonicalize(dir.path()).unwrap().join("step-00000010");
    fs::create_dir(&step).unwrap();
    fs::write(step.join(checkpoint::WEIGHTS), b"weights").unwrap();
    let e = checkpoint_for(&step, Purpose::Resume).unwrap_err();
    let init = step.join(checkpoint::WEIGHTS).display().to_string();
    assert!(
        e.contains("model.safetensors without its state.json")
            && e.ends_with(&format!("--init {init}")),
        "{e}"
    );
}
