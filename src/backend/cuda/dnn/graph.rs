//! Convolutions through cuDNN's graph (backend) API, as PyTorch runs its own
//! (`MGTOP_CUDNN_API=graph`): per shape, direction, beta and tensor alignment, a graph of one
//! convolution; the engine configurations cuDNN's heuristics list for it (mode A, then its
//! fallback list) whose numerics the run allows (`allowed`); those made into execution plans
//! within `MAX_WORKSPACE`; and of those, measured, the fastest of up to `TIMED` on the call's
//! own buffers (PyTorch's `cudnn.benchmark`), or the first (`MGTOP_CUDNN_ALGOS=heuristic` or
//! `deterministic`). The legacy API (`cudnnConvolution*`) reaches one engine per algorithm
//! enum; the graph API all of them. A shape no engine takes goes to the legacy API
//! (`Plans::run` says so by returning false).

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
use super::{Key, MAX_WORKSPACE};
use crate::backend::cuda::layout::Layout;

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

/// Which of a convolution's three products a plan computes.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Dir {
    /// y from x and w.
    Forward,
    /// dx from dy and w.
    Data,
    /// dw from x and dy.
    Filter,
}

/// The tensors' unique ids in every graph, in `run`'s pointer order: x (or dx), w (or dw),
/// y (or dy).
const UIDS: [i64; 3] = [1, 2, 3];

/// How many execution plans a measured shape times at most (cuDNN lists its likely best
/// first).
const TIMED: usize = 12;

/// Runs of each plan timed, after one untimed.
const RUNS: usize = 3;

/// What the run's numerics allow of an engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Numerics {
    /// Tensor cores (TF32 for fp32 tensors, bf16 products): all but `--precision fp32`.
    pub tensor_cores: bool,
    /// The same bits every run (`MGTOP_CUDNN_ALGOS=deterministic`).
    pub deterministic: bool,
}

/// Whether an engine with numerical notes `notes` (their C values) may run under `n`: never
/// one that converts its inputs down (fp32 to fp16, as PyTorch refuses them too); tensor-core
/// engines only where allowed; deterministic ones only where asked for.
pub fn allowed(notes: &[u32], n: Numerics) -> bool {
    use ffi::cudnnBackendNumericalNote_t::*;
    let has = |note: ffi::cudnnBackendNumericalNote_t| notes.contains(&(note as u32));
    !(has(CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS)
        || (!n.tensor_cores && has(CUDNN_NUMERICAL_NOTE_TENSOR_CORE))
        || (n.deterministic && has(CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)))
}

/// The alignment a buffer at device address `p` is described with: the largest power of two
/// up to 16 bytes dividing it.
pub fn alignment(p: u64) -> u8 {
    match p {
        0 => 16,
        _ => (p & p.wrapping_neg()).min(16) as u8,
    }
}

/// The strides of a tensor of dimensions `[n, c, h, w]` (filters: `[k, c, r, s]`) in `layout`
/// (channels last: NHWC tensors, KRSC filters).
pub fn strides(layout: Layout, [_, c, h, w]: [usize; 4]) -> [usize; 4] {
    match layout {
        Layout::Nchw => [c * h * w, h * w, w, 1],
        Layout::Nhwc => [h * w * c, 1, w * c, c],
    }
}

fn i64s<const N: usize>(v: [usize; N]) -> Result<[i64; N], String> {
    let mut out = [0i64; N];
    for (o, x) in out.iter_mut().zip(v) {
        *o = i64::try_from(x).map_err(|_| format!("dimension {x} is beyond cuDNN's sizes"))?;
    }
    Ok(out)
}

/// A finalized tensor descriptor.
fn tensor(
    uid: i64,
    dims: [usize; 4],
    layout: Layout,
    data: ffi::cudnnDataType_t,
    align: u8,
) -> Result<Desc, String> {
    let mut t = Desc::new(K::CUDNN_BACKEND_TENSOR_DESCRIPTOR)?;
    t.set_data_type(A::CUDNN_ATTR_TENSOR_DATA_TYPE, data)?;
    t.set_i64s(A::CUDNN_ATTR_TENSOR_DIMENSIONS, &i64s(dims)?)?;
    t.set_i64s(A::CUDNN_ATTR_TENSOR_STRIDES, &i64s(strides(layout, dims))?)?;
    t.set_i64(A::CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)?;
    t.set_i64(A::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, align.into())?;
    t.finalize()
}

