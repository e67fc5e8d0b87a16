//! `selftest`'s check of a whole graph on the GPU: a small residual network with batch norm,
//! depthwise convolutions, ReLU6 and average pooling (every op but dropout, whose masks are
//! drawn differently on each backend) trained two steps by `CudaReplica` and by `CpuReplica`:
//! the parameters' changes and the running statistics after must agree to fp32's rounding. A
//! bf16 replica (`--precision bf16`) is held to the CPU's emulation of bf16
//! (`nn::model::cpu::bf16_emulation`: the same ops, rounded where the GPU stores bf16), each
//! tensor's change to 3% of the largest change plus 10% of its own, as root mean squares
//! (`worst_tensor`), running statistics to 2%: against fp32 it cannot
//! be, since on this small random batch bf16's rounding alone moves the stem convolution's
//! weights (their gradient, behind batch norm, is what is left when large terms cancel) by up
//! to 5 times that limit, as the emulation shows (seen on an H100: a change of -0.0294 where
//! fp32 gives -0.0153 and the emulation -0.0263).

use std::time::Duration;

use super::compare::{compare, compare_changes_within};
use crate::backend::cuda::elem::Elem;
use crate::backend::cuda::layout::Layout;
use crate::backend::cuda::replica::CudaReplica;
use crate::backend::cuda::{on, CudaError};
use crate::backend::{CpuReplica, Replica, TrainState};
use crate::comm::LocalCollective;
use crate::data::MicroBatch;
use crate::nn::model::cpu::bf16_emulation::sgd_steps;
use crate::nn::model::{Model, TensorInfo};
use crate::nn::optim::{Optimizer, OptimizerKind};
use crate::nn::precision::Precision;
use crate::nn::rng::Rng;
use crate::nn::shape::Shape;

/// The graph the check trains (as `tests/backends.rs` does, smaller).
pub const SPEC: &str =
    "conv4k3p1,bn,basic4,basic6s2,inverted6t2,dwconv3p1,bn,relu6,pool3s2p1,avgpool2,gap";

/// The two micro-batches of each step (rows of the batch), and the learning rate.
const SPLIT: [std::ops::Range<usize>; 2] = [0..2, 2..6];
const LR: f32 = 0.05;

/// Two SGD steps of `SPEC` on 3x10x10 images, two micro-batches each, CPU vs a GPU replica
/// whose activations are of type `E` (computing in `precision`): the largest error and share
/// of its limit, and where the largest share is (a tensor's element, for a failing check's
/// report).
pub fn two_steps<E: Elem>(
    index: usize,
    precision: Precision,
    layout: Layout,
    fixed: bool,
) -> Result<((f64, f64), String), CudaError> {
    let input = Shape::Image { c: 3, h: 10, w: 10 };
    let spec = SPEC
        .parse()
        .map_err(|e| CudaError::new(index, "parse the model", e))?;
    let mut model =
        Model::new(input, &spec, 5).map_err(|e| CudaError::new(index, "build the model", e))?;
    if fixed {
        model.fix_statistics(&model.batch_norms());
    }
    let (b, d) = (6, model.dims[0]);
    let mut rng = Rng::new(13);
    let x: Vec<f32> = (0..b * d).map(|_| rng.normal()).collect();
    let y: Vec<u32> = (0..b as u32).map(|i| i % 5).collect();
    let micro: Vec<MicroBatch> = SPLIT
        .into_iter()
        .map(|r| MicroBatch::of_rows(&x, &y, d, r))
        .collect();
    let kind = OptimizerKind::Sgd;
    let mut state = TrainState::initial(&model, kind, 2);
    if fixed {
        // running statistics of a trained network's kind: means apart from 0, variances from 1
        (state.buffers.iter_mut().enumerate()).for_each(|(i, v)| *v += 0.1 + 0.05 * (i % 7) as f32);
    }
    let (init, init_buffers) = (state.params.clone(), state.buffers.clone());
    let optimizer = Optimizer::new(kind, 0.0);
    let mut cpu = CpuReplica::with(model.clone(), optimizer.clone(), state.clone());
    let mut gpu = CudaReplica::<E>::open_laid_out(
        index,
        model.clone(),
        optimizer,
        precision,
        state,
        Duration::from_secs(60),
        (Some(layout), None),
    )?;
    if gpu.activations_layout() != layout {
        let why = gpu.take_notes().join("; ");
        return Err(CudaError::new(index, "lay out the activations", why));
    }
    let mut coll = LocalCollective::group(1).pop().expect("one rank");
    for _ in 0..2 {
        for r in [&mut cpu as &mut dyn Replica, &mut gpu] {
            r.compute_grads(&micro, None);
            r.all_reduce_grads(&mut coll)
                .map_err(on(index, "all-reduce alone"))?;
            r.apply_update(LR);
        }
    }
    let (mut c, g) = (cpu.export(), gpu.export());
    let (shares, buffers, eval) = match E::BF16 {
        false => ((1e-3, 1e-2), (1e-4, 1e-3), 1e-3),
        true => ((3e-2, 0.1), (1e-3, 2e-2), 2e-2),
    };
    if E::BF16 {
        let start = (&init[..], &init_buffers[..]);
        (c.params, c.buffers) = sgd_steps(&model, start, (&x, &y), &SPLIT, (LR, 2), true);
    }
    if fixed && (g.buffers != init_buffers || c.buffers != init_buffers) {
        let e = "fixed running statistics changed in training".to_string();
        return Err(CudaError::new(index, "keep the running statistics", e));
    }
    let (babs, brel) = compare(&g.buffers, &c.buffers, buffers.0, buffers.1);
    let change = |v: &[f32]| -> Vec<f32> { v.iter().zip(&init).map(|(a, b)| a - b).collect() };
    let (dg, dc) = (change(&g.params), change(&c.params));
    let largest = dc.iter().fold(0.0f64, |m, x| m.max((*x as f64).abs()));
    let limit = (shares.0 * largest.max(1e-12), shares.1);
    // bf16 against its emulation tensor by tensor (RMS), fp32 against the CPU element by element
    let (abs, params) = match E::BF16 {
        true => worst_tensor(&model.tensors, &dg, &dc, limit, "the change of"),
        false => {
            let (abs, _) = compare_changes_within(&init, &g.params, &c.params, shares);
            (
                abs,
                worst_at(&model.tensors, &dg, &dc, limit, "the change of"),
            )
        }
    };
    let running = worst_at(&model.buffers, &g.buffers, &c.buffers, buffers, "running");
    let worst = if params.0 >= running.0 {
        params
    } else {
        running
    };
    let rel = brel.max(worst.0);
    let (ce, ge) = (cpu.evaluate(&x, &y, b), gpu.evaluate(&x, &y, b));
    if (ce.0 - ge.0).abs() > eval * ce.0.abs().max(1.0) {
        return Err(CudaError::new(
            index,
            "evaluate",
            format!("GPU {ge:?}, CPU {ce:?}"),
        ));
    }
    Ok(((abs.max(babs), rel), worst.1))
}

