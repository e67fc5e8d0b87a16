//! The CUDA backend: one `CudaReplica` per GPU, owned by that GPU's worker thread, with its own
//! context, stream, cuBLAS handle, kernels (compiled by NVRTC for the device) and NCCL
//! communicator.
//!
//! Every CUDA library is loaded at run time (cudarc `dynamic-loading`), and cudarc panics when
//! one is missing, so `Libraries::probe` checks each first: a machine without them gets a reason
//! and the fix, never a panic.

#[macro_use]
mod launch;
pub mod bench;
pub mod blas;
pub mod bn;
pub mod conv;
pub mod convert;
pub mod discover;
pub mod dnn;
pub mod dwconv;
pub mod elem;
pub mod kernels;
pub mod layout;
pub mod libs;
pub mod nccl;
pub mod ops;
pub mod pointwise;
pub mod pool;
pub mod replica;
pub mod selftest;
pub mod shape;
pub mod symbols;

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaStream};

use kernels::SOURCES;

/// The GPU path's environment switches that would otherwise take a misspelt value for their
/// default: `MGTOP_GPU_PROFILE` (`off` profiled) and `MGTOP_KERNEL_CACHE`.
pub fn check_env() -> Result<(), String> {
    replica::check_profile_env().and_then(|()| kernels::check_cache_env())
}

/// Which CUDA libraries this process can load (`probe`; `Default` is only a placeholder where
/// no GPU was found and nothing was probed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Libraries {
    pub driver: bool,
    pub nvrtc: bool,
    pub cublas: bool,
    /// None: loadable; Some(why not, with the fix).
    pub nccl: Option<String>,
}

impl Libraries {
    pub fn probe() -> Libraries {
        // SAFETY: each only tries to dlopen its library under the known names.
        let (driver, cublas) = unsafe {
            (
                cudarc::driver::sys::is_culib_present(),
                cudarc::cublas::sys::is_culib_present(),
            )
        };
        Libraries {
            driver,
            nvrtc: kernels::nvrtc_available(),
            cublas,
            nccl: (!libs::NCCL.loadable()).then(|| libs::why_missing(&libs::NCCL)),
        }
    }

    /// Why training on `gpus` GPUs cannot start, naming the missing library and how to get it.
    pub fn missing_for(&self, gpus: usize) -> Option<String> {
        let mut missing = Vec::new();
        if !self.driver {
            missing.push("the CUDA driver (libcuda.so.1): install the NVIDIA driver".to_string());
        }
        if !self.nvrtc {
            missing.push(libs::why_missing(&libs::NVRTC));
        }
        if !self.cublas {
            missing.push(libs::why_missing(&libs::CUBLAS));
        }
        if gpus > 1 {
            if let Some(why) = &self.nccl {
                missing.push(why.clone());
            }
        }
        (!missing.is_empty()).then(|| missing.join("; "))
    }
}

/// An error of the CUDA path, with what was being done.
#[derive(Clone, Debug, thiserror::Error)]
#[error("GPU {gpu}: {what}: {detail}")]
pub struct CudaError {
    pub gpu: usize,
    pub what: String,
    pub detail: String,
}

impl CudaError {
    pub fn new(gpu: usize, what: &str, detail: impl std::fmt::Debug) -> CudaError {
        CudaError {
            gpu,
            what: what.to_string(),
            detail: format!("{detail:?}"),
        }
    }
}

/// A `CudaError` for `what` on this GPU: a launch helper's refusal of a bad shape or length.
pub(crate) fn fail(gpu: &Gpu, what: &str, detail: impl ToString) -> CudaError {
    CudaError {
        gpu: gpu.index,
        what: what.to_string(),
        detail: detail.to_string(),
    }
}

/// `map_err` adapter: any CUDA library error, with the GPU and what was being done.
pub fn on<E: std::fmt::Debug>(gpu: usize, what: &str) -> impl FnOnce(E) -> CudaError + '_ {
    move |e| CudaError::new(gpu, what, e)
}

