//! The input pipeline: a seeded shuffle per epoch, global batches cut into per-rank shards
//! (and grad-accumulation micro-batches), built by loader threads into bounded queues.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::config::{Budget, RunConfig};
use crate::data::{Dataset, MicroBatch};
use crate::engine::events::EndsAt;
use crate::engine::Device;
use crate::nn::rng::{tag, Rng};

/// Position in the data stream: the next sample of `epoch`'s permutation is `offset`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    pub epoch: u64,
    pub offset: usize,
}

/// How global batches are formed; identical on every rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sharding {
    pub per_replica: usize,
    pub ranks: usize,
    pub accum: usize,
    /// Uneven per-rank micro-batch sizes (`--rebalance`), summing to `per_replica * ranks`;
    /// `None`: every rank gets `per_replica`.
    pub split: Option<Arc<Vec<usize>>>,
}

impl Sharding {
    pub fn global_batch(&self) -> usize {
        self.per_replica * self.ranks * self.accum
    }

    /// The global batch starting at `at`: (samples in it, cursor after it, last of its epoch?).
    /// The last batch of an epoch may be short; it is kept, never dropped.
    pub fn span(&self, at: Cursor, n: usize) -> (usize, Cursor, bool) {
        let m = self.global_batch().min(n - at.offset);
        let end = at.offset + m;
        if end >= n {
            (
                m,
                Cursor {
                    epoch: at.epoch + 1,
                    offset: 0,
                },
                true,
            )
        } else {
            (
                m,
                Cursor {
                    epoch: at.epoch,
                    offset: end,
                },
                false,
            )
        }
    }

    /// Where the epoch of `n` samples that `at` lies in ends, and the run of `budget`, at this
    /// batch, after step `step`.
    pub fn ends_at(&self, step: u64, at: Cursor, n: usize, budget: Budget) -> EndsAt {
        let global = self.global_batch().max(1);
        let epoch = step + (n - at.offset.min(n)).div_ceil(global) as u64;
        let run = match budget {
            Budget::Steps(last) => last,
            Budget::Epochs(e) if at.epoch >= e => step,
            Budget::Epochs(e) => epoch + (e - at.epoch - 1) * n.div_ceil(global) as u64,
        };
        EndsAt { epoch, run }
    }

    /// Where rank `rank`'s micro-batch `micro` lies inside a global batch of `m` samples:
    /// pieces are ordered micro-major, rank-minor, and sized as evenly as possible, so a full
    /// batch gives every piece exactly `per_replica` samples.
    pub fn piece(&self, m: usize, micro: usize, rank: usize) -> (usize, usize) {
        let Some(split) = &self.split else {
            let pieces = self.ranks * self.accum;
            let i = micro * self.ranks + rank;
            let (base, extra) = (m / pieces, m % pieces);
            let start = i * base + i.min(extra);
            return (start, base + usize::from(i < extra));
        };
        // the micro-batch's chunk of the global batch, cut among ranks in proportion to the
        // split (exactly the split for a full batch)
        let (base, extra) = (m / self.accum, m % self.accum);
        let chunk_start = micro * base + micro.min(extra);
        let chunk = base + usize::from(micro < extra);
        let sizes = proportional(chunk, split);
        let start = chunk_start + sizes[..rank].iter().sum::<usize>();
        (start, sizes[rank])
    }
}

/// `total` cut in proportion to `weights` (largest remainders), summing to `total` exactly.
pub fn proportional(total: usize, weights: &[usize]) -> Vec<usize> {
    let sum: usize = weights.iter().sum();
    if sum == 0 {
        return vec![0; weights.len()];
    }
    let exact: Vec<(usize, usize)> = weights
        .iter()
        .map(|&w| (total * w / sum, total * w % sum))
        .collect();
    let mut sizes: Vec<usize> = exact.iter().map(|e| e.0).collect();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    // larger remainder first; ties to the lower rank, so every rank computes the same cut
    order.sort_by(|&a, &b| exact[b].1.cmp(&exact[a].1).then(a.cmp(&b)));
    for &i in order.iter().take(total - sizes.iter().sum::<usize>()) {
        sizes[i] += 1;
    }
    sizes
}

/// The most loader threads per rank `threads_for` picks.
pub const MOST_AUTO_THREADS: usize = 8;

/// Loader threads per rank: `--loader-threads`, or what keeps the devices fed. Samples held
/// ready are copied by one; picture sets (decoded, augmented and normalised batch by batch) get
/// the cores the process's GPU ranks leave, shared among them (at most 8 each); CPU workers
/// use the cores themselves, so theirs get one each.
pub fn threads_for(
    cfg: &RunConfig,
    train: &Dataset,
    devices: &[Device],
    local_ranks: usize,
) -> usize {
    if let Some(t) = cfg.loader_threads {
        return t;
    }
    let gpus = devices.iter().any(|d| matches!(d, Device::Gpu { .. }));
    if train.pictures.is_none() || !gpus {
        return 1;
    }
    let cores = crate::engine::devices::available_cores();
    (cores.saturating_sub(local_ranks) / local_ranks.max(1)).clamp(1, MOST_AUTO_THREADS)
}

