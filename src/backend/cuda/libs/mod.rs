//! Making the CUDA libraries loadable without the user's help. cudarc 0.19 loads NVRTC, cuBLAS
//! and NCCL by a fixed list of names (`libnvrtc.so`, `libnvrtc.so.12`, ...): it never tries
//! `libnccl.so.2` (the only name pip, conda and apt ship), nor CUDA 13's `libnvrtc.so.13` and
//! `libcublas.so.13`, and it does not look in pip's `site-packages/nvidia/*/lib` directories
//! (where PyTorch's CUDA libraries live) unless they are on LD_LIBRARY_PATH.
//!
//! So, at start and only where a library is missing under cudarc's names: find it (CUDA
//! toolkit, conda, pip wheels of CUDA 12 or 13, system directories), put a symlink with the name
//! cudarc tries first into a private directory, and run the program again with that directory
//! (and the libraries' own, for their dependencies) on LD_LIBRARY_PATH, which the dynamic loader
//! reads only when a process starts. `MGTOP_CUDA_LIBS` marks the second start (set it to `off`
//! to skip all this).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// A library cudarc loads by name.
#[derive(Clone, Copy, Debug)]
pub struct Wanted {
    pub what: &'static str,
    /// The name cudarc tries first, which the symlink gets.
    pub link: &'static str,
    /// The file names it is shipped as, newest CUDA first.
    pub files: &'static [&'static str],
    /// Its pip wheels for CUDA 12 and for CUDA 13 (`install` offers the one the driver takes).
    wheels: [&'static str; 2],
    /// Other ways to install it.
    elsewhere: &'static str,
    /// cudarc's check that it can load it under its names (only tries to dlopen it).
    present: unsafe fn() -> bool,
}

/// One library is one link name.
impl PartialEq for Wanted {
    fn eq(&self, other: &Wanted) -> bool {
        self.link == other.link
    }
}

impl Eq for Wanted {}

pub const NVRTC: Wanted = Wanted {
    what: "NVRTC",
    link: "libnvrtc.so",
    files: &["libnvrtc.so.13", "libnvrtc.so.12"],
    wheels: ["nvidia-cuda-nvrtc-cu12", "nvidia-cuda-nvrtc"],
    elsewhere: "conda `cuda-nvrtc`, or the CUDA toolkit",
    present: cudarc::nvrtc::sys::is_culib_present,
};
pub const CUBLAS: Wanted = Wanted {
    what: "cuBLAS",
    link: "libcublas.so",
    files: &["libcublas.so.13", "libcublas.so.12"],
    wheels: ["nvidia-cublas-cu12", "nvidia-cublas"],
    elsewhere: "conda `libcublas`, or the CUDA toolkit",
    present: cudarc::cublas::sys::is_culib_present,
};
pub const NCCL: Wanted = Wanted {
    what: "NCCL",
    link: "libnccl.so",
    files: &["libnccl.so.2"],
    wheels: ["nvidia-nccl-cu12", "nvidia-nccl-cu13"],
    elsewhere: "conda `nccl`, or apt `libnccl2`",
    present: cudarc::nccl::sys::is_culib_present,
};

/// Optional: convolutions go through cuDNN where it loads, through the own kernels otherwise.
pub const CUDNN: Wanted = Wanted {
    what: "cuDNN",
    link: "libcudnn.so",
    files: &["libcudnn.so.9"],
    wheels: ["nvidia-cudnn-cu12", "nvidia-cudnn-cu13"],
    elsewhere: "conda `cudnn`, or NVIDIA's cuDNN 9 packages",
    present: cudarc::cudnn::sys::is_culib_present,
};

/// The variable that marks a start with the links in place (or, set to `off`, turns this off).
pub const MARK: &str = "MGTOP_CUDA_LIBS";

impl Wanted {
    /// How to install it for this machine's driver (`driver_major`).
    pub fn install(&self) -> String {
        static MAJOR: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
        self.install_for(*MAJOR.get_or_init(driver_major))
    }

