//! Finding NCCL. It ships as `libnccl.so.2` (pip `nvidia-nccl-cu12`, conda `nccl`, apt
//! `libnccl2`), a name cudarc 0.19 does not try (it tries `libnccl.so` and `libnccl.so.12`, ...).
//! When only `libnccl.so.2` exists, the error says where it is and the two commands that make it
//! loadable.

use std::path::{Path, PathBuf};

const SONAME: &str = "libnccl.so.2";

/// Ok when cudarc can load NCCL; otherwise why not, with the fix.
pub fn loadable() -> Result<(), String> {
    // SAFETY: only tries to dlopen NCCL under cudarc's names; nothing is called.
    if unsafe { cudarc::nccl::sys::is_culib_present() } {
        return Ok(());
    }
    Err(explain(find_in(&search_dirs()).as_deref()))
}

/// The message for a machine where cudarc cannot load NCCL, given where `libnccl.so.2` is.
pub fn explain(found: Option<&Path>) -> String {
    match found {
        Some(path) => format!(
            "NCCL is installed as {} but cudarc only loads it as libnccl.so: run `mkdir -p ~/.local/lib/mgtop && ln -sf {} ~/.local/lib/mgtop/libnccl.so` and `export LD_LIBRARY_PATH=~/.local/lib/mgtop:$LD_LIBRARY_PATH`",
            path.display(),
            path.display()
        ),
        None => format!(
            "NCCL ({SONAME}) was not found; multi-GPU training needs it: `pip install nvidia-nccl-cu12` (or conda `nccl`, or apt `libnccl2`), then make it loadable as libnccl.so (`ln -s .../{SONAME} DIR/libnccl.so` with DIR on LD_LIBRARY_PATH)"
        ),
    }
}

/// The first directory holding `libnccl.so.2`.
pub fn find_in(dirs: &[PathBuf]) -> Option<PathBuf> {
    dirs.iter().map(|d| d.join(SONAME)).find(|p| p.exists())
}

/// Where NCCL usually lives: LD_LIBRARY_PATH, the system library directories, CUDA's, and the
/// `nvidia/nccl/lib` directory of pip installs (active virtualenv or conda env, user and system
/// site-packages).
fn search_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("LD_LIBRARY_PATH")
        .map(|v| std::env::split_paths(&v).collect())
        .unwrap_or_default();
    for d in [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/lib",
        "/usr/local/cuda/lib64",
    ] {
        dirs.push(d.into());
    }
    let mut prefixes: Vec<PathBuf> = ["VIRTUAL_ENV", "CONDA_PREFIX"]
        .iter()
        .filter_map(std::env::var_os)
        .map(PathBuf::from)
        .collect();
    if let Some(conda) = std::env::var_os("CONDA_PREFIX") {
        dirs.push(PathBuf::from(conda).join("lib"));
    }
    if let Some(home) = std::env::var_os("HOME") {
        prefixes.push(PathBuf::from(home).join(".local"));
    }
    prefixes.push("/usr/local".into());
    prefixes.push("/usr".into());
    for prefix in prefixes {
        let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with("python3") {
                for site in ["site-packages", "dist-packages"] {
                    dirs.push(e.path().join(site).join("nvidia/nccl/lib"));
                }
            }
        }
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_soname_and_gives_the_exact_fix() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        let lib = dir.path().join("nvidia/nccl/lib");
        std::fs::create_dir_all(&empty).unwrap();
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join(SONAME), b"").unwrap();
        let found = find_in(&[empty.clone(), lib.clone()]).unwrap();
        assert_eq!(found, lib.join(SONAME));
        let fix = explain(Some(&found));
        assert!(
            fix.contains(&format!("ln -sf {}", found.display())),
            "{fix}"
        );
        assert!(fix.contains("LD_LIBRARY_PATH"), "{fix}");
        assert_eq!(find_in(&[empty]), None);
        assert!(explain(None).contains("pip install nvidia-nccl-cu12"));
    }
}
