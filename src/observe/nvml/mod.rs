//! GPU telemetry through NVML (`libnvidia-ml.so.1`, part of the NVIDIA driver), by way of the
//! nvml-wrapper crate, which loads the library at run time: no NVML or no driver makes
//! [`Nvml::open`] an `Err(reason)`, and each query stands alone, so a function this driver lacks
//! or a query a device does not support gives `None` for that value only (shown as n/a), never 0
//! and never a panic.
//!
//! GPUs are matched to CUDA ordinals by PCI bus id, so `CUDA_VISIBLE_DEVICES` (which renumbers
//! CUDA devices but not NVML's) does not mix them up.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{Clock, PcieUtilCounter, TemperatureSensor};
use nvml_wrapper::error::{nvml_try, NvmlError};
use nvml_wrapper::Device;
use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlMemory_t, nvmlReturn_t};

use crate::observe::sample::DeviceSample;
use gpm::Gpm;

mod gpm;

/// How often PCIe throughput is read; see [`Nvml::sample`].
pub const PCIE_EVERY: Duration = Duration::from_secs(5);

/// An NVML device handle. It stays valid while the NVML session that made it is open.
#[derive(Clone, Copy)]
struct Handle(nvmlDevice_t);

// SAFETY: NVML is thread-safe (documented), and a handle is a plain identifier that is only
// used together with the `nvml_wrapper::Nvml` owned by the same `Nvml`.
unsafe impl Send for Handle {}

/// PCIe (rx, tx) KB/s of each watched GPU.
type Pcie = Vec<(Option<u32>, Option<u32>)>;

/// NVML, opened, with a handle per watched GPU (None where NVML does not know it).
pub struct Nvml {
    nvml: nvml_wrapper::Nvml,
    devices: Vec<Option<Handle>>,
    pcie: Mutex<Every<Pcie>>,
    gpm: Mutex<Vec<Gpm>>,
}

impl Nvml {
    /// Opens NVML for the GPUs with these PCI bus ids ("0000:3b:00.0"), in order; why not, when
    /// it cannot be opened. A bus id NVML does not know (or that does not parse) gives a GPU
    /// whose every value is `None`.
    pub fn open(pci_bus_ids: &[String]) -> Result<Nvml, String> {
        // nvml-wrapper returns every failure here as an error (libloading's dlopen, a missing
        // nvmlInit_v2, nvmlInit_v2's own code); it loads the other symbols one by one and a
        // missing one only fails the call that needs it.
        let nvml = nvml_wrapper::Nvml::init().map_err(why_not)?;
        if nvml.lib().nvmlShutdown.is_err() {
            // nvml-wrapper's Drop would panic calling it: keep that library loaded, unused
            std::mem::forget(nvml);
            return Err(
                "NVML (libnvidia-ml.so.1) lacks nvmlShutdown: not the NVIDIA driver's".into(),
            );
        }
        let mut listed = None;
        let devices: Vec<Option<Handle>> = pci_bus_ids
            .iter()
            .map(|id| find(&nvml, BusId::parse(id)?, &mut listed))
            .collect();
        // SAFETY (`Device::new`): each handle came from this `nvml`
        let gpm = (devices.iter())
            .map(|h: &Option<Handle>| match h {
                Some(h) => Gpm::for_device(&unsafe { Device::new(h.0, &nvml) }),
                None => Gpm::Without,
            })
            .collect();
        Ok(Nvml {
            nvml,
            devices,
            pcie: Mutex::new(Every::new(PCIE_EVERY)),
            gpm: Mutex::new(gpm),
        })
    }

