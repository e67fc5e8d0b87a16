//! Frontends: the terminal UI and the headless log. Both show what the engine and the observers
//! say; neither analyses a run itself.

pub mod headless;
mod steps;
pub mod summary;
pub mod sync;
pub mod tui;
pub mod units;
pub mod watch;
pub mod watcher;
pub mod words;
