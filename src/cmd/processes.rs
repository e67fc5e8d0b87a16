//! Commands run as one of several processes started by a launcher (mpirun, srun). Training:
//! process 0 trains and watches the run as a single-process run does; the others train quietly
//! and print only their errors. A failure anywhere ends the whole job.

use crate::cli::TrainArgs;
use crate::comm::launch::Launch;

use super::train::OnSignals;

use std::sync::Arc;

use crate::comm::Processes;

/// Runs `work` as one of the processes `launch` started, joined over MPI; a failure here is
/// printed with this process's host and ends the whole job (the others would wait for this
/// one). Without MPI in the build: the error that says how to build it.
#[cfg(feature = "mpi")]
pub fn as_processes(
    launch: &Launch,
    work: impl FnOnce(Arc<dyn Processes>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    use crate::engine::EngineError;

    let cluster = crate::comm::mpi::Cluster::join(launch.is_lead());
    let cluster = Arc::new(cluster.map_err(anyhow::Error::msg)?);
    // an MPI that is not the launcher's makes every process a world of its own
    if launch.size.is_some_and(|n| n != cluster.count())
        || launch.rank.is_some_and(|r| r != cluster.index())
    {
        anyhow::bail!(
            "this process was {}, but MPI made it process {} of {}: the MPI library mgtop-train was built with is not the launcher's (Open MPI's library under MPICH's mpiexec, or srun without a matching --mpi plugin); start it with that MPI's mpirun, or `srun --mpi=pmix`",
            launch.describe(),
            cluster.index(),
            cluster.count()
        );
    }
    let Err(e) = work(cluster.clone()) else {
        // every process ends at the same point: MPI is finalized together
        return Ok(());
    };
    let engine = e.downcast_ref::<EngineError>();
    // every process meets these at the same step: process 0 speaks for the run
    let shared = matches!(
        engine,
        Some(
            EngineError::NonFinite { .. } | EngineError::OutOfSync { .. } | EngineError::Shared(_)
        )
    );
    let met_by_all = shared || matches!(engine, Some(EngineError::Config(_)));
    if cluster.index() != 0 && met_by_all {
        // process 0 met it too: give it time to say so and end the job itself (a setting
        // every process shares fails alike on each: said once); one this process met alone
        // (a file missing on its machine) is said below, process 0 waiting for it
        std::thread::sleep(std::time::Duration::from_secs(3));
    }
    if cluster.index() == 0 || !shared {
        crate::tell!(
            "error (process {} on {}): {e}",
            cluster.index(),
            crate::pids::hostname()
        );
    }
    // this process's own failure (a worker's panic, a device's error): process 0 records it
    // as the run's, then the others would wait for this process: the launcher ends them
    let rank = match engine {
        Some(EngineError::WorkerPanic { rank, .. }) => Some(*rank),
        _ => None,
    };
    let text = e.to_string();
    cluster.fail(1, (!met_by_all).then_some((rank, text.as_str())))
}

#[cfg(not(feature = "mpi"))]
pub fn as_processes(
    launch: &Launch,
    _work: impl FnOnce(Arc<dyn Processes>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    anyhow::bail!(crate::comm::launch::needs_mpi(launch))
}

/// Training: process 0 trains and watches; the others follow.
pub fn command(args: TrainArgs, on_signals: &OnSignals, launch: &Launch) -> anyhow::Result<()> {
    as_processes(launch, |procs| {
        // a resumed run's recorded settings, read by process 0 (the checkpoint need only be
        // on its machine) for every process to take where its flags are silent, as it does
        let record = match procs.index() {
            0 => (args.resume.as_deref())
                .and_then(checkpoint_record)
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        let record = crate::comm::processes::broadcast_vec(&*procs, record, 0)
            .map_err(|e| anyhow::anyhow!("the processes could not meet: {e}"))?;
        let mine = serde_json::to_vec(&lead_only(&args)).expect("plain data serializes");
        let all = crate::comm::processes::gather_vecs(&*procs, &mine)
            .map_err(|e| anyhow::anyhow!("the processes could not meet: {e}"))?;
        if procs.index() == 0 {
            same_lead_only(&all)?;
        }
        match procs.index() {
            0 => super::train::train(args, on_signals, Some(procs), Some(launch)),
            _ => follow(args, &record, on_signals, procs),
        }
    })
}

/// The flags only process 0 acts on (its screen's, its run directory's and files', where it
/// resumes from, the weights it starts from), as given: a path by whether it is given (machines' paths differ), as
/// (flag, value); "" where not given.
fn lead_only(args: &TrainArgs) -> Vec<(String, String)> {
    let given = |on: bool| if on { "given" } else { "" }.to_string();
    [
        ("--name", args.name.clone().unwrap_or_default()),
        ("--resume", given(args.resume.is_some())),
        ("--init", given(args.init.is_some())),
        ("--run-dir", given(args.run_dir.is_some())),
        ("--checkpoint-dir", given(args.checkpoint_dir.is_some())),
        ("--metrics-out", given(args.metrics_out.is_some())),
        ("--export", given(args.export.is_some())),
        ("--tensorboard", given(args.tensorboard.is_some())),
        ("--prometheus", args.prometheus.clone().unwrap_or_default()),
    ]
    .map(|(flag, v)| (flag.to_string(), v))
    .to_vec()
}

/// What process 0 does with a flag of `lead_only`, for the refusal of one given unalike.
fn lead_acts_on(flag: &str) -> &'static str {
    match flag {
        "--name" => "the run's name",
        "--resume" => "where the run resumes from",
        "--init" => "the weights the run starts from",
        "--export" => "the weights written at the run's end",
        "--tensorboard" | "--prometheus" => "the run's dashboards",
        _ => "the run's directory and files",
    }
}

/// Refuses flags only process 0 acts on given to another process otherwise (`lead_only` of
/// each process, as JSON): they would silently not be done (a `--resume` given to the last
/// process of an `mpirun ... : ...` line alone would train from step 0).
fn same_lead_only(all: &[Vec<u8>]) -> anyhow::Result<()> {
    let read = |b: &[u8]| serde_json::from_slice::<Vec<(String, String)>>(b).unwrap_or_default();
    let lead = read(&all[0]);
    for (p, theirs) in all.iter().enumerate().skip(1) {
        for ((flag, ours), (_, theirs)) in lead.iter().zip(read(theirs)) {
            if *ours != theirs {
                let said = |v: &str| crate::text::setting(flag, v);
                anyhow::bail!(
                    "process {p} was started with {}, process 0 with {}: process 0 alone acts on {flag} ({}), so every process must be given it alike; give every process the same flags",
                    said(&theirs),
                    said(ours),
                    lead_acts_on(flag)
                );
            }
        }
    }
    Ok(())
}

/// The settings recorded in the checkpoint `--resume PATH` continues (`cli::resumed`), as
/// JSON; None where it cannot be read (process 0 then says why, as it starts).
fn checkpoint_record(path: &std::path::Path) -> Option<Vec<u8>> {
    let point = crate::engine::rundir::resume_point(path).ok()?;
    let meta = crate::engine::checkpoint::read_meta(&point).ok()?;
    let record = crate::cli::resumed::recorded(&meta);
    serde_json::to_vec(&serde_json::Value::Object(record)).ok()
}

/// A process other than process 0: no frontend, no run directory or metrics of its own.
fn follow(
    args: TrainArgs,
    record: &[u8],
    on_signals: &OnSignals,
    procs: Arc<dyn Processes>,
) -> anyhow::Result<()> {
    use crate::config::RunConfig;
    use crate::engine::Engine;

    // process 0 reads the checkpoint of a --resume and sends its settings (`record`) and its
    // state: the path need not exist on this machine
    let made_up = args.inject_peer_sample;
    let args = TrainArgs {
        resume: None,
        ..args
    };
    let args = match serde_json::from_slice::<serde_json::Value>(record) {
        Ok(serde_json::Value::Object(taken)) => {
            crate::cli::resumed::under_record(args, taken)
                .map_err(anyhow::Error::msg)?
                .0
        }
        _ => args,
    };
    // (a setting every process is given alike is refused by each: process 0 says it, this one
    // only where process 0 did not, as for the engine's refusals)
    let (cfg, front) = args.resolve().map_err(crate::engine::EngineError::Config)?;
    let patience = cfg.stall_timeout;
    let cfg = RunConfig {
        run_dir: None,
        metrics_out: None,
        link_latest: false,
        calibrate: false,
        ..cfg
    };
    let engine = Engine::start_in(cfg, Some(procs.clone()))?;
    procs.set_patience(crate::engine::peer_patience(patience));
    // on a machine other than process 0's, this process reads its GPUs for process 0's screen
    // and records (process 0 reads those of its own machine)
    let info = engine.info();
    let _sampling = (engine.peer_samples())
        .filter(|(_, local)| !info.on_first_host(local.start))
        .and_then(|(samples, local)| {
            use crate::observe::telemetry::Telemetry;
            let interval = front.sample_interval;
            match made_up {
                Some(t) => Telemetry::post_made_up(info, local, interval, samples, t),
                None => Telemetry::post_for_process_0(info, local, interval, samples),
            }
        });
    // a signal here asks the run to stop with a checkpoint, as one to process 0 does (the
    // stop joins process 0's decision at the next boundary), and says nothing (process 0
    // speaks for the run); a second quits
    let (heard, _unread) = crossbeam_channel::unbounded();
    on_signals(&engine, Some(heard), false)?;
    // what this process alone meets and the run goes on through (its pictures that do not
    // decode, its GPUs' notes) is said here, where process 0 cannot see it
    let events = engine.events().clone();
    let (budget, accum) = (engine.info().budget, engine.info().grad_accum);
    let here = format!("process {} on {}", procs.index(), crate::pids::hostname());
    let said = here.clone();
    let drain = std::thread::spawn(move || {
        for e in events.iter().filter(own) {
            if let Some(line) = crate::front::words::event_line(&e, budget, accum) {
                crate::tell!("{said}: {line}");
            }
        }
    });
    let r = engine.join();
    let _ = drain.join();
    let result = r?;
    super::ran(&result);
    if result.data_skipped > 0 {
        crate::tell!(
            "{here}: note: {} image file(s) of this machine could not be decoded during the run; another picture of the same class stood in for each where its class had one (the WARNING lines above name them)",
            result.data_skipped
        );
    }
    Ok(())
}

/// The events a process other than process 0 says itself: what it alone meets and the run goes
/// on through (process 0 speaks for the rest).
fn own(e: &crate::engine::events::Event) -> bool {
    use crate::engine::events::Event;
    matches!(
        e,
        Event::DataSkipped { .. } | Event::Warning { .. } | Event::DeviceNote { .. }
    )
}
