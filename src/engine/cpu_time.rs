//! The calling thread's CPU time: a CPU worker's compute as the device's own time (time lost to
//! other threads on a shared core is not the worker's).

use std::time::Duration;

/// CPU time the calling thread has used (`None` where the platform cannot say). One system
/// call, cheap enough to take around every step.
pub fn thread_cpu_time() -> Option<Duration> {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec for the duration of the call, and
        // CLOCK_THREAD_CPUTIME_ID is a clock every supported Unix provides.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_cpu_time_counts_work_not_sleep() {
        let t0 = thread_cpu_time().expect("unix");
        std::thread::sleep(Duration::from_millis(50));
        let slept = thread_cpu_time().unwrap() - t0;
        assert!(slept < Duration::from_millis(10), "{slept:?}");
        // work until the clock shows 20 ms (however busy the machine, it must get there)
        let (t1, wall) = (thread_cpu_time().unwrap(), std::time::Instant::now());
        let mut x = 0u64;
        while thread_cpu_time().unwrap() - t1 < Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_add(1));
            assert!(
                wall.elapsed() < Duration::from_secs(20),
                "the thread's CPU time does not advance while it works"
            );
        }
    }
}
