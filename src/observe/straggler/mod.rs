//! Who is slow, by how much, and why: the straggler detector both frontends share.
//!
//! Each rank's *work* per step is what it spends on its own (data wait + compute + optimizer,
//! not the all-reduce or waiting for others); compute is the device's own time (a CPU worker's
//! thread CPU time, so time lost to other threads on a shared core is not the device's). Every
//! `every` steps after `warmup` steps, the median work of each rank over the last `window` steps
//! is compared with the fastest rank's: score = fastest / this. A rank becomes a straggler after
//! `consecutive` evaluations below `slow_below` and clears after as many above `clear_above`
//! (hysteresis); differences under `min_gap` are noise, and so is a slower rank the others do
//! not wait `min_gap` for (it is not on the critical path) — except where workers share cores
//! (more CPU workers than cores): there the others do not wait for a rank's extra CPU work, the
//! scheduler hands it their cores, so its measured extra work is the cost to the job. A rank is *degraded* when its work
//! per sample is `degraded_ratio` times its own best (the whole job slowing down, e.g. thermal
//! throttling), judged once a baseline has settled.

use std::collections::VecDeque;
use std::time::Duration;

mod batch_key;
mod bound;
mod cause;
mod config;
mod outside;
mod spike;
mod warning;

pub use bound::{Bound, Limit};
pub use config::{Context, DetectorConfig};
pub use spike::{SaidFor, Spike};
pub use warning::{Cause, Warning};

use crate::engine::heartbeat::{Beat, Phase};
use crate::engine::strategy::Strategy;
use crate::engine::{Device, RunInfo};
use crate::observe::mfu::Mfu;
use crate::observe::monitor::StepRow;
use crate::stats::median;
use batch_key::BatchKey;

/// NVML throttle-reason bits, SM clock and its maximum (MHz).
type Throttle = (u64, Option<u32>, Option<u32>);

/// One rank's step as the detector keeps it (times in ms).
#[derive(Clone, Copy)]
struct Seen {
    work: f64,
    data: f64,
    /// Waiting for slower ranks.
    wait: f64,
    samples: f64,
    /// Moving data in the all-reduce.
    comm: f64,
    /// The rank's loader threads' busy share in the step (where said).
    loaders: Option<f64>,
}

/// One rank's recent steps.
type Recent = VecDeque<Seen>;

pub struct Detector {
    cfg: DetectorConfig,
    ctx: Context,
    recent: Vec<Recent>,
    rows: u64,
    slow_runs: Vec<u32>,
    clear_runs: Vec<u32>,
    flagged: Vec<bool>,
    /// Whether each rank's newest compute time was its thread's CPU time (CPU workers).
    cpu_time: Vec<bool>,
    /// Each rank's best median work per sample at the batch of `batch`.
    best: Vec<f64>,
    /// The batch the best speeds are of, and the row it began at (work per sample depends on
    /// a rank's samples per step: a new batch measures its own best once its window has
    /// settled).
    batch: Option<(BatchKey, u64)>,
    degraded: Vec<bool>,
    worse_runs: Vec<u32>,
    recovered_runs: Vec<u32>,
    /// The step a stall was reported after (one warning per stall).
    stalled_at: Option<u64>,
    /// Each rank's newest throttle reasons and SM clock (GPUs, from telemetry).
    throttle: Vec<Option<Throttle>>,
    /// The newest complete step and when it completed (or the run resumed), since the start.
    last_step: u64,
    last_progress: Duration,
    paused: bool,
    /// What holds the whole run back (its input, its host) or leaves its GPUs underused.
    bound: bound::BoundDetector,
    /// Steps whose gradient norm is many times the recent ones'.
    spikes: spike::SpikeDetector,
    /// Other work taking the run's cores, machine by machine: process 0's (`None`), and each
    /// other's by the first rank of the process that reads it.
    outside: std::collections::BTreeMap<Option<usize>, outside::OutsideDetector>,
}

