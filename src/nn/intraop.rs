//! Intra-op threads: a CPU worker that has more than one core to itself splits its layers
//! (groups of images, channels, pieces of element-wise passes, large matrix products) over
//! helper threads (as PyTorch's intra-op pool does), so one worker on a two-core machine uses
//! both cores.
//!
//! The pool belongs to the worker thread that created it (a thread-local), so workers never
//! share helpers and `--threads-per-worker` x workers never oversubscribes the cores. Helpers
//! spin briefly after each task (the next product of the step follows within microseconds) and
//! then sleep, so a paused run costs nothing.

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle helper spins before it sleeps.
const SPIN: Duration = Duration::from_micros(200);

type Task = dyn Fn(usize) + Sync;

/// A borrowed task with its lifetime erased; `Pool::run` does not return before every helper
/// has finished with it, which is what makes handing it to other threads sound.
#[derive(Clone, Copy)]
struct Job {
    task: *const Task,
    parts: usize,
}
// SAFETY: the pointee is `Sync` and outlives every use (see `Job`).
unsafe impl Send for Job {}

struct Shared {
    generation: AtomicU64,
    job: Mutex<Option<Job>>,
    wake: Condvar,
    /// Helpers still working on the current generation.
    pending: AtomicUsize,
    panicked: AtomicBool,
    stop: AtomicBool,
}

pub struct Pool {
    shared: Arc<Shared>,
    helpers: Vec<JoinHandle<()>>,
}

