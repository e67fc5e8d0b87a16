//! A training pass captured once as a CUDA graph and replayed (`--cuda-graph`): the launches
//! of a forward and backward pass (and its metrics) cost the host a few microseconds each,
//! which on a small model or batch is the whole step; a graph of them is one launch.
//!
//! Per micro-batch size: the first pass runs eagerly (it makes cuDNN's plans and measures
//! their algorithms, and grows any workspace, none of which a capture may do); the second is
//! captured on the stream and launched; later ones launch the graph. A graph holds the
//! buffers' addresses, so any new buffer (more rows, a larger cuDNN workspace) drops every
//! graph (`Layout`); a pass whose numbers change from one pass to the next reads them on the
//! device (dropout's pass counter), never as a captured argument. Passes that exchange
//! batch norm's statistics through the host, or are profiled op by op, run eagerly. A capture
//! that fails (the capture refusing a call, or a call failing inside it) ends graphs on this
//! GPU for the run, with a note, and the pass runs eagerly.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::CudaGraph;

use super::CudaReplica;
use crate::backend::cuda::elem::Elem;
use crate::comm::Collective;

/// What a graph was captured over: where every buffer it touches lives (the activations' rows
/// and cuDNN's workspace, the only buffers that are ever replaced).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    pub rows: usize,
    pub workspace: usize,
}

/// Where a micro-batch size stands.
enum Stage {
    /// Ran eagerly once under this layout: the next pass is captured.
    Warm,
    Ready(CudaGraph),
}

/// What the next pass of a size does.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Next {
    Eager,
    Capture,
    Replay,
}

/// The graphs of one replica, per micro-batch size.
pub(super) struct Graphs {
    on: bool,
    layout: Option<Layout>,
    by_rows: HashMap<usize, Stage>,
}

/// At most this many sizes keep a graph (a run has one or two: its batch, the short last one;
/// a batch size changed from the keyboard adds one): beyond it every graph is dropped.
const MAX_GRAPHS: usize = 8;

impl Graphs {
    pub fn new(on: bool) -> Graphs {
        Graphs {
            on,
            layout: None,
            by_rows: HashMap::new(),
        }
    }

    /// What a pass of `rows` rows does now, the buffers being where `layout` says.
    pub fn next(&mut self, rows: usize, layout: Layout) -> Next {
        if !self.on {
            return Next::Eager;
        }
        if self.layout != Some(layout) || self.by_rows.len() > MAX_GRAPHS {
            self.by_rows.clear();
            self.layout = Some(layout);
        }
        match self.by_rows.get(&rows) {
            None => Next::Eager,
            Some(Stage::Warm) => Next::Capture,
            Some(Stage::Ready(_)) => Next::Replay,
        }
    }

    /// A pass of `rows` rows ran eagerly, leaving the buffers where `layout` says (it may
    /// have grown them: then the other sizes start over).
    pub fn ran(&mut self, rows: usize, layout: Layout) {
        if !self.on {
            return;
        }
        if self.layout != Some(layout) {
            self.by_rows.clear();
            self.layout = Some(layout);
        }
        self.by_rows.entry(rows).or_insert(Stage::Warm);
    }

    pub fn keep(&mut self, rows: usize, graph: CudaGraph) {
        self.by_rows.insert(rows, Stage::Ready(graph));
    }

    pub fn get(&self, rows: usize) -> Option<&CudaGraph> {
        match self.by_rows.get(&rows) {
            Some(Stage::Ready(g)) => Some(g),
            _ => None,
        }
    }

    /// No more graphs on this GPU (a capture failed).
    pub fn stop(&mut self) {
        self.on = false;
        self.by_rows.clear();
    }
}

impl<E: Elem> CudaReplica<E> {
    /// Sets whether training passes go through CUDA graphs (`--cuda-graph`, as the engine
    /// resolved it for this run).
    pub fn use_graphs(mut self, on: bool) -> CudaReplica<E> {
        self.graphs = Graphs::new(on);
        self
    }

    fn layout(&self) -> Layout {
        Layout {
            rows: self.cap,
            workspace: self.dnn.as_ref().map_or(0, |d| d.workspace_len()),
        }
    }

