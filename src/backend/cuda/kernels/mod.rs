//! The CUDA kernels (`kernels/*.cu`, embedded, each compiled after the prelude
//! `kernels/elem.cuh`) and their compilation with NVRTC, which is loaded at run time: the
//! crate builds and runs without CUDA, and a missing NVRTC is an answer, never a panic. Kernels are compiled to CUBIN for the GPU's own architecture (capped
//! at what this NVRTC knows), once per architecture per process, the files side by side on the
//! machine's cores, and kept on disk (`cache`) for the next run.

mod cache;
pub use cache::check_env as check_cache_env;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

/// What every kernel source is compiled after (`compile` prepends it): the grid-stride loop,
/// the bf16 element type and its conversions, and `ld`/`st`, the element access one template
/// body uses for its fp32 kernel and its bf16 twin.
pub const PRELUDE: &str = include_str!("../../../../kernels/elem.cuh");

/// The headers a kernel source may include (`#include "bn.cuh"`), by file name: `expand`
/// puts them in place before NVRTC sees the source (NVRTC has no file system to search).
pub const HEADERS: &[(&str, &str)] = &[
    ("bn.cuh", include_str!("../../../../kernels/bn.cuh")),
    ("window.cuh", include_str!("../../../../kernels/window.cuh")),
];

/// Every kernel source, by file name.
pub const SOURCES: &[(&str, &str)] = &[
    ("bias.cu", include_str!("../../../../kernels/bias.cu")),
    ("relu.cu", include_str!("../../../../kernels/relu.cu")),
    (
        "softmax_xent.cu",
        include_str!("../../../../kernels/softmax_xent.cu"),
    ),
    ("optim.cu", include_str!("../../../../kernels/optim.cu")),
    ("scale.cu", include_str!("../../../../kernels/scale.cu")),
    ("metrics.cu", include_str!("../../../../kernels/metrics.cu")),
    ("conv.cu", include_str!("../../../../kernels/conv.cu")),
    ("pool.cu", include_str!("../../../../kernels/pool.cu")),
    ("gather.cu", include_str!("../../../../kernels/gather.cu")),
    ("eltwise.cu", include_str!("../../../../kernels/eltwise.cu")),
    ("bn.cu", include_str!("../../../../kernels/bn.cu")),
    ("bn_nhwc.cu", include_str!("../../../../kernels/bn_nhwc.cu")),
    (
        "depthwise.cu",
        include_str!("../../../../kernels/depthwise.cu"),
    ),
    (
        "depthwise_nhwc.cu",
        include_str!("../../../../kernels/depthwise_nhwc.cu"),
    ),
    ("avgpool.cu", include_str!("../../../../kernels/avgpool.cu")),
    ("convert.cu", include_str!("../../../../kernels/convert.cu")),
    ("layout.cu", include_str!("../../../../kernels/layout.cu")),
];