/// Everything one rank needs for one optimizer step.
#[derive(Debug)]
pub struct Batch {
    pub generation: u64,
    pub micro: Vec<MicroBatch>,
    pub start: Cursor,
    pub next: Cursor,
    pub epoch_end: bool,
    pub global_samples: usize,
    /// The time its building took the thread that built it (gathering, decoding, augmenting),
    /// awake: a stop of the process in it left out.
    pub built: Duration,
}

/// Builds batches for one rank; keeps the current epoch's permutation.
struct Builder {
    data: Arc<Dataset>,
    seed: u64,
    rank: usize,
    perm: Vec<u32>,
    perm_epoch: Option<u64>,
    /// Whether micro-batches carry their samples' features (not when the replica holds the
    /// training set: `RankLoader::rows_only`).
    features: Arc<AtomicBool>,
    /// Buffers to build batches in.
    spares: Arc<Spares>,
}

impl Builder {
    /// Makes `perm` the sample order of `epoch`.
    fn shuffle_for(&mut self, epoch: u64) {
        if self.perm_epoch != Some(epoch) {
            self.perm = (0..self.data.len() as u32).collect();
            Rng::stream(self.seed, tag::EPOCH_ORDER, epoch).shuffle(&mut self.perm);
            self.perm_epoch = Some(epoch);
        }
    }

    fn build(&mut self, at: Cursor, sh: &Sharding, generation: u64) -> Batch {
        let t = Instant::now();
        let n = self.data.len();
        let (m, next, epoch_end) = sh.span(at, n);
        self.shuffle_for(at.epoch);
        let (data, perm) = (&self.data, &self.perm);
        let micro = (0..sh.accum)
            .map(|j| {
                let (start, len) = sh.piece(m, j, self.rank);
                let idx = &perm[at.offset + start..at.offset + start + len];
                // rows alone leave `x` empty (what the replica reads them by)
                let mut x = Vec::new();
                if self.features.load(Ordering::Relaxed) {
                    x = self.spares.take();
                    data.gather(idx, at.epoch, &mut x);
                }
                MicroBatch {
                    x,
                    y: idx.iter().map(|&i| data.y[i as usize]).collect(),
                    n: len,
                    rows: idx.to_vec(),
                }
            })
            .collect();
        Batch {
            generation,
            micro,
            start: at,
            next,
            epoch_end,
            global_samples: m,
            // (a stop of the process while it was built, Ctrl-Z, is not building)
            built: crate::clock::awake(t.elapsed()),
        }
    }
}

/// What the loader threads are producing now.
#[derive(Clone)]
struct Plan {
    start: Cursor,
    sharding: Sharding,
}

/// Sample buffers of batches the rank is done with, for the next batches to be written into:
/// a fresh one of a picture batch's size (tens of MB) is faulted in and zeroed page by page,
/// a few percent of a loader thread's time.
struct Spares {
    bufs: Mutex<Vec<Vec<f32>>>,
    /// The most kept: the batches that can be queued or in use at once.
    most: usize,
}

impl Spares {
    fn new(most: usize) -> Spares {
        Spares {
            bufs: Mutex::new(Vec::new()),
            most,
        }
    }

    /// A spare buffer (its contents are stale), or a new empty one.
    fn take(&self) -> Vec<f32> {
        self.bufs
            .lock()
            .expect("loader spares lock")
            .pop()
            .unwrap_or_default()
    }

    fn give(&self, buf: Vec<f32>) {
        let mut bufs = self.bufs.lock().expect("loader spares lock");
        if buf.capacity() > 0 && bufs.len() < self.most {
            bufs.push(buf);
        }
    }
}

struct SharedPlan {
    generation: AtomicU64,
    plan: Mutex<Plan>,
}

/// One rank's loader. With `prefetch == 0` batches are built on the worker's own thread;
/// otherwise `threads` loader threads take turns (thread t builds batches t, t+T, ...) and
/// the rank reads their queues in the same order, so the stream is deterministic.
pub struct RankLoader {
    inner: Inner,
    generation: u64,
    taken: usize,
    features: Arc<AtomicBool>,
    spares: Arc<Spares>,
}

enum Inner {
    Inline {
        builder: Builder,
        plan: Plan,
    },
    Threads {
        shared: Arc<SharedPlan>,
        queues: Vec<Receiver<Batch>>,
        handles: Vec<JoinHandle<()>>,
    },
}

