//! What a run's GPUs compute their products in: `--precision` (bf16 autocast and TF32 need
//! compute capability 8.0, Ampere, or newer), or for `auto`, where every GPU has them, bf16 for
//! the models it was measured faster on (`bf16_pays`) and TF32 for the rest, and fp32 where a
//! GPU lacks them. CPU workers always compute in fp32.

use super::{Device, EngineError};
use crate::backend::cuda::dnn;
use crate::nn::model::{Model, LARGE_SIDE};
use crate::nn::precision::{Precision, PrecisionFlag};

/// The first compute capability with TF32 and bf16 tensor cores (Ampere).
const TF32_ARCH: u32 = 80;

/// "GPU 1 (Tesla V100-SXM2-16GB, compute capability 7.0)"
fn describe(index: usize, name: &str, arch: u32) -> String {
    match arch {
        0 => format!("GPU {index} ({name}, compute capability unknown)"),
        a => format!(
            "GPU {index} ({name}, compute capability {}.{})",
            a / 10,
            a % 10
        ),
    }
}

/// Whether `auto` trains `model` in bf16 on GPUs that have it: its convolutions are the kind
/// an H100 ran faster in bf16 than in TF32 (`Model::dense_convs_on_large_images`: ResNet-50 at
/// 224x224 1.21x in NCHW, 1.27x channels last; MobileNetV2 and ResNet-20 ran slower), and
/// cuDNN loads and its bf16 convolutions pass their check on this process's first GPU of
/// `devices` (bf16 convolutions need it); Err: they would pay, but cuDNN cannot, and why.
/// (cuDNN is this process's to find: processes that differ there would differ in precision,
/// as they would in convolution algorithms.)
pub(crate) fn bf16_pays(model: &Model, devices: &[Device]) -> Result<bool, String> {
    let first = devices.iter().find_map(|d| match d {
        Device::Gpu { index, .. } => Some(*index),
        Device::Cpu { .. } => None,
    });
    match first {
        Some(index) if model.dense_convs_on_large_images() && dnn::wanted() => {
            dnn::bf16_trusted(index).map(|()| true)
        }
        _ => Ok(false),
    }
}

