//! Flags, config files and their errors.

use std::path::Path;
use std::time::Duration;

use super::*;
use crate::config::DeviceSpec;
use crate::config::{BatchFrom, Budget, RunConfig};

pub(super) fn cli(args: &[&str]) -> Result<(RunConfig, Frontend), String> {
    let mut v = vec!["mgtop-train"];
    v.extend_from_slice(args);
    Cli::try_parse_from(v)
        .map_err(|e| e.to_string())?
        .train
        .resolve()
}

#[test]
fn a_flag_given_again_replaces_the_earlier_value() {
    let (c, _) = cli(&["--steps", "5", "--lr", "0.1", "--steps", "9"]).unwrap();
    assert_eq!((c.budget, c.lr), (Budget::Steps(9), Some(0.1)));
    // one budget replaces the other, the last given winning (a sweep appends its own)
    let budget = |args: &[&str]| cli(args).unwrap().0.budget;
    assert_eq!(
        budget(&["--steps", "5", "--epochs", "2"]),
        Budget::Epochs(2)
    );
    assert_eq!(budget(&["--epochs", "2", "--steps", "5"]), Budget::Steps(5));
    let three = ["--epochs", "2", "--steps", "5", "--epochs", "3"];
    assert_eq!(budget(&three), Budget::Epochs(3));
    // but for a config file: the first's settings would be dropped without a word
    let e = cli(&["--config", "a.toml", "--steps", "5", "--config", "b.toml"]).unwrap_err();
    assert_eq!(
        e,
        "--config is given 2 times (a.toml, b.toml): a run reads one config file; put the settings in one file, or give the others' as flags"
    );
}

#[test]
fn the_lr_follows_the_batch_by_the_optimizer_s_rule_unless_told() {
    use crate::nn::schedule::LrScaling;
    let scaling = |args: &[&str]| cli(args).unwrap().0.lr_scaling();
    assert_eq!(scaling(&[]), LrScaling::Sqrt, "Adam, the default");
    assert_eq!(scaling(&["--optimizer", "adamw"]), LrScaling::Sqrt);
    assert_eq!(scaling(&["--optimizer", "momentum"]), LrScaling::Linear);
    assert_eq!(scaling(&["--optimizer", "sgd"]), LrScaling::Linear);
    let told = ["--optimizer", "adam", "--lr-scaling", "linear"];
    assert_eq!(scaling(&told), LrScaling::Linear);
}

