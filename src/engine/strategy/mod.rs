//! How ranks share what they learn (`--strategy`): the choice as a user gives it, and the hook the
//! worker calls where a step exchanges gradients and updates the weights.
//!
//! - **mirrored**: every rank holds the model and its optimizer state; gradients are all-reduced
//!   every step and every rank applies the same update.
//! - **central-storage** (`central.rs`): one copy of the parameters and the optimizer state on the
//!   host; devices receive the parameters each step and send their gradients back.
//! - **local-sgd:H** (`local_sgd.rs`): after a synchronous warm-up, each rank takes H steps on its
//!   own shard, then the ranks average their parameters with one all-reduce.

mod central;
mod local_sgd;
mod runner;

pub use central::Store;
pub use runner::{Buffers, Moved, Runner};

pub use crate::config::strategy::{Strategy, DEFAULT_LOCAL_SGD_WARMUP, MAX_LOCAL_STEPS};

#[cfg(test)]
mod tests;