    /// One sample per watched GPU; each value None where the query fails or is unsupported.
    ///
    /// PCIe throughput is read at most once every [`PCIE_EVERY`] (the first sample included)
    /// and the last values are reused in between: NVML measures each counter over 20 ms inside
    /// the call, so reading rx and tx every sample would hold the sampler thread ~40 ms per GPU.
    pub fn sample(&self) -> Vec<DeviceSample> {
        // SAFETY: each handle came from `self.nvml`, which is still open.
        let devices: Vec<Option<Device<'_>>> = self
            .devices
            .iter()
            .map(|h| h.map(|h| unsafe { Device::new(h.0, &self.nvml) }))
            .collect();
        let pcie = self
            .pcie
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(Instant::now(), || {
                devices
                    .iter()
                    .map(|d| d.as_ref().map_or((None, None), read_pcie))
                    .collect()
            });
        let mut gpm = self.gpm.lock().unwrap_or_else(PoisonError::into_inner);
        devices
            .iter()
            .zip(pcie)
            .zip(gpm.iter_mut())
            .map(|((d, pcie), g)| {
                let Some(d) = d.as_ref() else {
                    return DeviceSample::default();
                };
                let (sm_active, tensor_active) = g.metrics(&self.nvml, d);
                DeviceSample {
                    sm_active,
                    tensor_active,
                    ..read(d, pcie)
                }
            })
            .collect()
    }
}

impl Drop for Nvml {
    /// The GPM samples go before NVML closes.
    fn drop(&mut self) {
        let held = std::mem::take(self.gpm.get_mut().unwrap_or_else(PoisonError::into_inner));
        for g in held {
            g.free(&self.nvml);
        }
    }
}

/// What dcgm-exporter labels a GPU with, from NVML.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuIdentity {
    /// NVML's index (dcgm-exporter's `gpu`), which ignores `CUDA_VISIBLE_DEVICES`.
    pub index: Option<u32>,
    pub uuid: Option<String>,
    /// The N of `/dev/nvidiaN` (dcgm-exporter's `device`).
    pub minor: Option<u32>,
}

impl Nvml {
    /// Each watched GPU's identity; its values `None` where NVML cannot say.
    pub fn identities(&self) -> Vec<GpuIdentity> {
        self.devices
            .iter()
            .map(|h| {
                // SAFETY: each handle came from `self.nvml`, which is still open.
                let Some(d) = h.map(|h| unsafe { Device::new(h.0, &self.nvml) }) else {
                    return GpuIdentity::default();
                };
                GpuIdentity {
                    index: d.index().ok(),
                    uuid: d.uuid().ok(),
                    minor: d.minor_number().ok(),
                }
            })
            .collect()
    }
}

/// Why NVML did not open, naming the library and the driver whatever went wrong.
fn why_not(e: NvmlError) -> String {
    match e {
        NvmlError::LibloadingError(e) => {
            format!("NVML (libnvidia-ml.so.1, part of the NVIDIA driver) was not found: {e}")
        }
        NvmlError::FailedToLoadSymbol(e) => {
            format!("NVML (libnvidia-ml.so.1) has no nvmlInit_v2: NVIDIA driver too old ({e})")
        }
        NvmlError::DriverNotLoaded => {
            "NVML (libnvidia-ml.so.1) is installed but the NVIDIA driver is not loaded".into()
        }
        NvmlError::NoPermission => {
            "NVML (libnvidia-ml.so.1) has no permission to talk to the NVIDIA driver".into()
        }
        NvmlError::LibRmVersionMismatch => "NVML (libnvidia-ml.so.1) does not match the loaded \
            NVIDIA driver (updated without a reboot?)"
            .into(),
        e => format!("NVML (libnvidia-ml.so.1, NVIDIA driver) did not initialise: {e}"),
    }
}

