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
    _launch: &Launch,
    work: impl FnOnce(Arc<dyn Processes>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let cluster = Arc::new(crate::comm::mpi::Cluster::join().map_err(anyhow::Error::msg)?);
    match work(cluster.clone()) {
        // every process ends at the same point: MPI is finalized together
        Ok(()) => Ok(()),
        Err(e) => {
            crate::tell!(
                "error (process {} on {}): {e}",
                cluster.index(),
                crate::engine::hostname()
            );
            cluster.fail(1)
        }
    }
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
    as_processes(launch, |procs| match procs.index() {
        0 => super::train::train(args, on_signals, Some(procs)),
        _ => follow(args, on_signals, procs),
    })
}

/// A process other than process 0: no frontend, no run directory or metrics of its own.
fn follow(
    args: TrainArgs,
    on_signals: &OnSignals,
    procs: Arc<dyn Processes>,
) -> anyhow::Result<()> {
    use crate::config::RunConfig;
    use crate::engine::Engine;

    // process 0 reads the checkpoint of a --resume and sends its state: the path need not
    // exist on this machine
    let args = TrainArgs {
        resume: None,
        ..args
    };
    let (cfg, _) = args.resolve().map_err(anyhow::Error::msg)?;
    let patience = cfg.stall_timeout;
    let cfg = RunConfig {
        run_dir: None,
        metrics_out: None,
        link_latest: false,
        calibrate: false,
        ..cfg
    };
    let engine = Engine::start_in(cfg, Some(procs.clone()))?;
    procs.set_patience(patience);
    // a signal here changes nothing and says nothing (process 0 decides and speaks for the
    // run), but a second quits
    let (heard, _unread) = crossbeam_channel::unbounded();
    on_signals(&engine, Some(heard))?;
    let events = engine.events().clone();
    let drain = std::thread::spawn(move || events.iter().count());
    let r = engine.join();
    let _ = drain.join();
    r.map(|_| ()).map_err(Into::into)
}
