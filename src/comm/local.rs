//! The in-process collective used by CPU workers: ranks are threads sharing buffers directly.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Collective, CollectiveError, ReduceTiming};

/// What the generic exchanges move: plain numbers (every rank of a call passes the same type,
/// so the published element counts are counts of the same size).
pub trait Plain: Copy + private::Sealed {}
impl Plain for u8 {}
impl Plain for u64 {}
impl Plain for f32 {}
mod private {
    pub trait Sealed {}
    impl Sealed for u8 {}
    impl Sealed for u64 {}
    impl Sealed for f32 {}
}

/// Chunks are multiples of 16 floats (64 bytes) so ranks never write the same cache line.
const ALIGN: usize = 16;
/// Elements summed per inner block (fits in L1 next to the inputs).
const BLOCK: usize = 1024;

struct Shared {
    n: usize,
    ptrs: Vec<AtomicPtr<u8>>,
    lens: Vec<AtomicUsize>,
    arrived: AtomicUsize,
    generation: AtomicUsize,
    aborted: AtomicBool,
    reason: Mutex<String>,
}

/// The in-process collective: ranks are threads of this process sharing buffers directly.
/// All-reduce = fused reduce-scatter + all-gather: rank r sums chunk r of every rank's buffer
/// (rank 0 first, so the result does not depend on timing) and writes the sum back into every
/// buffer; two barriers per call.
pub struct LocalCollective {
    rank: usize,
    shared: Arc<Shared>,
}

impl LocalCollective {
    /// One handle per rank, in rank order.
    pub fn group(n: usize) -> Vec<LocalCollective> {
        assert!(n >= 1);
        let shared = Arc::new(Shared {
            n,
            ptrs: (0..n)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            lens: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            aborted: AtomicBool::new(false),
            reason: Mutex::new(String::new()),
        });
        (0..n)
            .map(|rank| LocalCollective {
                rank,
                shared: shared.clone(),
            })
            .collect()
    }

    /// A handle that aborts this group (or reads why it was) while a rank of it is blocked.
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle(self.shared.clone())
    }

    fn aborted(&self) -> CollectiveError {
        CollectiveError::Aborted(
            self.shared
                .reason
                .lock()
                .map(|r| r.clone())
                .unwrap_or_default(),
        )
    }

    /// Sense-reversing barrier: spin briefly (the common case is a few microseconds), then
    /// yield, then sleep, so paused or oversubscribed runs do not burn cores.
    fn wait(&self) -> Result<Duration, CollectiveError> {
        let s = &*self.shared;
        let start = Instant::now();
        if s.aborted.load(Ordering::Acquire) {
            return Err(self.aborted());
        }
        let gen = s.generation.load(Ordering::Acquire);
        if s.arrived.fetch_add(1, Ordering::AcqRel) + 1 == s.n {
            s.arrived.store(0, Ordering::Relaxed);
            s.generation.fetch_add(1, Ordering::Release);
            return Ok(start.elapsed());
        }
        let mut spins = 0u32;
        while s.generation.load(Ordering::Acquire) == gen {
            if s.aborted.load(Ordering::Acquire) {
                return Err(self.aborted());
            }
            spins += 1;
            if spins < 256 {
                std::hint::spin_loop();
            } else if spins < 4096 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        Ok(start.elapsed())
    }

    /// Copies `root`'s `buf` into every rank's; returns the time spent waiting.
    pub fn broadcast<T: Plain>(
        &mut self,
        buf: &mut [T],
        root: usize,
    ) -> Result<Duration, CollectiveError> {
        let s = &*self.shared;
        if s.n == 1 {
            return Ok(Duration::ZERO);
        }
        self.publish(buf.as_mut_ptr().cast(), buf.len());
        let waited = self.wait()?;
        if self.rank != root {
            let len = s.lens[root].load(Ordering::Acquire);
            if len != buf.len() {
                let err = CollectiveError::LengthMismatch {
                    rank: self.rank,
                    got: buf.len(),
                    want: len,
                };
                self.abort(&err.to_string());
                return Err(err);
            }
            let src = s.ptrs[root].load(Ordering::Acquire).cast::<T>();
            // SAFETY: the root published a live buffer of `len` elements of the same type (every
            // rank makes the same call) and does not touch it until the closing barrier; it is
            // only read here.
            buf.copy_from_slice(unsafe { std::slice::from_raw_parts(src, len) });
        }
        self.wait()?;
        Ok(waited)
    }

    /// Every rank's `mine` (all the same length), in rank order, into `out`
    /// (`world_size * mine.len()` elements); returns the time spent waiting.
    pub fn all_gather<T: Plain>(
        &mut self,
        mine: &[T],
        out: &mut [T],
    ) -> Result<Duration, CollectiveError> {
        let s = &*self.shared;
        let len = mine.len();
        if out.len() != len * s.n {
            return Err(CollectiveError::LengthMismatch {
                rank: self.rank,
                got: out.len(),
                want: len * s.n,
            });
        }
        out[self.rank * len..(self.rank + 1) * len].copy_from_slice(mine);
        if s.n == 1 {
            return Ok(Duration::ZERO);
        }
        // published read-only: every rank copies the others' elements out of their `mine`
        self.publish(mine.as_ptr().cast_mut().cast(), len);
        let waited = self.wait()?;
        self.check_lengths(len)?;
        for r in (0..s.n).filter(|&r| r != self.rank) {
            let src = s.ptrs[r].load(Ordering::Acquire).cast::<T>();
            // SAFETY: rank r published a live buffer of `len` elements of the same type (checked above) and stays
            // inside this call until the closing barrier; it is only read.
            let theirs = unsafe { std::slice::from_raw_parts(src, len) };
            out[r * len..(r + 1) * len].copy_from_slice(theirs);
        }
        self.wait()?;
        Ok(waited)
    }

    /// After the opening barrier: every rank published `len` elements, or the group is aborted.
    fn check_lengths(&self, len: usize) -> Result<(), CollectiveError> {
        let s = &*self.shared;
        match (0..s.n).find(|&r| s.lens[r].load(Ordering::Acquire) != len) {
            None => Ok(()),
            Some(bad) => {
                let err = CollectiveError::LengthMismatch {
                    rank: bad,
                    got: s.lens[bad].load(Ordering::Acquire),
                    want: len,
                };
                self.abort(&err.to_string());
                Err(err)
            }
        }
    }

    fn publish(&self, ptr: *mut u8, len: usize) {
        self.shared.ptrs[self.rank].store(ptr, Ordering::Release);
        self.shared.lens[self.rank].store(len, Ordering::Release);
    }
}

