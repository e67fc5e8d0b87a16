//! Launching the kernels of `kernels/` on a GPU's stream, and what a failed launch does.

use cudarc::driver::{CudaSlice, CudaViewMut, LaunchConfig};

use super::{CudaError, Gpu};

/// Threads per block of every launch (the block-per-channel reductions of `kernels/conv.cu`
/// size their shared memory for it: `CONV_BLOCK`).
pub(crate) const THREADS: u32 = 256;
/// The most blocks a grid-stride launch asks for: enough to fill any GPU many times over; the
/// kernels' grid-stride loops cover the rest.
pub(crate) const MAX_BLOCKS: u32 = 1 << 16;
/// Below this many elements a kernel may index in 32 bits (`SMALL` in `kernels/elem.cuh`:
/// the largest grid's stride past the last index still fits an int).
pub(crate) const SMALL: usize = 2_000_000_000;

/// A CUDA error inside a step: the worker's panic becomes the rank's failure message.
pub(crate) fn die(gpu: usize, what: &str, e: impl std::fmt::Debug) -> ! {
    panic!("{}", CudaError::new(gpu, what, e))
}

/// A failed launch inside a step has no way back through `Replica`: the rank fails with it.
pub(crate) fn check(r: Result<(), CudaError>) {
    if let Err(e) = r {
        panic!("{e}")
    }
}

/// The kernel of op `$op` for activations of element type `$e` (`elem::Elem`): the literal
/// `"{op}_f32"` or `"{op}_bf16"`.
macro_rules! named {
    ($e:ty, $op:literal) => {
        if <$e as $crate::backend::cuda::elem::Elem>::BF16 {
            concat!($op, "_bf16")
        } else {
            concat!($op, "_f32")
        }
    };
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

/// Launches grid-stride kernel `$name` with `$cfg` and the given arguments; a failed launch is
/// a `CudaError` naming the kernel (for ops that return errors rather than end the step).
macro_rules! try_launch {
    ($gpu:expr, $name:expr, $cfg:expr, $($arg:expr),+ $(,)?) => {{
        let gpu: &$crate::backend::cuda::Gpu = $gpu;
        let name: &str = $name;
        let mut b = gpu.stream.launch_builder(gpu.function(name));
        $( cudarc::driver::PushKernelArg::arg(&mut b, $arg); )+
        // SAFETY: the argument list matches the kernel's signature in kernels/, and the callers
        // check every buffer against the sizes passed before launching.
        unsafe { b.launch($cfg) }
            .map(|_| ())
            .map_err($crate::backend::cuda::on(gpu.index, name))
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

/// The code of an op's own activation in the kernels (`activate` in `kernels/elem.cuh`).
pub(crate) fn act_code(act: crate::nn::ops::Act) -> i32 {
    use crate::nn::ops::Act;
    match act {
        Act::None => 0,
        Act::Relu => 1,
        Act::Relu6 => 2,
    }
}

/// A launch of `blocks` blocks of `THREADS`, capped at `MAX_BLOCKS` (at least 1): for kernels
/// that loop grid-stride, over elements or over blocks' work items (channels).
pub(crate) fn blocks_cfg(blocks: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks.clamp(1, MAX_BLOCKS as usize) as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A grid-stride launch over `n` elements: one thread each up to `MAX_BLOCKS` blocks, then
/// each thread takes several. Any `n` (64-bit) is covered.
pub(crate) fn grid_stride_cfg(n: usize) -> LaunchConfig {
    blocks_cfg(n.div_ceil(THREADS as usize))
}

/// A view's device address on `gpu`'s stream (whether a 16-byte vector walk may read it).
pub(crate) fn start<T>(gpu: &Gpu, v: &impl cudarc::driver::DevicePtr<T>) -> u64 {
    v.device_ptr(&gpu.stream).0
}

/// The most lanes (groups of neighbouring channels) a channels-last block has.
pub(crate) const MAX_LANES: usize = 32;

/// A channels-last launch's blocks across `groups` groups of neighbouring channels, and each
/// block's lanes and rows of threads (at most `threads`): the groups spread evenly over the
/// fewest blocks of at most MAX_LANES lanes (so few channels are one block whose lanes are its
/// groups, and a warp reads whole rows), as many rows as `threads` allows.
pub(crate) fn channel_blocks(groups: usize, threads: usize) -> (usize, usize, usize) {
    let groups = groups.max(1);
    let blocks = groups.div_ceil(MAX_LANES);
    let lanes = groups.div_ceil(blocks);
    (blocks, lanes, threads / lanes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_stride_launches_cover_any_size_with_a_capped_grid() {
        let blocks = |n: usize| grid_stride_cfg(n).grid_dim.0;
        assert_eq!(blocks(0), 1);
        assert_eq!(blocks(1), 1);
        assert_eq!(blocks(256), 1);
        assert_eq!(blocks(257), 2);
        assert_eq!(blocks(256 << 16), MAX_BLOCKS);
        // beyond u32 (where `launch_cfg` would truncate): capped, the loops cover the rest
        assert_eq!(blocks(1 << 40), MAX_BLOCKS);
        assert_eq!(blocks(usize::MAX), MAX_BLOCKS);
        let c = blocks_cfg(32);
        assert_eq!((c.grid_dim, c.block_dim), ((32, 1, 1), (THREADS, 1, 1)));
        assert_eq!(blocks_cfg(0).grid_dim.0, 1);
        assert_eq!(blocks_cfg(1 << 20).grid_dim.0, MAX_BLOCKS);
    }

    #[test]
    fn the_host_and_the_kernels_agree_where_32_bit_indices_end() {
        let small: usize = (super::super::kernels::PRELUDE.lines())
            .find_map(|l| l.strip_prefix("#define SMALL "))
            .expect("elem.cuh defines SMALL")
            .trim()
            .trim_end_matches("LL")
            .parse()
            .unwrap();
        assert_eq!(small, SMALL);
        // the last index plus the largest grid's stride stays an int
        let stride = MAX_BLOCKS as usize * 1024;
        assert!(SMALL + stride <= i32::MAX as usize);
    }
}