/// `src` (kernel file `file`) with each `#include "NAME"` line replaced by header NAME of
/// [`HEADERS`], between `#line` directives so that NVRTC's line numbers name the header's
/// lines and then `file`'s again. An unknown header is an error naming it.
pub fn expand(file: &str, src: &str) -> Result<String, String> {
    let mut out = String::with_capacity(src.len());
    for (n, line) in src.lines().enumerate() {
        let included = line.trim().strip_prefix("#include \"");
        match included.and_then(|rest| rest.strip_suffix('"')) {
            Some(name) => {
                let (_, text) = (HEADERS.iter().find(|(h, _)| *h == name)).ok_or_else(|| {
                    format!("kernels/{file} includes {name}, which is not in HEADERS (src/backend/cuda/kernels/mod.rs)")
                })?;
                out.push_str(&format!(
                    "#line 1 \"{name}\"\n{text}\n#line {} \"{file}\"\n",
                    n + 2
                ));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    Ok(out)
}

/// The `extern "C"` kernel names a source defines: `{op}_f32`, after the element type of the
/// activations they work on, and `{op}_bf16`, the twin of a kernel that reads or writes
/// activations, for bf16 activations (parameters, their gradients and statistics stay fp32);
/// `f32_to_bf16`, `bf16_to_f32` and `bf16_add_to_f32` for the conversions.
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

/// The NVRTC that loads, as `12.9`: where it loads and has the version query (cudarc panics on
/// a function the library lacks).
pub fn nvrtc_release() -> Option<String> {
    if !nvrtc_available() {
        return None;
    }
    let asked = std::panic::catch_unwind(nvrtc_version);
    asked
        .ok()
        .flatten()
        .map(|(major, minor)| format!("{major}.{minor}"))
}

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("NVRTC (libnvrtc) was not found: install it ({}) and add its lib directory to LD_LIBRARY_PATH", crate::backend::cuda::libs::NVRTC.install())]
    NoNvrtc,
    #[error("kernels/{file} does not compile for {arch}:\n{log}")]
    Compile {
        file: String,
        arch: String,
        log: String,
    },
    #[error("NVRTC {what}: {detail}")]
    Nvrtc { what: &'static str, detail: String },
}

/// What a kernel source is compiled to for one GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// Machine code for exactly this architecture (`sm_90` = 90): what a driver loads whatever
    /// its age, since no PTX needs translating (PTX from a newer NVRTC than the driver is
    /// refused with CUDA_ERROR_UNSUPPORTED_PTX_VERSION).
    Cubin(u32),
    /// PTX for this virtual architecture, for a GPU newer than this NVRTC knows: the driver,
    /// newer than the NVRTC, compiles it.
    Ptx(u32),
}

impl Target {
    /// The target for a device of compute capability `device` (major*10 + minor) given the
    /// architectures this NVRTC supports: its own CUBIN where NVRTC knows it; else CUBIN for
    /// the newest supported one of the same major (binary compatible with later minors); else
    /// PTX for the newest supported one, which the driver compiles. `None`: NVRTC supports
    /// nothing at or below the device.
    pub fn for_device(device: u32, supported: &[u32]) -> Option<Target> {
        if supported.contains(&device) {
            return Some(Target::Cubin(device));
        }
        let below = supported.iter().copied().filter(|&a| a <= device);
        if let Some(same_major) = below.clone().filter(|a| a / 10 == device / 10).max() {
            return Some(Target::Cubin(same_major));
        }
        below.max().map(Target::Ptx)
    }

    /// NVRTC's `--gpu-architecture` value.
    pub fn arch(&self) -> String {
        match self {
            Target::Cubin(a) => format!("sm_{a}"),
            Target::Ptx(a) => format!("compute_{a}"),
        }
    }
}

/// A compiled kernel file: CUBIN bytes or PTX text, as its target says.
#[derive(Clone, Debug)]
pub struct Image {
    pub file: &'static str,
    pub target: Target,
    pub bytes: Vec<u8>,
    /// Compiled by NVRTC just now (not read back from the kernel cache).
    pub compiled: bool,
}

impl Image {
    /// What the driver loads (`CudaContext::load_module`).
    pub fn module(&self) -> cudarc::nvrtc::Ptx {
        match self.target {
            Target::Cubin(_) => cudarc::nvrtc::Ptx::from_binary(self.bytes.clone()),
            Target::Ptx(_) => {
                cudarc::nvrtc::Ptx::from_src(String::from_utf8_lossy(&self.bytes).into_owned())
            }
        }
    }
}

/// The architectures this NVRTC can compile for (major*10 + minor, ascending).
pub fn supported_archs() -> Result<Vec<u32>, KernelError> {
    use cudarc::nvrtc::sys;
    if !nvrtc_available() {
        return Err(KernelError::NoNvrtc);
    }
    let err = |what| {
        move |e: sys::nvrtcResult| KernelError::Nvrtc {
            what,
            detail: format!("{e:?}"),
        }
    };
    let mut n: std::ffi::c_int = 0;
    // SAFETY: NVRTC is loadable (checked above); `n` is a valid out-pointer.
    unsafe { sys::nvrtcGetNumSupportedArchs(&mut n) }
        .result()
        .map_err(|e| err("number of supported architectures")(e.0))?;
    let mut archs = vec![0 as std::ffi::c_int; n.max(0) as usize];
    // SAFETY: `archs` has room for the `n` entries NVRTC said it will write.
    unsafe { sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) }
        .result()
        .map_err(|e| err("supported architectures")(e.0))?;
    let mut archs: Vec<u32> = archs
        .into_iter()
        .filter_map(|a| u32::try_from(a).ok())
        .collect();
    archs.sort_unstable();
    Ok(archs)
}