/// The element of `got` furthest past its limit against `want` (as `compare` measures it),
/// named by its tensor in `tensors`: (its share of the limit, "worst: `what` name[i]: GPU x,
/// CPU y").
fn worst_at(
    tensors: &[TensorInfo],
    got: &[f32],
    want: &[f32],
    (tol, eps): (f64, f64),
    what: &str,
) -> (f64, String) {
    let share = |(g, w): (&f32, &f32)| {
        let d = (*g as f64 - *w as f64).abs();
        let d = if d.is_nan() { f64::INFINITY } else { d };
        d / (tol + eps * (*w as f64).abs())
    };
    let Some((i, s)) =
        (got.iter().zip(want).map(share).enumerate()).max_by(|a, b| a.1.total_cmp(&b.1))
    else {
        return (0.0, String::new());
    };
    let name = tensors
        .iter()
        .find(|t| t.range().contains(&i))
        .map_or(format!("element {i}"), |t| {
            format!("{}[{}]", t.name, i - t.offset)
        });
    (
        s,
        format!(
            "worst: {what} {name}: GPU {:.4e}, CPU {:.4e}",
            got[i], want[i]
        ),
    )
}

/// `worst_at`'s limit over each tensor's elements at once, for bf16: the root mean square of
/// got - want against tol + eps * the RMS of want. bf16 rounds each stored value to 8 bits,
/// and where batch norm's backward cancels large terms one rounding that falls the other way
/// moves a single small gradient element by several times its value (seen on an H100: a
/// change of -3.1e-3 where the emulation gives -9.9e-4, the rest of its tensor agreeing), so
/// single elements say little; a wrong op moves whole tensors. Returns the largest RMS
/// difference, and the largest share of a limit with its note ("worst: `what` name: RMS GPU -
/// CPU d, RMS CPU r").
fn worst_tensor(
    tensors: &[TensorInfo],
    got: &[f32],
    want: &[f32],
    (tol, eps): (f64, f64),
    what: &str,
) -> (f64, (f64, String)) {
    let rms = |v: &mut dyn Iterator<Item = f64>, n: usize| {
        (v.map(|x| x * x).sum::<f64>() / n.max(1) as f64).sqrt()
    };
    let mut largest = 0.0f64;
    let mut worst = (0.0f64, String::new());
    for t in tensors {
        let (g, w) = (&got[t.range()], &want[t.range()]);
        let d = rms(
            &mut g.iter().zip(w).map(|(a, b)| *a as f64 - *b as f64),
            t.len,
        );
        let d = if d.is_nan() { f64::INFINITY } else { d };
        let r = rms(&mut w.iter().map(|x| *x as f64), t.len);
        let share = d / (tol + eps * r);
        largest = largest.max(d);
        if share > worst.0 || worst.1.is_empty() {
            let note = format!(
                "worst: {what} {}: RMS GPU - CPU {d:.4e}, RMS CPU {r:.4e}",
                t.name
            );
            worst = (share, note);
        }
    }
    (largest, worst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::model::{Act, Op};

    /// A flat tensor `name` of `len` values at `offset`.
    fn t(name: &str, offset: usize, len: usize) -> TensorInfo {
        TensorInfo {
            name: name.into(),
            shape: vec![len],
            offset,
            len,
        }
    }

    /// A failing check's note names the element furthest past its limit by its tensor, with
    /// both values; a NaN counts as furthest.
    #[test]
    fn the_worst_element_is_named_by_its_tensor() {
        let tensors = [t("conv.0.weight", 0, 3), t("bn.1.bias", 3, 2)];
        let want = [1.0, 2.0, 3.0, 4.0, 5.0];
        let got = [1.0, 2.1, 3.0, 4.0, 4.0];
        let (share, note) = worst_at(&tensors, &got, &want, (0.01, 0.0), "the change of");
        assert!((share - 100.0).abs() < 1e-6, "{share}");
        assert_eq!(
            note,
            "worst: the change of bn.1.bias[1]: GPU 4.0000e0, CPU 5.0000e0"
        );
        let got = [1.0, f32::NAN, 3.0, 4.0, 4.0];
        let (share, note) = worst_at(&tensors, &got, &want, (0.01, 0.0), "the change of");
        assert!(
            share.is_infinite() && note.contains("conv.0.weight[1]"),
            "{note}"
        );
        assert_eq!(
            worst_at(&tensors, &[], &[], (0.01, 0.0), "x"),
            (0.0, String::new())
        );
    }

    /// bf16's check takes each tensor's RMS: one element far off in an otherwise agreeing
    /// tensor passes, a tensor off as a whole fails and is named.
    #[test]
    fn the_bf16_check_weighs_whole_tensors() {
        let tensors = [t("conv.0.weight", 0, 100), t("bn.1.bias", 100, 4)];
        let want: Vec<f32> = (0..104).map(|i| 1.0 + i as f32 / 100.0).collect();
        let mut got = want.clone();
        got[7] += 0.5;
        let (abs, (share, note)) = worst_tensor(&tensors, &got, &want, (0.03, 0.1), "x");
        assert!((abs - 0.05).abs() < 1e-6, "{abs}");
        assert!(
            share < 1.0 && note.contains("conv.0.weight"),
            "{share} {note}"
        );
        for w in &mut got[100..] {
            *w *= 1.5;
        }
        let (_, (share, note)) = worst_tensor(&tensors, &got, &want, (0.03, 0.1), "x");
        assert!(share > 2.0 && note.contains("bn.1.bias"), "{share} {note}");
        got[0] = f32::NAN;
        assert!(worst_tensor(&tensors, &got, &want, (0.03, 0.1), "x")
            .1
             .0
            .is_infinite());
    }

    /// The check covers every op but dropout and its linear output: padded max pooling, both
    /// kinds of convolution with and without a bias, residual adds, ReLU6.
    #[test]
    fn the_checked_graph_has_every_op_but_dropout() {
        let spec = SPEC.parse().unwrap();
        let m = Model::new(Shape::Image { c: 3, h: 10, w: 10 }, &spec, 5).unwrap();
        let has = |f: &dyn Fn(&Op) -> bool| m.nodes.iter().any(|n| f(&n.op));
        assert!(has(&|o| matches!(o, Op::Conv { groups: 1, .. })));
        assert!(has(
            &|o| matches!(o, Op::Conv { groups, .. } if *groups > 1)
        ));
        assert!(has(&|o| matches!(o, Op::BatchNorm { .. })));
        assert!(has(&|o| matches!(o, Op::Add { .. })));
        assert!(has(&|o| matches!(o, Op::MaxPool(w) if w.pad > 0)));
        assert!(has(&|o| matches!(o, Op::AvgPool(_))));
        assert!(has(&|o| matches!(o, Op::GlobalAvgPool { .. })));
        assert!(has(&|o| o.act() == Act::Relu6));
        assert!(has(&|o| o.act() == Act::Relu));
        assert!(
            (0..m.values.len()).any(|v| m.consumers(v) > 1),
            "a value read twice"
        );
    }
}