/// One convolution of shape `k` in direction `dir` (its output scaled by `beta` before the
/// product is added), on tensors of `data` aligned as `align` (x, w, y), fp32 compute: the
/// finalized operation, and the descriptors it was made of (kept alive beside it).
fn operation(
    k: Key,
    dir: Dir,
    beta: f32,
    data: ffi::cudnnDataType_t,
    align: [u8; 3],
) -> Result<(Desc, Vec<Desc>), String> {
    let g = &k.g;
    let x = tensor(UIDS[0], [k.b, g.c, g.h, g.w], k.layout, data, align[0])?;
    let w = tensor(
        UIDS[1],
        [g.oc, g.c / k.groups, g.k, g.k],
        k.layout,
        data,
        align[1],
    )?;
    let y = tensor(UIDS[2], [k.b, g.oc, g.oh, g.ow], k.layout, data, align[2])?;
    let mut conv = Desc::new(K::CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR)?;
    conv.set_data_type(
        A::CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
        ffi::cudnnDataType_t::CUDNN_DATA_FLOAT,
    )?;
    conv.set_conv_mode(
        A::CUDNN_ATTR_CONVOLUTION_CONV_MODE,
        ffi::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
    )?;
    conv.set_i64(A::CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, 2)?;
    conv.set_i64s(A::CUDNN_ATTR_CONVOLUTION_DILATIONS, &[1, 1])?;
    conv.set_i64s(
        A::CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
        &i64s([g.stride; 2])?,
    )?;
    conv.set_i64s(A::CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, &i64s([g.pad; 2])?)?;
    conv.set_i64s(A::CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, &i64s([g.pad; 2])?)?;
    let conv = conv.finalize()?;
    // (alpha, beta, convolution, x, w, y) of each direction's operation
    let (kind, [alpha, b, c, xa, wa, ya]) = match dir {
        Dir::Forward => (
            K::CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
            [
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
            ],
        ),
        Dir::Data => (
            K::CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
            [
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
            ],
        ),
        Dir::Filter => (
            K::CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
            [
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
            ],
        ),
    };
    let mut op = Desc::new(kind)?;
    op.set_f32(alpha, 1.0)?;
    op.set_f32(b, beta)?;
    op.set_descs(c, &[&conv])?;
    op.set_descs(xa, &[&x])?;
    op.set_descs(wa, &[&w])?;
    op.set_descs(ya, &[&y])?;
    Ok((op.finalize()?, vec![x, w, y, conv]))
}

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
/// variant pack of the pointers it last ran on (the same buffers every step).
struct Ready {
    plan: Desc,
    _made_of: Vec<Desc>,
    workspace: usize,
    pack: Option<([u64; 4], Desc)>,
}

