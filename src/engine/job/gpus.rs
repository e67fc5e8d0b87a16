//! A machine's GPUs among the run's processes on it: under `--devices auto` each process takes
//! its share (GPUs left over are said), and no GPU may be taken by two processes (NCCL refuses
//! two ranks on one GPU, deep in its set-up).

use super::super::{Device, EngineError};

/// `--devices auto` with several processes of the run on one machine: each takes its share of
/// the machine's GPUs (one process per GPU, as `mpirun -np <GPUs>` starts them; CPU workers
/// take their share of the cores as they are resolved), with a note from the machine's first
/// process where GPUs are left over.
pub(in crate::engine) fn share_machine(
    devices: Vec<Device>,
    auto: bool,
    (local_rank, local_size): (usize, usize),
) -> Result<(Vec<Device>, Option<String>), EngineError> {
    let gpus = devices.iter().all(|d| matches!(d, Device::Gpu { .. }));
    // GPUs bound to each process already (srun --gpus-per-task, a wrapper setting
    // CUDA_VISIBLE_DEVICES): each takes what it sees
    let bound = std::env::var_os("CUDA_VISIBLE_DEVICES").is_some();
    if !auto || !gpus || local_size <= 1 || bound {
        return Ok((devices, None));
    }
    let n = devices.len();
    let per = n / local_size;
    if per == 0 {
        return Err(EngineError::Config(format!(
            "{local_size} processes of this run share a machine with {n} GPU(s): start at most one process per GPU there (or one per machine, which trains on all of them)"
        )));
    }
    let idle = &devices[per * local_size..];
    let note = (local_rank == 0 && !idle.is_empty()).then(|| {
        let names: Vec<String> = idle.iter().map(Device::label).collect();
        let fits: Vec<String> = (2..=n)
            .filter(|&k| k != local_size && n.is_multiple_of(k))
            .map(|k| k.to_string())
            .collect();
        let fits = match fits.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => n.to_string(),
        };
        format!(
            "{local_size} processes of this run share this machine's {n} GPUs: each takes {per}, so {} stay idle ({}); start {fits} processes here to train on them all (or one, which takes every GPU)",
            idle.len(),
            names.join(", "),
        )
    });
    Ok((
        devices[local_rank * per..(local_rank + 1) * per].to_vec(),
        note,
    ))
}

/// Refuses a GPU that two processes train on: the same machine (`hosts`, each rank's) and PCI
/// bus id; `offsets[p]` is process p's first rank; `visible`, this process's
/// CUDA_VISIBLE_DEVICES (what `--devices auto` takes as its own GPUs where set).
pub(super) fn one_process_per_gpu(
    devices: &[Device],
    hosts: &[String],
    offsets: &[usize],
    visible: Option<&str>,
) -> Result<(), EngineError> {
    let bus = |r: usize| match &devices[r] {
        Device::Gpu { pci_bus_id, .. } => pci_bus_id.as_deref(),
        Device::Cpu { .. } => None,
    };
    let process = |r: usize| offsets.partition_point(|&o| o <= r) - 1;
    for b in 0..devices.len() {
        let twin = (0..b).find(|&a| {
            bus(a).is_some() && bus(a) == bus(b) && hosts[a] == hosts[b] && process(a) != process(b)
        });
        if let Some(a) = twin {
            let name = match &devices[a] {
                Device::Gpu { name, .. } => name.as_str(),
                Device::Cpu { .. } => "",
            };
            // (srun without --gpus-per-task gives every task of a node all its GPUs so)
            let fix = match visible {
                Some(v) => format!("CUDA_VISIBLE_DEVICES is set (`{}` here), and each process takes the GPUs it lists as its own: give each process its own (srun --gpus-per-task=1, or a CUDA_VISIBLE_DEVICES per process), or unset it, and --devices auto shares the machine's GPUs out among its processes", crate::text::excerpt(v)),
                None => "--devices auto shares a machine's GPUs out among its processes, or name another GPU for each (--devices 1 on one, --devices 0 on the other; or CUDA_VISIBLE_DEVICES)".into(),
            };
            return Err(EngineError::Shared(format!(
                "processes {} and {} both train on one GPU of {} ({name}, PCI {}: their {} and {}): a GPU takes one process of a run (NCCL refuses two ranks on one GPU); give each process GPUs of its own: {fix}",
                process(a),
                process(b),
                hosts[a],
                bus(a).unwrap_or_default(),
                devices[a].label(),
                devices[b].label()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: usize, bus: &str) -> Device {
        Device::Gpu {
            index,
            name: "NVIDIA H100".into(),
            pci_bus_id: Some(bus.into()),
            arch: 90,
        }
    }

    #[test]
    fn two_processes_on_one_gpu_are_refused_naming_both() {
        // processes 0 and 1 on host a, each given its gpu0, which is the same card
        let devices = [
            gpu(0, "0000:3b:00.0"),
            gpu(0, "0000:3b:00.0"),
            gpu(0, "0000:3b:00.0"),
        ];
        let hosts = ["a", "a", "b"].map(String::from);
        let e = one_process_per_gpu(&devices, &hosts, &[0, 1, 2, 3], None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("processes 0 and 1 both train on one GPU of a (NVIDIA H100, PCI 0000:3b:00.0: their gpu0 and gpu0)"),
            "{e}"
        );
        assert!(
            e.contains("--devices auto shares a machine's GPUs out"),
            "{e}"
        );
        // every task given all the node's GPUs (srun without --gpus-per-task): auto took them
        // as each process's own, so the fix is the variable's
        let e = one_process_per_gpu(&devices, &hosts, &[0, 1, 2, 3], Some("0,1,2,3"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("CUDA_VISIBLE_DEVICES is set (`0,1,2,3` here)")
                && e.contains("--gpus-per-task=1"),
            "{e}"
        );
        // the same bus id on another machine is another card; one process's own GPUs differ
        let devices = [
            gpu(0, "0000:3b:00.0"),
            gpu(1, "0000:5e:00.0"),
            gpu(0, "0000:3b:00.0"),
        ];
        assert!(one_process_per_gpu(&devices, &hosts, &[0, 2, 3], None).is_ok());
    }

    #[test]
    fn gpus_left_over_by_auto_are_said_by_the_machines_first_process() {
        if std::env::var_os("CUDA_VISIBLE_DEVICES").is_some() {
            eprintln!(
                "skipped: CUDA_VISIBLE_DEVICES is set (each process then takes what it sees)"
            );
            return;
        }
        let eight: Vec<Device> = (0..8)
            .map(|i| gpu(i, &format!("0000:{i:02x}:00.0")))
            .collect();
        let (mine, note) = share_machine(eight.clone(), true, (0, 3)).unwrap();
        assert_eq!(
            mine.iter().map(Device::label).collect::<Vec<_>>(),
            ["gpu0", "gpu1"]
        );
        let note = note.unwrap();
        assert!(
            note.contains("3 processes of this run share this machine's 8 GPUs: each takes 2, so 2 stay idle (gpu6, gpu7); start 2, 4 or 8 processes here"),
            "{note}"
        );
        let (mine, note) = share_machine(eight.clone(), true, (2, 3)).unwrap();
        assert_eq!((mine[0].label(), note), ("gpu4".to_string(), None));
        assert_eq!(share_machine(eight.clone(), true, (1, 4)).unwrap().1, None);
        assert!(share_machine(eight[..2].to_vec(), true, (0, 3)).is_err());
    }
}
