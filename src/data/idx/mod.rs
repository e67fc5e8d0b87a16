//! IDX, the MNIST / Fashion-MNIST file format (raw or gzip): a big-endian header
//! `0 0 TYPE NDIMS`, NDIMS u32 sizes, then the data. Sizes from the header are checked before
//! anything is allocated, and nothing past what the header declares is read (a gzip bomb stops
//! there).

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

mod members;

use super::host_memory;
use super::image_shape::{hwc_to_chw, idx_images, ImageLayout};
use super::{finish, DataError, Dataset, Normalisation};
use crate::files::read::{self, Expect};
use crate::nn::shape::Shape;

const UBYTE: u8 = 0x08;
const FLOAT: u8 = 0x0D;
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

struct Idx {
    kind: u8,
    dims: Vec<usize>,
    data: Vec<u8>,
}

/// Why reading stopped: the stream's error (for gzip, corrupt data), or the format's.
enum Fail {
    Io(std::io::Error),
    Format(String),
}

impl From<String> for Fail {
    fn from(msg: String) -> Self {
        Fail::Format(msg)
    }
}

impl From<std::io::Error> for Fail {
    fn from(e: std::io::Error) -> Self {
        Fail::Io(e)
    }
}

fn read(path: &Path, flag: &'static str) -> Result<Idx, DataError> {
    let (memory, _) = host_memory::machine_memory();
    let expect = Expect {
        what: "an IDX file",
        flag,
        max: memory,
        fix: "an IDX file must fit in memory to be loaded; is it the right file?",
    };
    let (file, len) = read::open(path, &expect).map_err(|e| DataError::read(e, flag))?;
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
        flag,
    };
    let mut r = BufReader::new(file);
    let gz = r.fill_buf().map_err(io)?.starts_with(&GZIP_MAGIC);
    let got = if gz {
        let mut stream = members::Members::new(r);
        from_reader(&mut stream, None, memory).and_then(|idx| {
            // (as a raw file's bytes past its data are: two files joined, or not IDX; zeros
            // a tape or a block device padded it with are not, as gzip takes them)
            let mut rest = stream.into_inner();
            let mut chunk = vec![0u8; 1 << 16];
            loop {
                match rest.read(&mut chunk)? {
                    0 => return Ok(idx),
                    n if chunk[..n].iter().all(|&b| b == 0) => {}
                    _ => {
                        return Err(Fail::Format(
                            "bytes that are no gzip member follow its gzip data (another file joined to it?); give the file as downloaded".into(),
                        ))
                    }
                }
            }
        })
    } else {
        from_reader(r, Some(len), memory)
    };
    got.map_err(|fail| match fail {
        Fail::Format(msg) => fmt_err(path, msg),
        Fail::Io(e) if gz => fmt_err(
            path,
            format!("gzip data is corrupt ({e}); download the file again"),
        ),
        Fail::Io(source) => io(source),
    })
}

fn fmt_err(path: &Path, msg: String) -> DataError {
    DataError::Format {
        path: PathBuf::from(path),
        msg,
    }
}

/// Up to `n` bytes of `r` (fewer at its end).
fn take(r: &mut impl Read, n: u64) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    r.take(n).read_to_end(&mut out)?;
    Ok(out)
}

