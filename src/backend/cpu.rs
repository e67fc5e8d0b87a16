//! The CPU backend: a worker thread is the device; the numerical reference for every other.

use super::{BatchMetrics, Replica, StepEnd, TrainState, AUX};
use crate::comm::{Collective, CollectiveError, ReduceTiming};
use crate::data::MicroBatch;
use crate::nn::model::{Model, SumAcross, Workspace};
use crate::nn::optim::{self, OptState, Optimizer, OptimizerKind};

pub struct CpuReplica {
    model: Model,
    optimizer: Optimizer,
    params: Vec<f32>,
    /// n_params gradient sums, then [loss sum, correct, samples].
    grads: Vec<f32>,
    opt: OptState,
    /// Batch norm's running statistics (this replica's; kept in step by the engine).
    buffers: Vec<f32>,
    ws: Workspace,
    /// With frozen parameters (`--freeze`): the ranges of `grads` the all-reduce carries (the
    /// trained parameters' and the batch's metrics), and the buffer they are packed into.
    reduced: Vec<std::ops::Range<usize>>,
    packed: Vec<f32>,
    /// The step end `batch_metrics` reports, and with `report_late` the newer step's, held
    /// back with its exchange's timing until the next step ends (or `catch_up`).
    shown: StepEnd,
    held: Option<(StepEnd, ReduceTiming)>,
    late: bool,
    /// The end of the step whose gradients are held, once it ended (what its update scales
    /// them by; an update without an end works it out from the gradients).
    now: Option<StepEnd>,
}

impl CpuReplica {
    /// Must be called on the thread that will train (it sets that thread's FPU mode).
    pub fn new(
        model: Model,
        kind: OptimizerKind,
        weight_decay: f32,
        state: TrainState,
    ) -> CpuReplica {
        CpuReplica::with(model, Optimizer::new(kind, weight_decay), state)
    }

    /// Dropout masks drawn from `seed` (each replica its own), from training pass `first_pass`
    /// on (the passes of the steps a resumed run continues after).
    pub fn seed_dropout(mut self, seed: u64, first_pass: u64) -> CpuReplica {
        self.ws.seed_dropout(seed, first_pass);
        self
    }

    /// `new` with every coefficient of the optimizer given.
    pub fn with(model: Model, optimizer: Optimizer, state: TrainState) -> CpuReplica {
        flush_denormals_on_this_thread();
        let n = model.n_params;
        assert_eq!(state.params.len(), n);
        assert_eq!(state.buffers.len(), model.n_buffers);
        let reduced = match optimizer.frozen.is_empty() {
            true => Vec::new(),
            false => (optimizer.trained(n).into_iter())
                .chain(std::iter::once(n..n + AUX))
                .collect(),
        };
        CpuReplica {
            model,
            // frozen parameters (`--freeze`) have no moments here
            opt: optimizer.compact(&state.opt, n),
            optimizer,
            params: state.params,
            grads: vec![0.0; n + AUX],
            buffers: state.buffers,
            ws: Workspace::default(),
            reduced,
            packed: Vec::new(),
            shown: StepEnd::default(),
            held: None,
            late: false,
            now: None,
        }
    }
}

/// Sync batch norm's sums through the run's collective. A failed exchange (a lost peer) has no
/// way back through the interpreter: the rank fails with it, as the engine reports.
struct Across<'a, 'c>(&'a mut (dyn Collective + 'c));

impl SumAcross for Across<'_, '_> {
    fn sum(&mut self, v: &mut Vec<f32>) {
        if let Err(e) = self.0.all_reduce_sum(v) {
            panic!("sync batch norm: {e}")
        }
    }
}

/// Optimizer moments of parameters whose gradient is zero (dead ReLUs) decay geometrically into
/// subnormal floats, which x86 cores process ~100x slower: without this, a run slows down
/// several-fold after ~1000 steps. Flush-to-zero / denormals-are-zero is what PyTorch's
/// `set_flush_denormal(True)` and most training stacks do. It is per thread and deterministic.
fn flush_denormals_on_this_thread() {
    #[cfg(target_arch = "x86_64")]
    #[allow(deprecated)]
    // _mm_setcsr is the documented way; it is only deprecated in favour of asm
    // SAFETY: sets the FTZ (bit 15) and DAZ (bit 6) bits of this thread's MXCSR; every x86_64 CPU
    // with SSE2 (all of them) supports both, and no other state is changed.
    unsafe {
        use std::arch::x86_64::{_mm_getcsr, _mm_setcsr};
        _mm_setcsr(_mm_getcsr() | 0x8040);
    }
}

