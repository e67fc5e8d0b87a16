//! Every kernel in kernels/ compiles with NVRTC for sm_80 and sm_90. Needs libnvrtc, not a GPU:
//! skipped where NVRTC is missing, unless MGTOP_REQUIRE_NVRTC=1 (as .ci/run sets, after
//! installing the `nvidia-cuda-nvrtc-cu12` wheel) makes that a failure.

mod common;

use mgtop::backend::cuda::kernels::{compile, entry_points, nvrtc_available, KernelError, SOURCES};

fn nvrtc_or_skip() -> bool {
    if nvrtc_available() {
        return true;
    }
    assert!(
        std::env::var("MGTOP_REQUIRE_NVRTC").as_deref() != Ok("1"),
        "MGTOP_REQUIRE_NVRTC=1 but libnvrtc cannot be loaded (is its directory on LD_LIBRARY_PATH?)"
    );
    common::skipped("NVRTC not found (pip install nvidia-cuda-nvrtc-cu12 and put its lib directory on LD_LIBRARY_PATH)");
    false
}

#[test]
fn every_kernel_compiles_for_sm80_and_sm90() {
    if !nvrtc_or_skip() {
        return;
    }
    for arch in ["sm_80", "sm_90"] {
        for (file, src) in SOURCES {
            let ptx = compile(file, src, arch).unwrap_or_else(|e| panic!("{e}"));
            assert!(ptx.contains(&format!(".target {arch}")), "{file} {arch}");
            for name in entry_points(src) {
                assert!(
                    ptx.contains(&format!(".entry {name}(")),
                    "{file}: no entry {name}"
                );
            }
        }
    }
}

#[test]
fn a_compile_error_shows_the_nvrtc_log() {
    if !nvrtc_or_skip() {
        return;
    }
    let bad = "extern \"C\" __global__ void broken_f32(float* x) { x[0] = undefined_name; }";
    match compile("broken.cu", bad, "sm_80") {
        Err(e @ KernelError::Compile { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("broken.cu") && msg.contains("undefined_name"),
                "{msg}"
            );
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
}
