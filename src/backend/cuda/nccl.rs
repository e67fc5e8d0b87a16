//! NCCL communicators that can always be given up on: joined non-blocking
//! (`ncclCommInitRankConfig` with `blocking = 0`), every call that NCCL leaves in progress polled
//! against a time limit and the host's abort flag, and ended with `ncclCommAbort`, which never
//! panics. cudarc's `Comm::from_rank` blocks in `ncclCommInitRank` with no timeout (a rank that
//! failed before joining freezes the others there), and its drop panics when the abort fails, as
//! it does after a sticky CUDA error.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaSlice, CudaStream, CudaViewMut, DevicePtrMut};
use cudarc::nccl::sys::{self, ncclResult_t};
use cudarc::nccl::Id;

use super::elem::bf16;

/// `ncclInvalidUsage (code 5): invalid usage; last error: <NCCL's own words>`.
pub fn describe(code: ncclResult_t) -> String {
    // SAFETY: NCCL is loaded (a result came from it); both return static or thread-local
    // NUL-terminated strings, or NULL.
    let text = |p: *const c_char| {
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    let what = text(unsafe { sys::ncclGetErrorString(code) }).unwrap_or_default();
    let last = text(unsafe { sys::ncclGetLastError(std::ptr::null_mut()) })
        .filter(|s| !s.is_empty())
        .map(|s| format!("; last error: {s}"))
        .unwrap_or_default();
    format!("{code:?} (code {}): {what}{last}", code as i32)
}

/// How long a call may stay in progress, and what ends the wait early (a peer's failure, seen
/// through the host collective).
pub struct Patience<'a> {
    pub limit: Duration,
    pub abort: &'a dyn Fn() -> Option<String>,
}

impl Patience<'static> {
    /// A limit and nothing else to watch (selftest, bench: every rank is a thread of this call).
    pub fn only(limit: Duration) -> Patience<'static> {
        Patience {
            limit,
            abort: &|| None,
        }
    }
}

/// NCCL's `ncclConfig_t` as of 2.17 (`NCCL_CONFIG_INITIALIZER` with `blocking = 0`): later
/// NCCLs read the fields its `version` says it has and default the rest.
#[repr(C)]
struct ConfigV2_17 {
    size: usize,
    magic: c_uint,
    version: c_uint,
    blocking: c_int,
    cga_cluster_size: c_int,
    min_ctas: c_int,
    max_ctas: c_int,
    net_name: *const c_char,
    split_share: c_int,
}

/// `NCCL_CONFIG_UNDEF_INT`: "let NCCL choose".
const UNDEF: c_int = c_int::MIN;

impl ConfigV2_17 {
    fn non_blocking() -> Self {
        ConfigV2_17 {
            size: std::mem::size_of::<Self>(),
            magic: 0xcafe_beef,
            version: 2 * 10_000 + 17 * 100,
            blocking: 0,
            cga_cluster_size: UNDEF,
            min_ctas: UNDEF,
            max_ctas: UNDEF,
            net_name: std::ptr::null(),
            split_share: UNDEF,
        }
    }
}

/// One rank's membership of an NCCL group, on one stream. Dropping it aborts the group's
/// communicator on this rank (what a hung or failed peer leaves as the only way out).
pub struct Communicator {
    raw: sys::ncclComm_t,
    stream: Arc<CudaStream>,
}

impl Communicator {
    /// Joins the group `id` as `rank` of `world`. Every rank must call this concurrently: it
    /// returns once all have, or with an error once `patience` runs out (a peer that never came).
    pub fn join(
        stream: &Arc<CudaStream>,
        rank: usize,
        world: usize,
        id: &Id,
        patience: &Patience,
    ) -> Result<Communicator, String> {
        let (Ok(n), Ok(r)) = (c_int::try_from(world), c_int::try_from(rank)) else {
            return Err(format!(
                "rank {rank} of {world} is beyond what NCCL can number"
            ));
        };
        // NCCL joins on the thread's current device
        stream
            .context()
            .bind_to_thread()
            .map_err(|e| format!("make the GPU current: {e:?}"))?;
        let mut config = ConfigV2_17::non_blocking();
        let mut raw: sys::ncclComm_t = std::ptr::null_mut();
        let unique = sys::ncclUniqueId {
            internal: *id.internal(),
        };
        // SAFETY: `raw` and `config` outlive the call; the config is a valid 2.17 config (NCCL
        // reads `size` and `version` before any other field).
        let started = unsafe {
            sys::ncclCommInitRankConfig(
                &mut raw,
                n,
                unique,
                r,
                (&mut config as *mut ConfigV2_17).cast(),
            )
        };
        if raw.is_null() {
            return Err(describe(started));
        }
        let comm = Communicator {
            raw,
            stream: stream.clone(),
        };
        comm.settle(started, patience)
            .map_err(|e| format!("{e} (joining as rank {rank} of {world})"))?;
        Ok(comm)
    }

