//! The model on one GPU: parameters, gradients and optimizer state are flat device buffers laid
//! out as on the CPU (`Model::tensors`), every op is a kernel of `kernels/` or a cuBLAS product,
//! and gradients are summed across GPUs by NCCL in one call (the batch metrics ride in three
//! slots after them, as on the CPU).
//!
//! Activations and their gradients are of element type `E` (`elem::Elem`): f32, or bf16 for
//! `--precision bf16` (autocast as PyTorch's: products on bf16 operands with fp32 accumulation,
//! batch norm's statistics, the loss, master weights, gradients and optimizer state in fp32; the
//! products read a bf16 copy of the weights made after every change to the parameters).
//!
//! Work is queued on the GPU's stream; the host waits once per step for the batch metrics copied
//! out behind the all-reduce: of the step just queued, or, reporting late (the default), of the
//! step before it, so the device always has a step queued. Compute and all-reduce times come
//! from CUDA events on the stream.
//! A CUDA error inside a step has no way back through `Replica`, so it panics with what failed
//! and the engine reports the rank as failed.

mod backprop;
mod evaluate;
mod graphs;
mod host;
mod nodes;
mod open;
mod packed;
mod pass;
mod profile;
pub use host::UPLOAD_SLOTS;
pub use profile::{check_env as check_profile_env, wanted as profiled};
mod resident;
mod update;
mod wait;
mod weights;
pub(crate) mod wire;

use host::to_device;
pub(crate) use update::{launch_update, Buffers, Chunks};

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaSlice};
use cudarc::nccl::Id;

use super::elem::Elem;
use super::launch::{add_metrics, die};
use super::layout::Layout;
use super::nccl::{Communicator, Patience};
use super::{blas, dnn, on, CudaError, Gpu};
use crate::backend::{BatchMetrics, DeviceTimes, Replica, TrainState};
use crate::comm::{Collective, CollectiveError, ReduceTiming};
use crate::data::{Dataset, MicroBatch};
use crate::nn::model::Model;
use crate::nn::optim::{OptState, Optimizer};

/// The most memory the convolutions' scratch takes (more images per chunk: fewer launches).
const COL_SCRATCH_BYTES: usize = 256 << 20;
/// The kernels index with 32-bit integers: no buffer may hold more elements.
const MAX_ELEMENTS: usize = i32::MAX as usize;

/// This rank's place in a multi-GPU group: NCCL is joined with one `Id` made on the main thread.
#[derive(Clone, Copy, Debug)]
pub struct Group {
    pub id: Id,
    pub rank: usize,
    pub world: usize,
}