/// One GPU opened on this thread: its context, the stream all work goes to, and every kernel
/// of `kernels/` compiled for its architecture.
pub struct Gpu {
    pub index: usize,
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub arch: String,
    functions: HashMap<String, CudaFunction>,
    /// Where opening it had NVRTC compile kernels, the line telling so (`kernels::for_device`).
    pub compiled: Option<String>,
}

impl Gpu {
    /// Whether its tensor cores take TF32 (compute capability 8.0, Ampere, or newer).
    pub fn has_tf32(&self) -> bool {
        self.arch
            .trim_start_matches("sm_")
            .parse::<u32>()
            .unwrap_or(0)
            >= 80
    }

    pub fn open(index: usize) -> Result<Gpu, CudaError> {
        let ctx = CudaContext::new(index).map_err(|e| CudaError::new(index, "open", e))?;
        // SAFETY: all of this GPU's work goes to its one stream, in order, so no buffer needs
        // cudarc's per-use events to order it across streams (they cost a wait and an event per
        // launch argument).
        unsafe { ctx.disable_event_tracking() };
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| CudaError::new(index, "compute capability", e))?;
        let arch = format!("sm_{major}{minor}");
        let stream = ctx
            .new_stream()
            .map_err(|e| CudaError::new(index, "create stream", e))?;
        let (images, compiled) =
            kernels::for_device((major * 10 + minor) as u32).map_err(|e| CudaError {
                gpu: index,
                what: "compile kernels/".into(),
                detail: e.to_string(),
            })?;
        let mut functions = HashMap::new();
        for (image, (_, src)) in images.iter().zip(SOURCES) {
            let module = ctx
                .load_module(image.module())
                .map_err(|e| CudaError::new(index, &format!("load kernels/{}", image.file), e))?;
            for name in kernels::entry_points(src) {
                let f = module
                    .load_function(name)
                    .map_err(|e| CudaError::new(index, &format!("load kernel {name}"), e))?;
                functions.insert(name.to_string(), f);
            }
        }
        Ok(Gpu {
            index,
            ctx,
            stream,
            arch,
            functions,
            compiled,
        })
    }

    /// Closes a GPU opened only for a check before the run's, leaving the line telling that
    /// opening it compiled the kernels for the GPU the run opens next to tell.
    pub fn close_for_check(mut self) {
        let device = self.arch.trim_start_matches("sm_").parse().unwrap_or(0);
        kernels::untaken(device, self.compiled.take());
    }

    /// A kernel by name (`{op}_f32`); every name in `kernels/` was loaded by `open`.
    pub fn function(&self, name: &str) -> &CudaFunction {
        self.functions
            .get(name)
            .unwrap_or_else(|| panic!("kernel {name} is not in kernels/"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_libraries_are_named_with_the_fix() {
        let none = Libraries {
            driver: false,
            nvrtc: false,
            cublas: false,
            nccl: Some("NCCL (libnccl.so.2) was not found: ...".into()),
        };
        let why = none.missing_for(2).unwrap();
        for needle in ["libcuda.so.1", "libnccl.so.2"] {
            assert!(why.contains(needle), "{needle} missing from: {why}");
        }
        // each library named with how to get it, or (where a wheel put one on this machine, as
        // PyTorch's do) where it is installed
        for (file, name) in [("libnvrtc.so.12", "NVRTC"), ("libcublas.so.12", "cuBLAS")] {
            let said = (why.contains(file) && why.contains("pip install"))
                || why.contains(&format!("{name} is installed as"));
            assert!(said, "{name} missing from: {why}");
        }
        // one GPU needs no NCCL
        assert!(!none.missing_for(1).unwrap().contains("libnccl"));
        let all = Libraries {
            driver: true,
            nvrtc: true,
            cublas: true,
            nccl: None,
        };
        assert_eq!(all.missing_for(8), None);
    }
}
