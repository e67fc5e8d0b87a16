//! NVML's GPU performance monitoring (GPM, Hopper and newer): metrics are taken over the
//! interval between two samples, so each GPU keeps its last sample for the next.

use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::gpm::{gpm_metrics_get, GpmSample};
use nvml_wrapper::Device;
use nvml_wrapper_sys::bindings::nvmlGpmSample_t;

/// One GPU's GPM state.
pub(super) enum Gpm {
    /// No GPM on this GPU (or this driver): its metrics stay n/a.
    Without,
    /// Supported, not sampled yet.
    First,
    /// The last sample, owned (freed when replaced, or by `free`).
    Since(nvmlGpmSample_t),
}

// SAFETY: a GPM sample is a buffer NVML allocated; it is only used (behind `Nvml`'s mutex) with
// the `nvml_wrapper::Nvml` that allocated it.
unsafe impl Send for Gpm {}

impl Gpm {
    /// Whether `d` has GPM, asked once.
    pub fn for_device(d: &Device<'_>) -> Gpm {
        match d.gpm_support() {
            Ok(true) => Gpm::First,
            _ => Gpm::Without,
        }
    }

    /// (SM active, tensor pipes active), 0..1, over the interval since the last sample (none
    /// on the first); a new sample kept for the next. A GPU whose GPM fails once is not asked
    /// again.
    pub fn metrics(
        &mut self,
        nvml: &nvml_wrapper::Nvml,
        d: &Device<'_>,
    ) -> (Option<f32>, Option<f32>) {
        if matches!(self, Gpm::Without) {
            return (None, None);
        }
        let Ok(now) = d.gpm_sample() else {
            std::mem::replace(self, Gpm::Without).free(nvml);
            return (None, None);
        };
        let now = now.into_handle();
        let Gpm::Since(prev) = std::mem::replace(self, Gpm::Since(now)) else {
            return (None, None);
        };
        // SAFETY: both were allocated by `nvml`; `prev` is owned by this call alone and freed
        // when its wrapper drops, `now` is owned by `self` and only borrowed here
        let (prev, now) = unsafe {
            (
                GpmSample::from_handle(nvml, prev),
                std::mem::ManuallyDrop::new(GpmSample::from_handle(nvml, now)),
            )
        };
        let ids = [GpmMetricId::SmUtil, GpmMetricId::AnyTensorUtil];
        let Ok(got) = gpm_metrics_get(nvml, &prev, &now, &ids) else {
            return (None, None);
        };
        let share = |i: usize| match got.get(i) {
            Some(Ok(m)) if m.value.is_finite() => Some((m.value / 100.0).clamp(0.0, 1.0) as f32),
            _ => None,
        };
        (share(0), share(1))
    }

    /// Frees the last sample, if one is held (before `nvml` closes).
    pub fn free(self, nvml: &nvml_wrapper::Nvml) {
        if let Gpm::Since(s) = self {
            // SAFETY: allocated by `nvml`, owned by this state alone: freed once, here
            drop(unsafe { GpmSample::from_handle(nvml, s) });
        }
    }
}
