//! Opening a GPU replica: the device, cuBLAS and cuDNN (checked), the activations' layout,
//! the parameters, optimizer state and every buffer uploaded or allocated.

use std::sync::Arc;
use std::time::Duration;

use super::host::to_device;
use super::{graphs, host, nodes, packed, profile, update, weights, CudaReplica, MAX_ELEMENTS};
use crate::backend::cuda::elem::Elem;
use crate::backend::cuda::layout::{self, Layout};
use crate::backend::cuda::{blas, dnn, dwconv, on, pointwise, CudaError, Gpu};
use crate::backend::{TrainState, AUX};
use crate::nn::model::Model;
use crate::nn::optim::Optimizer;
use crate::nn::precision::Precision;

impl<E: Elem> CudaReplica<E> {
    /// Opens GPU `index` on this thread and uploads `state`; `join` then connects it to the
    /// other GPUs. A bf16 replica (`E`) needs cuDNN for its dense convolutions: without it the
    /// open fails, naming the fix. The activations' layout is what `MGTOP_GPU_LAYOUT` asks for
    /// (or auto's pick) where the model and cuDNN allow it (`layout::choose`).
    pub fn open(
        index: usize,
        model: Model,
        optimizer: Optimizer,
        precision: Precision,
        state: TrainState,
        timeout: Duration,
    ) -> Result<CudaReplica<E>, CudaError> {
        let asked = Layout::asked();
        Self::open_laid_out(index, model, optimizer, precision, state, timeout, asked)
    }

