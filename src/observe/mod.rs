//! What watches a run: telemetry (CPU and NVML), the straggler detector, the step monitor, the
//! bounded history behind the charts and the metrics file. Reads the engine's events and types;
//! the engine imports nothing from here.

pub mod history;
pub mod metrics;
pub mod monitor;
pub mod nvml;
pub mod straggler;
pub mod telemetry;
