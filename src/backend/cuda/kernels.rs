//! The CUDA kernels (`kernels/*.cu`, embedded) and their compilation with NVRTC, which is
//! loaded at run time: the crate builds and runs without CUDA, and a missing NVRTC is an
//! answer, never a panic.

/// Every kernel source, by file name.
pub const SOURCES: &[(&str, &str)] = &[
    ("bias.cu", include_str!("../../../kernels/bias.cu")),
    ("relu.cu", include_str!("../../../kernels/relu.cu")),
    (
        "softmax_xent.cu",
        include_str!("../../../kernels/softmax_xent.cu"),
    ),
    ("optim.cu", include_str!("../../../kernels/optim.cu")),
    ("scale.cu", include_str!("../../../kernels/scale.cu")),
    ("metrics.cu", include_str!("../../../kernels/metrics.cu")),
];

/// The `extern "C"` kernel names a source defines (`{op}_f32`).
pub fn entry_points(src: &str) -> Vec<&str> {
    src.split("extern \"C\" __global__ void ")
        .skip(1)
        .filter_map(|rest| rest.split('(').next())
        .map(str::trim)
        .collect()
}

/// Whether libnvrtc can be loaded (checked before any NVRTC call: cudarc panics otherwise).
pub fn nvrtc_available() -> bool {
    // SAFETY: only tries to dlopen the library under its known names; nothing is called.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("NVRTC (libnvrtc.so.12) was not found: install the CUDA 12 toolkit or `pip install nvidia-cuda-nvrtc-cu12` and add its lib directory to LD_LIBRARY_PATH")]
    NoNvrtc,
    #[error("kernels/{file} does not compile for {arch}:\n{log}")]
    Compile {
        file: String,
        arch: String,
        log: String,
    },
}

/// Compiles one source to PTX for a GPU architecture such as `sm_80`; a compile error carries
/// NVRTC's log.
pub fn compile(file: &str, src: &str, arch: &'static str) -> Result<String, KernelError> {
    if !nvrtc_available() {
        return Err(KernelError::NoNvrtc);
    }
    let opts = cudarc::nvrtc::CompileOptions {
        arch: Some(arch),
        name: Some(file.to_string()),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(src, opts)
        .map(|ptx| ptx.to_src())
        .map_err(|e| KernelError::Compile {
            file: file.to_string(),
            arch: arch.to_string(),
            log: match e {
                cudarc::nvrtc::CompileError::CompileError { log, .. } => {
                    log.to_string_lossy().into_owned()
                }
                other => format!("{other:?}"),
            },
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_names_its_kernels_op_f32() {
        let names: Vec<&str> = SOURCES.iter().flat_map(|(_, s)| entry_points(s)).collect();
        assert_eq!(
            names,
            [
                "bias_add_f32",
                "bias_grad_f32",
                "relu_forward_f32",
                "relu_backward_f32",
                "softmax_xent_f32",
                "sgd_f32",
                "momentum_f32",
                "adam_f32",
                "adamw_f32",
                "scale_f32",
                "metrics_f32"
            ]
        );
        // every file in kernels/ is embedded
        let on_disk = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/kernels"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "cu")
            })
            .count();
        assert_eq!(on_disk, SOURCES.len());
    }
}