/// The handle of the GPU at `want`: NVML's lookup by bus id (given in NVML's own format), else
/// NVML's devices listed once (into `listed`) and compared by parsed bus id.
fn find(
    nvml: &nvml_wrapper::Nvml,
    want: BusId,
    listed: &mut Option<Vec<(BusId, Handle)>>,
) -> Option<Handle> {
    // SAFETY (both `handle` calls): the handle is kept only beside this `nvml`.
    if let Ok(d) = nvml.device_by_pci_bus_id(want.to_nvml()) {
        return Some(Handle(unsafe { d.handle() }));
    }
    let listed = listed.get_or_insert_with(|| {
        (0..nvml.device_count().unwrap_or(0))
            .filter_map(|i| {
                let d = nvml.device_by_index(i).ok()?;
                let id = BusId::parse(&d.pci_info().ok()?.bus_id)?;
                Some((id, Handle(unsafe { d.handle() })))
            })
            .collect()
    });
    listed.iter().find(|(id, _)| *id == want).map(|(_, h)| *h)
}

/// Everything but PCIe throughput, each query on its own.
fn read(d: &Device<'_>, (pcie_rx_kbs, pcie_tx_kbs): (Option<u32>, Option<u32>)) -> DeviceSample {
    let watts = |mw: u32| mw as f32 / 1000.0;
    let util = d.utilization_rates().ok();
    let mem = memory(d);
    DeviceSample {
        util: util.as_ref().map(|u| u.gpu as f32 / 100.0),
        mem_access: util.as_ref().map(|u| u.memory as f32 / 100.0),
        mem_used: mem.map(|m| m.0),
        mem_total: mem.map(|m| m.1),
        temp_c: d.temperature(TemperatureSensor::Gpu).ok().map(|t| t as f32),
        power_w: d.power_usage().ok().map(watts),
        power_limit_w: d.enforced_power_limit().ok().map(watts),
        sm_clock_mhz: d.clock_info(Clock::SM).ok(),
        sm_clock_max_mhz: d.max_clock_info(Clock::SM).ok(),
        throttle_reasons: clock_event_reasons(d),
        pcie_rx_kbs,
        pcie_tx_kbs,
        sm_active: None,
        tensor_active: None,
    }
}

/// PCIe (rx, tx) KB/s; ~20 ms each.
fn read_pcie(d: &Device<'_>) -> (Option<u32>, Option<u32>) {
    (
        d.pcie_throughput(PcieUtilCounter::Receive).ok(),
        d.pcie_throughput(PcieUtilCounter::Send).ok(),
    )
}

/// Memory (used, total) in bytes: `nvmlDeviceGetMemoryInfo_v2` (nvml-wrapper's `memory_info`,
/// whose `used` leaves out driver-reserved memory, as nvidia-smi shows it), else the v1 call.
fn memory(d: &Device<'_>) -> Option<(u64, u64)> {
    if let Ok(m) = d.memory_info() {
        return Some((m.used, m.total));
    }
    let v1 = d.nvml().lib().nvmlDeviceGetMemoryInfo.as_ref().ok();
    let zero = nvmlMemory_t {
        total: 0,
        free: 0,
        used: 0,
    };
    // SAFETY: the handle is live; nvmlDeviceGetMemoryInfo writes one nvmlMemory_t.
    unsafe { get(v1, d.handle(), zero) }.map(|m| (m.used, m.total))
}

/// The clock event ("throttle") reason bits: `nvmlDeviceGetCurrentClocksEventReasons` (NVML
/// 12.2+; nvml-wrapper has it only in its sys bindings), else the deprecated
/// `nvmlDeviceGetCurrentClocksThrottleReasons` (`current_throttle_reasons`). Same bits.
fn clock_event_reasons(d: &Device<'_>) -> Option<u64> {
    let current = d
        .nvml()
        .lib()
        .nvmlDeviceGetCurrentClocksEventReasons
        .as_ref()
        .ok();
    // SAFETY: the handle is live; the call writes one unsigned long long.
    unsafe { get(current, d.handle(), 0) }
        .or_else(|| d.current_throttle_reasons().ok().map(|r| r.bits()))
}

/// `f(dev, &mut out)` where `f` was loaded: `out` where NVML says it succeeded.
///
/// # Safety
/// `dev` is a live handle of the NVML `f` came from, and `f` writes at most one `T`.
unsafe fn get<T>(
    f: Option<&unsafe extern "C" fn(nvmlDevice_t, *mut T) -> nvmlReturn_t>,
    dev: nvmlDevice_t,
    mut out: T,
) -> Option<T> {
    nvml_try((*f?)(dev, &mut out)).ok().map(|()| out)
}

