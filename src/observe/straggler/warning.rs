//! What the detector says: warnings and their likely causes, in the words the log and the UI
//! use.

use std::fmt;
use std::time::Duration;

use super::bound::{Bound, Limit};
use super::spike::Spike;
use crate::observe::monitor::LOADERS_FULL;

/// The likely cause of a straggler, from evidence.
#[derive(Clone, Debug, PartialEq)]
pub enum Cause {
    /// Its extra time is mostly waiting for input.
    DataBound {
        data_ms: f64,
        fastest_data_ms: f64,
        /// Its loader threads' busy share and the fastest rank's, where said.
        loaders: Option<(f64, f64)>,
    },
    /// More CPU workers than cores.
    Oversubscribed {
        workers: usize,
        cores: usize,
    },
    /// A different device from its peers.
    Heterogeneous {
        model: String,
    },
    /// A fault injected on purpose.
    Injected(String),
    /// Every rank on its host spends longer in the all-reduce than the other hosts' ranks
    /// (the host's link, or its side of the network).
    Network {
        host: String,
        comm_ms: f64,
        others_comm_ms: f64,
    },
    /// Other work takes the cores of its machine (`host`: another than process 0's), and not
    /// those of the fastest rank's.
    OutsideLoad {
        host: Option<String>,
        load: crate::observe::machine_load::Load,
    },
    /// The GPU is clocked down (NVML throttle reasons), and its peers are not.
    Throttled {
        reasons: Vec<&'static str>,
        sm_clock_mhz: Option<u32>,
        sm_clock_max_mhz: Option<u32>,
    },
    Unknown,
}

impl Cause {
    /// Every `kind` there is.
    pub const KINDS: [&'static str; 8] = [
        "data-bound",
        "oversubscribed",
        "heterogeneous",
        "injected",
        "network",
        "outside-load",
        "throttled",
        "unknown",
    ];