    /// Sums `buf` over every rank in place, queued on the stream. Returns once queued (the sum
    /// itself finishes on the GPU later; wait for an event recorded after it).
    pub fn all_reduce_sum(
        &self,
        buf: &mut CudaSlice<f32>,
        patience: &Patience,
    ) -> Result<(), String> {
        let len = buf.len();
        let (ptr, _record) = buf.device_ptr_mut(&self.stream);
        // SAFETY: `ptr` addresses `len` floats on this communicator's device, alive for the call
        // and (owned by the caller, who waits on the stream before touching it) for the sum.
        let started = unsafe {
            sys::ncclAllReduce(
                ptr as *const c_void,
                ptr as *mut c_void,
                len,
                sys::ncclDataType_t::ncclFloat32,
                sys::ncclRedOp_t::ncclSum,
                self.raw,
                self.stream.cu_stream() as _,
            )
        };
        self.settle(started, patience)
    }

    /// `--grad-dtype bf16`: sums `wire` (the gradients in bf16) and `metrics` (fp32) over every
    /// rank in place, as one group (one launch), queued on the stream as `all_reduce_sum`.
    pub fn all_reduce_bf16_and_f32(
        &self,
        wire: &mut CudaViewMut<'_, bf16>,
        metrics: &mut CudaViewMut<'_, f32>,
        patience: &Patience,
    ) -> Result<(), String> {
        let (nw, nm) = (wire.len(), metrics.len());
        let (pw, _rw) = wire.device_ptr_mut(&self.stream);
        let (pm, _rm) = metrics.device_ptr_mut(&self.stream);
        let stream = self.stream.cu_stream() as _;
        // SAFETY: NCCL's group calls on one thread; both pointers address the stated element
        // counts on this communicator's device, alive for the call and (owned by the caller, who
        // waits on the stream before touching them) for the sums.
        let started = unsafe {
            let mut r = sys::ncclGroupStart();
            for (ptr, len, ty) in [
                (pw, nw, sys::ncclDataType_t::ncclBfloat16),
                (pm, nm, sys::ncclDataType_t::ncclFloat32),
            ] {
                if matches!(r, ncclResult_t::ncclSuccess | ncclResult_t::ncclInProgress) {
                    r = sys::ncclAllReduce(
                        ptr as *const c_void,
                        ptr as *mut c_void,
                        len,
                        ty,
                        sys::ncclRedOp_t::ncclSum,
                        self.raw,
                        stream,
                    );
                }
            }
            // (ended whatever happened inside, so the group state is not left open)
            let ended = sys::ncclGroupEnd();
            match r {
                ncclResult_t::ncclSuccess | ncclResult_t::ncclInProgress => ended,
                e => e,
            }
        };
        self.settle(started, patience)
    }

    /// Waits while NCCL reports the last call in progress (a non-blocking communicator's calls
    /// may return before they are done: joining, connecting to peers on the first collective).
    fn settle(&self, started: ncclResult_t, patience: &Patience) -> Result<(), String> {
        match started {
            ncclResult_t::ncclSuccess => return Ok(()),
            ncclResult_t::ncclInProgress => {}
            e => return Err(describe(e)),
        }
        let t0 = Instant::now();
        loop {
            let mut state = ncclResult_t::ncclInProgress;
            // SAFETY: `raw` is a live communicator; `state` outlives the call.
            let asked = unsafe { sys::ncclCommGetAsyncError(self.raw, &mut state) };
            if asked != ncclResult_t::ncclSuccess {
                return Err(describe(asked));
            }
            match state {
                ncclResult_t::ncclSuccess => return Ok(()),
                ncclResult_t::ncclInProgress => {}
                e => return Err(describe(e)),
            }
            if let Some(reason) = (patience.abort)() {
                return Err(reason);
            }
            if t0.elapsed() > patience.limit {
                return Err(format!(
                    "NCCL had not finished after {:.0} s (a peer that never joined or hung); set NCCL_DEBUG=INFO to see why",
                    patience.limit.as_secs_f64()
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        // SAFETY: `raw` came from ncclCommInitRankConfig and is aborted once, here. A failure
        // (after a sticky CUDA error, say) leaves nothing more to do with it.
        let _ = unsafe { sys::ncclCommAbort(self.raw) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NCCL 2.17's struct: 7 ints, a pointer and the size, as `nccl.h` lays them out.
    #[test]
    fn config_has_the_layout_of_nccl_2_17() {
        let c = ConfigV2_17::non_blocking();
        assert_eq!(c.size, 48);
        assert_eq!(std::mem::offset_of!(ConfigV2_17, net_name), 32);
        assert_eq!(std::mem::offset_of!(ConfigV2_17, split_share), 40);
        assert_eq!((c.magic, c.version, c.blocking), (0xcafebeef, 21700, 0));
    }
}
