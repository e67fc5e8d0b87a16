//! mgtop: synchronous data-parallel training (one thread per device, gradients all-reduced every
//! step) with a live view of what every device is doing. The README's *How a step works* maps the
//! source.
//!
//! Arrows point down: `cmd` and `front` use `engine` and `observe`; `observe` reads the engine's
//! events and types; `engine` drives `backend` and `comm`; everything computes with `nn` and reads
//! `data`.

pub mod cli;
pub mod clock;
pub mod config;

pub mod cmd;
pub mod front;
pub mod observe;

pub mod engine;

pub mod backend;
pub mod comm;

pub mod data;
pub mod files;
pub mod nn;
pub mod parallel;
pub mod pids;
pub mod quit_at_once;
pub mod stats;
pub mod switches;
pub mod text;
