//! What watches a run: telemetry (CPU and NVML), the straggler detector, the step monitor, the
//! bounded history behind the charts, the metrics file, the live socket, and the recorder that
//! sends each record to those. Reads the engine's events and types; the engine imports nothing
//! from here.

pub mod history;
pub mod live;
pub mod machine_load;
pub mod metrics;
pub mod mfu;
pub mod monitor;
pub mod nvml;
pub mod prometheus;
pub mod recorder;
pub mod sample;
pub mod straggler;
pub mod telemetry;
pub mod tensorboard;

pub use recorder::Recorder;