    /// `open`, in the layout `asked` (with an unknown value's note) where it can be.
    pub fn open_laid_out(
        index: usize,
        model: Model,
        optimizer: Optimizer,
        precision: Precision,
        state: TrainState,
        timeout: Duration,
        asked: layout::Asked,
    ) -> Result<CudaReplica<E>, CudaError> {
        let n = model.n_params;
        assert_eq!(state.params.len(), n);
        if state.buffers.len() != model.n_buffers {
            let e = format!(
                "the state has {} running statistics, the model {}",
                state.buffers.len(),
                model.n_buffers
            );
            return Err(CudaError::new(index, "open", e));
        }
        if n + AUX > MAX_ELEMENTS {
            return Err(CudaError::new(
                index,
                "open",
                format!("the model has {n} parameters, more than the {MAX_ELEMENTS} the GPU kernels index (32-bit): use a smaller --model"),
            ));
        }
        let gpu = Gpu::open(index)?;
        let s = gpu.stream.clone();
        let blas =
            cudarc::cublas::CudaBlas::new(s.clone()).map_err(on(index, "create cuBLAS handle"))?;
        blas::set_precision(&blas, precision)
            .map_err(on(index, &format!("set cuBLAS's math mode to {precision}")))?;
        let (mut dnn, mut notes) = dnn::for_replica::<E>(&gpu, &blas, precision);
        if E::BF16 && dnn.is_none() && weights::has_dense_conv(&model) {
            let why = notes
                .first()
                .map_or("cuDNN is not loaded or MGTOP_CUDNN=off", |n| n);
            return Err(CudaError::new(
                index,
                "open",
                format!("bf16 convolutions need cuDNN ({why}): use --precision tf32"),
            ));
        }
        // (first: a first start waited for it)
        notes.splice(
            0..0,
            gpu.compiled.clone().map(|n| format!("GPU {index}: {n}")),
        );
        let (mut layout, mut said) = layout::choose(asked, &model, dnn.is_some());
        if let (Layout::Nhwc, Some(d)) = (layout, dnn.as_mut()) {
            if let Err(e) = dnn::check_channels_last(&gpu, &blas, precision, d) {
                layout = Layout::Nchw;
                said = Some(format!("cuDNN's channels-last convolutions failed their check against the own kernels ({e}); activations stay NCHW"));
            }
        }
        notes.extend(said.map(|n| format!("GPU {index}: {n}")));
        if let (Some(d), true) = (dnn.as_mut(), weights::has_grouped_conv(&model)) {
            let own = dwconv::asked(std::env::var("MGTOP_GPU_DEPTHWISE").ok().as_deref());
            let said = match own {
                Ok(false) => None,
                Ok(true) => {
                    d.leave_grouped();
                    Some(
                        "depthwise convolutions on the own kernels (MGTOP_GPU_DEPTHWISE=own)"
                            .into(),
                    )
                }
                Err(e) => Some(format!("{e}; cuDNN's depthwise convolutions are kept")),
            };
            notes.extend(said.map(|n: String| format!("GPU {index}: {n}")));
        }
        if let (Some(d), true) = (dnn.as_mut(), weights::has_pointwise_conv(&model)) {
            let gemm = pointwise::asked(std::env::var("MGTOP_GPU_POINTWISE").ok().as_deref());
            let said = match (gemm, layout) {
                (Ok(false), _) => None,
                (Ok(true), Layout::Nhwc) => {
                    d.leave_pointwise();
                    Some("1x1 convolutions as cuBLAS's matrix products (MGTOP_GPU_POINTWISE=gemm)".into())
                }
                (Ok(true), Layout::Nchw) => Some("MGTOP_GPU_POINTWISE=gemm takes channels-last activations only (MGTOP_GPU_LAYOUT=nhwc): cuDNN keeps the 1x1 convolutions".into()),
                (Err(e), _) => Some(format!("{e}; cuDNN keeps the 1x1 convolutions")),
            };
            notes.extend(said.map(|n: String| format!("GPU {index}: {n}")));
        }
        let params = s
            .clone_htod(&state.params)
            .map_err(on(index, "upload parameters"))?;
        // frozen parameters (`--freeze`) have no moments here
        let own = optimizer.compact(&state.opt, n);
        let m = to_device(&s, &own.m).map_err(on(index, "upload optimizer state"))?;
        let v = to_device(&s, &own.v).map_err(on(index, "upload optimizer state"))?;
        let chunks = update::Chunks::new(&s, &optimizer, n)
            .map_err(on(index, "upload the update's chunks"))?;
        let packed = packed::Packed::new(&s, &optimizer, n).map_err(on(index, "allocate"))?;
        let grads = s
            .alloc_zeros::<f32>(n + AUX)
            .map_err(on(index, "allocate gradients"))?;
        let eval_metrics = s.alloc_zeros::<f32>(AUX).map_err(on(index, "allocate"))?;
        let ends_dev = s
            .alloc_zeros::<f32>(AUX + 1)
            .map_err(on(index, "allocate"))?;
        let running =
            to_device(&s, &state.buffers).map_err(on(index, "upload running statistics"))?;
        let nodes = nodes::NodeBufs::new(&s, &model, 1, layout).map_err(on(index, "allocate"))?;
        let mut r = CudaReplica {
            blas: Some(blas),
            dnn,
            notes,
            comm: None,
            layout,
            timeout,
            optimizer,
            chunks,
            t: state.opt.t,
            weights: weights::Weights::new(&s, &model, layout)
                .map_err(on(index, "allocate the weights' copy"))?,
            wgrad: s
                .alloc_zeros::<E>(if E::BF16 || layout.nhwc() {
                    weights::largest_conv(&model).max(1)
                } else {
                    1
                })
                .map_err(on(index, "allocate"))?,
            input: s.alloc_zeros::<f32>(1).map_err(on(index, "allocate"))?,
            arrived: s.alloc_zeros::<E>(1).map_err(on(index, "allocate"))?,
            params,
            grads,
            m,
            v,
            packed,
            grads_bf16: false,
            wire: None,
            acts: Vec::new(),
            dacts: Vec::new(),
            argmax: Vec::new(),
            col: s.alloc_zeros::<f32>(1).map_err(on(index, "allocate"))?,
            labels: s.alloc_zeros::<u32>(1).map_err(on(index, "allocate"))?,
            row_loss: s.alloc_zeros::<f32>(1).map_err(on(index, "allocate"))?,
            row_correct: s.alloc_zeros::<i32>(1).map_err(on(index, "allocate"))?,
            eval_metrics,
            ends_dev,
            cap: 0,
            events: None,
            ends: Default::default(),
            staging: host::Staging::default(),
            resident: None,
            profile: profile::wanted().map(|d| profile::Profile::new(s.clone(), d)),
            running,
            nodes,
            dropout_seed: 0,
            passes: s.alloc_zeros::<u64>(1).map_err(on(index, "allocate"))?,
            graphs: graphs::Graphs::new(false),
            model: Arc::new(model),
            gpu,
        };
        // evaluation's chunks, as the CPU's (`Model::eval_rows`)
        r.ensure(r.model.eval_rows())?;
        r.refresh_weights();
        Ok(r)
    }
}
