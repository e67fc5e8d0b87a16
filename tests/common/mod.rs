//! What the integration tests share.

use std::io::Write;

pub mod cli;
pub mod compare;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod run;
pub mod tmux;

/// Says that a test did not run and why, where `cargo test` shows it: straight to the process's
/// stderr, which the test harness does not capture (it captures only `eprintln!`), so a skip is
/// never mistaken for a pass in the output.
pub fn skipped(why: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: {why}");
}

/// The next engine event that satisfies `pred` (earlier ones are passed over), within 20 s.
#[allow(dead_code)]
pub fn next_event(
    events: &crossbeam_channel::Receiver<mgtop::engine::events::Event>,
    pred: &dyn Fn(&mgtop::engine::events::Event) -> bool,
) -> mgtop::engine::events::Event {
    loop {
        let e = events
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("event arrives");
        if pred(&e) {
            return e;
        }
    }
}
