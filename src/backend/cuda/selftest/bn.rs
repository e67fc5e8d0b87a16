//! `selftest`'s checks of batch norm on the GPU (`cuda::bn`, `kernels/bn.cu`) against `nn::bn`:
//! training forward (output, saved statistics, running statistics, count), inference, backward
//! (input, weight and bias gradients, the latter two accumulated), over flat and image-shaped
//! inputs, channels of more values than a block has threads and of several parts, and an empty
//! batch; and sync
//! batch norm over two ranks (two threads on this GPU, each with half the batch), which must
//! equal one replica with the whole batch. Each in NCHW and channels last (`Layout::Nhwc`: the
//! CPU's tensors moved there, the results moved back).

use std::thread;

use cudarc::driver::CudaSlice;

use super::compare::{check, compare, Check};
use super::ops::{down, joined, nans, randn, up};
use crate::backend::cuda::layout::{laid, unlaid, Layout};
use crate::backend::cuda::{bn, ops, CudaError, Gpu};
use crate::comm::{Collective, LocalCollective};
use crate::nn::bn::{
    bn_backward, bn_forward_eval, bn_forward_train, bn_grad_sums, BnGeom, BnSaved, BnStats,
};
use crate::nn::model::{BN_EPS, BN_MOMENTUM};
use crate::nn::ops::Act;
use crate::nn::rng::Rng;

/// One batch norm's inputs and the CPU's results.
struct Case {
    g: BnGeom,
    /// How the GPU's tensors are laid out.
    layout: Layout,
    /// The activation it applies to its output (as the training pass does on the GPU: in the
    /// forward as it writes, and its derivative inside the backward).
    act: Act,
    x: Vec<f32>,
    w: Vec<f32>,
    bias: Vec<f32>,
    running: Vec<f32>,
    dout: Vec<f32>,
    /// accumulated into: dweight, dbias
    dw0: Vec<f32>,
    db0: Vec<f32>,
}

/// The CPU's (out, saved[2C], running after, dx, dweight, dbias, count).
type Want = (
    Vec<f32>,
    Vec<f32>,
    Vec<f32>,
    Vec<f32>,
    Vec<f32>,
    Vec<f32>,
    f32,
);

impl Case {
    fn new(rng: &mut Rng, g: BnGeom, act: Act, layout: Layout) -> Case {
        let (c, all) = (g.c, g.b * g.c * g.hw);
        // a mean away from 0 and unequal scales per channel
        let x = (0..all)
            .map(|i| 2.0 + (1 + (i / g.hw) % c) as f32 * rng.normal())
            .collect();
        let running = (0..2 * c)
            .map(|i| {
                if i < c {
                    rng.normal()
                } else {
                    0.5 + rng.next_f32()
                }
            })
            .collect();
        Case {
            g,
            layout,
            act,
            x,
            w: randn(rng, c),
            bias: randn(rng, c),
            running,
            dout: randn(rng, all),
            dw0: randn(rng, c),
            db0: randn(rng, c),
        }
    }

    fn want(&self) -> Want {
        let (g, c, all) = (self.g, self.g.c, self.g.b * self.g.c * self.g.hw);
        let st = BnStats::of(&self.x, g);
        let (mut out, mut saved, mut running) =
            (vec![0.0; all], vec![0.0; 2 * c], self.running.clone());
        bn_forward_train(
            &mut out,
            &mut saved,
            &mut running,
            &self.x,
            (&self.w, &self.bias),
            g,
            Some(&st),
            self.act,
            (BN_EPS, BN_MOMENTUM),
        );
        let mut dout = self.dout.clone();
        let f = BnSaved {
            x: &self.x,
            out: &out,
            act: self.act,
            saved: &saved,
        };
        let sums = bn_grad_sums(&mut dout, f, g);
        let (mut dx, mut dw, mut db) = (vec![0.0; all], self.dw0.clone(), self.db0.clone());
        let s = (&sums[..], &sums[..], st.n);
        bn_backward(Some(&mut dx), (&mut dw, &mut db), &dout, f, &self.w, g, s);
        (out, saved, running, dx, dw, db, st.n as f32)
    }

