//! `selftest`'s check of a whole graph on the GPU: a small residual network with batch norm,
//! depthwise convolutions, ReLU6 and average pooling (every op but dropout, whose masks are
//! drawn differently on each backend) trained two steps by `CudaReplica` and by `CpuReplica`:
//! the parameters' changes and the running statistics after must agree to fp32's rounding. A
//! bf16 replica (`--precision bf16`) is held to the CPU's emulation of bf16
//! (`nn::model::cpu::bf16_emulation`: the same ops, rounded where the GPU stores bf16), to 3%
//! of the largest change plus 10% of each, running statistics to 2%: against fp32 it cannot
//! be, since on this small random batch bf16's rounding alone moves the stem convolution's
//! weights (their gradient, behind batch norm, is what is left when large terms cancel) by up
//! to 5 times that limit, as the emulation shows (seen on an H100: a change of -0.0294 where
//! fp32 gives -0.0153 and the emulation -0.0263).

use std::time::Duration;

use super::elem::Elem;
use super::replica::CudaReplica;
use super::selftest_compare::{compare, compare_changes_within};
use super::{on, CudaError};
use crate::backend::{CpuReplica, Replica, TrainState};
use crate::comm::LocalCollective;
use crate::data::MicroBatch;
use crate::nn::layers::Shape;
use crate::nn::model::cpu::bf16_emulation::sgd_steps;
use crate::nn::model::{Model, TensorInfo};
use crate::nn::optim::{Optimizer, OptimizerKind};
use crate::nn::precision::Precision;
use crate::nn::rng::Rng;

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
) -> Result<((f64, f64), String), CudaError> {
    let input = Shape::Image { c: 3, h: 10, w: 10 };
    let spec = SPEC
        .parse()
        .map_err(|e| CudaError::new(index, "parse the model", e))?;
    let model =
        Model::new(input, &spec, 5).map_err(|e| CudaError::new(index, "build the model", e))?;
    let (b, d) = (6, model.dims[0]);
    let mut rng = Rng::new(13);
    let x: Vec<f32> = (0..b * d).map(|_| rng.normal()).collect();
    let y: Vec<u32> = (0..b as u32).map(|i| i % 5).collect();
    let micro: Vec<MicroBatch> = SPLIT
        .into_iter()
        .map(|r| MicroBatch::of_rows(&x, &y, d, r))
        .collect();
    let kind = OptimizerKind::Sgd;
    let state = TrainState::initial(&model, kind, 2);
    let (init, init_buffers) = (state.params.clone(), state.buffers.clone());
    let optimizer = Optimizer::new(kind, 0.0);
    let mut cpu = CpuReplica::with(model.clone(), optimizer.clone(), state.clone());
    let mut gpu = CudaReplica::<E>::open(
        index,
        model.clone(),
        optimizer,
        precision,
        state,
        Duration::from_secs(60),
    )?;
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
    let (abs, rel) = compare_changes_within(&init, &g.params, &c.params, shares);
    let (babs, brel) = compare(&g.buffers, &c.buffers, buffers.0, buffers.1);
    let change = |v: &[f32]| -> Vec<f32> { v.iter().zip(&init).map(|(a, b)| a - b).collect() };
    let (dg, dc) = (change(&g.params), change(&c.params));
    let largest = dc.iter().fold(0.0f64, |m, x| m.max((*x as f64).abs()));
    let tol = shares.0 * largest.max(1e-12);
    let worst = [
        worst_at(&model.tensors, &dg, &dc, (tol, shares.1), "the change of"),
        worst_at(&model.buffers, &g.buffers, &c.buffers, buffers, "running"),
    ]
    .into_iter()
    .max_by(|a, b| a.0.total_cmp(&b.0))
    .map(|w| w.1)
    .unwrap_or_default();
    let (ce, ge) = (cpu.evaluate(&x, &y, b), gpu.evaluate(&x, &y, b));
    if (ce.0 - ge.0).abs() > eval * ce.0.abs().max(1.0) {
        return Err(CudaError::new(
            index,
            "evaluate",
            format!("GPU {ge:?}, CPU {ce:?}"),
        ));
    }
    Ok(((abs.max(babs), rel.max(brel)), worst))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::model::{Act, Op};

    /// A failing check's note names the element furthest past its limit by its tensor, with
    /// both values; a NaN counts as furthest.
    #[test]
    fn the_worst_element_is_named_by_its_tensor() {
        let t = |name: &str, offset, len| TensorInfo {
            name: name.into(),
            shape: vec![len],
            offset,
            len,
        };
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
