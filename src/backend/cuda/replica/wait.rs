//! The ends of steps on the GPU's stream: each step's batch metrics are copied into page-locked
//! memory behind its all-reduce and read once that copy is done, either at once or, where the
//! replica reports late (`Replica::report_late`), after the next step is queued, so that the
//! host never waits for the device inside a step. Waiting never hangs on a failed peer.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaEvent, PinnedHostSlice};

use super::{update, CudaReplica};
use crate::backend::cuda::elem::Elem;
use crate::backend::{DeviceTimes, StepEnd, AUX};
use crate::comm::{Collective, CollectiveError, ReduceTiming};

/// A step's end queued on the stream: its events and the page-locked slots its metrics land in.
struct Ending {
    /// Ends queued before this one.
    index: u64,
    /// Recorded before and after its gradients' computation.
    compute: Option<(CudaEvent, CudaEvent)>,
    /// After its all-reduce (the end of the all-reduce's time), then after the metrics' copy.
    reduced: CudaEvent,
    copied: CudaEvent,
    out: PinnedHostSlice<f32>,
    /// When the host queued the exchange (its time where the device has none).
    t0: Instant,
}

/// The steps whose ends are queued and not read yet (one at most stays in flight, when
/// reports are late), the optimizer updates' events, and what the last end read said.
#[derive(Default)]
pub(super) struct Ends {
    pub late: bool,
    queued: VecDeque<Ending>,
    /// Each update's events, by the number of ends queued before it (`update_before`).
    updates: VecDeque<(u64, (CudaEvent, CudaEvent))>,
    count: u64,
    /// Page-locked metric slots no end holds.
    free: Vec<PinnedHostSlice<f32>>,
    pub end: StepEnd,
    pub times: Option<DeviceTimes>,
}

impl Ends {
    /// An optimizer update queued between `before` and `after` (following the last end queued).
    pub fn updated(&mut self, before: CudaEvent, after: CudaEvent) {
        if self.updates.len() > 2 {
            self.updates.pop_front(); // updates without ends read (none in a training loop)
        }
        self.updates.push_back((self.count, (before, after)));
    }
}

/// Of `updates` (each keyed by the number of ends queued before it, in order), the one that
/// followed the end before end `index`: the update a step's end reports, done by the time the
/// end is (it was queued before that step's compute). Older ones are dropped.
fn update_before<T>(updates: &mut VecDeque<(u64, T)>, index: u64) -> Option<T> {
    while updates.front().is_some_and(|u| u.0 < index) {
        updates.pop_front();
    }
    match updates.front() {
        Some((after, _)) if *after == index => updates.pop_front().map(|u| u.1),
        _ => None,
    }
}

fn ms(a: &CudaEvent, b: &CudaEvent) -> Duration {
    a.elapsed_ms(b)
        .map(|m| Duration::from_secs_f64(m.max(0.0) as f64 / 1e3))
        .unwrap_or_default()
}