pub struct CudaReplica<E: Elem = f32> {
    gpu: Gpu,
    /// Always Some until dropped (taken then, so a failed teardown cannot panic).
    blas: Option<cudarc::cublas::CudaBlas>,
    /// Convolutions through cuDNN where it loads and passed its check (`dnn::check`); taken
    /// at drop, as `blas`.
    dnn: Option<dnn::Dnn<E>>,
    /// What the run should be told about this GPU (cuDNN failing its check, the layout).
    notes: Vec<String>,
    /// How the image activations are laid out (`layout`: NCHW, or channels last).
    layout: Layout,
    comm: Option<Communicator>,
    /// How long joining NCCL or an all-reduce may take before the group is aborted (a hung peer).
    timeout: Duration,
    /// Shared with the interpreter while it walks the model over this replica's buffers.
    model: Arc<Model>,
    /// Batch norm's running statistics (`Model::n_buffers` floats; one when there are none),
    /// updated on the device by every training pass.
    running: CudaSlice<f32>,
    /// What the nodes keep besides the activations (saved statistics, masks, scratch).
    nodes: nodes::NodeBufs<E>,
    /// Dropout's masks: this replica's seed, and training passes so far (as the CPU's): one
    /// counter on the device, so that passes replayed from a graph count too.
    dropout_seed: u64,
    passes: CudaSlice<u64>,
    /// Training passes captured as CUDA graphs (`--cuda-graph`).
    graphs: graphs::Graphs,
    optimizer: Optimizer,
    /// The update's work list (`update::Chunks`).
    chunks: update::Chunks,
    t: u64,
    params: CudaSlice<f32>,
    /// What the products read as weights: `params`, or a copy (bf16 runs; channels-last runs' KxK
    /// convolutions in cuDNN's NHWC filter layout).
    weights: weights::Weights<E>,
    /// bf16 and channels-last runs: a convolution's weight gradient before it is added to
    /// `grads` (the largest convolution's weights); one element otherwise.
    wgrad: CudaSlice<E>,
    /// bf16 runs: a batch uploaded in fp32 before its conversion into the input activations.
    input: CudaSlice<f32>,
    /// Channels-last runs: the input batch as it arrives (NCHW), before it is moved into the
    /// input activations; one element otherwise.
    arrived: CudaSlice<E>,
    /// n_params gradient sums, then [loss sum, correct, samples].
    grads: CudaSlice<f32>,
    /// The optimizer's moments, for the trained parameters only (`Optimizer::compact`).
    m: CudaSlice<f32>,
    v: CudaSlice<f32>,
    /// With frozen parameters (`--freeze`): what the all-reduce carries, packed.
    packed: Option<packed::Packed>,
    /// `--grad-dtype bf16`: the sums carried in bf16 through `wire` (made at the first
    /// all-reduce), `wire.rs`.
    grads_bf16: bool,
    wire: Option<CudaSlice<super::elem::bf16>>,
    /// Activations and their gradients per value of the model, for `cap` rows; [0] is the input.
    acts: Vec<CudaSlice<E>>,
    dacts: Vec<CudaSlice<E>>,
    /// Per node: a pooling node's argmax for `cap` rows (a placeholder for other nodes).
    argmax: Vec<CudaSlice<u32>>,
    /// The convolutions' column and weight-gradient scratch, shared by every conv layer.
    col: CudaSlice<f32>,
    labels: CudaSlice<u32>,
    row_loss: CudaSlice<f32>,
    row_correct: CudaSlice<i32>,
    eval_metrics: CudaSlice<f32>,
    /// A step's end as it is read back in one copy: its metric slots, then its trained
    /// gradients' L2 norm (`update::launch_step_end`, which the update clips by).
    ends_dev: CudaSlice<f32>,
    cap: usize,
    /// Recorded before and after the gradient computation of the current step.
    events: Option<(CudaEvent, CudaEvent)>,
    /// The ends of steps queued and not read yet, and what the last one read said (`wait`).
    ends: wait::Ends,
    staging: host::Staging,
    /// The training set, when this GPU holds it (`Replica::hold_data`).
    resident: Option<resident::Resident>,
    /// Device time per op kind, with `MGTOP_GPU_PROFILE=1` (`profile`).
    profile: Option<profile::Profile>,
}

impl<E: Elem> CudaReplica<E> {
    /// Joins the NCCL group (a no-op alone). Every rank must call this concurrently: NCCL's
    /// initialisation waits for all of them, here up to the all-reduce timeout or until `host`
    /// is aborted (a peer that failed before joining). Then connects to the peers at once with a
    /// one-float all-reduce, while every rank is alive: since NCCL 2.22 peers connect lazily
    /// inside the first all-reduce, so a rank that died before it (an out-of-memory upload, say)
    /// would otherwise leave the others waiting there.
    pub fn join(&mut self, group: Option<Group>, host: &dyn Collective) -> Result<(), CudaError> {
        let index = self.gpu.index;
        let Some(g) = group.filter(|g| g.world > 1) else {
            return Ok(());
        };
        let abort = || host.abort_reason();
        let patience = Patience {
            limit: self.timeout,
            abort: &abort,
        };
        let comm = Communicator::join(&self.gpu.stream, g.rank, g.world, &g.id, &patience)
            .map_err(|e| CudaError::new(index, "join the NCCL group", e))?;
        let mut probe = self
            .gpu
            .stream
            .alloc_zeros::<f32>(1)
            .map_err(on(index, "allocate"))?;
        let sent = comm.all_reduce_sum(&mut probe, &patience);
        self.comm = Some(comm);
        sent.map_err(|e| CudaError::new(index, "connect to the other GPUs", e))?;
        let connected = self.record();
        self.wait_for(&connected, None, Some(host))
            .map_err(|e| CudaError::new(index, "connect to the other GPUs", e))?;
        Ok(())
    }