    /// One micro-batch's training pass over `b` uploaded rows and its metrics, eagerly or from
    /// its graph.
    pub(super) fn train_rows(&mut self, b: usize, sync: Option<&mut dyn Collective>) {
        // (an empty share launches nothing worth a graph)
        let eager = b == 0 || sync.is_some() || self.profile.is_some();
        let next = match eager {
            true => Next::Eager,
            false => self.graphs.next(b, self.layout()),
        };
        match next {
            Next::Eager => {
                self.pass_and_metrics(b, sync);
                if !eager {
                    let layout = self.layout();
                    self.graphs.ran(b, layout);
                }
            }
            Next::Replay => {
                let g = self
                    .graphs
                    .get(b)
                    .expect("a graph for a size ready to replay");
                if let Err(e) = g.launch() {
                    self.fail("launch the training pass's CUDA graph", e)
                }
            }
            Next::Capture => match self.capture(b) {
                Ok(g) => {
                    if let Err(e) = g.launch() {
                        self.fail("launch the training pass's CUDA graph", e)
                    }
                    self.graphs.keep(b, g);
                }
                Err(e) => {
                    self.notes.push(format!(
                        "GPU {}: a training pass could not be captured as a CUDA graph ({e}): it runs launch by launch from here on (--cuda-graph off says so from the start)",
                        self.gpu.index
                    ));
                    self.graphs.stop();
                    self.pass_and_metrics(b, None);
                }
            },
        }
    }

    /// The pass of `b` rows recorded on the stream (not run: the graph's launch runs it). A
    /// call the capture refuses fails inside the pass, where failures panic: that is caught
    /// here, the capture ended, and the error returned.
    fn capture(&mut self, b: usize) -> Result<CudaGraph, String> {
        let s = self.gpu.stream.clone();
        s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(|e| format!("begin: {e:?}"))?;
        let recorded = catch_unwind(AssertUnwindSafe(|| self.pass_and_metrics(b, None)));
        let ended = s.end_capture(CUgraphInstantiate_flags(0));
        if let Err(p) = recorded {
            let why = (p.downcast_ref::<String>().map(String::as_str))
                .or_else(|| p.downcast_ref::<&str>().copied())
                .unwrap_or("a panic");
            return Err(why.to_string());
        }
        match ended {
            Ok(Some(g)) => Ok(g),
            Ok(None) => Err("the capture recorded nothing".into()),
            Err(e) => Err(format!("{e:?}")),
        }
    }

    fn pass_and_metrics(&mut self, b: usize, sync: Option<&mut dyn Collective>) {
        self.train_pass(b, sync);
        let n = self.model.n_params;
        let mut aux = self.grads.slice_mut(n..n + crate::backend::AUX);
        super::add_metrics(&self.gpu, &mut aux, &self.row_loss, &self.row_correct, b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AT: Layout = Layout {
        rows: 128,
        workspace: 1 << 20,
    };

    #[test]
    fn a_size_runs_eagerly_once_then_is_captured() {
        let mut g = Graphs::new(true);
        assert_eq!(g.next(128, AT), Next::Eager);
        g.ran(128, AT);
        assert_eq!(g.next(128, AT), Next::Capture);
        // another size starts over; the first keeps its stage
        assert_eq!(g.next(100, AT), Next::Eager);
        g.ran(100, AT);
        assert_eq!(g.next(128, AT), Next::Capture);
    }

    #[test]
    fn new_buffers_start_every_size_over() {
        let mut g = Graphs::new(true);
        assert_eq!(g.next(128, AT), Next::Eager);
        g.ran(128, AT);
        assert_eq!(g.next(128, AT), Next::Capture);
        let grown = Layout {
            workspace: 2 << 20,
            ..AT
        };
        assert_eq!(g.next(128, grown), Next::Eager);
        g.ran(128, grown);
        let more_rows = Layout { rows: 256, ..grown };
        assert_eq!(g.next(128, more_rows), Next::Eager);
        g.ran(128, more_rows);
        // an eager pass of another size that grows the workspace: it is ready to capture
        // under the new buffers (no second eager pass), the others start over
        let wider = Layout {
            workspace: 4 << 20,
            ..more_rows
        };
        assert_eq!(g.next(100, more_rows), Next::Eager);
        g.ran(100, wider);
        assert_eq!(g.next(100, wider), Next::Capture);
        assert_eq!(g.next(128, wider), Next::Eager);
    }

    #[test]
    fn off_or_stopped_is_always_eager() {
        let mut g = Graphs::new(false);
        g.ran(128, AT);
        assert_eq!(g.next(128, AT), Next::Eager);
        let mut g = Graphs::new(true);
        assert_eq!(g.next(128, AT), Next::Eager);
        g.ran(128, AT);
        g.stop();
        g.ran(128, AT);
        assert_eq!(g.next(128, AT), Next::Eager);
    }
}