    /// How to install it for a driver that supports CUDA `major` (`None`: unknown, no driver):
    /// the wheel of the newest CUDA the driver runs alone (a CUDA 12 driver cannot load CUDA
    /// 13's; a newer driver runs either, and the newest is offered).
    pub fn install_for(&self, major: Option<u32>) -> String {
        let [twelve, thirteen] = self.wheels;
        let wheels = match major {
            Some(12) => format!("`pip install {twelve}` (CUDA 12, which this driver runs)"),
            Some(13..) => format!("`pip install {thirteen}` (CUDA 13, which this driver runs)"),
            Some(m) => format!("`pip install {twelve}` (CUDA 12) once the driver is upgraded (it runs CUDA {m}; 525 or newer runs CUDA 12)"),
            None => format!("`pip install {twelve}` (CUDA 12) or `pip install {thirteen}` (CUDA 13)"),
        };
        format!("{wheels}, or {}", self.elsewhere)
    }
    /// Whether cudarc can load it now.
    pub fn loadable(&self) -> bool {
        // SAFETY: only tries to dlopen the library under cudarc's names; nothing is called.
        unsafe { (self.present)() }
    }

    /// The file to link to: among `found` (in search order), the newest CUDA major that the
    /// driver supports (`driver_major`; any where unknown), first found of that major.
    pub fn choose<'a>(&self, found: &'a [PathBuf], driver_major: Option<u32>) -> Option<&'a Path> {
        self.files
            .iter()
            .filter(|f| match (major_of(f), driver_major) {
                (Some(m), Some(d)) => m <= d || self.files.len() == 1,
                _ => true,
            })
            .find_map(|f| {
                found
                    .iter()
                    .find(|p| p.file_name().is_some_and(|n| *n == **f))
            })
            .map(PathBuf::as_path)
    }
}

/// 13 for `libnvrtc.so.13`.
fn major_of(file: &str) -> Option<u32> {
    file.rsplit('.').next()?.parse().ok()
}

/// Every file of `wanted` in `dirs`, in search order.
pub fn find(wanted: &Wanted, dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for d in dirs {
        for f in wanted.files {
            let p = d.join(f);
            if p.is_file() && !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// Where CUDA libraries are installed, most specific first: LD_LIBRARY_PATH, the active conda
/// and virtual environments, every Python's `site-packages/nvidia/*/lib` (pip wheels, also the
/// ones PyTorch installs), the CUDA toolkits (newest first) and the system directories.
pub fn search_dirs() -> Vec<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    let mut dirs: Vec<PathBuf> = env("LD_LIBRARY_PATH")
        .map(|v| std::env::split_paths(&v).collect())
        .unwrap_or_default();
    if let Some(conda) = env("CONDA_PREFIX") {
        dirs.push(PathBuf::from(conda).join("lib"));
    }
    let mut sites: Vec<PathBuf> = Vec::new();
    let mut prefixes: Vec<PathBuf> = ["VIRTUAL_ENV", "CONDA_PREFIX"]
        .iter()
        .filter_map(|k| env(k))
        .map(PathBuf::from)
        .collect();
    if let Some(home) = env("HOME").map(PathBuf::from) {
        prefixes.push(home.join(".local"));
        prefixes.extend(subdirs(&home.join(".pyenv/versions")));
        for conda in ["miniconda3", "anaconda3", "miniforge3"] {
            prefixes.push(home.join(conda));
        }
    }
    prefixes.extend(
        subdirs(Path::new("/opt"))
            .into_iter()
            .flat_map(|o| [o.join(".venv"), o]),
    );
    prefixes.extend(["/usr/local", "/usr"].map(PathBuf::from));
    for prefix in prefixes {
        for py in subdirs(&prefix.join("lib")) {
            if py
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("python3"))
            {
                sites.push(py.join("site-packages"));
                sites.push(py.join("dist-packages"));
            }
        }
    }
    sites.extend(python_site_packages());
    for site in sites {
        // cu13 wheels share nvidia/cu13/lib; cu12 ones have nvidia/<package>/lib
        dirs.extend(
            subdirs(&site.join("nvidia"))
                .into_iter()
                .map(|p| p.join("lib")),
        );
    }
    let mut toolkits: Vec<PathBuf> = subdirs(Path::new("/usr/local"))
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("cuda"))
        })
        .collect();
    toolkits.sort_by_key(|p| std::cmp::Reverse(toolkit_version(p)));
    for t in toolkits {
        dirs.push(t.join("lib64"));
        dirs.push(t.join("targets/x86_64-linux/lib"));
        dirs.push(t.join("targets/sbsa-linux/lib"));
    }
    dirs.extend(
        [
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib/aarch64-linux-gnu",
            "/usr/lib64",
            "/usr/lib",
            "/usr/local/lib",
        ]
        .map(PathBuf::from),
    );
    let mut seen = Vec::new();
    dirs.retain(|d| {
        d.is_dir() && !seen.contains(d) && {
            seen.push(d.clone());
            true
        }
    });
    dirs
}

