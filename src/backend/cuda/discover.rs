//! Finding GPUs through the CUDA driver, loaded at run time: a machine without CUDA gets a
//! reason, never a panic (cudarc panics on a missing library, so presence is checked first).

/// One GPU the driver reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuInfo {
    pub index: usize,
    pub name: String,
    pub memory: u64,
    /// Compute capability as major*10 + minor (90 for an H100); 0 where unknown.
    pub arch: u32,
    /// "0000:3b:00.0", as NVML names the same GPU.
    pub pci_bus_id: Option<String>,
}

/// The GPUs found, or why there are none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Discovery {
    Found(Vec<GpuInfo>),
    None(String),
}

/// The device's PCI address as NVML writes it: domain:bus:device.function in hex.
fn pci_bus_id(dev: cudarc::driver::sys::CUdevice) -> Option<String> {
    use cudarc::driver::result::device::get_attribute;
    use cudarc::driver::sys::CUdevice_attribute as A;
    // SAFETY: `dev` is a device handle the driver returned; attributes are read-only queries.
    let attr = |a| unsafe { get_attribute(dev, a) }.ok();
    Some(format!(
        "{:08x}:{:02x}:{:02x}.0",
        attr(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
        attr(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
        attr(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?
    ))
}

/// The device's compute capability as major*10 + minor, 0 where the driver does not say.
fn compute_capability(dev: cudarc::driver::sys::CUdevice) -> u32 {
    use cudarc::driver::result::device::get_attribute;
    use cudarc::driver::sys::CUdevice_attribute as A;
    // SAFETY: `dev` is a device handle the driver returned; attributes are read-only queries.
    let attr = |a| {
        unsafe { get_attribute(dev, a) }
            .ok()
            .and_then(|v| u32::try_from(v).ok())
    };
    match (
        attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
        attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
    ) {
        (Some(major), Some(minor)) => major * 10 + minor,
        _ => 0,
    }
}

/// Why the CUDA driver did not start, with the mend where the error shows one.
fn did_not_start(e: cudarc::driver::sys::CUresult) -> String {
    use cudarc::driver::sys::CUresult as R;
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let why = match e {
        R::CUDA_ERROR_NO_DEVICE => match visible {
            Some(v) => format!("no GPU: CUDA_VISIBLE_DEVICES is `{v}`, which leaves none to use (unset it, or name a GPU: CUDA_VISIBLE_DEVICES=0)"),
            None => "no GPU is there (nvidia-smi lists those the driver sees)".into(),
        },
        R::CUDA_ERROR_STUB_LIBRARY => "the libcuda.so.1 found is the CUDA toolkit's stub, not the driver: take the toolkit's lib64/stubs folder off LD_LIBRARY_PATH".into(),
        R::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH | R::CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE => "libcuda.so.1 and the loaded kernel module are of different driver versions (a driver upgraded without a reboot, or a container's libcuda.so.1 newer than the host's driver): reboot, or use the host's libcuda.so.1".into(),
        other => format!("{other:?}"),
    };
    format!("the CUDA driver did not start: {why}")
}

/// Where the CUDA driver is installed but does not start for another reason than having no GPU
/// to use: why (`selftest` fails on it; training falls back to CPU workers with it said).
pub fn driver_broken() -> Option<String> {
    // SAFETY: only tries to dlopen libcuda under its known names; nothing is called.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return None;
    }
    let e = cudarc::driver::result::init().err()?;
    (e.0 != cudarc::driver::sys::CUresult::CUDA_ERROR_NO_DEVICE).then(|| did_not_start(e.0))
}

/// Asks the CUDA driver for its devices.
pub fn discover() -> Discovery {
    // SAFETY: only tries to dlopen libcuda under its known names; nothing is called.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Discovery::None("no CUDA driver (libcuda.so.1) is installed".into());
    }
    use cudarc::driver::result::{device, init};
    if let Err(e) = init() {
        return Discovery::None(did_not_start(e.0));
    }
    let count = match device::get_count() {
        Ok(n) => n.max(0) as usize,
        Err(e) => return Discovery::None(format!("the CUDA driver lists no devices ({e:?})")),
    };
    if count == 0 {
        return Discovery::None("the CUDA driver reports 0 devices".into());
    }
    Discovery::Found(
        (0..count)
            .map(|index| {
                let dev = device::get(index as i32).ok();
                GpuInfo {
                    index,
                    name: dev
                        .and_then(|d| device::get_name(d).ok())
                        .unwrap_or_else(|| "unknown GPU".into()),
                    // SAFETY: `d` is a device handle the driver just returned.
                    memory: dev
                        .and_then(|d| unsafe { device::total_mem(d) }.ok())
                        .unwrap_or(0) as u64,
                    arch: dev.map_or(0, compute_capability),
                    pci_bus_id: dev.and_then(pci_bus_id),
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use cudarc::driver::sys::CUresult as R;

    /// The driver's errors that have a mend are said with it, the rest by their name.
    #[test]
    fn a_driver_that_does_not_start_is_said_with_the_mend() {
        let said = super::did_not_start(R::CUDA_ERROR_STUB_LIBRARY);
        assert!(said.contains("the CUDA toolkit's stub") && said.contains("LD_LIBRARY_PATH"));
        let said = super::did_not_start(R::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH);
        assert!(said.contains("reboot"), "{said}");
        let said = super::did_not_start(R::CUDA_ERROR_OUT_OF_MEMORY);
        assert_eq!(
            said,
            "the CUDA driver did not start: CUDA_ERROR_OUT_OF_MEMORY"
        );
    }
}
