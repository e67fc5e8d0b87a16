//! Convolution algorithms chosen by measurement, as PyTorch's `cudnn.benchmark`: cuDNN runs
//! each of its algorithms for a shape once (`cudnnFind*Algorithm`, on buffers it allocates
//! itself) and lists them fastest first; the first that succeeded, fits the workspace bound and
//! computes in the math asked for is taken. Or, with `MGTOP_CUDNN_ALGOS=deterministic` (as
//! PyTorch's `cudnn.deterministic`), the first of cuDNN's heuristic list
//! (`cudnnGetConvolution*Algorithm_v7`) that also gives the same bits every run: no timing, so
//! every run of a shape on a GPU and cuDNN takes the same algorithms. cudarc's safe descriptors
//! keep their raw handles private, so the choosing uses its own handle and descriptors, made
//! here from the same shape; the algorithms it returns are the same enums the safe launches
//! take.

use std::ffi::c_int;

use cudarc::cudnn::sys as ffi;
use cudarc::cudnn::sys::{
    cudnnConvolutionBwdDataAlgo_t as DataAlgo, cudnnConvolutionBwdFilterAlgo_t as FilterAlgo,
    cudnnConvolutionFwdAlgo_t as FwdAlgo, cudnnDataType_t, cudnnDeterminism_t, cudnnMathType_t,
    cudnnStatus_t,
};
use cudarc::driver::CudaStream;

use cudarc::cudnn::CudnnError;

use super::{int, say, Key, MAX_WORKSPACE};

/// How a shape's algorithms are chosen (`MGTOP_CUDNN_ALGOS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Measured, fastest first (the default; `measure`).
    Measured,
    /// cuDNN's first heuristic pick, deterministic or not (`heuristic`).
    Heuristic,
    /// cuDNN's heuristic list, deterministic algorithms only (`deterministic`).
    Deterministic,
}

impl Choice {
    /// `MGTOP_CUDNN_ALGOS`'s value read: unset or empty is `Measured`; an unknown value is an
    /// error naming the choices.
    pub fn parse(v: Option<&str>) -> Result<Choice, String> {
        match v.map(str::to_ascii_lowercase).as_deref() {
            None | Some("") | Some("measure") => Ok(Choice::Measured),
            Some("heuristic") => Ok(Choice::Heuristic),
            Some("deterministic") => Ok(Choice::Deterministic),
            Some(other) => Err(format!(
                "MGTOP_CUDNN_ALGOS={other} is not understood: use measure (the default), heuristic or deterministic"
            )),
        }
    }

    /// This process's choice; an unknown value is measured (the start-up line names it).
    pub fn from_env() -> Choice {
        Choice::parse(std::env::var("MGTOP_CUDNN_ALGOS").ok().as_deref())
            .unwrap_or(Choice::Measured)
    }

    /// The algorithms a shape takes where nothing was chosen or a choice needs more workspace
    /// than allowed (before `NO_WORKSPACE`, the last resort).
    pub fn fallback(self) -> Algos {
        match self {
            Choice::Deterministic => DETERMINISTIC,
            _ => NO_WORKSPACE,
        }
    }

    /// What the start-up line says of it.
    pub fn describe(self) -> &'static str {
        match self {
            Choice::Measured => "measured once per shape",
            Choice::Heuristic => "by its heuristics: MGTOP_CUDNN_ALGOS=heuristic",
            Choice::Deterministic => {
                "deterministic ones by its heuristics, the same bits every run: MGTOP_CUDNN_ALGOS=deterministic"
            }
        }
    }
}

/// cuDNN's algorithms that need no workspace (the backward ones add with atomics: not
/// deterministic).
pub const NO_WORKSPACE: Algos = Algos {
    fwd: FwdAlgo::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
    data: DataAlgo::CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
    filter: FilterAlgo::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
};

/// What a deterministic run takes where nothing was chosen or a choice needs more workspace
/// than allowed: algorithms cuDNN documents as deterministic that need little or none.
const DETERMINISTIC: Algos = Algos {
    fwd: FwdAlgo::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
    data: DataAlgo::CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
    filter: FilterAlgo::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
};

/// The three algorithms of one shape.
#[derive(Clone, Copy, Debug)]
pub struct Algos {
    pub fwd: FwdAlgo,
    pub data: DataAlgo,
    pub filter: FilterAlgo,
}

fn ok(what: &str, s: cudnnStatus_t) -> Result<(), String> {
    s.result().map_err(|e| format!("cuDNN {what}: {e:?}"))
}

/// A cuDNN handle on one stream, for measuring only.
pub struct Measurer {
    handle: ffi::cudnnHandle_t,
}

// SAFETY: the handle is used by the thread that owns the replica alone (as cudarc's `Cudnn`)
unsafe impl Send for Measurer {}

