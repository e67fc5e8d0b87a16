//! What the processes of a run say of their machines at its start, said by process 0 (the
//! only one whose lines a user reads): its workers crowding the cores they share with other
//! processes of the run, and each other process's own note on its devices (a process bound to
//! one core with three CPU workers says so only to itself).

use super::{Hello, World};
use crate::engine::Device;

/// A note where the CPU workers of this run's processes on this process's machine outnumber
/// the `cores` they share (each process's own count may fit, their sum not): they slow each
/// other.
pub(in crate::engine) fn crowded_host(world: &World, cores: usize) -> Option<String> {
    let me = world.hosts.get(world.local().start)?;
    crowded(&world.devices, &world.hosts, me, world.neighbours, cores)
}

/// [`crowded_host`] of `devices` on `hosts` (each rank's), for host `me` with `neighbours` of
/// the run's processes.
fn crowded(
    devices: &[Device],
    hosts: &[String],
    me: &str,
    neighbours: usize,
    cores: usize,
) -> Option<String> {
    let workers = (devices.iter().zip(hosts))
        .filter(|(d, h)| matches!(d, Device::Cpu { .. }) && *h == me)
        .count();
    (neighbours > 1 && workers > cores).then(|| {
        // (a process of one worker each has none to give up)
        let fewer = match workers > neighbours {
            true => ", or give each fewer workers (--devices cpu:N)",
            false => "",
        };
        format!(
            "the {neighbours} processes of this run on {me} train on {workers} CPU workers together, on the {} they share: they slow each other; start fewer processes there{fewer}",
            crate::text::counted(cores, "core")
        )
    })
}

/// What the device notes of the processes other than `me` say that its own does not, each
/// said with the process and its machine (a note is of parts joined by `; `: the parts every
/// process says, as no GPU found, are said once, by `me`).
pub(super) fn of_others(hellos: &[Hello], me: usize) -> Option<String> {
    let parts = |h: &Hello| -> Vec<String> {
        (h.note.as_deref().into_iter())
            .flat_map(|n| n.split("; "))
            .map(String::from)
            .collect()
    };
    let own = hellos.get(me).map(parts).unwrap_or_default();
    let said: Vec<String> = (hellos.iter().enumerate())
        .filter(|&(p, _)| p != me)
        .filter_map(|(p, h)| {
            let new: Vec<String> = parts(h).into_iter().filter(|n| !own.contains(n)).collect();
            (!new.is_empty()).then(|| format!("process {p} (on {}): {}", h.host, new.join("; ")))
        })
        .collect();
    (!said.is_empty()).then(|| said.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_workers_of_several_processes_past_their_machine_s_cores_are_noted() {
        let cpu = |index| Device::Cpu { index };
        // two processes on host a (2 workers each), one on host b
        let devices = [cpu(0), cpu(1), cpu(2), cpu(3), cpu(0)];
        let hosts = ["a", "a", "a", "a", "b"].map(String::from);
        let note = crowded(&devices, &hosts, "a", 2, 2).unwrap();
        assert!(
            note.contains(
                "the 2 processes of this run on a train on 4 CPU workers together, on the 2 cores they share"
            ),
            "{note}"
        );
        assert_eq!(crowded(&devices, &hosts, "a", 2, 4), None);
        // one process alone on its machine: its own note says so (`resolve_devices`)
        assert_eq!(crowded(&devices, &hosts, "b", 1, 1), None);
        let gpu = Device::Gpu {
            index: 0,
            name: "G".into(),
            pci_bus_id: None,
            arch: 90,
        };
        assert_eq!(crowded(&[gpu.clone(), gpu], &hosts[..2], "a", 2, 1), None);
    }

    #[test]
    fn another_process_s_own_note_is_said_by_process_0_once() {
        let hello = |host: &str, note: Option<&str>| Hello {
            host: host.into(),
            pid: 1,
            pid_space: String::new(),
            devices: Vec::new(),
            same: Vec::new(),
            max_batch: 1,
            note: note.map(String::from),
        };
        let crowded =
            "3 CPU workers share 1 core: workers are oversubscribed and will slow each other";
        let hellos = [hello("a", None), hello("b", Some(crowded))];
        assert_eq!(
            of_others(&hellos, 0).unwrap(),
            format!("process 1 (on b): {crowded}")
        );
        assert_eq!(of_others(&hellos, 1), None, "process 0 has none");
        // (a note every process has, as no GPU on any machine, is process 0's own)
        let same = [hello("a", Some("no GPU")), hello("b", Some("no GPU"))];
        assert_eq!(of_others(&same, 0), None);
        let more = [hello("a", Some("bound")), hello("a", Some("crowded; bound"))];
        assert_eq!(of_others(&more, 0).unwrap(), "process 1 (on a): crowded");
    }
}
