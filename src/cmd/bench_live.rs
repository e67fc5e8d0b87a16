//! `bench --only live`: what attached clients cost a run. The same headless run (2 workers,
//! MLP 784-128-10) served on a live socket with none and with three clients attached, the two
//! alternated so both see the same machine, and how long a step takes to reach a client.

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use super::bench_workload::synthetic;
use crate::config::log_every::LogEvery;
use crate::config::RunConfig;
use crate::engine::calibrate::timed_rate;
use crate::engine::{Engine, EngineError};
use crate::front::headless;
use crate::observe::live::{LiveHub, LiveServer};
use crate::observe::metrics::{records, Line};
use crate::observe::Recorder;

/// One run: its samples/s over the timed steps, and (with clients) the delay from each step
/// the first client saw to its arrival there.
pub struct Attached {
    pub samples_per_sec: f64,
    pub delays: Vec<Duration>,
}

/// Trains `steps` warm + timed steps headless, served on a socket in a temporary directory,
/// with `clients` clients reading everything from before the first step to the end.
pub fn attached_throughput(
    clients: usize,
    workers: usize,
    batch: usize,
    warm_steps: u64,
    timed_steps: u64,
) -> Result<Attached, EngineError> {
    let cfg = RunConfig {
        lr: Some(1e-3),
        ..synthetic(workers, 128, 60_000, batch, warm_steps + timed_steps)
    };
    let engine = Engine::start(cfg)?;
    let started = Instant::now() - engine.elapsed();
    let hub = LiveHub::new(started);
    hub.set_run(Line::new(&records::run(engine.info())));
    let socket = std::env::temp_dir().join(format!("mgtop-bench-{}.sock", std::process::id()));
    let server = LiveServer::start(&socket, hub.clone(), engine.controller())
        .map_err(|e| EngineError::Config(e.to_string()))?;
    let readers: Vec<_> = (0..clients)
        .map(|i| {
            let stream = UnixStream::connect(server.path());
            std::thread::spawn(move || read_all(stream.ok(), started, i == 0))
        })
        .collect();
    let r = headless::run(
        engine,
        Duration::from_secs(1),
        &mut std::io::sink(),
        Recorder::new(Vec::new(), Some(hub), LogEvery::default()),
        &[],
    )?;
    drop(server);
    let mut delays = Vec::new();
    for h in readers {
        delays.extend(h.join().unwrap_or_default());
    }
    Ok(Attached {
        samples_per_sec: timed_rate(&r, warm_steps),
        delays,
    })
}

/// Reads a client's stream to its end; where `timed`, the delay of each step line: the time it
/// arrived less the step's `t` (both since the run's start).
fn read_all(stream: Option<UnixStream>, started: Instant, timed: bool) -> Vec<Duration> {
    let Some(stream) = stream else {
        return Vec::new();
    };
    let mut delays = Vec::new();
    let mut live = false;
    for line in BufReader::new(stream).lines().map_while(Result::ok) {
        let at = started.elapsed();
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        match v["type"].as_str() {
            // the history ends with a `live` line: steps after it are news
            Some("live") => live = true,
            Some("step") if timed && live => {
                if let Some(t) = v["t"].as_f64() {
                    delays.push(at.saturating_sub(Duration::from_secs_f64(t.max(0.0))));
                }
            }
            _ => {}
        }
    }
    delays
}

/// The median of `x` (0 when empty).
pub fn median_duration(mut x: Vec<Duration>) -> Duration {
    x.sort();
    x.get(x.len() / 2).copied().unwrap_or_default()
}
