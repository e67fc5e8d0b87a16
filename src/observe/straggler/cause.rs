//! Why a straggler is slow: the evidence first (where its extra time goes), then what is known
//! about its device and host.

use super::{Cause, Detector};
use crate::stats::median;

impl Detector {
    /// The evidence first (where the extra time goes), then what is known about the rank.
    pub(super) fn explain(
        &self,
        r: usize,
        fastest: usize,
        work: &[f64],
        data: &[f64],
        comm: &[f64],
        loaders: &[Option<f64>],
    ) -> Cause {
        let extra = work[r] - work[fastest];
        let extra_data = data[r] - data[fastest];
        if extra > 0.0 && extra_data >= 0.5 * extra {
            return Cause::DataBound {
                data_ms: data[r],
                fastest_data_ms: data[fastest],
                loaders: loaders[r].zip(loaders[fastest]),
            };
        }
        if let Some(Some(flag)) = self.ctx.injected.get(r) {
            return Cause::Injected(flag.clone());
        }
        if let Some(c) = self.network(r, comm) {
            return c;
        }
        if let (Some(load), None) = (self.outside_on(r), self.outside_on(fastest)) {
            let host = self
                .machine_of(r)
                .and_then(|m| self.ctx.hosts.get(m).cloned());
            return Cause::OutsideLoad {
                host,
                load: load.clone(),
            };
        }
        let throttled = |rank: usize| {
            self.throttle
                .get(rank)
                .copied()
                .flatten()
                .filter(|t| !crate::observe::nvml::throttle_names(t.0).is_empty())
        };
        if let (Some((reasons, clock, max)), None) = (throttled(r), throttled(fastest)) {
            return Cause::Throttled {
                reasons: crate::observe::nvml::throttle_names(reasons),
                sm_clock_mhz: clock,
                sm_clock_max_mhz: max,
            };
        }
        if let Some(Some(m)) = self.ctx.models.get(r) {
            let peers = self.ctx.models.iter().enumerate().filter(|(o, _)| *o != r);
            if peers.clone().any(|(_, p)| p.as_ref() != Some(m)) {
                return Cause::Heterogeneous { model: m.clone() };
            }
        }
        let workers = work.len();
        if self.oversubscribed(workers) && self.ctx.models.iter().all(Option::is_none) {
            return Cause::Oversubscribed {
                workers,
                cores: self.ctx.cores,
            };
        }
        Cause::Unknown
    }

    /// The key of rank `r`'s machine among the loads (`Detector::on_load`): `None` for process
    /// 0's, else the first rank of its host (that of the run's first process there).
    fn machine_of(&self, r: usize) -> Option<usize> {
        let hosts = &self.ctx.hosts;
        let host = hosts.get(r)?;
        (Some(host) != hosts.first()).then(|| hosts.iter().position(|h| h == host))?
    }

    /// A rank slower than its own best (degraded) whose machine other work is said to take
    /// cores of: why, as the outside-load warning said it (`None` where none is said).
    pub(super) fn outside_words(&self, r: usize) -> Option<String> {
        let load = self.outside_on(r)?;
        let top =
            (load.top.as_ref()).map_or(String::new(), |(who, c)| format!(", {c:.1} of them {who}"));
        Some(format!(
            "outside load (other work takes {:.1} of its machine's {} cores{top})",
            load.others, load.cores
        ))
    }

    /// Rank `r`'s machine's load, while other work is said to take its cores.
    fn outside_on(&self, r: usize) -> Option<&crate::observe::machine_load::Load> {
        self.outside.get(&self.machine_of(r))?.holding()
    }

    /// Rank `r`'s whole host moving data in the all-reduce for at least 1.5 times as long as
    /// the other hosts' ranks (medians), by at least `min_gap`.
    fn network(&self, r: usize, comm: &[f64]) -> Option<Cause> {
        let hosts = &self.ctx.hosts;
        let host = hosts.get(r)?;
        if hosts.len() != comm.len() {
            return None;
        }
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for (h, &c) in hosts.iter().zip(comm) {
            if h == host {
                ours.push(c)
            } else {
                theirs.push(c)
            }
        }
        if theirs.is_empty() {
            return None;
        }
        // the whole host: every one of its ranks spends at least this
        let comm_ms = ours.iter().copied().fold(f64::INFINITY, f64::min);
        let others_comm_ms = median(theirs);
        let gap_ms = self.cfg.min_gap.as_secs_f64() * 1e3;
        (comm_ms >= 1.5 * others_comm_ms && comm_ms - others_comm_ms >= gap_ms).then(|| {
            Cause::Network {
                host: host.clone(),
                comm_ms,
                others_comm_ms,
            }
        })
    }
}
