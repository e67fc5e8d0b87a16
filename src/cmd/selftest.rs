//! `mgtop-train selftest`: what this machine offers the CUDA path, every kernel through NVRTC,
//! and every GPU checked against the CPU reference.

use crate::nn::precision::GradDtype;
use std::process::ExitCode;

/// `selftest`: what this machine offers the CUDA path, and every kernel through NVRTC.
pub fn command() -> anyhow::Result<ExitCode> {
    use crate::backend::cuda::discover::{discover, Discovery};
    use crate::backend::cuda::kernels::{
        compile_each, entry_points, nvrtc_available, nvrtc_release, supported_archs, Target,
        SOURCES,
    };
    let gpus = discover();
    match &gpus {
        Discovery::None(why) => crate::say!("GPU: none ({why})"),
        Discovery::Found(g) => {
            for gpu in g {
                crate::say!(
                    "GPU {}: {} ({} GiB, sm_{}, PCI {})",
                    gpu.index,
                    gpu.name,
                    gpu.memory >> 30,
                    gpu.arch,
                    gpu.pci_bus_id.as_deref().unwrap_or("?")
                );
            }
        }
    }
    let mut failed = false;
    if nvrtc_available() {
        let archs = supported_archs().map_or_else(|e| e.to_string(), |a| format!("{a:?}"));
        crate::say!(
            "NVRTC: {} (architectures {archs}); compiling kernels/ to CUBIN for sm_80 and sm_90",
            found(nvrtc_release(), &crate::backend::cuda::libs::NVRTC)
        );
        // every file, not one kept from an earlier run: this checks the NVRTC at hand
        let sm = [80, 90].map(|arch| compile_each(Target::Cubin(arch), None));
        let mut sm = sm.map(Vec::into_iter);
        for (file, src) in SOURCES {
            for (arch, images) in [80, 90].into_iter().zip(&mut sm) {
                match images.next().expect("an image a file") {
                    Ok(image) => crate::say!(
                        "  ok   {file:<16} sm_{arch}  {:>6} bytes  {}",
                        image.bytes.len(),
                        entry_points(src).join(" ")
                    ),
                    Err(e) => {
                        failed = true;
                        crate::say!("  FAIL {e}");
                    }
                }
            }
        }
    } else {
        crate::say!(
            "NVRTC: not found; kernels not compiled. Install it to check them: {}",
            crate::backend::cuda::libs::NVRTC.install()
        );
    }
    cudnn_line();
    if failed {
        return Ok(ExitCode::from(1));
    }
    match gpus {
        // (a driver installed that does not start is a failure: a script's `selftest &&` must
        // not go on to train on the CPU unknowingly)
        Discovery::None(_) => match crate::backend::cuda::discover::driver_broken() {
            Some(why) => {
                crate::say!("the GPUs cannot be checked: {why}");
                Ok(ExitCode::from(1))
            }
            None => {
                crate::say!("no GPU: nothing to compare against the CPU reference; the CPU backend is what trains here");
                Ok(ExitCode::SUCCESS)
            }
        },
        Discovery::Found(found) => {
            use crate::backend::cuda::{selftest, Libraries};
            let libs = Libraries::probe();
            // the single-GPU checks need no NCCL
            if let Some(missing) = libs.missing_for(1) {
                crate::say!("the GPUs cannot be checked: {missing}");
                return Ok(ExitCode::from(1));
            }
            match &libs.nccl {
                None => crate::say!("NCCL: found"),
                Some(why) => crate::say!(
                    "NCCL: {why}; the all-reduce check is skipped, and training on more than one GPU needs it"
                ),
            }
            let ids: Vec<String> = found.iter().filter_map(|g| g.pci_bus_id.clone()).collect();
            match crate::observe::nvml::Nvml::open(&ids) {
                Ok(nvml) => {
                    let readable = nvml.sample().iter().filter(|s| s.util.is_some()).count();
                    crate::say!(
                        "NVML: found; telemetry readable on {readable} of {} GPUs",
                        found.len()
                    );
                }
                Err(why) => {
                    crate::say!("NVML: {why}; GPU telemetry will show n/a (training is unaffected)")
                }
            }
            crate::say!(
                "checking every GPU against the CPU reference (pass: |gpu-cpu| <= tol + eps*|cpu|)"
            );
            let mut checks = Vec::new();
            for g in &found {
                checks.extend(selftest::gpu_checks(g.index));
            }
            if libs.nccl.is_none() {
                // with one GPU too: a 1-rank communicator is initialised, used and aborted
                for wire in [GradDtype::Fp32, GradDtype::Bf16] {
                    checks.push(selftest::nccl_check(found.len(), wire));
                }
                checks.extend(selftest::nccl_gives_up_checks());
            }
            for line in selftest::table(&checks) {
                crate::say!("  {line}");
            }
            let failed = checks.iter().filter(|c| !c.passed()).count();
            if failed > 0 {
                crate::say!("{failed} check(s) FAILED: do not train on these GPUs with this build; please report the table above");
                Ok(ExitCode::from(1))
            } else {
                crate::say!(
                    "all {} checks passed: the GPUs train as the CPU reference does",
                    checks.len()
                );
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}

/// A library found: its version where known, and the file loaded.
fn found(version: Option<String>, lib: &crate::backend::cuda::libs::Wanted) -> String {
    let version = version.unwrap_or_else(|| "found".to_string());
    match crate::backend::cuda::libs::loaded_from(lib) {
        Some(p) => format!("{version}, {}", p.display()),
        None => version,
    }
}

/// What GPU convolutions go through here: cuDNN (its version and file), or the own kernels
/// and why.
fn cudnn_line() {
    use crate::backend::cuda::{dnn, libs};
    let loaded = || found(Some(dnn::version()), &libs::CUDNN);
    if dnn::wanted() {
        crate::say!("cuDNN: {}; GPU convolutions go through it", loaded());
    } else if dnn::available() {
        crate::say!(
            "cuDNN: {}; MGTOP_CUDNN=off: GPU convolutions use the own kernels",
            loaded()
        );
    } else if let Some(v) = dnn::too_old() {
        crate::say!("cuDNN: {v}, older than the 9 its convolutions need: GPUs use the own kernels; for cuDNN's faster ones, install cuDNN 9: {}", libs::CUDNN.install());
    } else {
        crate::say!(
            "cuDNN: not found: GPUs convolve with the own kernels; for cuDNN's faster ones, install it: {}",
            libs::CUDNN.install()
        );
    }
}