impl CpuReplica {
    /// The end of the step whose gradients are held: its metric slots and sum of squares.
    fn end_of_grads(&self) -> StepEnd {
        let n = self.model.n_params;
        StepEnd {
            slots: self.grads[n..].try_into().expect("AUX metric slots"),
            grad_sumsq: self.optimizer.grad_sumsq(&self.grads[..n]),
        }
    }

    /// The step just ended, its exchange taking `timing`: its metrics are reported now, or
    /// held back for one step (`late`; then the step before's are, with their timing).
    fn ended(&mut self, timing: ReduceTiming) -> ReduceTiming {
        let now = self.end_of_grads();
        self.now = Some(now);
        if !self.late {
            self.shown = now;
            return timing;
        }
        match self.held.replace((now, timing)) {
            Some((before, t)) => {
                self.shown = before;
                t
            }
            None => ReduceTiming::default(),
        }
    }
}

impl Replica for CpuReplica {
    fn compute_grads(&mut self, micro: &[MicroBatch], mut sync: Option<&mut dyn Collective>) {
        self.grads.iter_mut().for_each(|g| *g = 0.0);
        self.now = None;
        let n = self.model.n_params;
        let (mut loss, mut correct, mut samples) = (0.0f64, 0usize, 0usize);
        for mb in micro {
            let mut across = sync.as_deref_mut().map(Across);
            let (l, c) = self.model.forward_backward(
                &self.params,
                &mut self.grads[..n],
                &mut self.buffers,
                &mut self.ws,
                &mb.x,
                &mb.y,
                mb.n,
                across.as_mut().map(|a| a as &mut dyn SumAcross),
            );
            loss += l;
            correct += c;
            samples += mb.n;
        }
        self.grads[n..].copy_from_slice(&[loss as f32, correct as f32, samples as f32]);
    }

    fn all_reduce_grads(
        &mut self,
        coll: &mut dyn Collective,
    ) -> Result<ReduceTiming, CollectiveError> {
        // frozen parameters have no gradients worth summing: every rank leaves out the same
        if self.reduced.is_empty() {
            let t = coll.all_reduce_sum(&mut self.grads)?;
            return Ok(self.ended(t));
        }
        self.packed.clear();
        for r in &self.reduced {
            self.packed.extend_from_slice(&self.grads[r.clone()]);
        }
        let t = coll.all_reduce_sum(&mut self.packed)?;
        let mut at = 0;
        for r in &self.reduced {
            let len = r.len();
            self.grads[r.clone()].copy_from_slice(&self.packed[at..at + len]);
            at += len;
        }
        Ok(self.ended(t))
    }

    fn batch_metrics(&self) -> BatchMetrics {
        self.shown.metrics()
    }

    fn finish_local(&mut self, _host: &dyn Collective) -> Result<ReduceTiming, CollectiveError> {
        Ok(self.ended(ReduceTiming::default()))
    }

    /// (A CPU worker's host is its device: it is late only when asked, holding its metrics back
    /// as a GPU's arrive, which is how the engine's late path is tested without a GPU.)
    fn report_late(&mut self, on: bool) {
        self.late = on;
    }

    fn catch_up(&mut self, _host: &dyn Collective) -> Result<ReduceTiming, CollectiveError> {
        Ok(match self.held.take() {
            Some((last, t)) => {
                self.shown = last;
                t
            }
            None => ReduceTiming::default(),
        })
    }

    fn apply_update(&mut self, lr: f32) {
        // this step's end (the metrics reported may be the step before's)
        let end = self.now.take().unwrap_or_else(|| self.end_of_grads());
        let scale = end.update_scale(&self.optimizer);
        optim::step(
            &self.optimizer,
            &mut self.params,
            &self.grads,
            &mut self.opt,
            lr,
            scale,
        );
    }