#[test]
fn flags_override_the_file_which_overrides_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("run.toml");
    std::fs::write(
        &f,
        "devices = \"cpu:3\"\nlr = 0.01\nsteps = 40\nbatch-per-replica = 16\n",
    )
    .unwrap();
    let (c, front) = cli(&["--config", f.to_str().unwrap(), "--lr", "0.5", "--headless"]).unwrap();
    assert!(front.headless);
    assert_eq!(c.devices, DeviceSpec::Cpu(3));
    assert_eq!(c.lr, Some(0.5));
    assert_eq!(c.batch_per_replica, 16);
    // (where the batch came from, for a resumed run's note)
    let file = format!("config file {} (line 4)", f.display());
    assert_eq!(c.batch_from, Some(BatchFrom::Given(file)));
    assert_eq!(c.budget, Budget::Steps(40));
    assert_eq!(c.seed, 0);
    let (c, _) = cli(&["--config", f.to_str().unwrap(), "--epochs", "2"]).unwrap();
    assert_eq!(c.budget, Budget::Epochs(2));
    let flag = ["--config", f.to_str().unwrap(), "--batch-per-replica", "8"];
    let given = cli(&flag).unwrap().0.batch_from;
    assert_eq!(given, Some(BatchFrom::Given("--batch-per-replica".into())));
    std::fs::write(&f, "theme = \"light\"\nsample-interval = 0.5\n").unwrap();
    let (_, front) = cli(&["--config", f.to_str().unwrap(), "--readonly"]).unwrap();
    assert_eq!(front.theme.as_deref(), Some("light"));
    assert!(front.readonly && !front.headless && !front.exit_when_done);
    assert_eq!(front.sample_interval, Duration::from_millis(500));
    // a switch the file turns on, a flag turns off (`--headless=false`)
    std::fs::write(&f, "headless = true\ncalibrate = true\nreadonly = true\n").unwrap();
    let path = f.to_str().unwrap();
    let (c, front) = cli(&["--config", path, "--headless=false", "--calibrate=false"]).unwrap();
    assert!(!front.headless && !c.calibrate && front.readonly);
    let (c, front) = cli(&["--config", path]).unwrap();
    assert!(front.headless && c.calibrate);
    // counts that may also be "auto" are written as numbers or words
    std::fs::write(&f, "prefetch = 2\nthreads-per-worker = 3\n").unwrap();
    let (c, _) = cli(&["--config", f.to_str().unwrap()]).unwrap();
    assert_eq!((c.prefetch, c.threads_per_worker), (2, Some(3)));
    std::fs::write(&f, "prefetch = \"auto\"\nthreads-per-worker = \"auto\"\n").unwrap();
    let (c, _) = cli(&["--config", f.to_str().unwrap()]).unwrap();
    assert_eq!((c.prefetch, c.threads_per_worker), (4, None));
    // words in any case, as --devices AUTO is taken
    let upper = [
        "--prefetch",
        "AUTO",
        "--loader-threads",
        " Auto",
        "--bn-stats",
        "BATCH",
    ];
    let (c, _) = cli(&upper).unwrap();
    assert_eq!((c.prefetch, c.loader_threads), (4, None));
    assert_eq!(c.bn_stats, crate::config::BnStats::Batch);
    std::fs::write(&f, "prefetch = 1.5\n").unwrap();
    let e = cli(&["--config", f.to_str().unwrap()]).unwrap_err();
    assert!(e.contains("takes a whole number or \"auto\""), "{e}");
    // the end's export, from the file too
    std::fs::write(
        &f,
        "export = \"out.safetensors\"\nfreeze = \"layer1\"\nbn-stats = \"frozen\"\n",
    )
    .unwrap();
    let (c, front) = cli(&["--config", f.to_str().unwrap()]).unwrap();
    assert_eq!(c.bn_stats, crate::config::BnStats::Frozen);
    let e = cli(&["--bn-stats", "eval"]).unwrap_err();
    assert!(
        e.contains("--bn-stats: `eval`: give batch, running or frozen"),
        "{e}"
    );
    assert_eq!(front.export.as_deref(), Some(Path::new("out.safetensors")));
    assert_eq!(
        c.freeze,
        Some(crate::config::Freeze::Prefixes(vec!["layer1".into()]))
    );
    // `--freeze none` over the file's (as over a resumed checkpoint's): everything trains
    let (c, _) = cli(&["--config", f.to_str().unwrap(), "--freeze", "none"]).unwrap();
    assert_eq!(c.freeze, None);
}

#[test]
fn a_relative_path_beside_the_config_file_is_named_with_its_mend() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("run.toml");
    // (a name the working directory, the crate's root, does not hold)
    let data = "beside-the-config-only.csv";
    std::fs::write(dir.path().join(data), "1,0\n2,1\n").unwrap();
    std::fs::write(&f, format!("data = \"csv:{data}\"\n")).unwrap();
    let e = cli(&["--config", f.to_str().unwrap()]).unwrap_err();
    let there = dir.path().join(data);
    for needle in [
        &format!("data names {data}"),
        "read from the working directory",
        &format!("write {}", there.display()),
    ] {
        assert!(e.contains(needle), "{needle:?} in {e}");
    }
    // a flag's data is the flag's; an absolute path in the file is read as written
    let flag = ["--config", f.to_str().unwrap(), "--data", "digits"];
    assert!(cli(&flag).is_ok());
    std::fs::write(&f, format!("data = \"csv:{}\"\n", there.display())).unwrap();
    assert!(cli(&["--config", f.to_str().unwrap()]).is_ok());
}