impl Drop for Measurer {
    fn drop(&mut self) {
        // SAFETY: made by `cudnnCreate` in `open` and not used after this
        let _ = unsafe { ffi::cudnnDestroy(self.handle) };
    }
}

/// The descriptors of one shape, destroyed on drop.
struct Descs {
    x: ffi::cudnnTensorDescriptor_t,
    y: ffi::cudnnTensorDescriptor_t,
    w: ffi::cudnnFilterDescriptor_t,
    conv: ffi::cudnnConvolutionDescriptor_t,
}

impl Drop for Descs {
    fn drop(&mut self) {
        // SAFETY: each was created in `describe` (a null one, never set, is skipped)
        unsafe {
            if !self.x.is_null() {
                let _ = ffi::cudnnDestroyTensorDescriptor(self.x);
            }
            if !self.y.is_null() {
                let _ = ffi::cudnnDestroyTensorDescriptor(self.y);
            }
            if !self.w.is_null() {
                let _ = ffi::cudnnDestroyFilterDescriptor(self.w);
            }
            if !self.conv.is_null() {
                let _ = ffi::cudnnDestroyConvolutionDescriptor(self.conv);
            }
        }
    }
}

/// One entry of cuDNN's list of algorithms: the algorithm, whether it ran (or can run), the
/// workspace bytes it needs, its math and whether it is deterministic.
type Listed<A> = (A, cudnnStatus_t, usize, cudnnMathType_t, cudnnDeterminism_t);

/// The first of `results` (best first) that succeeded, fits in `limit` bytes, computes in
/// `math` where strict fp32 was asked for (TF32 may pick any), and is deterministic where
/// `deterministic` asks for it.
fn first_fitting<A: Copy>(
    results: &[Listed<A>],
    limit: usize,
    math: cudnnMathType_t,
    deterministic: bool,
) -> Option<A> {
    results
        .iter()
        .find(|(_, status, memory, m, det)| {
            *status == cudnnStatus_t::CUDNN_STATUS_SUCCESS
                && *memory <= limit
                && (math != cudnnMathType_t::CUDNN_FMA_MATH || *m == math)
                && (!deterministic || *det == cudnnDeterminism_t::CUDNN_DETERMINISTIC)
        })
        .map(|r| r.0)
}

/// One entry of cuDNN's list of algorithms (its three perf structs).
trait Perf: Copy {
    type Algo: Copy;
    fn parts(&self) -> Listed<Self::Algo>;
}

macro_rules! perf {
    ($($t:ty => $a:ty),*) => {$(
        impl Perf for $t {
            type Algo = $a;
            fn parts(&self) -> Listed<$a> {
                (self.algo, self.status, self.memory, self.mathType, self.determinism)
            }
        }
    )*};
}

perf!(
    ffi::cudnnConvolutionFwdAlgoPerf_t => FwdAlgo,
    ffi::cudnnConvolutionBwdDataAlgoPerf_t => DataAlgo,
    ffi::cudnnConvolutionBwdFilterAlgoPerf_t => FilterAlgo
);

/// The first algorithm that `list` (a `cudnnFind*Algorithm`, fastest first, or a
/// `cudnnGetConvolution*Algorithm_v7`, in the heuristics' order; given room for n results,
/// the count it wrote and where) names among those `first_fitting` takes.
///
/// # Safety
/// `list` must write at most n results and set the count to how many it wrote.
unsafe fn first_listed<P: Perf>(
    direction: &str,
    (limit, math, deterministic): (usize, cudnnMathType_t, bool),
    list: impl FnOnce(c_int, *mut c_int, *mut P) -> cudnnStatus_t,
) -> Result<P::Algo, String> {
    const N: usize = 16;
    // SAFETY: the perf structs are plain C data, valid all zero
    let mut results = [unsafe { std::mem::zeroed::<P>() }; N];
    let mut count: c_int = 0;
    ok(
        &format!("list the {direction} algorithms"),
        list(N as c_int, &mut count, results.as_mut_ptr()),
    )?;
    let listed: Vec<_> = results[..count.clamp(0, N as c_int) as usize]
        .iter()
        .map(Perf::parts)
        .collect();
    first_fitting(&listed, limit, math, deterministic)
        .ok_or_else(|| format!("no {direction} algorithm fits"))
}

impl Measurer {
    /// A handle on `stream`.
    pub fn open(stream: &CudaStream) -> Result<Measurer, String> {
        let mut handle = std::ptr::null_mut();
        // SAFETY: out-pointer to a handle; the stream outlives the handle (the replica holds both)
        unsafe {
            ok("create a handle", ffi::cudnnCreate(&mut handle))?;
            let m = Measurer { handle };
            ok(
                "set the stream",
                ffi::cudnnSetStream(m.handle, stream.cu_stream() as ffi::cudaStream_t),
            )?;
            Ok(m)
        }
    }

