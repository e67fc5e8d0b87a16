//! What the straggler detector is told: its thresholds (`DetectorConfig`) and what it knows
//! of the machine and the run to explain a slow rank (`Context`).

use std::time::Duration;

#[derive(Clone, Debug, PartialEq)]
pub struct DetectorConfig {
    pub warmup: u64,
    pub every: u64,
    pub window: usize,
    pub slow_below: f64,
    pub clear_above: f64,
    pub consecutive: u32,
    pub min_gap: Duration,
    pub degraded_ratio: f64,
    pub stall_timeout: Duration,
    /// Steps between two exchanges (local SGD's H): the others wait for a slow rank only once
    /// per period, so waiting is judged as its mean over the window (the period's wait spread
    /// over its steps), never its median (zero on the steps between syncs).
    pub sync_every: u64,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        DetectorConfig {
            warmup: 20,
            every: 10,
            window: 50,
            slow_below: 0.75,
            clear_above: 0.85,
            consecutive: 3,
            min_gap: Duration::from_millis(2),
            degraded_ratio: 1.25,
            stall_timeout: Duration::from_secs(60),
            sync_every: 1,
        }
    }
}

/// What the detector knows about the machine, to explain a slow rank.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Context {
    pub cores: usize,
    /// Threads each CPU worker computes with (`--threads-per-worker`); 0 is taken as 1.
    pub threads_per_worker: usize,
    /// A fault injected on each rank (`--slow-rank`, `--slow-data`), as the flag that asked.
    pub injected: Vec<Option<String>>,
    /// Each rank's device model, where known (GPUs); a different one from its peers explains.
    pub models: Vec<Option<String>>,
    /// Each rank's host, in a run over several processes (empty otherwise).
    pub hosts: Vec<String>,
    /// The samples are pictures decoded from files (which `--image-size` makes smaller).
    pub pictures: bool,
    /// Loader threads per rank, and batches queued ahead per rank (0: built on the worker).
    pub loader_threads: usize,
    pub prefetch: usize,
    /// The run's other processes on this machine: their global ranks and process ids (one
    /// suspended there explains a stall).
    pub peers_here: Vec<crate::pids::Peer>,
}

impl Context {
    /// Whether the ranks' loader threads and workers want more cores than this process may
    /// use (a CPU worker computes on its `threads_per_worker`, a GPU rank's host thread on
    /// one); never judged over several processes (`cores` 0).
    fn crowded(&self) -> bool {
        let wanted: usize = (self.models.iter())
            .map(|m| self.loader_threads + m.as_ref().map_or(self.threads_per_worker.max(1), |_| 1))
            .sum();
        self.cores > 0 && wanted > self.cores
    }

    /// Whether the loader threads' busy share is said, as `RunInfo::loaders_said` decides.
    pub(super) fn loaders_said(&self) -> bool {
        self.pictures && self.prefetch > 0
    }

    /// What an input-bound run is told: the fault injected on every rank's input where that
    /// is the cause, else what feeds the ranks faster, as far as `loaders` (their busy share)
    /// tells: loader threads not at their limit lose the time handing batches over (of
    /// `per_replica` samples), and more of them than the cores only share those.
    pub(super) fn input_fix(&self, loaders: Option<f64>, per_replica: usize) -> String {
        let injected: Option<Vec<&str>> = self
            .injected
            .iter()
            .map(|f| f.as_deref().filter(|f| f.contains("--slow-data")))
            .collect();
        let smaller = match self.pictures {
            true => ", or smaller pictures (--image-size)",
            false => "",
        };
        match injected {
            Some(flags) if !flags.is_empty() => format!("fault injected: {}", flags.join(", ")),
            _ if self.prefetch == 0 => format!(
                "each worker builds its batches itself (--prefetch 0): --prefetch 4 builds them on loader threads while it computes{smaller}"
            ),
            _ if loaders.is_some_and(|l| l < crate::observe::monitor::LOADERS_FULL) => format!(
                "the loader threads are not at their limit: handing each batch over takes the time, which a larger --batch-per-replica (now {per_replica}) spreads over more samples"
            ),
            _ if self.crowded() => format!(
                "the loader threads ({} a rank) already share this machine's {} with the workers{}",
                self.loader_threads,
                crate::text::counted(self.cores, "core"),
                match self.pictures {
                    true => ": try smaller pictures (--image-size) or fewer ranks",
                    false => ": try fewer ranks",
                }
            ),
            _ => format!(
                "try more --loader-threads (now {}){smaller}",
                self.loader_threads
            ),
        }
    }
}
