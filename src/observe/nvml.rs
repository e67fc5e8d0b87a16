//! GPU telemetry through NVML (`libnvidia-ml.so.1`, part of the NVIDIA driver), loaded at run
//! time with dlopen: no NVML, no GPU, or a query a device does not support gives `None` for that
//! value (shown as n/a), never 0 and never a panic.
//!
//! GPUs are matched to CUDA ordinals by PCI bus id, so `CUDA_VISIBLE_DEVICES` (which renumbers
//! CUDA devices but not NVML's) does not mix them up.

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CString};

use crate::observe::telemetry::DeviceSample;

type Ret = c_int;
type Dev = *mut c_void;
const SUCCESS: Ret = 0;
const TEMPERATURE_GPU: c_int = 0;
const CLOCK_SM: c_int = 1;
const PCIE_TX: c_int = 0;
const PCIE_RX: c_int = 1;

#[repr(C)]
#[derive(Default)]
struct Utilization {
    gpu: c_uint,
    memory: c_uint,
}

#[repr(C)]
#[derive(Default)]
struct Memory {
    total: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

/// The NVML entry points used here.
struct Api {
    by_pci: unsafe extern "C" fn(*const c_char, *mut Dev) -> Ret,
    utilization: unsafe extern "C" fn(Dev, *mut Utilization) -> Ret,
    memory: unsafe extern "C" fn(Dev, *mut Memory) -> Ret,
    temperature: unsafe extern "C" fn(Dev, c_int, *mut c_uint) -> Ret,
    power: unsafe extern "C" fn(Dev, *mut c_uint) -> Ret,
    power_limit: unsafe extern "C" fn(Dev, *mut c_uint) -> Ret,
    clock: unsafe extern "C" fn(Dev, c_int, *mut c_uint) -> Ret,
    max_clock: unsafe extern "C" fn(Dev, c_int, *mut c_uint) -> Ret,
    throttle: unsafe extern "C" fn(Dev, *mut c_ulonglong) -> Ret,
    pcie: unsafe extern "C" fn(Dev, c_int, *mut c_uint) -> Ret,
}

/// NVML, opened, with a handle per watched GPU (None where NVML does not know it).
pub struct Nvml {
    api: Api,
    devices: Vec<Option<Dev>>,
}

// SAFETY: NVML is thread-safe (documented), and the handles are plain identifiers.
unsafe impl Send for Nvml {}

/// Looks up `name` in `lib` as a function pointer of type `T`.
///
/// # Safety
/// `T` must be the C signature of the symbol.
unsafe fn symbol<T: Copy>(lib: *mut c_void, name: &str) -> Option<T> {
    let cname = CString::new(name).ok()?;
    let p = libc::dlsym(lib, cname.as_ptr());
    // SAFETY (caller): a non-null symbol of this name has signature T; fn pointers and data
    // pointers have the same size on every platform NVML supports.
    (!p.is_null()).then(|| std::mem::transmute_copy::<*mut c_void, T>(&p))
}

impl Nvml {
    /// Opens NVML for the GPUs with these PCI bus ids ("0000:3b:00.0"), in order; why not, when
    /// it cannot be opened.
    pub fn open(pci_bus_ids: &[String]) -> Result<Nvml, String> {
        let name = CString::new("libnvidia-ml.so.1").expect("no NUL");
        // SAFETY: dlopen with a valid C string; the library stays loaded for the process.
        let lib = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if lib.is_null() {
            return Err("NVML (libnvidia-ml.so.1, part of the NVIDIA driver) was not found".into());
        }
        // SAFETY: each name below is looked up with its documented C signature.
        let api = unsafe {
            let init: Option<unsafe extern "C" fn() -> Ret> = symbol(lib, "nvmlInit_v2");
            match init {
                Some(f) if f() == SUCCESS => {}
                Some(_) => return Err("NVML did not initialise (driver/library mismatch?)".into()),
                None => return Err("NVML has no nvmlInit_v2 (driver too old)".into()),
            }
            let need = |n: &str| format!("NVML lacks {n} (driver too old)");
            Api {
                by_pci: symbol(lib, "nvmlDeviceGetHandleByPciBusId_v2")
                    .ok_or_else(|| need("nvmlDeviceGetHandleByPciBusId_v2"))?,
                utilization: symbol(lib, "nvmlDeviceGetUtilizationRates")
                    .ok_or_else(|| need("nvmlDeviceGetUtilizationRates"))?,
                memory: symbol(lib, "nvmlDeviceGetMemoryInfo")
                    .ok_or_else(|| need("nvmlDeviceGetMemoryInfo"))?,
                temperature: symbol(lib, "nvmlDeviceGetTemperature")
                    .ok_or_else(|| need("nvmlDeviceGetTemperature"))?,
                power: symbol(lib, "nvmlDeviceGetPowerUsage")
                    .ok_or_else(|| need("nvmlDeviceGetPowerUsage"))?,
                power_limit: symbol(lib, "nvmlDeviceGetEnforcedPowerLimit")
                    .ok_or_else(|| need("nvmlDeviceGetEnforcedPowerLimit"))?,
                clock: symbol(lib, "nvmlDeviceGetClockInfo")
                    .ok_or_else(|| need("nvmlDeviceGetClockInfo"))?,
                max_clock: symbol(lib, "nvmlDeviceGetMaxClockInfo")
                    .ok_or_else(|| need("nvmlDeviceGetMaxClockInfo"))?,
                throttle: symbol(lib, "nvmlDeviceGetCurrentClocksThrottleReasons")
                    .ok_or_else(|| need("nvmlDeviceGetCurrentClocksThrottleReasons"))?,
                pcie: symbol(lib, "nvmlDeviceGetPcieThroughput")
                    .ok_or_else(|| need("nvmlDeviceGetPcieThroughput"))?,
            }
        };
        let devices = pci_bus_ids
            .iter()
            .map(|id| {
                let c = CString::new(id.as_str()).ok()?;
                let mut dev: Dev = std::ptr::null_mut();
                // SAFETY: valid C string and out-pointer.
                (unsafe { (api.by_pci)(c.as_ptr(), &mut dev) } == SUCCESS).then_some(dev)
            })
            .collect();
        Ok(Nvml { api, devices })
    }