    /// The raw handle (the graph API's plans run on it too: `graph`).
    pub(super) fn raw(&self) -> ffi::cudnnHandle_t {
        self.handle
    }

    /// The descriptors of shape `k` with tensors of type `data`, fp32 compute.
    fn describe(
        &self,
        k: Key,
        math: cudnnMathType_t,
        data: cudnnDataType_t,
    ) -> Result<Descs, String> {
        let mut d = Descs {
            x: std::ptr::null_mut(),
            y: std::ptr::null_mut(),
            w: std::ptr::null_mut(),
            conv: std::ptr::null_mut(),
        };
        let g = &k.g;
        let (format, f32) = (k.layout.format(), cudnnDataType_t::CUDNN_DATA_FLOAT);
        // SAFETY: out-pointers to descriptors owned by `d`, then set with checked sizes
        unsafe {
            ok(
                "describe the input",
                ffi::cudnnCreateTensorDescriptor(&mut d.x),
            )?;
            ok(
                "describe the output",
                ffi::cudnnCreateTensorDescriptor(&mut d.y),
            )?;
            ok(
                "describe the weights",
                ffi::cudnnCreateFilterDescriptor(&mut d.w),
            )?;
            ok(
                "describe the convolution",
                ffi::cudnnCreateConvolutionDescriptor(&mut d.conv),
            )?;
            let tensor = |t, [n, c, h, w]: [usize; 4]| -> Result<(), String> {
                let dims = (int(n)?, int(c)?, int(h)?, int(w)?);
                ok(
                    "describe a tensor",
                    ffi::cudnnSetTensor4dDescriptor(
                        t, format, data, dims.0, dims.1, dims.2, dims.3,
                    ),
                )
            };
            tensor(d.x, [k.b, g.c, g.h, g.w])?;
            tensor(d.y, [k.b, g.oc, g.oh, g.ow])?;
            ok(
                "describe the weights",
                ffi::cudnnSetFilter4dDescriptor(
                    d.w,
                    data,
                    format,
                    int(g.oc)?,
                    int(g.c / k.groups)?,
                    int(g.k)?,
                    int(g.k)?,
                ),
            )?;
            ok(
                "describe the convolution",
                ffi::cudnnSetConvolution2dDescriptor(
                    d.conv,
                    int(g.pad)?,
                    int(g.pad)?,
                    int(g.stride)?,
                    int(g.stride)?,
                    1,
                    1,
                    ffi::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                    f32,
                ),
            )?;
            ok(
                "set the math type",
                ffi::cudnnSetConvolutionMathType(d.conv, math),
            )?;
            ok(
                "set the group count",
                ffi::cudnnSetConvolutionGroupCount(d.conv, int(k.groups)?),
            )?;
        }
        Ok(d)
    }

    /// The algorithms of shape `k` (tensors of type `data`) in each direction that fit `limit`
    /// bytes of workspace, as `how` chooses: measured (cuDNN runs each once, on buffers it
    /// allocates, and waits for the device) or deterministic from its heuristics. (`Heuristic`
    /// needs no measurer: the safe API's pick.)
    pub fn choose(
        &self,
        k: Key,
        how: Choice,
        math: cudnnMathType_t,
        data: cudnnDataType_t,
        limit: usize,
    ) -> Result<Algos, String> {
        let d = self.describe(k, math, data)?;
        let h = self.handle;
        let want = (limit, math, how == Choice::Deterministic);
        let measure = how == Choice::Measured;
        // SAFETY: the descriptors describe one valid shape; `first_listed` hands each call an
        // array of the length it passes and reads only the entries cuDNN says it wrote
        unsafe {
            Ok(Algos {
                fwd: first_listed("forward", want, |n, count, r| match measure {
                    true => ffi::cudnnFindConvolutionForwardAlgorithm(
                        h, d.x, d.w, d.conv, d.y, n, count, r,
                    ),
                    false => ffi::cudnnGetConvolutionForwardAlgorithm_v7(
                        h, d.x, d.w, d.conv, d.y, n, count, r,
                    ),
                })?,
                data: first_listed("input-gradient", want, |n, count, r| match measure {
                    true => ffi::cudnnFindConvolutionBackwardDataAlgorithm(
                        h, d.w, d.y, d.conv, d.x, n, count, r,
                    ),
                    false => ffi::cudnnGetConvolutionBackwardDataAlgorithm_v7(
                        h, d.w, d.y, d.conv, d.x, n, count, r,
                    ),
                })?,
                filter: first_listed("weight-gradient", want, |n, count, r| match measure {
                    true => ffi::cudnnFindConvolutionBackwardFilterAlgorithm(
                        h, d.x, d.y, d.conv, d.w, n, count, r,
                    ),
                    false => ffi::cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                        h, d.x, d.y, d.conv, d.w, n, count, r,
                    ),
                })?,
            })
        }
    }
}