impl Detector {
    /// The straggler detector for this run, with what explains a slow rank.
    pub fn for_run(info: &RunInfo) -> Detector {
        let d = DetectorConfig::default();
        let h = info.strategy.sync_every();
        let cfg = DetectorConfig {
            stall_timeout: info.stall_timeout,
            sync_every: h,
            // a window of whole sync periods, at least 4 of them
            window: d.window.max(4 * h as usize).div_ceil(h as usize) * h as usize,
            ..d
        };
        let ctx = Context {
            // (over several processes, process 0's cores say nothing of where the others'
            // workers run: no oversubscription is judged)
            cores: if info.processes > 1 { 0 } else { info.cores },
            threads_per_worker: info.threads_per_worker,
            injected: info.injected.clone(),
            models: info
                .devices
                .iter()
                .map(|d| match d {
                    Device::Gpu { name, .. } => Some(name.clone()),
                    Device::Cpu { .. } => None,
                })
                .collect(),
            hosts: info.hosts.clone(),
            pictures: info.pictures,
            loader_threads: info.loader_threads,
            prefetch: info.prefetch,
            peers_here: info.peers_here.clone(),
        };
        let mfu = Mfu::for_run(info);
        let local_after =
            matches!(info.strategy, Strategy::LocalSgd { .. }).then(|| info.strategy.sync_warmup());
        Detector {
            spikes: spike::SpikeDetector::new(info.clip_grad_norm, local_after),
            ..Detector::with_mfu(info.ranks(), cfg, ctx, mfu)
        }
    }

    /// A detector that cannot tell a launch-bound run (no FLOPs known).
    pub fn new(ranks: usize, cfg: DetectorConfig, ctx: Context) -> Detector {
        Detector::with_mfu(ranks, cfg, ctx, Default::default())
    }

    fn with_mfu(ranks: usize, cfg: DetectorConfig, ctx: Context, mfu: Mfu) -> Detector {
        Detector {
            recent: vec![VecDeque::new(); ranks],
            slow_runs: vec![0; ranks],
            clear_runs: vec![0; ranks],
            flagged: vec![false; ranks],
            cpu_time: vec![false; ranks],
            best: vec![f64::INFINITY; ranks],
            batch: None,
            degraded: vec![false; ranks],
            worse_runs: vec![0; ranks],
            recovered_runs: vec![0; ranks],
            rows: 0,
            stalled_at: None,
            throttle: vec![None; ranks],
            last_step: 0,
            last_progress: Duration::ZERO,
            paused: false,
            bound: bound::BoundDetector::new(mfu, ctx.clone()),
            spikes: spike::SpikeDetector::default(),
            outside: Default::default(),
            cfg,
            ctx,
        }
    }

    /// Whether `workers` CPU workers and their intra-op threads want more cores than there are.
    fn oversubscribed(&self, workers: usize) -> bool {
        self.ctx.cores > 0 && workers * self.ctx.threads_per_worker.max(1) > self.ctx.cores
    }

    /// The newest device samples (one per rank): throttle reasons explain a slow GPU.
    pub fn on_telemetry(&mut self, samples: &[crate::observe::sample::DeviceSample]) {
        for (t, s) in self.throttle.iter_mut().zip(samples) {
            *t = s
                .throttle_reasons
                .map(|r| (r, s.sm_clock_mhz, s.sm_clock_max_mhz));
        }
        // GPUs' utilization only (a CPU worker's is its own share of busy time)
        let util: Vec<Option<f32>> = (samples.iter().enumerate())
            .map(|(r, s)| {
                s.util
                    .filter(|_| self.ctx.models.get(r).is_some_and(Option::is_some))
            })
            .collect();
        self.bound.on_util(&util);
    }

