//! cuDNN's backend (graph) API, one descriptor at a time: `Desc` owns a
//! `cudnnBackendDescriptor_t`, sets its attributes with the element type each takes, finalizes
//! it and reads attributes back. Every unsafe call into that API is here; `graph` builds
//! convolutions out of these. (cudarc wraps only the legacy API.)

use std::ffi::c_void;

use cudarc::cudnn::sys as ffi;
use ffi::cudnnBackendAttributeName_t as Attr;
use ffi::cudnnBackendAttributeType_t as Ty;
use ffi::cudnnBackendDescriptorType_t as Kind;

/// A C type a single-valued attribute takes, and the name cuDNN gives it.
pub trait Value: Copy {
    const TY: Ty;
}

impl Value for i64 {
    const TY: Ty = Ty::CUDNN_TYPE_INT64;
}

/// A float scale (a convolution's alpha or beta, for fp32 compute).
impl Value for f32 {
    const TY: Ty = Ty::CUDNN_TYPE_FLOAT;
}

impl Value for ffi::cudnnDataType_t {
    const TY: Ty = Ty::CUDNN_TYPE_DATA_TYPE;
}

impl Value for ffi::cudnnConvolutionMode_t {
    const TY: Ty = Ty::CUDNN_TYPE_CONVOLUTION_MODE;
}

impl Value for ffi::cudnnBackendHeurMode_t {
    const TY: Ty = Ty::CUDNN_TYPE_HEUR_MODE;
}

/// The cuDNN handle a graph or plan runs on (it must outlive them: `graph::Plans` holds it).
impl Value for ffi::cudnnHandle_t {
    const TY: Ty = Ty::CUDNN_TYPE_HANDLE;
}

/// One backend descriptor, destroyed on drop.
#[derive(Debug)]
pub struct Desc {
    raw: ffi::cudnnBackendDescriptor_t,
    kind: Kind,
}

// SAFETY: a descriptor is host memory used by the thread that owns its replica alone
unsafe impl Send for Desc {}

impl Drop for Desc {
    fn drop(&mut self) {
        // SAFETY: made by `cudnnBackendCreateDescriptor` in `new`, not used after this
        let _ = unsafe { ffi::cudnnBackendDestroyDescriptor(self.raw) };
    }
}

fn ok(what: impl FnOnce() -> String, s: ffi::cudnnStatus_t) -> Result<(), String> {
    s.result().map_err(|e| format!("cuDNN {}: {e:?}", what()))
}

