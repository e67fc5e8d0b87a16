//! Convolutions through cuDNN's graph (backend) API, as PyTorch runs its own
//! (`MGTOP_CUDNN_API=graph`): per shape, direction, beta and tensor alignment, a graph of one
//! convolution; the engine configurations cuDNN's heuristics list for it (mode A, then its
//! fallback list); those whose numerics the run allows made into execution plans within
//! `MAX_WORKSPACE`, precompiled engines first (runtime-compiled ones only where none builds:
//! `engines`); and of those, measured, the fastest of up to `TIMED` on the call's own buffers
//! (PyTorch's `cudnn.benchmark`), or the first that runs (`MGTOP_CUDNN_ALGOS=heuristic` or
//! `deterministic`). The legacy API (`cudnnConvolution*`) reaches one engine per algorithm
//! enum; the graph API all of them. A shape no plan runs goes to the legacy API (`Plans::run`
//! says so by returning false).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

use cudarc::cudnn::sys as ffi;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut};
use ffi::cudnnBackendAttributeName_t as A;
use ffi::cudnnBackendDescriptorType_t as K;

use super::backend::Desc;
use super::measure::{Choice, Measurer};
use super::Key;

mod describe;
mod engines;

pub use describe::Dir;
use describe::{alignment, operation, UIDS};
pub use engines::Numerics;

/// Which API runs the convolutions (`MGTOP_CUDNN_API`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// `cudnnConvolutionForward` and its backward calls, an algorithm enum each (the default).
    Legacy,
    /// The graph API's engines (`Plans`).
    Graph,
}

impl Api {
    /// `MGTOP_CUDNN_API`'s value read: unset or empty is `Legacy`; an unknown value is an error
    /// naming the choices.
    pub fn parse(v: Option<&str>) -> Result<Api, String> {
        match v.map(str::to_ascii_lowercase).as_deref() {
            None | Some("") | Some("legacy") => Ok(Api::Legacy),
            Some("graph") => Ok(Api::Graph),
            Some(other) => Err(format!(
                "MGTOP_CUDNN_API={other} is not understood: use legacy (the default) or graph"
            )),
        }
    }

    /// This process's choice; an unknown value is the legacy API (the start-up line names it).
    pub fn from_env() -> Api {
        Api::parse(std::env::var("MGTOP_CUDNN_API").ok().as_deref()).unwrap_or(Api::Legacy)
    }
}

/// How many execution plans a measured shape times at most (cuDNN lists its likely best
/// first).
const TIMED: usize = 12;

/// How many plans an unmeasured shape tries, in order, for one that runs.
const TRIED: usize = 3;

/// Runs of each plan timed, after one untimed.
const RUNS: usize = 3;

/// Variant packs a plan keeps (layers of one shape share a plan, each with its buffers).
const PACKS: usize = 8;

/// A plan's key: the shape, the direction, beta's bits and the tensors' alignments.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct PlanKey {
    k: Key,
    dir: Dir,
    beta: u32,
    align: [u8; 3],
}

/// How much of what was asked the graph API runs (`Plans::coverage`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Coverage {
    /// Shapes and directions (with their betas and alignments) it has plans for.
    pub planned: usize,
    /// Those asked of it.
    pub asked: usize,
    /// Why the first it has no plan for was refused.
    pub refused: Option<String>,
}

impl std::fmt::Display for Coverage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the graph API planned {} of {} shapes and directions",
            self.planned, self.asked
        )?;
        match &self.refused {
            Some(why) => write!(f, "; the legacy API ran the rest (first refused: {why})"),
            None => Ok(()),
        }
    }
}

/// An execution plan ready to run, what it was made of, the workspace it needs, and the
/// variant packs of the pointers it last ran on (the same buffers every step), newest last.
struct Ready {
    plan: Desc,
    _made_of: Vec<Desc>,
    workspace: usize,
    packs: Vec<([u64; 4], Desc)>,
}

/// The graph API's plans on one GPU's stream, for tensors of one type.
pub struct Plans {
    /// Each key's plan; `None` where no plan runs it (the legacy API does). (Dropped before
    /// the handle they were made on.)
    ready: HashMap<PlanKey, Option<Ready>>,
    handle: Measurer,
    stream: Arc<CudaStream>,
    data: ffi::cudnnDataType_t,
    /// Bytes of one element (the weight-gradient scratch a trial writes).
    elem: usize,
    numerics: Numerics,
    how: Choice,
    /// Why the first shape the graph API does not run was refused.
    refused: Option<String>,
}

fn pack(ptrs: [u64; 3], workspace: u64) -> Result<Desc, String> {
    let mut v = Desc::new(K::CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)?;
    v.set_ptrs(
        A::CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
        &ptrs.map(|p| p as *mut c_void),
    )?;
    v.set_i64s(A::CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, &UIDS)?;
    v.set_ptrs(
        A::CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
        &[workspace as *mut c_void],
    )?;
    v.finalize()
}

