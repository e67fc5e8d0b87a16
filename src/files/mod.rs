//! Files from outside read bounded and checked (`read`), and files written whole (`write`):
//! what every layer reads and writes through.

pub mod read;
pub mod write;

/// Whether `a` and `b` are one file or directory (by their paths resolved: links, `..`);
/// false where either cannot be resolved.
pub fn same_path(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
