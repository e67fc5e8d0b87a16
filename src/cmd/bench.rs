//! `mgtop-train bench`: training throughput of the reference workload (MLP 784-128-10, Adam
//! lr 1e-3, 60000x784 synthetic teacher data) and in-process all-reduce bus bandwidth.

use std::time::{Duration, Instant};

use crate::comm::{Collective, LocalCollective};
use crate::config::{Budget, DeviceSpec, RunConfig};
use crate::data::DataSpec;
use crate::engine::calibrate::timed_rate;
use crate::engine::{Engine, EngineError};
use crate::front::tui::app::AppEvent;
use crate::front::tui::render::render;
use crate::front::tui::theme::Theme;
use crate::front::tui::{demo, TuiOptions};
use crate::nn::model::ModelSpec;
use crate::observe::telemetry::thread_cpu_time;
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
    Ok(timed_rate(&r.step_ends, warm, batch * gpus.len()))
}

/// A benchmark run: MLP 784-`hidden`-10 on `n` synthetic samples, no validation, no checkpoint.
fn synthetic(workers: usize, hidden: usize, n: usize, batch: usize, steps: u64) -> RunConfig {
    RunConfig {
        devices: DeviceSpec::Cpu(workers),
        model: ModelSpec {
            hidden: vec![hidden],
        },
        data: DataSpec::Synthetic { n, d: 784, c: 10 },
        budget: Budget::Steps(steps),
        batch_per_replica: batch,
        val_fraction: 0.0,
        final_checkpoint: false,
        ..RunConfig::default()
    }
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
            samples_per_sec: timed_rate(&r.step_ends, warm_steps, global),
            frontend_cpu: None,
        });
    }
    let engine = Engine::start(cfg)?;
    let (cpu0, wall0) = (thread_cpu_time(), Instant::now());
    let r = match watch {
        Watch::Nothing => unreachable!("returned above"),
        Watch::Headless => crate::front::headless::run(
            engine,
            50,
            Duration::from_secs(1),
            &mut std::io::sink(),
            None,
        )?,
        Watch::Tui => {
            let opts = TuiOptions {
                theme: Theme::embedded("dark").expect("embedded"),
                readonly: false,
                exit_when_done: true,
                sample_interval: Duration::from_secs(1),
                log_every: 50,
            };
            let mut terminal = sink_terminal(200, 60);
            crate::front::tui::drive(&mut terminal, engine, &opts, never(), never(), None).result?
        }
    };
    let wall = wall0.elapsed().as_secs_f64();
    let frontend_cpu = thread_cpu_time()
        .zip(cpu0)
        .map(|(c1, c0)| (c1 - c0).as_secs_f64() / wall);
    Ok(Watched {
        samples_per_sec: timed_rate(&r.step_ends, warm_steps, global),
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
    Ok(timed_rate(&r.step_ends, warm, 256))
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
    let mut app = demo::app(ranks, 2000);
    let theme = Theme::embedded("dark").expect("embedded");
    let mut terminal = sink_terminal(w, h);
    let mut times = Vec::with_capacity(frames);
    for f in 0..frames as u64 {
        for r in 0..ranks {
            app.apply(AppEvent::Step(demo::step(r, ranks, 2001 + f)));
        }
        let t = Instant::now();
        terminal
            .draw(|frame| render(frame, &app, &theme))
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

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
