//! The scripts a lent GPU machine runs (`scripts/gpu-check`, `scripts/gpu-lease`) refuse a
//! misspelt section, model or time before anything runs: on a short device lease a typo would
//! otherwise run nothing and pass.

use std::process::{Command, Output};

fn script(name: &str, args: &[&str]) -> Output {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/");
    Command::new("bash")
        .arg(format!("{path}{name}"))
        .args(args)
        .output()
        .expect("bash runs")
}

fn said(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn gpu_check_takes_known_sections_and_models_only() {
    let ok = script(
        "gpu-check",
        &[
            "--only",
            "checks,vision",
            "--models",
            "resnet50",
            "--validate",
        ],
    );
    assert_eq!(ok.status.code(), Some(0), "{}", said(&ok));
    let typo = script("gpu-check", &["--only", "checks,chekcs", "--validate"]);
    assert_eq!(typo.status.code(), Some(2));
    assert!(
        said(&typo).contains("unknown section 'chekcs'"),
        "{}",
        said(&typo)
    );
    let model = script("gpu-check", &["--models", "resnet5", "--validate"]);
    assert!(
        said(&model).contains("unknown model 'resnet5'"),
        "{}",
        said(&model)
    );
    let bare = script("gpu-check", &["--only"]);
    assert!(
        said(&bare).contains("--only needs a value"),
        "{}",
        said(&bare)
    );
}

#[test]
fn gpu_lease_refuses_a_bad_time_or_group_before_running_any() {
    let time = script("gpu-lease", &["10m", "checks"]);
    assert_eq!(time.status.code(), Some(2));
    assert!(
        said(&time).contains("whole number of seconds, not '10m'"),
        "{}",
        said(&time)
    );
    let group = script("gpu-lease", &["30", "checks", "vision:resnet5"]);
    assert_eq!(group.status.code(), Some(2));
    assert!(
        said(&group).contains("group 'vision:resnet5'") && said(&group).contains("unknown model"),
        "{}",
        said(&group)
    );
    // (nothing ran: no group's line)
    assert!(!String::from_utf8_lossy(&group.stdout).contains("==="));
}
