//! The collective of a multi-process run: the ranks of a process (threads) combine in memory
//! first, in fixed order; then the process's first rank, its leader, exchanges the process's
//! part with the other processes; then the result is shared back in memory.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Collective, CollectiveError, LocalCollective, Processes, ReduceTiming};

/// One rank's handle; `group` makes those of this process.
pub struct HierCollective {
    local: LocalCollective,
    procs: Arc<dyn Processes>,
    /// The global rank of every process's first rank, then the world size.
    offsets: Arc<Vec<usize>>,
    /// The leader's last exchange with the other processes (waiting, moving), in ns, for the
    /// other ranks of the process to account the same way.
    leader_times: Arc<[AtomicU64; 2]>,
}

impl HierCollective {
    /// The handles of this process's ranks, in rank order. `offsets[p]` is process p's first
    /// global rank and `offsets[count]` the world size.
    pub fn group(procs: Arc<dyn Processes>, offsets: Vec<usize>) -> Vec<HierCollective> {
        let p = procs.index();
        assert_eq!(offsets.len(), procs.count() + 1, "one offset per process");
        let n = offsets[p + 1] - offsets[p];
        let offsets = Arc::new(offsets);
        let leader_times = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        LocalCollective::group(n)
            .into_iter()
            .map(|local| HierCollective {
                local,
                procs: procs.clone(),
                offsets: offsets.clone(),
                leader_times: leader_times.clone(),
            })
            .collect()
    }

    fn leader(&self) -> bool {
        self.local.rank() == 0
    }

    fn process(&self) -> usize {
        self.procs.index()
    }

    /// The process holding global rank `rank`, and its index there.
    fn locate(&self, rank: usize) -> (usize, usize) {
        let p = self.offsets.partition_point(|&o| o <= rank) - 1;
        (p, rank - self.offsets[p])
    }

    /// A failed exchange between processes wakes this process's other ranks with it.
    fn across<T>(&self, r: Result<T, CollectiveError>) -> Result<T, CollectiveError> {
        if let Err(e) = &r {
            self.local.abort(&e.to_string());
        }
        r
    }
}

/// The bytes of a slice of words.
fn bytes_mut(v: &mut [u64]) -> &mut [u8] {
    // SAFETY: u64 has no padding and every bit pattern is valid both ways; the length in bytes
    // covers exactly the slice's memory, borrowed mutably for as long as the bytes are.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), std::mem::size_of_val(v)) }
}

impl Collective for HierCollective {
    fn rank(&self) -> usize {
        self.offsets[self.process()] + self.local.rank()
    }

    fn world_size(&self) -> usize {
        *self
            .offsets
            .last()
            .expect("offsets end with the world size")
    }

    fn all_reduce_sum(&mut self, buf: &mut Vec<f32>) -> Result<ReduceTiming, CollectiveError> {
        let t0 = Instant::now();
        let inside = self.local.all_reduce_sum(buf)?;
        if self.leader() {
            let r = self.procs.all_reduce_sum(buf);
            let across = self.across(r)?;
            self.leader_times[0].store(across.wait.as_nanos() as u64, Ordering::Relaxed);
            self.leader_times[1].store(across.transfer.as_nanos() as u64, Ordering::Relaxed);
        }
        self.local.broadcast(buf, 0)?;
        // the broadcast's barriers order the leader's stores before these loads
        let across_wait = Duration::from_nanos(self.leader_times[0].load(Ordering::Relaxed));
        let wait = inside.wait + across_wait;
        Ok(ReduceTiming {
            wait,
            transfer: t0.elapsed().saturating_sub(wait),
        })
    }

    fn broadcast_u64(&mut self, buf: &mut [u64], root: usize) -> Result<Duration, CollectiveError> {
        let (root_process, root_local) = self.locate(root);
        let mut waited = Duration::ZERO;
        if root_process == self.process() {
            waited += self.local.broadcast(buf, root_local)?;
        }
        if self.leader() {
            let r = self.procs.broadcast_bytes(bytes_mut(buf), root_process);
            waited += self.across(r)?;
        }
        waited += self.local.broadcast(buf, 0)?;
        Ok(waited)
    }

