//! The environment switches that change how kernels run (`MGTOP_DIRECT`, `MGTOP_WINOGRAD`,
//! `MGTOP_GPU_PROFILE`, `MGTOP_KERNEL_CACHE`, ...): each module reads its own, and checks it
//! here at a run's start, so that a misspelt value is refused rather than taken for the default
//! unsaid.

/// Switch `var` refused where it is set to none of `allowed` (unset or empty: its default),
/// the refusal naming them as `values` says.
pub fn check(var: &str, allowed: &[&str], values: &str) -> Result<(), String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() && !allowed.contains(&v.as_str()) => Err(format!(
            "{var}={}: use {values}, or leave it unset",
            crate::text::excerpt(&v)
        )),
        _ => Ok(()),
    }
}