/// A value read at most once per `period`, the last one reused in between.
struct Every<T> {
    period: Duration,
    last: Option<(Instant, T)>,
}

impl<T: Clone> Every<T> {
    fn new(period: Duration) -> Every<T> {
        Every { period, last: None }
    }

    /// The value at `now`: `read()` on the first call and once `period` has passed since the
    /// last read, else the last value.
    fn get(&mut self, now: Instant, read: impl FnOnce() -> T) -> T {
        match &self.last {
            Some((at, v)) if now.saturating_duration_since(*at) < self.period => v.clone(),
            _ => {
                let v = read();
                self.last = Some((now, v.clone()));
                v
            }
        }
    }
}

/// A PCI address, compared by value whatever the text looked like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct BusId {
    domain: u32,
    bus: u8,
    device: u8,
    function: u8,
}

impl BusId {
    /// Parses `[domain:]bus:device[.function]` in hex, as CUDA discovery ("00000000:3b:00.0",
    /// lower case), NVML ("00000000:3B:00.0") or lspci ("3b:00.0") write it: any case,
    /// any domain width (none: 0), function 0 when left out.
    fn parse(s: &str) -> Option<BusId> {
        let s = s.trim();
        let (rest, function) = match s.split_once('.') {
            Some((rest, f)) => (rest, u8::from_str_radix(f, 16).ok()?),
            None => (s, 0),
        };
        let hex =
            |t: &str| (!t.is_empty() && t.len() <= 8).then(|| u32::from_str_radix(t, 16).ok())?;
        let byte = |t: &str| u8::try_from(hex(t)?).ok();
        let parts: Vec<&str> = rest.split(':').collect();
        let (domain, bus, device) = match parts[..] {
            [d, b, v] => (hex(d)?, byte(b)?, byte(v)?),
            [b, v] => (0, byte(b)?, byte(v)?),
            _ => return None,
        };
        Some(BusId {
            domain,
            bus,
            device,
            function,
        })
    }

