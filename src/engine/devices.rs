//! Which devices a run trains on.

use crate::config::DeviceSpec;

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
    #[error("--devices {requested} asks for GPUs but no GPU was found (found: 0 GPUs; this build has no CUDA backend yet); use --devices auto or --devices cpu:N")]
    NoGpu { requested: String },
}

/// The number of cores this process may use.
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Resolves `--devices` to concrete devices, with a one-line note for the log where the
/// choice deserves one (fallback to CPU, more workers than cores).
pub fn resolve_devices(spec: &DeviceSpec) -> Result<(Vec<Device>, Option<String>), DeviceError> {
    let cores = available_cores();
    let cpus = |n: usize| {
        (0..n)
            .map(|index| Device::Cpu { index })
            .collect::<Vec<_>>()
    };
    match spec {
        DeviceSpec::Auto => {
            let n = cores.max(2);
            Ok((
                cpus(n),
                Some(format!(
                    "no GPU backend available: training on {n} CPU workers ({cores} cores)"
                )),
            ))
        }
        DeviceSpec::Cpu(n) => {
            let note = (*n > cores).then(|| format!("{n} CPU workers share {cores} cores: workers are oversubscribed and will slow each other"));
            Ok((cpus(*n), note))
        }
        DeviceSpec::Gpus(ids) => Err(DeviceError::NoGpu {
            requested: DeviceSpec::Gpus(ids.clone()).to_string(),
        }),
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
}
