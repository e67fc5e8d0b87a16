//! Model FLOPs utilisation per GPU: the FLOPs a step's samples need (3 x the model's forward
//! FLOPs per sample: forward, and backward's two products) over the step's wall time, as a share
//! of the GPU's peak for the precision its products run in. A GPU "99% busy" at 3% MFU is busy
//! doing little; this says so.
//!
//! Peaks are NVIDIA's datasheet figures for dense math at the boost clock, for the precision the
//! run's GPUs compute in (`RunInfo::precision`: a TF32 run is measured against the TF32 peak).

use std::time::Duration;

use crate::engine::{Device, RunInfo};
use crate::nn::precision::Precision;

/// Dense peak TFLOP/s (fp32, tf32, bf16) by a part of the GPU's name (whole words of it: "L4"
/// is not "L40"), most specific first.
const PEAKS: [(&str, [f64; 3]); 13] = [
    ("H100 PCIe", [51.2, 378.0, 756.0]),
    ("H100 NVL", [60.0, 417.5, 835.0]),
    ("H200 NVL", [60.0, 417.5, 835.0]),
    ("GH200", [67.0, 494.7, 989.4]),
    // SXM5 (NVML: "NVIDIA H100 80GB HBM3")
    ("H100", [66.9, 494.7, 989.4]),
    ("H200", [66.9, 494.7, 989.4]),
    ("A100", [19.5, 156.0, 312.0]),
    ("L40S", [91.6, 183.0, 362.0]),
    ("L40", [90.5, 90.5, 181.0]),
    ("L4", [30.3, 60.0, 121.0]),
    ("A10", [31.2, 62.5, 125.0]),
    ("V100-PCIE", [14.0, 0.0, 0.0]),
    ("V100", [15.7, 0.0, 0.0]),
];

/// A GPU model's dense peak FLOP/s in `precision`; `None` for a model not in the table (or a
/// precision it lacks).
pub fn peak(name: &str, precision: Precision) -> Option<f64> {
    let i = match precision {
        Precision::Fp32 => 0,
        Precision::Tf32 => 1,
        Precision::Bf16 => 2,
    };
    PEAKS
        .iter()
        .find(|(part, _)| names(name, part))
        .map(|(_, p)| p[i] * 1e12)
        .filter(|&p| p > 0.0)
}

/// Whether `part` stands in `name` as whole words: not inside a longer model number ("A100" is
/// not in "RTX A1000", "L4" not in "L40", "H200" not in "GH200").
fn names(name: &str, part: &str) -> bool {
    let word = |c: Option<char>| c.is_none_or(|c| !c.is_ascii_alphanumeric());
    name.match_indices(part).any(|(at, _)| {
        word(name[..at].chars().next_back()) && word(name[at + part.len()..].chars().next())
    })
}

/// A run's MFU arithmetic: the model's training FLOPs per sample and each rank's peak (the
/// default knows none: no MFU).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Mfu {
    /// 3 x forward FLOPs per sample.
    per_sample: f64,
    /// Per rank: its GPU's peak FLOP/s; `None` for CPU workers and GPUs not in the table.
    pub peaks: Vec<Option<f64>>,
}

impl Mfu {
    pub fn for_run(info: &RunInfo) -> Mfu {
        Mfu {
            per_sample: 3.0 * info.flops as f64,
            peaks: info
                .devices
                .iter()
                .map(|d| match d {
                    Device::Gpu { name, .. } => peak(name, info.precision),
                    Device::Cpu { .. } => None,
                })
                .collect(),
        }
    }

    /// Whether any rank has an MFU to show.
    pub fn any(&self) -> bool {
        self.per_sample > 0.0 && self.peaks.iter().any(Option::is_some)
    }

    /// Rank `rank`'s MFU (0..1) over `samples` trained in `time`.
    pub fn of(&self, rank: usize, samples: usize, time: Duration) -> Option<f64> {
        let peak = (*self.peaks.get(rank)?)?;
        let secs = time.as_secs_f64();
        (secs > 0.0 && self.per_sample > 0.0)
            .then(|| self.per_sample * samples as f64 / secs / peak)
    }

    /// The run's MFU at `samples_per_s` over all ranks, where every rank has a peak (the sum of
    /// the peaks is the run's).
    pub fn of_run(&self, samples_per_s: f64) -> Option<f64> {
        let peaks: Option<Vec<f64>> = self.peaks.iter().copied().collect();
        let total: f64 = peaks?.iter().sum();
        (total > 0.0 && self.per_sample > 0.0).then(|| self.per_sample * samples_per_s / total)
    }

