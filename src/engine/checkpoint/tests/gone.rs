//! A checkpoint that goes while it is read (its run keeps only its newest).

use super::*;

#[test]
fn a_checkpoint_removed_while_it_is_read_is_said_gone_not_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let (_, _, meta) = sample();
    let p = dir.path().join(format!("step-{:08}", meta.step));
    let e = read_meta(&p).unwrap_err().to_string();
    assert!(
        e.contains("it was removed while it was read") && e.contains("try again"),
        "{e}"
    );
    // found in a run's directory, then removed before the run resumed it: the same, not "no
    // checkpoint at"
    let e = resolve(&p).unwrap_err().to_string();
    assert!(
        e.contains("it was removed while it was read") && e.contains("try again"),
        "{e}"
    );
}
