//! The `--config` file's readings and refusals.

use std::path::Path;

use crate::cli::tests::cli;
use crate::cli::{Cli, Frontend};
use crate::config::RunConfig;
use clap::Parser;

/// The config file `f` holding `text`, read as a run's (`cli`).
fn with_file(f: &Path, text: &str) -> Result<(RunConfig, Frontend), String> {
    std::fs::write(f, text).unwrap();
    cli(&["--config", f.to_str().unwrap()])
}

/// A decimal past its key's 32-bit number is said in the words written, as the flag's is, not
/// read as infinity; one within it, and `inf` written as such (refused later, as the flag's), are
/// read as written.
#[test]
fn a_config_decimal_past_its_keys_number_is_named_by_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("run.toml");
    let e = with_file(&f, "steps = 3\nmomentum = 1e308\n").unwrap_err();
    assert!(
        e.contains(
            "run.toml (line 2): `momentum = 1e308` is beyond the numbers the key holds (±3.4e38)"
        ),
        "{e}"
    );
    let e = with_file(&f, "weight-decay = -4e38\n").unwrap_err();
    assert!(
        e.contains("(line 1): `weight-decay = -4e38` is beyond"),
        "{e}"
    );
    assert!(with_file(&f, "momentum = 3e38\n").is_ok());
    let from_file = with_file(&f, "momentum = inf\n").map(|(c, _)| c.momentum);
    let from_flag = cli(&["--momentum", "inf"]).map(|(c, _)| c.momentum);
    assert_eq!(from_file, from_flag);
}

/// Where the run starts is one setting, as the budget is: a run's config file that `init`s it
/// serves to resume it, `--resume` given over the file's `init` (and its `init-partial`); an
/// `--init` flag over a file's `resume` starts afresh. Either is said as given over the file.
#[test]
fn a_start_flag_replaces_the_config_file_s_start() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("ft.toml");
    let text = "model = \"mlp:8\"\ninit = \"w.safetensors\"\ninit-partial = true\n";
    std::fs::write(&f, text).unwrap();
    let with = |flags: &[&str]| {
        let mut v = vec!["mgtop-train", "--config", f.to_str().unwrap()];
        v.extend_from_slice(flags);
        Cli::try_parse_from(v)
            .unwrap()
            .train
            .with_config_file()
            .unwrap()
    };
    let (args, origins) = with(&["--resume", "runs/ft"]);
    assert_eq!(args.resume.as_deref(), Some(Path::new("runs/ft")));
    assert_eq!((args.init, args.init_partial), (None, None));
    let note = origins.config_note().unwrap();
    assert!(
        note.ends_with(": model (given over it: --resume)"),
        "{note}"
    );
    // without a start flag, the file's own
    let (args, _) = with(&["--steps", "3"]);
    assert_eq!(args.init.as_deref(), Some(Path::new("w.safetensors")));
    assert_eq!(args.init_partial, Some(true));
    // a file that resumes, and --init over it: a run started afresh from the weights
    std::fs::write(&f, "resume = \"runs/old\"\n").unwrap();
    let (args, _) = with(&["--init", "other.safetensors"]);
    assert_eq!(args.resume, None);
    assert_eq!(args.init.as_deref(), Some(Path::new("other.safetensors")));
}

#[test]
fn an_empty_value_in_a_config_file_is_named_by_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("run.toml");
    for (text, key, line) in [
        ("steps = 3\nresume = \"\"\n", "resume", 2),
        ("'run-dir' = \"  \"\nsteps = 3\n", "run-dir", 1),
        ("steps = 3\n\n  export = \"\"\n", "export", 3),
    ] {
        let e = with_file(&f, text).unwrap_err();
        assert!(
            e.contains(&format!(
                "run.toml (line {line}): `{key}` is empty; give it a value"
            )),
            "{e}"
        );
    }
    // but for the one whose empty value means the flag alone
    assert!(with_file(&f, "steps = 3\ntensorboard = \"\"\n").is_ok());
}

#[test]
fn a_config_file_of_two_budgets_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("run.toml");
    let e = with_file(&f, "epochs = 3\nsteps = 10\n").unwrap_err();
    assert!(
        e.contains("run.toml: `epochs` and `steps` are both set: keep one budget"),
        "{e}"
    );
    // a flag for either is the budget
    assert!(cli(&["--config", f.to_str().unwrap(), "--steps", "4"]).is_ok());
}
