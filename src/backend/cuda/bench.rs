//! `mgtop-train bench --only gpu`: what only GPUs can measure. Per-kernel time (CUDA events
//! around repeated launches), training samples/s per GPU count on the reference workload, and
//! NCCL all-reduce bus bandwidth over message sizes (nccl-tests' definition).

use std::time::Duration;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use cudarc::nccl::Id;

use super::nccl::{Communicator, Patience};

use super::elem::Elem;
use super::layout::Layout;
use super::replica::{launch_update, Buffers, Chunks};
use super::{bn, on, CudaError, Gpu};
use crate::nn::bn::BnGeom;
use crate::nn::ops::Act;
use crate::nn::optim::{Optimizer, OptimizerKind};
use crate::nn::rng::Rng;

const WARM: usize = 5;

/// Milliseconds per call of `f` on `stream`, timed by CUDA events over `iters` calls after a
/// warm-up.
fn time_ms(
    stream: &CudaStream,
    iters: usize,
    mut f: impl FnMut() -> Result<(), CudaError>,
    gpu: usize,
) -> Result<f64, CudaError> {
    for _ in 0..WARM {
        f()?;
    }
    let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let start = stream.record_event(timing).map_err(on(gpu, "event"))?;
    for _ in 0..iters {
        f()?;
    }
    let end = stream.record_event(timing).map_err(on(gpu, "event"))?;
    end.synchronize().map_err(on(gpu, "synchronize"))?;
    let ms = start.elapsed_ms(&end).map_err(on(gpu, "elapsed"))?;
    Ok(ms as f64 / iters as f64)
}

fn random(
    stream: &std::sync::Arc<CudaStream>,
    n: usize,
    gpu: usize,
) -> Result<CudaSlice<f32>, CudaError> {
    let mut r = Rng::new(n as u64);
    let host: Vec<f32> = (0..n).map(|_| r.normal()).collect();
    stream.clone_htod(&host).map_err(on(gpu, "upload"))
}

/// One kernel's (or product's) time, and its throughput in its own unit.
#[derive(Clone, Debug)]
pub struct KernelTime {
    pub name: String,
    pub us: f64,
    /// e.g. "812 GB/s" or "41.2 TFLOP/s"
    pub rate: String,
}

