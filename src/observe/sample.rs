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

/// A value's word: `u64::MAX` for none (no f32's or u32's bits, and no byte count or throttle
/// mask a device reports, are all ones).
const NONE: u64 = u64::MAX;

impl DeviceSample {
    /// How many words a sample is (`to_words`).
    pub const WORDS: usize = 14;

    /// The sample as words, for another process (`comm::samples`).
    pub fn to_words(&self) -> Vec<u64> {
        let f = |v: Option<f32>| v.map_or(NONE, |x| u64::from(x.to_bits()));
        let u = |v: Option<u32>| v.map_or(NONE, u64::from);
        let w = |v: Option<u64>| v.unwrap_or(NONE);
        vec![
            f(self.util),
            f(self.mem_access),
            w(self.mem_used),
            w(self.mem_total),
            f(self.temp_c),
            f(self.power_w),
            f(self.power_limit_w),
            u(self.sm_clock_mhz),
            u(self.sm_clock_max_mhz),
            w(self.throttle_reasons),
            u(self.pcie_rx_kbs),
            u(self.pcie_tx_kbs),
            f(self.sm_active),
            f(self.tensor_active),
        ]
    }

    /// The sample `to_words` made; `None` for words of another length. A value out of its
    /// range (a fraction past 0..=1, a value not finite) is none.
    pub fn from_words(words: &[u64]) -> Option<DeviceSample> {
        let w: &[u64; DeviceSample::WORDS] = words.try_into().ok()?;
        let number = |i: usize| {
            let v = u32::try_from(w[i]).ok().map(f32::from_bits);
            v.filter(|x| x.is_finite() && *x >= 0.0)
        };
        let fraction = |i: usize| number(i).filter(|x| *x <= 1.0);
        let u = |i: usize| u32::try_from(w[i]).ok();
        let whole = |i: usize| Some(w[i]).filter(|&v| v != NONE);
        Some(DeviceSample {
            util: fraction(0),
            mem_access: fraction(1),
            mem_used: whole(2),
            mem_total: whole(3),
            temp_c: number(4),
            power_w: number(5),
            power_limit_w: number(6),
            sm_clock_mhz: u(7),
            sm_clock_max_mhz: u(8),
            throttle_reasons: whole(9),
            pcie_rx_kbs: u(10),
            pcie_tx_kbs: u(11),
            sm_active: fraction(12),
            tensor_active: fraction(13),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_goes_as_words_and_comes_back_whole() {
        let full = DeviceSample {
            util: Some(0.97),
            mem_access: Some(0.4),
            mem_used: Some(70 << 30),
            mem_total: Some(80 << 30),
            temp_c: Some(71.0),
            power_w: Some(650.5),
            power_limit_w: Some(700.0),
            sm_clock_mhz: Some(1755),
            sm_clock_max_mhz: Some(1980),
            throttle_reasons: Some(0x20),
            pcie_rx_kbs: Some(12_000),
            pcie_tx_kbs: Some(0),
            sm_active: Some(0.9),
            tensor_active: Some(0.35),
        };
        for s in [full, DeviceSample::default()] {
            let words = s.to_words();
            assert_eq!(words.len(), DeviceSample::WORDS);
            assert_eq!(DeviceSample::from_words(&words), Some(s));
        }
        assert_eq!(DeviceSample::from_words(&[0; 3]), None);
        // a value no device reports is none, not shown
        let mut words = DeviceSample::default().to_words();
        words[0] = u64::from(2.5f32.to_bits());
        words[4] = u64::from(f32::NAN.to_bits());
        let s = DeviceSample::from_words(&words).unwrap();
        assert_eq!((s.util, s.temp_c), (None, None));
    }
}