    /// Ends the NCCL group: what a hung or failed peer leaves as the only way out.
    fn abort_group(&mut self) {
        self.comm = None;
    }

    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// How this replica lays out its image activations.
    pub fn activations_layout(&self) -> Layout {
        self.layout
    }

    fn fail(&self, what: &str, e: impl std::fmt::Debug) -> ! {
        die(self.gpu.index, what, e)
    }

    fn record(&self) -> CudaEvent {
        self.gpu
            .stream
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .unwrap_or_else(|e| self.fail("record an event", e))
    }
}

/// Node `n` as the layers' profile names it: `conv3x3 conv1 3x32x32 -> 16x32x32`.
fn layer_label(m: &Model, n: usize) -> String {
    let node = &m.nodes[n];
    format!("{node} {}", m.shapes(node))
}

impl<E: Elem> Drop for CudaReplica<E> {
    fn drop(&mut self) {
        // graphs first, while the kernels' modules, cuBLAS and cuDNN they launch are loaded
        self.graphs.stop();
        self.abort_group();
        if let Some(p) = self.profile.take() {
            let m = &self.model;
            eprint!("{}", p.table(self.gpu.index, |n| layer_label(m, n)));
        }
        if let Some(d) = self.dnn.take() {
            if let Some(c) = d.graph_coverage() {
                eprintln!("gpu{}: cuDNN: {c}", self.gpu.index);
            }
            dnn::close(d);
        }
        if let Some(blas) = self.blas.take() {
            blas::close(blas);
        }
    }
}

impl<E: Elem> Replica for CudaReplica<E> {
    /// With `sync`, batch norm's sums go through the host's collective between launches.
    fn compute_grads(&mut self, micro: &[MicroBatch], mut sync: Option<&mut dyn Collective>) {
        let start = self.record();
        let s = self.gpu.stream.clone();
        if let Err(e) = s.memset_zeros(&mut self.grads) {
            self.fail("zero the gradients", e)
        }
        for mb in micro {
            match self.resident {
                Some(_) if mb.x.is_empty() => self.gather(&mb.rows, mb.n),
                _ => self.upload(&mb.x, &mb.y, mb.n),
            }
            self.train_rows(mb.n, sync.as_deref_mut().map(|s| s as &mut dyn Collective));
        }
        self.events = Some((start, self.record()));
        if let Some(p) = self.profile.as_mut() {
            p.end_step();
        }
    }

    fn all_reduce_grads(
        &mut self,
        host: &mut dyn Collective,
    ) -> Result<ReduceTiming, CollectiveError> {
        let t0 = Instant::now();
        // (taken while the replica's buffers are summed through it)
        if let Some(comm) = self.comm.take() {
            let abort = || host.abort_reason();
            let patience = Patience {
                limit: self.timeout,
                abort: &abort,
            };
            let sent = self.sum_grads(&comm, &patience);
            self.comm = Some(comm);
            if let Err(e) = sent {
                self.abort_group();
                return Err(CollectiveError::Aborted(format!(
                    "GPU {}: NCCL all-reduce failed: {e}",
                    self.gpu.index
                )));
            }
        }
        self.settle(t0, Some(&*host))
    }

    fn batch_metrics(&self) -> BatchMetrics {
        self.ends.end.metrics()
    }

    fn device_times(&self) -> Option<DeviceTimes> {
        self.ends.times
    }