/// Per-op times on GPU `index`, at sizes of a large MLP step (batch 4096, width 1024).
pub fn kernel_times(index: usize) -> Result<Vec<KernelTime>, CudaError> {
    let gpu = Gpu::open(index)?;
    let s = gpu.stream.clone();
    let (rows, width, params) = (4096usize, 1024usize, 16usize << 20);
    let mut act = random(&s, rows * width, index)?;
    let dact = random(&s, rows * width, index)?;
    let bias = random(&s, width, index)?;
    let mut p = random(&s, params, index)?;
    let g = random(&s, params, index)?;
    let mut m = s
        .alloc_zeros::<f32>(params)
        .map_err(on(index, "allocate"))?;
    let mut v = s
        .alloc_zeros::<f32>(params)
        .map_err(on(index, "allocate"))?;
    let w = random(&s, width * width, index)?;
    let mut out = s
        .alloc_zeros::<f32>(rows * width)
        .map_err(on(index, "allocate"))?;
    let blas = cudarc::cublas::CudaBlas::new(s.clone()).map_err(on(index, "cuBLAS handle"))?;
    let (ni, di, nn) = (rows as i32, width as i32, (rows * width) as i32);
    let act_bytes = (rows * width * 4) as f64;
    let gbs = |bytes: f64| move |us: f64| format!("{:.0} GB/s", bytes / us / 1e3);
    let mut times = Vec::new();
    // one timed kernel: its name, launches, how to say its rate from µs, and the launch
    let mut time = |name: String,
                    iters: usize,
                    rate: &dyn Fn(f64) -> String,
                    launch: &mut dyn FnMut() -> Result<(), CudaError>|
     -> Result<(), CudaError> {
        let us = 1e3 * time_ms(&s, iters, launch, index)?;
        times.push(KernelTime {
            name,
            us,
            rate: rate(us),
        });
        Ok(())
    };
    time(
        format!("bias_add {rows}x{width}"),
        50,
        &gbs(2.0 * act_bytes),
        &mut || {
            launch!(
                &gpu,
                "bias_add_f32",
                rows * width,
                &mut act,
                &bias,
                &ni,
                &di
            );
            Ok(())
        },
    )?;
    time(
        format!("relu_forward {rows}x{width}"),
        50,
        &gbs(2.0 * act_bytes),
        &mut || {
            launch!(&gpu, "relu_forward_f32", rows * width, &mut act, &nn);
            Ok(())
        },
    )?;
    let mut d2 = dact.clone();
    time(
        format!("relu_backward {rows}x{width}"),
        50,
        &gbs(3.0 * act_bytes),
        &mut || {
            launch!(&gpu, "relu_backward_f32", rows * width, &mut d2, &act, &nn);
            Ok(())
        },
    )?;
    let mut db = s.alloc_zeros::<f32>(width).map_err(on(index, "allocate"))?;
    time(
        format!("bias_grad {rows}x{width}"),
        50,
        &gbs(act_bytes),
        &mut || {
            launch!(&gpu, "bias_grad_f32", width, &mut db, &dact, &ni, &di);
            Ok(())
        },
    )?;
    let adam = Optimizer::new(OptimizerKind::Adam, 0.0);
    let chunks = Chunks::new(&s, &adam, params).map_err(on(index, "upload the chunks"))?;
    let one = s.clone_htod(&[1.0f32]).map_err(on(index, "upload"))?;
    // Adam reads p, g, m, v and writes p, m, v
    time(
        format!("adam {}M params", params >> 20),
        20,
        &gbs(7.0 * 4.0 * params as f64),
        &mut || {
            let b = Buffers {
                p: p.slice_mut(..),
                g: g.slice(..),
                m: m.slice_mut(..),
                v: v.slice_mut(..),
                samples: one.slice(..),
                norm: one.slice(..),
            };
            launch_update(&gpu, &adam, &chunks, b, 1e-3, 10);
            Ok(())
        },
    )?;
    let flops = 2.0 * (rows * width * width) as f64;
    let tflops = move |us: f64| format!("{:.1} TFLOP/s", flops / us / 1e6);
    time(
        format!("gemm {rows}x{width}x{width}"),
        20,
        &tflops,
        &mut || {
            super::blas::sgemm(
                &blas,
                false,
                false,
                rows,
                width,
                width,
                1.0,
                &act.slice(..),
                &w.slice(..),
                0.0,
                &mut out.slice_mut(..),
            )
            .map_err(|e| CudaError::new(index, "sgemm", e))
        },
    )?;
    for g in BN_SHAPES {
        for layout in [Layout::Nchw, Layout::Nhwc] {
            times.extend(bn_times::<f32>(&gpu, g, layout)?);
            times.extend(bn_times::<half::bf16>(&gpu, g, layout)?);
        }
    }
    Ok(times)
}

/// ResNet-50's batch norms at batch 128: the stem's, a first-stage bottleneck's output and
/// the last stage's (the largest and smallest planes).
const BN_SHAPES: [BnGeom; 3] = [
    BnGeom {
        b: 128,
        c: 64,
        hw: 112 * 112,
    },
    BnGeom {
        b: 128,
        c: 256,
        hw: 56 * 56,
    },
    BnGeom {
        b: 128,
        c: 2048,
        hw: 7 * 7,
    },
];

