//! The host memory a run will take, estimated before anything large is allocated: a run too
//! large for the machine is refused with the figures instead of aborting part-way through its
//! start ("memory allocation of N bytes failed").

use super::control::{BatchLimit, MAX_BATCH};
use super::strategy::Strategy;
use super::Device;
use crate::config::RunConfig;
use crate::data::host_memory::{room, Room};
use crate::nn::model::Model;
use crate::nn::optim::OptimizerKind;

/// Rows evaluated at a time, at most (`Model::eval_rows`).
const EVAL_ROWS: u64 = crate::nn::model::EVAL_ROWS as u64;
const GIB: f64 = (1u64 << 30) as f64;

/// Bytes still to be allocated by a run, by what they hold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Estimate {
    /// What one CPU rank holds: parameters, gradients and, but under central storage, the
    /// optimizer moments; the host buffers its strategy exchanges through.
    pub state_per_rank: f64,
    pub ranks: usize,
    /// Held once, or per GPU rank on the host: central storage's host copy of the parameters and
    /// moments; the host buffers of GPU ranks' strategy exchanges.
    pub shared: f64,
    /// The copies a start and a checkpoint make (host side for every rank kind).
    pub copies: f64,
    /// Activations and their gradients, every CPU rank together.
    pub activations: f64,
    /// The convolutions' column scratch, every CPU rank together.
    pub scratch: f64,
    /// Batches queued by the loaders, every rank together.
    pub queues: f64,
    /// GPU ranks' page-locked buffers their batches are uploaded through: a step's
    /// micro-batches and the step's before (`UPLOAD_SLOTS` at most), every GPU together.
    pub staging: f64,
}

impl Estimate {
    pub fn total(&self) -> f64 {
        self.state_per_rank * self.ranks as f64
            + self.shared
            + self.copies
            + self.activations
            + self.scratch
            + self.queues
            + self.staging
    }
}

pub(super) fn estimate(cfg: &RunConfig, devices: &[Device], model: &Model) -> Estimate {
    let f = |x: usize| x as f64;
    let dims = &model.dims;
    let params = f(model.n_params);
    let moments = match cfg.optimizer {
        OptimizerKind::Sgd => 0.0,
        OptimizerKind::Momentum | OptimizerKind::Nesterov => 1.0,
        OptimizerKind::Adam | OptimizerKind::AdamW => 2.0,
    };
    let cpu = devices
        .iter()
        .filter(|d| matches!(d, Device::Cpu { .. }))
        .count();
    let width: f64 = dims.iter().map(|&d| f(d)).sum();
    // activations of the larger of a training batch and an evaluation chunk; their gradients
    // of a training batch
    let rows = f(cfg.batch_per_replica).max(f(model.eval_rows())) + f(cfg.batch_per_replica);
    let micro = f(cfg.batch_per_replica) * (f(dims[0]) + 1.0) * 4.0;
    let batch = micro * f(cfg.grad_accum);
    let in_flight = f(cfg.prefetch.max(1)) + f(cfg.loader_threads.unwrap_or(1));
    let gpus = f(devices.len() - cpu);
    // in parameter-sized buffers: what each rank holds beside its parameters and gradients, a
    // GPU rank's host side, and what is held once
    let (rank_extra, gpu_host, once) = match cfg.strategy {
        Strategy::Mirrored => (moments, 0.0, 0.0),
        // no moments on the devices; each rank's gradients are copied for the host's sum; a GPU
        // rank also stages parameters and gradients in page-locked memory
        Strategy::CentralStorage => (1.0, 3.0, 1.0 + moments),
        // the buffer parameters are averaged through, and with `,moments` the whole state; a
        // GPU rank's parameters also go through page-locked memory, down and up
        Strategy::LocalSgd { moments: both, .. } => {
            let avg = if both { 1.0 + moments } else { 1.0 };
            (moments + avg, avg + 2.0, 0.0)
        }
    };
    Estimate {
        state_per_rank: (2.0 + rank_extra) * params * 4.0,
        ranks: cpu,
        shared: (once + gpu_host * gpus) * params * 4.0,
        // the state every rank starts from, a GPU rank's host copy, and a checkpoint at its
        // peak: the exported state, its tensors' bytes and the serialized file
        copies: (1.0 + moments) * params * 4.0 * (3.0 + gpus),
        activations: rows * width * 4.0 * f(cpu),
        scratch: f(model.conv_scratch_floats()) * 4.0 * f(cpu),
        queues: batch * in_flight * f(devices.len()),
        staging: micro
            * f((2 * cfg.grad_accum).min(crate::backend::cuda::replica::UPLOAD_SLOTS))
            * gpus,
    }
}

