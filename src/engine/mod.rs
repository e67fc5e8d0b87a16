//! The data-parallel engine: one thread per device, each with its own replica, loader and
//! collective handle; frontends get events and steer through a `Controller`.

pub mod calibrate;
pub mod checkpoint;
mod classes;
pub mod control;
mod cpu_time;
mod devices;
pub mod eval;
pub mod events;
mod fingerprint;
pub mod heartbeat;
mod info;
mod job;
mod launch;
pub use job::peer_patience;
pub mod loader;
mod memory;
mod outcome;
pub mod output;
pub(crate) mod places;
mod precision;
mod rebalance;
mod resume;
pub mod rundir;
mod start;
pub mod strategy;
mod validate;
pub mod weights;
mod worker;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded, Receiver};

use crate::comm::{CollectiveError, Processes};
use crate::config::RunConfig;
use crate::data::{self, Dataset};
use crate::engine::control::{Controller, Decider};
use crate::engine::events::{Event, StepStats};
use heartbeat::Heartbeats;
use resume::{resumed_settings, TrainSplit};

pub use cpu_time::thread_cpu_time;
pub use devices::{available_cores, online_cores, resolve_devices, Device, DeviceError};
pub use info::RunInfo;
use job::World;
pub use outcome::{EngineError, RunResult};

pub struct Engine {
    info: RunInfo,
    controller: Controller,
    events: Receiver<Event>,
    steps: Receiver<StepStats>,
    workers: Vec<launch::Handle>,
    t0: Instant,
    beats: Heartbeats,
    /// A run over several processes: the device samples they pass to process 0, and this
    /// process's ranks.
    peers: Option<(Arc<crate::comm::samples::Samples>, std::ops::Range<usize>)>,
    /// This run's hold on its checkpoint directory, and the directory.
    checkpoint_lock: Option<(checkpoint::DirLock, std::path::PathBuf)>,
    /// The run's directory until the front handles signals (`settle_run_dir`).
    kept: Option<rundir::Kept>,
}

/// The data of a run: the splits shared by every worker, and how to describe them.
struct RunData {
    train: Arc<Dataset>,
    val: Arc<Dataset>,
    description: String,
    notes: Vec<String>,
}

/// Lossy step samples queued per rank before the frontend must catch up.
const STEP_QUEUE_PER_RANK: usize = 4096;

/// The run's settings checked on their own, as a start checks them first (no data, no devices).
pub fn check_settings(cfg: &RunConfig) -> Result<(), EngineError> {
    validate::settings(cfg)
}

impl Engine {
    /// Loads the data, builds (or resumes) the model and starts one worker per device.
    pub fn start(cfg: RunConfig) -> Result<Engine, EngineError> {
        Engine::start_in(cfg, None)
    }

