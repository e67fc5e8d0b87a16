//! Convolution algorithms chosen by measurement, as PyTorch's `cudnn.benchmark`: cuDNN runs
//! each of its algorithms for a shape once (`cudnnFind*Algorithm`, on buffers it allocates
//! itself) and lists them fastest first; the first that succeeded, fits the workspace bound and
//! computes in the math asked for is taken. cudarc's safe descriptors keep their raw handles
//! private, so the measuring uses its own handle and descriptors, made here from the same
//! shape; the algorithms it returns are the same enums the safe launches take.

use std::ffi::c_int;

use cudarc::cudnn::sys as ffi;
use cudarc::cudnn::sys::{
    cudnnConvolutionBwdDataAlgo_t as DataAlgo, cudnnConvolutionBwdFilterAlgo_t as FilterAlgo,
    cudnnConvolutionFwdAlgo_t as FwdAlgo, cudnnDataType_t, cudnnMathType_t, cudnnStatus_t,
    cudnnTensorFormat_t,
};
use cudarc::driver::CudaStream;

use super::{int, Key};

/// Whether algorithms are measured (the default) rather than taken from cuDNN's heuristics
/// (`MGTOP_CUDNN_ALGOS=heuristic`).
pub fn wanted() -> bool {
    std::env::var("MGTOP_CUDNN_ALGOS").as_deref() != Ok("heuristic")
}

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

/// The first of `results` (fastest first) that succeeded, fits in `limit` bytes and computes
/// in `math`, where strict fp32 was asked for (TF32 may pick any).
fn first_fitting<A: Copy>(
    results: &[(A, cudnnStatus_t, usize, cudnnMathType_t)],
    limit: usize,
    math: cudnnMathType_t,
) -> Option<A> {
    results
        .iter()
        .find(|(_, status, memory, m)| {
            *status == cudnnStatus_t::CUDNN_STATUS_SUCCESS
                && *memory <= limit
                && (math != cudnnMathType_t::CUDNN_FMA_MATH || *m == math)
        })
        .map(|r| r.0)
}

/// One entry of cuDNN's list of measured algorithms (its three perf structs).
trait Perf: Copy {
    type Algo: Copy;
    fn parts(&self) -> (Self::Algo, cudnnStatus_t, usize, cudnnMathType_t);
}

macro_rules! perf {
    ($($t:ty => $a:ty),*) => {$(
        impl Perf for $t {
            type Algo = $a;
            fn parts(&self) -> ($a, cudnnStatus_t, usize, cudnnMathType_t) {
                (self.algo, self.status, self.memory, self.mathType)
            }
        }
    )*};
}

perf!(
    ffi::cudnnConvolutionFwdAlgoPerf_t => FwdAlgo,
    ffi::cudnnConvolutionBwdDataAlgoPerf_t => DataAlgo,
    ffi::cudnnConvolutionBwdFilterAlgoPerf_t => FilterAlgo
);

/// The algorithm `find` (one of `cudnnFind*Algorithm`, given room for n results, the count
/// it wrote and where) measures fastest among those `first_fitting` takes.
///
/// # Safety
/// `find` must write at most n results and set the count to how many it wrote.
unsafe fn fastest<P: Perf>(
    direction: &str,
    limit: usize,
    math: cudnnMathType_t,
    find: impl FnOnce(c_int, *mut c_int, *mut P) -> cudnnStatus_t,
) -> Result<P::Algo, String> {
    const N: usize = 16;
    // SAFETY: the perf structs are plain C data, valid all zero
    let mut results = [unsafe { std::mem::zeroed::<P>() }; N];
    let mut count: c_int = 0;
    ok(
        &format!("measure the {direction} algorithms"),
        find(N as c_int, &mut count, results.as_mut_ptr()),
    )?;
    let listed: Vec<_> = results[..count.clamp(0, N as c_int) as usize]
        .iter()
        .map(Perf::parts)
        .collect();
    first_fitting(&listed, limit, math).ok_or_else(|| format!("no {direction} algorithm fits"))
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
        let (nchw, f32) = (
            cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
            cudnnDataType_t::CUDNN_DATA_FLOAT,
        );
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
                    ffi::cudnnSetTensor4dDescriptor(t, nchw, data, dims.0, dims.1, dims.2, dims.3),
                )
            };
            tensor(d.x, [k.b, g.c, g.h, g.w])?;
            tensor(d.y, [k.b, g.oc, g.oh, g.ow])?;
            ok(
                "describe the weights",
                ffi::cudnnSetFilter4dDescriptor(
                    d.w,
                    data,
                    nchw,
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

    /// Runs every algorithm of shape `k` (tensors of type `data`) once in each direction and
    /// returns the fastest that fit `limit` bytes of workspace (cuDNN allocates the buffers it
    /// times on, and waits for the device).
    pub fn measure(
        &self,
        k: Key,
        math: cudnnMathType_t,
        data: cudnnDataType_t,
        limit: usize,
    ) -> Result<Algos, String> {
        let d = self.describe(k, math, data)?;
        let h = self.handle;
        // SAFETY: the descriptors describe one valid shape; `fastest` hands each call an array
        // of the length it passes and reads only the entries cuDNN says it wrote
        unsafe {
            Ok(Algos {
                fwd: fastest("forward", limit, math, |n, count, r| {
                    ffi::cudnnFindConvolutionForwardAlgorithm(h, d.x, d.w, d.conv, d.y, n, count, r)
                })?,
                data: fastest("input-gradient", limit, math, |n, count, r| {
                    ffi::cudnnFindConvolutionBackwardDataAlgorithm(
                        h, d.w, d.y, d.conv, d.x, n, count, r,
                    )
                })?,
                filter: fastest("weight-gradient", limit, math, |n, count, r| {
                    ffi::cudnnFindConvolutionBackwardFilterAlgorithm(
                        h, d.x, d.y, d.conv, d.w, n, count, r,
                    )
                })?,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fastest_algorithm_that_succeeded_fits_and_keeps_strict_fp32_is_taken() {
        use cudnnMathType_t::{CUDNN_DEFAULT_MATH as TF32, CUDNN_FMA_MATH as FMA};
        use cudnnStatus_t::{CUDNN_STATUS_NOT_SUPPORTED as NO, CUDNN_STATUS_SUCCESS as OK};
        // fastest first: failed, too big, tensor-core math, then a strict one
        let listed = [
            (1, NO, 0, FMA),
            (2, OK, 1 << 30, FMA),
            (3, OK, 10, TF32),
            (4, OK, 20, FMA),
        ];
        assert_eq!(first_fitting(&listed, 1 << 20, FMA), Some(4));
        assert_eq!(first_fitting(&listed, 1 << 20, TF32), Some(3));
        assert_eq!(first_fitting(&listed, 1 << 31, TF32), Some(2));
        assert_eq!(first_fitting(&listed[..2], 1 << 20, TF32), None);
    }
}