    /// A machine's load since its last sample (`rank`: the first rank of the process that
    /// read it, on another machine than process 0's; `None`: process 0's): other work taking
    /// the run's cores there is said (once steps are under way, not while paused), and cleared.
    pub fn on_load(
        &mut self,
        rank: Option<usize>,
        load: &crate::observe::machine_load::Load,
    ) -> Option<Warning> {
        if self.paused || self.rows == 0 {
            return None;
        }
        let step = self.last_step;
        let host = rank.and_then(|r| self.ctx.hosts.get(r).cloned());
        Some(match self.outside.entry(rank).or_default().on_load(load)? {
            outside::Change::Said(load) => Warning::OutsideLoad {
                step,
                load,
                rank,
                host,
            },
            outside::Change::Cleared => Warning::OutsideLoadCleared {
                step,
                rank,
                host,
                unheard: false,
            },
        })
    }

    /// Another machine's loads stopped coming (`rank`: the first rank of the process that sent
    /// them): what was said of its load is taken back, as no longer known.
    pub fn on_unheard(&mut self, rank: usize) -> Option<Warning> {
        if !self.outside.get_mut(&Some(rank))?.unheard() {
            return None;
        }
        Some(Warning::OutsideLoadCleared {
            step: self.last_step,
            rank: Some(rank),
            host: self.ctx.hosts.get(rank).cloned(),
            unheard: true,
        })
    }

    /// The ranks currently flagged as stragglers.
    pub fn stragglers(&self) -> Vec<usize> {
        (0..self.flagged.len())
            .filter(|&r| self.flagged[r])
            .collect()
    }

    /// Feeds one complete step; returns warnings that start or end here.
    pub fn on_row(&mut self, row: &StepRow) -> Vec<Warning> {
        self.stalled_at = None;
        self.last_step = row.step;
        self.last_progress = self.last_progress.max(row.at);
        if row.ranks.len() != self.recent.len() {
            return Vec::new();
        }
        let mut out = Vec::new();
        if let Some(key) = BatchKey::of(row, self.batch.as_ref().map(|(k, _)| k)) {
            // the norm of a mean gradient is of the batch it is over: a new batch size is
            // judged on its own norms
            if (self.batch.as_ref()).is_some_and(|(k, _)| k.per_replica != key.per_replica) {
                self.spikes.rebase();
            }
            self.batch = Some((key, self.rows));
            // who is slow is judged on steps of this split only: a rank a --rebalance just
            // relieved is not flagged on the steps before it (nor cleared on them)
            self.recent.iter_mut().for_each(VecDeque::clear);
            self.slow_runs.fill(0);
            self.clear_runs.fill(0);
            self.best.fill(f64::INFINITY);
            self.worse_runs.fill(0);
            self.recovered_runs.fill(0);
            // a slowdown at the old batch says nothing at the new one
            for (rank, degraded) in self.degraded.iter_mut().enumerate() {
                if std::mem::take(degraded) {
                    out.push(Warning::DegradedCleared {
                        rank,
                        step: row.step,
                        rebased: true,
                    });
                }
            }
        }
        for ((q, s), cpu) in self
            .recent
            .iter_mut()
            .zip(&row.ranks)
            .zip(&mut self.cpu_time)
        {
            *cpu = s.compute_cpu.is_some();
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            if q.len() == self.cfg.window {
                q.pop_front();
            }
            let loaders = (self.ctx.loaders_said())
                .then(|| crate::observe::monitor::loader_share(std::slice::from_ref(s)))
                .flatten();
            q.push_back(Seen {
                work: ms(s.work()),
                data: ms(s.data_wait),
                wait: ms(s.sync_wait),
                samples: s.samples.max(1) as f64,
                comm: ms(s.comm),
                loaders,
            });
        }
        // (an epoch's short last step, whose mean gradient is over few samples: left out)
        let short = (self.batch.as_ref()).is_some_and(|(k, _)| k.is_cut_short(row));
        if !short {
            let spikes = self.spikes.on_norm(row.step, row.at, row.grad_norm);
            out.extend(spikes.into_iter().map(Warning::GradSpike));
        }
        self.rows += 1;
        let bound =
            (self.bound.on_row(row, &self.cfg).into_iter()).map(|(bound, said)| match said {
                true => Warning::Bound {
                    step: row.step,
                    bound,
                },
                false => Warning::BoundCleared {
                    step: row.step,
                    limit: bound.limit,
                },
            });
        // (a split is judged once it has `every` steps, and under local SGD a whole period:
        // its others wait for a slow rank only at the periods' exchanges)
        let judged = self.recent.first().map_or(0, VecDeque::len) as u64;
        let least = (self.cfg.every.max(self.cfg.sync_every)).min(self.cfg.window as u64);
        if self.rows > self.cfg.warmup
            && self.rows.is_multiple_of(self.cfg.every)
            && judged >= least
        {
            out.extend(self.evaluate(row.step));
        }
        out.extend(bound);
        out
    }

