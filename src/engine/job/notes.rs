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

/// What the device notes of the processes other than `me` say that its own does not, a line
/// for each note, with the processes that say it and their machines (a note is of parts joined
/// by `; `: the parts every process says, as no GPU found, are said once, by `me`; a note
/// 63 processes say is one line).
pub(super) fn of_others(hellos: &[Hello], me: usize) -> Vec<String> {
    let parts = |h: &Hello| -> Vec<String> {
        (h.note.as_deref().into_iter())
            .flat_map(|n| n.split("; "))
            .map(String::from)
            .collect()
    };
    let own = hellos.get(me).map(parts).unwrap_or_default();
    // each note, with its processes and their machines, in the order of its first process
    let mut notes: Vec<(String, Vec<usize>, Vec<&str>)> = Vec::new();
    for (p, h) in hellos.iter().enumerate().filter(|&(p, _)| p != me) {
        let new: Vec<String> = parts(h).into_iter().filter(|n| !own.contains(n)).collect();
        if new.is_empty() {
            continue;
        }
        let note = new.join("; ");
        match notes.iter_mut().find(|(n, ..)| *n == note) {
            Some((_, procs, hosts)) => {
                procs.push(p);
                if !hosts.contains(&h.host.as_str()) {
                    hosts.push(&h.host);
                }
            }
            None => notes.push((note, vec![p], vec![&h.host])),
        }
    }
    (notes.into_iter())
        .map(|(note, procs, hosts)| {
            let on = match hosts.len() {
                n if n > 3 => format!("{}, ... ({n} machines)", hosts[..3].join(", ")),
                _ => hosts.join(", "),
            };
            format!("{} (on {on}): {note}", processes(&procs))
        })
        .collect()
}

/// `process 1`, `processes 1 and 2`, `processes 1, 3 and 5`, `processes 1-63` (ascending).
fn processes(procs: &[usize]) -> String {
    if let [one] = procs {
        return format!("process {one}");
    }
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &p in procs {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == p => *last = p,
            _ => runs.push((p, p)),
        }
    }
    // (a run of three or more is `1-3`; of two, two numbers)
    let said: Vec<String> = (runs.iter())
        .flat_map(|&(a, b)| match b - a {
            0 => vec![a.to_string()],
            1 => vec![a.to_string(), b.to_string()],
            _ => vec![format!("{a}-{b}")],
        })
        .collect();
    match said.split_last() {
        Some((last, rest)) if !rest.is_empty() => {
            format!("processes {} and {last}", rest.join(", "))
        }
        _ => format!("processes {}", said.join(", ")),
    }
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
            data: "digits".into(),
        };
        let crowded =
            "3 CPU workers share 1 core: workers are oversubscribed and will slow each other";
        let hellos = [hello("a", None), hello("b", Some(crowded))];
        assert_eq!(
            of_others(&hellos, 0),
            [format!("process 1 (on b): {crowded}")]
        );
        assert!(of_others(&hellos, 1).is_empty(), "process 0 has none");
        // (a note every process has, as no GPU on any machine, is process 0's own)
        let same = [hello("a", Some("no GPU")), hello("b", Some("no GPU"))];
        assert!(of_others(&same, 0).is_empty());
        let more = [
            hello("a", Some("bound")),
            hello("a", Some("crowded; bound")),
        ];
        assert_eq!(of_others(&more, 0), ["process 1 (on a): crowded"]);
        // a note many processes say is one line, naming them
        let mut many = vec![hello("a", None)];
        many.extend((1..=63).map(|p| hello(["b", "c"][p % 2], Some("bound"))));
        many.push(hello("d", Some("crowded")));
        assert_eq!(
            of_others(&many, 0),
            [
                "processes 1-63 (on c, b): bound",
                "process 64 (on d): crowded"
            ]
        );
    }

    #[test]
    fn processes_are_named_in_runs() {
        assert_eq!(processes(&[1]), "process 1");
        assert_eq!(processes(&[1, 2]), "processes 1 and 2");
        assert_eq!(processes(&[1, 3, 5]), "processes 1, 3 and 5");
        assert_eq!(
            processes(&[1, 2, 3, 7, 9, 10, 11]),
            "processes 1-3, 7 and 9-11"
        );
    }
}