/// The shape of an images file's samples from its header alone, as `load` makes them: for a
/// model refused before the file is read whole. None where the header does not say, or says
/// other than the file's length (the load then says why), or the file is not a plain file (a
/// pipe is read once).
pub(super) fn sample_shape(images: &Path, layout: Option<ImageLayout>) -> Option<Shape> {
    use std::io::{Seek, SeekFrom};
    let meta = std::fs::metadata(images).ok().filter(|m| m.is_file())?;
    let mut r = BufReader::new(std::fs::File::open(images).ok()?);
    let gz = r.fill_buf().ok()?.starts_with(&GZIP_MAGIC);
    let (kind, dims) = match gz {
        true => header(members::Members::new(&mut r)),
        false => header(&mut r),
    }
    .ok()?;
    if dims.len() < 2 || dims.contains(&0) {
        return None;
    }
    let elem = if kind == UBYTE { 1 } else { 4 };
    let whole = (dims.iter())
        .try_fold(elem, |a: u64, &d| a.checked_mul(d as u64))?
        .checked_add(4 + 4 * dims.len() as u64)?;
    // (gzip's last 4 bytes: the length of what it holds, modulo 2^32)
    let holds = match gz {
        true => {
            let mut size = [0u8; 4];
            r.seek(SeekFrom::End(-4)).ok()?;
            r.read_exact(&mut size).ok()?;
            whole as u32 == u32::from_le_bytes(size)
        }
        false => whole == meta.len(),
    };
    if !holds {
        return None;
    }
    let features = dims[1..]
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))?;
    Some(match idx_images(&dims, layout, "").ok()?.shape {
        Some([c, h, w]) => Shape::Image { c, h, w },
        None => Shape::Flat(features),
    })
}