    /// The mean MFU of the ranks that have one, over one step of each.
    pub fn mean<'a>(
        &self,
        steps: impl IntoIterator<Item = &'a crate::engine::events::StepStats>,
    ) -> Option<f64> {
        let v: Vec<f64> = steps
            .into_iter()
            .filter_map(|s| self.of(s.rank, s.samples, s.step_time))
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peaks_come_from_the_name_most_specific_first() {
        let tflops = |name: &str, p| peak(name, p).map(|f| (f / 1e9).round() / 1e3);
        assert_eq!(tflops("NVIDIA H100 80GB HBM3", Precision::Fp32), Some(66.9));
        assert_eq!(tflops("NVIDIA H100 PCIe", Precision::Bf16), Some(756.0));
        assert_eq!(tflops("NVIDIA H200", Precision::Tf32), Some(494.7));
        assert_eq!(tflops("NVIDIA A100-SXM4-80GB", Precision::Fp32), Some(19.5));
        assert_eq!(tflops("NVIDIA L40S", Precision::Fp32), Some(91.6));
        assert_eq!(tflops("NVIDIA L4", Precision::Fp32), Some(30.3));
        assert_eq!(tflops("NVIDIA L40", Precision::Bf16), Some(181.0));
        assert_eq!(tflops("NVIDIA A10", Precision::Fp32), Some(31.2));
        // (a model number inside a longer one is another GPU, whose peak is not known here)
        assert_eq!(
            tflops("NVIDIA RTX A1000 6GB Laptop GPU", Precision::Tf32),
            None
        );
        assert_eq!(tflops("NVIDIA A10G", Precision::Fp32), None);
        assert_eq!(tflops("Tesla V100-SXM2-16GB", Precision::Bf16), None);
        assert_eq!(tflops("NVIDIA GeForce GTX 1080", Precision::Fp32), None);
    }

    #[test]
    fn a_tf32_run_is_measured_against_the_tf32_peak_and_its_record_says_so() {
        let mut info = crate::observe::metrics::run_info(&serde_json::json!({
            "devices": ["gpu0"], "device_names": ["NVIDIA H100 80GB HBM3"],
            "name": "r", "data": "d", "model": "m", "params": 1, "per_replica": 32,
            "flops_per_sample": 1_000_000_000u64,
        }))
        .unwrap();
        assert_eq!(
            info.precision,
            Precision::Fp32,
            "a file from before --precision"
        );
        info.precision = Precision::Tf32;
        let record = crate::observe::metrics::records::run(&info);
        let back = crate::observe::metrics::run_info(&record).unwrap();
        assert_eq!(back.precision, Precision::Tf32);
        // 128 samples x 3 GFLOP in 10 ms = 38.4 TFLOP/s of TF32's 494.7
        let got = Mfu::for_run(&back)
            .of(0, 128, Duration::from_millis(10))
            .unwrap();
        assert!((got - 38.4 / 494.7).abs() < 1e-9, "{got}");
    }

    #[test]
    fn mfu_is_three_forward_passes_of_flops_over_time_and_peak() {
        let info = crate::observe::metrics::run_info(&serde_json::json!({
            "devices": ["gpu0", "cpu1", "gpu2"],
            "device_names": ["NVIDIA H100 80GB HBM3", null, "Some Future GPU"],
            "name": "r", "data": "d", "model": "m", "params": 1, "per_replica": 32,
            "flops_per_sample": 1_000_000_000u64,
        }))
        .unwrap();
        let m = Mfu::for_run(&info);
        assert!(m.any());
        // 128 samples x 3 GFLOP in 10 ms = 38.4 TFLOP/s of 66.9
        let got = m.of(0, 128, Duration::from_millis(10)).unwrap();
        assert!((got - 38.4 / 66.9).abs() < 1e-9, "{got}");
        assert_eq!(m.of(1, 128, Duration::from_millis(10)), None, "CPU worker");
        assert_eq!(m.of(2, 128, Duration::from_millis(10)), None, "unknown GPU");
        assert_eq!(m.of(0, 128, Duration::ZERO), None);
        // a run's: only where every rank has a peak, over their sum
        assert_eq!(m.of_run(1000.0), None);
        let two = Mfu {
            peaks: vec![m.peaks[0], m.peaks[0]],
            ..m.clone()
        };
        let got = two.of_run(25_600.0).unwrap();
        assert!(
            (got - 3e9 * 25_600.0 / (2.0 * 66.9e12)).abs() < 1e-12,
            "{got}"
        );
        let cpu_only = Mfu {
            peaks: vec![None, None],
            ..m
        };
        assert!(!cpu_only.any());
    }

    #[test]
    fn step_records_carry_each_gpu_ranks_mfu() {
        use crate::engine::events::StepStats;
        let info = crate::observe::metrics::run_info(&serde_json::json!({
            "devices": ["gpu0", "cpu1"], "device_names": ["NVIDIA A100-SXM4-80GB", null],
            "name": "r", "data": "d", "model": "m", "params": 1, "per_replica": 64,
            "flops_per_sample": 1_000_000_000u64,
        }))
        .unwrap();
        let stats = |rank| StepStats {
            rank,
            step: 1,
            epoch: 1,
            samples: 64,
            global_samples: 128,
            per_replica: 64,
            loss: 1.0,
            accuracy: 0.0,
            grad_norm: 1.0,
            lr: 0.1,
            data_wait: Duration::ZERO,
            loader_busy: None,
            compute: Duration::from_millis(16),
            compute_cpu: None,
            device_timed: true,
            comm: Duration::ZERO,
            sync_wait: Duration::ZERO,
            transfer: Duration::ZERO,
            optimizer: Duration::ZERO,
            step_time: Duration::from_millis(16),
            at: Duration::ZERO,
            after_pause: false,
            paused: false,
            progress: 0.0,
            ends_at: None,
        };
        let row = crate::observe::monitor::StepRow {
            step: 1,
            epoch: 1,
            loss: 1.0,
            accuracy: 0.0,
            grad_norm: 1.0,
            lr: 0.1,
            per_replica: 64,
            global_samples: 128,
            at: Duration::ZERO,
            progress: 0.0,
            ends_at: None,
            ranks: vec![stats(0), stats(1)],
            totals: None,
        };
        let m = Mfu::for_run(&info);
        let v = crate::observe::metrics::records::step(&row, None, Some(&m));
        // 64 x 3 GFLOP in 16 ms = 12 TFLOP/s of an A100's 19.5
        assert_eq!(
            v["per_rank"][0]["mfu"],
            (12.0f64 / 19.5 * 1e5).round() / 1e5
        );
        assert!(v["per_rank"][1]["mfu"].is_null());
        assert_eq!(m.mean(&row.ranks), m.of(0, 64, Duration::from_millis(16)));
    }
}
