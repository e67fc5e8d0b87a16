//! cudarc loads a CUDA library's functions as they are first called, and panics where the
//! library lacks one (an NVRTC of CUDA 11.0, a `libcuda.so.1` that is not NVIDIA's driver):
//! that panic, caught where it ends a thread (`main`, a worker), said as what is wrong and how
//! to mend it.

use super::libs;

/// How cudarc's panic of a missing function begins (`Missing symbol NAME: why`).
const MISSING: &str = "Missing symbol ";

/// Whether a panic's message is cudarc's of a function a CUDA library lacks.
pub fn is_missing_symbol(message: &str) -> bool {
    message.starts_with(MISSING)
}

/// A panic's message as text (a panic's payload is a `String` or a `&str`).
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> Option<&str> {
    (payload.downcast_ref::<String>().map(String::as_str))
        .or_else(|| payload.downcast_ref::<&str>().copied())
}

/// `message` said as its mend where it is cudarc's missing-function panic; else as it is.
pub fn explained(message: String) -> String {
    let Some(rest) = message.strip_prefix(MISSING) else {
        return message;
    };
    let name = rest.split(':').next().unwrap_or(rest).trim();
    let (lib, install) = match name {
        n if n.starts_with("nvrtc") => ("NVRTC", libs::NVRTC.install()),
        n if n.starts_with("cublas") => ("cuBLAS", libs::CUBLAS.install()),
        n if n.starts_with("nccl") => ("NCCL", libs::NCCL.install()),
        n if n.starts_with("cudnn") => ("cuDNN", libs::CUDNN.install()),
        _ => (
            "the CUDA driver (libcuda.so.1)",
            "NVIDIA's driver 525 or newer, which nvidia-smi names".to_string(),
        ),
    };
    format!(
        "{lib} as found here lacks the function {name}: it is older than this program needs (CUDA 12 or newer) or not NVIDIA's own; install a newer one ({install}), or train on CPU workers (--devices cpu:N)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_function_is_said_with_its_library_and_the_mend() {
        let said = explained("Missing symbol nvrtcGetNumSupportedArchs: dlsym failed".into());
        assert!(
            said.starts_with("NVRTC as found here lacks the function nvrtcGetNumSupportedArchs:")
                && said.contains("pip install nvidia-cuda-nvrtc-cu12"),
            "{said}"
        );
        let said = explained("Missing symbol cuDriverGetVersion: undefined symbol".into());
        assert!(
            said.starts_with("the CUDA driver (libcuda.so.1) as found here lacks"),
            "{said}"
        );
        // another panic's message is left as it is
        assert_eq!(
            explained("index out of bounds".into()),
            "index out of bounds"
        );
        assert!(!is_missing_symbol("index out of bounds"));
    }
}