    /// `start` as one process of several (`procs`; None: this process alone). Every process
    /// loads its data and opens its devices; process 0 alone reads the checkpoint resumed
    /// from, keeps the run directory and takes the checkpoint lock.
    pub fn start_in(
        cfg: RunConfig,
        procs: Option<Arc<dyn Processes>>,
    ) -> Result<Engine, EngineError> {
        validate::settings(&cfg)?;
        let lead = procs.as_ref().is_none_or(|p| p.index() == 0);
        let place = procs
            .as_ref()
            .map(|p| job::place_on_host(&**p))
            .transpose()?;
        let (mut devices, mut note) = resolve_devices(&cfg.devices, place.map(|p| p.sharers))?;
        if let Some(place) = place {
            let auto = matches!(cfg.devices, crate::config::DeviceSpec::Auto);
            let (mine, idle) = job::share_machine(devices, auto, place.local)?;
            (devices, note) = (mine, devices::join_notes(note, idle));
        }
        let devices = (devices, note);
        // before the data loads (minutes for a large picture set): the checkpoint resumed from,
        // and a --run-dir or --checkpoint-dir of another run refused (a fresh run begins a line
        // of its own), as is one holding its own line past the step resumed from
        let resumed = (cfg.resume.as_ref().filter(|_| lead))
            .map(|p| resume::point(&cfg, p))
            .transpose()?;
        let places = places::check(&cfg, lead, resumed.as_ref())?;
        validate::model_before_data(&cfg)?;
        let mut loaded = data::load(&cfg.data, &cfg.inputs, cfg.seed)?;
        if let (Some(meta), Some(path)) = (&resumed, &cfg.resume) {
            let note = classes::resumable(meta, loaded.train.class_names(), path)?;
            loaded.notes.extend(note);
        }
        let alone = procs.is_none().then_some(devices.0.len());
        let (samples, notes) = (loaded.train.len(), &mut loaded.notes);
        let cfg = validate::batch_within_data(cfg, samples, alone, resumed.as_ref(), notes);
        let cfg = RunConfig {
            recipe: loaded.recipe.clone(),
            ..cfg
        };
        // the batch size the run will train with (a resumed one's may be the checkpoint's)
        let per_replica = match &resumed {
            Some(meta) => {
                let split = TrainSplit::of(&loaded.train);
                resumed_settings(&cfg, meta, devices.0.len(), split).per_replica
            }
            None => cfg.batch_per_replica,
        };
        let model = validate::model(&cfg, &loaded.train)?;
        // this process's GPUs can do what `--precision` asks (the run's precision is settled
        // over every process's devices once they meet)
        precision::resolve(cfg.precision, &devices.0, || {
            precision::bf16_pays(&model, &devices.0)
        })?;
        // as many loader threads as auto picks for this process's ranks, each with a batch
        let threads = loader::threads_for(&cfg, &loaded.train, &devices.0, devices.0.len());
        let batch_limit = memory::admit(&cfg, &devices.0, &model, per_replica, threads)
            .map_err(EngineError::Config)?;
        // from here on the run keeps what it writes, in its directory (named absolute from
        // now); a start that fails below takes back the directory it made
        let created = cfg
            .run_dir
            .as_deref()
            .filter(|_| lead)
            .map(|d| rundir::Created::new(d, cfg.link_latest))
            .transpose()
            .map_err(EngineError::Config)?;
        let run_dir = created.as_ref().map(|c| c.path().to_path_buf());
        let cfg = places.settle(cfg, run_dir, resumed.as_ref());
        // before any worker starts (and before the frontend opens its outputs), so that a bad
        // or busy --checkpoint-dir fails at once; runs that never checkpoint take none
        let lock = places.lock(&cfg, resumed.as_ref())?;
        let data = RunData {
            train: Arc::new(loaded.train),
            val: Arc::new(loaded.val),
            description: loaded.description,
            notes: loaded.notes,
        };
        let link_latest = cfg.link_latest;
        let (samples, accum) = (data.train.len(), cfg.grad_accum);
        let max_batch = batch_limit.map_or(control::MAX_BATCH, |l| l.max);
        let sharers = place.map_or(1, |p| p.sharers);
        let procs = procs.map(|p| (p, max_batch, sharers));
        let mut engine = Engine::start_with(cfg, devices, data, procs)?;
        engine.checkpoint_lock = lock;
        if let Some(limit) = batch_limit {
            engine.controller = engine.controller.limited(limit);
        }
        let ranks = engine.info().devices.len();
        engine.controller = engine.controller.clone().within_data(samples, ranks, accum);
        engine.kept = created.map(|c| c.keep(link_latest));
        Ok(engine)
    }

