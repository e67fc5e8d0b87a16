//! The machine-readable metrics file (`--metrics-out`): JSON Lines, schema `mgtop.metrics/1`,
//! documented in the README. Every line is one object with a `type`. `records` builds each
//! record once as a line, `writer` writes lines to a file, `reader` turns a file back into the
//! engine's types (for `view`) and `parse` does so for one line (for `attach`, whose socket
//! speaks the same schema).
//!
//! Fields added within version 1 for reading a run back (older files lack them; the reader
//! then uses the defaults in `parse::run_info`): `run`: `budget` (`{"epochs": N}` or
//! `{"steps": N}`), `lr` (the starting base LR), `start_epoch`, `device_names` (per device, the
//! GPU's model, null for CPU workers), `device_note`,
//! `precision_notes`, `data_notes`, `model_notes` (the start-up's notes), `precision` (what the GPUs compute in: fp32, tf32 or bf16; fp32 where absent), `run_dir`, `started_unix` (when the workers started, seconds since 1970: the
//! moment every `t` counts from); `step`: `progress` (fraction of the
//! budget done, 0..1), `totals` (the run so far, every step counted); `telemetry`:
//! `machine_memory` (bytes, beside `process_rss`).

mod fields;
mod parse;
pub mod reader;
pub mod records;
mod step_record;
pub mod writer;

pub use parse::{record, record_line, run_info, run_line, Record};
pub use reader::{MetricsReader, ReadError};
pub use records::Line;
pub use writer::{MetricsError, MetricsWriter};

pub const SCHEMA: &str = "mgtop.metrics/1";