    /// Rows `rows` of the batch on `gpu`, training forward and backward (with `sync`): the
    /// same seven results.
    fn run(
        &self,
        gpu: &Gpu,
        rows: std::ops::Range<usize>,
        mut sync: Option<&mut dyn Collective>,
    ) -> Result<Want, CudaError> {
        let (c, hw) = (self.g.c, self.g.hw);
        let per = c * hw;
        let shape = (rows.len(), c, hw);
        let dout = &self.dout[rows.start * per..rows.end * per];
        let dout = up(gpu, &laid(self.layout, dout, shape))?;
        let first = sync.as_deref_mut().map(|s| s as &mut dyn Collective);
        let mut f = self.forward(gpu, rows, first)?;
        let [dx, dw, db] = self.backward(gpu, &mut f, sync, &dout, self.act)?;
        let all = f.g.b * per;
        Ok((
            unlaid(self.layout, &down(gpu, &f.out, all)?, shape),
            down(gpu, &f.saved, 2 * c)?,
            down(gpu, &f.running, 2 * c)?,
            dx,
            dw,
            db,
            f.count,
        ))
    }

    /// Rows `rows` of the batch on `gpu`, training forward (with `sync`): what the backward
    /// after it needs, on the GPU.
    fn forward(
        &self,
        gpu: &Gpu,
        rows: std::ops::Range<usize>,
        sync: Option<&mut dyn Collective>,
    ) -> Result<OnGpu, CudaError> {
        let (c, per) = (self.g.c, self.g.c * self.g.hw);
        let g = BnGeom {
            b: rows.len(),
            ..self.g
        };
        let all = g.b * per;
        let x = &self.x[rows.start * per..rows.end * per];
        let mut f = OnGpu {
            g,
            x: up(gpu, &laid(self.layout, x, (g.b, c, g.hw)))?,
            w: up(gpu, &self.w)?,
            bias: up(gpu, &self.bias)?,
            running: up(gpu, &self.running)?,
            out: nans(gpu, all)?,
            saved: nans(gpu, 2 * c)?,
            scratch: (gpu.stream)
                .alloc_zeros::<f64>(bn::scratch_len(self.layout, c, g.b * g.hw))
                .map_err(crate::backend::cuda::on(gpu.index, "allocate"))?,
            count: 0.0,
        };
        f.count = bn::forward_train(
            gpu,
            sync,
            &mut f.scratch.slice_mut(..),
            &mut f.saved.slice_mut(..),
            &mut f.running.slice_mut(..),
            &mut f.out.slice_mut(..all),
            (&f.x.slice(..all), &f.w.slice(..), &f.bias.slice(..)),
            (g, self.layout),
            self.act,
        )?;
        Ok(f)
    }

    /// The backward after forward `f` from the output's gradient `dout` (its activation's
    /// derivative taken inside as `act` says): dx, dweight, dbias (the latter two accumulated
    /// into the case's dw0, db0).
    fn backward(
        &self,
        gpu: &Gpu,
        f: &mut OnGpu,
        sync: Option<&mut dyn Collective>,
        dout: &CudaSlice<f32>,
        act: Act,
    ) -> Result<[Vec<f32>; 3], CudaError> {
        let (g, c) = (f.g, f.g.c);
        let all = g.b * c * g.hw;
        let (mut dx, mut dw, mut db) = (nans(gpu, all)?, up(gpu, &self.dw0)?, up(gpu, &self.db0)?);
        bn::backward(
            gpu,
            sync,
            &mut f.scratch.slice_mut(..),
            Some(&mut dx.slice_mut(..all)),
            (&mut dw.slice_mut(..), &mut db.slice_mut(..)),
            (&dout.slice(..all), &f.x.slice(..all)),
            (&f.saved.slice(..), &f.w.slice(..), &f.bias.slice(..)),
            (g, self.layout),
            bn::Taken::Over(f.count),
            act,
        )?;
        let dx = unlaid(self.layout, &down(gpu, &dx, all)?, (g.b, c, g.hw));
        Ok([dx, down(gpu, &dw, c)?, down(gpu, &db, c)?])
    }
}

/// A training forward's buffers on the GPU, for the backward after it.
struct OnGpu {
    g: BnGeom,
    x: CudaSlice<f32>,
    w: CudaSlice<f32>,
    bias: CudaSlice<f32>,
    running: CudaSlice<f32>,
    out: CudaSlice<f32>,
    saved: CudaSlice<f32>,
    scratch: CudaSlice<f64>,
    count: f32,
}

fn compared(got: Result<Want, CudaError>, want: &Want) -> Result<(f64, f64), CudaError> {
    let count_ok = |g: &Want| match g.6 == want.6 {
        true => Ok(()),
        false => Err(CudaError::new(
            0,
            "batch norm count",
            format!("{} vs {}", g.6, want.6),
        )),
    };
    joined(got.and_then(|g| {
        count_ok(&g)?;
        Ok(vec![
            (g.0, want.0.clone()),
            (g.1, want.1.clone()),
            (g.2, want.2.clone()),
            (g.3, want.3.clone()),
            (g.4, want.4.clone()),
            (g.5, want.5.clone()),
        ])
    }))
}