#[test]
fn bad_files_and_values_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad.toml");
    std::fs::write(&f, "lr = 0.1\nbatch_size = 3\n").unwrap();
    let e = cli(&["--config", f.to_str().unwrap()]).unwrap_err();
    assert!(e.contains("batch_size") && e.contains("line 2"), "{e}");
    // a misspelt key: the one meant, not the 50 known
    std::fs::write(&f, "batch_per_replica = 64\n").unwrap();
    let e = cli(&["--config", f.to_str().unwrap()]).unwrap_err();
    assert!(
        e.contains("(line 1): unknown key `batch_per_replica`: did you mean `batch-per-replica`?")
            && !e.contains("expected one of"),
        "{e}"
    );
    // a flag of `scale` (or `bench`) is said to belong on its command line
    std::fs::write(&f, "counts = [1, 2]\n").unwrap();
    let e = cli(&["--config", f.to_str().unwrap()]).unwrap_err();
    assert!(
        e.contains("`counts` is a flag of `scale`, given on its command line")
            && !e.contains("keys are the flag names"),
        "{e}"
    );
    // a syntax error is one line
    std::fs::write(&f, "batch-per-replica = [64\nsteps = 3\n").unwrap();
    let e = cli(&["--config", f.to_str().unwrap()]).unwrap_err();
    assert!(
        !e.contains('\n') && e.contains("invalid array: expected `]`"),
        "{e}"
    );
    // a port is a number
    std::fs::write(&f, "prometheus = 9502\n").unwrap();
    let (_, front) = cli(&["--config", f.to_str().unwrap()]).unwrap();
    assert_eq!(front.prometheus.map(|a| a.port()), Some(9502));
    std::fs::write(&f, "prometheus = 9.5\n").unwrap();
    let e = cli(&["--config", f.to_str().unwrap()]).unwrap_err();
    assert!(
        e.contains("`prometheus` takes a port, \"ADDR:PORT\" or false"),
        "{e}"
    );
    // false as the other switches take it; true names no port
    std::fs::write(&f, "prometheus = false\n").unwrap();
    let (_, front) = cli(&["--config", f.to_str().unwrap()]).unwrap();
    assert!(front.prometheus.is_none());
    std::fs::write(&f, "prometheus = true\n").unwrap();
    let e = cli(&["--config", f.to_str().unwrap()]).unwrap_err();
    assert!(e.contains("names no port"), "{e}");
    std::fs::write(&f, "lr = \"fast\"\n").unwrap();
    let e = cli(&["--config", f.to_str().unwrap()]).unwrap_err();
    assert!(e.contains("line 1"), "{e}");
    // a value of the wrong type in words a config file's writer knows, without the keys' rule
    for (text, says) in [
        (
            "steps = -5\n",
            "`steps`: the number `-5`, expected a whole number of 1 or more",
        ),
        (
            "steps = 99999999999999999999999\n",
            "`steps`: a number too large for a config file: at most 9223372036854775807",
        ),
        (
            "lr =\n",
            "`lr`: no value (a text goes in quotes, a number without)",
        ),
        (
            "headless = True\n",
            "`headless`: True is no TOML value: true and false are written so, in lower case",
        ),
        (
            "devices = 2\n",
            "`devices`: a whole number `2`, expected a text (texts go in quotes)",
        ),
        (
            "augment = [\"crop:4\", \"flip\"]\n",
            "`augment`: a list, expected one text: give its items in one, comma-separated",
        ),
        (
            "[train]\nlr = 1\n",
            "keys are at its top level, without sections such as [train]",
        ),
        (
            "modle = \"mlp:8\"\n",
            "unknown key `modle`: did you mean `model`?",
        ),
        ("--lr = 0.1\n", "did you mean `lr`?"),
        ("[model]\nname = \"mlp\"\n", "(line 1): the file's keys are at its top level, without sections such as [model]"),
        (
            "steps.x = 50\n",
            "`steps.x`: a table (a dotted key), expected a whole number of 1 or more; keys are flat, as the flags: `steps = VALUE`",
        ),
        (
            "steps = 5\rlr = 0.1\r",
            "the file's lines end in a carriage return alone (CR)",
        ),
        (
            "name = 1979-05-27T07:32:00Z\n",
            "`name`: a date-time, expected a text (texts go in quotes)",
        ),
    ] {
        std::fs::write(&f, text).unwrap();
        let e = cli(&["--config", f.to_str().unwrap()]).unwrap_err();
        assert!(e.contains(says), "{text}: {e}");
    }
    std::fs::write(&f, "epochs = \"3\"\n").unwrap();
    let e = cli(&["--config", f.to_str().unwrap()]).unwrap_err();
    assert!(
        e.contains("(line 1): `epochs`: a text \"3\", expected a whole number of 1 or more (numbers go without quotes)")
            && !e.contains("u64")
            && !e.contains("keys are"),
        "{e}"
    );
    // a key whose flag takes 1 or more says so (a range of clap's, or of the flag's parser)
    for key in ["keep-checkpoints", "batch-per-replica", "steps"] {
        std::fs::write(&f, format!("{key} = \"abc\"\n")).unwrap();
        let e = cli(&["--config", f.to_str().unwrap()]).unwrap_err();
        assert!(e.contains("expected a whole number of 1 or more"), "{e}");
    }
    let e = cli(&["--optimizer", "lion"]).unwrap_err();
    assert!(e.contains("--optimizer") && e.contains("adamw"), "{e}");
    let e = cli(&["--sample-interval", "0"]).unwrap_err();
    assert!(e.contains("--sample-interval"), "{e}");
    let e = cli(&["--prefetch", "lots"]).unwrap_err();
    assert!(e.contains("--prefetch"), "{e}");
    let e = cli(&["--config", "/nonexistent.toml"]).unwrap_err();
    assert!(e.contains("/nonexistent.toml"), "{e}");
}