    /// (The update reads the step's sample count on the device.)
    fn report_late(&mut self, on: bool) {
        self.ends.late = on;
    }

    fn catch_up(&mut self, host: &dyn Collective) -> Result<ReduceTiming, CollectiveError> {
        self.read_all_ends(Some(host))
    }

    /// cuDNN failing its check (at open), a training pass that could not be captured.
    fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    fn apply_update(&mut self, lr: f32) {
        let before = self.record();
        let mark = self.profile.as_ref().map(profile::Profile::mark);
        self.update(lr);
        if let Some(p) = self.profile.as_mut() {
            p.count(("optimizer", "update"), None, mark.flatten());
        }
        let after = self.record();
        self.ends.updated(before, after);
    }

    fn evaluate(&mut self, x: &[f32], y: &[u32], n: usize) -> (f64, usize) {
        let d = self.model.dims[0];
        let load = |r: &mut Self, start: usize, b: usize| {
            r.upload(&x[start * d..(start + b) * d], &y[start..start + b], b)
        };
        self.evaluate_chunks(n, load, None)
    }

    fn evaluate_held(&mut self, lo: usize, hi: usize) -> Option<(f64, usize)> {
        self.resident.as_ref()?.has_validation(hi)?;
        let load = |r: &mut Self, start: usize, b: usize| r.load_validation(lo + start, b);
        Some(self.evaluate_chunks(hi - lo, load, None))
    }

    fn export(&self) -> TrainState {
        let s = &self.gpu.stream;
        let get = |buf: &CudaSlice<f32>, len: usize| -> Vec<f32> {
            if len == 0 {
                return Vec::new();
            }
            s.clone_dtoh(&buf.slice(..len))
                .unwrap_or_else(|e| self.fail("download the training state", e))
        };
        let n = self.model.n_params;
        let blank = self
            .optimizer
            .compact(&OptState::new(self.optimizer.kind, n), n);
        let own = OptState {
            t: self.t,
            m: get(&self.m, blank.m.len()),
            v: get(&self.v, blank.v.len()),
        };
        let state = TrainState {
            params: get(&self.params, n),
            opt: self.optimizer.expand(&own, n),
            buffers: self.running_to_host(),
        };
        if let Err(e) = s.synchronize() {
            self.fail("download the training state", e)
        }
        state
    }

    fn import(&mut self, state: &TrainState) {
        let s = self.gpu.stream.clone();
        let put = |src: &[f32], dst: &mut CudaSlice<f32>| {
            if !src.is_empty() {
                s.memcpy_htod(src, &mut dst.slice_mut(..src.len()))
                    .map_err(|e| CudaError::new(self.gpu.index, "upload the training state", e))
            } else {
                Ok(())
            }
        };
        let own = self.optimizer.compact(&state.opt, self.model.n_params);
        let r = put(&state.params, &mut self.params)
            .and_then(|_| put(&own.m, &mut self.m))
            .and_then(|_| put(&own.v, &mut self.v));
        if let Err(e) = r {
            panic!("{e}")
        }
        self.t = state.opt.t;
        self.refresh_weights();
        self.running_from_host(&state.buffers);
    }

    fn finish_local(&mut self, host: &dyn Collective) -> Result<ReduceTiming, CollectiveError> {
        self.settle(Instant::now(), Some(host))
    }
    fn grads_to_host(&mut self, out: &mut Vec<f32>) {
        self.grads_out(out)
    }
    fn params_to_host(&mut self, out: &mut Vec<f32>) {
        self.params_out(out)
    }
    fn params_from_host(&mut self, params: &[f32]) {
        self.params_in(params)
    }
    fn buffers(&self) -> Vec<f32> {
        self.running_to_host()
    }
    fn set_buffers(&mut self, buffers: &[f32]) {
        self.running_from_host(buffers)
    }
    fn hold_data(&mut self, train: &Dataset, val: &Dataset, rows: usize) -> bool {
        self.hold(train, val, rows)
    }
}