    /// One sample per watched GPU; each value None where the query fails or is unsupported.
    pub fn sample(&self) -> Vec<DeviceSample> {
        self.devices
            .iter()
            .map(|d| d.map(|d| self.read(d)).unwrap_or_default())
            .collect()
    }

    fn read(&self, d: Dev) -> DeviceSample {
        let a = &self.api;
        let ok = |r: Ret| r == SUCCESS;
        let uint = |f: &dyn Fn(*mut c_uint) -> Ret| {
            let mut v: c_uint = 0;
            ok(f(&mut v)).then_some(v)
        };
        let mut u = Utilization::default();
        let mut m = Memory::default();
        let mut reasons: c_ulonglong = 0;
        // SAFETY: `d` came from NVML; every out-pointer is valid for the call.
        unsafe {
            let util_ok = ok((a.utilization)(d, &mut u));
            let mem_ok = ok((a.memory)(d, &mut m));
            DeviceSample {
                util: util_ok.then_some(u.gpu as f32 / 100.0),
                mem_access: util_ok.then_some(u.memory as f32 / 100.0),
                mem_used: mem_ok.then_some(m.used),
                mem_total: mem_ok.then_some(m.total),
                temp_c: uint(&|p| (a.temperature)(d, TEMPERATURE_GPU, p)).map(|v| v as f32),
                power_w: uint(&|p| (a.power)(d, p)).map(|mw| mw as f32 / 1000.0),
                power_limit_w: uint(&|p| (a.power_limit)(d, p)).map(|mw| mw as f32 / 1000.0),
                sm_clock_mhz: uint(&|p| (a.clock)(d, CLOCK_SM, p)),
                sm_clock_max_mhz: uint(&|p| (a.max_clock)(d, CLOCK_SM, p)),
                throttle_reasons: ok((a.throttle)(d, &mut reasons)).then_some(reasons),
                pcie_rx_kbs: uint(&|p| (a.pcie)(d, PCIE_RX, p)),
                pcie_tx_kbs: uint(&|p| (a.pcie)(d, PCIE_TX, p)),
            }
        }
    }
}

/// NVML's throttle-reason bits that mean the GPU is slowed by something other than being idle
/// or by the application's own clock settings: power cap, thermal slowdown (software or
/// hardware), hardware slowdown, power brake, sync boost.
pub const THROTTLED: u64 = 0x4 | 0x8 | 0x20 | 0x40 | 0x80 | 0x10;

/// Names of the throttle-reason bits set in `reasons` that count as throttling.
pub fn throttle_names(reasons: u64) -> Vec<&'static str> {
    [
        (0x4, "power cap"),
        (0x8, "hardware slowdown"),
        (0x10, "sync boost"),
        (0x20, "thermal (software)"),
        (0x40, "thermal (hardware)"),
        (0x80, "power brake"),
    ]
    .iter()
    .filter(|(bit, _)| reasons & bit != 0)
    .map(|&(_, name)| name)
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_nvml_is_a_reason_not_a_panic() {
        // This machine has no NVIDIA driver; where one exists, opening with no GPUs is fine too.
        match Nvml::open(&["0000:00:00.0".to_string()]) {
            Err(why) => assert!(why.contains("NVML"), "{why}"),
            Ok(n) => assert_eq!(n.sample().len(), 1),
        }
    }

    #[test]
    fn throttle_bits_are_named() {
        assert_eq!(
            throttle_names(0x1 | 0x4 | 0x40),
            ["power cap", "thermal (hardware)"]
        );
        assert!(
            throttle_names(0x1 | 0x2).is_empty(),
            "idle and app clocks are not throttling"
        );
        assert_eq!(throttle_names(THROTTLED).len(), 6);
    }
}
