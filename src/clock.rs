//! The process's time awake: a process stopped (Ctrl-Z, SIGTSTP, `kill -STOP`) and continued has
//! not stalled meanwhile, nor did a step it was taking take the time it was stopped, so the
//! clocks that find stalls and time steps leave its last stop out: from the last tick of a
//! thread that notes the time every `TICK` (a stop, which no handler sees, stops it too) to
//! its continuing (SIGCONT, noted by a handler installed at start).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// CLOCK_MONOTONIC (what `Instant` reads, which runs on while the process is stopped) at the
/// last SIGCONT, in nanoseconds; 0: never continued.
static CONTINUED: AtomicU64 = AtomicU64::new(0);

/// How many times the process has been continued (SIGCONT) since start.
static CONTINUES: AtomicU64 = AtomicU64::new(0);

/// CLOCK_MONOTONIC at the tick thread's last tick and the one before it, and at the last tick
/// before the last SIGCONT (about when the process was stopped); 0: none.
static TICKED: AtomicU64 = AtomicU64::new(0);
static TICKED_BEFORE: AtomicU64 = AtomicU64::new(0);
static STOPPED: AtomicU64 = AtomicU64::new(0);

/// CONTINUED's value before the last SIGCONT (a stop before the last; 0: none).
static EARLIER: AtomicU64 = AtomicU64::new(0);

/// How often the tick thread notes the time: how far off a stop's start may be taken.
const TICK: Duration = Duration::from_millis(20);

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
    let now = monotonic_ns().max(1);
    // the last tick before the stop: the newest, or where the tick thread has already ticked
    // since the continuing (every thread wakes; this handler may run after it), the one before
    let ticked = TICKED.load(Ordering::Relaxed);
    let stopped = match now.saturating_sub(ticked) < TICK.as_nanos() as u64 / 2 {
        true => TICKED_BEFORE.load(Ordering::Relaxed),
        false => ticked,
    };
    STOPPED.store(stopped, Ordering::Relaxed);
    EARLIER.store(CONTINUED.load(Ordering::Relaxed), Ordering::Relaxed);
    CONTINUED.store(now, Ordering::Relaxed);
    CONTINUES.fetch_add(1, Ordering::Relaxed);
}

/// How many times the process has been continued after a stop: two readings that differ
/// have a stop between them.
pub fn continues() -> u64 {
    CONTINUES.load(Ordering::Relaxed)
}

/// Notes each SIGCONT from now on (the process continues as it would without the handler), and
/// the time every `TICK`.
pub fn install() {
    let ticks = std::thread::Builder::new().name("clock-tick".into());
    let _ = ticks.spawn(|| loop {
        TICKED_BEFORE.store(TICKED.load(Ordering::Relaxed), Ordering::Relaxed);
        TICKED.store(monotonic_ns(), Ordering::Relaxed);
        std::thread::sleep(TICK);
    });
    // SAFETY: a handler that only reads the clock and stores to an atomic
    unsafe {
        libc::signal(
            libc::SIGCONT,
            on_continue as extern "C" fn(libc::c_int) as libc::sighandler_t,
        )
    };
}

/// `waited`, a stretch of time that ends now, less the process's last stop where it falls in
/// it (where the stop's start is unknown, or an earlier stop falls in it too, whatever of it
/// came before the last continuing).
pub fn awake(waited: Duration) -> Duration {
    let stop = (
        STOPPED.load(Ordering::Relaxed),
        CONTINUED.load(Ordering::Relaxed),
    );
    left_awake(
        waited,
        stop,
        EARLIER.load(Ordering::Relaxed),
        monotonic_ns(),
    )
}

/// `waited` (ending at `now`) less its overlap with the stop from `stopped` to `continued`
/// (`continued` 0: none; `stopped` 0: unknown), or all of it before `continued` where the
/// stop's start is unknown or a stop that ended at `earlier` falls in it too; nanoseconds.
fn left_awake(
    waited: Duration,
    (stopped, continued): (u64, u64),
    earlier: u64,
    now: u64,
) -> Duration {
    if continued == 0 {
        return waited;
    }
    let from = now.saturating_sub(waited.as_nanos().min(u64::MAX as u128) as u64);
    let stopped = match stopped == 0 || (earlier != 0 && from < earlier) {
        true => 0,
        false => stopped,
    };
    let lost = continued.min(now).saturating_sub(stopped.max(from));
    waited.saturating_sub(Duration::from_nanos(lost))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_is_left_out_of_what_was_waited() {
        let s = Duration::from_secs;
        let at = |secs: u64| secs * 1_000_000_000;
        assert_eq!(left_awake(s(5), (0, 0), 0, at(9)), s(5));
        // stopped from 10 s to 70 s, now 75 s: a step of 70 s took 10 (5 before, 5 after)
        let stop = (at(10), at(70));
        assert_eq!(left_awake(s(70), stop, 0, at(75)), s(10));
        // one begun after the continuing, or ended before the stop, lost nothing
        assert_eq!(left_awake(s(3), stop, 0, at(75)), s(3));
        assert_eq!(left_awake(s(4), stop, 0, at(9)), s(4));
        // the stop's start unknown: what came before the continuing
        assert_eq!(left_awake(s(300), (0, at(998)), 0, at(1000)), s(2));
        // an earlier stop (continued at 5 s) in it too: what came after the last continuing
        assert_eq!(left_awake(s(74), stop, at(5), at(75)), s(5));
        assert_eq!(left_awake(s(69), stop, at(5), at(75)), s(9));
    }
}