impl<E: Elem> CudaReplica<E> {
    /// Waits for `ev`, which follows an all-reduce, without blocking forever: the clock starts
    /// when the work before the all-reduce (`compute_end`) is done, so a long compute is not a
    /// hang; a group aborted on the host (a peer's failure) or `timeout` of all-reduce with no
    /// progress ends the wait and aborts the NCCL group. Without a group nothing can hang.
    pub(super) fn wait_for(
        &mut self,
        ev: &CudaEvent,
        compute_end: Option<&CudaEvent>,
        host: Option<&dyn Collective>,
    ) -> Result<(), CollectiveError> {
        let mut started: Option<Instant> = None;
        loop {
            match ev.try_is_complete() {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => self.fail("wait for the all-reduce", e),
            }
            if self.comm.is_none() {
                if let Err(e) = ev.synchronize() {
                    self.fail("wait for the GPU", e)
                }
                return Ok(());
            }
            if let Some(reason) = host.and_then(|h| h.abort_reason()) {
                self.abort_group();
                return Err(CollectiveError::Aborted(reason));
            }
            let compute_done = compute_end.is_none_or(|c| c.try_is_complete().unwrap_or(true));
            if compute_done {
                let t0 = *started.get_or_insert_with(Instant::now);
                if crate::clock::awake(t0.elapsed()) > self.timeout {
                    self.abort_group();
                    return Err(CollectiveError::Aborted(format!(
                        "GPU {}: the NCCL all-reduce did not finish within {:.0} s of the step's compute (a peer GPU hung or failed); set NCCL_DEBUG=INFO to see why",
                        self.gpu.index,
                        self.timeout.as_secs_f64()
                    )));
                }
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }

    /// After the step's gradients (and their all-reduce, if any) are queued: queues their sum
    /// of squares and the batch metrics' copy into page-locked memory behind them, then reads
    /// the ends queued before until at most one is left in flight where reports are late, none
    /// otherwise. Returns the timing of the last end read (default when none was).
    pub(super) fn settle(
        &mut self,
        t0: Instant,
        host: Option<&dyn Collective>,
    ) -> Result<ReduceTiming, CollectiveError> {
        let n = self.model.n_params;
        let s = self.gpu.stream.clone();
        let mut out = match self.ends.free.pop() {
            Some(b) => b,
            None => self.pinned(AUX + 1),
        };
        let reduced = self.record();
        // the metric slots and the gradients' norm side by side, for one copy
        let sums = (self.grads.slice(..n), self.grads.slice(n..n + AUX));
        let end = self.ends_dev.slice_mut(..);
        update::launch_step_end(&self.gpu, &mut self.chunks, sums, end);
        if let Err(e) = s.memcpy_dtoh(&self.ends_dev, &mut out) {
            self.fail("read the batch metrics", e)
        }
        let copied = self.record();
        let index = self.ends.count;
        self.ends.count += 1;
        self.ends.queued.push_back(Ending {
            index,
            compute: self.events.take(),
            reduced,
            copied,
            out,
            t0,
        });
        let keep = usize::from(self.ends.late);
        let mut timing = ReduceTiming::default();
        while self.ends.queued.len() > keep {
            timing = self.read_end(host)?;
        }
        Ok(timing)
    }

    /// Reads every end queued (`Replica::catch_up`).
    pub(super) fn read_all_ends(
        &mut self,
        host: Option<&dyn Collective>,
    ) -> Result<ReduceTiming, CollectiveError> {
        let mut timing = ReduceTiming::default();
        while !self.ends.queued.is_empty() {
            timing = self.read_end(host)?;
        }
        Ok(timing)
    }

    /// Waits for the oldest end queued and reads its metrics and the device's times of its
    /// step (the optimizer's: the update of the step before, done by then).
    fn read_end(&mut self, host: Option<&dyn Collective>) -> Result<ReduceTiming, CollectiveError> {
        let Some(end) = self.ends.queued.pop_front() else {
            return Ok(ReduceTiming::default());
        };
        let compute_end = end.compute.as_ref().map(|(_, e)| e);
        let waited = self.wait_for(&end.copied, compute_end, host);
        if waited.is_ok() {
            // (the copy is done once its event is: cudarc's own tracking is off, `Gpu::open`)
            match end.out.as_slice() {
                Ok(m) => {
                    self.ends.end = StepEnd {
                        slots: m[..AUX].try_into().expect("AUX metric slots"),
                        // (the norm, whose square does not pass float's range: `step_end_f32`)
                        grad_sumsq: f64::from(m[AUX]).powi(2),
                    }
                }
                Err(e) => self.fail("read the batch metrics", e),
            }
        }
        // kept even after a failed wait: the copy into it may still be in flight
        self.ends.free.push(end.out);
        waited?;
        let optimizer = update_before(&mut self.ends.updates, end.index).map(|(a, b)| ms(&a, &b));
        if let Some((start, computed)) = &end.compute {
            self.ends.times = Some(DeviceTimes {
                compute: ms(start, computed),
                comm: ms(computed, &end.reduced),
                optimizer,
            });
        }
        let timing = ReduceTiming {
            wait: Duration::ZERO,
            transfer: match &end.compute {
                Some((_, computed)) => ms(computed, &end.reduced),
                None => end.t0.elapsed(),
            },
        };
        Ok(timing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_end_reports_the_update_after_the_end_before_it() {
        // updates after ends 0, 1 and 3 (none after end 2: a step without one)
        let mut u: VecDeque<(u64, &str)> = [(1, "u0"), (2, "u1"), (4, "u3")].into();
        assert_eq!(
            update_before(&mut u, 0),
            None,
            "the first end: none before it"
        );
        assert_eq!(update_before(&mut u, 1), Some("u0"));
        // read late: end 3 is read after update 3 was queued; end 2 was never read
        assert_eq!(
            update_before(&mut u, 3),
            None,
            "u1 dropped, none after end 2"
        );
        assert_eq!(update_before(&mut u, 4), Some("u3"));
        assert!(u.is_empty());
    }
}