    fn evaluate(&mut self, x: &[f32], y: &[u32], n: usize) -> (f64, usize) {
        let d = self.model.dims[0];
        let (mut loss, mut correct) = (0.0, 0);
        let chunk = self.model.eval_rows();
        for start in (0..n).step_by(chunk) {
            let b = chunk.min(n - start);
            let (l, c) = self.model.evaluate(
                &self.params,
                &self.buffers,
                &mut self.ws,
                &x[start * d..(start + b) * d],
                &y[start..start + b],
                b,
            );
            loss += l;
            correct += c;
        }
        (loss, correct)
    }

    fn export(&self) -> TrainState {
        TrainState {
            params: self.params.clone(),
            opt: self.optimizer.expand(&self.opt, self.params.len()),
            buffers: self.buffers.clone(),
        }
    }

    fn import(&mut self, state: &TrainState) {
        self.params.copy_from_slice(&state.params);
        self.opt = self.optimizer.compact(&state.opt, self.params.len());
        self.buffers.copy_from_slice(&state.buffers);
    }

    fn grads_to_host(&mut self, out: &mut Vec<f32>) {
        out.clear();
        out.extend_from_slice(&self.grads);
    }

    fn params_to_host(&mut self, out: &mut Vec<f32>) {
        out.clear();
        out.extend_from_slice(&self.params);
    }

    fn params_from_host(&mut self, params: &[f32]) {
        self.params.copy_from_slice(params);
    }

    fn buffers(&self) -> Vec<f32> {
        self.buffers.clone()
    }