    /// A short name for the metrics file (one of `KINDS`).
    pub fn kind(&self) -> &'static str {
        match self {
            Cause::DataBound { .. } => "data-bound",
            Cause::Oversubscribed { .. } => "oversubscribed",
            Cause::Heterogeneous { .. } => "heterogeneous",
            Cause::Injected(_) => "injected",
            Cause::Network { .. } => "network",
            Cause::OutsideLoad { .. } => "outside-load",
            Cause::Throttled { .. } => "throttled",
            Cause::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::DataBound {
                data_ms,
                fastest_data_ms,
                loaders,
            } => {
                let pct = |v: f64| format!("{:.0}%", v * 100.0);
                // loader threads at their limit: only more of them (or cheaper batches) help
                let (busy, fix) = match loaders {
                    Some((mine, fastest)) => (
                        format!(
                            "; its loader threads busy {} of the time, the fastest rank's {}",
                            pct(*mine),
                            pct(*fastest)
                        ),
                        match *mine >= LOADERS_FULL {
                            true => "try more --loader-threads",
                            false => "try more --prefetch or --loader-threads",
                        },
                    ),
                    None => (String::new(), "try more --prefetch or --loader-threads"),
                };
                write!(
                    f,
                    "data-bound (waits {data_ms:.1} ms/step for input vs {fastest_data_ms:.1} ms on the fastest rank{busy}; {fix})"
                )
            }
            Cause::Oversubscribed { workers, cores } => write!(
                f,
                "oversubscribed ({workers} CPU workers share {}; use --devices cpu:{cores})",
                crate::text::counted(*cores, "core")
            ),
            Cause::Heterogeneous { model } => write!(f, "heterogeneous (a {model} among different devices)"),
            Cause::Injected(flag) => write!(f, "injected ({flag})"),
            Cause::Network { host, comm_ms, others_comm_ms } => write!(
                f,
                "network ({host}'s ranks spend {comm_ms:.1} ms per step in the all-reduce, the other hosts' {others_comm_ms:.1} ms)"
            ),
            Cause::OutsideLoad { host, load } => {
                let whose = host.as_ref().map_or("this machine's".into(), |h| format!("{h}'s"));
                let top = (load.top.as_ref())
                    .map_or(String::new(), |(who, c)| format!(", {c:.1} of them {who}"));
                write!(
                    f,
                    "outside load (other work takes {:.1} of {whose} {} cores{top}; the fastest rank's machine is free)",
                    load.others, load.cores
                )
            }
            Cause::Throttled {
                reasons,
                sm_clock_mhz,
                sm_clock_max_mhz,
            } => {
                write!(f, "throttled ({}", reasons.join(", "))?;
                if let (Some(now), Some(max)) = (sm_clock_mhz, sm_clock_max_mhz) {
                    write!(f, "; SM clock {now} of {max} MHz")?;
                }
                f.write_str("; check cooling and power limits with nvidia-smi -q -d PERFORMANCE)")
            }
            Cause::Unknown => f.write_str("unknown"),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Warning {
    Straggler {
        rank: usize,
        /// Its host, in a run over several machines.
        host: Option<String>,
        step: u64,
        /// This rank's median work over the fastest rank's.
        slowdown: f64,
        work_ms: f64,
        fastest_rank: usize,
        fastest_ms: f64,
        /// What the other ranks spend per step waiting for the slowest (median, mean over them).
        others_wait_ms: f64,
        /// Whether the work is CPU workers' thread CPU time (then the others may wait longer
        /// than the work differs: the slow rank also waited for a core).
        cpu_time: bool,
        cause: Cause,
        /// A fault injected on this rank (`--slow-rank`, `--slow-data`), said beside the cause.
        injected: Option<String>,
    },
    StragglerCleared {
        rank: usize,
        step: u64,
    },
    /// Work per step now and at this rank's best speed, both at the current batch size.
    Degraded {
        rank: usize,
        step: u64,
        median_ms: f64,
        best_ms: f64,
        /// Other work on its machine, where an outside-load warning holds: its likely cause.
        outside: Option<String>,
    },
    DegradedCleared {
        rank: usize,
        step: u64,
        /// Cleared because the rank's batch changed (its best is measured afresh), not
        /// because it recovered.
        rebased: bool,
    },
    /// No step has completed for `waited`; `missing` ranks had not reached the all-reduce.
    Stall {
        step: u64,
        waited: Duration,
        missing: Vec<usize>,
        /// A fault injected on one of the missing ranks (`--slow-data 1:2500`), said beside.
        injected: Option<String>,
        /// A process of the run on this machine, holding a missing rank, that is suspended
        /// (Ctrl-Z, kill -STOP).
        suspended: Option<crate::pids::Peer>,
    },
    /// The whole run is held back by its input or its host, or leaves its GPUs underused.
    Bound {
        step: u64,
        bound: Bound,
    },
    BoundCleared {
        step: u64,
        limit: Limit,
    },
    /// A step's gradient norm many times its recent median (the training, not a rank); or
    /// the largest of the spikes of a minute, said for them all.
    GradSpike(Spike),
    /// Other work on the machine (another run, a build, the hypervisor) takes the cores the
    /// run's ranks need.
    /// `rank`: the first rank of the process on another machine than process 0's that read
    /// it, and `host` that machine's (`None`: process 0's machine).
    OutsideLoad {
        step: u64,
        load: crate::observe::machine_load::Load,
        rank: Option<usize>,
        host: Option<String>,
    },
    OutsideLoadCleared {
        step: u64,
        rank: Option<usize>,
        host: Option<String>,
        /// Another machine whose loads stopped coming: not known to be free, no longer known.
        unheard: bool,
    },
}

impl Warning {
    /// The rank this is about, if one.
    pub fn rank(&self) -> Option<usize> {
        match self {
            Warning::Straggler { rank, .. }
            | Warning::StragglerCleared { rank, .. }
            | Warning::Degraded { rank, .. }
            | Warning::DegradedCleared { rank, .. } => Some(*rank),
            Warning::OutsideLoad { rank, .. } | Warning::OutsideLoadCleared { rank, .. } => *rank,
            Warning::Stall { .. }
            | Warning::Bound { .. }
            | Warning::BoundCleared { .. }
            | Warning::GradSpike(_) => None,
        }
    }
    /// The step it was said at.
    pub fn step(&self) -> u64 {
        match *self {
            Warning::Straggler { step, .. }
            | Warning::StragglerCleared { step, .. }
            | Warning::Degraded { step, .. }
            | Warning::DegradedCleared { step, .. }
            | Warning::Stall { step, .. }
            | Warning::Bound { step, .. }
            | Warning::BoundCleared { step, .. }
            | Warning::OutsideLoad { step, .. }
            | Warning::OutsideLoadCleared { step, .. } => step,
            Warning::GradSpike(ref spike) => spike.step,
        }
    }
    /// Whether this ends an earlier warning.
    pub fn is_clear(&self) -> bool {
        matches!(
            self,
            Warning::StragglerCleared { .. }
                | Warning::DegradedCleared { .. }
                | Warning::BoundCleared { .. }
                | Warning::OutsideLoadCleared { .. }
        )
    }
    /// A short name for the metrics file.
    pub fn kind(&self) -> &'static str {
        match self {
            Warning::Straggler { .. } => "straggler",
            Warning::StragglerCleared { .. } => "straggler_cleared",
            Warning::Degraded { .. } => "degraded",
            Warning::DegradedCleared { .. } => "degraded_cleared",
            Warning::Stall { .. } => "stall",
            Warning::GradSpike(_) => "grad_spike",
            Warning::OutsideLoad { .. } => "outside_load",
            Warning::OutsideLoadCleared { .. } => "outside_load_cleared",
            Warning::Bound { bound, .. } => bound.limit.kind(),
            Warning::BoundCleared { limit, .. } => match limit {
                Limit::Input => "input_bound_cleared",
                Limit::Launch => "launch_bound_cleared",
                Limit::Underused => "underused_cleared",
            },
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::Straggler { rank, host, slowdown, work_ms, fastest_rank, fastest_ms, others_wait_ms, cpu_time, cause, injected, .. } => {
                // (a CPU worker's compute in its thread's CPU time; its wait for data is wall time)
                let of = if *cpu_time { ": data wait + compute CPU time" } else { "" };
                let on = host.as_ref().map(|h| format!(" on {h}")).unwrap_or_default();
                // (a fault injected on purpose comes first, and no fix is offered for it)
                let cause = match (injected, cause) {
                    (Some(flag), Cause::DataBound { data_ms, fastest_data_ms, .. }) => format!(
                        "fault injected ({flag}): data-bound (waits {data_ms:.1} ms/step for input vs {fastest_data_ms:.1} ms on the fastest rank)"
                    ),
                    (Some(flag), c) if !matches!(c, Cause::Injected(_)) => {
                        format!("fault injected ({flag}): {c}")
                    }
                    (_, c) => c.to_string(),
                };
                write!(
                    f,
                    "straggler: rank {rank}{on} is {slowdown:.2}x slower than rank {fastest_rank} (work {work_ms:.1} ms vs {fastest_ms:.1} ms per step{of}); likely cause: {cause}; other ranks wait {others_wait_ms:.1} ms/step"
                )
            }
            Warning::StragglerCleared { rank, step } => {
                write!(f, "straggler cleared: rank {rank} keeps pace again (step {step})")
            }
            Warning::Degraded { rank, median_ms, best_ms, outside, .. } => {
                write!(
                    f,
                    "degraded: rank {rank} takes {median_ms:.1} ms per step, {:.0}% more than its best {best_ms:.1} ms",
                    (median_ms / best_ms - 1.0) * 100.0
                )?;
                match outside {
                    Some(why) => write!(f, "; likely cause: {why}"),
                    None => Ok(()),
                }
            }
            Warning::DegradedCleared { rank, step, rebased: false } => {
                write!(f, "degraded cleared: rank {rank} is back near its best (step {step})")
            }
            Warning::DegradedCleared { rank, step, rebased: true } => write!(
                f,
                "degraded cleared: rank {rank}'s samples per step changed, its best is measured afresh (step {step})"
            ),
            Warning::Bound { bound, .. } => bound.fmt(f),
            Warning::BoundCleared { step, limit } => write!(
                f,
                "{} cleared: {} (step {step})",
                limit.name(),
                match limit {
                    Limit::Input => "the input keeps up again",
                    Limit::Launch => "the GPUs are busy again",
                    Limit::Underused => "the GPUs' MFU is up again",
                }
            ),
            Warning::GradSpike(spike) => write!(f, "gradient spike at step {}: {spike}", spike.step),
            Warning::OutsideLoad { load, host, .. } => {
                let top = (load.top.as_ref())
                    .map_or(String::new(), |(who, c)| format!(" ({c:.1} of them {who})"));
                let (on, whose) = match host {
                    Some(h) => (format!(" on {h}"), "its"),
                    None => (String::new(), "this machine's"),
                };
                write!(
                    f,
                    "outside load{on}: other work took {:.1} of {whose} {} cores{top} beside this run's {:.1}: its ranks wait for cores, so its steps are slower and the waiting shows as comm, wait and other in the split until the cores are free",
                    load.others, load.cores, load.ours
                )
            }
            Warning::OutsideLoadCleared { step, host, unheard, .. } => {
                let on = host.as_ref().map_or(String::new(), |h| format!(" on {h}"));
                match unheard {
                    false => write!(f, "outside load{on} cleared: the cores are free for this run again (step {step})"),
                    true => write!(f, "outside load{on} no longer known: its machine's loads stopped coming (step {step})"),
                }
            }
            Warning::Stall { step, waited, missing, injected, suspended } => {
                let who: Vec<String> = missing.iter().map(|r| r.to_string()).collect();
                let s = waited.as_secs_f64();
                // (a timeout under 10 s keeps its tenths: 0.5 s is not "1 s"; under 0.1 s its
                // hundredths)
                let dp = if s < 0.1 { 2 } else { usize::from(s < 10.0) };
                write!(
                    f,
                    "stall: no step completed for {s:.dp$} s after step {step}; rank(s) {} did not reach the all-reduce",
                    if who.is_empty() { "?".into() } else { who.join(", ") }
                )?;
                if let Some(p) = suspended {
                    write!(f, "; {}", p.suspended_words("this machine"))?;
                }
                match injected {
                    Some(flag) => write!(f, " (fault injected: {flag})"),
                    None => Ok(()),
                }
            }
        }
    }
}
