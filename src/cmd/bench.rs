//! `mgtop-train bench`: training throughput of the reference workload (MLP 784-128-10, Adam
//! lr 1e-3, 60000x784 synthetic teacher data) and in-process all-reduce bus bandwidth.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::bench_live;
use super::bench_workload::synthetic;
use super::scale::{loaded_points, noisy_points, spread_of, spread_text};
use crate::cli::BenchArgs;
use crate::comm::{Collective, LocalCollective};
use crate::config::{DeviceSpec, RunConfig};
use crate::engine::calibrate::timed_rate;
use crate::engine::thread_cpu_time;
use crate::engine::{Engine, EngineError};
use crate::front::tui::render::render;
use crate::front::tui::theme::Theme;
use crate::front::tui::{demo, TuiOptions};
use crate::observe::machine_load::{Load, LoadMeter};
use crate::stats::median;
use crossbeam_channel::never;
use ratatui::backend::CrosstermBackend;
use ratatui::layout::Rect;
use ratatui::{Terminal, TerminalOptions, Viewport};

/// Reference samples/s on the 2-core machine of ../shared/bench (median of 3):
/// (workers, batch, best TensorFlow MirroredStrategy, best PyTorch).
pub const REFERENCE: &[(usize, usize, f64, f64)] = &[
    (1, 32, 10_039.0, 17_692.0),
    (2, 32, 8_382.0, 9_798.0),
    (1, 128, 39_195.0, 61_663.0),
    (2, 128, 23_649.0, 42_354.0),
    (1, 512, 60_158.0, 164_052.0),
    (2, 512, 48_718.0, 116_487.0),
];

/// What watches a benchmark run: nothing (events drained), the headless log, or the terminal
/// UI drawing 200x60 frames into a sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watch {
    Nothing,
    Headless,
    Tui,
}

/// Samples/s of one training run: `timed` samples after `warm` samples of warm-up.
pub fn train_throughput(
    workers: usize,
    batch: usize,
    warm: usize,
    timed: usize,
) -> Result<f64, EngineError> {
    Ok(watched_throughput(Watch::Nothing, workers, batch, warm, timed)?.samples_per_sec)
}

/// A watched benchmark run.
#[derive(Clone, Copy, Debug)]
pub struct Watched {
    pub samples_per_sec: f64,
    /// CPU time of the frontend's thread over the run's wall time (1.0 = one core).
    pub frontend_cpu: Option<f64>,
}

/// Samples/s of the reference workload (MLP 784-128-10, Adam lr 1e-3) on these GPUs at
/// `batch` per replica: 200 timed steps after 20.
pub fn gpu_train_throughput(gpus: &[usize], batch: usize) -> Result<f64, EngineError> {
    let (warm, timed) = (20, 200);
    let cfg = RunConfig {
        devices: DeviceSpec::Gpus(gpus.to_vec()),
        lr: Some(1e-3),
        ..synthetic(gpus.len(), 128, 60_000, batch, warm + timed)
    };
    let r = Engine::run(cfg)?;
    Ok(timed_rate(&r, warm))
}

/// `train_throughput` with a frontend watching the run.
pub fn watched_throughput(
    watch: Watch,
    workers: usize,
    batch: usize,
    warm: usize,
    timed: usize,
) -> Result<Watched, EngineError> {
    let global = batch * workers;
    let warm_steps = warm.div_ceil(global).max(2) as u64;
    let timed_steps = timed.div_ceil(global).max(2) as u64;
    let cfg = RunConfig {
        lr: Some(1e-3), // the reference scripts' Adam lr, whatever the batch
        ..synthetic(workers, 128, 60_000, batch, warm_steps + timed_steps)
    };
    if watch == Watch::Nothing {
        let r = Engine::run(cfg)?;
        return Ok(Watched {
            samples_per_sec: timed_rate(&r, warm_steps),
            frontend_cpu: None,
        });
    }
    let engine = Engine::start(cfg)?;
    let (cpu0, wall0) = (thread_cpu_time(), Instant::now());
    let r = match watch {
        Watch::Nothing => unreachable!("returned above"),
        Watch::Headless => crate::front::headless::run(
            engine,
            Duration::from_secs(1),
            &mut std::io::sink(),
            // (the log's default rule: what a headless run prints)
            crate::observe::Recorder::new(Vec::new(), None, Default::default()),
            &[],
        )?,
        Watch::Tui => {
            let opts = TuiOptions {
                theme: Theme::embedded("dark").expect("embedded"),
                readonly: false,
                exit_when_done: true,
                sample_interval: Duration::from_secs(1),
                notes: Vec::new(),
            };
            let mut terminal = sink_terminal(200, 60);
            crate::front::tui::drive(
                &mut terminal,
                engine,
                &opts,
                never(),
                never(),
                crate::observe::Recorder::none(),
            )
            .result?
        }
    };
    let wall = wall0.elapsed().as_secs_f64();
    let frontend_cpu = thread_cpu_time()
        .zip(cpu0)
        .map(|(c1, c0)| (c1 - c0).as_secs_f64() / wall);
    Ok(Watched {
        samples_per_sec: timed_rate(&r, warm_steps),
        frontend_cpu,
    })
}