    /// NVML's own form, as `nvmlPciInfo_t.busId` has it: "00000000:3B:00.0".
    fn to_nvml(self) -> String {
        format!(
            "{:08X}:{:02X}:{:02X}.{:X}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// The reason bits that count as throttling, with their names: slowed by something other than
/// being idle or the application's own clock settings.
const THROTTLE_NAMES: [(ThrottleReasons, &str); 6] = [
    (ThrottleReasons::SW_POWER_CAP, "power cap"),
    (ThrottleReasons::HW_SLOWDOWN, "hardware slowdown"),
    (ThrottleReasons::SYNC_BOOST, "sync boost"),
    (ThrottleReasons::SW_THERMAL_SLOWDOWN, "thermal (software)"),
    (ThrottleReasons::HW_THERMAL_SLOWDOWN, "thermal (hardware)"),
    (ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN, "power brake"),
];

/// NVML's clock event (throttle) reason bits that mean the GPU is slowed by something other than
/// being idle or by the application's own clock settings: power cap, thermal slowdown (software
/// or hardware), hardware slowdown, power brake, sync boost.
pub const THROTTLED: u64 = ThrottleReasons::SW_POWER_CAP
    .union(ThrottleReasons::HW_SLOWDOWN)
    .union(ThrottleReasons::SYNC_BOOST)
    .union(ThrottleReasons::SW_THERMAL_SLOWDOWN)
    .union(ThrottleReasons::HW_THERMAL_SLOWDOWN)
    .union(ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN)
    .bits();

/// Names of the throttle-reason bits set in `reasons` that count as throttling.
pub fn throttle_names(reasons: u64) -> Vec<&'static str> {
    THROTTLE_NAMES
        .iter()
        .filter(|(bit, _)| reasons & bit.bits() != 0)
        .map(|&(_, name)| name)
        .collect()
}

/// The throttle-reason bits of `names` (as `throttle_names` writes them; unknown names are
/// ignored): a metrics file's `throttle` list read back.
pub fn throttle_bits<'a>(names: impl IntoIterator<Item = &'a str>) -> u64 {
    names
        .into_iter()
        .filter_map(|n| THROTTLE_NAMES.iter().find(|(_, name)| *name == n))
        .fold(0, |bits, (bit, _)| bits | bit.bits())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_nvml_is_a_reason_naming_the_library_and_driver_not_a_panic() {
        // This machine has no NVIDIA driver; where one exists, an unknown GPU reads all n/a.
        match Nvml::open(&["0000:ff:1f.7".to_string(), "not a bus id".to_string()]) {
            Err(why) => {
                assert!(why.contains("libnvidia-ml"), "{why}");
                assert!(why.contains("NVIDIA driver"), "{why}");
            }
            Ok(n) => assert_eq!(n.sample(), vec![DeviceSample::default(); 2]),
        }
        for e in [
            NvmlError::FailedToLoadSymbol("nvmlInit_v2".into()),
            NvmlError::DriverNotLoaded,
            NvmlError::NoPermission,
            NvmlError::LibRmVersionMismatch,
            NvmlError::Unknown,
        ] {
            let why = why_not(e);
            assert!(
                why.contains("libnvidia-ml") && why.contains("NVIDIA driver"),
                "{why}"
            );
        }
    }

    #[test]
    fn bus_ids_match_whatever_the_format() {
        let cuda = format!("{:08x}:{:02x}:{:02x}.0", 0, 0x3b, 0); // as discover.rs writes it
        let want = BusId::parse(&cuda).unwrap();
        for same in [
            "00000000:3B:00.0", // NVML's busId
            "0000:3B:00.0",     // NVML's busIdLegacy, cuDeviceGetPCIBusId
            "0000:3b:00.0",
            "0:3b:0.0",
            "3b:00.0", // lspci, no domain
            "0000:3b:00",
            " 00000000:3b:00.0 ",
        ] {
            assert_eq!(BusId::parse(same), Some(want), "{same}");
        }
        assert_eq!(want.to_nvml(), "00000000:3B:00.0");
        let other = BusId::parse(&format!("{:08x}:{:02x}:{:02x}.0", 1, 0xaf, 0x1f)).unwrap();
        assert_eq!(other.to_nvml(), "00000001:AF:1F.0");
        assert_ne!(other, want);
        assert_ne!(BusId::parse("0000:3b:00.1"), Some(want), "function counts");
        assert_ne!(BusId::parse("0001:3b:00.0"), Some(want), "domain counts");
        for bad in [
            "",
            "gpu0",
            "3b",
            "0000:3g:00.0",
            "0000:3b:100.0",
            "1:2:3:4.0",
            "::.0",
        ] {
            assert_eq!(BusId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn pcie_is_read_at_most_once_a_period_and_reused_between() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut reads = 0;
        let mut every = Every::new(Duration::from_secs(5));
        let mut get = |ms: u64| {
            every.get(at(ms), || {
                reads += 1;
                reads
            })
        };
        // first sample reads; samples inside the period reuse it; at 5 s it reads again
        let seen: Vec<u32> = [0, 1000, 4999, 5000, 9999, 10_000, 30_000]
            .into_iter()
            .map(&mut get)
            .collect();
        assert_eq!(seen, [1, 1, 1, 2, 2, 3, 4]);
        // a clock that goes backwards (never with Instant, but cheap to hold) reuses the value
        assert_eq!(get(0), 4);
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
        assert_eq!(THROTTLED, 0x4 | 0x8 | 0x10 | 0x20 | 0x40 | 0x80);
        assert_eq!(throttle_names(THROTTLED).len(), 6);
    }
}
