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
//!
//! `MGTOP_GPU_PROFILE=layers` adds a second table: the costliest layers, one row per layer
//! and direction (`#0 conv3x3 conv1 3x32x32 -> 16x32x32 backward`), to find the one shape
//! a library runs slowly.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaStream};

use crate::nn::model::Op;

/// Steps left out of the table at the start.
pub const WARM_UP: u64 = 3;

/// Layers in the second table (`MGTOP_GPU_PROFILE=layers`), costliest first.
const LAYER_ROWS: usize = 30;

/// How this process profiles its GPUs (`MGTOP_GPU_PROFILE`): `None` when unset, empty, `0` or
/// `off`; by op kind for `1` or `on`, by layer too for `layers` (others are refused at start:
/// `check_env`).
pub fn wanted() -> Option<Detail> {
    detail(std::env::var(VAR).ok().as_deref())
}

const VAR: &str = "MGTOP_GPU_PROFILE";

/// `MGTOP_GPU_PROFILE` refused where it is none of its values (`off` must not profile).
pub fn check_env() -> Result<(), String> {
    crate::switches::check(
        VAR,
        &["0", "off", "1", "on", "layers"],
        "1 (device time per op kind), layers (and per layer) or 0",
    )
}

fn detail(v: Option<&str>) -> Option<Detail> {
    match v? {
        "1" | "on" => Some(Detail::Kinds),
        "layers" => Some(Detail::Layers),
        _ => None,
    }
}

/// What a profile's tables show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detail {
    /// Device time per op kind and direction.
    Kinds,
    /// That, and the costliest layers (`LAYER_ROWS` of them).
    Layers,
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

/// A row of the layers' table: the node's index in the model and the direction.
type LayerRow = (usize, &'static str);

/// The events of the step under way, and the sums of the steps before (after the warm-up).
pub struct Profile {
    stream: Arc<CudaStream>,
    detail: Detail,
    /// Each timed span: its row, its node where it is one layer's, its two events.
    pending: Vec<(Row, Option<usize>, CudaEvent, CudaEvent)>,
    /// Steps ended so far, the warm-up's included.
    ended: u64,
    sums: Sums,
}

impl Profile {
    pub fn new(stream: Arc<CudaStream>, detail: Detail) -> Profile {
        Profile {
            stream,
            detail,
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

    /// What ran on the stream since `start` belongs to `row` (an op kind going one way), and
    /// to the model's node `node` where it is one layer's work.
    pub fn count(&mut self, row: Row, node: Option<usize>, start: Option<CudaEvent>) {
        if let (Some(a), Some(b)) = (start, self.mark()) {
            self.pending.push((row, node, a, b));
        }
    }

    /// Waits for the step's events and adds their times (past the warm-up).
    pub fn end_step(&mut self) {
        self.ended += 1;
        let counted = self.ended > WARM_UP;
        let layers = self.detail == Detail::Layers;
        for (row, node, a, b) in self.pending.drain(..) {
            if let (true, Ok(ms)) = (counted, a.elapsed_ms(&b)) {
                self.sums.add(row, ms as f64);
                if let (true, Some(n)) = (layers, node) {
                    *self.sums.layers.entry((n, row.1)).or_default() += ms as f64;
                }
            }
        }
        self.sums.steps += u64::from(counted);
    }

    /// The table (see `Sums::table`), and the layers' (`Sums::layer_table`, each node named
    /// by `label`) where asked for.
    pub fn table(&self, gpu: usize, label: impl Fn(usize) -> String) -> String {
        let mut t = self.sums.table(gpu);
        if self.detail == Detail::Layers {
            t += &self.sums.layer_table(gpu, label);
        }
        t
    }
}

/// The rows of `ms`, most milliseconds first (ties in the rows' order, so a table reads the
/// same every run).
fn largest_first<K: Ord>(ms: &HashMap<K, f64>) -> Vec<(&K, &f64)> {
    let mut rows: Vec<_> = ms.iter().collect();
    rows.sort_by(|a, b| b.1.total_cmp(a.1).then(a.0.cmp(b.0)));
    rows
}

/// Milliseconds per row over the steps so far.
#[derive(Default)]
struct Sums {
    ms: HashMap<Row, f64>,
    /// Per layer and direction (`Detail::Layers` only).
    layers: HashMap<LayerRow, f64>,
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
        let rows = largest_first(&self.ms);
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

    /// The `LAYER_ROWS` costliest layers per step, largest first, each with its share of the
    /// timed total (after `table`, which says where nothing was timed).
    fn layer_table(&self, gpu: usize, label: impl Fn(usize) -> String) -> String {
        if self.steps == 0 || self.layers.is_empty() {
            return String::new();
        }
        let per = self.steps as f64;
        let all: f64 = self.ms.values().sum();
        let rows = largest_first(&self.layers);
        let mut out = format!(
            "gpu{gpu}: the {} costliest of {} layer rows, per training step\n",
            rows.len().min(LAYER_ROWS),
            rows.len()
        );
        for ((node, way), ms) in rows.into_iter().take(LAYER_ROWS) {
            out += &format!(
                "  {:>9.3} ms {:>6.1}%  #{node} {} {way}\n",
                ms / per,
                100.0 * ms / all.max(f64::MIN_POSITIVE),
                label(*node)
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
        assert_eq!(
            s.layer_table(3, |n| format!("node{n}")),
            "",
            "no layers timed"
        );
    }

    #[test]
    fn the_layer_table_names_the_costliest_layers_first_and_keeps_to_its_rows() {
        let mut s = Sums {
            steps: 2,
            ..Sums::default()
        };
        s.add(("conv", "backward"), 30.0);
        s.add(("conv", "forward"), 10.0);
        s.layers.insert((0, "backward"), 24.0);
        s.layers.insert((4, "backward"), 6.0);
        s.layers.insert((4, "forward"), 10.0);
        for n in 10..10 + LAYER_ROWS {
            s.layers.insert((n, "forward"), 0.001);
        }
        let t = s.layer_table(1, |n| format!("conv node{n}"));
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            format!(
                "gpu1: the {LAYER_ROWS} costliest of {} layer rows, per training step",
                LAYER_ROWS + 3
            )
        );
        assert_eq!(lines.len(), 1 + LAYER_ROWS, "{t}");
        let cells = |l: &str| l.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert_eq!(
            cells(lines[1]),
            ["12.000", "ms", "60.0%", "#0", "conv", "node0", "backward"]
        );
        assert_eq!(
            cells(lines[2]),
            ["5.000", "ms", "25.0%", "#4", "conv", "node4", "forward"]
        );
        assert_eq!(cells(lines[3])[3..], ["#4", "conv", "node4", "backward"]);
    }

    #[test]
    fn the_variable_turns_the_profile_off_on_or_on_by_layer() {
        assert_eq!(detail(None), None);
        assert_eq!(detail(Some("")), None);
        assert_eq!(detail(Some("0")), None);
        assert_eq!(detail(Some("off")), None);
        assert_eq!(detail(Some("1")), Some(Detail::Kinds));
        assert_eq!(detail(Some("on")), Some(Detail::Kinds));
        assert_eq!(detail(Some("layers")), Some(Detail::Layers));
    }
}