    /// `start` on data already loaded (`--calibrate` measures on the run's own training split).
    fn start_with(
        cfg: RunConfig,
        (devices, device_note): (Vec<Device>, Option<String>),
        loaded: RunData,
        procs: Option<(Arc<dyn Processes>, usize, usize)>,
    ) -> Result<Engine, EngineError> {
        let model = validate::model(&cfg, &loaded.train)?;
        // (with the largest batch this process's memory allows: every process's bounds the run's)
        let (world, sharers) = match procs {
            Some((p, max, sharers)) => (
                job::meet(
                    p,
                    &cfg,
                    (devices, device_note.clone()),
                    &loaded.train,
                    &loaded.val,
                    max,
                )?,
                sharers,
            ),
            None => (World::single(devices), 1),
        };
        // (processes bound to cores of their own each say their own crowding: `devices`; the
        // others' reach process 0's start-up lines, `RunInfo::others_notes`)
        let crowded =
            (sharers > 1).then(|| job::notes::crowded_host(&world, devices::available_cores()));
        let device_note = devices::join_notes(device_note, crowded.flatten());
        let ranks = world.devices.len();
        let pools_bn = worker::pools_bn(&cfg, &model, ranks);
        validate::graph_flags(&cfg, &world.devices, pools_bn)?;
        let lead = world.process() == 0;
        let split = TrainSplit::of(&loaded.train).validating(&loaded.val);
        // process 0's starting point, on every process
        let classes = loaded.train.class_names();
        let start = start::starting_point(&cfg, &model, ranks, lead, (split, classes))?;
        let start = match &world.procs {
            Some(p) => job::share_start(&**p, lead.then_some(start), model.n_params)?,
            None => start,
        };
        let start = start.within(loaded.train.len(), cfg.budget)?;
        if let (true, Some(f)) = (loaded.train.is_empty(), cfg.inputs.val_fraction) {
            if f >= 0.5 {
                return Err(EngineError::Config(format!(
                    "the training split is empty: --val-split {f} leaves no sample to train on; use a smaller --val-split (e.g. 0.2)"
                )));
            }
        }
        if loaded.train.is_empty() {
            return Err(EngineError::Config(
                "the training split is empty: the dataset is too small for a validation split; train on all of it with --val-split 0, or give the validation set with --val-data"
                    .into(),
            ));
        }
        validate::a_sample_per_rank(loaded.train.len(), ranks)?;
        // (the controller refuses a batch of 1 asked later for the same reason)
        let one_value = validate::one_value_batch_norm(&cfg, &model, ranks);
        let not_one = one_value.as_ref().map(validate::one_value_refusal);
        validate::batch_norm_values(not_one.as_deref(), start.per_replica)?;
        let local = world.local();
        let precision = precision::resolve(cfg.precision, &world.devices, || {
            precision::bf16_pays(&model, &world.devices[local.clone()])
        })?;
        let info = RunInfo::for_run(
            &cfg,
            &model,
            &world,
            &start,
            &loaded,
            device_note,
            precision,
        );
        validate::fault_flags(&cfg, &info.devices)?;

        let mut info = info;
        info.model_notes.extend(validate::few_values(
            &model,
            start.per_replica,
            ranks,
            cfg.sync_bn,
        ));
        // (an epoch's last batch under the run's own batching)
        info.data_notes.extend(validate::one_sample_shares(
            validate::one_value_layer(&model).as_ref(),
            loaded.train.len(),
            &info.sharding(),
            cfg.sync_bn && ranks > 1,
            cfg.budget,
        ));
        if cfg.calibrate && ranks > 1 && lead {
            // at the batch size the run trains with (a resumed run's may be the checkpoint's)
            let trained = RunConfig {
                batch_per_replica: start.per_replica,
                ..cfg.clone()
            };
            let train = &loaded.train;
            // (a step takes --grad-accum batches)
            let step = start.per_replica * cfg.grad_accum;
            let warm = calibrate::warm_steps(train.len(), train.decoded_once(), step);
            let one = calibrate::calibration_config(
                &trained,
                &info.devices[0],
                info.threads_per_worker,
                warm,
            );
            let data = RunData {
                train: loaded.train.clone(),
                val: Arc::new(Dataset {
                    x: Vec::new(),
                    y: Vec::new(),
                    names: loaded.val.names.clone(),
                    pictures: None,
                    ..*loaded.val
                }),
                description: loaded.description.clone(),
                notes: Vec::new(),
            };
            let devices = resolve_devices(&one.devices, None)?;
            let engine = Engine::start_with(one, devices, data, None)?;
            info.baseline = Some(calibrate::measure(engine, warm)?);
        }
        let (ctl_tx, ctl_rx) = unbounded();
        let gpu = |r: &usize| matches!(info.devices[*r], Device::Gpu { .. });
        let local_gpus = local.clone().filter(gpu).count();
        let elsewhere = (0..ranks).any(|r| !local.contains(&r) && gpu(&r));
        let device_cap = control::DeviceCap::new(local_gpus, elsewhere);
        let (ev_tx, ev_rx) = unbounded();
        let (st_tx, st_rx) = bounded(STEP_QUEUE_PER_RANK * ranks);
        let (train, val) = (loaded.train, loaded.val);
        let cfg = Arc::new(cfg);
        if let Some(p) = &world.procs {
            // the run's clock starts together everywhere (process 0 may have calibrated)
            p.barrier().map_err(EngineError::Collective)?;
        }
        let t0 = Instant::now();
        info.started = Some(std::time::SystemTime::now());
        let controller = Controller::new(ctl_tx, device_cap.clone())
            .with_batch(start.per_replica)
            .not_one(not_one)
            .elsewhere(world.others_max_batch);
        let decider = Some(Decider::new(ctl_rx).while_open(controller.open()));
        let beats = Heartbeats::new(ranks);
        let peers = world.procs.as_ref().map(|p| {
            let samples = Arc::new(crate::comm::samples::Samples::new(ranks));
            p.share_samples(samples.clone());
            p.share_positions(Arc::new(beats.clone()), local.clone());
            (samples, local.clone())
        });
        // (process 0 writes the checkpoints: a resumed run's best begins as its line's, brought
        // in once every check has passed, before a worker reads the best it must beat; taken
        // back where the workers do not start)
        let carried = lead.then(|| start::carry_best(&cfg, &start)).flatten();
        let workers = launch::workers(
            launch::Launch {
                cfg: &cfg,
                model: &model,
                info: &info,
                world: &world,
                start: &start,
                train: &train,
                val: &val,
                split,
                beats: &beats,
                device_cap: &device_cap,
                events: &ev_tx,
                stats: &st_tx,
                t0,
            },
            decider,
        )
        .inspect_err(|_| {
            if let Some(Ok((path, _))) = &carried {
                let _ = std::fs::remove_dir_all(path);
            }
        })?;
        let _ = ev_tx.send(Event::Started {
            ranks,
            per_replica: start.per_replica,
            params: model.n_params,
            start_step: start.step,
            start_epoch: start.cursor.epoch,
        });
        if let Some(said) = carried.map(|c| start::carried_event(c, start.step)) {
            let _ = ev_tx.send(said);
        }
        Ok(Engine {
            info,
            controller,
            events: ev_rx,
            steps: st_rx,
            workers,
            t0,
            beats,
            peers,
            checkpoint_lock: None,
            kept: None,
        })
    }

