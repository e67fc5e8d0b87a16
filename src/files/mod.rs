//! Files from outside read bounded and checked (`read`), and files written whole (`write`):
//! what every layer reads and writes through.

pub mod read;
pub mod write;