/// An IDX stream's header: its element type and its dimensions.
fn header(mut r: impl Read) -> Result<(u8, Vec<usize>), Fail> {
    let magic = take(&mut r, 4)?;
    if magic.len() < 4 || magic[0] != 0 || magic[1] != 0 {
        return Err(Fail::Format(
            "not an IDX file: the first two bytes must be 0 (is it an MNIST idx1/idx3 file?)"
                .into(),
        ));
    }
    let kind = magic[2];
    if kind != UBYTE && kind != FLOAT {
        return Err(Fail::Format(format!("byte 2: element type 0x{kind:02X} is not supported; use unsigned bytes (0x08) or f32 (0x0D)")));
    }
    let ndims = magic[3] as usize;
    if ndims == 0 {
        return Err(Fail::Format("byte 3: the header declares 0 dimensions; an IDX file has at least one (is it an MNIST idx1/idx3 file?)".into()));
    }
    let sizes = take(&mut r, 4 * ndims as u64)?;
    if sizes.len() < 4 * ndims {
        return Err(Fail::Format(format!(
            "header says {ndims} dimensions but the file ends at byte {}",
            4 + sizes.len()
        )));
    }
    let dims: Vec<usize> = sizes
        .chunks_exact(4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .collect();
    Ok((kind, dims))
}

/// Reads an IDX stream: the raw file (`file_len` known) or its decompressed gzip stream.
/// A declaration past `memory` is refused before anything is allocated for it.
fn from_reader(mut r: impl Read, file_len: Option<u64>, memory: u64) -> Result<Idx, Fail> {
    let (kind, dims) = header(&mut r)?;
    let ndims = dims.len();
    let header = 4 + 4 * ndims;
    // (a corrupt header may declare 255 dimensions: the first few say enough)
    let mut dims_txt = (dims.iter().take(8))
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("x");
    if dims.len() > 8 {
        dims_txt += &format!("x... ({ndims} dimensions)");
    }
    if let Some(i) = dims.iter().position(|&d| d == 0) {
        return Err(Fail::Format(format!(
            "header (byte 4..{header}) declares {dims_txt}: dimension {i} is 0, so the file holds no samples; is it the right file?"
        )));
    }
    let elem: u64 = if kind == UBYTE { 1 } else { 4 };
    let want = dims
        .iter()
        .try_fold(elem, |acc, &d| acc.checked_mul(d as u64))
        .ok_or_else(|| {
            format!("header (byte 4..{header}) declares {dims_txt} elements, more than 64-bit sizes count: not an IDX file, or corrupt")
        })?;
    // loading holds the raw bytes, the samples as f32, and the train/validation split's copy
    let in_memory = want.saturating_add((want / elem).saturating_mul(8));
    if in_memory > memory {
        return Err(Fail::Format(format!(
            "header (byte 4..{header}) declares {dims_txt} = {want} bytes of data, about {} in memory once loaded (as floats, split), more than {}: not an IDX file, or corrupt, or too large for this machine",
            crate::text::bytes(in_memory),
            host_memory::memory_text()
        )));
    }
    let mismatch = |have: String, long: bool| {
        let what = match long {
            true => "the file has bytes past its data (two files joined?) or is not IDX",
            false => "the file is truncated or not IDX",
        };
        Fail::Format(format!(
            "header (byte 4..{header}) says {dims_txt} = {want} bytes of data but {have} follow; {what}"
        ))
    };
    // a raw file's length is known: a mismatch is refused before its data is read
    let raw_have = file_len.map(|len| len.saturating_sub(header as u64));
    if let Some(have) = raw_have.filter(|&h| h != want) {
        return Err(mismatch(have.to_string(), have > want));
    }
    let mut data = Vec::with_capacity(raw_have.unwrap_or(0) as usize);
    (&mut r).take(want + 1).read_to_end(&mut data)?;
    let have = data.len() as u64;
    if have > want && file_len.is_none() {
        return Err(Fail::Format(format!(
            "decompresses to more than its header declares ({} bytes): not an IDX file, or corrupt",
            header as u64 + want
        )));
    }
    if have != want {
        return Err(match have > want {
            true => mismatch(format!("more than {want}"), true),
            false => mismatch(have.to_string(), false),
        });
    }
    Ok(Idx { kind, dims, data })
}

/// Loads an images file and a labels file; u8 images are scaled by 1/255. The image shape comes
/// from the images file's header (see [`idx_images`]: 3-d is 1xHxW, 4-d channels first or last
/// as `layout` says or as guessed); channels-last images are turned into CHW. Also returns how
/// a 4-d layout was decided, for the data description (empty for other files).
pub(super) fn load(
    images: &Path,
    labels: &Path,
    layout: Option<ImageLayout>,
    flag: &'static str,
) -> Result<(Dataset, Normalisation, String), DataError> {
    let im = read(images, flag)?;
    let how = idx_images(&im.dims, layout, flag).map_err(|m| fmt_err(images, m))?;
    let lb = read(labels, flag)?;
    if lb.kind != UBYTE || lb.dims.len() != 1 {
        return Err(fmt_err(labels, "a labels file must be 1-dimensional unsigned bytes (idx1-ubyte); did you swap images and labels?".into()));
    }
    let n = im.dims[0];
    if n != lb.dims[0] {
        return Err(fmt_err(
            labels,
            format!(
                "{} labels but {} has {n} images; pass matching files",
                lb.dims[0],
                images.display()
            ),
        ));
    }
    // cannot overflow: the product of all the dimensions was checked when the file was read
    let features: usize = im.dims[1..].iter().product();
    let (mut x, norm): (Vec<f32>, _) = if im.kind == UBYTE {
        (
            im.data.iter().map(|&b| b as f32).collect(),
            Normalisation::Scale(1.0 / 255.0),
        )
    } else {
        let x: Vec<f32> = im
            .data
            .chunks_exact(4)
            .map(|c| f32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if let Some(i) = x.iter().position(|v| !v.is_finite()) {
            return Err(fmt_err(
                images,
                format!(
                    "image {}, value {}: {} is not a finite number; the images must not hold NaN or infinite values",
                    i / features,
                    i % features,
                    x[i]
                ),
            ));
        }
        (x, Normalisation::None)
    };
    drop(im.data);
    if let (true, Some(shape)) = (how.hwc, how.shape) {
        hwc_to_chw(&mut x, shape);
    }
    let y = lb.data.iter().map(|&b| b as u32).collect();
    let mut ds = finish(features, x, y).map_err(|m| fmt_err(labels, m))?;
    ds.image = how.shape;
    Ok((ds, norm, how.note))
}

#[cfg(test)]
mod tests;
