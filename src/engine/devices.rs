//! Which devices a run trains on.

use crate::backend::cuda::discover::{discover, Discovery, GpuInfo};
use crate::backend::cuda::Libraries;
use crate::config::DeviceSpec;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Device {
    /// A CPU worker thread standing in for a GPU.
    Cpu { index: usize },
    /// A GPU by CUDA ordinal, trained on by its own worker thread.
    Gpu {
        index: usize,
        name: String,
        pci_bus_id: Option<String>,
        /// Compute capability as major*10 + minor (90 for an H100); 0 where unknown.
        arch: u32,
    },
}

impl Device {
    pub fn label(&self) -> String {
        match self {
            Device::Cpu { index } => format!("cpu{index}"),
            Device::Gpu { index, .. } => format!("gpu{index}"),
        }
    }

    /// `cpu0`, or `nodeB/cpu0` where the run names its ranks' hosts.
    pub fn label_on(&self, host: Option<&str>) -> String {
        match host {
            Some(h) => format!("{h}/{}", self.label()),
            None => self.label(),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DeviceError {
    #[error("--devices {requested} asks for GPUs but no GPU was found ({why}); use --devices auto or --devices cpu:N")]
    NoGpu { requested: String, why: String },
    #[error(
        "--devices {requested}: there is no GPU {missing}; found {found}{}",
        renumbered_by(visible)
    )]
    NoSuchGpu {
        requested: String,
        missing: usize,
        found: String,
        /// `CUDA_VISIBLE_DEVICES`, where it is set (it renumbers the GPUs).
        visible: Option<String>,
    },
    #[error("--devices {requested}: found {found}, but {missing}; or use --devices cpu:N")]
    GpuLibrariesMissing {
        requested: String,
        found: String,
        missing: String,
    },
    #[error(
        "--devices {requested} names GPU {twice} twice; list each GPU once, e.g. --devices 0,1"
    )]
    Repeated { requested: String, twice: usize },
}

/// What `CUDA_VISIBLE_DEVICES` (`visible`, where set) does to the GPUs' numbers.
pub fn renumbered_by(visible: &Option<String>) -> String {
    visible.as_ref().map_or(String::new(), |v| {
        format!(
            " (CUDA_VISIBLE_DEVICES={v} is set: GPUs are numbered from 0 among those it leaves)"
        )
    })
}

/// The GPUs `ids` of those found, as devices.
fn gpus(all: &[GpuInfo], ids: &[usize]) -> Vec<Device> {
    ids.iter()
        .map(|&i| Device::Gpu {
            index: i,
            name: all[i].name.clone(),
            pci_bus_id: all[i].pci_bus_id.clone(),
            arch: all[i].arch,
        })
        .collect()
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
/// choice deserves one (fallback to CPU, more workers than cores). `sharers`: under a
/// launcher, the processes of this run that share this process's cores (its own included:
/// those on its machine with the same CPU affinity); None alone.
pub fn resolve_devices(
    spec: &DeviceSpec,
    sharers: Option<usize>,
) -> Result<(Vec<Device>, Option<String>), DeviceError> {
    let discovery = match spec {
        DeviceSpec::Cpu(_) => Discovery::None(String::new()),
        _ => discover(),
    };
    let libs = match discovery {
        Discovery::Found(_) => Libraries::probe(),
        Discovery::None(_) => Libraries::default(),
    };
    let (cores, online) = (available_cores(), online_cores());
    let (devices, note) =
        resolve_with(spec, &discovery, &libs, cores, sharers).map_err(|e| match e {
            // (a GPU's number on the machine is not its number where a launcher left this process
            // some of them)
            DeviceError::NoSuchGpu {
                requested,
                missing,
                found,
                ..
            } => DeviceError::NoSuchGpu {
                requested,
                missing,
                found,
                visible: std::env::var("CUDA_VISIBLE_DEVICES").ok(),
            },
            e => e,
        })?;
    let cpu = matches!(devices.first(), Some(Device::Cpu { .. }));
    let bound = (cpu && online > cores).then(|| {
        format!(
            "this process may use {cores} of the machine's {online} cores (its CPU affinity: mpirun binds each of a few processes to one core; mpirun --bind-to none, srun --cpus-per-task or a wider taskset gives it more)"
        )
    });
    Ok((devices, join_notes(note, bound)))
}

/// This process's CPU affinity (the cores it may run on), as a number equal for equal sets:
/// processes of one machine with the same share its cores, with disjoint ones were bound
/// apart by their launcher.
pub fn affinity_key() -> u64 {
    // SAFETY: a zeroed cpu_set_t is a valid empty set, filled in by sched_getaffinity
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `set` is a cpu_set_t of `size` bytes; pid 0 is this thread
    if unsafe { libc::sched_getaffinity(0, size, &mut set) } != 0 {
        return 0;
    }
    // SAFETY: a cpu_set_t is plain bytes
    let bytes =
        unsafe { std::slice::from_raw_parts((&set as *const libc::cpu_set_t).cast::<u8>(), size) };
    crc32c::crc32c(bytes) as u64
}

/// The machine's cores (online), whichever of them this process may use.
pub fn online_cores() -> usize {
    // SAFETY: sysconf reads a system setting
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(online).map_or(1, |n| n.max(1))
}

/// Two notes for one line, either or both absent.
pub fn join_notes(a: Option<String>, b: Option<String>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    }
}

