//! `bench --only processes`: what running as several processes costs on one machine. The
//! reference workload (MLP 784-128-10, Adam, synthetic 60000x784) as 1 process x 2 workers and
//! as 2 processes x 1 worker under `mpirun`, alternated so both see the same machine; then the
//! MPI all-reduce's bus bandwidth beside Open MPI's own MPI_Allreduce on the same buffers.

use std::path::Path;
use std::process::Command;

use crate::cli::BenchArgs;
use crate::stats::median;

/// `mpirun` for processes on this machine: as many as asked whatever the cores, root allowed,
/// shared memory without ptrace (containers forbid it). The tests start theirs with it too.
pub fn local_mpirun() -> Command {
    let mut c = Command::new("mpirun");
    c.args([
        "--oversubscribe",
        "--mca",
        "btl_vader_single_copy_mechanism",
        "none",
    ])
    .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    c
}

/// Samples/s after the warm-up, from a run directory's metrics file: between the first step
/// record at or after `warm` and the last one.
fn rate(run_dir: &Path, warm: u64) -> anyhow::Result<f64> {
    let text = std::fs::read_to_string(run_dir.join(crate::engine::rundir::METRICS))?;
    let steps: Vec<(u64, f64, f64)> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "step")
        .filter_map(|v| {
            Some((
                v["step"].as_u64()?,
                v["t"].as_f64()?,
                v["global_batch"].as_f64()?,
            ))
        })
        .filter(|s| s.0 >= warm)
        .collect();
    let (Some(first), Some(last)) = (steps.first(), steps.last()) else {
        anyhow::bail!("{}: no step records after the warm-up", run_dir.display());
    };
    anyhow::ensure!(
        last.0 > first.0,
        "{}: too few step records",
        run_dir.display()
    );
    Ok((last.0 - first.0) as f64 * last.2 / (last.1 - first.1))
}

