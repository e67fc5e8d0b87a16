//! The subcommands, one file each: training (the default), `attach`, `bench`, `eval`, `export`, `runs`, `scale`,
//! `selftest` and `view`.
//! `main.rs` parses the flags, installs signal handling and turns results into exit codes.

pub mod attach;
pub mod bench;
mod bench_live;
pub mod bench_processes;
mod bench_workload;
pub mod eval;
pub mod export;
pub mod models;
mod processes;
pub mod runs;
pub mod scale;
pub mod selftest;
pub mod train;
pub mod view;

/// A run of this process trained its whole budget: a signal that came after its last step's
/// boundary (its final validation, checkpoint or last lines) interrupted nothing.
static COMPLETED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether the run `train` ran trained its whole budget (`main` exits 0 then, a signal or not).
pub fn completed() -> bool {
    COMPLETED.load(std::sync::atomic::Ordering::SeqCst)
}

/// Notes how the run ended, for `completed`.
fn ran(result: &crate::engine::RunResult) {
    COMPLETED.store(!result.stopped, std::sync::atomic::Ordering::SeqCst);
}

/// Training, the default command: in this process, or as one process of several under a
/// launcher (mpirun, srun).
pub fn train(args: crate::cli::TrainArgs, on_signals: &train::OnSignals) -> anyhow::Result<()> {
    if cfg!(unoptimized) {
        crate::tell!("note: this is a debug build (cargo run without --release): it trains many times slower than a release build (cargo run --release -- ..., or cargo install --path .)");
    }
    match crate::comm::launch::from_env().map_err(anyhow::Error::msg)? {
        Some(launch) if launch.is_multi() => processes::command(args, on_signals, &launch),
        launch => train::train(args, on_signals, None, launch.as_ref()),
    }
}

/// Said before a measurement by an unoptimised build (`cargo run` without `--release`; the
/// `unoptimized` cfg of build.rs), whose figures are tens of times below a release build's and
/// would read as this program's speed.
fn debug_build_note() {
    if cfg!(unoptimized) {
        crate::tell!("note: this is a debug build (cargo run without --release): its figures are far below a release build's; measure with cargo run --release -- ...");
    }
}

/// The first failure to write standard output other than a closed pipe (`| head` is done
/// reading): a full disk or a file-size limit under `> FILE`.
static STDOUT_LOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Notes a failed write of standard output (see `stdout_lost`).
pub fn stdout_failed(e: &std::io::Error) {
    if e.kind() != std::io::ErrorKind::BrokenPipe {
        let _ = STDOUT_LOST.set(e.to_string());
    }
}

/// Why standard output lost lines, where it did (not for a closed pipe): a report whose file
/// is cut short ends in an error, not in success.
pub fn stdout_lost() -> Option<&'static str> {
    STDOUT_LOST.get().map(String::as_str)
}

/// `println!` that never panics: where stdout is gone (a dropped SSH session, `| head`), the
/// line is lost, not the run or its checkpoint. What would drive the terminal (an escape in a
/// path, a class's or a run's name) is written escaped, line breaks kept.
#[macro_export]
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let line = $crate::text::printable_lines(&format!($($t)*));
        if let Err(e) = writeln!(std::io::stdout(), "{line}") {
            $crate::cmd::stdout_failed(&e);
        }
    }};
}

/// `eprintln!` that never panics, its text escaped (see `say!`).
#[macro_export]
macro_rules! tell {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        // (one write: another process's line on the same stderr does not land inside it)
        let line = $crate::text::printable_lines(&format!($($t)*)) + "\n";
        let _ = std::io::stderr().write_all(line.as_bytes());
    }};
}

/// A measuring command's list flag with each value once (`--batches 32,32` would measure one
/// point twice).
fn listed_once<T: PartialEq + std::fmt::Display>(flag: &str, list: &[T]) -> anyhow::Result<()> {
    match (list.iter().enumerate()).find(|(i, v)| list[..*i].contains(v)) {
        Some((_, v)) => anyhow::bail!("{flag}: {v} is given twice: list each value once"),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_value_listed_twice_is_named() {
        assert!(super::listed_once("--batches", &[32, 64]).is_ok());
        let e = super::listed_once("--batches", &[32, 64, 32]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--batches: 32 is given twice: list each value once"
        );
    }
}
