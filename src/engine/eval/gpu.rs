//! `eval --device N`: the model on GPU N in the run's precision (`--precision`, as a run on that
//! GPU would resolve it), a chunk of the set at a time, each chunk's samples made on the host's
//! cores while nothing else waits on them.

use std::time::Duration;

use super::Tally;
use crate::backend::cuda::elem::{bf16, Elem};
use crate::backend::cuda::replica::CudaReplica;
use crate::backend::TrainState;
use crate::config::{DeviceSpec, RunConfig};
use crate::data::Dataset;
use crate::engine::devices::resolve_devices;
use crate::engine::EngineError;
use crate::nn::model::Model;
use crate::nn::precision::Precision;

/// Rows per chunk handed to the GPU (it evaluates them `Model::eval_rows` at a time).
const CHUNK: usize = 1024;

/// The tally of `model` with `state` over `set` on GPU `index`, the device in words
/// (`GPU 0 (NVIDIA H100 80GB HBM3), bf16`), and what the GPU said as it opened (cuDNN failing
/// its check, auto's bf16 not taken, and why).
pub(super) fn run(
    (index, flag): (usize, &str),
    cfg: &RunConfig,
    model: &Model,
    state: &TrainState,
    set: &Dataset,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<(Tally, String, Vec<String>), EngineError> {
    use crate::engine::devices::DeviceError;
    let (devices, _) = resolve_devices(&DeviceSpec::Gpus(vec![index]), None).map_err(|e| {
        let why = match e {
            DeviceError::NoGpu { why, .. } => format!("no GPU was found ({why})"),
            DeviceError::NoSuchGpu { found, visible, .. } => {
                let renumbered = crate::engine::devices::renumbered_by(&visible);
                format!("there is no GPU {index}; found {found}{renumbered}")
            }
            DeviceError::GpuLibrariesMissing { found, missing, .. } => {
                format!("found {found}, but {missing}")
            }
            e => e.to_string(),
        };
        EngineError::Config(format!(
            "{flag} {index}: {why}; or evaluate on the CPU: {flag} cpu"
        ))
    })?;
    let name = match devices.first() {
        Some(crate::engine::devices::Device::Gpu { name, .. }) => name.clone(),
        _ => String::new(),
    };
    let bf16_pays = || crate::engine::precision::bf16_pays(model, &devices);
    // (eval computes in the run's precision and takes no --precision: a refusal of that
    // precision is about this GPU, and the way out is the CPU)
    let refused = |e: EngineError| {
        match e.to_string().contains("--precision") {
        true => EngineError::Config(format!(
            "{flag} {index}: this GPU cannot compute in the run's --precision {} ({e}; eval takes the run's); evaluate on the CPU: {flag} cpu",
            cfg.precision
        )),
        false => e,
    }
    };
    let (precision, note) =
        crate::engine::precision::resolve(cfg.precision, &devices, bf16_pays).map_err(refused)?;
    // (auto's note where it did not take bf16, and why: its others speak of the run's flag)
    let mut notes: Vec<String> = note
        .filter(|_| precision == Precision::Tf32)
        .into_iter()
        .collect();
    let optimizer = crate::engine::validate::optimizer(cfg, model);
    // (the weights uploaded: the caller's state holds no optimizer moments)
    let state = state.clone();
    let open = (index, model.clone(), optimizer, precision, state);
    let tally = match precision {
        Precision::Bf16 => chunks(
            opened::<bf16>(open).map_err(refused)?,
            model,
            set,
            progress,
            &mut notes,
        ),
        Precision::Fp32 | Precision::Tf32 => chunks(
            opened::<f32>(open).map_err(refused)?,
            model,
            set,
            progress,
            &mut notes,
        ),
    };
    Ok((tally, format!("GPU {index} ({name}), {precision}"), notes))
}

type Open = (
    usize,
    Model,
    crate::nn::optim::Optimizer,
    Precision,
    TrainState,
);

/// The replica on its GPU, the checkpoint's state uploaded.
fn opened<E: Elem>(
    (index, model, optimizer, precision, state): Open,
) -> Result<CudaReplica<E>, EngineError> {
    // (one GPU alone: nothing to wait for but itself)
    let timeout = Duration::from_secs(600);
    Ok(CudaReplica::<E>::open(
        index, model, optimizer, precision, state, timeout,
    )?)
}

fn chunks<E: Elem>(
    mut replica: CudaReplica<E>,
    model: &Model,
    set: &Dataset,
    progress: &mut dyn FnMut(usize, usize),
    notes: &mut Vec<String>,
) -> Tally {
    use crate::backend::Replica;
    notes.extend(replica.take_notes());
    let cores = crate::engine::devices::available_cores();
    let (n, mut tally) = (set.len(), Tally::new(model.classes()));
    let (mut x, mut logits) = (Vec::new(), Vec::new());
    for lo in (0..n).step_by(CHUNK) {
        let hi = (lo + CHUNK).min(n);
        set.rows_on(lo, hi, cores, &mut x);
        logits.clear();
        let y = &set.y[lo..hi];
        let own = super::own_samples(set, lo, &x, y);
        let (x, y) = own.as_ref().map_or((&x[..], y), |(x, y)| (&x[..], &y[..]));
        if !y.is_empty() {
            let (loss, _) = replica.evaluate_logits(x, y, y.len(), &mut logits);
            tally.add(&logits, y, loss);
        }
        progress(hi, n);
    }
    tally
}