/// Samples/s of a 2-worker run whose rank 1 computes twice as slowly (`--slow-rank 1:2.0`),
/// with or without `--rebalance`, over `timed` steps after `warm` steps (MLP 784-512-10, batch
/// 128 per replica).
pub fn rebalance_throughput(rebalance: bool, warm: u64, timed: u64) -> Result<f64, EngineError> {
    let cfg = RunConfig {
        slow_rank: Some((1, 2.0)),
        rebalance,
        ..synthetic(2, 512, 20_000, 128, warm + timed)
    };
    let r = Engine::run(cfg)?;
    Ok(timed_rate(&r, warm))
}

/// A terminal of the given size whose output (the escape sequences a real terminal would
/// get) is thrown away.
fn sink_terminal(w: u16, h: u16) -> Terminal<CrosstermBackend<std::io::Sink>> {
    let viewport = Viewport::Fixed(Rect::new(0, 0, w, h));
    Terminal::with_options(
        CrosstermBackend::new(std::io::sink()),
        TerminalOptions { viewport },
    )
    .expect("a sink terminal")
}

/// Time to draw one frame of a busy 8-device run at `w`x`h`, the state changing between
/// frames as in a live run: (median, 99th percentile).
pub fn frame_time(w: u16, h: u16, frames: usize) -> (Duration, Duration) {
    let ranks = 8;
    let mut run = demo::run(ranks, 2000);
    let theme = Theme::embedded("dark").expect("embedded");
    let mut terminal = sink_terminal(w, h);
    let mut times = Vec::with_capacity(frames);
    for f in 0..frames as u64 {
        for r in 0..ranks {
            run.step(demo::step(r, ranks, 2001 + f));
        }
        let t = Instant::now();
        terminal
            .draw(|frame| render(frame, &run.app, &theme))
            .expect("draw into a sink");
        times.push(t.elapsed());
    }
    times.sort();
    (times[times.len() / 2], times[times.len() * 99 / 100])
}

/// Bus bandwidth in GB/s (nccl-tests: 2(n-1)/n x bytes / time) of an all-reduce of `bytes`.
pub fn allreduce_busbw(ranks: usize, bytes: usize, iters: usize) -> f64 {
    let len = bytes / 4;
    let hs: Vec<_> = LocalCollective::group(ranks)
        .into_iter()
        .map(|mut c| {
            std::thread::spawn(move || {
                let mut buf = vec![1.0f32; len];
                c.all_reduce_sum(&mut buf).expect("warm-up");
                c.barrier().expect("barrier");
                let t = Instant::now();
                for _ in 0..iters {
                    c.all_reduce_sum(&mut buf).expect("all-reduce");
                }
                t.elapsed()
            })
        })
        .collect();
    let worst: Duration = hs
        .into_iter()
        .map(|h| h.join().expect("bench thread"))
        .max()
        .unwrap_or_default();
    let per = worst.as_secs_f64() / iters as f64;
    2.0 * (ranks - 1) as f64 / ranks as f64 * bytes as f64 / per / 1e9
}

