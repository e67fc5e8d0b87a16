//! Where a GPU's training pass spends its time, op kind by op kind, for whoever speeds up the
//! GPU path: with `MGTOP_GPU_PROFILE=1`, every op's launches in a training pass (and the
//! optimizer's update) are bracketed by CUDA events, the times summed at the end of each step
//! (the host waits for the device there anyway, to read the step's metrics), and a table
//! printed to stderr when the replica closes. The first `WARM_UP` steps are left out: they
//! hold the one-time work (cuDNN measuring its algorithms, libraries loading their kernels,
//! graphs being captured), which would swamp a short run's table.
//!
//! ```text
//! gpu0: device time per training step (30 steps after 3 warm-up), by op: 88.10 ms in all
//!   conv backward                 41.200 ms   46.8%
//!   conv forward                  17.050 ms   19.4%
//!   ...
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaStream};

use crate::nn::model::Op;

/// Steps left out of the table at the start.
pub const WARM_UP: u64 = 3;

/// Whether this process profiles its GPUs (`MGTOP_GPU_PROFILE` set, and not `0`).
pub fn wanted() -> bool {
    std::env::var("MGTOP_GPU_PROFILE").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// An op kind's name in the table.
pub fn kind(op: &Op) -> &'static str {
    match op {
        Op::Linear { .. } => "linear",
        Op::Conv { groups: 1, .. } => "conv",
        Op::Conv { .. } => "grouped conv",
        Op::BatchNorm { .. } => "batch norm",
        Op::Add { .. } => "add",
        Op::MaxPool(_) => "max pool",
        Op::AvgPool(_) => "avg pool",
        Op::GlobalAvgPool { .. } => "global avg pool",
        Op::Dropout { .. } => "dropout",
        Op::Activation(_) => "activation",
    }
}

/// A row of the table: the op kind and the direction (`forward`, `backward`, ...).
type Row = (&'static str, &'static str);

/// The events of the step under way, and the sums of the steps before (after the warm-up).
pub struct Profile {
    stream: Arc<CudaStream>,
    pending: Vec<(Row, CudaEvent, CudaEvent)>,
    /// Steps ended so far, the warm-up's included.
    ended: u64,
    sums: Sums,
}

impl Profile {
    pub fn new(stream: Arc<CudaStream>) -> Profile {
        Profile {
            stream,
            pending: Vec::new(),
            ended: 0,
            sums: Sums::default(),
        }
    }

    /// An event now on the stream (None where it cannot be made: that op goes uncounted).
    pub fn mark(&self) -> Option<CudaEvent> {
        // (cudarc's default event keeps no time)
        (self.stream)
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .ok()
    }

    /// What ran on the stream since `start` belongs to `what` going `way`.
    pub fn count(&mut self, what: &'static str, way: &'static str, start: Option<CudaEvent>) {
        if let (Some(a), Some(b)) = (start, self.mark()) {
            self.pending.push(((what, way), a, b));
        }
    }

    /// Waits for the step's events and adds their times (past the warm-up).
    pub fn end_step(&mut self) {
        self.ended += 1;
        let counted = self.ended > WARM_UP;
        for (row, a, b) in self.pending.drain(..) {
            if let (true, Ok(ms)) = (counted, a.elapsed_ms(&b)) {
                self.sums.add(row, ms as f64);
            }
        }
        self.sums.steps += u64::from(counted);
    }

    /// The table (see `Sums::table`).
    pub fn table(&self, gpu: usize) -> String {
        self.sums.table(gpu)
    }
}

/// Milliseconds per row over the steps so far.
#[derive(Default)]
struct Sums {
    ms: HashMap<Row, f64>,
    steps: u64,
}

impl Sums {
    fn add(&mut self, row: Row, ms: f64) {
        *self.ms.entry(row).or_default() += ms;
    }

    /// Per step, largest first, each row's share of the timed total (a line saying so before
    /// the first step past the warm-up).
    fn table(&self, gpu: usize) -> String {
        if self.steps == 0 {
            return format!(
                "gpu{gpu}: no step timed past the first {WARM_UP} (warm-up): profile a longer run\n"
            );
        }
        if self.ms.is_empty() {
            return format!("gpu{gpu}: no op could be timed (CUDA events failed)\n");
        }
        let per = self.steps as f64;
        let all: f64 = self.ms.values().sum();
        let mut rows: Vec<_> = self.ms.iter().collect();
        rows.sort_by(|a, b| b.1.total_cmp(a.1).then(a.0.cmp(b.0)));
        let mut out = format!(
            "gpu{gpu}: device time per training step ({} steps after {WARM_UP} warm-up), by op: {:.2} ms in all\n",
            self.steps,
            all / per
        );
        for ((what, way), ms) in rows {
            out += &format!(
                "  {:<26} {:>9.3} ms {:>6.1}%\n",
                format!("{what} {way}"),
                ms / per,
                100.0 * ms / all.max(f64::MIN_POSITIVE)
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_gives_each_op_kind_per_step_largest_first_with_its_share() {
        let mut s = Sums::default();
        assert!(
            s.table(0).contains("no step timed"),
            "nothing before the first step"
        );
        s.steps = 1;
        assert!(s.table(1).contains("no op could be timed"));
        // two steps: conv backward 6 + 6 ms, conv forward 3 + 3, add 1 + 1
        for _ in 0..2 {
            s.add(("conv", "forward"), 3.0);
            s.add(("add", "forward"), 1.0);
            s.add(("conv", "backward"), 6.0);
        }
        s.steps = 2;
        let t = s.table(3);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "gpu3: device time per training step (2 steps after 3 warm-up), by op: 10.00 ms in all"
        );
        assert_eq!(lines.len(), 4, "{t}");
        let cells = |l: &str| l.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert_eq!(
            cells(lines[1]),
            ["conv", "backward", "6.000", "ms", "60.0%"]
        );
        assert_eq!(cells(lines[2]), ["conv", "forward", "3.000", "ms", "30.0%"]);
        assert_eq!(cells(lines[3]), ["add", "forward", "1.000", "ms", "10.0%"]);
    }
}