/// Refuses a run whose estimate exceeds the memory this process can still allocate (Linux:
/// MemAvailable, its cgroup's limit, its address-space limit: `host_memory::room`).
pub(super) fn check(e: &Estimate, room: Option<Room>) -> Result<(), String> {
    let Some(room) = room else {
        return Ok(());
    };
    // a tenth kept for what the estimate leaves out (the allocator's slack, the process's own)
    let usable = room.bytes as f64 * 0.9;
    if e.total() <= usable {
        return Ok(());
    }
    Err(format!(
        "this run needs about {:.1} GiB of memory (model state {:.2} GiB per CPU rank x {}, host copies of the strategy {:.2} GiB, copies for start and checkpoints {:.2} GiB, activations {:.2} GiB, convolution scratch {:.2} GiB, queued batches {:.2} GiB, GPUs' page-locked staging {:.2} GiB), more than the {:.1} GiB it may take (9/10 of the {:.1} GiB {}): use a smaller --model or --batch-per-replica, fewer --devices, or less --prefetch / --loader-threads / --grad-accum",
        e.total() / GIB,
        e.state_per_rank / GIB,
        e.ranks,
        e.shared / GIB,
        e.copies / GIB,
        e.activations / GIB,
        e.scratch / GIB,
        e.queues / GIB,
        e.staging / GIB,
        usable / GIB,
        room.bytes as f64 / GIB,
        room.what
    ))
}

/// Refuses a run at `per_replica` samples per replica, with `loader_threads` loader threads
/// a rank (each holding a batch in flight), that would not fit (`check`, against the memory
/// available now); else the largest batch a batch-size change may ask for later
/// (`largest_batch`).
pub(super) fn admit(
    cfg: &RunConfig,
    devices: &[Device],
    model: &Model,
    per_replica: usize,
    loader_threads: usize,
) -> Result<Option<BatchLimit>, String> {
    admit_in(cfg, devices, model, per_replica, loader_threads, room())
}

/// `admit` in `room`: a refusal names the batch that would fit, where one does.
fn admit_in(
    cfg: &RunConfig,
    devices: &[Device],
    model: &Model,
    per_replica: usize,
    loader_threads: usize,
    room: Option<Room>,
) -> Result<Option<BatchLimit>, String> {
    let cfg = &RunConfig {
        loader_threads: Some(loader_threads),
        ..cfg.clone()
    };
    let sized = RunConfig {
        batch_per_replica: per_replica,
        ..cfg.clone()
    };
    check(&estimate(&sized, devices, model), room).map_err(|e| {
        let one = RunConfig {
            batch_per_replica: 1,
            ..cfg.clone()
        };
        let bytes = room.map(|r| r.bytes);
        match check(&estimate(&one, devices, model), room) {
            Ok(()) => match largest_batch(cfg, devices, model, 1, bytes) {
                Some(limit) if limit.max < per_replica => format!(
                    "{e}; --batch-per-replica {} fits with the other settings as they are",
                    limit.max
                ),
                _ => e,
            },
            Err(_) => format!("{e}; not even --batch-per-replica 1 fits: the model and the other settings need the memory"),
        }
    })?;
    Ok(largest_batch(
        cfg,
        devices,
        model,
        per_replica,
        room.map(|r| r.bytes),
    ))
}