impl Desc {
    /// A new descriptor of `kind`, its attributes unset.
    pub fn new(kind: Kind) -> Result<Desc, String> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: an out-pointer to one descriptor
        let s = unsafe { ffi::cudnnBackendCreateDescriptor(kind, &mut raw) };
        ok(|| format!("create a {kind:?}"), s)?;
        Ok(Desc { raw, kind })
    }

    /// Sets `attr` to the `n` elements of type `ty` at `values`.
    ///
    /// # Safety
    /// `values` must point at `n` elements of the C type `ty` names.
    unsafe fn set_raw(
        &mut self,
        attr: Attr,
        ty: Ty,
        n: usize,
        values: *const c_void,
    ) -> Result<(), String> {
        let s = ffi::cudnnBackendSetAttribute(self.raw, attr, ty, n as i64, values);
        ok(|| format!("set {attr:?} of a {:?}", self.kind), s)
    }

    pub fn set_i64s(&mut self, attr: Attr, v: &[i64]) -> Result<(), String> {
        // SAFETY: v.len() i64s
        unsafe { self.set_raw(attr, Ty::CUDNN_TYPE_INT64, v.len(), v.as_ptr().cast()) }
    }

    /// Sets `attr` to the one value `v`, of the C type `T` is (`Value`).
    pub fn set<T: Value>(&mut self, attr: Attr, v: T) -> Result<(), String> {
        // SAFETY: one value of the C type T::TY names
        unsafe { self.set_raw(attr, T::TY, 1, (&v as *const T).cast()) }
    }

    /// Other finalized descriptors (cuDNN keeps what it needs of them).
    pub fn set_descs(&mut self, attr: Attr, ds: &[&Desc]) -> Result<(), String> {
        let raw: Vec<ffi::cudnnBackendDescriptor_t> = ds.iter().map(|d| d.raw).collect();
        // SAFETY: raw.len() descriptors
        unsafe {
            self.set_raw(
                attr,
                Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                raw.len(),
                raw.as_ptr().cast(),
            )
        }
    }

    /// Device addresses (a variant pack's data pointers or workspace).
    pub fn set_ptrs(&mut self, attr: Attr, ps: &[*mut c_void]) -> Result<(), String> {
        // SAFETY: ps.len() pointers
        unsafe { self.set_raw(attr, Ty::CUDNN_TYPE_VOID_PTR, ps.len(), ps.as_ptr().cast()) }
    }

    /// Checks the attributes set and makes the descriptor usable; an error names what failed.
    pub fn finalize(self) -> Result<Desc, String> {
        // SAFETY: a descriptor of ours
        let s = unsafe { ffi::cudnnBackendFinalize(self.raw) };
        ok(|| format!("finalize a {:?}", self.kind), s)?;
        Ok(self)
    }

    /// Reads up to `room` elements of type `ty` of attribute `attr` into `out`: how many the
    /// attribute holds (`room` 0 and a null `out`: only counts them).
    ///
    /// # Safety
    /// `out` must have room for `room` elements of the C type `ty` names.
    unsafe fn get_raw(
        &self,
        attr: Attr,
        ty: Ty,
        room: usize,
        out: *mut c_void,
    ) -> Result<usize, String> {
        let mut n = 0i64;
        let s = ffi::cudnnBackendGetAttribute(self.raw, attr, ty, room as i64, &mut n, out);
        ok(|| format!("read {attr:?} of a {:?}", self.kind), s)?;
        Ok(n.max(0) as usize)
    }

    /// An i64 attribute of a finalized descriptor (a plan's workspace bytes, an engine's index).
    pub fn get_i64(&self, attr: Attr) -> Result<i64, String> {
        let mut v = 0i64;
        // SAFETY: room for one i64
        unsafe { self.get_raw(attr, Ty::CUDNN_TYPE_INT64, 1, (&mut v as *mut i64).cast())? };
        Ok(v)
    }

    /// Up to `max` descriptors of `kind` that attribute `attr` holds (heuristics' engine
    /// configurations, a configuration's engine), in order.
    pub fn get_descs(&self, attr: Attr, kind: Kind, max: usize) -> Result<Vec<Desc>, String> {
        let mut out = (0..max)
            .map(|_| Desc::new(kind))
            .collect::<Result<Vec<_>, _>>()?;
        let mut raw: Vec<ffi::cudnnBackendDescriptor_t> = out.iter().map(|d| d.raw).collect();
        let ty = Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR;
        // SAFETY: `raw` holds `max` descriptors of the kind cuDNN fills in
        let n = unsafe { self.get_raw(attr, ty, max, raw.as_mut_ptr().cast())? };
        out.truncate(n.min(max));
        Ok(out)
    }

    /// How many descriptors attribute `attr` holds (a heuristics' results).
    pub fn count_descs(&self, attr: Attr) -> Result<usize, String> {
        let ty = Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR;
        // SAFETY: a count only: no elements are written
        unsafe { self.get_raw(attr, ty, 0, std::ptr::null_mut()) }
    }

    /// An engine's numerical notes (tensor cores, nondeterminism, ...), as their C values: a
    /// newer cuDNN may name values this build's enums do not know.
    pub fn numerical_notes(&self) -> Result<Vec<u32>, String> {
        self.notes(
            Attr::CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
            Ty::CUDNN_TYPE_NUMERICAL_NOTE,
        )
    }

    /// An engine's behaviour notes (runtime compilation, ...), as their C values.
    pub fn behavior_notes(&self) -> Result<Vec<u32>, String> {
        self.notes(
            Attr::CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE,
            Ty::CUDNN_TYPE_BEHAVIOR_NOTE,
        )
    }

    /// Notes of `attr`, of `ty`: a C enum of 32 bits (the two callers).
    fn notes(&self, attr: Attr, ty: Ty) -> Result<Vec<u32>, String> {
        // (more room than any cuDNN 9 has notes of a kind)
        const ROOM: usize = 32;
        let mut v = [0u32; ROOM];
        // SAFETY: room for ROOM values of `ty`, a 32-bit C enum
        let n = unsafe { self.get_raw(attr, ty, ROOM, v.as_mut_ptr().cast())? };
        Ok(v[..n.min(ROOM)].to_vec())
    }

    /// Runs finalized plan `self` on the tensors and workspace of finalized variant pack
    /// `pack`, on `handle`'s stream.
    ///
    /// # Safety
    /// The pack's pointers must address live device buffers of the shapes, types and
    /// alignments the plan's tensors were described with, and its workspace at least the
    /// plan's workspace size.
    pub unsafe fn execute(&self, handle: ffi::cudnnHandle_t, pack: &Desc) -> Result<(), String> {
        let s = ffi::cudnnBackendExecute(handle, self.raw, pack.raw);
        ok(|| "run a convolution plan".to_string(), s)
    }
}