fn chunk(len: usize, n: usize, r: usize) -> (usize, usize) {
    let per = len.div_ceil(n).div_ceil(ALIGN) * ALIGN;
    let lo = (r * per).min(len);
    (lo, ((r + 1) * per).min(len))
}

impl Collective for LocalCollective {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.shared.n
    }

    fn all_reduce_sum(&mut self, buf: &mut Vec<f32>) -> Result<ReduceTiming, CollectiveError> {
        let s = &*self.shared;
        if s.n == 1 {
            return Ok(ReduceTiming::default());
        }
        let len = buf.len();
        self.publish(buf.as_mut_ptr().cast(), len);
        let wait = self.wait()?;
        let t0 = Instant::now();
        self.check_lengths(s.lens[0].load(Ordering::Acquire))?;
        let ptrs: Vec<*mut f32> = s
            .ptrs
            .iter()
            .map(|p| p.load(Ordering::Acquire).cast::<f32>())
            .collect();
        let (lo, hi) = chunk(len, s.n, self.rank);
        let mut acc = [0.0f32; BLOCK];
        let mut start = lo;
        while start < hi {
            let end = (start + BLOCK).min(hi);
            let acc = &mut acc[..end - start];
            // SAFETY: every rank published a live buffer of `len` elements and stays inside this
            // call until the closing barrier, so the pointers are valid. Only this rank touches
            // elements lo..hi of any buffer between the two barriers (chunks are disjoint), so the
            // reads and writes below do not race.
            unsafe {
                acc.copy_from_slice(std::slice::from_raw_parts(ptrs[0].add(start), end - start));
                for &p in &ptrs[1..] {
                    let src = std::slice::from_raw_parts(p.add(start), end - start);
                    for (a, b) in acc.iter_mut().zip(src) {
                        *a += b;
                    }
                }
                for &p in &ptrs {
                    std::slice::from_raw_parts_mut(p.add(start), end - start).copy_from_slice(acc);
                }
            }
            start = end;
        }
        self.wait()?;
        Ok(ReduceTiming {
            wait,
            transfer: t0.elapsed(),
        })
    }

    fn broadcast_u64(&mut self, buf: &mut [u64], root: usize) -> Result<Duration, CollectiveError> {
        self.broadcast(buf, root)
    }

    fn all_gather_u64(
        &mut self,
        mine: &[u64],
        out: &mut [u64],
    ) -> Result<Duration, CollectiveError> {
        self.all_gather(mine, out)
    }

    fn barrier(&mut self) -> Result<Duration, CollectiveError> {
        self.wait()
    }

    fn abort_reason(&self) -> Option<String> {
        self.abort_handle().reason()
    }

    fn abort(&self, reason: &str) {
        self.abort_handle().abort(reason)
    }
}

