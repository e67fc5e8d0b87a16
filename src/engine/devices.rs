//! Which devices a run trains on.

use crate::config::DeviceSpec;
use crate::gpu::{discover, Discovery, GpuInfo};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Device {
    /// A CPU worker thread standing in for a GPU.
    Cpu { index: usize },
}

impl Device {
    pub fn label(&self) -> String {
        match self {
            Device::Cpu { index } => format!("cpu{index}"),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DeviceError {
    #[error("--devices {requested} asks for GPUs but no GPU was found ({why}); use --devices auto or --devices cpu:N")]
    NoGpu { requested: String, why: String },
    #[error("--devices {requested}: there is no GPU {missing}; found {found}")]
    NoSuchGpu {
        requested: String,
        missing: usize,
        found: String,
    },
    #[error("--devices {requested}: found {found}, but this build cannot train on GPUs yet (the CUDA backend is in progress); use --devices cpu:N")]
    GpuBackendMissing { requested: String, found: String },
}

/// "0: NVIDIA A100 (80 GiB), 1: ..."
fn describe(gpus: &[GpuInfo]) -> String {
    gpus.iter()
        .map(|g| format!("{}: {} ({} GiB)", g.index, g.name, g.memory >> 30))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The number of cores this process may use.
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Resolves `--devices` to concrete devices, with a one-line note for the log where the
/// choice deserves one (fallback to CPU, more workers than cores).
pub fn resolve_devices(spec: &DeviceSpec) -> Result<(Vec<Device>, Option<String>), DeviceError> {
    let discovery = match spec {
        DeviceSpec::Cpu(_) => Discovery::None(String::new()),
        _ => discover(),
    };
    resolve_with(spec, &discovery, available_cores())
}

/// `resolve_devices` for a given GPU discovery and core count.
pub fn resolve_with(
    spec: &DeviceSpec,
    discovery: &Discovery,
    cores: usize,
) -> Result<(Vec<Device>, Option<String>), DeviceError> {
    let cpus = |n: usize| {
        (0..n)
            .map(|index| Device::Cpu { index })
            .collect::<Vec<_>>()
    };
    match spec {
        DeviceSpec::Auto => {
            let n = cores.max(2);
            let why = match discovery {
                Discovery::None(why) => format!("no GPU: {why}"),
                Discovery::Found(gpus) => format!(
                    "found {}, but this build cannot train on GPUs yet",
                    describe(gpus)
                ),
            };
            Ok((
                cpus(n),
                Some(format!(
                    "{why}; training on {n} CPU workers ({cores} cores)"
                )),
            ))
        }
        DeviceSpec::Cpu(n) => {
            let note = (*n > cores).then(|| format!("{n} CPU workers share {cores} cores: workers are oversubscribed and will slow each other"));
            Ok((cpus(*n), note))
        }
        DeviceSpec::Gpus(ids) => {
            let requested = spec.to_string();
            match discovery {
                Discovery::None(why) => Err(DeviceError::NoGpu {
                    requested,
                    why: why.clone(),
                }),
                Discovery::Found(gpus) => match ids.iter().find(|&&i| i >= gpus.len()) {
                    Some(&missing) => Err(DeviceError::NoSuchGpu {
                        requested,
                        missing,
                        found: describe(gpus),
                    }),
                    None => Err(DeviceError::GpuBackendMissing {
                        requested,
                        found: describe(gpus),
                    }),
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_falls_back_to_at_least_two_cpu_workers_with_a_note() {
        let (d, note) = resolve_devices(&DeviceSpec::Auto).unwrap();
        assert!(d.len() >= 2);
        assert!(note.unwrap().contains("CPU workers"));
    }

    #[test]
    fn gpu_ids_without_gpus_are_a_clear_error() {
        let e = resolve_devices(&DeviceSpec::Gpus(vec![0, 2]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("0,2") && e.contains("cpu:N"), "{e}");
    }

    #[test]
    fn discovery_shapes_the_fallback_note_and_the_errors() {
        let none = Discovery::None("no CUDA driver (libcuda.so.1) is installed".into());
        let (d, note) = resolve_with(&DeviceSpec::Auto, &none, 4).unwrap();
        assert_eq!(d.len(), 4);
        assert_eq!(
            note.unwrap(),
            "no GPU: no CUDA driver (libcuda.so.1) is installed; training on 4 CPU workers (4 cores)"
        );
        let two = Discovery::Found(vec![
            GpuInfo {
                index: 0,
                name: "NVIDIA A100".into(),
                memory: 80 << 30,
            },
            GpuInfo {
                index: 1,
                name: "NVIDIA A100".into(),
                memory: 80 << 30,
            },
        ]);
        let e = resolve_with(&DeviceSpec::Gpus(vec![0, 3]), &two, 4)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no GPU 3") && e.contains("1: NVIDIA A100 (80 GiB)"),
            "{e}"
        );
        let e = resolve_with(&DeviceSpec::Gpus(vec![1]), &two, 4)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cannot train on GPUs yet") && e.contains("cpu:N"),
            "{e}"
        );
        let (_, note) = resolve_with(&DeviceSpec::Auto, &two, 2).unwrap();
        assert!(note
            .unwrap()
            .starts_with("found 0: NVIDIA A100 (80 GiB), 1: NVIDIA A100"));
    }
}
