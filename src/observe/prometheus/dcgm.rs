//! Each GPU under dcgm-exporter's names, units and labels, so NVIDIA's public dcgm-exporter
//! Grafana dashboard shows a run unchanged. Every machine's GPUs, from the samples their
//! machines' processes send process 0 (`comm::samples`); another machine's without the
//! identities only NVML there knows (its UUID, NVML index and device file).

use prometheus::{GaugeVec, Opts, Registry};

use crate::engine::{Device, RunInfo};
use crate::observe::nvml::GpuIdentity;
use crate::observe::sample::DeviceSample;

/// The labels of every dcgm-exporter metric, in the order of `Gpu::labels`.
const DCGM_LABELS: [&str; 7] = [
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "Hostname",
    "rank",
];

const MIB: f64 = 1024.0 * 1024.0;

/// dcgm-exporter's fields that NVML gives: the name, its help (dcgm-exporter's words), and the
/// value in its unit from a sample.
type Field = (&'static str, &'static str, fn(&DeviceSample) -> Option<f64>);

const DCGM_FIELDS: [Field; 11] = [
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", |s| {
        s.util.map(|u| f64::from(u) * 100.0)
    }),
    (
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "Memory utilization (in %).",
        |s| s.mem_access.map(|u| f64::from(u) * 100.0),
    ),
    (
        "DCGM_FI_DEV_FB_USED",
        "Framebuffer memory used (in MiB).",
        |s| s.mem_used.map(|b| (b as f64 / MIB).round()),
    ),
    (
        "DCGM_FI_DEV_FB_FREE",
        "Framebuffer memory free (in MiB).",
        |s| match (s.mem_total, s.mem_used) {
            (Some(t), Some(u)) => Some((t.saturating_sub(u) as f64 / MIB).round()),
            _ => None,
        },
    ),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", |s| {
        s.temp_c.map(f64::from)
    }),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", |s| {
        s.power_w.map(f64::from)
    }),
    (
        "DCGM_FI_DEV_SM_CLOCK",
        "SM clock frequency (in MHz).",
        |s| s.sm_clock_mhz.map(f64::from),
    ),
    (
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
        "PCIe transmit throughput (in KB/s), read by NVML.",
        |s| s.pcie_tx_kbs.map(f64::from),
    ),
    (
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
        "PCIe receive throughput (in KB/s), read by NVML.",
        |s| s.pcie_rx_kbs.map(f64::from),
    ),
    (
        "DCGM_FI_PROF_SM_ACTIVE",
        "The ratio of cycles an SM has at least 1 warp assigned (0-1), read by NVML's GPM.",
        |s| s.sm_active.map(f64::from),
    ),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "Ratio of cycles any tensor pipe is active (0-1), read by NVML's GPM.",
        |s| s.tensor_active.map(f64::from),
    ),
];

/// A GPU rank's dcgm-exporter label values.
struct Gpu {
    rank: usize,
    labels: [String; 7],
}

/// The dcgm-exporter series of a run's GPUs.
pub(super) struct Dcgm {
    /// One per field of `DCGM_FIELDS` (none where the run has no GPU here).
    vecs: Vec<GaugeVec>,
    gpus: Vec<Gpu>,
}

impl Dcgm {
    /// Registers the fields for the GPUs of `info`; `identities` are this machine's NVML's, in
    /// the order of the run's GPUs (missing ones, and another machine's, give empty labels).
    pub(super) fn new(
        r: &Registry,
        info: &RunInfo,
        identities: &[GpuIdentity],
    ) -> Result<Dcgm, String> {
        let here = crate::pids::hostname();
        let mut gpus = Vec::new();
        let mut identities = identities.iter();
        for (rank, d) in info.devices.iter().enumerate() {
            let Device::Gpu {
                index,
                name,
                pci_bus_id,
                ..
            } = d
            else {
                continue;
            };
            let id = identities.next().cloned().unwrap_or_default();
            // (a GPU here at another machine's GPU's bus id is another GPU)
            let id = match info.on_first_host(rank) {
                true => id,
                false => GpuIdentity::default(),
            };
            let host = info.hosts.get(rank);
            gpus.push(Gpu {
                rank,
                labels: [
                    id.index
                        .map_or_else(|| index.to_string(), |i| i.to_string()),
                    id.uuid.unwrap_or_default(),
                    pci_bus_id.clone().unwrap_or_default(),
                    id.minor.map(|m| format!("nvidia{m}")).unwrap_or_default(),
                    name.clone(),
                    host.cloned().unwrap_or_else(|| here.clone()),
                    rank.to_string(),
                ],
            });
        }
        let vecs = match gpus.is_empty() {
            true => Vec::new(),
            false => (DCGM_FIELDS.iter())
                .map(|(name, help, _)| {
                    let g = GaugeVec::new(Opts::new(*name, *help), &DCGM_LABELS)
                        .map_err(|e| e.to_string())?;
                    r.register(Box::new(g.clone())).map_err(|e| e.to_string())?;
                    Ok(g)
                })
                .collect::<Result<_, String>>()?,
        };
        Ok(Dcgm { vecs, gpus })
    }

    /// Every GPU's values left out: they are no longer read (the run has ended).
    pub(super) fn forget(&self) {
        for gpu in &self.gpus {
            for vec in &self.vecs {
                let _ = vec.remove_label_values(&gpu.labels);
            }
        }
    }

    /// Each GPU's values from its sample; what NVML cannot read is left out, as dcgm-exporter
    /// does.
    pub(super) fn record(&self, devices: &[DeviceSample]) {
        for gpu in &self.gpus {
            let Some(s) = devices.get(gpu.rank) else {
                continue;
            };
            for (vec, (_, _, value)) in self.vecs.iter().zip(&DCGM_FIELDS) {
                match value(s) {
                    Some(v) => vec.with_label_values(&gpu.labels).set(v),
                    None => {
                        let _ = vec.remove_label_values(&gpu.labels);
                    }
                }
            }
        }
    }
}