/// `mgtop-train bench`: every benchmark `--only` names.
pub fn command(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    crate::cmd::listed_once("--workers", &args.workers)?;
    crate::cmd::listed_once("--batches", &args.batches)?;
    let cores = crate::engine::available_cores();
    super::debug_build_note();
    // (what this process may use, where a launcher or taskset gave it fewer than are there)
    let online = crate::engine::online_cores();
    let mine = match online > cores {
        true => format!(" (this process may use {cores})"),
        false => String::new(),
    };
    let machine = crate::text::counted(online.max(cores), "core");
    crate::say!("machine: {machine}{mine}; {}", std::env::consts::ARCH);
    if args.only == "all" || args.only == "train" {
        crate::say!("training throughput, MLP 784-128-10, Adam, synthetic 60000x784 (samples/s, median of {})", args.repeat);
        // (the reference scripts live beside the project's checkout, not in a user's clone)
        let scripts = match std::path::Path::new("../shared/bench").is_dir() {
            true => "; run ../shared/bench's scripts here for a side-by-side comparison",
            false => "",
        };
        crate::say!("(TF and torch: figures the project's reference scripts recorded on its 2-core reference machine, not measured now{scripts})");
        crate::say!(
            "{:>7} {:>6} {:>12} {:>7} {:>10} {:>10} {:>9} {:>9}",
            "workers",
            "batch",
            "mgtop",
            "spread",
            "TF ref",
            "torch ref",
            "x TF",
            "x torch"
        );
        // (each point's spread and the other work while it was timed, for the warnings)
        let mut spreads = Vec::new();
        let mut loads = Vec::new();
        for &w in &args.workers {
            for &b in &args.batches {
                let mut meter = LoadMeter::default();
                meter.sample();
                let runs = (0..args.repeat.max(1))
                    .map(|_| train_throughput(w, b, args.samples / 10, args.samples))
                    .collect::<Result<Vec<f64>, _>>()?;
                let point = format!("{w}x{b}");
                loads.extend((meter.sample().filter(Load::contended)).map(|l| (point.clone(), l)));
                let ours = median(runs.clone());
                let spread = spread_of(&runs, ours);
                spreads.push((point, spread));
                let spread = spread_text(spread);
                let reference = REFERENCE.iter().find(|r| r.0 == w && r.1 == b);
                match reference {
                    Some(&(_, _, tf, torch)) => crate::say!(
                        "{w:>7} {b:>6} {ours:>12.0} {spread:>7} {tf:>10.0} {torch:>10.0} {:>9.2} {:>9.2}",
                        ours / tf,
                        ours / torch
                    ),
                    None => crate::say!(
                        "{w:>7} {b:>6} {ours:>12.0} {spread:>7} {:>10} {:>10}",
                        "-",
                        "-"
                    ),
                }
            }
        }
        let loads: Vec<(String, &Load)> = loads.iter().map(|(p, l)| (p.clone(), l)).collect();
        let warnings = [loaded_points(&loads), noisy_points(&spreads, "--samples")];
        for w in warnings.into_iter().flatten() {
            crate::say!("{w}");
        }
    }
    if args.only == "all" || args.only == "allreduce" {
        let ranks = cores.max(2);
        crate::say!(
            "in-process all-reduce, {ranks} ranks (one a core, 2 at least; --workers and --batches are the training benchmarks'): bus bandwidth GB/s (2(n-1)/n x bytes / time)"
        );
        for mib in [1usize, 4, 16, 64] {
            let iters = (256 / mib).clamp(4, 64);
            let bw = median(
                (0..args.repeat.max(1))
                    .map(|_| allreduce_busbw(ranks, mib << 20, iters))
                    .collect(),
            );
            crate::say!("{mib:>4} MiB {bw:>8.2}");
        }
    }
    if args.only == "all" || args.only == "tui" {
        let (frame, p99) = frame_time(200, 60, 500);
        crate::say!(
            "terminal UI frame at 200x60 (8 devices, state changing every frame): median {:.3} ms, p99 {:.3} ms",
            frame.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3
        );
        crate::say!(
            "training watched by the log vs the terminal UI (200x60 into a sink): samples/s (median of {}, run range) and the frontend thread's CPU (share of one core)",
            args.repeat
        );
        let batch = args.batches.first().copied().unwrap_or(32);
        for &w in &args.workers {
            let mut runs = [Vec::new(), Vec::new()];
            for _ in 0..args.repeat.max(1) {
                // alternate so both see the same machine state
                for (i, watch) in [Watch::Headless, Watch::Tui].into_iter().enumerate() {
                    runs[i].push(watched_throughput(
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
                let cpu: Vec<f64> = r.iter().filter_map(|x| x.frontend_cpu).collect();
                let cpu = match cpu.is_empty() {
                    true => "n/a".into(),
                    false => format!("{:.2}%", median(cpu) * 100.0),
                };
                crate::say!(
                    "  {w} worker(s), batch {batch}: {name:<8} {:>9.0} samples/s ({lo:.0}-{hi:.0}), frontend CPU {cpu} of a core",
                    median(rates),
                );
            }
        }
    }
    if args.only == "all" || args.only == "live" {
        live(args)?;
    }
    if args.only == "all" || args.only == "rebalance" {
        crate::say!(
            "--rebalance against --slow-rank 1:2.0 (2 workers, MLP 784-512-10, batch 128 per replica, 300 timed steps after 100): samples/s, median of {}",
            args.repeat
        );
        let (mut plain, mut balanced) = (Vec::new(), Vec::new());
        for _ in 0..args.repeat.max(1) {
            plain.push(rebalance_throughput(false, 100, 300)?);
            balanced.push(rebalance_throughput(true, 100, 300)?);
        }
        let (p, b) = (median(plain), median(balanced));
        crate::say!(
            "  even split {p:>9.0}   rebalanced {b:>9.0}   {:.2}x",
            b / p
        );
    }
    if args.only == "all" || args.only == "processes" {
        super::bench_processes::command(args)?;
    }
    if args.only == "all" || args.only == "gpu" {
        run_gpu_bench(args)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Three clients attached to a run's live socket against none (2 workers, the first batch of
/// `--batches`, alternated `--repeat` times), and a step's delay to a client.
fn live(args: &BenchArgs) -> anyhow::Result<()> {
    let batch = args.batches.first().copied().unwrap_or(32);
    let global = 2 * batch;
    let warm = (args.samples / 10).div_ceil(global).max(2) as u64;
    let timed = args.samples.div_ceil(global).max(2) as u64;
    crate::say!(
        "live socket: 2 workers, MLP 784-128-10, batch {batch}, {timed} timed steps; samples/s with 0 and 3 attached clients (median of {}, alternated)",
        args.repeat
    );
    let (mut alone, mut watched, mut delays) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.repeat.max(1) {
        alone.push(bench_live::attached_throughput(0, 2, batch, warm, timed)?.samples_per_sec);
        let a = bench_live::attached_throughput(3, 2, batch, warm, timed)?;
        watched.push(a.samples_per_sec);
        delays.extend(a.delays);
    }
    let (a, w) = (median(alone), median(watched));
    let n = delays.len();
    let mut sorted = delays.clone();
    sorted.sort();
    let p95 = sorted.get(n * 95 / 100).copied().unwrap_or_default();
    if n == 0 {
        crate::say!(
            "  no client {a:>9.0}   3 clients {w:>9.0}   {:+.1}%   no step was timed to a client (too few steps: a larger --samples gives more)",
            (w / a - 1.0) * 100.0
        );
        return Ok(());
    }
    crate::say!(
        "  no client {a:>9.0}   3 clients {w:>9.0}   {:+.1}%   a step reaches a client after {:.1} ms (median of {n}; p95 {:.1} ms)",
        (w / a - 1.0) * 100.0,
        bench_live::median_duration(delays).as_secs_f64() * 1e3,
        p95.as_secs_f64() * 1e3
    );
    Ok(())
}

/// A part of the benchmarks this machine or build cannot run: with the others, a line saying
/// why; asked for alone (`--only PART`), an error, so that a script sees that nothing was
/// measured.
pub fn cannot_run(args: &BenchArgs, part: &str, why: &str) -> anyhow::Result<()> {
    if args.only == part {
        anyhow::bail!("bench --only {part}: nothing measured: {why}");
    }
    let title = match part {
        "gpu" => "GPU benchmarks",
        part => part,
    };
    crate::say!("{title}: skipped: {why}");
    Ok(())
}

/// The benchmarks only GPUs can run; without them, one line saying why not.
fn run_gpu_bench(args: &BenchArgs) -> anyhow::Result<()> {
    use crate::backend::cuda::discover::{discover, Discovery};
    use crate::backend::cuda::{bench as gpu_bench, Libraries};
    let found = match discover() {
        Discovery::None(why) => return cannot_run(args, "gpu", &format!("no GPU ({why})")),
        Discovery::Found(found) => found,
    };
    if let Some(missing) = Libraries::probe().missing_for(found.len()) {
        return cannot_run(args, "gpu", &missing.to_string());
    }
    for g in &found {
        crate::say!(
            "GPU {}: {}: kernel times (CUDA events, mean of repeated launches)",
            g.index,
            g.name
        );
        for k in gpu_bench::kernel_times(g.index)? {
            crate::say!("  {:<28} {:>10.1} us  {:>14}", k.name, k.us, k.rate);
        }
    }
    crate::say!(
        "training on GPUs, MLP 784-128-10, Adam, synthetic 60000x784 (samples/s, median of {})",
        args.repeat
    );
    crate::say!(
        "{:>5} {:>6} {:>12} {:>8} {:>6}",
        "gpus",
        "batch",
        "samples/s",
        "speedup",
        "eff"
    );
    for &b in &args.batches {
        let mut one = None;
        for n in 1..=found.len() {
            let ids: Vec<usize> = found.iter().take(n).map(|g| g.index).collect();
            let runs: Result<Vec<f64>, _> = (0..args.repeat.max(1))
                .map(|_| gpu_train_throughput(&ids, b))
                .collect();
            let rate = median(runs?);
            let base = *one.get_or_insert(rate);
            let (speedup, eff) = crate::engine::calibrate::scaling(rate, base, n);
            crate::say!(
                "{n:>5} {b:>6} {rate:>12.0} {speedup:>7.2}x {:>5.0}%",
                eff * 100.0
            );
        }
    }
    if found.len() > 1 {
        crate::say!(
            "NCCL all-reduce over {} GPUs: bus bandwidth GB/s (2(n-1)/n x bytes / time)",
            found.len()
        );
        let sizes: Vec<usize> = [1usize, 4, 16, 64, 256].iter().map(|m| m << 20).collect();
        for (bytes, bw) in gpu_bench::nccl_busbw(found.len(), &sizes)? {
            crate::say!("{:>5} MiB {bw:>8.1}", bytes >> 20);
        }
    }
    Ok(())
}