impl Plans {
    /// Plans for tensors of `data` (`elem` bytes each) on `stream`, engines as `numerics`
    /// allow, chosen as `how` says.
    pub fn open(
        stream: &Arc<CudaStream>,
        (data, elem): (ffi::cudnnDataType_t, usize),
        numerics: Numerics,
        how: Choice,
    ) -> Result<Plans, String> {
        Ok(Plans {
            ready: HashMap::new(),
            handle: Measurer::open(stream)?,
            stream: stream.clone(),
            data,
            elem,
            numerics,
            how,
            refused: None,
        })
    }

    /// Runs direction `dir` of shape `k` (the output scaled by `beta` first) on the buffers at
    /// `ptrs` (x or dx, w or dw, y or dy), `workspace` grown to what its plan needs; false
    /// where no plan runs the shape, or its plan failed to (nothing was run: the caller runs
    /// the legacy API).
    ///
    /// # Safety
    /// `ptrs` must address live device buffers of shape `k` of this `Plans`' type and layout.
    pub unsafe fn run(
        &mut self,
        k: Key,
        (dir, beta): (Dir, f32),
        ptrs: [u64; 3],
        workspace: &mut CudaSlice<u8>,
    ) -> Result<bool, String> {
        let key = PlanKey {
            k,
            dir,
            beta: beta.to_bits(),
            align: ptrs.map(alignment),
        };
        if !self.ready.contains_key(&key) {
            let ready = self.make(key, ptrs, workspace)?;
            let ready = ready.map_err(|why| self.refuse(key, why)).ok();
            self.ready.insert(key, ready);
        }
        let Some(need) = self.ready[&key].as_ref().map(|r| r.workspace) else {
            return Ok(false);
        };
        let ws = self.grow(workspace, need)?;
        let r = (self.ready.get_mut(&key))
            .and_then(Option::as_mut)
            .expect("a plan");
        let at = [ptrs[0], ptrs[1], ptrs[2], ws];
        let v = match r.packs.iter().position(|(p, _)| *p == at) {
            Some(i) => i,
            None => {
                if r.packs.len() == PACKS {
                    r.packs.remove(0);
                }
                r.packs.push((at, pack(ptrs, ws)?));
                r.packs.len() - 1
            }
        };
        match r.plan.execute(self.handle.raw(), &r.packs[v].1) {
            Ok(()) => Ok(true),
            // (cuDNN refuses before it launches: nothing was written) the legacy API from now
            Err(e) => {
                self.ready.insert(key, None);
                self.refuse(key, e);
                Ok(false)
            }
        }
    }

    /// Keeps why `key` was refused where it is the first refusal.
    fn refuse(&mut self, key: PlanKey, why: String) {
        let what = format!("{:?} of {:?}: {why}", key.dir, key.k);
        self.refused.get_or_insert(what);
    }

    /// How many of the shapes and directions asked for the graph API runs (the rest, the
    /// legacy API), and why the first it does not was refused.
    pub fn coverage(&self) -> Coverage {
        Coverage {
            planned: self.ready.values().filter(|r| r.is_some()).count(),
            asked: self.ready.len(),
            refused: self.refused.clone(),
        }
    }

    /// `workspace` grown to at least `need` bytes: its device address.
    fn grow(&self, workspace: &mut CudaSlice<u8>, need: usize) -> Result<u64, String> {
        if need > workspace.len() {
            *workspace = self
                .stream
                .alloc_zeros::<u8>(need)
                .map_err(|e| format!("allocate {need} bytes of cuDNN workspace: {e:?}"))?;
        }
        let (p, _record) = workspace.device_ptr_mut(&self.stream);
        Ok(p)
    }

    /// The plan of `key`: measured, the fastest of up to `TIMED` on `ptrs`, else the first of
    /// `TRIED` that runs there (a weight gradient into scratch: it may be added to);
    /// Ok(Err(why)) where cuDNN refuses the shape or no plan runs (the legacy API runs it), Err
    /// where timing failed.
    fn make(
        &self,
        key: PlanKey,
        ptrs: [u64; 3],
        workspace: &mut CudaSlice<u8>,
    ) -> Result<Result<Ready, String>, String> {
        let described = (|| {
            let beta = f32::from_bits(key.beta);
            let (op, made_of) = operation(key.k, key.dir, beta, self.data, key.align)?;
            let mut graph = Desc::new(K::CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)?;
            graph.set(A::CUDNN_ATTR_OPERATIONGRAPH_HANDLE, self.handle.raw())?;
            graph.set_descs(A::CUDNN_ATTR_OPERATIONGRAPH_OPS, &[&op])?;
            Ok::<_, String>((op, made_of, graph.finalize()?))
        })();
        let (op, mut made_of, graph) = match described {
            Ok(d) => d,
            Err(why) => return Ok(Err(why)),
        };
        let timed = self.how == Choice::Measured;
        let want = if timed { TIMED } else { TRIED };
        let mut tally = engines::Tally::default();
        let configs = engines::configs(&graph, &mut tally);
        let (h, n) = (self.handle.raw(), self.numerics);
        let plans = engines::plans(&configs, h, n, (want, false), &mut tally);
        let mut chosen = self.pick(plans, key, ptrs, workspace, (timed, &mut tally))?;
        if chosen.is_none() {
            // only where no precompiled engine ran: one compiled now
            let plans = engines::plans(&configs, h, n, (1, true), &mut tally);
            chosen = self.pick(plans, key, ptrs, workspace, (timed, &mut tally))?;
        }
        let Some((plan, need)) = chosen else {
            return Ok(Err(tally.to_string()));
        };
        made_of.extend([op, graph]);
        Ok(Ok(Ready {
            plan,
            _made_of: made_of,
            workspace: need,
            packs: Vec::new(),
        }))
    }

