//! What the graph's nodes keep on the device besides the activations (as the CPU's
//! `Workspace`): batch norm's saved statistics and dropout's masks per node, the scratch an
//! added gradient (a residual's input reached twice) is computed into, the zero bias and the
//! bias-gradient sink of bias-less convolutions, batch norm's per-channel sums, the depthwise
//! weight gradient's parts. And the
//! replica's growing of every row-sized buffer (`ensure`, `max_rows`), dropout's seed, and
//! batch norm's running statistics, which stay on the device between steps (moved to and from
//! the host for export, import and the engine's averaging).

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DriverError};

use super::{CudaReplica, COL_SCRATCH_BYTES, MAX_ELEMENTS};
use crate::backend::cuda::elem::Elem;
use crate::backend::cuda::launch::die;
use crate::backend::cuda::layout::Layout;
use crate::backend::cuda::{bn, conv, dwconv, CudaError};
use crate::nn::model::{Model, Op};

pub(super) struct NodeBufs<E: Elem> {
    /// Per node: batch norm's mean and 1/std per channel [2C]; dropout's mask [rows x
    /// features]; one float for the others.
    pub saved: Vec<CudaSlice<f32>>,
    /// Per node: the count batch norm's last training statistics were taken over.
    pub count: Vec<f32>,
    /// An input gradient to be added to its value's (`Grad::Add`), [rows x widest such value].
    pub acc: CudaSlice<E>,
    /// The bias of bias-less convolutions (zeros), and where their bias gradient goes.
    pub zeros: CudaSlice<f32>,
    pub sink: CudaSlice<f32>,
    /// Batch norm's per-channel sums (the largest `bn::scratch_len`).
    pub sums: CudaSlice<f64>,
    /// The own depthwise kernels' weight-gradient parts (the largest
    /// `dwconv::weight_scratch_len`).
    pub dw_parts: CudaSlice<f32>,
}

/// The widest value read by more than one node (0: none), whose gradient may be added to.
fn widest_shared(m: &Model) -> usize {
    (0..m.values.len())
        .filter(|&v| m.consumers(v) > 1)
        .map(|v| m.dims[v])
        .max()
        .unwrap_or(0)
}

impl<E: Elem> NodeBufs<E> {
    /// Buffers for micro-batches of up to `rows` rows, batch norm's scratch for `layout`.
    pub fn new(
        s: &Arc<CudaStream>,
        m: &Model,
        rows: usize,
        layout: Layout,
    ) -> Result<NodeBufs<E>, DriverError> {
        let (mut widest_oc, mut bn_scratch, mut dw_parts) = (1, 1, 1);
        let mut saved = Vec::with_capacity(m.nodes.len());
        for node in &m.nodes {
            let len = match node.op {
                Op::BatchNorm { c, hw, .. } => {
                    bn_scratch = bn_scratch.max(bn::scratch_len(layout, c, rows * hw));
                    2 * c
                }
                Op::Dropout { .. } => rows * m.dims[node.output],
                Op::Conv { g, groups, .. } => {
                    widest_oc = widest_oc.max(g.oc);
                    if groups > 1 {
                        dw_parts = dw_parts.max(dwconv::weight_scratch_len(rows, &g, layout));
                    }
                    1
                }
                _ => 1,
            };
            saved.push(s.alloc_zeros::<f32>(len.max(1))?);
        }
        Ok(NodeBufs {
            saved,
            count: vec![0.0; m.nodes.len()],
            acc: s.alloc_zeros::<E>((rows * widest_shared(m)).max(1))?,
            zeros: s.alloc_zeros::<f32>(widest_oc)?,
            sink: s.alloc_zeros::<f32>(widest_oc)?,
            sums: s.alloc_zeros::<f64>(bn_scratch)?,
            dw_parts: s.alloc_zeros::<f32>(dw_parts)?,
        })
    }

    /// Floats per row these buffers take (dropout's masks, the added-gradient scratch).
    pub fn floats_per_row(m: &Model) -> usize {
        let masks: usize = (m.nodes.iter())
            .filter(|n| matches!(n.op, Op::Dropout { .. }))
            .map(|n| m.dims[n.output])
            .sum();
        masks + widest_shared(m)
    }
}

/// Growing the buffers, the rows they can hold, dropout's seed and the running statistics.
impl<E: Elem> CudaReplica<E> {
    /// Dropout masks drawn from `seed` (a replica's own: rank and run seed) from training pass
    /// `first_pass` on, as `CpuReplica::seed_dropout`; unseeded, every replica draws from seed
    /// 0 and pass 0.
    pub fn seed_dropout(mut self, seed: u64, first_pass: u64) -> CudaReplica<E> {
        self.dropout_seed = seed;
        if first_pass > 0 {
            let s = &self.gpu.stream;
            if let Err(e) = s.memcpy_htod(&[first_pass], &mut self.passes) {
                die(self.gpu.index, "set the dropout pass counter", e);
            }
        }
        self
    }

    /// Batch norm's running statistics, downloaded (`Model::n_buffers` floats).
    pub(super) fn running_to_host(&self) -> Vec<f32> {
        let n = self.model.n_buffers;
        if n == 0 {
            return Vec::new();
        }
        let s = &self.gpu.stream;
        let v = (s.clone_dtoh(&self.running.slice(..n)))
            .unwrap_or_else(|e| self.fail("download the running statistics", e));
        if let Err(e) = s.synchronize() {
            self.fail("download the running statistics", e)
        }
        v
    }

