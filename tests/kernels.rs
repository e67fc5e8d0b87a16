//! Every kernel in kernels/ compiles with NVRTC to CUBIN for sm_80 and sm_90. Needs libnvrtc, not a GPU:
//! skipped where NVRTC is missing, unless MGTOP_REQUIRE_NVRTC=1 (as .ci/run sets, after
//! installing the `nvidia-cuda-nvrtc-cu12` wheel) makes that a failure.

mod common;

use mgtop::backend::cuda::kernels::{
    compile, compile_each, entry_points, for_device, nvrtc_available, supported_archs, Image,
    KernelError, Target, SOURCES,
};

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

/// Whether `haystack` holds `needle` (a kernel's symbol name in a CUBIN's string table).
fn holds(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

fn bytes(images: Vec<Result<Image, KernelError>>) -> Vec<Vec<u8>> {
    let bytes = images
        .into_iter()
        .map(|i| i.unwrap_or_else(|e| panic!("{e}")));
    bytes.map(|i| i.bytes).collect()
}

/// How many of `images` NVRTC compiled (the others were read back from the cache).
fn fresh(images: &[Result<Image, KernelError>]) -> usize {
    images
        .iter()
        .filter(|i| i.as_ref().is_ok_and(|i| i.compiled))
        .count()
}

#[test]
fn every_kernel_compiles_to_cubin_for_sm80_and_sm90_and_is_kept_for_the_next_run() {
    if !nvrtc_or_skip() {
        return;
    }
    let cache = tempfile::tempdir().unwrap();
    let mut compiled = Vec::new();
    for arch in [80, 90] {
        let images = compile_each(Target::Cubin(arch), Some(cache.path()));
        assert_eq!(fresh(&images), SOURCES.len(), "sm_{arch}: an empty cache");
        let images = bytes(images);
        for ((file, src), b) in SOURCES.iter().zip(&images) {
            // an ELF object for NVIDIA GPUs (e_machine 190, EM_CUDA), holding every entry point
            assert_eq!(&b[..4], b"\x7fELF", "{file} sm_{arch}: not an ELF image");
            assert_eq!(u16::from_le_bytes([b[18], b[19]]), 190, "{file} sm_{arch}");
            for name in entry_points(src) {
                assert!(holds(b, name), "{file} sm_{arch}: no kernel {name}");
            }
        }
        compiled.extend(images);
    }
    // one file a kernel source and architecture
    let mut kept: Vec<_> = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    kept.sort();
    assert_eq!(kept.len(), 2 * SOURCES.len(), "{kept:?}");
    // the next run reads them instead of compiling: two files swapped give two images swapped
    let (a, b) = (
        std::fs::read(&kept[0]).unwrap(),
        std::fs::read(&kept[1]).unwrap(),
    );
    std::fs::write(&kept[0], &b).unwrap();
    std::fs::write(&kept[1], &a).unwrap();
    let both = |compiled_now: usize| {
        let images = [80, 90].map(|arch| compile_each(Target::Cubin(arch), Some(cache.path())));
        assert_eq!(images.iter().map(|i| fresh(i)).sum::<usize>(), compiled_now);
        images.map(bytes).concat()
    };
    let swapped = both(0);
    let moved: Vec<usize> = (0..compiled.len())
        .filter(|&i| swapped[i] != compiled[i])
        .collect();
    assert_eq!(moved.len(), 2, "{moved:?}");
    assert_eq!(swapped[moved[0]], compiled[moved[1]]);
    // damaged files (here cut short by a byte) are compiled again and replaced
    for f in &kept[..2] {
        std::fs::write(f, &a[..a.len() - 1]).unwrap();
    }
    assert_eq!(both(2), compiled);
    assert_eq!(std::fs::read(&kept[0]).unwrap(), a);
    assert_eq!(std::fs::read(&kept[1]).unwrap(), b);
}

#[test]
fn a_gpu_newer_than_nvrtc_gets_ptx_and_each_architecture_is_compiled_once() {
    if !nvrtc_or_skip() {
        return;
    }
    let (file, src) = SOURCES[0];
    let ptx = compile(file, src, Target::Ptx(80)).unwrap();
    let text = String::from_utf8(ptx.bytes).unwrap();
    assert!(text.contains(".target sm_80"), "{text}");
    let supported = supported_archs().unwrap();
    assert!(
        supported.contains(&80) && supported.contains(&90),
        "{supported:?}"
    );
    let (a, said) = for_device(90).unwrap();
    let (b, again) = for_device(90).unwrap();
    assert!(std::sync::Arc::ptr_eq(&a, &b), "compiled twice");
    // (the first call compiled, unless the user's kernel cache had them already)
    if let Some(said) = said {
        assert!(said.contains("kernel files for sm_90"), "{said}");
    }
    assert_eq!(again, None, "the second GPU of a model tells nothing");
    assert_eq!(a.len(), SOURCES.len());
    assert!(a.iter().all(|i| i.target == Target::Cubin(90)));
}

#[test]
fn a_compile_error_shows_the_nvrtc_log() {
    if !nvrtc_or_skip() {
        return;
    }
    let bad = "extern \"C\" __global__ void broken_f32(float* x) { x[0] = undefined_name; }";
    match compile("broken.cu", bad, Target::Cubin(80)) {
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

#[test]
fn selftest_finds_a_pip_installed_nvrtc_without_ld_library_path() {
    // where `pip install nvidia-cuda-nvrtc-cu12` put it, as python3 says
    let found = std::process::Command::new("python3")
        .args(["-c", "import nvidia.cuda_nvrtc"])
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var("MGTOP_REQUIRE_NVRTC").as_deref() != Ok("1"),
            "MGTOP_REQUIRE_NVRTC=1 but python3 cannot import nvidia.cuda_nvrtc"
        );
        common::skipped("the nvidia-cuda-nvrtc-cu12 wheel is not installed for python3");
        return;
    }
    let cache = tempfile::tempdir().unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_mgtop-train"))
        .arg("selftest")
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("MGTOP_CUDA_LIBS")
        .env("XDG_CACHE_HOME", cache.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("NVRTC: 1") && out.contains("libnvrtc.so.1") && out.contains("sm_90"),
        "{out}"
    );
    // one directory of links per set of libraries
    let dirs: Vec<_> = std::fs::read_dir(cache.path().join("mgtop/cuda-libs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    // the wheel's (or, where PyTorch's CUDA 13 wheels are installed too, the newer one's)
    let link = std::fs::read_link(dirs[0].join("libnvrtc.so")).unwrap();
    let name = link.file_name().map(|n| n.to_string_lossy().into_owned());
    assert!(
        matches!(name.as_deref(), Some("libnvrtc.so.12" | "libnvrtc.so.13")),
        "{link:?}"
    );
}