    /// Of `plans`, the fastest (`timed`: each run once, then `RUNS` times between events) or
    /// the first that runs on `ptrs`, a weight gradient written into scratch, in a workspace of
    /// its own where the kept one is too small (where that cannot be had, only the plans the
    /// kept one fits are tried); one that fails to run is passed over.
    fn pick(
        &self,
        plans: Vec<(Desc, usize)>,
        key: PlanKey,
        mut ptrs: [u64; 3],
        workspace: &mut CudaSlice<u8>,
        (timed, tally): (bool, &mut engines::Tally),
    ) -> Result<Option<(Desc, usize)>, String> {
        let need = plans.iter().map(|p| p.1).max().unwrap_or(0);
        let mut own = None;
        let mut plans = plans;
        if need > workspace.len() {
            match self.stream.alloc_zeros::<u8>(need) {
                Ok(w) => own = Some(w),
                Err(_) => plans.retain(|p| p.1 <= workspace.len()),
            }
        }
        let ws = match own.as_mut() {
            Some(w) => w.device_ptr_mut(&self.stream).0,
            None => workspace.device_ptr_mut(&self.stream).0,
        };
        let mut scratch = None;
        if key.dir == Dir::Filter {
            let g = &key.k.g;
            let bytes = g.oc * (g.c / key.k.groups) * g.k * g.k * self.elem;
            let s = (self.stream.alloc_zeros::<u8>(bytes))
                .map_err(|e| format!("allocate {bytes} bytes to try cuDNN's plans: {e:?}"))?;
            scratch = Some(s);
        }
        if let Some(s) = scratch.as_mut() {
            ptrs[1] = s.device_ptr_mut(&self.stream).0;
        }
        let v = pack(ptrs, ws)?;
        let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
        let on = |e| format!("time cuDNN's plans: {e:?}");
        let h = self.handle.raw();
        let mut best: Option<(f32, (Desc, usize))> = None;
        for p in plans {
            // SAFETY: the pointers are the call's buffers (a weight gradient's scratch of its
            // shape), the workspace as big as every plan tried needs
            if let Err(e) = unsafe { p.0.execute(h, &v) } {
                tally.unrun(e);
                continue;
            }
            if !timed {
                return Ok(Some(p));
            }
            let start = self.stream.record_event(timing).map_err(on)?;
            // SAFETY: as above
            let ran = (0..RUNS).all(|_| unsafe { p.0.execute(h, &v) }.is_ok());
            let end = self.stream.record_event(timing).map_err(on)?;
            end.synchronize().map_err(on)?;
            let ms = start.elapsed_ms(&end).map_err(on)?;
            if ran && best.as_ref().is_none_or(|(b, _)| ms < *b) {
                best = Some((ms, p));
            }
        }
        Ok(best.map(|(_, p)| p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_reads_each_value_and_names_the_choices_otherwise() {
        assert_eq!(Api::parse(None), Ok(Api::Legacy));
        assert_eq!(Api::parse(Some("")), Ok(Api::Legacy));
        assert_eq!(Api::parse(Some("Graph")), Ok(Api::Graph));
        let e = Api::parse(Some("v8")).unwrap_err();
        assert!(
            e.contains("v8") && e.contains("legacy") && e.contains("graph"),
            "{e}"
        );
    }

    #[test]
    fn coverage_names_the_first_refusal_only_where_there_was_one() {
        let all = Coverage {
            planned: 6,
            asked: 6,
            refused: None,
        };
        assert_eq!(
            all.to_string(),
            "the graph API planned 6 of 6 shapes and directions"
        );
        let some = Coverage {
            planned: 5,
            asked: 6,
            refused: Some("Data of a shape: no engine".into()),
        };
        let said = some.to_string();
        assert!(said.starts_with("the graph API planned 5 of 6"), "{said}");
        assert!(
            said.contains("legacy API ran the rest (first refused: Data of a shape: no engine)"),
            "{said}"
        );
    }

    /// A variant pack is host data cuDNN checks as it is finalized, with no GPU: where the
    /// library loads (`scripts/cudnn-on-cpu`), one of three tensors and a workspace builds.
    #[test]
    fn variant_packs_finalize_where_cudnn_loads() {
        if !crate::backend::cuda::dnn::available() {
            eprintln!("SKIPPED graph::variant_packs_finalize_where_cudnn_loads: cuDNN is not loadable here");
            return;
        }
        let made = pack(
            [0x7f00_0000_0000, 0x7f00_0010_0000, 0x7f00_0020_0000],
            0x7f00_0030_0000,
        );
        assert!(made.is_ok(), "{:?}", made.err());
    }
}
