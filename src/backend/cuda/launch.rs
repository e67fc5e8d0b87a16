//! Launching the kernels of `kernels/` on a GPU's stream, and what a failed launch does.

use cudarc::driver::{CudaSlice, CudaViewMut, LaunchConfig};

use super::{CudaError, Gpu};

const THREADS: u32 = 256;

/// A CUDA error inside a step: the worker's panic becomes the rank's failure message.
pub(crate) fn die(gpu: usize, what: &str, e: impl std::fmt::Debug) -> ! {
    panic!("{}", CudaError::new(gpu, what, e))
}

/// Launches kernel `$name` over `$n` threads with the given arguments.
macro_rules! launch {
    ($gpu:expr, $name:expr, $n:expr, $($arg:expr),+ $(,)?) => {{
        let gpu: &$crate::backend::cuda::Gpu = $gpu;
        let mut b = gpu.stream.launch_builder(gpu.function($name));
        $( cudarc::driver::PushKernelArg::arg(&mut b, $arg); )+
        // SAFETY: every kernel of kernels/ bounds-checks its index against the sizes passed,
        // and the callers pass buffers at least that large.
        if let Err(e) = unsafe { b.launch($crate::backend::cuda::launch::launch_cfg($n)) } {
            $crate::backend::cuda::launch::die(gpu.index, $name, e)
        }
    }};
}

/// Adds a micro-batch's loss sum, correct count and row count (from the per-row outputs of
/// softmax_xent) into `out`'s three slots.
pub(crate) fn add_metrics(
    gpu: &Gpu,
    out: &mut CudaViewMut<'_, f32>,
    loss: &CudaSlice<f32>,
    correct: &CudaSlice<i32>,
    b: usize,
) {
    let (loss, correct, ni) = (loss.slice(..b), correct.slice(..b), b as i32);
    launch!(gpu, "metrics_f32", 1, out, &loss, &correct, &ni);
}

pub(crate) fn launch_cfg(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n as u32).div_ceil(THREADS).max(1), 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}