/// Batch norm + ReLU in training, forward and backward, over `g` in activations of `E`; the
/// rate as the bandwidth of the passes over the activations (forward: one read for the
/// statistics, one read and one write to apply; backward: dout and x read for the sums, then
/// again for dx, dx written), in `layout`.
fn bn_times<E: Elem>(gpu: &Gpu, g: BnGeom, layout: Layout) -> Result<Vec<KernelTime>, CudaError> {
    let (index, s) = (gpu.index, &gpu.stream);
    let all = g.b * g.c * g.hw;
    let mut r = Rng::new(all as u64);
    let host: Vec<E> = (0..all).map(|_| E::from_f32(r.normal())).collect();
    let x = s.clone_htod(&host).map_err(on(index, "upload"))?;
    let dout = s.clone_htod(&host).map_err(on(index, "upload"))?;
    let alloc = |n: usize| s.alloc_zeros::<E>(n).map_err(on(index, "allocate"));
    let (mut out, mut dx) = (alloc(all)?, alloc(all)?);
    let floats = |n: usize| s.alloc_zeros::<f32>(n).map_err(on(index, "allocate"));
    let (mut saved, mut running) = (floats(2 * g.c)?, floats(2 * g.c)?);
    let (weight, bias) = (random(s, g.c, index)?, random(s, g.c, index)?);
    let (mut dw, mut db) = (floats(g.c)?, floats(g.c)?);
    let mut scratch = s
        .alloc_zeros::<f64>(bn::scratch_len(layout, g.c, g.b * g.hw))
        .map_err(on(index, "allocate"))?;
    let (wv, bv) = (weight.slice(..), bias.slice(..));
    let bytes = (all * E::BYTES) as f64;
    let kind = match (E::BF16, layout) {
        (false, Layout::Nchw) => "f32",
        (true, Layout::Nchw) => "bf16",
        (false, Layout::Nhwc) => "f32 nhwc",
        (true, Layout::Nhwc) => "bf16 nhwc",
    };
    let shape = format!("{}x{}x{}", g.b, g.c, g.hw);
    // one direction's time over 20 launches, named, its rate from its passes
    let timed = |way: &str, passes: f64, f: &mut dyn FnMut() -> Result<(), CudaError>| {
        let us = 1e3 * time_ms(s, 20, f, index)?;
        Ok::<_, CudaError>(KernelTime {
            name: format!("bn+relu {way} {kind} {shape}"),
            us,
            rate: format!("{:.0} GB/s", passes * bytes / us / 1e3),
        })
    };
    let mut n = 0.0f32;
    let fwd = timed("fwd", 3.0, &mut || {
        n = bn::forward_train(
            gpu,
            None,
            &mut scratch.slice_mut(..),
            &mut saved.slice_mut(..),
            &mut running.slice_mut(..),
            &mut out.slice_mut(..),
            (&x.slice(..), &wv, &bv),
            (g, layout),
            Act::Relu,
        )?;
        Ok(())
    })?;
    let bwd = timed("bwd", 5.0, &mut || {
        bn::backward(
            gpu,
            None,
            &mut scratch.slice_mut(..),
            Some(&mut dx.slice_mut(..)),
            (&mut dw.slice_mut(..), &mut db.slice_mut(..)),
            (&dout.slice(..), &x.slice(..)),
            (&saved.slice(..), &wv, &bv),
            (g, layout),
            bn::Taken::Over(n),
            Act::Relu,
        )
    })?;
    Ok(vec![fwd, bwd])
}

/// NCCL all-reduce bus bandwidth in GB/s, 2(n-1)/n x bytes / time, over every GPU, per size.
pub fn nccl_busbw(gpus: usize, sizes: &[usize]) -> Result<Vec<(usize, f64)>, CudaError> {
    let id = Id::new().map_err(|e| CudaError::new(0, "create an NCCL id", e))?;
    let sizes = sizes.to_vec();
    let handles: Vec<_> = (0..gpus)
        .map(|rank| {
            let sizes = sizes.clone();
            std::thread::spawn(move || -> Result<Vec<f64>, CudaError> {
                let ctx = CudaContext::new(rank).map_err(on(rank, "open"))?;
                let s = ctx.new_stream().map_err(on(rank, "stream"))?;
                let patience = Patience::only(Duration::from_secs(120));
                let comm = Communicator::join(&s, rank, gpus, &id, &patience)
                    .map_err(|e| CudaError::new(rank, "join NCCL", e))?;
                let mut out = Vec::new();
                for &bytes in &sizes {
                    let mut buf = s
                        .alloc_zeros::<f32>(bytes / 4)
                        .map_err(on(rank, "allocate"))?;
                    let iters = (1usize << 30).div_ceil(bytes).clamp(5, 50);
                    let ms = time_ms(
                        &s,
                        iters,
                        || {
                            comm.all_reduce_sum(&mut buf, &patience)
                                .map_err(|e| CudaError::new(rank, "all-reduce", e))
                        },
                        rank,
                    )?;
                    out.push(ms);
                }
                Ok(out)
            })
        })
        .collect();
    let mut slowest = vec![0.0f64; sizes.len()];
    for (rank, h) in handles.into_iter().enumerate() {
        let ms = h
            .join()
            .map_err(|_| CudaError::new(rank, "all-reduce benchmark", "thread panicked"))??;
        for (s, m) in slowest.iter_mut().zip(ms) {
            *s = s.max(m);
        }
    }
    let factor = 2.0 * (gpus as f64 - 1.0) / gpus as f64;
    Ok(sizes
        .iter()
        .zip(slowest)
        .map(|(&bytes, ms)| (bytes, factor * bytes as f64 / (ms / 1e3) / 1e9))
        .collect())
}
