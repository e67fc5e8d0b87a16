//! What memory this process may count on: the machine's (`/proc/meminfo`), bounded by its
//! cgroup's limit (a container's, a Slurm job's) and, for what is still free, by its
//! address-space limit (`ulimit -v`). Data limits, the run's memory estimate and the telemetry
//! all ask here.

use std::path::{Path, PathBuf};

use crate::text::bytes;

/// Assumed when /proc/meminfo cannot be read.
const ASSUMED_MEMORY: u64 = 16 << 30;

/// Limits at or above this are "no limit" (cgroup v1 writes 2^63 rounded down to a page).
const UNLIMITED: u64 = 1 << 60;

/// The memory this process may hold in all, in bytes: the machine's (MemTotal), or its
/// cgroup's limit or its address-space limit (`ulimit -v`) where that is lower; and whether it
/// was read or assumed.
pub fn machine_memory() -> (u64, bool) {
    let read = match meminfo("MemTotal") {
        Some(t) => (cgroup().map_or(t, |c| c.limit.min(t)), true),
        None => (ASSUMED_MEMORY, false),
    };
    match address_space_limit() {
        Some(l) if l < read.0 => (l, true),
        _ => read,
    }
}

/// A field of /proc/meminfo in bytes (`MemTotal`, `MemAvailable`); `None` where it cannot be
/// read (not Linux).
pub fn meminfo(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    field_kib(&text, field)
}

/// "this machine's memory (15.5 GiB)", its cgroup's limit where that is lower, or the assumed
/// size when it could not be read.
pub fn memory_text() -> String {
    let limit = address_space_limit();
    match (machine_memory(), meminfo("MemTotal")) {
        ((m, true), _) if limit == Some(m) => format!(
            "this process's address-space limit ({}, ulimit -v)",
            bytes(m)
        ),
        ((m, true), Some(total)) if m < total => {
            format!("this process's memory limit ({}, its cgroup's)", bytes(m))
        }
        ((m, true), _) => format!("this machine's memory ({})", bytes(m)),
        ((m, false), _) => format!(
            "the assumed memory ({}; /proc/meminfo unreadable)",
            bytes(m)
        ),
    }
}

/// Makes glibc's malloc keep memory freed below 32 MiB for reuse (`M_MMAP_THRESHOLD`,
/// `M_TRIM_THRESHOLD`), for the program's whole life: a decoded picture's buffer (hundreds of
/// KiB, a new one per picture) otherwise comes back from the kernel as fresh pages every time,
/// faulted in again (on a loader thread decoding 500x375 JPEGs: ~140k page faults and 20% of its
/// time in the kernel in 1,500 pictures; kept: ~55k, and 15-30% more pictures a second). Larger
/// buffers (activations, whole data sets) are still mapped and returned as before. Under an
/// address-space limit (`ulimit -v`) two malloc arenas at most: each thread's own reserves 64
/// MiB of address space it may never use, which the limit counts (a run within its estimate
/// failed an allocation as it wrote its checkpoint). Call once at start, before any thread
/// allocates (`main`, the loader benchmark). Nothing elsewhere than glibc.
pub fn reuse_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt takes these parameters and values (32 MiB is the largest mmap threshold
    // glibc accepts on 64-bit); it changes allocation policy only, never live allocations.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
        if address_space_limit().is_some() {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

/// Address space the run's threads take as they start, beside what they allocate: their stacks
/// and a second malloc arena (`reuse_freed_memory`), left out of the room a limit leaves.
const THREADS_RESERVE: u64 = 128 << 20;

/// Memory this process can still allocate, and what bounds it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Room {
    pub bytes: u64,
    /// "available on this machine", "left under this process's cgroup memory limit", ...
    pub what: &'static str,
}

/// The least of what the machine has available, what this process's cgroup has left and what
/// its address-space limit leaves; None where none can be read (not Linux).
pub fn room() -> Option<Room> {
    let machine = meminfo("MemAvailable").map(|b| Room {
        bytes: b,
        what: "available on this machine",
    });
    let group = cgroup().map(|c| Room {
        bytes: c.limit.saturating_sub(c.used),
        what: "left under this process's cgroup memory limit",
    });
    let address = address_space_room().map(|b| Room {
        bytes: b,
        what: "left under this process's address-space limit (ulimit -v)",
    });
    [machine, group, address]
        .into_iter()
        .flatten()
        .min_by_key(|r| r.bytes)
}

/// `field: N kB` of a /proc file, in bytes.
fn field_kib(text: &str, field: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse::<u64>()
        .ok()?
        .checked_mul(1024)
}

/// The address-space limit's soft value less the process's size now (`/proc/self/limits`,
/// `VmSize`) and what its threads will take (`THREADS_RESERVE`); None without a limit.
fn address_space_room() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    address_room_from(&limits, &status)
}

