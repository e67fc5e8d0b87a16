//! Subcommands other than training itself: `bench` and `scale`.

pub mod bench;
pub mod scale;