/// (13, 0) for /usr/local/cuda-13.0; /usr/local/cuda (the default link) first.
fn toolkit_version(p: &Path) -> (u32, u32) {
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match name.strip_prefix("cuda-") {
        Some(v) => {
            let mut it = v.split('.').map(|x| x.parse().unwrap_or(0));
            (it.next().unwrap_or(0), it.next().unwrap_or(0))
        }
        None => (u32::MAX, 0),
    }
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| {
            r.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The site-packages of the `python3` on PATH (where `pip install` put the wheels), if any.
fn python_site_packages() -> Vec<PathBuf> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import site, sys; print('\\n'.join(site.getsitepackages() + [site.getusersitepackages()]))",
        ])
        .stderr(std::process::Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(PathBuf::from)
            .collect(),
        _ => Vec::new(),
    }
}

/// The links to make: (library, file to link to) for each of `missing` found in `dirs`.
pub fn plan(
    missing: &[Wanted],
    dirs: &[PathBuf],
    driver_major: Option<u32>,
) -> Vec<(Wanted, PathBuf)> {
    missing
        .iter()
        .filter_map(|w| {
            let found = find(w, dirs);
            w.choose(&found, driver_major)
                .map(|p| (*w, p.to_path_buf()))
        })
        .collect()
}

/// Makes the links in `dir` (replacing older ones atomically, so concurrent starts agree).
pub fn link(dir: &Path, plan: &[(Wanted, PathBuf)]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (w, target) in plan {
        let tmp = dir.join(format!(".{}.{}", w.link, std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(target, &tmp)?;
        std::fs::rename(&tmp, dir.join(w.link))?;
    }
    Ok(())
}

/// LD_LIBRARY_PATH for the second start: the links, then each linked library's own directory
/// (its dependencies, e.g. cuBLASLt, NVRTC's builtins), then what it was.
pub fn library_path(dir: &Path, plan: &[(Wanted, PathBuf)], old: Option<OsString>) -> OsString {
    let mut parts = vec![dir.to_path_buf()];
    for (_, target) in plan {
        if let Some(p) = target.parent() {
            if !parts.iter().any(|x| x == p) {
                parts.push(p.to_path_buf());
            }
        }
    }
    if let Some(old) = old {
        parts.extend(std::env::split_paths(&old));
    }
    std::env::join_paths(parts).unwrap_or_default()
}

/// The private directory for the links: `$XDG_CACHE_HOME/mgtop/cuda-libs`, `~/.cache/...`,
/// else one under the temporary directory named for the user.
fn links_dir() -> PathBuf {
    crate::files::write::cache_dir("cuda-libs")
}

/// A name for a set of links: two processes with different libraries (two conda envs, two
/// machines sharing a home directory) never share a links directory.
fn plan_id(plan: &[(Wanted, PathBuf)]) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for (w, target) in plan {
        w.link.hash(&mut h);
        target.hash(&mut h);
    }
    format!("{:016x}", h.finish())
}

/// The CUDA major version the driver supports (13 for a 580 driver), if a driver is loadable.
fn driver_major() -> Option<u32> {
    // SAFETY: only tries to dlopen libcuda; the version query needs no initialisation.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return None;
    }
    // (a libcuda.so.1 without the function, not NVIDIA's driver, is none here: cudarc panics,
    // and a command that needs no GPU goes on; one that does is told then)
    let asked = std::panic::catch_unwind(|| {
        let mut v = 0;
        // SAFETY: the driver is loadable (checked above) and `v` is a valid out-pointer.
        let r = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) };
        r.result().ok().map(|()| v)
    });
    u32::try_from(asked.ok()?? / 1000).ok()
}

