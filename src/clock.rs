//! The process's time awake: a process stopped (Ctrl-Z, SIGTSTP, `kill -STOP`) and continued has
//! not stalled meanwhile, so the clocks that find stalls count no further back than its last
//! continuing (SIGCONT, noted by a handler installed at start).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// CLOCK_MONOTONIC (what `Instant` reads, which runs on while the process is stopped) at the
/// last SIGCONT, in nanoseconds; 0: never continued.
static CONTINUED: AtomicU64 = AtomicU64::new(0);

/// How many times the process has been continued (SIGCONT) since start.
static CONTINUES: AtomicU64 = AtomicU64::new(0);

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the timespec given (async-signal-safe)
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64
}

extern "C" fn on_continue(_: libc::c_int) {
    CONTINUED.store(monotonic_ns().max(1), Ordering::Relaxed);
    CONTINUES.fetch_add(1, Ordering::Relaxed);
}

/// How many times the process has been continued after a stop: two readings that differ
/// have a stop between them.
pub fn continues() -> u64 {
    CONTINUES.load(Ordering::Relaxed)
}

/// Notes each SIGCONT from now on (the process continues as it would without the handler).
pub fn install() {
    // SAFETY: a handler that only reads the clock and stores to an atomic
    unsafe {
        libc::signal(
            libc::SIGCONT,
            on_continue as extern "C" fn(libc::c_int) as libc::sighandler_t,
        )
    };
}

/// `waited`, a stretch of time that ends now, less whatever of it came before the process last
/// continued after a stop.
pub fn awake(waited: Duration) -> Duration {
    left_awake(waited, CONTINUED.load(Ordering::Relaxed), monotonic_ns())
}

/// `waited` at most back to `continued` (0: never), both clocks read at `now`.
fn left_awake(waited: Duration, continued: u64, now: u64) -> Duration {
    match continued {
        0 => waited,
        at => waited.min(Duration::from_nanos(now.saturating_sub(at))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_is_left_out_of_what_was_waited() {
        let s = Duration::from_secs;
        assert_eq!(left_awake(s(5), 0, 9_000_000_000), s(5));
        // continued 2 s ago after a long stop: 2 s of the 300 waited were awake
        assert_eq!(left_awake(s(300), 7_000_000_000, 9_000_000_000), s(2));
        assert_eq!(left_awake(s(1), 7_000_000_000, 9_000_000_000), s(1));
    }
}