/// One training run of the reference workload; its samples/s.
fn train(
    processes: usize,
    workers: usize,
    batch: usize,
    steps: u64,
    dir: &Path,
) -> anyhow::Result<f64> {
    let exe = std::env::current_exe()?;
    let run_dir = dir.join(format!("{processes}x{workers}-b{batch}"));
    let _ = std::fs::remove_dir_all(&run_dir);
    let steps_s = steps.to_string();
    let batch_s = batch.to_string();
    let devices = format!("cpu:{workers}");
    // the metrics file gets a step record every --log-every steps
    let every = (steps / 50).max(1).to_string();
    let args = [
        "--headless",
        "--data",
        "synthetic:60000,784,10",
        "--model",
        "mlp:128",
        "--optimizer",
        "adam",
        "--lr",
        "1e-3",
        "--batch-per-replica",
        &batch_s,
        "--steps",
        &steps_s,
        "--devices",
        &devices,
        "--log-every",
        &every,
        // one core per worker on either side (mpirun binds a process to one core; `auto`
        // would give the single process's workers the machine's cores)
        "--threads-per-worker",
        "1",
    ];
    let mut c = match processes {
        1 => Command::new(&exe),
        n => {
            let mut c = local_mpirun();
            c.args(["-np", &n.to_string()]).arg(&exe);
            c
        }
    };
    c.args(args).arg("--run-dir").arg(&run_dir);
    let out = c.output()?;
    anyhow::ensure!(
        out.status.success(),
        "{processes} x {workers} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    rate(&run_dir, steps / 5)
}

pub fn command(args: &BenchArgs) -> anyhow::Result<()> {
    if !cfg!(feature = "mpi") {
        return super::bench::cannot_run(
            args,
            "processes",
            "this build has no MPI (cargo install --path . --features mpi)",
        );
    }
    if Command::new("mpirun").arg("--version").output().is_err() {
        return super::bench::cannot_run(
            args,
            "processes",
            "mpirun not found (apt install openmpi-bin)",
        );
    }
    let tmp = std::env::temp_dir().join(format!("mgtop-bench-processes-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    crate::say!(
        "processes: MLP 784-128-10, Adam, synthetic 60000x784; samples/s, 1 process x 2 workers vs 2 processes x 1 worker (mpirun), one thread per worker, alternated, median of {}",
        args.repeat
    );
    for &batch in &args.batches {
        let steps = (args.samples / (2 * batch)).max(50) as u64;
        let (mut one, mut two) = (Vec::new(), Vec::new());
        for _ in 0..args.repeat.max(1) {
            one.push(train(1, 2, batch, steps, &tmp)?);
            two.push(train(2, 1, batch, steps, &tmp)?);
        }
        let (a, b) = (median(one), median(two));
        crate::say!(
            "  batch {batch:>4}: 1x2 {a:>9.0}   2x1 {b:>9.0}   2x1 / 1x2 = {:.2}",
            b / a
        );
    }
    let exe = std::env::current_exe()?;
    let out = local_mpirun()
        .args(["-np", "2"])
        .arg(&exe)
        .args(["mpi-allreduce-bench", "--repeat", &args.repeat.to_string()])
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "the MPI all-reduce benchmark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    print!("{}", String::from_utf8_lossy(&out.stdout));
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}

/// Bus bandwidth in GB/s (nccl-tests' definition) of an all-reduce of `bytes` over `n` taking
/// `t`.
#[cfg(feature = "mpi")]
fn busbw(n: usize, bytes: usize, t: std::time::Duration) -> f64 {
    2.0 * (n - 1) as f64 / n as f64 * bytes as f64 / t.as_secs_f64().max(1e-12) / 1e9
}

/// `mgtop-train mpi-allreduce-bench` (hidden; each of the processes `bench --only processes`
/// starts): our all-reduce between processes beside MPI_Allreduce, on the same sizes.
#[cfg(feature = "mpi")]
pub fn allreduce_processes(repeat: usize) -> anyhow::Result<()> {
    let launch = crate::comm::launch::from_env()
        .map_err(anyhow::Error::msg)?
        .ok_or_else(|| {
            anyhow::anyhow!(
                "mpi-allreduce-bench runs under mpirun: use `mgtop-train bench --only processes`"
            )
        })?;
    let cluster = crate::comm::mpi::Cluster::join(launch.is_lead()).map_err(anyhow::Error::msg)?;
    measure(&cluster, repeat).or_else(|e| {
        // the other processes would wait for this one: end them, as training does
        crate::tell!("error: {e}");
        cluster.fail(1, None)
    })
}

/// The measurement itself, on every process.
#[cfg(feature = "mpi")]
fn measure(cluster: &crate::comm::mpi::Cluster, repeat: usize) -> anyhow::Result<()> {
    use crate::comm::Processes;
    use std::time::Instant;

    let (n, lead) = (cluster.count(), cluster.index() == 0);
    if lead {
        crate::say!("MPI all-reduce between {n} processes: bus bandwidth GB/s (2(n-1)/n x bytes / time), median of {repeat}");
        crate::say!("  ours = a barrier (to tell waiting from moving data) + MPI_Iallreduce polled to completion (what a step does); MPI_Allreduce = Open MPI's own, blocking");
    }
    for kib in [64usize, 1024, 4096, 16384, 65536] {
        let bytes = kib << 10;
        let len = bytes / 4;
        let iters = ((256usize << 20) / bytes).clamp(4, 200);
        let (mut ours, mut native) = (Vec::new(), Vec::new());
        let mut buf = vec![1.0f32; len];
        cluster.all_reduce_sum(&mut buf)?;
        for _ in 0..repeat.max(1) {
            cluster.barrier()?;
            let t = Instant::now();
            for _ in 0..iters {
                // the sums grow to infinity, which costs the same to add
                cluster.all_reduce_sum(&mut buf)?;
            }
            ours.push(busbw(n, bytes, t.elapsed() / iters as u32));
            let t = cluster.native_all_reduce(len, iters)?;
            native.push(busbw(n, bytes, t / iters as u32));
        }
        if lead {
            let (a, b) = (median(ours), median(native));
            let size = match kib {
                k if k >= 1024 => format!("{} MiB", k >> 10),
                k => format!("{k} KiB"),
            };
            crate::say!(
                "  {size:>7}: ours {a:>7.2}   MPI_Allreduce {b:>7.2}   ours / MPI = {:.2}",
                a / b
            );
        }
    }
    Ok(())
}

#[cfg(not(feature = "mpi"))]
pub fn allreduce_processes(_repeat: usize) -> anyhow::Result<()> {
    anyhow::bail!("this build has no MPI: cargo install --path . --features mpi")
}