/// The run's precision over `devices` (every rank's), `auto` taking bf16 where `bf16_pays`
/// (asked only then: it may check cuDNN on a GPU), with a start-up note where it is not what
/// was asked for (or auto's bf16); an error names a GPU that cannot do what was asked and the
/// fix.
pub(super) fn resolve(
    flag: PrecisionFlag,
    devices: &[Device],
    bf16_pays: impl FnOnce() -> Result<bool, String>,
) -> Result<(Precision, Option<String>), EngineError> {
    let gpus: Vec<(usize, &str, u32)> = (devices.iter())
        .filter_map(|d| match d {
            Device::Gpu {
                index, name, arch, ..
            } => Some((*index, name.as_str(), *arch)),
            Device::Cpu { .. } => None,
        })
        .collect();
    if gpus.is_empty() {
        let note = (flag.0.filter(|&p| p != Precision::Fp32))
            .map(|p| format!("--precision {p} applies to GPUs: CPU workers compute in fp32"));
        return Ok((Precision::Fp32, note));
    }
    let without = (gpus.iter()).find(|(_, _, arch)| *arch < TF32_ARCH);
    match (flag.0, without) {
        (Some(Precision::Fp32), _) => Ok((Precision::Fp32, None)),
        // an unknown architecture is the user's to vouch for when asking for TF32
        (Some(p), Some(&(i, name, arch))) if arch > 0 => Err(EngineError::Config(format!(
            "--precision {p}: {} has no {} tensor cores (they need compute capability 8.0, Ampere, or newer): use --precision fp32",
            describe(i, name, arch),
            p.name().to_uppercase()
        ))),
        (Some(p), _) => Ok((p, None)),
        (None, None) => Ok(match bf16_pays() {
            Ok(true) => (
                Precision::Bf16,
                Some(format!(
                    "precision auto: bf16, measured faster than TF32 for dense convolutions on images of {LARGE_SIDE}x{LARGE_SIDE} or more (--precision tf32 keeps TF32)"
                )),
            ),
            Ok(false) => (Precision::Tf32, None),
            Err(why) => (
                Precision::Tf32,
                Some(format!(
                    "precision auto: TF32, not bf16 (faster for these convolutions, but bf16 convolutions need cuDNN, and {why})"
                )),
            ),
        }),
        (None, Some(&(i, name, arch))) => Ok((
            Precision::Fp32,
            Some(format!(
                "precision auto: fp32, since {} has no TF32 tensor cores",
                describe(i, name, arch)
            )),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: usize, name: &str, arch: u32) -> Device {
        Device::Gpu {
            index,
            name: name.into(),
            pci_bus_id: None,
            arch,
        }
    }

    fn flag(s: &str) -> PrecisionFlag {
        s.parse().unwrap()
    }

    #[test]
    fn auto_takes_tf32_where_every_gpu_has_it_and_says_why_not_otherwise() {
        let h100s = [gpu(0, "NVIDIA H100", 90), gpu(1, "NVIDIA H100", 90)];
        assert_eq!(
            resolve(flag("auto"), &h100s, || Ok(false)).unwrap(),
            (Precision::Tf32, None)
        );
        let mixed = [
            gpu(0, "NVIDIA A100", 80),
            gpu(1, "Tesla V100-SXM2-16GB", 70),
        ];
        let (p, note) = resolve(flag("auto"), &mixed, || Ok(false)).unwrap();
        assert_eq!(p, Precision::Fp32);
        let note = note.unwrap();
        assert!(
            note.contains("GPU 1 (Tesla V100-SXM2-16GB, compute capability 7.0)"),
            "{note}"
        );
        // a GPU whose architecture is not known is not assumed to have TF32
        let (p, note) = resolve(flag("auto"), &[gpu(0, "GPU", 0)], || Ok(false)).unwrap();
        assert_eq!(p, Precision::Fp32);
        assert!(note.unwrap().contains("compute capability unknown"));
    }

    #[test]
    fn auto_takes_bf16_where_it_pays_and_says_so_and_never_on_gpus_without_it() {
        let h100 = [gpu(0, "NVIDIA H100", 90)];
        let (p, note) = resolve(flag("auto"), &h100, || Ok(true)).unwrap();
        assert_eq!(p, Precision::Bf16);
        let note = note.unwrap();
        assert!(
            note.contains("precision auto: bf16") && note.contains("--precision tf32"),
            "{note}"
        );
        // where it would pay but cuDNN cannot, TF32, and why: the run goes on
        let broken =
            || Err("cuDNN 9.1.0 failed its check on GPU 0 (CUDNN_STATUS_NOT_SUPPORTED)".into());
        let (p, note) = resolve(flag("auto"), &h100, broken).unwrap();
        assert_eq!(p, Precision::Tf32);
        let note = note.unwrap();
        assert!(
            note.contains("precision auto: TF32") && note.contains("NOT_SUPPORTED"),
            "{note}"
        );
        // asked for: kept, whether or not it pays
        assert_eq!(
            resolve(flag("tf32"), &h100, || Ok(true)).unwrap(),
            (Precision::Tf32, None)
        );
        // a GPU without bf16 tensor cores, or CPU workers: as before, never asking (asking may
        // look for cuDNN)
        let ask = || -> Result<bool, String> { unreachable!("asked whether bf16 pays") };
        let v100 = [gpu(0, "NVIDIA H100", 90), gpu(1, "Tesla V100", 70)];
        assert_eq!(
            resolve(flag("auto"), &v100, ask).unwrap().0,
            Precision::Fp32
        );
        let cpus = [Device::Cpu { index: 0 }];
        assert_eq!(
            resolve(flag("auto"), &cpus, ask).unwrap(),
            (Precision::Fp32, None)
        );
        assert_eq!(
            resolve(flag("tf32"), &h100, ask).unwrap(),
            (Precision::Tf32, None)
        );
    }

    #[test]
    fn an_explicit_choice_is_kept_or_refused_naming_the_gpu_and_the_fix() {
        let h100 = [gpu(0, "NVIDIA H100", 90)];
        for p in [Precision::Fp32, Precision::Tf32, Precision::Bf16] {
            let f = PrecisionFlag(Some(p));
            assert_eq!(resolve(f, &h100, || Ok(false)).unwrap(), (p, None));
        }
        let v100 = [gpu(3, "Tesla V100-SXM2-16GB", 70)];
        let e = resolve(flag("tf32"), &v100, || Ok(false))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("GPU 3 (Tesla V100-SXM2-16GB, compute capability 7.0)")
                && e.contains("use --precision fp32"),
            "{e}"
        );
        assert_eq!(
            resolve(flag("fp32"), &v100, || Ok(false)).unwrap(),
            (Precision::Fp32, None)
        );
        let e = resolve(flag("bf16"), &v100, || Ok(false))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--precision bf16") && e.contains("no BF16 tensor cores"),
            "{e}"
        );
    }

    #[test]
    fn cpu_workers_compute_in_fp32_and_say_so_when_asked_otherwise() {
        let cpus = [Device::Cpu { index: 0 }, Device::Cpu { index: 1 }];
        assert_eq!(
            resolve(flag("auto"), &cpus, || Ok(false)).unwrap(),
            (Precision::Fp32, None)
        );
        assert_eq!(
            resolve(flag("fp32"), &cpus, || Ok(false)).unwrap(),
            (Precision::Fp32, None)
        );
        for asked in ["tf32", "bf16"] {
            let (p, note) = resolve(flag(asked), &cpus, || Ok(false)).unwrap();
            assert_eq!(p, Precision::Fp32);
            assert!(note.unwrap().contains("CPU workers compute in fp32"));
        }
    }
}