    /// Batch norm's running statistics, uploaded (`Model::n_buffers` floats).
    pub(super) fn running_from_host(&mut self, v: &[f32]) {
        assert_eq!(v.len(), self.model.n_buffers, "running statistics");
        if v.is_empty() {
            return;
        }
        let s = self.gpu.stream.clone();
        if let Err(e) = s.memcpy_htod(v, &mut self.running.slice_mut(..v.len())) {
            self.fail("upload the running statistics", e)
        }
    }

    /// The most rows a micro-batch can have on this GPU: what the kernels' 32-bit indexing
    /// allows, and what the free memory (90% of it, less cuDNN's workspace bound) holds of the
    /// buffers `ensure` grows.
    pub fn max_rows(&self) -> usize {
        let widest = self.model.dims.iter().copied().max().unwrap_or(1).max(1);
        let indexed = MAX_ELEMENTS / widest;
        // per row: activations and their gradients at every boundary, a pooling layer's
        // argmax, dropout's masks, an added gradient's scratch, the label and the per-row
        // loss and correctness
        let pooled: usize = (self.model.nodes.iter())
            .filter(|n| matches!(n.op, Op::MaxPool(_)))
            .map(|n| self.model.dims[n.output])
            .sum();
        let nodes = NodeBufs::<E>::floats_per_row(&self.model);
        // (a bf16 run also stages its input in fp32, a channels-last one as it arrives)
        let d = self.model.dims[0];
        let staged = E::BF16 as usize * 4 * d + self.layout.nhwc() as usize * E::BYTES * d;
        let per_row = E::BYTES * 2 * self.model.dims.iter().sum::<usize>()
            + 4 * (pooled + nodes + 3)
            + staged;
        let Ok((free, _)) = self.gpu.ctx.mem_get_info() else {
            return indexed;
        };
        // cuDNN's workspace grows as its plans are made, up to its bound: kept free for it
        let workspace = if self.dnn.is_some() {
            super::dnn::MAX_WORKSPACE
        } else {
            0
        };
        let usable = ((free as f64 * 0.9) as usize).saturating_sub(workspace);
        // growing frees the buffers of `cap` rows first
        let fits = self.cap + usable / per_row.max(1);
        indexed.min(fits)
    }

    /// What micro-batches of `rows` rows need, allocated before the first step: a batch the
    /// GPU's memory cannot take is refused with the fix, not met at step 1 as a driver's error.
    pub fn reserve(&mut self, rows: usize) -> Result<(), CudaError> {
        self.ensure(rows).map_err(|e| match e.detail.contains("OUT_OF_MEMORY") {
            true => CudaError {
                detail: format!(
                    "the activations of a micro-batch of {rows} rows do not fit its free memory: lower --batch-per-replica (--grad-accum N keeps the global batch)"
                ),
                ..e
            },
            false => e,
        })
    }

    /// Grows the activation buffers to `rows` rows.
    pub(super) fn ensure(&mut self, rows: usize) -> Result<(), CudaError> {
        if rows <= self.cap {
            return Ok(());
        }
        let widest = self.model.dims.iter().copied().max().unwrap_or(1);
        if rows.saturating_mul(widest) > MAX_ELEMENTS {
            return Err(CudaError::new(
                self.gpu.index,
                "allocate activations",
                format!("{rows} rows x {widest} features is more than the {MAX_ELEMENTS} elements the GPU kernels index (32-bit): use a smaller --batch-per-replica"),
            ));
        }
        let s = &self.gpu.stream;
        let index = self.gpu.index;
        let err = |e| CudaError::new(index, "allocate activations", e);
        self.acts.clear();
        self.dacts.clear();
        // the nodes' row-sized buffers go first too
        self.nodes.saved.clear();
        self.nodes.acc = s.alloc_zeros::<E>(1).map_err(err)?;
        for &d in &self.model.dims {
            self.acts.push(s.alloc_zeros::<E>(rows * d).map_err(err)?);
            self.dacts.push(s.alloc_zeros::<E>(rows * d).map_err(err)?);
        }
        let d = self.model.dims[0];
        if E::BF16 {
            self.input = s.alloc_zeros::<f32>(rows * d).map_err(err)?;
        }
        if self.layout.nhwc() {
            self.arrived = s.alloc_zeros::<E>(rows * d).map_err(err)?;
        }
        self.argmax.clear();
        let mut col = 1;
        for node in &self.model.nodes {
            let pooled = match node.op {
                Op::MaxPool(_) => rows * self.model.dims[node.output],
                _ => 1,
            };
            self.argmax.push(s.alloc_zeros::<u32>(pooled).map_err(err)?);
            // cuDNN's convolutions take its own workspace, not the columns
            if let (Op::Conv { g, .. }, None) = (node.op, &self.dnn) {
                // as many images per chunk as fit in COL_SCRATCH_BYTES (at least one)
                let one = conv::conv2d_scratch_len(g.c, g.oc, g.k, g.k, g.oh, g.ow, 1);
                let images = (COL_SCRATCH_BYTES / 4 / one.max(1)).clamp(1, rows);
                col = col.max(one * images);
            }
        }
        self.col = s.alloc_zeros::<f32>(col).map_err(err)?;
        self.nodes = NodeBufs::new(s, &self.model, rows, self.layout).map_err(err)?;
        self.labels = s.alloc_zeros::<u32>(rows).map_err(err)?;
        self.row_loss = s.alloc_zeros::<f32>(rows).map_err(err)?;
        self.row_correct = s.alloc_zeros::<i32>(rows).map_err(err)?;
        self.cap = rows;
        Ok(())
    }
}