/// `resolve_devices` for a given GPU discovery and core count. `sharers`: under a launcher, how
/// many of the run's processes share these cores (CPU workers for `auto` are then this
/// process's share, one at least; alone, at least two).
pub fn resolve_with(
    spec: &DeviceSpec,
    discovery: &Discovery,
    libs: &Libraries,
    cores: usize,
    sharers: Option<usize>,
) -> Result<(Vec<Device>, Option<String>), DeviceError> {
    let cpus = |n: usize| {
        (0..n)
            .map(|index| Device::Cpu { index })
            .collect::<Vec<_>>()
    };
    match spec {
        DeviceSpec::Auto => {
            let n = match sharers {
                None => cores.max(2),
                Some(k) => (cores / k).max(1),
            };
            let of = match sharers {
                Some(k) if k > 1 => format!(
                    "{} shared by {k} processes of this run",
                    crate::text::counted(cores, "core")
                ),
                _ => crate::text::counted(cores, "core"),
            };
            let why = match discovery {
                Discovery::None(why) => format!("no GPU: {why}"),
                Discovery::Found(all) => match libs.missing_for(all.len()) {
                    None => return Ok((gpus(all, &(0..all.len()).collect::<Vec<_>>()), None)),
                    Some(missing) => {
                        // (NCCL alone missing: one GPU needs none)
                        let one = all.len() > 1 && libs.missing_for(1).is_none();
                        let one = match one {
                            true => " (--devices 0 trains on one GPU, which needs no NCCL)",
                            false => "",
                        };
                        format!("found {}, but {missing}{one}", describe(all))
                    }
                },
            };
            Ok((
                cpus(n),
                Some(format!(
                    "{why}; training on {} ({of})",
                    crate::text::counted(n, "CPU worker")
                )),
            ))
        }
        DeviceSpec::Cpu(n) => {
            let note = (*n > cores).then(|| {
                format!(
                    "{n} CPU workers share {}: workers are oversubscribed and will slow each other",
                    crate::text::counted(cores, "core")
                )
            });
            Ok((cpus(*n), note))
        }
        DeviceSpec::Gpus(ids) => {
            let requested = spec.to_string();
            match discovery {
                Discovery::None(why) => Err(DeviceError::NoGpu {
                    requested,
                    why: why.clone(),
                }),
                Discovery::Found(all) => {
                    if let Some(&missing) = ids.iter().find(|&&i| i >= all.len()) {
                        return Err(DeviceError::NoSuchGpu {
                            requested,
                            missing,
                            found: describe(all),
                            visible: None,
                        });
                    }
                    let repeated = ids
                        .iter()
                        .enumerate()
                        .find(|(i, id)| ids[..*i].contains(id));
                    if let Some((_, &twice)) = repeated {
                        return Err(DeviceError::Repeated { requested, twice });
                    }
                    match libs.missing_for(ids.len()) {
                        Some(missing) => Err(DeviceError::GpuLibrariesMissing {
                            requested,
                            found: describe(all),
                            missing,
                        }),
                        None => Ok((gpus(all, ids), None)),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_falls_back_to_at_least_two_cpu_workers_with_a_note() {
        let (d, note) = resolve_devices(&DeviceSpec::Auto, None).unwrap();
        assert!(d.len() >= 2);
        assert!(note.unwrap().contains("CPU workers"));
    }

    #[test]
    fn gpu_ids_without_gpus_are_a_clear_error() {
        let e = resolve_devices(&DeviceSpec::Gpus(vec![0, 2]), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("0,2") && e.contains("cpu:N"), "{e}");
    }

    #[test]
    fn auto_cpu_workers_under_a_launcher_are_this_process_s_share_of_the_cores() {
        let none = Discovery::None("no CUDA driver".into());
        let libs = Libraries::default();
        let workers = |cores, sharers| {
            let (d, note) = resolve_with(&DeviceSpec::Auto, &none, &libs, cores, sharers).unwrap();
            (d.len(), note.unwrap())
        };
        // two processes on 8 unbound cores: 4 workers each, said
        let (n, note) = workers(8, Some(2));
        assert_eq!(n, 4);
        assert!(
            note.ends_with("4 CPU workers (8 cores shared by 2 processes of this run)"),
            "{note}"
        );
        // more processes than cores, or each bound to one core: one worker each, never two
        assert_eq!(workers(2, Some(3)).0, 1);
        assert_eq!(workers(1, Some(1)).0, 1);
        // alone on one core: two workers still (a data-parallel run to watch)
        assert_eq!(workers(1, None).0, 2);
    }

    #[test]
    fn discovery_shapes_the_fallback_note_and_the_errors() {
        let none = Discovery::None("no CUDA driver (libcuda.so.1) is installed".into());
        let (d, note) =
            resolve_with(&DeviceSpec::Auto, &none, &Libraries::default(), 4, None).unwrap();
        assert_eq!(d.len(), 4);
        assert_eq!(
            note.unwrap(),
            "no GPU: no CUDA driver (libcuda.so.1) is installed; training on 4 CPU workers (4 cores)"
        );
        let two = Discovery::Found(vec![
            GpuInfo {
                arch: 90,
                index: 0,
                name: "NVIDIA A100".into(),
                memory: 80 << 30,
                pci_bus_id: None,
            },
            GpuInfo {
                arch: 90,
                index: 1,
                name: "NVIDIA A100".into(),
                memory: 80 << 30,
                pci_bus_id: None,
            },
        ]);
        let ready = Libraries {
            driver: true,
            nvrtc: true,
            cublas: true,
            nccl: None,
        };
        let no_nccl = Libraries {
            nccl: Some(crate::backend::cuda::libs::explain(
                &crate::backend::cuda::libs::NCCL,
                None,
            )),
            ..ready.clone()
        };
        let no_blas = Libraries {
            cublas: false,
            ..ready.clone()
        };
        let e = resolve_with(&DeviceSpec::Gpus(vec![0, 3]), &two, &ready, 4, None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no GPU 3") && e.contains("1: NVIDIA A100 (80 GiB)"),
            "{e}"
        );
        // a launcher's CUDA_VISIBLE_DEVICES renumbers the GPUs a process sees: said
        let e = DeviceError::NoSuchGpu {
            requested: "3".into(),
            missing: 3,
            found: "2 GPUs".into(),
            visible: Some("4,5".into()),
        };
        assert!(
            e.to_string().ends_with("found 2 GPUs (CUDA_VISIBLE_DEVICES=4,5 is set: GPUs are numbered from 0 among those it leaves)"),
            "{e}"
        );
        let e = resolve_with(&DeviceSpec::Gpus(vec![1, 1]), &two, &ready, 4, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("GPU 1 twice"), "{e}");
        // with the libraries: the GPUs asked for, every GPU for auto
        let (d, note) = resolve_with(&DeviceSpec::Gpus(vec![1]), &two, &ready, 4, None).unwrap();
        assert_eq!(d.iter().map(Device::label).collect::<Vec<_>>(), ["gpu1"]);
        assert_eq!(note, None);
        let (d, _) = resolve_with(&DeviceSpec::Auto, &two, &ready, 4, None).unwrap();
        assert_eq!(
            d.iter().map(Device::label).collect::<Vec<_>>(),
            ["gpu0", "gpu1"]
        );
        // one GPU needs no NCCL; two do, and the error says how to get it
        assert!(resolve_with(&DeviceSpec::Gpus(vec![0]), &two, &no_nccl, 4, None).is_ok());
        let e = resolve_with(&DeviceSpec::Gpus(vec![0, 1]), &two, &no_nccl, 4, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("nvidia-nccl-cu12") && e.contains("cpu:N"), "{e}");
        // auto falls back to the CPU there, and names the one GPU it could have
        let (_, note) = resolve_with(&DeviceSpec::Auto, &two, &no_nccl, 2, None).unwrap();
        let note = note.unwrap();
        assert!(
            note.contains("(--devices 0 trains on one GPU, which needs no NCCL)"),
            "{note}"
        );
        let e = resolve_with(&DeviceSpec::Gpus(vec![1]), &two, &no_blas, 4, None)
            .unwrap_err()
            .to_string();
        // (or where cuBLAS is installed, on a machine where a wheel put it)
        let named = |e: &str| e.contains("libcublas.so.12") || e.contains("cuBLAS is installed as");
        assert!(named(&e) && e.contains("cpu:N"), "{e}");
        // auto without the libraries falls back to CPU workers and says why
        let (d, note) = resolve_with(&DeviceSpec::Auto, &two, &no_blas, 2, None).unwrap();
        assert!(d.iter().all(|d| matches!(d, Device::Cpu { .. })));
        let note = note.unwrap();
        assert!(
            note.starts_with("found 0: NVIDIA A100 (80 GiB), 1: NVIDIA A100") && named(&note),
            "{note}"
        );
    }
}
