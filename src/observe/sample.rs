//! One device's sample at one moment, as every backend reports it: a metric a device cannot
//! report is `None` (shown as n/a), never 0.

/// One device at one moment. Fractions are 0..=1.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceSample {
    /// GPU: utilization.gpu. CPU worker: the share of wall time spent computing, reducing
    /// and updating (not waiting for data or for other ranks).
    pub util: Option<f32>,
    /// GPU: utilization.memory, the share of time the memory was being read or written.
    pub mem_access: Option<f32>,
    pub mem_used: Option<u64>,
    pub mem_total: Option<u64>,
    pub temp_c: Option<f32>,
    pub power_w: Option<f32>,
    pub power_limit_w: Option<f32>,
    /// GPU: SM clock now and its maximum, MHz.
    pub sm_clock_mhz: Option<u32>,
    pub sm_clock_max_mhz: Option<u32>,
    /// GPU: NVML's clock throttle-reason bits (see `nvml::throttle_names`).
    pub throttle_reasons: Option<u64>,
    /// GPU: PCIe throughput, KB/s, read at most every `nvml::PCIE_EVERY` (reused in between).
    pub pcie_rx_kbs: Option<u32>,
    pub pcie_tx_kbs: Option<u32>,
    /// GPU (Hopper and newer, NVML's GPM): the share of SMs active, and of time any tensor
    /// pipe was active, over the interval since the previous sample.
    pub sm_active: Option<f32>,
    pub tensor_active: Option<f32>,
}
