//! What `scale` refuses or says before it measures: its points' device counts, faults on ranks
//! no point has, and the flags of a training run that a measurement does not use.

use crate::cli::TrainArgs;
use crate::config::RunConfig;

/// The flags a measurement does not use, said rather than dropped (process 0's log).
pub(super) fn say_ignored(train: &TrainArgs) {
    // (GPUs: --devices says which the counts take)
    if let Some(d) = train.devices.as_deref().filter(|d| d.starts_with("cpu:")) {
        crate::tell!(
            "note: --devices {d}: scale measures as many CPU workers as --counts gives; ignored"
        );
    }
    if train.steps.is_some() || train.epochs.is_some() {
        crate::tell!(
            "note: --steps/--epochs: scale times each run for --seconds after --warmup-steps; ignored"
        );
    }
    // (the screen's flags: scale prints a table, it draws no screen)
    for (flag, given) in [
        ("--headless", train.headless.is_some()),
        ("--theme", train.theme.is_some()),
        ("--readonly", train.readonly.is_some()),
        ("--exit-when-done", train.exit_when_done.is_some()),
    ] {
        if given {
            crate::tell!("note: {flag}: scale prints its table and draws no screen; ignored");
        }
    }
    if train.val_every.is_some() {
        crate::tell!(
            "note: --val-every: scale validates each point's model once, at its end; ignored"
        );
    }
    if train.calibrate == Some(true) {
        crate::tell!(
            "note: --calibrate: scale's speedups are over its own 1-device point (--counts with 1 in it); ignored"
        );
    }
    for (flag, given) in [
        ("--resume", train.resume.is_some()),
        ("--run-dir", train.run_dir.is_some()),
        ("--checkpoint-dir", train.checkpoint_dir.is_some()),
        ("--checkpoint-every", train.checkpoint_every.is_some()),
        ("--keep-checkpoints", train.keep_checkpoints.is_some()),
        ("--checkpoint-best", train.checkpoint_best == Some(true)),
        ("--metrics-out", train.metrics_out.is_some()),
        (
            "--prometheus",
            train.prometheus.as_deref().is_some_and(|p| p != "false"),
        ),
        (
            "--tensorboard",
            crate::cli::switch_or_folder(&train.tensorboard).is_some(),
        ),
        ("--export", train.export.is_some()),
    ] {
        if given {
            crate::tell!(
                "note: {flag}: scale measures fresh runs and keeps nothing of them; ignored"
            );
        }
    }
}

/// The device counts of the points, over `n` processes with `gpus` (none: CPU workers), and
/// the faults `base` injects, refused where they cannot be measured.
pub(super) fn points(
    counts: &[usize],
    n: usize,
    gpus: &[usize],
    base: &RunConfig,
) -> anyhow::Result<()> {
    if let Some(&c) = counts.iter().find(|&&c| n > 1 && c != 1 && c % n != 0) {
        anyhow::bail!(
            "--counts: {c} devices cannot be shared evenly by {n} processes: use 1 (process 0 alone) or multiples of {n}"
        );
    }
    if let Some(&c) = counts.iter().find(|&&c| !gpus.is_empty() && c > gpus.len()) {
        anyhow::bail!(
            "--counts: {c} devices, but this run has {} GPU(s); use counts up to {}",
            gpus.len(),
            gpus.len()
        );
    }
    if let Some(&c) = counts.iter().find(|&&c| c == 0 || c > 256) {
        anyhow::bail!("--counts: {c} devices is out of range: use 1 to 256");
    }
    if let Some((_, &c)) = (counts.iter().enumerate()).find(|(i, c)| counts[..*i].contains(c)) {
        anyhow::bail!("--counts: {c} is given twice: list each device count once");
    }
    // a fault on a rank no point has would be measured nowhere
    let largest = counts.iter().copied().max().unwrap_or(1);
    for (flag, fault) in [
        ("--slow-rank", base.slow_rank.map(|f| f.0)),
        ("--slow-data", base.slow_data.map(|f| f.0)),
    ] {
        if let Some(r) = fault.filter(|&r| r >= largest) {
            anyhow::bail!(
                "{flag}: there is no rank {r} in any point (the largest has {largest} devices: ranks 0 to {}); name a rank below {largest}",
                largest - 1
            );
        }
    }
    Ok(())
}

/// Refuses a grid other processes of the job are given otherwise (their `--counts`, or the
/// counts each takes from its machine's cores or GPUs where none are given, `--batches`,
/// `--prefetch-modes`, `--strategies`, `--warmup-steps`, `--seconds` or `--repeat`): every
/// process measures each point together, so the first point one process has and another has
/// not waited for ever. Every process compares, before any check that may fail on one alone;
/// process 0 says it.
pub(super) fn same_grid(
    procs: &dyn crate::comm::Processes,
    mut flags: Vec<(String, String)>,
    counts: &[usize],
) -> Result<(), crate::engine::EngineError> {
    flags.insert(0, ("--counts".into(), list(counts)));
    let mine = serde_json::to_vec(&flags).expect("plain data serializes");
    let met = |e| crate::engine::EngineError::Config(format!("the processes could not meet: {e}"));
    let all = crate::comm::processes::gather_vecs(procs, &mine).map_err(met)?;
    let read = |b: &[u8]| serde_json::from_slice::<Vec<(String, String)>>(b).unwrap_or_default();
    let lead = read(&all[0]);
    for (p, theirs) in all.iter().enumerate().skip(1) {
        for ((flag, ours), (_, theirs)) in lead.iter().zip(read(theirs)) {
            if *ours != theirs {
                let said = |v: &str| crate::text::setting(flag, v);
                return Err(crate::engine::EngineError::Shared(format!(
                    "process {p} measures {}, process 0 {}: the processes measure each point together, so every process must be given scale's flags alike (where --counts is not given, each takes it from its machine's cores or GPUs: give it); give every process the same flags",
                    said(&theirs),
                    said(ours)
                )));
            }
        }
    }
    Ok(())
}

/// Refuses central storage where a point spans processes (`n`), before anything is measured:
/// its points past one device would fail one by one. (Every process meets it: said by
/// process 0.)
pub(super) fn spanning_strategies(
    n: usize,
    counts: &[usize],
    listed: &[crate::engine::strategy::Strategy],
) -> Result<(), crate::engine::EngineError> {
    let spanning = counts.iter().any(|&c| c > 1);
    if n > 1 && spanning && listed.contains(&crate::engine::strategy::Strategy::CentralStorage) {
        return Err(crate::engine::EngineError::Config(format!(
            "--strategy central-storage keeps the one copy of the model in one process's memory, so it cannot span the {n} processes a point of more than one device runs on: leave it out of --strategies here, or compare it with `scale` in one process"
        )));
    }
    Ok(())
}

/// A list of numbers as a flag takes it: `2,4`.
fn list(v: &[usize]) -> String {
    (v.iter().map(|c| c.to_string()))
        .collect::<Vec<_>>()
        .join(",")
}

/// The grid's flags but `--counts` (which may come from the machine), as (flag, value), for
/// [`same_grid`].
pub(super) fn grid_flags(args: &crate::cli::ScaleArgs) -> Vec<(String, String)> {
    [
        ("--batches", list(&args.batches)),
        ("--prefetch-modes", args.prefetch_modes.join(",")),
        ("--strategies", args.strategies.clone().unwrap_or_default()),
        ("--warmup-steps", args.warmup_steps.to_string()),
        ("--seconds", args.seconds.to_string()),
        ("--repeat", args.repeat.to_string()),
    ]
    .map(|(f, v)| (f.to_string(), v))
    .to_vec()
}
