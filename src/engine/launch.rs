//! This process's workers: one thread per local rank, each with its batches' loader, its link
//! to the other ranks (the collective) and its replica on its device.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use super::control::{Decider, DeviceCap};
use super::events::{Event, StepStats};
use super::heartbeat::Heartbeats;
use super::info::RunInfo;
use super::job::{self, World};
use super::loader::{RankLoader, Sharding};
use super::resume::TrainSplit;
use super::start::Start;
use super::{checkpoint, strategy, validate, worker, Device, EngineError};
use crate::backend::CpuReplica;
use crate::comm::{Collective, HierCollective, LocalCollective};
use crate::config::RunConfig;
use crate::data::Dataset;
use crate::nn::model::Model;
use crate::nn::optim::Optimizer;

/// A worker thread: its rank's result, or why it stopped the run.
pub(super) type Handle = JoinHandle<Result<worker::WorkerEnd, EngineError>>;

/// What every worker of the run starts from and reports to.
pub(super) struct Launch<'a> {
    pub cfg: &'a Arc<RunConfig>,
    pub model: &'a Model,
    pub info: &'a RunInfo,
    pub world: &'a World,
    pub start: &'a Start,
    pub train: &'a Arc<Dataset>,
    pub val: &'a Arc<Dataset>,
    pub split: TrainSplit,
    pub beats: &'a Heartbeats,
    pub device_cap: &'a Arc<DeviceCap>,
    pub events: &'a Sender<Event>,
    pub stats: &'a Sender<StepStats>,
    pub t0: Instant,
}