    fn all_gather_u64(
        &mut self,
        mine: &[u64],
        out: &mut [u64],
    ) -> Result<Duration, CollectiveError> {
        let len = mine.len();
        let world = self.world_size();
        if out.len() != len * world {
            return Err(CollectiveError::LengthMismatch {
                rank: self.rank(),
                got: out.len(),
                want: len * world,
            });
        }
        let widest = self.offsets.windows(2).map(|w| w[1] - w[0]).max();
        let widest = widest.unwrap_or(0);
        let mut ours = vec![0u64; widest * len];
        let n = self.local.world_size();
        let mut waited = self.local.all_gather(mine, &mut ours[..n * len])?;
        if self.leader() {
            // processes may hold different numbers of ranks: each sends `widest` ranks' worth
            let mut all = vec![0u64; widest * len * self.procs.count()];
            let sent = bytemuck_u64(&ours);
            let r = self.procs.all_gather_bytes(&sent, bytes_mut(&mut all));
            waited += self.across(r)?;
            for p in 0..self.procs.count() {
                let (lo, hi) = (self.offsets[p], self.offsets[p + 1]);
                let block = &all[p * widest * len..][..(hi - lo) * len];
                out[lo * len..hi * len].copy_from_slice(block);
            }
        }
        waited += self.local.broadcast(out, 0)?;
        Ok(waited)
    }

    fn barrier(&mut self) -> Result<Duration, CollectiveError> {
        let mut waited = self.local.barrier()?;
        if self.leader() {
            let r = self.procs.barrier();
            waited += self.across(r)?;
        }
        waited += self.local.barrier()?;
        Ok(waited)
    }

    fn abort(&self, reason: &str) {
        self.local.abort(reason);
        self.procs.abort(reason);
    }

    fn abort_reason(&self) -> Option<String> {
        self.local
            .abort_reason()
            .or_else(|| self.procs.abort_reason())
    }
}

/// The bytes of `words` in this machine's order (what `bytes_mut` reads them back from).
fn bytemuck_u64(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::ThreadProcesses;

    /// Runs `f` on every rank of a world cut into processes of `sizes` ranks (processes are
    /// threads too), returning the results in global rank order.
    fn run<F, T>(sizes: &[usize], f: F) -> Vec<T>
    where
        F: Fn(HierCollective) -> T + Send + Sync + Copy + 'static,
        T: Send + 'static,
    {
        let mut offsets = vec![0];
        for s in sizes {
            offsets.push(offsets.last().unwrap() + s);
        }
        let mut handles = Vec::new();
        for procs in ThreadProcesses::group(sizes.len()) {
            let procs: Arc<dyn Processes> = Arc::new(procs);
            for c in HierCollective::group(procs, offsets.clone()) {
                handles.push(std::thread::spawn(move || f(c)));
            }
        }
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn all_reduce_sums_over_every_rank_of_every_process() {
        for sizes in [&[1, 1][..], &[2, 2], &[1, 3], &[3, 1, 2]] {
            let world: usize = sizes.iter().sum();
            let out = run(sizes, |mut c| {
                let r = c.rank();
                let mut buf: Vec<f32> = (0..100).map(|i| (i * 3 + r * 5) as f32).collect();
                c.all_reduce_sum(&mut buf).unwrap();
                (r, c.world_size(), buf)
            });
            for (i, (r, w, buf)) in out.iter().enumerate() {
                assert_eq!((*r, *w), (i, world), "{sizes:?}");
                for (k, v) in buf.iter().enumerate() {
                    let want: usize = (0..world).map(|r| k * 3 + r * 5).sum();
                    assert_eq!(*v, want as f32, "{sizes:?} rank {r} element {k}");
                }
            }
        }
    }

    #[test]
    fn broadcast_and_all_gather_follow_global_ranks() {
        let out = run(&[1, 3], |mut c| {
            let r = c.rank() as u64;
            let mut word = [r * 100, r];
            c.broadcast_u64(&mut word, 2).unwrap();
            let mut all = vec![0u64; 2 * c.world_size()];
            c.all_gather_u64(&[r, r * r], &mut all).unwrap();
            c.barrier().unwrap();
            (word, all)
        });
        for (word, all) in out {
            assert_eq!(word, [200, 2]);
            assert_eq!(all, vec![0, 0, 1, 1, 2, 4, 3, 9]);
        }
    }

    #[test]
    fn a_failed_rank_wakes_the_ranks_of_its_process() {
        let out = run(&[2, 1], |mut c| {
            if c.rank() == 1 {
                c.abort("rank 1 failed");
                return None;
            }
            let mut buf = vec![1.0f32; 4];
            c.all_reduce_sum(&mut buf).err()
        });
        assert!(
            matches!(&out[0], Some(CollectiveError::Aborted(r)) if r == "rank 1 failed"),
            "{out:?}"
        );
        // process 1 learns of it from the abort its peer process raised (the launcher's job
        // in a real run); here the simulated link carries it
        assert!(out[2].is_some(), "{out:?}");
    }
}
