//! Watching and steering a run from another process: the run serves its records on a Unix
//! domain socket in its run directory (owner-only), in the metrics file's schema, and takes
//! control requests; `attach` is the other end.
//!
//! `hub` holds what is served (the `run` record, a bounded history, each client's queue),
//! `server` the socket's threads, `protocol` the requests and replies, `socket` the socket
//! file, `lines` bounded line reading, `client` and `locate` the attaching side.

pub mod client;
pub mod history;
pub mod hub;
pub mod lines;
pub mod locate;
pub mod protocol;
pub mod server;
pub mod socket;

pub use client::{AttachError, Incoming, LiveClient};
pub use hub::{Kind, LiveHub};
pub use locate::{locate, socket_in, Target, SOCKET_NAME};
pub use server::LiveServer;
