//! Finding, choosing, linking and explaining the CUDA libraries.
use super::*;

fn touch(p: &Path) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, b"").unwrap();
}

#[test]
fn the_newest_cuda_the_driver_supports_is_chosen_wherever_it_was_installed() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    // a CUDA 12 toolkit, PyTorch's CUDA 13 wheels, and NCCL from pip
    let toolkit = r.join("cuda-12.6/lib64");
    let cu13 = r.join("site-packages/nvidia/cu13/lib");
    let nccl = r.join("site-packages/nvidia/nccl/lib");
    touch(&toolkit.join("libnvrtc.so.12"));
    touch(&toolkit.join("libcublas.so.12"));
    touch(&cu13.join("libnvrtc.so.13"));
    touch(&cu13.join("libcublas.so.13"));
    touch(&nccl.join("libnccl.so.2"));
    let dirs = vec![toolkit.clone(), cu13.clone(), nccl.clone()];
    let all = [NVRTC, CUBLAS, NCCL];
    // a 580 driver (CUDA 13): the CUDA 13 libraries, though the toolkit comes first
    let p = plan(&all, &dirs, Some(13));
    assert_eq!(p[0], (NVRTC, cu13.join("libnvrtc.so.13")));
    assert_eq!(p[1], (CUBLAS, cu13.join("libcublas.so.13")));
    assert_eq!(p[2], (NCCL, nccl.join("libnccl.so.2")));
    // a 550 driver (CUDA 12): CUDA 13's cuBLAS would not run on it
    let p = plan(&all[..2], &dirs, Some(12));
    assert_eq!(p[0].1, toolkit.join("libnvrtc.so.12"));
    assert_eq!(p[1].1, toolkit.join("libcublas.so.12"));
    // nothing installed: nothing to link
    assert!(plan(&all, &[r.join("empty")], Some(13)).is_empty());
}

#[test]
fn links_carry_the_names_cudarc_tries_and_the_path_keeps_the_originals() {
    let root = tempfile::tempdir().unwrap();
    let lib = root.path().join("nvidia/nccl/lib/libnccl.so.2");
    touch(&lib);
    let dir = root.path().join("links");
    let plan = vec![(NCCL, lib.clone())];
    link(&dir, &plan).unwrap();
    link(&dir, &plan).unwrap(); // again, over the old link
    assert_eq!(std::fs::read_link(dir.join("libnccl.so")).unwrap(), lib);
    let path = library_path(&dir, &plan, Some("/old/a:/old/b".into()));
    let parts: Vec<PathBuf> = std::env::split_paths(&path).collect();
    assert_eq!(
        parts,
        [
            dir.clone(),
            lib.parent().unwrap().to_path_buf(),
            "/old/a".into(),
            "/old/b".into()
        ]
    );
}

#[test]
fn a_missing_library_is_explained_with_where_it_is_or_how_to_install_it() {
    let e = explain(&NCCL, None);
    assert!(
        e.contains("libnccl.so.2") && e.contains("pip install nvidia-nccl-cu1"),
        "{e}"
    );
    // the wheel of the driver's CUDA alone: the other's would not load
    let twelve = CUDNN.install_for(Some(12));
    assert!(
        twelve.starts_with(
            "`pip install nvidia-cudnn-cu12` (CUDA 12, which this driver runs), or conda"
        ) && !twelve.contains("cu13"),
        "{twelve}"
    );
    let thirteen = NVRTC.install_for(Some(13));
    assert!(
        thirteen.starts_with("`pip install nvidia-cuda-nvrtc` (CUDA 13, which this driver runs)")
            && !thirteen.contains("cu12"),
        "{thirteen}"
    );
    let unknown = CUBLAS.install_for(None);
    assert!(
        unknown.contains("nvidia-cublas-cu12` (CUDA 12) or `pip install nvidia-cublas` (CUDA 13)"),
        "{unknown}"
    );
    let e = explain(&CUBLAS, Some(Path::new("/x/lib/libcublas.so.13")));
    assert!(
        e.contains("/x/lib/libcublas.so.13") && e.contains("LD_LIBRARY_PATH"),
        "{e}"
    );
    assert_eq!(major_of("libcublas.so.13"), Some(13));
    assert!(
        toolkit_version(Path::new("/usr/local/cuda-13.0"))
            > toolkit_version(Path::new("/usr/local/cuda-12.9"))
    );
    assert!(
        toolkit_version(Path::new("/usr/local/cuda"))
            > toolkit_version(Path::new("/usr/local/cuda-13.0"))
    );
}
