use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};

use clap::Parser;
use crossbeam_channel::{unbounded, Sender};
use mgtop::cli::{BenchArgs, Cli, Command, Frontend, ScaleArgs};
use mgtop::cmd::bench;
use mgtop::engine::{Engine, RunResult};
use mgtop::front::tui::{self, term, theme::Theme, TuiOptions};
use mgtop::observe::metrics::MetricsWriter;

static SIGNALS: AtomicUsize = AtomicUsize::new(0);

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let result = match cli.command {
        Some(Command::Bench(args)) => run_bench(&args),
        Some(Command::Scale(args)) => run_scale(*args),
        Some(Command::Selftest) => run_selftest(),
        None => train(cli.train),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// SIGINT / SIGTERM / SIGHUP: the first asks the run to stop with a checkpoint, a second
/// quits at once (restoring the terminal first).
fn on_signals(engine: &Engine, notify: Option<Sender<()>>) -> anyhow::Result<()> {
    let controller = engine.controller();
    ctrlc::set_handler(move || {
        if SIGNALS.fetch_add(1, Ordering::SeqCst) == 0 {
            match &notify {
                Some(tx) => {
                    let _ = tx.send(());
                }
                None => eprintln!("stopping: finishing this step and writing a checkpoint (signal again to quit at once)"),
            }
            let _ = controller.stop(true);
        } else {
            term::restore();
            std::process::exit(130);
        }
    })?;
    Ok(())
}

fn train(args: mgtop::cli::TrainArgs) -> anyhow::Result<ExitCode> {
    let (cfg, front) = args.resolve().map_err(anyhow::Error::msg)?;
    let tui = !front.headless && std::io::stdout().is_terminal();
    // a bad theme is refused before anything starts, even where the log is shown instead
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let theme = Theme::choose(front.theme.as_deref(), no_color)?;
    let theme = tui.then_some(theme);
    let (log_every, metrics_out) = (cfg.log_every, cfg.metrics_out.clone());
    if let Some(p) = &metrics_out {
        MetricsWriter::preflight(p)?;
    }
    if cfg.calibrate {
        eprintln!("calibrating: training one device for 120 steps first (--calibrate)");
    }
    let engine = Engine::start(cfg)?;
    // opened only once the run is valid, so a bad input never truncates an earlier metrics file
    let metrics = match metrics_out
        .as_deref()
        .map(MetricsWriter::create)
        .transpose()
    {
        Ok(m) => m,
        Err(e) => {
            let _ = engine.controller().stop(false);
            let _ = engine.join();
            return Err(e.into());
        }
    };
    let result = match theme {
        Some(theme) => run_tui(engine, theme, &front, log_every, metrics)?,
        None => {
            on_signals(&engine, None)?;
            let mut out = std::io::stdout().lock();
            mgtop::front::headless::run(
                engine,
                log_every,
                front.sample_interval,
                &mut out,
                metrics,
            )?
        }
    };
    if result.stopped {
        if let Some(p) = &result.last_checkpoint {
            println!("resume with: --resume {}", p.display());
        }
    }
    Ok(if SIGNALS.load(Ordering::SeqCst) > 0 {
        ExitCode::from(130)
    } else {
        ExitCode::SUCCESS
    })
}

fn run_tui(
    engine: Engine,
    theme: Theme,
    front: &Frontend,
    log_every: u64,
    metrics: Option<MetricsWriter>,
) -> anyhow::Result<RunResult> {
    let (sig_tx, sig_rx) = unbounded();
    on_signals(&engine, Some(sig_tx))?;
    let opts = TuiOptions {
        theme,
        readonly: front.readonly,
        exit_when_done: front.exit_when_done,
        sample_interval: front.sample_interval,
        log_every,
    };
    let (mut terminal, guard) = match term::enter() {
        Ok(t) => t,
        Err(e) => {
            term::restore();
            let _ = engine.controller().stop(false);
            let _ = engine.join();
            anyhow::bail!("cannot start the terminal UI ({e}); use --headless for log lines");
        }
    };
    let end = tui::drive(
        &mut terminal,
        engine,
        &opts,
        term::inputs(),
        sig_rx,
        metrics,
    );
    drop(terminal);
    drop(guard);
    for line in tui::summary_lines(&end.app) {
        println!("{line}");
    }
    Ok(end.result?)
}

fn run_bench(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    let cores = mgtop::engine::available_cores();
    println!("machine: {cores} cores; {}", std::env::consts::ARCH);
    if args.only == "all" || args.only == "train" {
        println!("training throughput, MLP 784-128-10, Adam, synthetic 60000x784 (samples/s, median of {})", args.repeat);
        println!(
            "{:>7} {:>6} {:>12} {:>10} {:>10} {:>9} {:>9}",
            "workers", "batch", "mgtop", "TF best", "torch best", "x TF", "x torch"
        );
        for &w in &args.workers {
            for &b in &args.batches {
                let runs: Result<Vec<f64>, _> = (0..args.repeat.max(1))
                    .map(|_| bench::train_throughput(w, b, args.samples / 10, args.samples))
                    .collect();
                let ours = bench::median(runs?);
                let reference = bench::REFERENCE.iter().find(|r| r.0 == w && r.1 == b);
                match reference {
                    Some(&(_, _, tf, torch)) => println!(
                        "{w:>7} {b:>6} {ours:>12.0} {tf:>10.0} {torch:>10.0} {:>9.2} {:>9.2}",
                        ours / tf,
                        ours / torch
                    ),
                    None => println!("{w:>7} {b:>6} {ours:>12.0} {:>10} {:>10}", "-", "-"),
                }
            }
        }
    }
    if args.only == "all" || args.only == "allreduce" {
        let ranks = cores.max(2);
        println!(
            "in-process all-reduce, {ranks} ranks: bus bandwidth GB/s (2(n-1)/n x bytes / time)"
        );
        for mib in [1usize, 4, 16, 64] {
            let iters = (256 / mib).clamp(4, 64);
            let bw = bench::median(
                (0..args.repeat.max(1))
                    .map(|_| bench::allreduce_busbw(ranks, mib << 20, iters))
                    .collect(),
            );
            println!("{mib:>4} MiB {bw:>8.2}");
        }
    }
    if args.only == "all" || args.only == "tui" {
        let (median, p99) = bench::frame_time(200, 60, 500);
        println!(
            "terminal UI frame at 200x60 (8 devices, state changing every frame): median {:.3} ms, p99 {:.3} ms",
            median.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3
        );
        println!(
            "training watched by the log vs the terminal UI (200x60 into a sink): samples/s (median of {}, run range) and the frontend thread's CPU (share of one core)",
            args.repeat
        );
        let batch = args.batches.first().copied().unwrap_or(32);
        for &w in &args.workers {
            let mut runs = [Vec::new(), Vec::new()];
            for _ in 0..args.repeat.max(1) {
                // alternate so both see the same machine state
                for (i, watch) in [bench::Watch::Headless, bench::Watch::Tui]
                    .into_iter()
                    .enumerate()
                {
                    runs[i].push(bench::watched_throughput(
                        watch,
                        w,
                        batch,
                        args.samples / 10,
                        args.samples,
                    )?);
                }
            }
            for (name, r) in ["headless", "tui"].iter().zip(runs) {
                let rates: Vec<f64> = r.iter().map(|x| x.samples_per_sec).collect();
                let (lo, hi) = rates
                    .iter()
                    .fold((f64::MAX, 0.0f64), |(l, h), x| (l.min(*x), h.max(*x)));
                let cpu = bench::median(r.iter().filter_map(|x| x.frontend_cpu).collect());
                println!(
                    "  {w} worker(s), batch {batch}: {name:<8} {:>9.0} samples/s ({lo:.0}-{hi:.0}), frontend CPU {:.2}% of a core",
                    bench::median(rates),
                    cpu * 100.0
                );
            }
        }
    }
    if args.only == "all" || args.only == "rebalance" {
        println!(
            "--rebalance against --slow-rank 1:2.0 (2 workers, MLP 784-512-10, batch 128 per replica, 300 timed steps after 100): samples/s, median of {}",
            args.repeat
        );
        let (mut plain, mut balanced) = (Vec::new(), Vec::new());
        for _ in 0..args.repeat.max(1) {
            plain.push(bench::rebalance_throughput(false, 100, 300)?);
            balanced.push(bench::rebalance_throughput(true, 100, 300)?);
        }
        let (p, b) = (bench::median(plain), bench::median(balanced));
        println!(
            "  even split {p:>9.0}   rebalanced {b:>9.0}   {:.2}x",
            b / p
        );
    }
    if args.only == "all" || args.only == "gpu" {
        run_gpu_bench(args)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The benchmarks only GPUs can run; without them, one line saying why not.
fn run_gpu_bench(args: &BenchArgs) -> anyhow::Result<()> {
    use mgtop::backend::cuda::discover::{discover, Discovery};
    use mgtop::backend::cuda::{bench as gpu_bench, Libraries};
    let found = match discover() {
        Discovery::None(why) => {
            println!("GPU benchmarks: skipped: no GPU ({why})");
            return Ok(());
        }
        Discovery::Found(found) => found,
    };
    if let Some(missing) = Libraries::probe().missing_for(found.len()) {
        println!("GPU benchmarks: skipped: {missing}");
        return Ok(());
    }
    for g in &found {
        println!(
            "GPU {}: {}: kernel times (CUDA events, mean of repeated launches)",
            g.index, g.name
        );
        for k in gpu_bench::kernel_times(g.index)? {
            println!("  {:<28} {:>10.1} us  {:>14}", k.name, k.us, k.rate);
        }
    }
    println!(
        "training on GPUs, MLP 784-128-10, Adam, synthetic 60000x784 (samples/s, median of {})",
        args.repeat
    );
    println!(
        "{:>5} {:>6} {:>12} {:>8} {:>6}",
        "gpus", "batch", "samples/s", "speedup", "eff"
    );
    for &b in &args.batches {
        let mut one = None;
        for n in 1..=found.len() {
            let ids: Vec<usize> = found.iter().take(n).map(|g| g.index).collect();
            let runs: Result<Vec<f64>, _> = (0..args.repeat.max(1))
                .map(|_| bench::gpu_train_throughput(&ids, b))
                .collect();
            let rate = bench::median(runs?);
            let base = *one.get_or_insert(rate);
            let (speedup, eff) = mgtop::engine::calibrate::scaling(rate, base, n);
            println!(
                "{n:>5} {b:>6} {rate:>12.0} {speedup:>7.2}x {:>5.0}%",
                eff * 100.0
            );
        }
    }
    if found.len() > 1 {
        println!(
            "NCCL all-reduce over {} GPUs: bus bandwidth GB/s (2(n-1)/n x bytes / time)",
            found.len()
        );
        let sizes: Vec<usize> = [1usize, 4, 16, 64, 256].iter().map(|m| m << 20).collect();
        for (bytes, bw) in gpu_bench::nccl_busbw(found.len(), &sizes)? {
            println!("{:>5} MiB {bw:>8.1}", bytes >> 20);
        }
    }
    Ok(())
}

fn run_scale(args: ScaleArgs) -> anyhow::Result<ExitCode> {
    let (mut base, _) = args.train.resolve().map_err(anyhow::Error::msg)?;
    let cores = mgtop::engine::available_cores();
    // On GPUs where the run would train on them (`--devices auto` with GPUs, or GPU ids).
    let (devices, _) = mgtop::engine::resolve_devices(&base.devices)?;
    let gpus: Vec<usize> = devices
        .iter()
        .filter_map(|d| match d {
            mgtop::engine::Device::Gpu { index, .. } => Some(*index),
            mgtop::engine::Device::Cpu { .. } => None,
        })
        .collect();
    let counts = if !args.counts.is_empty() {
        args.counts.clone()
    } else if gpus.is_empty() {
        (1..=cores.max(2)).collect()
    } else {
        (1..=gpus.len()).collect()
    };
    if let Some(&c) = counts.iter().find(|&&c| !gpus.is_empty() && c > gpus.len()) {
        anyhow::bail!(
            "--counts: {c} devices, but this run has {} GPU(s); use counts up to {}",
            gpus.len(),
            gpus.len()
        );
    }
    if let Some(&c) = counts.iter().find(|&&c| c == 0 || c > 256) {
        anyhow::bail!("--counts: {c} devices is out of range: use 1..=256");
    }
    let batches = if args.batches.is_empty() {
        vec![base.batch_per_replica]
    } else {
        args.batches.clone()
    };
    if args.timed_steps == 0 {
        anyhow::bail!("--timed-steps 0 measures nothing: use 1 or more");
    }
    if let Some(p) = &args.out {
        // refuse a bad --out before spending minutes measuring
        mgtop::cmd::scale::check_out(p).map_err(anyhow::Error::msg)?;
    }
    // Every count runs with the same threads per worker (what the largest count gets), so that
    // a speedup compares workers, not thread counts.
    let most = counts.iter().copied().max().unwrap_or(1);
    let threads = *base.threads_per_worker.get_or_insert((cores / most).max(1));
    let plan = mgtop::cmd::scale::Plan {
        gpus,
        counts,
        batches,
        prefetch: args.prefetch_modes.iter().map(|m| m == "on").collect(),
        warmup_steps: args.warmup_steps,
        timed_steps: args.timed_steps,
        repeat: args.repeat,
    };
    println!(
        "scale: {} points x {} runs, {} timed steps after {} (machine: {cores} cores; {threads} thread(s) per worker)",
        plan.points().len(),
        plan.repeat.max(1),
        plan.timed_steps,
        plan.warmup_steps
    );
    let rows = mgtop::cmd::scale::run(&base, &plan, |i, n, r| {
        println!(
            "[{i}/{n}] {} device(s), batch {} per replica, prefetch {}: {:.0} samples/s",
            r.devices,
            r.per_replica,
            if r.prefetch { "on" } else { "off" },
            r.samples_per_sec
        );
    })?;
    for line in mgtop::cmd::scale::table(&rows) {
        println!("{line}");
    }
    if let Some(p) = &args.out {
        mgtop::cmd::scale::write(p, &rows).map_err(anyhow::Error::msg)?;
        println!("written: {}", p.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// `selftest`: what this machine offers the CUDA path, and every kernel through NVRTC.
fn run_selftest() -> anyhow::Result<ExitCode> {
    use mgtop::backend::cuda::discover::{discover, Discovery};
    use mgtop::backend::cuda::kernels::{compile, entry_points, nvrtc_available, SOURCES};
    let gpus = discover();
    match &gpus {
        Discovery::None(why) => println!("GPU: none ({why})"),
        Discovery::Found(g) => {
            for gpu in g {
                println!("GPU {}: {} ({} GiB)", gpu.index, gpu.name, gpu.memory >> 30);
            }
        }
    }
    let mut failed = false;
    if nvrtc_available() {
        println!("NVRTC: found; compiling kernels/ for sm_80 and sm_90");
        for (file, src) in SOURCES {
            for arch in ["sm_80", "sm_90"] {
                match compile(file, src, arch) {
                    Ok(_) => println!("  ok   {file:<16} {arch}  {}", entry_points(src).join(" ")),
                    Err(e) => {
                        failed = true;
                        println!("  FAIL {e}");
                    }
                }
            }
        }
    } else {
        println!("NVRTC: not found (libnvrtc.so.12); kernels not compiled. `pip install nvidia-cuda-nvrtc-cu12` and put its lib directory on LD_LIBRARY_PATH to check them");
    }
    if failed {
        return Ok(ExitCode::from(1));
    }
    match gpus {
        Discovery::None(_) => {
            println!("no GPU: nothing to compare against the CPU reference; the CPU backend is what trains here");
            Ok(ExitCode::SUCCESS)
        }
        Discovery::Found(found) => {
            use mgtop::backend::cuda::{selftest, Libraries};
            if let Some(missing) = Libraries::probe().missing_for(found.len()) {
                println!("the GPUs cannot be checked: {missing}");
                return Ok(ExitCode::from(1));
            }
            let ids: Vec<String> = found.iter().filter_map(|g| g.pci_bus_id.clone()).collect();
            match mgtop::observe::nvml::Nvml::open(&ids) {
                Ok(nvml) => {
                    let readable = nvml.sample().iter().filter(|s| s.util.is_some()).count();
                    println!(
                        "NVML: found; telemetry readable on {readable} of {} GPUs",
                        found.len()
                    );
                }
                Err(why) => {
                    println!("NVML: {why}; GPU telemetry will show n/a (training is unaffected)")
                }
            }
            println!(
                "checking every GPU against the CPU reference (pass: |gpu-cpu| <= tol + eps*|cpu|)"
            );
            let mut checks = Vec::new();
            for g in &found {
                checks.extend(selftest::gpu_checks(g.index));
            }
            if found.len() > 1 {
                checks.push(selftest::nccl_check(found.len()));
            }
            for line in selftest::table(&checks) {
                println!("  {line}");
            }
            let failed = checks.iter().filter(|c| !c.passed()).count();
            if failed > 0 {
                println!("{failed} check(s) FAILED: do not train on these GPUs with this build; please report the table above");
                Ok(ExitCode::from(1))
            } else {
                println!(
                    "all {} checks passed: the GPUs train as the CPU reference does",
                    checks.len()
                );
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}