/// The address-space limit's soft value (`/proc/self/limits`); None without a limit.
fn address_space_limit() -> Option<u64> {
    address_limit_from(&std::fs::read_to_string("/proc/self/limits").ok()?)
}

fn address_limit_from(limits: &str) -> Option<u64> {
    limits
        .lines()
        .find_map(|l| l.strip_prefix("Max address space"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok() // "unlimited": none
}

fn address_room_from(limits: &str, status: &str) -> Option<u64> {
    let soft = address_limit_from(limits)?;
    let size = field_kib(status, "VmSize").unwrap_or(0);
    Some(soft.saturating_sub(size.saturating_add(THREADS_RESERVE)))
}

/// A cgroup's memory limit and what it holds that cannot simply be dropped (its use less the
/// inactive page cache).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Cgroup {
    limit: u64,
    used: u64,
}

/// This process's cgroups with a memory limit: the smallest limit, and the least room
/// (`cgroup_from`).
fn cgroup() -> Option<Cgroup> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    cgroup_from(&text, Path::new("/sys/fs/cgroup"))
}

/// The files of a cgroup version: limit, use, and the page-cache field of `memory.stat`.
struct Files {
    limit: &'static str,
    used: &'static str,
    cache: &'static str,
}

const V2: Files = Files {
    limit: "memory.max",
    used: "memory.current",
    cache: "inactive_file",
};
const V1: Files = Files {
    limit: "memory.limit_in_bytes",
    used: "memory.usage_in_bytes",
    cache: "total_inactive_file",
};

/// From `/proc/self/cgroup`'s `text` and the cgroup file systems under `root`: the memory
/// cgroup (v1) or the unified one (v2) of this process, each directory from the mount's root
/// down to its own (a container sees its own cgroup as the root; a parent's limit binds too),
/// the smallest limit and, as `used`, what leaves the least room under any of them (a parent
/// shared with other jobs may have less room than the process's own, and a larger limit).
fn cgroup_from(text: &str, root: &Path) -> Option<Cgroup> {
    let mut found: Option<Cgroup> = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let (mut dir, files) = match controllers {
            "" => (root.to_path_buf(), &V2),
            c if c.split(',').any(|c| c == "memory") => (root.join("memory"), &V1),
            _ => continue,
        };
        let mut dirs: Vec<PathBuf> = vec![dir.clone()];
        for part in path.split('/').filter(|p| !p.is_empty() && *p != "..") {
            dir = dir.join(part);
            dirs.push(dir.clone());
        }
        for d in &dirs {
            let Some(c) = read_group(d, files) else {
                continue;
            };
            let room = |c: &Cgroup| c.limit.saturating_sub(c.used);
            found = Some(match found {
                None => c,
                Some(f) => {
                    let limit = f.limit.min(c.limit);
                    Cgroup {
                        limit,
                        // (so that limit - used is the least room)
                        used: limit.saturating_sub(room(&f).min(room(&c))),
                    }
                }
            });
        }
    }
    found
}

