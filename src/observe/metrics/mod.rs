//! The machine-readable metrics file (`--metrics-out`): JSON Lines, schema `mgtop.metrics/1`,
//! documented in the README. Every line is one object with a `type`. `writer` writes it as a
//! run goes; `reader` turns it back into the engine's types (for `view`, later `attach`).

mod parse;
pub mod reader;
pub mod writer;

pub use reader::{MetricsReader, ReadError, Record};
pub use writer::{MetricsError, MetricsWriter, Recorder};

pub const SCHEMA: &str = "mgtop.metrics/1";