/// Starts a worker thread for each of this process's ranks; rank 0 (or, in another process,
/// its first rank) takes the `decider`.
pub(super) fn workers(l: Launch, decider: Option<Decider>) -> Result<Vec<Handle>, EngineError> {
    let (cfg, info, start) = (l.cfg, l.info, l.start);
    let ranks = info.devices.len();
    let local = l.world.local();
    let gpus = (info.devices.iter())
        .filter(|d| matches!(d, Device::Gpu { .. }))
        .count();
    // NCCL is joined with one id made here (by process 0, sent to the others over the
    // processes' link), before any worker starts.
    let nccl_id = match gpus > 1 {
        true => Some(job::nccl_id(l.world)?),
        false => None,
    };
    let collectives: Vec<Box<dyn Collective>> = match &l.world.procs {
        Some(p) => HierCollective::group(p.clone(), l.world.offsets.clone())
            .into_iter()
            .map(|c| Box::new(c) as Box<dyn Collective>)
            .collect(),
        None => LocalCollective::group(ranks)
            .into_iter()
            .map(|c| Box::new(c) as Box<dyn Collective>)
            .collect(),
    };
    let optimizer = Optimizer {
        began: start.began.clone(),
        ..validate::optimizer(cfg, l.model)
    };
    let optimizer_began = checkpoint::began::names(l.model, &start.began);
    let (store, state) = strategy::Store::for_run(cfg, &optimizer, start.state.clone());
    // (a resumed run rebalanced as its checkpoint's was)
    let split = start.shares.clone().map(Arc::new);
    let pools_bn = worker::pools_bn(cfg, l.model, ranks);
    let sharding = Sharding {
        split: split.clone(),
        ..info.sharding()
    };
    let mut decider = decider;
    let mut workers = Vec::new();
    for (rank, coll) in local.clone().zip(collectives) {
        let loader = RankLoader::new(
            l.train.clone(),
            cfg.seed,
            rank,
            start.cursor,
            sharding.clone(),
            cfg.prefetch,
            info.loader_threads,
        )
        .map_err(|e| {
            EngineError::Config(format!(
                "cannot start the loader threads of rank {rank}: {e}; try fewer --loader-threads or --prefetch 0, or raise the process limit (ulimit -u)"
            ))
        })?;
        let ctx = worker::Worker {
            rank,
            ranks,
            local: local.clone(),
            unsent: Default::default(),
            reports: Vec::new(),
            forwarded: Vec::new(),
            said_in_sync: false,
            check_params: Vec::new(),
            cfg: cfg.clone(),
            model: l.model.clone(),
            train: l.split,
            classes: l.train.class_names().to_vec(),
            val: l.val.clone(),
            picture_sets: Dataset::picture_sets(l.train, l.val),
            train_lost: (l.train.pictures.as_ref()).map(|p| p.lost.clone()),
            coll,
            loader,
            // (rank 0 decides; another process's first rank takes its own controls, a
            // signal's stop, to the boundary, where they join rank 0's: `agree`)
            decider: if rank == local.start {
                decider.take()
            } else {
                None
            },
            events: l.events.clone(),
            stats: l.stats.clone(),
            t0: l.t0,
            step: start.step,
            started_at: start.step,
            cursor: start.cursor,
            per_replica: start.per_replica,
            first_per_replica: start.per_replica,
            lr_base: start.lr,
            last_checkpoint: start.checkpoint.clone().map(|p| (start.step, p)),
            optimizer_began: optimizer_began.clone(),
            written: Default::default(),
            epoch_sum: start.epoch_sum,
            line_best: start.best_val,
            beats: l.beats.clone(),
            split: split.clone(),
            rebalance_work: Duration::ZERO,
            rebalance_samples: 0,
            rebalance_speeds: None,
            rebalance_since: start.step,
            max_rows: crate::engine::control::MAX_BATCH,
            peers_here: l.world.peers_here.clone(),
            caps: Vec::new(),
            strategy: strategy::Runner::new(
                // (the run's, not the flag's: one rank has no other to average with, and trains,
                // taking controls after every step, as mirrored)
                info.strategy,
                store.clone(),
                start.step,
                l.model.fixed_buffer_ranges(),
            ),
            device_cap: l.device_cap.clone(),
            late: worker::late(
                cfg,
                matches!(info.devices[rank], Device::Gpu { .. }),
                pools_bn,
            ),
            pools_bn,
            queued: None,
            after_step: Duration::ZERO,
        };
        let (model, state) = (l.model.clone(), state.clone());
        let optimizer = optimizer.clone();
        let train = l.train.clone();
        let device = info.devices[rank].clone();
        let precision = info.precision;
        let threads = info.threads_per_worker;
        let pool = match device {
            Device::Cpu { .. } => crate::nn::intraop::for_worker(threads, &format!("worker-{rank}")).map_err(|e| {
                EngineError::Config(format!(
                    "cannot start {threads} intra-op threads for worker {rank}: {e}; try --threads-per-worker 1"
                ))
            })?,
            Device::Gpu { .. } => None,
        };
        let h = std::thread::Builder::new()
            .name(format!("worker-{rank}"))
            .spawn(move || match device {
                Device::Cpu { .. } => {
                    crate::nn::intraop::install(pool);
                    // dropout masks of its own (the seed's, for this rank)
                    let (seed, first_pass) = worker::dropout_stream(&ctx);
                    let replica =
                        CpuReplica::with(model, optimizer, state).seed_dropout(seed, first_pass);
                    worker::run(ctx, Box::new(replica))
                }
                Device::Gpu { index, .. } => {
                    let group = nccl_id.map(|id| crate::backend::cuda::replica::Group {
                        id,
                        rank,
                        world: ranks,
                    });
                    let mut ctx = ctx;
                    // (a panic opening it, in a library's loading say, stops the others too)
                    let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        worker::open_gpu(
                            &mut ctx, index, model, optimizer, precision, state, group, &train,
                        )
                    }));
                    let opened = opened.unwrap_or_else(|p| Err(worker::panicked(&ctx, p)));
                    match opened {
                        Ok(replica) => worker::run(ctx, replica),
                        Err(e) => worker::stop_all(ctx, e),
                    }
                }
            })
            .map_err(|e| EngineError::Config(format!("cannot start worker thread {rank}: {e}")))?;
        workers.push(h);
    }
    Ok(workers)
}