pub(super) fn checks(gpu: &Gpu, rng: &mut Rng) -> Vec<Check> {
    let mut out = Vec::new();
    // flat [B, C]; images (with ReLU, ReLU6); a channel of 600 values (more than a block's
    // 256 threads); channels of 8800 values, summed in 3 parts (`grid::parts`); planes of 1 and
    // 42 a value a thread, of 300 and 1100 in 16-byte vectors
    let nchw = [
        (16, 8, 1, Act::None),
        (5, 3, 42, Act::Relu),
        (2, 4, 300, Act::Relu6),
        (8, 3, 1100, Act::Relu),
    ];
    // channels last takes channels in pairs (even counts), or 4 at a time (16-byte vectors of
    // fp32) where C is a multiple of 4. Pairs: 6 channels; 2 channels of 8800 rows (one lane,
    // 256 rows of threads, 5 parts); 130 channels (65 pairs over 3 blocks of 22 lanes, one
    // idle). Vectors: 8 channels flat, and of 17600 rows (2 lanes, 128 rows, 35 parts); 4; 24
    // (6 lanes, 42 rows: 4 threads idle); 64 channels of 200 rows; 1032 channels (258
    // vectors over 9 blocks of 29 lanes, 3 idle)
    let nhwc = [
        (16, 8, 1, Act::None),
        (5, 4, 42, Act::Relu),
        (2, 6, 300, Act::Relu6),
        (8, 2, 1100, Act::Relu),
        (3, 130, 7, Act::Relu),
        (16, 8, 1100, Act::Relu6),
        (2, 24, 300, Act::Relu),
        (4, 64, 50, Act::Relu),
        (2, 1032, 5, Act::None),
    ];
    let cases =
        (nchw.iter().map(|&c| (c, Layout::Nchw))).chain(nhwc.iter().map(|&c| (c, Layout::Nhwc)));
    for ((b, c, hw, act), layout) in cases {
        out.extend(train_and_eval(gpu, rng, (BnGeom { b, c, hw }, act), layout));
    }
    let index = gpu.index;
    // the activation's derivative taken inside the backward, as the training pass does, equals
    // masking the output's gradient first, bit for bit
    for act in [Act::Relu, Act::Relu6] {
        out.push(check(
            format!(
                "gpu{index} batch norm{} backward: mask inside",
                act.suffix()
            ),
            mask_inside(gpu, rng, act),
        ));
    }
    for layout in [Layout::Nchw, Layout::Nhwc] {
        out.extend(sync_checks(gpu, rng, layout));
    }
    out
}

/// The name's suffix of a check in `layout` (none for NCHW).
fn suffix(layout: Layout) -> &'static str {
    match layout {
        Layout::Nchw => "",
        Layout::Nhwc => " nhwc",
    }
}

/// One geometry's training forward and backward, and inference: two lines.
fn train_and_eval(gpu: &Gpu, rng: &mut Rng, (g, act): (BnGeom, Act), layout: Layout) -> Vec<Check> {
    let index = gpu.index;
    let (b, c, hw) = (g.b, g.c, g.hw);
    let case = Case::new(rng, g, act, layout);
    let want = case.want();
    let tail = format!("{b}x{c}x{hw}{}", suffix(layout));
    let name = format!("gpu{index} batch norm{} train fwd+bwd {tail}", act.suffix());
    let mut chk = check(name, compared(case.run(gpu, 0..b, None), &want));
    chk.note = "out, saved, running, dx, dweight, dbias".into();
    // inference from the running statistics
    let all = b * c * hw;
    let mut e = vec![0.0; all];
    bn_forward_eval(
        &mut e,
        &case.running,
        &case.x,
        (&case.w, &case.bias),
        case.g,
        case.act,
        BN_EPS,
    );
    let got = (|| {
        let (x, w, bias, run) = (
            up(gpu, &laid(layout, &case.x, (b, c, hw)))?,
            up(gpu, &case.w)?,
            up(gpu, &case.bias)?,
            up(gpu, &case.running)?,
        );
        let mut o = nans(gpu, all)?;
        let xs = (&x.slice(..), &w.slice(..), &bias.slice(..));
        bn::forward_eval(
            gpu,
            &mut o.slice_mut(..),
            &run.slice(..),
            xs,
            (case.g, layout),
            case.act,
        )?;
        Ok(vec![(
            unlaid(layout, &down(gpu, &o, all)?, (b, c, hw)),
            e.clone(),
        )])
    })();
    let eval = check(
        format!("gpu{index} batch norm{} eval {tail}", act.suffix()),
        joined(got),
    );
    vec![chk, eval]
}