/// One cgroup directory's limit and use; None without a limit.
fn read_group(dir: &Path, files: &Files) -> Option<Cgroup> {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
    let limit: u64 = read(files.limit)?.trim().parse().ok()?; // "max": none
    if limit >= UNLIMITED {
        return None;
    }
    let used: u64 = read(files.used)
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0);
    let cache = read("memory.stat")
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix(files.cache)?.strip_prefix(' '))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .unwrap_or(0);
    Some(Cgroup {
        limit,
        used: used.saturating_sub(cache),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, files: &[(&str, &str)]) {
        std::fs::create_dir_all(dir).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
    }

    #[test]
    fn a_v2_cgroup_binds_by_its_own_or_a_parents_limit_less_what_it_holds() {
        let root = tempfile::tempdir().unwrap();
        let job = root.path().join("slurm/job_7");
        write(
            &root.path().join("slurm"),
            &[("memory.max", "8589934592\n"), ("memory.current", "0\n")],
        );
        write(
            &job,
            &[
                ("memory.max", "max\n"),
                ("memory.current", "3221225472\n"),
                (
                    "memory.stat",
                    "anon 1\ninactive_file 1073741824\nactive_file 5\n",
                ),
            ],
        );
        // the job's own has no limit; its parent's 8 GiB binds, with nothing held there
        let c = cgroup_from("0::/slurm/job_7\n", root.path()).unwrap();
        assert_eq!(c.limit, 8 << 30);
        // a tighter one below: 4 GiB less 3 GiB used of which 1 GiB is page cache
        write(&job, &[("memory.max", "4294967296\n")]);
        let c = cgroup_from("0::/slurm/job_7\n", root.path()).unwrap();
        assert_eq!((c.limit, c.used), (4 << 30, 2 << 30));
        // a parent shared with other jobs: its larger limit has less room; the job's own
        // limit and the parent's room bind
        write(
            &root.path().join("slurm"),
            &[
                (
                    "memory.max",
                    "8589934592
",
                ),
                (
                    "memory.current",
                    "7516192768
",
                ),
            ],
        );
        let c = cgroup_from("0::/slurm/job_7\n", root.path()).unwrap();
        assert_eq!((c.limit, c.limit - c.used), (4 << 30, 1 << 30));
    }

    #[test]
    fn a_v1_memory_cgroup_is_read_and_no_limit_is_none() {
        let root = tempfile::tempdir().unwrap();
        let mem = root.path().join("memory");
        write(
            &mem,
            &[
                ("memory.limit_in_bytes", "9223372036854771712\n"),
                ("memory.usage_in_bytes", "7314079744\n"),
            ],
        );
        let text = "4:memory:/docker/abc\n3:cpu:/\n0::/\n";
        assert_eq!(cgroup_from(text, root.path()), None, "unlimited");
        write(
            &mem,
            &[
                ("memory.limit_in_bytes", "2147483648\n"),
                ("memory.stat", "cache 9\ntotal_inactive_file 100\n"),
            ],
        );
        let c = cgroup_from(text, root.path()).unwrap();
        assert_eq!((c.limit, c.used), (2 << 30, 7314079744 - 100));
        assert_eq!(cgroup_from("garbage\n1:cpu\n", root.path()), None);
    }

    #[test]
    fn the_address_space_limit_leaves_its_soft_value_less_the_process_size() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax address space         4000000000           unlimited            bytes\n";
        let status = "Name:\tx\nVmSize:\t  1000 kB\n";
        assert_eq!(
            address_room_from(limits, status),
            Some(4_000_000_000 - 1_024_000 - THREADS_RESERVE)
        );
        let none = "Max address space         unlimited            unlimited            bytes\n";
        assert_eq!(address_room_from(none, status), None);
    }

    #[test]
    fn room_is_read_here_and_is_at_most_what_the_machine_has() {
        let (m, read) = machine_memory();
        assert!(read && m > 1 << 26, "{m}");
        let r = room().expect("Linux");
        // (not MemAvailable read again: the tests beside this one move it between the reads)
        assert!(r.bytes <= meminfo("MemTotal").unwrap());
        assert!(r.bytes > 1 << 20, "{r:?}");
    }
}
