//! `mgtop-train selftest` on GPUs: every CUDA path against the CPU reference. Each check gives
//! the largest error, which passes when |gpu - cpu| <= tol + eps*|cpu| for every element.

mod bf16_bn;
mod bf16_ops;
mod bn;
mod compare;
mod conv;
mod dnn;
mod dw;
mod gemm;
mod model;
mod nccl;
mod ops;
pub(super) mod pointwise;

use std::time::Duration;

use super::elem::bf16;
use super::layout::Layout;
use super::replica::CudaReplica;
use super::{on, CudaError, Gpu};
use crate::backend::{CpuReplica, Replica, TrainState};
use crate::comm::LocalCollective;
use crate::data::{Dataset, MicroBatch};
use crate::nn::model::Model;
use crate::nn::optim::{Optimizer, OptimizerKind};
use crate::nn::precision::Precision;
use crate::nn::rng::Rng;
pub use compare::Check;
use compare::{check, compare, compare_changes, noted};
pub use nccl::{nccl_check, nccl_gives_up_checks};

/// `f`'s checks, or one failed check named `name` when a CUDA error inside it panicked (the
/// GPU code reports errors in a step that way).
pub(super) fn guarded(name: &str, f: impl FnOnce() -> Vec<Check>) -> Vec<Check> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let note = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panicked".into());
        vec![Check {
            name: name.to_string(),
            worst: None,
            max_abs: f64::NAN,
            note,
        }]
    })
}

/// Every check for GPU `index`: kernels compile and load, the GEMM helper in all four
/// transpose combinations, the elementwise, convolution, pooling, batch norm and depthwise ops
/// against the CPU ops, two training steps of every optimizer, and two of a residual network
/// with batch norm (fp32, and bf16 where the GPU has bf16 tensor cores), CPU vs GPU.
pub fn gpu_checks(index: usize) -> Vec<Check> {
    let mut out = Vec::new();
    let gpu = match Gpu::open(index) {
        Ok(g) => {
            out.push(Check {
                name: format!("gpu{index} kernels ({})", g.arch),
                worst: Some(0.0),
                max_abs: 0.0,
                note: "compiled and loaded".into(),
            });
            g
        }
        Err(e) => {
            out.push(check(format!("gpu{index} kernels"), Err(e)));
            return out;
        }
    };
    out.extend(gemm::checks(&gpu));
    out.extend(guarded(&format!("gpu{index} kernels vs CPU ops"), || {
        op_checks(&gpu)
    }));
    out.extend(guarded(
        &format!("gpu{index} conv and pool vs CPU ops"),
        || conv::checks(&gpu),
    ));
    out.extend(dnn::checks(&gpu));
    out.extend(guarded(&format!("gpu{index} graph ops vs CPU ops"), || {
        let mut rng = Rng::new(31);
        let mut checks = ops::checks(&gpu);
        checks.extend(bn::checks(&gpu, &mut rng));
        checks.extend(dw::checks(&gpu, &mut rng));
        checks.extend(pointwise::checks(&gpu, &mut rng));
        checks
    }));
    if gpu.has_tf32() {
        out.extend(guarded(&format!("gpu{index} bf16 ops vs fp32"), || {
            bf16_ops::checks(&gpu)
        }));
    }
    // (bf16 tensor cores arrive with TF32's, in Ampere)
    let bf16_cores = gpu.has_tf32();
    drop(gpu);
    for kind in [
        OptimizerKind::Sgd,
        OptimizerKind::Momentum,
        OptimizerKind::Adam,
        OptimizerKind::AdamW,
    ] {
        let name = format!("gpu{index} 2 training steps ({kind}, data held on the GPU)");
        out.extend(guarded(&name, || {
            vec![check(name.clone(), two_steps(index, kind, false))]
        }));
    }
    for kind in [OptimizerKind::Nesterov, OptimizerKind::AdamW] {
        let late = match kind {
            OptimizerKind::AdamW => ", a layer begun late",
            _ => "",
        };
        let name = format!("gpu{index} 2 steps ({kind} 0.8, smoothing, no decay, freeze{late})");
        out.extend(guarded(&name, || {
            vec![check(name.clone(), two_steps(index, kind, true))]
        }));
    }
    // each layout (channels last only where cuDNN loads: its convolutions need it)
    let layouts: &[(Layout, &str)] = match super::dnn::wanted() {
        true => &[(Layout::Nchw, ""), (Layout::Nhwc, ", channels last")],
        false => &[(Layout::Nchw, "")],
    };
    for &(layout, said) in layouts {
        let name = format!("gpu{index} 2 steps of a residual BN network{said}");
        out.extend(guarded(&name, || {
            let run = model::two_steps::<f32>(index, Precision::Fp32, layout, false);
            vec![noted(name.clone(), run)]
        }));
        let name = format!("gpu{index} 2 steps, batch norm on running statistics{said}");
        out.extend(guarded(&name, || {
            let run = model::two_steps::<f32>(index, Precision::Fp32, layout, true);
            vec![noted(name.clone(), run)]
        }));
        if bf16_cores {
            let name = format!("gpu{index} 2 steps of a residual BN network, bf16{said}");
            out.extend(guarded(&name, || {
                let run = model::two_steps::<bf16>(index, Precision::Bf16, layout, false);
                vec![noted(name.clone(), run)]
            }));
        }
    }
    out
}

