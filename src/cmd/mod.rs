//! The subcommands, one file each: training (the default), `bench`, `scale` and `selftest`.
//! `main.rs` parses the flags, installs signal handling and turns results into exit codes.

pub mod bench;
pub mod scale;
pub mod selftest;
pub mod train;