/// The algorithm picked (`pick`) where its workspace (`size`) fits in `MAX_WORKSPACE`, else
/// (too big, or cuDNN cannot size it for this shape) the first of `fallbacks` that can run this
/// shape within it, else the last (cuDNN's no-workspace algorithm): (algorithm, workspace
/// bytes).
pub fn fitting<A: Copy, const N: usize>(
    what: &str,
    pick: Result<A, CudnnError>,
    size: impl Fn(A) -> Result<usize, CudnnError>,
    fallbacks: [A; N],
) -> Result<(A, usize), String> {
    let a = pick.map_err(say(what))?;
    match size(a) {
        Ok(n) if n <= MAX_WORKSPACE => Ok((a, n)),
        // too big, or not for this shape (cuDNN cannot size it: a fixed fallback in a layout
        // it does not take)
        _ => {
            let fits = |f: &A| {
                size(*f)
                    .ok()
                    .filter(|&n| n <= MAX_WORKSPACE)
                    .map(|n| (*f, n))
            };
            let last = *fallbacks.last().expect("a fallback");
            Ok(fallbacks.iter().find_map(fits).unwrap_or((last, 0)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fastest_algorithm_that_succeeded_fits_and_keeps_strict_fp32_is_taken() {
        use cudnnDeterminism_t::{CUDNN_DETERMINISTIC as SAME, CUDNN_NON_DETERMINISTIC as ANY};
        use cudnnMathType_t::{CUDNN_DEFAULT_MATH as TF32, CUDNN_FMA_MATH as FMA};
        use cudnnStatus_t::{CUDNN_STATUS_NOT_SUPPORTED as NO, CUDNN_STATUS_SUCCESS as OK};
        // fastest first: failed, too big, tensor-core math, a strict one, then a deterministic
        let listed = [
            (1, NO, 0, FMA, SAME),
            (2, OK, 1 << 30, FMA, SAME),
            (3, OK, 10, TF32, ANY),
            (4, OK, 20, FMA, ANY),
            (5, OK, 20, FMA, SAME),
        ];
        assert_eq!(first_fitting(&listed, 1 << 20, FMA, false), Some(4));
        assert_eq!(first_fitting(&listed, 1 << 20, TF32, false), Some(3));
        assert_eq!(first_fitting(&listed, 1 << 31, TF32, false), Some(2));
        assert_eq!(first_fitting(&listed[..2], 1 << 20, TF32, false), None);
        assert_eq!(first_fitting(&listed, 1 << 20, TF32, true), Some(5));
        assert_eq!(first_fitting(&listed[..4], 1 << 20, TF32, true), None);
    }

    #[test]
    fn the_choice_reads_each_value_and_names_the_choices_otherwise() {
        assert_eq!(Choice::parse(None), Ok(Choice::Measured));
        assert_eq!(Choice::parse(Some("")), Ok(Choice::Measured));
        assert_eq!(Choice::parse(Some("measure")), Ok(Choice::Measured));
        assert_eq!(Choice::parse(Some("Heuristic")), Ok(Choice::Heuristic));
        assert_eq!(
            Choice::parse(Some("deterministic")),
            Ok(Choice::Deterministic)
        );
        let e = Choice::parse(Some("fast")).unwrap_err();
        assert!(e.contains("fast") && e.contains("deterministic"), "{e}");
    }

    #[test]
    fn a_pick_too_big_or_unsizable_gives_way_to_the_first_fallback_that_fits() {
        use cudarc::cudnn::sys::cudnnStatus_t::CUDNN_STATUS_NOT_SUPPORTED;
        let no = || CudnnError(CUDNN_STATUS_NOT_SUPPORTED);
        // algorithm a needs sizes[a] bytes; None: cuDNN cannot size it for this shape
        let sizes = [Some(10), Some(MAX_WORKSPACE + 1), None, Some(20), Some(0)];
        let size = |a: usize| sizes[a].ok_or_else(no);
        assert_eq!(fitting("pick", Ok(0), size, [3, 4]), Ok((0, 10)));
        assert_eq!(fitting("pick", Ok(1), size, [2, 3, 4]), Ok((3, 20)));
        assert_eq!(fitting("pick", Ok(2), size, [3, 4]), Ok((3, 20)));
        // nothing fits: the last fallback, taken as needing none
        assert_eq!(fitting("pick", Ok(2), size, [1, 2]), Ok((2, 0)));
        let e = fitting("pick a forward algorithm", Err(no()), size, [4]).unwrap_err();
        assert!(e.contains("pick a forward algorithm"), "{e}");
    }
}