/// Each elementwise kernel once on random data against the CPU op it mirrors.
fn op_checks(gpu: &Gpu) -> Vec<Check> {
    let index = gpu.index;
    let s = gpu.stream.clone();
    let (rows, width) = (77usize, 133usize);
    let n = rows * width;
    let mut rng = Rng::new(17);
    let x: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
    let dy: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
    let bias: Vec<f32> = (0..width).map(|_| rng.normal()).collect();
    let classes = 10;
    let logits: Vec<f32> = (0..rows * classes).map(|_| 3.0 * rng.normal()).collect();
    let labels: Vec<u32> = (0..rows)
        .map(|_| (rng.next_u64() % classes as u64) as u32)
        .collect();
    let (ni, di, nn) = (rows as i32, width as i32, n as i32);
    let name = |op: &str| format!("gpu{index} {op}");
    let mut out = Vec::new();
    // upload, run, download: one closure per op, all errors become a failed check
    let mut run = |op: &str, want: Vec<f32>, got: Result<Vec<f32>, CudaError>, tol: f64| {
        out.push(check(name(op), got.map(|g| compare(&g, &want, tol, 1e-5))));
    };

    let mut want = x.clone();
    for r in want.chunks_exact_mut(width) {
        r.iter_mut().zip(&bias).for_each(|(v, b)| *v += b);
    }
    let got = (|| {
        let mut y = s.clone_htod(&x).map_err(on(index, "upload"))?;
        let b = s.clone_htod(&bias).map_err(on(index, "upload"))?;
        launch!(gpu, "bias_add_f32", n, &mut y, &b, &ni, &di);
        s.clone_dtoh(&y).map_err(on(index, "download"))
    })();
    run("bias_add_f32", want, got, 1e-6);

    let mut want = bias.clone();
    for r in dy.chunks_exact(width) {
        want.iter_mut().zip(r).for_each(|(w, d)| *w += d);
    }
    let got = (|| {
        let d = s.clone_htod(&dy).map_err(on(index, "upload"))?;
        let mut b = s.clone_htod(&bias).map_err(on(index, "upload"))?;
        launch!(gpu, "bias_grad_f32", width, &mut b, &d, &ni, &di);
        s.clone_dtoh(&b).map_err(on(index, "download"))
    })();
    run("bias_grad_f32", want, got, 1e-4);

    let mut want = x.clone();
    crate::nn::ops::relu_forward(&mut want);
    let got = (|| {
        let mut y = s.clone_htod(&x).map_err(on(index, "upload"))?;
        launch!(gpu, "relu_forward_f32", n, &mut y, &nn);
        s.clone_dtoh(&y).map_err(on(index, "download"))
    })();
    run("relu_forward_f32", want, got, 0.0);

    let mut want = dy.clone();
    crate::nn::ops::relu_backward(&mut want, &x);
    let got = (|| {
        let mut d = s.clone_htod(&dy).map_err(on(index, "upload"))?;
        let o = s.clone_htod(&x).map_err(on(index, "upload"))?;
        launch!(gpu, "relu_backward_f32", n, &mut d, &o, &nn);
        s.clone_dtoh(&d).map_err(on(index, "download"))
    })();
    run("relu_backward_f32", want, got, 0.0);

    let want: Vec<f32> = x.iter().map(|v| v * 0.37).collect();
    let got = (|| {
        let mut y = s.clone_htod(&x).map_err(on(index, "upload"))?;
        let a = 0.37f32;
        launch!(gpu, "scale_f32", n, &mut y, &nn, &a);
        s.clone_dtoh(&y).map_err(on(index, "download"))
    })();
    run("scale_f32", want, got, 1e-6);

    // softmax cross-entropy, plain and with label smoothing: dlogits, then the loss sum and
    // correct count through metrics_f32
    for eps in [0.0f32, 0.1] {
        let mut want_d = vec![0.0; rows * classes];
        let (loss, correct) = crate::nn::ops::softmax_xent_smoothed(
            Some(&mut want_d),
            &logits,
            &labels,
            rows,
            classes,
            eps,
        );
        let got = (|| {
            let l = s.clone_htod(&logits).map_err(on(index, "upload"))?;
            let y = s.clone_htod(&labels).map_err(on(index, "upload"))?;
            let mut row_loss = s.alloc_zeros::<f32>(rows).map_err(on(index, "allocate"))?;
            let mut row_correct = s.alloc_zeros::<i32>(rows).map_err(on(index, "allocate"))?;
            let mut d = s
                .alloc_zeros::<f32>(rows * classes)
                .map_err(on(index, "allocate"))?;
            super::ops::softmax_xent(
                gpu,
                &l.slice(..),
                &y.slice(..),
                (&mut row_loss.slice_mut(..), &mut row_correct.slice_mut(..)),
                &mut d.slice_mut(..),
                (rows, classes),
                eps,
            )?;
            let mut m = s.alloc_zeros::<f32>(3).map_err(on(index, "allocate"))?;
            super::launch::add_metrics(gpu, &mut m.slice_mut(..), &row_loss, &row_correct, rows);
            let mut v = s.clone_dtoh(&d).map_err(on(index, "download"))?;
            v.extend(s.clone_dtoh(&m).map_err(on(index, "download"))?);
            Ok(v)
        })();
        let mut want = want_d;
        want.extend([loss as f32, correct as f32, rows as f32]);
        let op = match eps {
            0.0 => "softmax_xent_f32 + metrics_f32".to_string(),
            _ => format!("softmax_xent_f32 smoothed {eps}"),
        };
        run(&op, want, got, 1e-4);
    }
    out
}