    /// The front handles the process's signals now (a first one stops the run with a
    /// checkpoint): the run's directory is the run's for good, and `latest` points at it (its
    /// note, where it could not, joins the start-up notes). Until then a signal that ends the
    /// process at once takes back what the start made there (`rundir::Kept`).
    pub fn settle_run_dir(&mut self) {
        if let Some(kept) = self.kept.take() {
            self.info.run_dir_note = kept.settle();
        }
    }

    /// Where this run writes its checkpoints (none where it writes none).
    pub fn checkpoint_dir(&self) -> Option<&std::path::Path> {
        self.checkpoint_lock.as_ref().map(|(_, dir)| dir.as_path())
    }

    pub fn info(&self) -> &RunInfo {
        &self.info
    }

    /// Where each rank is within its step (for naming the ranks behind a stall), as the
    /// workers publish it.
    pub fn heartbeats(&self) -> Heartbeats {
        self.beats.clone()
    }

    /// Time since the workers started: the clock of `StepStats::at`.
    pub fn elapsed(&self) -> Duration {
        self.t0.elapsed()
    }

    /// When the workers started: `elapsed`'s origin.
    pub fn started(&self) -> Instant {
        self.t0
    }

    pub fn controller(&self) -> Controller {
        self.controller.clone()
    }

    /// Lifecycle events; never dropped. Disconnects when every worker has ended.
    pub fn events(&self) -> &Receiver<Event> {
        &self.events
    }

    /// Per-rank step samples; dropped when the consumer lags.
    pub fn steps(&self) -> &Receiver<StepStats> {
        &self.steps
    }

    /// A run over several processes: the device samples they pass to process 0 (this process
    /// posts its ranks' there, or hears the others'), and this process's ranks.
    pub fn peer_samples(
        &self,
    ) -> Option<(Arc<crate::comm::samples::Samples>, std::ops::Range<usize>)> {
        self.peers.clone()
    }

    /// Waits for every worker; the first real failure wins over its knock-on effects.
    pub fn join(self) -> Result<RunResult, EngineError> {
        drop(self.controller);
        let mut ends = Vec::new();
        let mut errors = Vec::new();
        for h in self.workers {
            match h.join() {
                Ok(Ok(end)) => ends.push(end),
                Ok(Err(e)) => errors.push(e),
                Err(_) => errors.push(EngineError::Config(
                    "a worker thread ended abnormally".into(),
                )),
            }
        }
        if let Some(e) = errors
            .iter()
            .position(|e| !matches!(e, EngineError::Collective(CollectiveError::Aborted(_))))
        {
            return Err(errors.swap_remove(e));
        }
        if let Some(e) = errors.pop() {
            return Err(e);
        }
        // rank 0, or this process's first rank in a run over several processes
        let first = ends
            .into_iter()
            .min_by_key(|e| e.rank)
            .ok_or_else(|| EngineError::Config("no rank produced a result".into()))?;
        Ok(first.result)
    }

    /// Runs to the end, discarding events: for tests, benchmarks and scripts.
    pub fn run(cfg: RunConfig) -> Result<RunResult, EngineError> {
        let mut engine = Engine::start(cfg)?;
        engine.settle_run_dir();
        engine.join_discarding_events()
    }

    /// Waits for the end, discarding events and step samples.
    fn join_discarding_events(self) -> Result<RunResult, EngineError> {
        let events = self.events.clone();
        let drain = std::thread::spawn(move || events.iter().count());
        // step samples are left unread: once their bounded queue is full, workers drop them
        // without waiting, and nobody has to be woken per step
        let r = self.join();
        let _ = drain.join();
        r
    }
}