impl RankLoader {
    pub fn new(
        data: Arc<Dataset>,
        seed: u64,
        rank: usize,
        start: Cursor,
        sharding: Sharding,
        prefetch: usize,
        threads: usize,
    ) -> std::io::Result<RankLoader> {
        let features = Arc::new(AtomicBool::new(true));
        let threads = threads.max(1);
        let depth = prefetch.div_ceil(threads).max(1);
        // the queued batches, the one in use and the one being built per thread
        let spares = Arc::new(Spares::new(match prefetch {
            0 => 1,
            _ => threads * (depth + 1) + 1,
        }));
        let builder = || Builder {
            data: data.clone(),
            seed,
            rank,
            perm: Vec::new(),
            perm_epoch: None,
            features: features.clone(),
            spares: spares.clone(),
        };
        let plan = Plan { start, sharding };
        if prefetch == 0 {
            return Ok(RankLoader {
                inner: Inner::Inline {
                    builder: builder(),
                    plan,
                },
                generation: 0,
                taken: 0,
                features,
                spares,
            });
        }
        let shared = Arc::new(SharedPlan {
            generation: AtomicU64::new(0),
            plan: Mutex::new(plan),
        });
        // built up in place, so that a thread that cannot be started ends those already running
        let mut loader = RankLoader {
            inner: Inner::Threads {
                shared: shared.clone(),
                queues: Vec::new(),
                handles: Vec::new(),
            },
            generation: 0,
            taken: 0,
            features: features.clone(),
            spares: spares.clone(),
        };
        for t in 0..threads {
            let (tx, rx) = bounded(depth);
            let (shared, b) = (shared.clone(), builder());
            let h = std::thread::Builder::new()
                .name(format!("loader-r{rank}-{t}"))
                .spawn(move || produce(b, shared, tx, t, threads))?;
            if let Inner::Threads {
                queues, handles, ..
            } = &mut loader.inner
            {
                queues.push(rx);
                handles.push(h);
            }
        }
        Ok(loader)
    }

    /// From now on micro-batches carry their samples' rows alone (the rank's replica holds the
    /// training set); those already built keep their features, which the replica takes as
    /// they come.
    pub fn rows_only(&self) {
        self.features.store(false, Ordering::Relaxed);
    }

    /// Hands back the sample buffers of a batch the rank is done with, for later batches.
    pub fn recycle(&self, micro: &mut [MicroBatch]) {
        for m in micro {
            self.spares.give(std::mem::take(&mut m.x));
        }
    }

    /// The threads that build this rank's batches in turn (its worker's own where none).
    pub fn threads(&self) -> usize {
        match &self.inner {
            Inner::Inline { .. } => 1,
            Inner::Threads { queues, .. } => queues.len(),
        }
    }

    /// The time building `batch` took of this rank's loader threads as a whole: its building
    /// time over the threads that take turns. Summed over steps and divided by their time, the
    /// share of the loaders' time spent building (near 1: they can no longer keep up).
    pub fn busy(&self, batch: &Batch) -> Duration {
        batch.built / self.threads() as u32
    }

    /// The next batch in stream order (blocks while the loader threads catch up).
    pub fn next_batch(&mut self) -> Batch {
        match &mut self.inner {
            Inner::Inline { builder, plan } => {
                let b = builder.build(plan.start, &plan.sharding, self.generation);
                plan.start = b.next;
                b
            }
            Inner::Threads { queues, .. } => {
                let q = &queues[self.taken % queues.len()];
                loop {
                    let b = q.recv().expect("loader thread stopped");
                    if b.generation == self.generation {
                        self.taken += 1;
                        return b;
                    }
                }
            }
        }
    }

    /// Restarts the stream at `start` with new batch shapes (after a batch-size change).
    /// Batches already queued under the old shapes are discarded.
    pub fn restart(&mut self, start: Cursor, sharding: Sharding) {
        self.generation += 1;
        self.taken = 0;
        match &mut self.inner {
            Inner::Inline { plan, .. } => *plan = Plan { start, sharding },
            Inner::Threads { shared, queues, .. } => {
                // drop what is queued under the old shapes (freeing a producer blocked on a
                // full queue) *before* the new generation is published: once it is, a
                // producer may already have queued the first new batch, which must not be lost.
                // Stale batches queued after this are skipped by `next_batch`.
                for q in queues.iter() {
                    while q.try_recv().is_ok() {}
                }
                *shared.plan.lock().expect("loader plan lock") = Plan { start, sharding };
                shared.generation.store(self.generation, Ordering::Release);
            }
        }
    }
}

fn produce(mut b: Builder, shared: Arc<SharedPlan>, tx: Sender<Batch>, t: usize, threads: usize) {
    loop {
        let generation = shared.generation.load(Ordering::Acquire);
        let plan = shared.plan.lock().expect("loader plan lock").clone();
        let mut at = plan.start;
        for _ in 0..t {
            at = plan.sharding.span(at, b.data.len()).1;
        }
        while shared.generation.load(Ordering::Acquire) == generation {
            let batch = b.build(at, &plan.sharding, generation);
            at = batch.next;
            if tx.send(batch).is_err() {
                return; // the rank is gone
            }
            for _ in 1..threads {
                at = plan.sharding.span(at, b.data.len()).1;
            }
        }
    }
}

impl Drop for RankLoader {
    fn drop(&mut self) {
        if let Inner::Threads {
            queues, handles, ..
        } = &mut self.inner
        {
            queues.clear(); // closing the queues ends the threads at their next send
            for h in handles.drain(..) {
                let _ = h.join();
            }
        }
    }
}

#[cfg(test)]
mod tests;
