//! Compiled kernels kept on disk (`$XDG_CACHE_HOME/mgtop/kernels`, else `~/.cache/...`), so that
//! a GPU run compiles only what changed since the last one: each image under the MD5 of
//! everything its bytes follow from (the source after its prelude and headers, NVRTC's options
//! and version, this build's version), behind a header with its length and CRC32C, so that a
//! damaged file is compiled again and replaced. A cache that cannot be read or written costs a
//! compile, never the run. `MGTOP_KERNEL_CACHE=off` compiles every time.

use std::path::{Path, PathBuf};

use md5::{Digest, Md5};

use super::Target;

const MAGIC: &[u8; 8] = b"MGTOPKC1";
/// The magic, the length (u64) and the CRC32C (u32) of the bytes, little-endian.
const HEADER: usize = 8 + 8 + 4;

/// Where compiled kernels are kept, unless `MGTOP_KERNEL_CACHE=off`.
pub(super) fn dir() -> Option<PathBuf> {
    let off = std::env::var(VAR).is_ok_and(|v| v == "off" || v == "0");
    (!off).then(|| crate::files::write::cache_dir("kernels"))
}

const VAR: &str = "MGTOP_KERNEL_CACHE";

/// `MGTOP_KERNEL_CACHE` refused where it is none of its values.
pub fn check_env() -> Result<(), String> {
    crate::switches::check(
        VAR,
        &["off", "0", "on", "1"],
        "off (compile the kernels at every start) or on",
    )
}

/// The name an image is kept under: the MD5 of this build's version, NVRTC's version, the
/// options and the source NVRTC compiles, in hex.
pub(super) fn key(source: &str, options: &[String], nvrtc: (i32, i32)) -> String {
    let mut h = Md5::new();
    h.update(concat!("mgtop-train ", env!("CARGO_PKG_VERSION"), "\0"));
    h.update(format!("nvrtc {}.{}\0", nvrtc.0, nvrtc.1));
    for o in options {
        h.update(o.as_bytes());
        h.update([0]);
    }
    h.update(source.as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn path(dir: &Path, key: &str, target: Target) -> PathBuf {
    let ext = match target {
        Target::Cubin(_) => "cubin",
        Target::Ptx(_) => "ptx",
    };
    dir.join(format!("{key}.{ext}"))
}

/// The image kept under `key`, where it is there whole.
pub(super) fn load(dir: &Path, key: &str, target: Target) -> Option<Vec<u8>> {
    let mut file = std::fs::read(path(dir, key, target)).ok()?;
    let head = file.get(..HEADER)?;
    let len = u64::from_le_bytes(head[8..16].try_into().ok()?);
    let crc = u32::from_le_bytes(head[16..20].try_into().ok()?);
    let whole = &head[..8] == MAGIC
        && (file.len() - HEADER) as u64 == len
        && crc32c::crc32c(&file[HEADER..]) == crc;
    whole.then(|| file.split_off(HEADER))
}

/// Keeps `bytes` under `key` (written beside and renamed into place: a process that reads it
/// meanwhile sees the old file or the new one, never half of one); a failure is let go.
pub(super) fn store(dir: &Path, key: &str, target: Target, bytes: &[u8]) {
    let mut file = Vec::with_capacity(HEADER + bytes.len());
    file.extend_from_slice(MAGIC);
    file.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    file.extend_from_slice(&crc32c::crc32c(bytes).to_le_bytes());
    file.extend_from_slice(bytes);
    if std::fs::create_dir_all(dir).is_ok() {
        let _ = crate::files::write::replace_file(&path(dir, key, target), &file);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_comes_back_whole_or_not_at_all() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("kernels");
        let t = Target::Cubin(90);
        let opts = ["--gpu-architecture=sm_90".to_string()];
        let k = key("__global__ void f() {}", &opts, (12, 9));
        assert_eq!(load(&dir, &k, t), None, "nothing kept yet");
        let image = b"\x7fELF and the rest of a cubin".to_vec();
        store(&dir, &k, t, &image);
        assert_eq!(load(&dir, &k, t), Some(image.clone()));
        // another source, NVRTC, option or target is another image
        for other in [
            key("__global__ void g() {}", &opts, (12, 9)),
            key("__global__ void f() {}", &opts, (13, 0)),
            key(
                "__global__ void f() {}",
                &["--gpu-architecture=sm_80".into()],
                (12, 9),
            ),
        ] {
            assert_ne!(other, k);
            assert_eq!(load(&dir, &other, t), None);
        }
        assert_eq!(load(&dir, &k, Target::Ptx(90)), None);
        // a byte changed, a file cut short, another file's header: not taken
        let file = path(&dir, &k, t);
        let good = std::fs::read(&file).unwrap();
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 1;
        for bad in [
            flipped,
            good[..good.len() - 3].to_vec(),
            good[..10].to_vec(),
        ] {
            std::fs::write(&file, bad).unwrap();
            assert_eq!(load(&dir, &k, t), None);
        }
        // and replaced by the next store
        store(&dir, &k, t, &image);
        assert_eq!(load(&dir, &k, t), Some(image));
    }

    #[test]
    fn a_cache_that_cannot_be_written_is_let_go() {
        let tmp = tempfile::tempdir().unwrap();
        // a file where the directory would be
        let dir = tmp.path().join("kernels");
        std::fs::write(&dir, b"not a directory").unwrap();
        let k = key("x", &[], (12, 0));
        store(&dir, &k, Target::Cubin(80), b"bytes");
        assert_eq!(load(&dir, &k, Target::Cubin(80)), None);
    }
}