#[test]
fn config_files_are_read_within_limits() {
    let e = cli(&["--config", "/dev/zero"]).unwrap_err();
    assert!(
        e.starts_with(
            "config file /dev/zero: a character device, not a regular file; --config needs"
        ),
        "{e}"
    );
    let dir = tempfile::tempdir().unwrap();
    let e = cli(&["--config", dir.path().to_str().unwrap()]).unwrap_err();
    assert!(e.contains("a directory, not a regular file"), "{e}");
    let f = dir.path().join("big.toml");
    std::fs::File::create(&f).unwrap().set_len(2 << 20).unwrap();
    let e = cli(&["--config", f.to_str().unwrap()]).unwrap_err();
    assert!(
        e.contains("2 MiB, more than the 1 MiB mgtop-train reads as a config file"),
        "{e}"
    );
    // a long value from the file is quoted short, not echoed whole
    let long = "f".repeat(500_000);
    std::fs::write(&f, format!("lr = \"{long}\"\n")).unwrap();
    let e = cli(&["--config", f.to_str().unwrap()]).unwrap_err();
    assert!(
        e.len() < 400 && e.contains("line 1") && e.contains("fff…"),
        "{e}"
    );
}

#[test]
fn strategies_from_flags_and_files_and_their_errors() {
    use crate::engine::strategy::Strategy;
    let (c, _) = cli(&[]).unwrap();
    assert_eq!(c.strategy, Strategy::Mirrored);
    let (c, _) = cli(&["--strategy", "local-sgd:8", "--local-sgd-warmup", "20"]).unwrap();
    assert_eq!(
        c.strategy,
        Strategy::LocalSgd {
            every: 8,
            warmup: 20,
            moments: false
        }
    );
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("run.toml");
    std::fs::write(&f, "strategy = \"central-storage\"\n").unwrap();
    let (c, _) = cli(&["--config", f.to_str().unwrap()]).unwrap();
    assert_eq!(c.strategy, Strategy::CentralStorage);
    for (args, says) in [
        (
            &["--strategy", "local-sgd:0"][..],
            "--strategy: strategy `local-sgd:0`",
        ),
        (&["--strategy", "local-sgd:x"][..], "whole number"),
        (
            &["--strategy", "ring-allreduce"][..],
            "mirrored, central-storage, or local-sgd:H",
        ),
        (
            &["--local-sgd-warmup", "5"][..],
            "this run's strategy is mirrored",
        ),
        (
            &["--config", f.to_str().unwrap(), "--local-sgd-warmup", "5"][..],
            "this run's strategy is central-storage",
        ),
    ] {
        let e = cli(args).unwrap_err();
        assert!(e.contains(says), "{args:?}: {e}");
    }
}