/// Compiles one source, after the [`PRELUDE`], for `target`; a compile error carries NVRTC's
/// log, its line numbers those of `file` (or of `elem.cuh` for the prelude).
pub fn compile(file: &'static str, src: &str, target: Target) -> Result<Image, KernelError> {
    if !nvrtc_available() {
        return Err(KernelError::NoNvrtc);
    }
    compile_source(file, &full_source(file, src, target)?, target)
}

/// What NVRTC compiles for kernel file `file`: the prelude, then the source with its headers in
/// place.
fn full_source(file: &'static str, src: &str, target: Target) -> Result<String, KernelError> {
    let src = expand(file, src).map_err(|log| KernelError::Compile {
        file: file.into(),
        arch: target.arch(),
        log,
    })?;
    Ok(format!(
        "#line 1 \"elem.cuh\"\n{PRELUDE}\n#line 1 \"{file}\"\n{src}"
    ))
}

/// NVRTC's options for `target`.
fn options(target: Target) -> Vec<String> {
    vec![format!("--gpu-architecture={}", target.arch())]
}

/// NVRTC's version (major, minor), where it answers.
fn nvrtc_version() -> Option<(i32, i32)> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: NVRTC is loadable (the callers check); both out-pointers are live locals
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .ok()
        .map(|()| (major, minor))
}

/// Compiles `full` (kernel file `file` after `full_source`) for `target`.
fn compile_source(file: &'static str, full: &str, target: Target) -> Result<Image, KernelError> {
    use cudarc::nvrtc::{result, sys};
    let arch = target.arch();
    let nvrtc = |what| {
        move |e: cudarc::nvrtc::result::NvrtcError| KernelError::Nvrtc {
            what,
            detail: format!("{e:?}"),
        }
    };
    let src_c = std::ffi::CString::new(full).map_err(|_| KernelError::Compile {
        file: file.into(),
        arch: arch.clone(),
        log: "the source holds a NUL byte".into(),
    })?;
    let name = std::ffi::CString::new(file).expect("file names have no NUL");
    // the program is destroyed below on every path
    let prog = result::create_program(&src_c, Some(&name)).map_err(nvrtc("create program"))?;
    let opts = options(target);
    // SAFETY: `prog` was created above and is destroyed only after the last use below.
    let out = unsafe {
        match result::compile_program(prog, &opts) {
            Err(_) => {
                let log = result::get_program_log(prog)
                    .map(|l| {
                        let bytes: Vec<u8> = l.iter().map(|&c| c as u8).collect();
                        String::from_utf8_lossy(&bytes)
                            .trim_end_matches('\0')
                            .to_string()
                    })
                    .unwrap_or_default();
                Err(KernelError::Compile {
                    file: file.into(),
                    arch: arch.clone(),
                    log,
                })
            }
            Ok(()) => match target {
                Target::Cubin(_) => {
                    let mut size = 0usize;
                    sys::nvrtcGetCUBINSize(prog, &mut size)
                        .result()
                        .map_err(nvrtc("CUBIN size"))
                        .and_then(|()| {
                            let mut bytes = vec![0u8; size];
                            sys::nvrtcGetCUBIN(prog, bytes.as_mut_ptr().cast())
                                .result()
                                .map(|()| bytes)
                                .map_err(nvrtc("CUBIN"))
                        })
                }
                Target::Ptx(_) => result::get_ptx(prog)
                    .map(|p| p.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect())
                    .map_err(nvrtc("PTX")),
            },
        }
    };
    // SAFETY: `prog` is not used after this.
    let _ = unsafe { result::destroy_program(prog) };
    Ok(Image {
        file,
        target,
        bytes: out?,
        compiled: true,
    })
}

/// The kernels compiled in this process, per device architecture, with the line telling so
/// where no caller has taken it yet (`untaken`).
type Compiled = HashMap<u32, (Arc<Vec<Image>>, Option<String>)>;
static COMPILED: OnceLock<Mutex<Compiled>> = OnceLock::new();

