//! mgtop: synchronous data-parallel training (one thread per device, gradients all-reduced every
//! step) with a live view of what every device is doing. See DESIGN in the README.

pub mod bench;
pub mod checkpoint;
pub mod cli;
pub mod collective;
pub mod config;
pub mod control;
pub mod cuda;
pub mod data;
pub mod engine;
pub mod events;
pub mod gemm;
pub mod gpu;
pub mod headless;
pub mod history;
pub mod intraop;
pub mod kernels;
pub mod loader;
pub mod metrics;
pub mod model;
pub mod monitor;
pub mod nvml;
pub mod ops;
pub mod optim;
pub mod replica;
pub mod rng;
pub mod scale;
pub mod scaling;
pub mod schedule;
pub mod straggler;
pub mod telemetry;
pub mod tui;