    fn set_buffers(&mut self, buffers: &[f32]) {
        self.buffers.copy_from_slice(buffers);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::LocalCollective;
    use crate::nn::model::cpu::bf16_emulation;
    use crate::nn::shape::Shape;
    use std::time::Duration;

    /// One rank alone, keeping the length of every buffer it is asked to sum.
    struct Recording(Vec<usize>);

    impl Collective for Recording {
        fn rank(&self) -> usize {
            0
        }
        fn world_size(&self) -> usize {
            1
        }
        fn all_reduce_sum(&mut self, buf: &mut Vec<f32>) -> Result<ReduceTiming, CollectiveError> {
            self.0.push(buf.len());
            Ok(ReduceTiming::default())
        }
        fn broadcast_u64(&mut self, _: &mut [u64], _: usize) -> Result<Duration, CollectiveError> {
            Ok(Duration::ZERO)
        }
        fn all_gather_u64(
            &mut self,
            m: &[u64],
            o: &mut [u64],
        ) -> Result<Duration, CollectiveError> {
            o.copy_from_slice(m);
            Ok(Duration::ZERO)
        }
        fn barrier(&mut self) -> Result<Duration, CollectiveError> {
            Ok(Duration::ZERO)
        }
        fn abort(&self, _: &str) {}
        fn abort_reason(&self) -> Option<String> {
            None
        }
    }

    #[test]
    fn frozen_tensors_anywhere_in_the_buffer_stay_out_of_the_all_reduce() {
        let spec = "dense8,dense8,dense3".parse().unwrap();
        let mut model = Model::new(Shape::Flat(4), &spec, 3).unwrap();
        // the middle layer's weight and bias: neither a prefix nor a suffix
        let middle: Vec<usize> = (model.tensors.iter().enumerate())
            .filter(|(_, t)| t.name.starts_with("mlp.1."))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(middle.len(), 2, "{:?}", model.tensors);
        model.freeze(&middle);
        let frozen: usize = model.frozen_ranges().iter().map(|r| r.len()).sum();
        let n = model.n_params;
        let optimizer = Optimizer {
            frozen: model.frozen_ranges(),
            ..Optimizer::new(OptimizerKind::Sgd, 0.0)
        };
        let state = TrainState {
            params: model.init_params(1),
            opt: OptState::new(OptimizerKind::Sgd, n),
            buffers: model.init_buffers(),
        };
        let mut r = CpuReplica::with(model, optimizer, state);
        let mb = MicroBatch {
            x: (0..8).map(|i| i as f32 / 8.0).collect(),
            y: vec![0, 2],
            n: 2,
            rows: vec![0, 1],
        };
        r.compute_grads(std::slice::from_ref(&mb), None);
        let before = r.grads.clone();
        let mut coll = Recording(Vec::new());
        r.all_reduce_grads(&mut coll).unwrap();
        assert_eq!(
            coll.0,
            [n - frozen + AUX],
            "only trained gradients and the metrics"
        );
        // one rank sums to itself: everything is where it was
        assert_eq!(r.grads, before);
        assert_eq!(r.batch_metrics().samples, 2.0);
        // the norm reported is the trained parameters' mean gradient's, frozen ones left out
        let trained: f64 = (r.optimizer.trained(n).into_iter())
            .flat_map(|t| before[t].to_vec())
            .map(|g| f64::from(g / 2.0).powi(2))
            .sum();
        let got = f64::from(r.batch_metrics().grad_norm);
        assert!((got - trained.sqrt()).abs() < 1e-5 * got, "{got}");
        let all: f64 = before[..n].iter().map(|g| f64::from(g / 2.0).powi(2)).sum();
        assert!(
            all.sqrt() > got * 1.01,
            "the frozen layer has gradients of its own"
        );
    }

    #[test]
    fn a_late_report_carries_its_own_steps_norm_and_the_update_clips_by_the_newest() {
        let model = Model::mlp(4, &[8], 3);
        let n = model.n_params;
        let state = TrainState::initial(&model, OptimizerKind::Sgd, 1);
        let batch = |k: f32| MicroBatch {
            x: (0..8).map(|i| k * i as f32 / 8.0).collect(),
            y: vec![0, 2],
            n: 2,
            rows: vec![0, 1],
        };
        let clip = |c| Optimizer {
            clip_norm: c,
            ..Optimizer::new(OptimizerKind::Sgd, 0.0)
        };
        let mut coll = Recording(Vec::new());
        // the norms of two steps, reported at once
        let mut now = CpuReplica::with(model.clone(), clip(None), state.clone());
        let mut norms = Vec::new();
        for k in [1.0, 3.0] {
            now.compute_grads(&[batch(k)], None);
            now.all_reduce_grads(&mut coll).unwrap();
            norms.push(now.batch_metrics().grad_norm);
            now.apply_update(0.5);
        }
        assert!(norms[0] > 0.0 && norms[0] != norms[1], "{norms:?}");
        // reported late, under a bound below both: each report is its own step's (before
        // clipping), and each update moved the parameters by lr x the bound exactly
        let mut late = CpuReplica::with(model, clip(Some(1e-3)), state.clone());
        late.report_late(true);
        let mut reported = Vec::new();
        let mut before = state.params.clone();
        for k in [1.0, 3.0] {
            late.compute_grads(&[batch(k)], None);
            late.all_reduce_grads(&mut coll).unwrap();
            reported.push(late.batch_metrics().grad_norm);
            late.apply_update(0.5);
            let moved: f32 = (late.params.iter().zip(&before))
                .map(|(a, b)| (a - b) * (a - b))
                .sum::<f32>()
                .sqrt();
            assert!((moved - 0.5e-3).abs() < 1e-6, "{moved}");
            before = late.params.clone();
        }
        late.catch_up(&coll).unwrap();
        reported.push(late.batch_metrics().grad_norm);
        assert_eq!(reported[0], 0.0, "the first late report is of no step");
        assert_eq!(reported[1], norms[0]);
        assert!(reported[2] > 0.0);
        assert_eq!(late.params.len(), n);
    }

    /// The bf16 emulation's harness without rounding steps as the CPU replica does, bit for
    /// bit: it is the one the CPU trains with.
    #[test]
    fn the_bf16_emulation_unrounded_steps_as_the_cpu_replica_does() {
        let (m, x, y) = bf16_emulation::tests::setup();
        let state = TrainState::initial(&m, OptimizerKind::Sgd, 3);
        let split = [0..2, 2..5];
        let d = m.dims[0];
        let micro: Vec<MicroBatch> = (split.iter())
            .map(|r| MicroBatch::of_rows(&x, &y, d, r.clone()))
            .collect();
        let opt = Optimizer::new(OptimizerKind::Sgd, 0.0);
        let mut cpu = CpuReplica::with(m.clone(), opt, state.clone());
        let mut coll = LocalCollective::group(1).pop().unwrap();
        for _ in 0..2 {
            cpu.compute_grads(&micro, None);
            cpu.all_reduce_grads(&mut coll).unwrap();
            cpu.apply_update(0.05);
        }
        let want = cpu.export();
        let start = (&state.params[..], &state.buffers[..]);
        let (p, b) = bf16_emulation::sgd_steps(&m, start, (&x, &y), &split, (0.05, 2), false);
        assert_eq!(p, want.params);
        assert_eq!(b, want.buffers);
    }
}