impl Pool {
    /// A pool of `threads` in all: the caller plus `threads - 1` helpers, named `{name}-opN`.
    pub fn new(threads: usize, name: &str) -> std::io::Result<Pool> {
        let shared = Arc::new(Shared {
            generation: AtomicU64::new(0),
            job: Mutex::new(None),
            wake: Condvar::new(),
            pending: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let mut helpers = Vec::new();
        for index in 1..threads.max(1) {
            let shared = shared.clone();
            helpers.push(
                std::thread::Builder::new()
                    .name(format!("{name}-op{index}"))
                    .spawn(move || helper(&shared, index))?,
            );
        }
        Ok(Pool { shared, helpers })
    }

    pub fn threads(&self) -> usize {
        self.helpers.len() + 1
    }

    /// Runs `task(i)` for every i in 0..parts (parts <= threads): part 0 on this thread, the
    /// others on helpers; returns when all are done. A panic in any part is re-raised here.
    pub fn run(&self, parts: usize, task: &(dyn Fn(usize) + Sync)) {
        let parts = parts.min(self.threads());
        if parts <= 1 {
            task(0);
            return;
        }
        // SAFETY: only the lifetime is erased; this function waits below until `pending` is 0,
        // i.e. until no helper can touch `task` any more, before returning.
        let task: *const Task = unsafe { std::mem::transmute(task) };
        let s = &*self.shared;
        s.pending.store(self.helpers.len(), Ordering::SeqCst);
        {
            let mut job = s.job.lock().unwrap_or_else(|e| e.into_inner());
            *job = Some(Job { task, parts });
            s.generation.fetch_add(1, Ordering::SeqCst);
        }
        s.wake.notify_all();
        // SAFETY: as above, `task` is alive for the whole call. While it runs, this thread
        // computes alone: a product inside a part must not start a second job on this pool
        // while the helpers are still on this one.
        IN_TASK.with(|t| t.set(true));
        let mine = catch_unwind(AssertUnwindSafe(|| unsafe { (*task)(0) }));
        IN_TASK.with(|t| t.set(false));
        let mut spins = 0u32;
        while s.pending.load(Ordering::Acquire) != 0 {
            spins += 1;
            if spins < 1 << 14 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if s.panicked.swap(false, Ordering::SeqCst) {
            panic!("an intra-op helper thread panicked (see the message above)");
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let s = &*self.shared;
        {
            let _job = s.job.lock().unwrap_or_else(|e| e.into_inner());
            s.stop.store(true, Ordering::SeqCst);
            s.generation.fetch_add(1, Ordering::SeqCst);
        }
        s.wake.notify_all();
        for h in self.helpers.drain(..) {
            let _ = h.join();
        }
    }
}

fn helper(s: &Shared, index: usize) {
    let mut seen = 0u64;
    loop {
        let started = Instant::now();
        let mut spins = 0u32;
        while s.generation.load(Ordering::Acquire) == seen {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) && started.elapsed() > SPIN {
                let mut job = s.job.lock().unwrap_or_else(|e| e.into_inner());
                while s.generation.load(Ordering::Acquire) == seen {
                    job = s.wake.wait(job).unwrap_or_else(|e| e.into_inner());
                }
                break;
            }
            std::hint::spin_loop();
        }
        if s.stop.load(Ordering::SeqCst) {
            return;
        }
        let job = {
            let job = s.job.lock().unwrap_or_else(|e| e.into_inner());
            seen = s.generation.load(Ordering::Acquire);
            *job
        };
        if let Some(job) = job.filter(|j| index < j.parts) {
            // SAFETY: `Pool::run` keeps the task alive until `pending` reaches 0 below.
            if catch_unwind(AssertUnwindSafe(|| unsafe { (*job.task)(index) })).is_err() {
                s.panicked.store(true, Ordering::SeqCst);
            }
        }
        s.pending.fetch_sub(1, Ordering::AcqRel);
    }
}

thread_local! {
    static POOL: RefCell<Option<Pool>> = const { RefCell::new(None) };
    /// This thread is running a part of its own pool's job (nested work runs serially).
    static IN_TASK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Makes `pool` this thread's intra-op pool (None: this thread computes alone, the default).
pub fn install(pool: Option<Pool>) {
    POOL.with(|p| *p.borrow_mut() = pool);
}

/// A pool of `threads` for a worker, or None when one thread is all it gets.
pub fn for_worker(threads: usize, name: &str) -> std::io::Result<Option<Pool>> {
    (threads > 1).then(|| Pool::new(threads, name)).transpose()
}

/// Intra-op threads of this thread (1 when it has no pool, or is inside one of its parts).
pub fn threads() -> usize {
    if IN_TASK.with(|t| t.get()) {
        return 1;
    }
    POOL.with(|p| p.borrow().as_ref().map_or(1, Pool::threads))
}

/// Runs `task` over `parts` on this thread's pool, or serially without one (or inside one of
/// its parts: a nested job would clash with the one running).
pub fn run(parts: usize, task: &(dyn Fn(usize) + Sync)) {
    if IN_TASK.with(|t| t.get()) {
        return (0..parts).for_each(task);
    }
    POOL.with(|p| match p.borrow().as_ref() {
        Some(pool) => pool.run(parts, task),
        None => (0..parts).for_each(task),
    })
}

/// Runs `f(i)` for every i in 0..n, spread over this thread's intra-op threads: each takes the
/// next index as it frees up, so a thread the OS delays (or a helper still waking) holds the
/// others up by one index at most, not by a fixed share. The result depends on the thread
/// count, or on which thread ran an index, only if `f`'s do.
pub fn each(n: usize, f: &(dyn Fn(usize) + Sync)) {
    let threads = threads().min(n).max(1);
    if threads == 1 {
        return (0..n).for_each(f);
    }
    let next = AtomicUsize::new(0);
    run(threads, &|_| loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= n {
            break;
        }
        f(i);
    });
}

/// Elements per piece of `pieces` (64K floats: long enough that taking a piece costs nothing
/// beside it, short enough that a pass over a layer's activations has pieces for every thread).
const PIECE: usize = 1 << 16;

/// Runs `f(range)` over 0..len cut into contiguous pieces of `PIECE` elements (the last one
/// shorter), handed out by `each`; in one piece when there is just one. For element-wise
/// passes, whose results do not depend on the cut.
pub fn pieces(len: usize, f: &(dyn Fn(std::ops::Range<usize>) + Sync)) {
    let n = len.div_ceil(PIECE);
    if n <= 1 || threads() == 1 {
        return f(0..len);
    }
    each(n, &|i| f(i * PIECE..((i + 1) * PIECE).min(len)));
}

/// A buffer written by the tasks of one `each`/`run`, each task only its own elements (a
/// channel's planes, a channel's sums): what makes handing out `&mut` parts of it sound.
pub struct Disjoint<T>(std::sync::atomic::AtomicPtr<T>, usize);

impl<T> Disjoint<T> {
    pub fn new(s: &mut [T]) -> Disjoint<T> {
        Disjoint(std::sync::atomic::AtomicPtr::new(s.as_mut_ptr()), s.len())
    }

    /// `start..start + len` of the buffer (bounds checked).
    ///
    /// # Safety
    /// No other task touches that range while the returned slice lives.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn range(&self, start: usize, len: usize) -> &mut [T] {
        assert!(
            start + len <= self.1,
            "disjoint buffer: range out of bounds"
        );
        std::slice::from_raw_parts_mut(self.0.load(Ordering::Relaxed).add(start), len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_part_runs_exactly_once_per_call() {
        let pool = Pool::new(3, "test").unwrap();
        let hits: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
        for _ in 0..2000 {
            pool.run(3, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
        }
        for h in &hits {
            assert_eq!(h.load(Ordering::Relaxed), 2000);
        }
        // Fewer parts than threads: the spare helper does nothing.
        pool.run(2, &|i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(hits[2].load(Ordering::Relaxed), 2000);
    }

    #[test]
    fn a_helper_panic_reaches_the_caller_and_the_pool_survives() {
        let pool = Pool::new(2, "test").unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.run(2, &|i| assert!(i != 1, "boom in part 1"))
        }));
        assert!(r.is_err());
        let n = AtomicUsize::new(0);
        pool.run(2, &|_| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 2);
    }

    /// `each` runs every index once, and an index that takes long does not hold back a fixed
    /// share of the others: the other thread takes them as it frees up.
    #[test]
    fn each_runs_every_index_once_and_a_slow_one_holds_up_no_share() {
        install(for_worker(2, "test").unwrap());
        let n = 16;
        let by: Vec<Mutex<Option<std::thread::ThreadId>>> =
            (0..n).map(|_| Mutex::new(None)).collect();
        each(n, &|i| {
            if i == 0 {
                std::thread::sleep(Duration::from_millis(300));
            }
            let mut who = by[i].lock().unwrap();
            assert!(who.is_none(), "index {i} ran twice");
            *who = Some(std::thread::current().id());
        });
        let who: Vec<_> = by
            .iter()
            .map(|m| m.lock().unwrap().expect("an index did not run"))
            .collect();
        let slow = who.iter().filter(|&&t| t == who[0]).count();
        assert!(
            slow < n / 2,
            "the thread on the slow index also ran {slow} of {n}"
        );
        install(None);
    }

    /// A part that calls `run` again (a GEMM inside a group of images) runs that work serially
    /// on its thread instead of starting a second job on the pool under the first.
    #[test]
    fn nested_work_inside_a_part_runs_serially_and_completely() {
        install(for_worker(2, "test").unwrap());
        for _ in 0..200 {
            let inner = AtomicUsize::new(0);
            let outer = AtomicUsize::new(0);
            run(2, &|_| {
                outer.fetch_add(1, Ordering::Relaxed);
                assert!(threads() >= 1);
                run(2, &|_| {
                    inner.fetch_add(1, Ordering::Relaxed);
                });
            });
            assert_eq!(outer.load(Ordering::Relaxed), 2);
            assert_eq!(inner.load(Ordering::Relaxed), 4);
        }
        assert_eq!(threads(), 2, "outside a part the pool is whole again");
        install(None);
    }

    #[test]
    fn sleeping_helpers_wake_for_the_next_job() {
        let pool = Pool::new(2, "test").unwrap();
        std::thread::sleep(SPIN * 5);
        let n = AtomicUsize::new(0);
        pool.run(2, &|_| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 2);
    }
}