/// Two steps on one batch of 96 samples (two micro-batches), CPU vs GPU: the parameters after.
/// The GPU holds the 96 samples and gets the micro-batches as shuffled row numbers (gathered on
/// the device), the CPU their features; then both evaluate 88 of them, the GPU from its copy.
/// `tuned` adds what real recipes set: momentum 0.8 (Adam ignores it), label smoothing 0.1, no
/// weight decay on biases (`--no-decay-bn-bias`), the first layer frozen (`--freeze`; its
/// parameters must not move, its gradients stay out of the all-reduce, and out of the
/// gradient's norm), and the gradient clipped to a norm it is longer than
/// (`--clip-grad-norm`); and for Adam, at step 1000 of a resumed run, the second layer unfrozen
/// by it (its moments zero, its bias correction counted from step 998: `Optimizer::began`).
/// Each step's gradient norm must be the CPU's too.
fn two_steps(index: usize, kind: OptimizerKind, tuned: bool) -> Result<(f64, f64), CudaError> {
    let mut model = Model::mlp(64, &[128, 32], 10);
    // a weight decay large enough that leaving it out moves the parameters measurably
    let mut optimizer = Optimizer::new(kind, 0.1);
    if tuned {
        model.freeze(&[0, 1]);
        model.label_smoothing = 0.1;
        optimizer = Optimizer {
            momentum: 0.8,
            no_decay: model.no_decay_ranges(),
            frozen: model.frozen_ranges(),
            clip_norm: Some(0.05),
            ..optimizer
        };
    }
    let mut rng = Rng::new(9);
    let data = Dataset {
        features: 64,
        classes: 10,
        image: None,
        x: (0..96 * 64).map(|_| rng.uniform(0.0, 1.0)).collect(),
        y: (0..96).map(|_| (rng.next_u64() % 10) as u32).collect(),
        names: Vec::new(),
        pictures: None,
    };
    let mut order: Vec<u32> = (0..96).collect();
    rng.shuffle(&mut order);
    let micro: Vec<MicroBatch> = [&order[..64], &order[64..]]
        .iter()
        .map(|rows| MicroBatch {
            x: rows
                .iter()
                .flat_map(|&r| data.row(r as usize).to_vec())
                .collect(),
            y: rows.iter().map(|&r| data.y[r as usize]).collect(),
            n: rows.len(),
            rows: rows.to_vec(),
        })
        .collect();
    let rows_only: Vec<MicroBatch> = micro
        .iter()
        .map(|m| MicroBatch {
            x: Vec::new(),
            ..m.clone()
        })
        .collect();
    let mut state = TrainState::initial(&model, kind, 3);
    if tuned && matches!(kind, OptimizerKind::Adam | OptimizerKind::AdamW) {
        // (the first layer's 64x128 + 128 are frozen; the second's 128x32 + 32 follow)
        let second = 64 * 128 + 128..64 * 128 + 128 + 128 * 32 + 32;
        state.opt.t = 1000;
        optimizer.began = vec![(second, 998)];
    }
    let init = state.params.clone();
    let frozen = optimizer.frozen.clone();
    let mut cpu = CpuReplica::with(model.clone(), optimizer.clone(), state.clone());
    let mut gpu = CudaReplica::<f32>::open(
        index,
        model,
        optimizer,
        Precision::Fp32,
        state,
        Duration::from_secs(60),
    )?;
    // the same 96 samples as its validation set too
    if !gpu.hold_data(&data, &data, 64) {
        return Err(CudaError::new(
            index,
            "hold 96 samples",
            "the GPU did not take them",
        ));
    }
    let mut coll = LocalCollective::group(1).pop().expect("one rank");
    for _ in 0..2 {
        let mut norms = Vec::new();
        for (r, batches) in [
            (&mut cpu as &mut dyn Replica, &micro),
            (&mut gpu, &rows_only),
        ] {
            r.compute_grads(batches, None);
            r.all_reduce_grads(&mut coll)
                .map_err(on(index, "all-reduce alone"))?;
            norms.push(r.batch_metrics().grad_norm);
            r.apply_update(1e-2);
        }
        let (want, got) = (norms[0], norms[1]);
        if !((got - want).abs() <= 1e-4 * want.abs() && want > 0.0) {
            return Err(CudaError::new(
                index,
                "the gradient's norm",
                format!("GPU {got}, CPU {want}"),
            ));
        }
    }
    // validation over held rows 8..96, as the CPU evaluates them from their features
    let held = gpu.evaluate_held(8, 96);
    let want = cpu.evaluate(&data.x[8 * 64..], &data.y[8..], 88);
    match held {
        Some((loss, correct))
            if (loss - want.0).abs() <= 1e-4 * want.0.abs() + 1e-4
                && correct.abs_diff(want.1) <= 1 => {}
        other => {
            return Err(CudaError::new(
                index,
                "evaluate held validation rows",
                format!("GPU {other:?}, CPU {want:?}"),
            ))
        }
    }
    let params = gpu.export().params;
    if let Some(r) = (frozen.iter()).find(|r| params[(*r).clone()] != init[(*r).clone()]) {
        return Err(CudaError::new(
            index,
            "keep frozen parameters",
            format!("parameters {r:?} moved on the GPU"),
        ));
    }
    Ok(compare_changes(&init, &params, &cpu.export().params))
}