/// Sync batch norm in `layout`: two ranks equal one replica, and an empty share: two lines.
fn sync_checks(gpu: &Gpu, rng: &mut Rng, layout: Layout) -> Vec<Check> {
    let index = gpu.index;
    let mut out = Vec::new();
    // two ranks with 3 and 4 images equal one replica with 7
    let case = Case::new(rng, BnGeom { b: 7, c: 6, hw: 9 }, Act::Relu, layout);
    let want = case.want();
    let name = format!("gpu{index} sync batch norm, 2 ranks vs 1{}", suffix(layout));
    let got = thread::scope(|s| {
        let halves: Vec<_> = LocalCollective::group(2)
            .into_iter()
            .zip([0..3, 3..7])
            .map(|(mut coll, rows)| {
                let case = &case;
                s.spawn(move || {
                    let gpu = Gpu::open(index)?;
                    case.run(&gpu, rows, Some(&mut coll))
                })
            })
            .collect();
        let mut r: Vec<Want> = Vec::new();
        for h in halves {
            r.push(h.join().unwrap_or_else(|_| {
                Err(CudaError::new(index, "sync batch norm", "a rank panicked"))
            })?);
        }
        // the ranks' outputs and input gradients together; the statistics each rank's; the
        // parameter gradients' increments summed (as the gradient all-reduce will)
        let (a, b) = (&r[0], &r[1]);
        let cat = |p: &[f32], q: &[f32]| [p, q].concat();
        let summed = |p: &[f32], q: &[f32], base: &[f32]| -> Vec<f32> {
            p.iter()
                .zip(q)
                .zip(base)
                .map(|((x, y), z)| x + y - z)
                .collect()
        };
        Ok::<Want, CudaError>((
            cat(&a.0, &b.0),
            [a.1.clone(), b.1.clone()].concat(),
            [a.2.clone(), b.2.clone()].concat(),
            cat(&a.3, &b.3),
            summed(&a.4, &b.4, &case.dw0),
            summed(&a.5, &b.5, &case.db0),
            if a.6 == b.6 { a.6 } else { f32::NAN },
        ))
    });
    let twice = (
        want.0.clone(),
        [want.1.clone(), want.1.clone()].concat(),
        [want.2.clone(), want.2.clone()].concat(),
        want.3.clone(),
        want.4.clone(),
        want.5.clone(),
        want.6,
    );
    out.push(check(name, compared(got, &twice)));
    // an empty share under sync: no rows, and still the statistics' exchange (alone: zeros)
    let case = Case::new(rng, BnGeom { b: 0, c: 4, hw: 4 }, Act::None, layout);
    let got = (|| {
        let mut coll = LocalCollective::group(1).pop().expect("one rank");
        let r = case.run(gpu, 0..0, Some(&mut coll))?;
        // with no values the running statistics still move (toward 0 and a 0 variance)
        let moved: Vec<f32> = case
            .running
            .iter()
            .map(|&v| (1.0 - BN_MOMENTUM) * v)
            .collect();
        Ok(vec![(r.2, moved)])
    })();
    out.push(check(
        format!("gpu{index} sync batch norm, empty share{}", suffix(layout)),
        joined(got),
    ));
    out
}

/// Batch norm's backward taking `act`'s derivative itself, from the output it recomputes from
/// x, against `ops::act_backward` on the stored output and then a backward without activation:
/// (0, 0) when dx, dweight and dbias agree bit for bit. The weights are scaled up so that
/// ReLU6 clamps at 6 as well as at 0.
fn mask_inside(gpu: &Gpu, rng: &mut Rng, act: Act) -> Result<(f64, f64), CudaError> {
    let g = BnGeom { b: 4, c: 3, hw: 50 };
    let mut case = Case::new(rng, g, act, Layout::Nchw);
    case.w.iter_mut().for_each(|w| *w *= 4.0);
    let all = g.b * g.c * g.hw;
    let mut f = case.forward(gpu, 0..g.b, None)?;
    let mut runs = Vec::new();
    for inside in [true, false] {
        let mut dout = up(gpu, &case.dout)?;
        if !inside {
            ops::act_backward(gpu, &mut dout.slice_mut(..), &f.out.slice(..), all, act)?;
        }
        let masked = if inside { act } else { Act::None };
        runs.push(case.backward(gpu, &mut f, None, &dout, masked)?);
    }
    Ok((runs[0].iter().zip(&runs[1]))
        .map(|(a, b)| compare(a, b, 0.0, 0.0))
        .fold((0.0f64, 0.0f64), |(x, y), (a, r)| (x.max(a), y.max(r))))
}
