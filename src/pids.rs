//! Processes by their id and this machine's name, as lock files and leftovers' names record
//! them.

/// Whether process `pid` has ended: the system has no process of that id (one of another
/// user is there, though this process may not signal it), or only its exit status waits for
/// its parent to read it (a zombie: killed, its launcher not yet waiting on it). An id no
/// process can have (0, past the system's range) is taken for ended.
pub fn gone(pid: u32) -> bool {
    let Some(p) = libc::pid_t::try_from(pid).ok().filter(|&p| p > 0) else {
        return true;
    };
    // SAFETY: signal 0 only asks whether the process exists
    let refused = unsafe { libc::kill(p, 0) } == -1;
    let none = refused && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    none || matches!(state(pid), Some('Z' | 'X'))
}

/// Whether process `pid` of this machine is stopped by a signal (Ctrl-Z in its terminal, `kill
/// -STOP`): its state in `/proc` is `T` (a debugger's stop, `t`, is the debugger's to end).
/// False where it cannot be told.
pub fn stopped(pid: u32) -> bool {
    state(pid) == Some('T')
}

/// Process `pid`'s state as `/proc/PID/stat` gives it (`R`, `S`, `T`, `Z`, ...), where it can
/// be read.
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // (`pid (comm) S ...`: the name may hold spaces and parentheses, the state follows the last)
    let (_, rest) = stat.rsplit_once(')')?;
    rest.trim_start().chars().next()
}

/// Another process of the run on this machine: its global ranks and its process id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub ranks: std::ops::Range<usize>,
    pub pid: u32,
}

impl Peer {
    /// Of `peers`, the first holding one of the ranks `holding` is true of that is stopped by a
    /// signal (`stopped`): a run waits for it as for a lost one.
    pub fn suspended(peers: &[Peer], holding: impl Fn(usize) -> bool) -> Option<&Peer> {
        (peers.iter()).find(|p| p.ranks.clone().any(&holding) && stopped(p.pid))
    }

    /// What a stall or a lost peer says of it, suspended on `machine` (`this machine`, or a
    /// host's name where another process than process 0 says it).
    pub fn suspended_words(&self, machine: &str) -> String {
        let ranks: Vec<String> = self.ranks.clone().map(|r| r.to_string()).collect();
        format!(
            "the process of rank(s) {} (pid {pid}) is suspended on {machine} (Ctrl-Z, kill -STOP); `kill -CONT {pid}` resumes it",
            ranks.join(", "),
            pid = self.pid
        )
    }
}

/// Where this process's ids mean what they mean to another process of this machine: the
/// machine's boot and this process's PID namespace (two containers of one host name may have
/// ids of their own); empty where it cannot be told.
pub fn pid_space() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let ns = std::fs::read_link("/proc/self/ns/pid").map(|p| p.display().to_string());
    match (boot.trim(), ns) {
        (b, Ok(ns)) if !b.is_empty() => format!("{b}/{ns}"),
        _ => String::new(),
    }
}

/// This machine's name.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into a live buffer
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match ok {
        true => String::from_utf8_lossy(&buf[..end]).into_owned(),
        false => "?".into(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_process_that_ended_is_gone_and_this_one_is_not() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let id = child.id();
        // ended, not yet waited for (a zombie: a launcher that waits on its runs one by one)
        let zombie = (0..400).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(5));
            super::gone(id)
        });
        assert!(zombie, "an ended process not yet waited for was not gone");
        child.wait().unwrap();
        assert!(super::gone(id));
        assert!(!super::gone(std::process::id()));
        assert!(super::gone(0));
    }

    #[test]
    fn a_stopped_process_is_told_from_a_running_one() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let id = child.id();
        assert!(!super::stopped(id));
        // SAFETY: kill only signals the child this test started
        let signal = |s| unsafe { libc::kill(id as libc::pid_t, s) };
        signal(libc::SIGSTOP);
        let seen = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(5));
            super::stopped(id)
        });
        signal(libc::SIGCONT);
        let _ = child.kill();
        let _ = child.wait();
        assert!(seen, "a process sent SIGSTOP was not seen stopped");
        assert!(!super::stopped(std::process::id()));
    }
}