/// The table `selftest` prints.
pub fn table(checks: &[Check]) -> Vec<String> {
    let mut lines = vec![format!(
        "{:<6} {:<40} {:>12} {:>10}",
        "result", "check", "max |error|", "of limit"
    )];
    for c in checks {
        lines.push(format!(
            "{:<6} {:<40} {:>12} {:>10} {}",
            if c.passed() { "ok" } else { "FAIL" },
            c.name,
            if c.max_abs.is_nan() {
                "-".to_string()
            } else {
                format!("{:.2e}", c.max_abs)
            },
            c.worst
                .map_or("-".to_string(), |w| format!("{:.0}%", w * 100.0)),
            c.note
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_is_judged_by_what_it_changed() {
        let init: Vec<f32> = (0..100).map(|i| 0.1 * (i as f32 / 10.0).sin()).collect();
        let step: Vec<f32> = (0..100).map(|i| 1e-3 * (i as f32).cos()).collect();
        let after = |scale: f32, decay: f32| -> Vec<f32> {
            init.iter()
                .zip(&step)
                .map(|(p, s)| p - scale * s - decay * p)
                .collect()
        };
        let cpu = after(1.0, 1e-4);
        assert!(compare_changes(&init, &cpu, &cpu).1 <= 1.0);
        // no update at all, a 5% LR error, a missing weight decay: each fails
        assert!(compare_changes(&init, &init, &cpu).1 > 1.0);
        assert!(compare_changes(&init, &after(1.05, 1e-4), &cpu).1 > 1.0);
        assert!(compare_changes(&init, &after(1.0, 0.0), &cpu).1 > 1.0);
    }

    #[test]
    fn comparison_scales_the_limit_and_fails_on_nan() {
        let (abs, rel) = compare(&[1.0, 100.5], &[1.0, 100.0], 1e-3, 1e-2);
        assert!((abs - 0.5).abs() < 1e-9);
        assert!((rel - 0.5 / 1.001).abs() < 1e-9);
        let (_, rel) = compare(&[f32::NAN], &[1.0], 1e-3, 1e-3);
        assert!(rel.is_infinite());
        let failing = Check {
            name: "x".into(),
            worst: Some(1.5),
            max_abs: 0.1,
            note: String::new(),
        };
        let unrun = Check {
            worst: None,
            ..failing.clone()
        };
        assert!(!failing.passed() && !unrun.passed());
        let t = table(&[failing]);
        assert!(t[1].starts_with("FAIL") && t[1].contains("150%"), "{t:?}");
    }

    #[test]
    fn a_cuda_error_that_panics_becomes_a_failed_line() {
        let c = guarded("gpu0 x", || {
            panic!("GPU 0: forward: CUDA_ERROR_ILLEGAL_ADDRESS")
        });
        assert_eq!(c.len(), 1);
        assert!(
            !c[0].passed() && c[0].note.contains("ILLEGAL_ADDRESS"),
            "{c:?}"
        );
        let ok = guarded("gpu0 y", || vec![check("y".into(), Ok((0.0, 0.5)))]);
        assert!(ok[0].passed());
    }
}