/// The graph API's plans on one GPU's stream, for tensors of one type.
pub struct Plans {
    /// Each key's plan; `None` where no engine takes it (the legacy API runs it). (Dropped
    /// before the handle they were made on.)
    ready: HashMap<PlanKey, Option<Ready>>,
    stream: Arc<CudaStream>,
    handle: Measurer,
    data: ffi::cudnnDataType_t,
    /// Bytes of one element (the weight-gradient scratch a measurement writes).
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
            stream: stream.clone(),
            handle: Measurer::open(stream)?,
            data,
            elem,
            numerics,
            how,
            refused: None,
        })
    }

    /// Runs direction `dir` of shape `k` (the output scaled by `beta` first) on the buffers at
    /// `ptrs` (x or dx, w or dw, y or dy), `workspace` grown to what its plan needs; false
    /// where no engine takes the shape (the caller runs the legacy API).
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
            let ready = match self.make(key, ptrs, workspace)? {
                Ok(r) => Some(r),
                Err(why) => {
                    let what = format!("{:?} of {:?}: {why}", key.dir, key.k);
                    self.refused.get_or_insert(what);
                    None
                }
            };
            self.ready.insert(key, ready);
        }
        let Some(need) = self.ready[&key].as_ref().map(|r| r.workspace) else {
            return Ok(false);
        };
        let ws = self.grow(workspace, need)?;
        let r = self
            .ready
            .get_mut(&key)
            .and_then(Option::as_mut)
            .expect("a plan");
        let at = [ptrs[0], ptrs[1], ptrs[2], ws];
        if r.pack.as_ref().is_none_or(|(p, _)| *p != at) {
            r.pack = Some((at, pack(ptrs, ws)?));
        }
        let (_, v) = r.pack.as_ref().expect("a variant pack");
        r.plan.execute(self.handle.raw(), v)?;
        Ok(true)
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

    /// The engine configurations cuDNN's heuristics list for `graph`, mode A's then its
    /// fallback list's (a mode that fails lists none).
    fn configs(graph: &Desc) -> Vec<Desc> {
        use ffi::cudnnBackendHeurMode_t::{CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
        let list = |mode| -> Result<Vec<Desc>, String> {
            let mut h = Desc::new(K::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)?;
            h.set_descs(A::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, &[graph])?;
            h.set_heur_mode(A::CUDNN_ATTR_ENGINEHEUR_MODE, mode)?;
            let h = h.finalize()?;
            let n = h.count_descs(A::CUDNN_ATTR_ENGINEHEUR_RESULTS)?;
            h.get_descs(
                A::CUDNN_ATTR_ENGINEHEUR_RESULTS,
                K::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
                n,
            )
        };
        [CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK]
            .into_iter()
            .flat_map(|mode| list(mode).unwrap_or_default())
            .collect()
    }

    /// Engine configuration `cfg` made into a plan, where the run's numerics allow its engine
    /// and it builds within the workspace bound: (plan, workspace bytes).
    fn plan(&self, cfg: &Desc) -> Option<(Desc, usize)> {
        use ffi::cudnnBackendAttributeType_t::CUDNN_TYPE_NUMERICAL_NOTE;
        let engine = cfg
            .get_descs(
                A::CUDNN_ATTR_ENGINECFG_ENGINE,
                K::CUDNN_BACKEND_ENGINE_DESCRIPTOR,
                1,
            )
            .ok()?
            .pop()?;
        let notes = engine
            .notes(
                A::CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                CUDNN_TYPE_NUMERICAL_NOTE,
            )
            .ok()?;
        if !allowed(&notes, self.numerics) {
            return None;
        }
        let mut p = Desc::new(K::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR).ok()?;
        p.set_handle(A::CUDNN_ATTR_EXECUTION_PLAN_HANDLE, self.handle.raw())
            .ok()?;
        p.set_descs(A::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, &[cfg])
            .ok()?;
        let p = p.finalize().ok()?;
        let need = p
            .get_i64(A::CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)
            .ok()?;
        let need = usize::try_from(need).ok().filter(|&n| n <= MAX_WORKSPACE)?;
        Some((p, need))
    }

    /// The plan of `key`: the first usable one, or measured, the fastest of up to `TIMED` run on
    /// `ptrs` (a weight gradient into scratch: it may be added to); Ok(Err(why)) where cuDNN
    /// refuses the shape or no plan builds (the legacy API runs it), Err where timing failed.
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
            graph.set_handle(A::CUDNN_ATTR_OPERATIONGRAPH_HANDLE, self.handle.raw())?;
            graph.set_descs(A::CUDNN_ATTR_OPERATIONGRAPH_OPS, &[&op])?;
            Ok::<_, String>((op, made_of, graph.finalize()?))
        })();
        let (op, mut made_of, graph) = match described {
            Ok(d) => d,
            Err(why) => return Ok(Err(why)),
        };
        let want = match self.how {
            Choice::Measured => TIMED,
            Choice::Heuristic | Choice::Deterministic => 1,
        };
        let mut plans = Vec::new();
        for cfg in Self::configs(&graph) {
            if plans.len() == want {
                break;
            }
            if let Some((p, need)) = self.plan(&cfg) {
                plans.push((p, need, cfg));
            }
        }
        let chosen = match plans.len() {
            0 | 1 => plans.pop(),
            _ => self.fastest(plans, key, ptrs, workspace)?,
        };
        let Some((plan, need, cfg)) = chosen else {
            return Ok(Err("no engine configuration of its heuristics made a plan the run's numerics and workspace bound allow (or ran)".into()));
        };
        made_of.extend([op, graph, cfg]);
        Ok(Ok(Ready {
            plan,
            _made_of: made_of,
            workspace: need,
            pack: None,
        }))
    }

    /// The fastest of `plans` on `ptrs` (each run once, then `RUNS` times between events), a
    /// weight gradient written into scratch; one that fails to run is passed over.
    fn fastest(
        &self,
        plans: Vec<(Desc, usize, Desc)>,
        key: PlanKey,
        mut ptrs: [u64; 3],
        workspace: &mut CudaSlice<u8>,
    ) -> Result<Option<(Desc, usize, Desc)>, String> {
        let need = plans.iter().map(|p| p.1).max().unwrap_or(0);
        let ws = self.grow(workspace, need)?;
        let g = &key.k.g;
        let mut scratch = None;
        if key.dir == Dir::Filter {
            let bytes = g.oc * (g.c / key.k.groups) * g.k * g.k * self.elem;
            let s = self
                .stream
                .alloc_zeros::<u8>(bytes)
                .map_err(|e| format!("allocate {bytes} bytes to time cuDNN's plans: {e:?}"))?;
            scratch = Some(s);
        }
        if let Some(s) = scratch.as_mut() {
            ptrs[1] = s.device_ptr_mut(&self.stream).0;
        }
        let v = pack(ptrs, ws)?;
        let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
        let on = |e| format!("time cuDNN's plans: {e:?}");
        let mut best: Option<(f32, (Desc, usize, Desc))> = None;
        for p in plans {
            let h = self.handle.raw();
            // SAFETY: the pointers are the call's buffers (a weight gradient's scratch of its
            // shape), the workspace grown to every plan's need
            if unsafe { p.0.execute(h, &v) }.is_err() {
                continue;
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
    use crate::nn::grouped::ConvGeom;

    #[test]
    fn engines_are_kept_as_the_precision_and_determinism_allow() {
        use ffi::cudnnBackendNumericalNote_t::*;
        let n = |v: &[ffi::cudnnBackendNumericalNote_t]| {
            v.iter().map(|x| *x as u32).collect::<Vec<_>>()
        };
        let tf32 = Numerics {
            tensor_cores: true,
            deterministic: false,
        };
        let strict = Numerics {
            tensor_cores: false,
            deterministic: false,
        };
        let same = Numerics {
            tensor_cores: true,
            deterministic: true,
        };
        let tc = n(&[CUDNN_NUMERICAL_NOTE_TENSOR_CORE]);
        assert!(allowed(&tc, tf32));
        assert!(!allowed(&tc, strict));
        assert!(allowed(&[], strict));
        assert!(!allowed(
            &n(&[CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS]),
            tf32
        ));
        let atomics = n(&[
            CUDNN_NUMERICAL_NOTE_TENSOR_CORE,
            CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC,
        ]);
        assert!(allowed(&atomics, tf32));
        assert!(!allowed(&atomics, same));
        // a note this build does not know is no reason to refuse an engine
        assert!(allowed(&[77], strict));
    }

    #[test]
    fn alignment_is_the_largest_power_of_two_up_to_16_dividing_the_address() {
        assert_eq!(alignment(0x7f00_0000_0000), 16);
        assert_eq!(alignment(0x1008), 8);
        assert_eq!(alignment(0x1002), 2);
        assert_eq!(alignment(0x1001), 1);
        assert_eq!(alignment(0x1030), 16);
    }

    #[test]
    fn strides_lay_out_nchw_and_channels_last() {
        assert_eq!(strides(Layout::Nchw, [2, 3, 4, 5]), [60, 20, 5, 1]);
        assert_eq!(strides(Layout::Nhwc, [2, 3, 4, 5]), [60, 1, 15, 3]);
        // KRSC filters: 8 outputs of 3x3 taps over 4 channels
        assert_eq!(strides(Layout::Nhwc, [8, 4, 3, 3]), [36, 1, 12, 4]);
    }

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

    fn geom(c: usize, oc: usize, k: usize, stride: usize, hw: usize) -> ConvGeom {
        let pad = k / 2;
        let o = (hw + 2 * pad - k) / stride + 1;
        ConvGeom {
            c,
            h: hw,
            w: hw,
            oc,
            k,
            stride,
            pad,
            oh: o,
            ow: o,
        }
    }

    /// cuDNN checks an operation's tensors against its convolution when it is finalized, with
    /// no GPU: where the library loads (a PyPI nvidia-cudnn wheel on LD_LIBRARY_PATH will do),
    /// every direction of dense and depthwise shapes in both layouts and types builds, and a
    /// mismatched one is refused.
    #[test]
    fn operations_finalize_where_cudnn_loads() {
        if !super::super::available() {
            eprintln!(
                "SKIPPED graph::operations_finalize_where_cudnn_loads: cuDNN is not loadable here"
            );
            return;
        }
        use ffi::cudnnDataType_t::{CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT};
        for layout in [Layout::Nchw, Layout::Nhwc] {
            for data in [CUDNN_DATA_FLOAT, CUDNN_DATA_BFLOAT16] {
                for (g, groups) in [
                    (geom(16, 32, 3, 1, 32), 1),
                    (geom(64, 64, 3, 2, 14), 64),
                    (geom(24, 144, 1, 1, 7), 1),
                ] {
                    for dir in [Dir::Forward, Dir::Data, Dir::Filter] {
                        let k = Key {
                            b: 8,
                            groups,
                            g,
                            layout,
                        };
                        let made = operation(k, dir, 1.0, data, [16, 4, 16]);
                        assert!(
                            made.is_ok(),
                            "{layout:?} {data:?} {g:?} {dir:?}: {:?}",
                            made.err()
                        );
                    }
                }
            }
        }
        // an output of the wrong size
        let mut g = geom(16, 32, 3, 1, 32);
        g.oh += 1;
        let k = Key {
            b: 8,
            groups: 1,
            g,
            layout: Layout::Nchw,
        };
        let e = operation(k, Dir::Forward, 0.0, CUDNN_DATA_FLOAT, [16; 3]).unwrap_err();
        assert!(e.contains("finalize"), "{e}");
    }
}