    fn evaluate(&mut self, step: u64) -> Vec<Warning> {
        let col = |q: &Recent, f: fn(&Seen) -> f64| -> Vec<f64> { q.iter().map(f).collect() };
        let medians = |f: fn(&Seen) -> f64| -> Vec<f64> {
            self.recent.iter().map(|q| median(col(q, f))).collect()
        };
        let work = medians(|s| s.work);
        let data = medians(|s| s.data);
        let wait: Vec<f64> = self
            .recent
            .iter()
            .map(|q| match self.cfg.sync_every {
                1 => median(col(q, |s| s.wait)),
                _ => col(q, |s| s.wait).iter().sum::<f64>() / q.len().max(1) as f64,
            })
            .collect();
        let comm = medians(|s| s.comm);
        // work per sample: what degrades, whatever the batch size of the moment
        let per_sample = medians(|s| s.work / s.samples);
        // (where every step of the window said it)
        let loaders: Vec<Option<f64>> = (self.recent.iter())
            .map(|q| {
                let known: Option<Vec<f64>> = q.iter().map(|s| s.loaders).collect();
                known.filter(|k| !k.is_empty()).map(median)
            })
            .collect();
        let (fastest, &fast_ms) = work
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(b.1))
            .expect("at least one rank");
        let gap_ms = self.cfg.min_gap.as_secs_f64() * 1e3;
        let mut out = Vec::new();
        for r in 0..work.len() {
            let score = if work[r] > 0.0 {
                fast_ms / work[r]
            } else {
                1.0
            };
            // what the others wait per step for this rank (it is only a straggler if it costs them)
            let others_wait = (0..work.len())
                .filter(|&o| o != r)
                .map(|o| wait[o])
                .sum::<f64>()
                / (work.len() - 1).max(1) as f64;
            // workers sharing cores do not wait for a rank's extra CPU work: it takes their cores
            let shares_cores = self.cpu_time[r] && self.oversubscribed(work.len());
            let slow = score < self.cfg.slow_below
                && work[r] - fast_ms >= gap_ms
                && (others_wait >= gap_ms || shares_cores);
            let fine = score > self.cfg.clear_above
                || work[r] - fast_ms < gap_ms
                || (others_wait < gap_ms / 2.0 && !shares_cores);
            self.slow_runs[r] = if slow { self.slow_runs[r] + 1 } else { 0 };
            self.clear_runs[r] = if fine { self.clear_runs[r] + 1 } else { 0 };
            if !self.flagged[r] && self.slow_runs[r] >= self.cfg.consecutive {
                self.flagged[r] = true;
                out.push(Warning::Straggler {
                    rank: r,
                    host: self.ctx.hosts.get(r).cloned(),
                    step,
                    slowdown: work[r] / fast_ms.max(1e-9),
                    work_ms: work[r],
                    fastest_rank: fastest,
                    fastest_ms: fast_ms,
                    others_wait_ms: others_wait,
                    cpu_time: self.cpu_time[r] && self.cpu_time[fastest],
                    cause: self.explain(r, fastest, &work, &data, &comm, &loaders),
                    injected: self.ctx.injected.get(r).cloned().flatten(),
                });
            } else if self.flagged[r] && self.clear_runs[r] >= self.cfg.consecutive {
                self.flagged[r] = false;
                out.push(Warning::StragglerCleared { rank: r, step });
            }
            // degraded: against this rank's own best median per sample (once a baseline has
            // settled), for `consecutive` evaluations
            let since = self.batch.as_ref().map_or(0, |(_, row)| *row);
            if self.rows < since + self.cfg.warmup + 2 * self.cfg.window as u64 {
                continue; // a best speed needs a settled baseline at this batch size first
            }
            let ps = per_sample[r];
            self.best[r] = self.best[r].min(ps);
            let samples = work[r] / ps.max(1e-12);
            let worse = ps >= self.best[r] * self.cfg.degraded_ratio
                && (ps - self.best[r]) * samples >= gap_ms;
            let recovered = ps < self.best[r] * (1.0 + (self.cfg.degraded_ratio - 1.0) / 2.0);
            self.worse_runs[r] = if worse { self.worse_runs[r] + 1 } else { 0 };
            self.recovered_runs[r] = if recovered {
                self.recovered_runs[r] + 1
            } else {
                0
            };
            if !self.degraded[r] && self.worse_runs[r] >= self.cfg.consecutive {
                self.degraded[r] = true;
                out.push(Warning::Degraded {
                    rank: r,
                    step,
                    median_ms: ps * samples,
                    best_ms: self.best[r] * samples,
                    outside: self.outside_words(r),
                });
            } else if self.degraded[r] && self.recovered_runs[r] >= self.cfg.consecutive {
                self.degraded[r] = false;
                out.push(Warning::DegradedCleared {
                    rank: r,
                    step,
                    rebased: false,
                });
            }
        }
        out
    }

    /// A pause is not a stall: `paused` at time `now` (since the start) stops the clock,
    /// resuming restarts it.
    pub fn set_paused(&mut self, paused: bool, now: Duration) {
        self.paused = paused;
        self.last_progress = self.last_progress.max(now);
    }

    /// What is held to the run's end: the gradient spikes of its last minute, said for them all
    /// by their largest.
    pub fn finish(&mut self) -> Option<Warning> {
        self.spikes.finish().map(Warning::GradSpike)
    }

    /// Called on a timer with the time since the start and each rank's heartbeat: a stall
    /// warning once no step has completed for the timeout (one per stall). A validation or a
    /// checkpoint is not a stall (a large set or model takes a while, a network disk more):
    /// the clock restarts when it ends.
    pub fn tick(&mut self, now: Duration, beats: &[Beat]) -> Option<Warning> {
        // (rank 0's beat is always this process's: where it validates, every rank does; it
        // writes the checkpoints, the others waiting for it at the next all-reduce)
        let busy = |b: &Beat| matches!(b.phase, Phase::Validate | Phase::Checkpoint);
        if beats.first().is_some_and(busy) {
            self.last_progress = self.last_progress.max(now);
            return None;
        }
        // (a process stopped and continued, Ctrl-Z then fg, did not stall meanwhile)
        let waited = crate::clock::awake(now.saturating_sub(self.last_progress));
        if self.paused || waited < self.cfg.stall_timeout || self.stalled_at == Some(self.last_step)
        {
            return None;
        }
        let last = self.last_step;
        self.stalled_at = Some(last);
        let missing: Vec<usize> = beats
            .iter()
            .enumerate()
            .filter(|(_, b)| !(b.step > last && b.phase >= Phase::Reduce))
            .map(|(r, _)| r)
            .collect();
        let injected = (missing.iter()).find_map(|&r| self.ctx.injected.get(r).cloned().flatten());
        // (Ctrl-Z in one process's terminal, kill -STOP: the run waits for it)
        let suspended =
            crate::pids::Peer::suspended(&self.ctx.peers_here, |r| missing.contains(&r)).cloned();
        Some(Warning::Stall {
            step: last,
            waited,
            missing,
            injected,
            suspended,
        })
    }
}

#[cfg(test)]
mod tests;
