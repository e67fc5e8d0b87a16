//! `selftest`'s NCCL checks: an all-reduce over every GPU (one GPU too: a 1-rank communicator
//! is created, used and closed) against the in-process collective, and a join whose peer never
//! comes ending by its time limit and by the host's abort flag.

use std::time::Duration;

use cudarc::driver::CudaContext;
use cudarc::nccl::Id;

use super::compare::{check, compare, Check};
use crate::backend::cuda::elem::bf16;
use crate::backend::cuda::nccl::{Communicator, Patience};
use crate::backend::cuda::{on, CudaError, Gpu};
use crate::backend::AUX;
use crate::comm::{Collective, LocalCollective};
use crate::nn::bf16::{from_bf16, to_bf16};
use crate::nn::precision::GradDtype;
use crate::nn::rng::Rng;

/// NCCL all-reduce over every GPU against the in-process collective's sum: of fp32 gradients,
/// and as `--grad-dtype bf16` carries them (the sums in bf16, a group with the fp32 metrics:
/// against the in-process sum of each rank's sums rounded to bf16, within bf16's rounding of
/// each partial sum; the metric slots exactly as fp32's).
pub fn nccl_check(gpus: usize, wire: GradDtype) -> Check {
    let name = format!("nccl all-reduce over {gpus} GPUs, gradients in {wire}");
    let id = match Id::new() {
        Ok(id) => id,
        Err(e) => return check(name, Err(CudaError::new(0, "create an NCCL id", e))),
    };
    let len = (1 << 20) + AUX;
    let input = |rank: usize| -> Vec<f32> {
        let mut r = Rng::new(100 + rank as u64);
        let mut v: Vec<f32> = (0..len).map(|_| r.normal()).collect();
        // the metric slots: a loss sum, counts (exact in fp32, not in bf16)
        v[len - AUX..].copy_from_slice(&[123.456 + rank as f32, 100.0 + rank as f32, 257.0]);
        v
    };
    let handles: Vec<_> = (0..gpus)
        .map(|rank| {
            let data = input(rank);
            std::thread::spawn(move || -> Result<Vec<f32>, CudaError> {
                let gpu = Gpu::open(rank)?;
                let stream = gpu.stream.clone();
                let patience = Patience::only(NCCL_PATIENCE);
                let comm = Communicator::join(&stream, rank, gpus, &id, &patience)
                    .map_err(|e| CudaError::new(rank, "join the NCCL group", e))?;
                let mut buf = stream.clone_htod(&data).map_err(on(rank, "upload"))?;
                let mut through = match wire {
                    GradDtype::Fp32 => None,
                    GradDtype::Bf16 => Some(
                        (stream.alloc_zeros::<bf16>(len - AUX)).map_err(on(rank, "allocate"))?,
                    ),
                };
                crate::backend::cuda::replica::wire::sum(
                    &gpu,
                    &comm,
                    &mut buf,
                    through.as_mut(),
                    &patience,
                )
                .map_err(|e| CudaError::new(rank, "all-reduce", e))?;
                stream.clone_dtoh(&buf).map_err(on(rank, "download"))
            })
        })
        .collect();
    let mut want: Vec<Vec<f32>> = (0..gpus)
        .map(|rank| {
            let mut v = input(rank);
            if wire == GradDtype::Bf16 {
                let n = v.len() - AUX;
                v[..n].iter_mut().for_each(|x| *x = from_bf16(to_bf16(*x)));
            }
            v
        })
        .collect();
    let colls = LocalCollective::group(gpus);
    std::thread::scope(|s| {
        for (mut c, buf) in colls.into_iter().zip(want.iter_mut()) {
            s.spawn(move || c.all_reduce_sum(buf).map(|_| ()));
        }
    });
    // bf16 sums: each of the gpus - 1 partial sums rounded to 8 bits (of inputs about 1: an
    // absolute part for the partial sums, larger than the result where they cancel); one GPU's
    // is its input rounded, exactly the reference
    let (tol, eps) = match wire {
        GradDtype::Fp32 => (1e-5, 1e-5),
        GradDtype::Bf16 => (gpus as f64 * 2f64.powi(-6), 2f64.powi(-7)),
    };
    let mut worst = (0.0f64, 0.0f64);
    for (rank, h) in handles.into_iter().enumerate() {
        let got = match h.join() {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => return check(name, Err(e)),
            Err(_) => {
                return check(
                    name,
                    Err(CudaError::new(rank, "all-reduce", "thread panicked")),
                )
            }
        };
        // the metric slots summed in fp32 whatever carries the sums
        let n = len - AUX;
        if compare(&got[n..], &want[rank][n..], 1e-5, 1e-6).1 > 1.0 {
            let e = format!(
                "the metric slots {:?}, not {:?}",
                &got[n..],
                &want[rank][n..]
            );
            return check(
                name,
                Err(CudaError::new(rank, "all-reduce the metrics in fp32", e)),
            );
        }
        let (a, r) = compare(&got, &want[rank], tol, eps);
        worst = (worst.0.max(a), worst.1.max(r));
    }
    check(name, Ok(worst))
}

/// How long selftest's NCCL calls may stay in progress (every rank is a thread of this call).
const NCCL_PATIENCE: Duration = Duration::from_secs(120);

/// Joining an NCCL group whose other rank never comes must end, not hang: once by the time
/// limit, once by the host's abort flag (how a peer's failure reaches a rank waiting in NCCL).
/// Needs one GPU. Passes when the join fails within its limit and a little more.
pub fn nccl_gives_up_checks() -> Vec<Check> {
    let limit = Duration::from_secs(2);
    let ways: [(&str, Option<Duration>); 2] = [
        ("nccl join gives up on a missing peer", None),
        ("nccl join ends when the run aborts", Some(limit / 4)),
    ];
    ways.into_iter()
        .map(|(name, abort_after)| {
            let t0 = std::time::Instant::now();
            let abort = || {
                abort_after
                    .filter(|&a| t0.elapsed() >= a)
                    .map(|_| "the run was aborted".to_string())
            };
            let patience = Patience {
                limit,
                abort: &abort,
            };
            let joined = Id::new()
                .map_err(|e| format!("create an NCCL id: {e:?}"))
                .and_then(|id| {
                    let stream = CudaContext::new(0)
                        .and_then(|c| c.new_stream())
                        .map_err(|e| format!("open GPU 0: {e:?}"))?;
                    Communicator::join(&stream, 0, 2, &id, &patience).map(|_| ())
                });
            let took = t0.elapsed();
            let allowed = abort_after.unwrap_or(limit) + Duration::from_secs(3);
            let note = match &joined {
                Ok(()) => "joined a group of 2 alone: NCCL did not wait for the peer".to_string(),
                Err(e) => format!("gave up after {:.1} s: {e}", took.as_secs_f64()),
            };
            let ended =
                joined.is_err() && (abort_after.is_none() || note.contains("the run was aborted"));
            Check {
                name: name.to_string(),
                worst: ended.then(|| took.as_secs_f64() / allowed.as_secs_f64()),
                max_abs: f64::NAN,
                note: note.chars().take(120).collect(),
            }
        })
        .collect()
}