fn compiled() -> std::sync::MutexGuard<'static, Compiled> {
    (COMPILED.get_or_init(Default::default).lock()).unwrap_or_else(|e| e.into_inner())
}

/// Every file of `kernels/` compiled for a device of compute capability `device`, once per
/// architecture per process (every GPU of the same model, and every selftest check, shares it),
/// and, for the call that had NVRTC compile any of them, a line telling so (a first start, or
/// the first after an update, waits for it).
pub fn for_device(device: u32) -> Result<(Arc<Vec<Image>>, Option<String>), KernelError> {
    // held while compiling: GPUs opening at once wait for the first to compile their arch
    let mut cache = compiled();
    if let Some((images, note)) = cache.get_mut(&device) {
        return Ok((images.clone(), note.take()));
    }
    let supported = supported_archs()?;
    let target = Target::for_device(device, &supported).ok_or_else(|| KernelError::Compile {
        file: "*".into(),
        arch: format!("sm_{device}"),
        log: format!(
            "this NVRTC supports {supported:?}, nothing at or below the GPU's architecture: use the NVRTC of an older CUDA release"
        ),
    })?;
    let dir = cache::dir();
    let t0 = std::time::Instant::now();
    let images = compile_each(target, dir.as_deref())
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    let note = compiled_note(&images, target, t0.elapsed(), dir.as_deref());
    let images = Arc::new(images);
    cache.insert(device, (images.clone(), None));
    Ok((images, note))
}

/// Gives back the line `for_device` told of compiling for `device`, for its next caller to
/// tell: a GPU opened only for a check before the run's (`--precision auto`'s cuDNN check) did
/// not say it, and the run's start waited for the compiling all the same.
pub fn untaken(device: u32, note: Option<String>) {
    if let (Some(entry), Some(note)) = (compiled().get_mut(&device), note) {
        entry.1 = Some(note);
    }
}

/// What a start that compiled kernels tells: how many, for what, how long, and whether the
/// next start reads them back.
fn compiled_note(
    images: &[Image],
    target: Target,
    took: std::time::Duration,
    kept: Option<&Path>,
) -> Option<String> {
    let compiled = images.iter().filter(|i| i.compiled).count();
    let then = match kept {
        Some(dir) => format!("kept in {}: the next start reads them", dir.display()),
        None => "MGTOP_KERNEL_CACHE=off: every start compiles them".into(),
    };
    (compiled > 0).then(|| {
        format!(
            "compiled {compiled} of {} kernel files for {} in {:.1} s ({then})",
            images.len(),
            target.arch(),
            took.as_secs_f64()
        )
    })
}

/// Every file of `kernels/` compiled for `target`, in `SOURCES`' order, the files side by side
/// on the machine's cores (NVRTC compiles each on one; a GPU run's start waited for them one
/// after another). With a cache directory, each file compiled there before for the same source,
/// options and NVRTC is read back instead, and each one compiled is put there.
pub fn compile_each(target: Target, cache: Option<&Path>) -> Vec<Result<Image, KernelError>> {
    if !nvrtc_available() {
        return SOURCES.iter().map(|_| Err(KernelError::NoNvrtc)).collect();
    }
    let version = nvrtc_version();
    let one = |(file, src): (&'static str, &str)| -> Result<Image, KernelError> {
        let full = full_source(file, src, target)?;
        // (an NVRTC that does not say its version keeps nothing: an update would not show)
        let key = version.map(|v| cache::key(&full, &options(target), v));
        let kept = cache.zip(key.as_deref());
        if let Some(bytes) = kept.and_then(|(dir, key)| cache::load(dir, key, target)) {
            return Ok(Image {
                file,
                target,
                bytes,
                compiled: false,
            });
        }
        let image = compile_source(file, &full, target)?;
        if let Some((dir, key)) = kept {
            cache::store(dir, key, target, &image.bytes);
        }
        Ok(image)
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    crate::parallel::map_in_order(SOURCES, cores, 1, |&source| one(source), |_| {})
}

#[cfg(test)]
mod tests;
