//! NCCL around cudarc's `Comm`: errors that say what NCCL said, and a teardown that cannot turn
//! a failure into a panic (cudarc's `Comm::drop` panics when the abort fails, as it does after a
//! sticky CUDA error, which would hide the real cause or abort the process mid-unwind).

use std::ffi::CStr;
use std::panic::{catch_unwind, AssertUnwindSafe};

use cudarc::nccl::result::NcclError;
use cudarc::nccl::sys;
use cudarc::nccl::Comm;

/// `ncclInvalidUsage (code 5): invalid usage; last error: <NCCL's own words>`.
pub fn describe(e: &NcclError) -> String {
    let code = e.0;
    // SAFETY: NCCL is loaded (an NcclError came from it); both return static or thread-local
    // NUL-terminated strings, or NULL.
    let text = |p: *const std::ffi::c_char| {
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    let what = text(unsafe { sys::ncclGetErrorString(code) }).unwrap_or_default();
    let last = text(unsafe { sys::ncclGetLastError(std::ptr::null_mut()) })
        .filter(|s| !s.is_empty())
        .map(|s| format!("; last error: {s}"))
        .unwrap_or_default();
    format!("{code:?} (code {}): {what}{last}", code as i32)
}

/// Ends a communicator (NCCL abort), ignoring a failure: after one, nothing more can be done
/// with it. While the thread is already panicking, it is leaked instead (a second panic would
/// abort the process).
pub fn close(comm: Comm) {
    if std::thread::panicking() {
        std::mem::forget(comm);
    } else {
        let _ = catch_unwind(AssertUnwindSafe(move || drop(comm)));
    }
}

/// `close` for cuBLAS handles, whose drop panics after a sticky CUDA error.
pub fn close_blas(blas: cudarc::cublas::CudaBlas) {
    if std::thread::panicking() {
        std::mem::forget(blas);
    } else {
        let _ = catch_unwind(AssertUnwindSafe(move || drop(blas)));
    }
}