/// The largest per-replica batch whose estimate fits where `check` lets a run start (90% of
/// `available`), at least `current`: a batch-size change past it is refused with the figures
/// instead of failing an allocation mid-run. None without a figure for the machine.
pub(super) fn largest_batch(
    cfg: &RunConfig,
    devices: &[Device],
    model: &Model,
    current: usize,
    available: Option<u64>,
) -> Option<BatchLimit> {
    let available = available? as f64;
    let at = |b: usize| {
        let sized = RunConfig {
            batch_per_replica: b,
            ..cfg.clone()
        };
        estimate(&sized, devices, model).total()
    };
    // the estimate grows with the batch (activations and queued batches): the largest batch
    // that fits, by bisection
    let limit = available * 0.9;
    let max = if at(MAX_BATCH) <= limit {
        MAX_BATCH
    } else {
        let (mut lo, mut hi) = (current, MAX_BATCH); // at(lo) fits or lo is the run's own
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if at(mid) <= limit {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    };
    // for the refusal's figure: the estimate's line where it is affine (past EVAL_ROWS)
    let (a, b) = (EVAL_ROWS as usize, 2 * EVAL_ROWS as usize);
    let per_sample = (at(b) - at(a)) / a as f64;
    let fixed = at(a) - per_sample * a as f64;
    Some(BatchLimit {
        max,
        available,
        fixed,
        per_sample,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(bytes: u64) -> Option<Room> {
        Some(Room {
            bytes,
            what: "available on this machine",
        })
    }

    #[test]
    fn a_convolution_s_column_scratch_is_counted_and_a_huge_one_refused() {
        let cfg = RunConfig::default();
        let spec: crate::nn::model::ModelSpec = "conv4k200p200".parse().unwrap();
        let model = spec
            .build(crate::nn::shape::Shape::Image { c: 1, h: 8, w: 8 }, 10)
            .unwrap();
        let e = estimate(&cfg, &cpus(1), &model);
        // 16 groups of 4 channels' columns over 209x209 outputs... about 104 GiB
        assert!(e.scratch > 100.0 * GIB, "{e:?}");
        let msg = check(&e, machine(24 << 30)).unwrap_err();
        assert!(msg.contains("convolution scratch"), "{msg}");
        // and the small one of a 3x3 layer is counted, but small
        let spec: crate::nn::model::ModelSpec = "conv8k3p1".parse().unwrap();
        let model = spec
            .build(crate::nn::shape::Shape::Image { c: 1, h: 8, w: 8 }, 10)
            .unwrap();
        let e = estimate(&cfg, &cpus(2), &model);
        assert!(
            e.scratch < 1e6 && check(&e, machine(1 << 30)).is_ok(),
            "{e:?}"
        );
    }

    #[test]
    fn a_refused_batch_is_told_the_batch_that_fits() {
        let cfg = RunConfig::default();
        let model = Model::mlp(784, &[4096, 4096], 10);
        let (room, big) = (machine(4 << 30), 100_000);
        let e = admit_in(&cfg, &cpus(1), &model, big, 1, room).unwrap_err();
        let fits: usize = (e.split("--batch-per-replica ").last())
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{e}"));
        assert!(
            e.ends_with("fits with the other settings as they are"),
            "{e}"
        );
        // the batch named is admitted, and one more is not
        assert!(admit_in(&cfg, &cpus(1), &model, fits, 1, room).is_ok());
        assert!(admit_in(&cfg, &cpus(1), &model, fits + 1, 1, room).is_err());
        // a model too large for any batch says so
        let huge = Model::mlp(784, &[65536, 65536], 10);
        let e = admit_in(&cfg, &cpus(1), &huge, 1, 1, room).unwrap_err();
        assert!(e.ends_with("not even --batch-per-replica 1 fits: the model and the other settings need the memory"), "{e}");
    }

    #[test]
    fn the_refusal_names_what_bounds_the_memory() {
        let e = estimate(
            &RunConfig::default(),
            &cpus(1),
            &Model::mlp(784, &[65536, 65536], 10),
        );
        let limited = Room {
            bytes: 4 << 30,
            what: "left under this process's address-space limit (ulimit -v)",
        };
        let msg = check(&e, Some(limited)).unwrap_err();
        assert!(
            msg.contains("more than the 3.6 GiB it may take (9/10 of the 4.0 GiB left under this process's address-space limit (ulimit -v))"),
            "{msg}"
        );
    }

    fn cpus(n: usize) -> Vec<Device> {
        (0..n).map(|index| Device::Cpu { index }).collect()
    }

    #[test]
    fn the_reference_mlp_fits_and_an_absurd_one_is_refused_with_the_figures() {
        let cfg = RunConfig::default();
        let small = estimate(&cfg, &cpus(2), &Model::mlp(784, &[128], 10));
        // 101,770 parameters: params + grads + Adam's two moments, 4 bytes each
        assert_eq!(small.state_per_rank, 4.0 * 101_770.0 * 4.0);
        assert!(small.total() < 64e6, "{small:?}");
        assert!(check(&small, machine(1 << 30)).is_ok());

        let huge = estimate(&cfg, &cpus(3), &Model::mlp(784, &[65536, 65536, 65536], 10));
        let e = check(&huge, machine(24 << 30)).unwrap_err();
        assert!(
            e.contains("per CPU rank x 3")
                && e.contains("(9/10 of the 24.0 GiB available")
                && e.contains("--model"),
            "{e}"
        );
        // without a figure for the machine, nothing is refused
        assert!(check(&huge, None).is_ok());
    }

    #[test]
    fn central_storage_counts_the_optimizer_state_once_and_local_sgd_its_buffers() {
        let model = Model::mlp(784, &[1024, 1024], 10);
        let p = model.n_params as f64 * 4.0;
        let with = |strategy| RunConfig {
            strategy,
            ..RunConfig::default()
        };
        let mirrored = estimate(&with(Strategy::Mirrored), &cpus(4), &model);
        let central = estimate(&with(Strategy::CentralStorage), &cpus(4), &model);
        // Adam: mirrored holds params, grads and two moments on each of 4 ranks; central storage
        // params, grads and the host's gradient copy per rank, one host copy of params + moments
        assert_eq!(mirrored.state_per_rank * 4.0 + mirrored.shared, 16.0 * p);
        assert_eq!(central.state_per_rank * 4.0 + central.shared, 15.0 * p);
        let gpu = Device::Gpu {
            index: 0,
            name: "test".into(),
            pci_bus_id: None,
            arch: 90,
        };
        let central_gpus = estimate(&with(Strategy::CentralStorage), &[gpu.clone(), gpu], &model);
        // no CPU rank; the host copy, and each GPU's staging and gradient buffers
        assert_eq!((central_gpus.ranks, central_gpus.shared), (0, 9.0 * p));
        let local = |moments| Strategy::LocalSgd {
            every: 8,
            warmup: 100,
            moments,
        };
        let plain = estimate(&with(local(false)), &cpus(2), &model);
        let both = estimate(&with(local(true)), &cpus(2), &model);
        assert_eq!(plain.state_per_rank, 5.0 * p);
        assert_eq!(both.state_per_rank, 7.0 * p);
    }

    #[test]
    fn the_largest_batch_is_where_the_estimate_meets_the_start_limit() {
        let cfg = RunConfig::default();
        let model = Model::mlp(784, &[1024], 10);
        let avail = 4u64 << 30;
        let lim = largest_batch(&cfg, &cpus(2), &model, 32, Some(avail)).unwrap();
        let at = |b: usize| {
            let sized = RunConfig {
                batch_per_replica: b,
                ..RunConfig::default()
            };
            check(&estimate(&sized, &cpus(2), &model), machine(avail))
        };
        assert!(lim.max > 32 && lim.max < MAX_BATCH, "{lim:?}");
        assert!(at(lim.max).is_ok(), "{lim:?}");
        assert!(at(lim.max + 2).is_err(), "{lim:?}");
        // never below the batch the run already trains with; no figure, no limit
        let tight = largest_batch(&cfg, &cpus(2), &model, 1 << 19, Some(1 << 30)).unwrap();
        assert_eq!(tight.max, 1 << 19);
        assert_eq!(largest_batch(&cfg, &cpus(2), &model, 32, None), None);
    }

    #[test]
    fn queued_batches_grow_with_prefetch_and_accumulation() {
        let cfg = RunConfig {
            prefetch: 8,
            grad_accum: 4,
            ..RunConfig::default()
        };
        let e = estimate(&cfg, &cpus(1), &Model::mlp(784, &[], 10));
        // (8 prefetched + 1 being built) batches of 4 micro-batches of 32 samples
        assert_eq!(e.queues, 9.0 * 4.0 * 32.0 * 785.0 * 4.0);
        assert_eq!(e.staging, 0.0);
        // a GPU rank also stages the step's 4 micro-batches and the 4 of the step before in
        // page-locked memory
        let gpu = Device::Gpu {
            index: 0,
            name: "test".into(),
            pci_bus_id: None,
            arch: 90,
        };
        let e = estimate(&cfg, &[gpu], &Model::mlp(784, &[], 10));
        assert_eq!(e.staging, 8.0 * 32.0 * 785.0 * 4.0);
    }
}