/// Called first thing by the binary: where a GPU driver is present (or `nvrtc_anyway`, for
/// `selftest`'s kernel compile) and a CUDA library is missing under cudarc's names but installed
/// elsewhere, links it and starts the program again; returns only where nothing needs doing or
/// the second start failed (the missing library is then explained where it is needed).
pub fn make_loadable(nvrtc_anyway: bool) {
    // `off`, or the links' folder a first start set for its second
    match std::env::var_os(MARK) {
        Some(v) if v == "off" || Path::new(&v).is_absolute() => return,
        Some(v) => crate::tell!(
            "note: {MARK}={}: only `off` turns the search for CUDA libraries off; searching as usual",
            v.to_string_lossy()
        ),
        None => {}
    }
    let driver = driver_major();
    let wanted: &[Wanted] = if driver.is_some() {
        &[NVRTC, CUBLAS, NCCL, CUDNN]
    } else if nvrtc_anyway {
        &[NVRTC]
    } else {
        return;
    };
    let missing: Vec<Wanted> = wanted.iter().copied().filter(|w| !w.loadable()).collect();
    if missing.is_empty() {
        return;
    }
    let plan = plan(&missing, &search_dirs(), driver);
    if plan.is_empty() {
        return;
    }
    let dir = links_dir().join(plan_id(&plan));
    if let Err(e) = link(&dir, &plan) {
        // (said here: where the library is needed it would read as not installed)
        let names: Vec<&str> = plan.iter().map(|(w, _)| w.what).collect();
        crate::tell!(
            "note: {} found but not linked where this program loads it from ({}: {e}); set XDG_CACHE_HOME to a folder this user can write, or put the libraries' folders on LD_LIBRARY_PATH",
            names.join(", "),
            dir.display()
        );
        return;
    }
    use std::os::unix::process::CommandExt;
    // (absolute: the second start knows it by that, and never starts a third)
    let dir = std::path::absolute(&dir).unwrap_or(dir);
    let mut args = std::env::args_os();
    let argv0 = args.next().unwrap_or_default();
    let err = std::process::Command::new("/proc/self/exe")
        .arg0(argv0)
        .args(args)
        .env(
            "LD_LIBRARY_PATH",
            library_path(&dir, &plan, std::env::var_os("LD_LIBRARY_PATH")),
        )
        .env(MARK, &dir)
        .exec();
    crate::tell!(
        "note: could not restart with the CUDA libraries found ({err}); continuing without them"
    );
}

/// Why a library cannot be loaded, with where it was found or how to install it.
pub fn explain(w: &Wanted, found: Option<&Path>) -> String {
    match found {
        Some(p) => format!(
            "{} is installed as {} but could not be loaded (unless {MARK}=off turned finding it off, it is not usable here; put {} on LD_LIBRARY_PATH to try it)",
            w.what,
            p.display(),
            p.parent().map_or_else(String::new, |d| d.display().to_string())
        ),
        None => format!(
            "{} ({}) was not found: {}",
            w.what,
            w.files.join(" or "),
            w.install()
        ),
    }
}

/// The file this process loaded for library `w` (as /proc/self/maps lists it), where it did.
pub fn loaded_from(w: &Wanted) -> Option<PathBuf> {
    let stem = w.link.trim_end_matches(".so");
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    (maps.lines())
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| {
            Path::new(p)
                .file_name()
                .is_some_and(|f| f.to_string_lossy().starts_with(&format!("{stem}.so")))
        })
        .map(PathBuf::from)
}

/// `explain` for a library cudarc cannot load, searching for it.
pub fn why_missing(w: &Wanted) -> String {
    let found = find(w, &search_dirs());
    explain(w, found.first().map(PathBuf::as_path))
}

#[cfg(test)]
mod tests;