/// Aborts a `LocalCollective` group from outside its ranks.
pub struct AbortHandle(Arc<Shared>);

impl AbortHandle {
    pub fn abort(&self, reason: &str) {
        if let Ok(mut r) = self.0.reason.lock() {
            if r.is_empty() {
                *r = reason.to_string();
            }
        }
        self.0.aborted.store(true, Ordering::Release);
    }

    pub fn reason(&self) -> Option<String> {
        self.0
            .aborted
            .load(Ordering::Acquire)
            .then(|| self.0.reason.lock().map(|r| r.clone()).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<F, T>(n: usize, f: F) -> Vec<T>
    where
        F: Fn(LocalCollective) -> T + Send + Sync + Copy + 'static,
        T: Send + 'static,
    {
        let hs: Vec<_> = LocalCollective::group(n)
            .into_iter()
            .map(|c| std::thread::spawn(move || f(c)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn all_reduce_sums_in_rank_order_on_every_rank() {
        for n in 1..=5 {
            for len in [0usize, 1, 15, 16, 17, 1000, 5000] {
                let out = run(n, move |mut c| {
                    let r = c.rank();
                    let mut buf: Vec<f32> =
                        (0..len).map(|i| (i * 7 + r * 13) as f32 * 0.1).collect();
                    for _ in 0..3 {
                        // repeated calls reuse the barrier correctly
                        c.all_reduce_sum(&mut buf).unwrap();
                        buf.iter_mut().for_each(|v| *v /= n as f32);
                    }
                    buf
                });
                let expect: Vec<f32> = (0..len)
                    .map(|i| {
                        let mut acc = 0.0f32;
                        for r in 0..n {
                            acc += (i * 7 + r * 13) as f32 * 0.1;
                        }
                        acc / n as f32
                    })
                    .collect();
                for b in &out {
                    assert_eq!(b, &out[0], "ranks disagree (n={n}, len={len})");
                    for (x, y) in b.iter().zip(&expect) {
                        assert!(
                            (x - y).abs() <= 1e-3 * y.abs().max(1.0),
                            "n={n} len={len}: {x} vs {y}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn broadcast_copies_the_roots_words() {
        let out = run(3, |mut c| {
            let mut w = [c.rank() as u64 * 10, 7];
            c.broadcast_u64(&mut w, 1).unwrap();
            w
        });
        assert!(out.iter().all(|w| *w == [10, 7]));
    }

    #[test]
    fn all_gather_puts_every_ranks_words_in_rank_order() {
        for n in 1..=4 {
            let out = run(n, move |mut c| {
                let r = c.rank() as u64;
                let mut out = vec![0u64; 2 * n];
                for round in 0..3u64 {
                    c.all_gather_u64(&[r * 10 + round, 7], &mut out).unwrap();
                }
                out
            });
            let want: Vec<u64> = (0..n as u64).flat_map(|r| [r * 10 + 2, 7]).collect();
            assert!(out.iter().all(|o| *o == want), "n={n}: {out:?}");
        }
    }

    #[test]
    fn abort_wakes_ranks_blocked_in_a_barrier() {
        let mut group = LocalCollective::group(3);
        let last = group.pop().unwrap();
        let hs: Vec<_> = group
            .into_iter()
            .map(|mut c| std::thread::spawn(move || c.barrier()))
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        last.abort("rank 2 failed");
        for h in hs {
            assert_eq!(
                h.join().unwrap(),
                Err(CollectiveError::Aborted("rank 2 failed".into()))
            );
        }
    }

    #[test]
    fn mismatched_lengths_are_an_error_not_memory_corruption() {
        let out = run(2, |mut c| {
            let mut buf = vec![1.0f32; 10 + c.rank()];
            c.all_reduce_sum(&mut buf).err()
        });
        assert!(
            out.iter()
                .any(|e| matches!(e, Some(CollectiveError::LengthMismatch { .. }))),
            "{out:?}"
        );
    }
}