#[test]
fn dashboards_come_from_flags_or_the_file_with_the_run_directory_by_default() {
    let (_, front) = cli(&["--prometheus", "9400", "--tensorboard", "--run-dir", "r"]).unwrap();
    assert_eq!(front.prometheus, Some("127.0.0.1:9400".parse().unwrap()));
    assert_eq!(front.tensorboard, Some(TensorboardDir::InRunDir));
    let (_, front) = cli(&["--tensorboard", "tb", "--headless"]).unwrap();
    assert_eq!(front.tensorboard, Some(TensorboardDir::At("tb".into())));
    assert!(front.headless && front.prometheus.is_none());
    let (_, front) = cli(&[]).unwrap();
    assert!(front.tensorboard.is_none() && front.prometheus.is_none());
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("run.toml");
    let file = f.to_str().unwrap();
    std::fs::write(
        &f,
        "prometheus = \"0.0.0.0:9401\"\ntensorboard = true\nrun-dir = \"r\"\n",
    )
    .unwrap();
    let (_, front) = cli(&["--config", file]).unwrap();
    assert_eq!(front.prometheus, Some("0.0.0.0:9401".parse().unwrap()));
    assert_eq!(front.tensorboard, Some(TensorboardDir::InRunDir));
    // =false turns the file's off, as with the other switches
    let (_, front) = cli(&["--config", file, "--tensorboard=false"]).unwrap();
    assert_eq!(front.tensorboard, None);
    let (_, front) = cli(&["--config", file, "--prometheus=false"]).unwrap();
    assert_eq!(front.prometheus, None);
    std::fs::write(&f, "tensorboard = \"tb\"\n").unwrap();
    assert_eq!(
        cli(&["--config", file]).unwrap().1.tensorboard,
        Some(TensorboardDir::At("tb".into()))
    );
    std::fs::write(&f, "tensorboard = false\n").unwrap();
    assert_eq!(cli(&["--config", file]).unwrap().1.tensorboard, None);
    std::fs::write(&f, "tensorboard = 3\n").unwrap();
    let e = cli(&["--config", file]).unwrap_err();
    assert!(e.contains("tensorboard"), "{e}");
    let e = cli(&["--prometheus", "http://x"]).unwrap_err();
    assert!(e.contains("--prometheus 9400"), "{e}");
}

#[test]
fn command_line_errors_are_one_line_with_their_tips_and_items() {
    let err = |args: &[&str]| {
        let e = Cli::try_parse_from(std::iter::once("mgtop-train").chain(args.iter().copied()))
            .err()
            .unwrap();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        one_line(&e, &args)
    };
    let e = err(&["--step", "3"]);
    assert_eq!(
        e,
        "error: unexpected argument '--step' found (tip: a similar argument exists: '--steps'); `mgtop-train --help` lists the flags"
    );
    let e = err(&["export"]);
    assert_eq!(
        e,
        "error: the following required arguments were not provided: <RUN_DIR|CHECKPOINT>, <FILE>; usage: mgtop-train export <RUN_DIR|CHECKPOINT> <FILE>"
    );
    assert!(!err(&["--bogus"]).contains('\n'));
    // a switch's value after a space, and a stray word, are not taken for subcommands
    let e = err(&["--steps", "3", "--sync-bn", "false"]);
    assert_eq!(
        e,
        "error: --sync-bn takes its value after `=`: --sync-bn=false"
    );
    // (a switch a config file may turn on takes one too)
    let e = err(&["--headless", "false"]);
    assert_eq!(
        e,
        "error: --headless takes its value after `=`: --headless=false"
    );
    let e = err(&["--name", "false", "--rebalance", "false"]);
    assert_eq!(
        e,
        "error: --rebalance takes its value after `=`: --rebalance=false"
    );
    let e = err(&["--headless", "extra"]);
    assert!(
        e.starts_with("error: unexpected `extra`: not a flag"),
        "{e}"
    );
    // a subcommand's flag or value: its own --help is the one to read
    for args in [
        &["view", "run", "--bogus"][..],
        &["scale", "--seconds", "x"],
    ] {
        let e = err(args);
        let want = format!("; `mgtop-train {} --help` lists the flags", args[0]);
        assert!(e.ends_with(&want), "{e}");
    }
    // a training flag's value that names a subcommand is not one
    let e = err(&["--headless", "--runs-dir", "runs"]);
    assert!(e.ends_with("; `mgtop-train --help` lists the flags"), "{e}");
    // a word that is no command: the commands there are
    let e = err(&["checkpoints"]);
    assert!(
        e.starts_with("error: unrecognized subcommand 'checkpoints'; the commands are ")
            && e.contains(", export, ")
            && !e.contains(", help")
            && e.ends_with("; `mgtop-train --help` lists them and the flags"),
        "{e}"
    );
}

#[test]
fn a_list_flag_given_twice_takes_its_last_occurrence() {
    // (a sweep script appends overrides: the last --counts is the one)
    let cli =
        super::Cli::try_parse_from(["mgtop-train", "scale", "--counts", "1", "--counts", "2,1"])
            .unwrap();
    match cli.command {
        Some(super::Command::Scale(a)) => assert_eq!(a.counts, [2, 1]),
        _ => panic!("scale"),
    }
}
