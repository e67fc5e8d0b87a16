use std::path::Path;

use super::*;

/// A report of ours starts with `OURS`.
const REPORT: Output = Output {
    flag: "--json",
    kind: "a report",
    example: "r.json",
    ours: |p| head(p, 4) == b"OURS",
};

#[test]
fn a_new_file_an_empty_one_or_one_of_its_kind_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let new = d.join("r.json");
    assert_eq!(REPORT.target(&new).unwrap(), new);
    let empty = d.join("empty.json");
    std::fs::write(&empty, "").unwrap();
    REPORT.target(&empty).unwrap();
    let earlier = d.join("earlier.json");
    std::fs::write(&earlier, "OURS {}").unwrap();
    REPORT.target(&earlier).unwrap();
    // through a link: the file linked to
    let link = d.join("link.json");
    std::os::unix::fs::symlink(&earlier, &link).unwrap();
    assert_eq!(
        REPORT.target(&link).unwrap(),
        earlier.canonicalize().unwrap()
    );
}

#[test]
fn a_file_of_a_run_or_of_another_kind_is_never_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let said = |p: &Path| REPORT.target(p).unwrap_err();
    // another file, even one named as ours would be
    let notes = d.join("notes.py");
    std::fs::write(&notes, "precious").unwrap();
    let e = said(&notes);
    assert!(
        e.starts_with("--json ")
            && e.contains("exists and is not a report: remove it or give another name"),
        "{e}"
    );
    // a checkpoint's files, whatever they hold, and the run directory's own
    let run = d.join("run");
    let ckpt = run.join("checkpoints/step-00000020");
    std::fs::create_dir_all(&ckpt).unwrap();
    std::fs::write(ckpt.join("state.json"), "OURS").unwrap();
    std::fs::write(run.join("metrics.jsonl"), "OURS").unwrap();
    for f in ["state.json", "model.safetensors", "new.json"] {
        let e = said(&ckpt.join(f));
        assert!(
            e.contains("is in the checkpoint") && e.contains("--resume"),
            "{e}"
        );
    }
    let e = said(&run.join("metrics.jsonl"));
    assert!(e.contains("is a file of the run directory"), "{e}");
    // beside them, a report is a file like any other
    REPORT.target(&run.join("eval.json")).unwrap();
}

#[test]
fn what_is_not_a_file_to_write_is_named_with_the_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let said = |p: &Path| REPORT.target(p).unwrap_err();
    assert!(said(Path::new("/dev/null")).contains("a character device, not a regular file"));
    let e = said(d);
    assert!(
        e.contains("is a directory") && e.ends_with("/r.json"),
        "{e}"
    );
    let e = said(&d.join("none/r.json"));
    assert!(
        e.contains("does not exist") && e.contains("mkdir -p"),
        "{e}"
    );
    std::fs::write(d.join("file"), "x").unwrap();
    let e = said(&d.join("file/r.json"));
    assert!(e.contains("file is a file, not a folder"), "{e}");
    let e = said(Path::new(&format!("{}/new/", d.display())));
    assert!(e.contains("new/r.json"), "{e}");
    assert!(said(Path::new("")).contains("an empty path"));
}
