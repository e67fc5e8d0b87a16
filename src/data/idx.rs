//! IDX, the MNIST / Fashion-MNIST file format (raw or gzip): a big-endian header
//! `0 0 TYPE NDIMS`, NDIMS u32 sizes, then the data. Sizes from the header are checked before
//! anything is allocated, and nothing past what the header declares is read (a gzip bomb stops
//! there).

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

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
        let mut stream = flate2::bufread::GzDecoder::new(r);
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
                            "bytes follow its gzip stream (two files joined?); give the file as downloaded".into(),
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
        true => header(flate2::bufread::GzDecoder::new(&mut r)),
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
mod tests {
    use super::*;

    fn idx_bytes(kind: u8, dims: &[u32], data: &[u8]) -> Vec<u8> {
        let mut v = vec![0, 0, kind, dims.len() as u8];
        for d in dims {
            v.extend_from_slice(&d.to_be_bytes());
        }
        v.extend_from_slice(data);
        v
    }

    fn parse(bytes: &[u8]) -> Result<Idx, String> {
        from_reader(
            bytes,
            Some(bytes.len() as u64),
            host_memory::machine_memory().0,
        )
        .map_err(|f| match f {
            Fail::Format(m) => m,
            Fail::Io(e) => e.to_string(),
        })
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut enc, bytes).unwrap();
        enc.finish().unwrap()
    }

    #[test]
    fn parses_and_rejects() {
        let ok = parse(&idx_bytes(UBYTE, &[2, 2, 2], &[0; 8])).unwrap();
        assert_eq!(ok.dims, vec![2, 2, 2]);
        let e = parse(&idx_bytes(UBYTE, &[2, 2, 2], &[0; 7])).err().unwrap();
        assert!(e.contains("2x2x2 = 8 bytes of data but 7 follow"), "{e}");
        let e = parse(&idx_bytes(UBYTE, &[2, 2, 2], &[0; 9])).err().unwrap();
        assert!(e.contains("2x2x2 = 8 bytes of data but 9 follow"), "{e}");
        let e = parse(b"PK\x03\x04").err().unwrap();
        assert!(e.contains("not an IDX file"), "{e}");
        let e = parse(&idx_bytes(0x0B, &[1], &[0, 0])).err().unwrap();
        assert!(e.contains("0x0B"), "{e}");
        let e = parse(&[0, 0, 8, 0]).err().unwrap();
        assert!(e.contains("declares 0 dimensions"), "{e}");
        let e = parse(&[0, 0, 8, 3, 0, 0]).err().unwrap();
        assert!(
            e.contains("3 dimensions but the file ends at byte 6"),
            "{e}"
        );
    }

    #[test]
    fn header_sizes_are_checked_before_they_are_used() {
        for dims in [&[0u32, 28, 28][..], &[2, 0], &[0]] {
            let e = parse(&idx_bytes(UBYTE, dims, &[])).err().unwrap();
            assert!(
                e.contains("is 0, so the file holds no samples"),
                "{dims:?}: {e}"
            );
        }
        // the product wraps to 0 in 64 bits: 4 x 2^31 x 2^31 x 2^31 x 2^31 = 2^126
        let e = parse(&idx_bytes(FLOAT, &[1 << 31; 4], &[])).err().unwrap();
        assert!(e.contains("more than 64-bit sizes count"), "{e}");
        let e = parse(&idx_bytes(UBYTE, &[u32::MAX; 3], &[])).err().unwrap();
        assert!(e.contains("more than 64-bit sizes count"), "{e}");
        // fits in 64 bits, but not in any machine's memory: refused before allocating
        let e = parse(&idx_bytes(UBYTE, &[1 << 31, 1 << 31], &[1, 2]))
            .err()
            .unwrap();
        assert!(
            e.contains("4611686018427387904 bytes of data")
                && e.contains("once loaded")
                && e.contains("more than this machine's memory"),
            "{e}"
        );
    }

    #[test]
    fn a_gzip_stream_stops_at_what_the_header_declares() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("bomb.gz");
        let mut bomb = idx_bytes(UBYTE, &[2, 2], &[1, 2, 3, 4]);
        bomb.resize(64 << 20, 0);
        std::fs::write(&f, gzip(&bomb)).unwrap();
        let e = read(&f, "--data").err().unwrap().to_string();
        assert!(
            e.contains("decompresses to more than its header declares (16 bytes)"),
            "{e}"
        );
        assert!(!e.contains("download"), "{e}");
        let whole = gzip(&idx_bytes(UBYTE, &[4], &[0; 4]));
        std::fs::write(&f, &whole[..whole.len() - 10]).unwrap();
        let e = read(&f, "--data").err().unwrap().to_string();
        assert!(e.contains("gzip data is corrupt"), "{e}");
        std::fs::write(&f, gzip(&idx_bytes(UBYTE, &[4], &[0; 3]))).unwrap();
        let e = read(&f, "--data").err().unwrap().to_string();
        assert!(e.contains("4 = 4 bytes of data but 3 follow"), "{e}");
        // two files joined (`cat a.gz a.gz`), or bytes after the stream
        for tail in [whole.clone(), b"junk".to_vec()] {
            std::fs::write(&f, [whole.clone(), tail].concat()).unwrap();
            let e = read(&f, "--data").err().unwrap().to_string();
            assert!(e.contains("bytes follow its gzip stream"), "{e}");
        }
        std::fs::write(&f, &whole).unwrap();
        assert!(read(&f, "--data").is_ok());
        std::fs::write(&f, [whole.clone(), vec![0; 512]].concat()).unwrap();
        assert!(read(&f, "--data").is_ok(), "zero padding, as gzip takes it");
    }

    #[test]
    fn float_images_must_be_finite() {
        let dir = tempfile::tempdir().unwrap();
        let (imgs, labs) = (dir.path().join("img"), dir.path().join("lab"));
        let values = [0.5f32, 1.0, f32::NAN, 2.0];
        let data: Vec<u8> = values.iter().flat_map(|v| v.to_be_bytes()).collect();
        std::fs::write(&imgs, idx_bytes(FLOAT, &[2, 2], &data)).unwrap();
        std::fs::write(&labs, idx_bytes(UBYTE, &[2], &[1, 0])).unwrap();
        let e = load(&imgs, &labs, None, "--data")
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("image 1, value 0: NaN is not a finite number"),
            "{e}"
        );
        let data: Vec<u8> = [0.5f32, 1.0, 3.0, 2.0]
            .iter()
            .flat_map(|v| v.to_be_bytes())
            .collect();
        std::fs::write(&imgs, idx_bytes(FLOAT, &[2, 2], &data)).unwrap();
        let (ds, norm, _) = load(&imgs, &labs, None, "--data").unwrap();
        assert_eq!(
            (ds.x, norm),
            (vec![0.5, 1.0, 3.0, 2.0], Normalisation::None)
        );
    }

    #[test]
    fn loads_gzip_and_raw_pairs() {
        let dir = tempfile::tempdir().unwrap();
        let imgs = dir.path().join("img.gz");
        let labs = dir.path().join("lab");
        std::fs::write(
            &imgs,
            gzip(&idx_bytes(UBYTE, &[3, 2], &[0, 255, 51, 0, 0, 0])),
        )
        .unwrap();
        std::fs::write(&labs, idx_bytes(UBYTE, &[3], &[1, 0, 2])).unwrap();
        let (ds, norm, _) = load(&imgs, &labs, None, "--data").unwrap();
        assert_eq!((ds.len(), ds.features, ds.classes), (3, 2, 3));
        assert_eq!(norm, Normalisation::Scale(1.0 / 255.0));
        std::fs::write(&labs, idx_bytes(UBYTE, &[2], &[1, 0])).unwrap();
        let e = load(&imgs, &labs, None, "--data")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("2 labels but") && e.contains("3 images"), "{e}");
    }

    /// The shape a model is checked against before the data loads: the header's, where the
    /// file's length (a gzip file's recorded length) agrees with it; none where it does not
    /// (the load says why).
    #[test]
    fn a_sample_shape_is_read_from_a_header_the_file_bears_out() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("img");
        let cases: [(Vec<u8>, Option<Shape>); 5] = [
            (
                idx_bytes(UBYTE, &[2, 3, 2], &[0; 12]),
                Some(Shape::Image { c: 1, h: 3, w: 2 }),
            ),
            (
                gzip(&idx_bytes(FLOAT, &[2, 5], &[0; 40])),
                Some(Shape::Flat(5)),
            ),
            (
                idx_bytes(UBYTE, &[2, 2, 2, 3], &[0; 24]),
                Some(Shape::Image { c: 3, h: 2, w: 2 }),
            ),
            // cut short; a header of more than the file holds
            (idx_bytes(UBYTE, &[2, 3, 2], &[0; 11]), None),
            (gzip(&idx_bytes(UBYTE, &[u32::MAX, 9], &[0; 18])), None),
        ];
        for (bytes, shape) in cases {
            std::fs::write(&f, bytes).unwrap();
            assert_eq!(sample_shape(&f, None), shape);
        }
    }

    #[test]
    fn images_carry_their_shape_from_the_header() {
        let dir = tempfile::tempdir().unwrap();
        let (imgs, labs) = (dir.path().join("img"), dir.path().join("lab"));
        std::fs::write(&labs, idx_bytes(UBYTE, &[2], &[1, 0])).unwrap();
        // 3-d [N,H,W], as MNIST / Fashion-MNIST: 1xHxW
        std::fs::write(&imgs, idx_bytes(UBYTE, &[2, 3, 2], &[0; 12])).unwrap();
        let (ds, _, note) = load(&imgs, &labs, None, "--data").unwrap();
        assert_eq!(
            (ds.image, ds.features, note.as_str()),
            (Some([1, 3, 2]), 6, "")
        );
        let e = load(&imgs, &labs, Some(ImageLayout::ChannelsLast), "--data")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("layout=nhwc is for 4-d images files"), "{e}");
        // 4-d [N,H,W,C], 2x2 RGB: read as CHW
        let hwc: Vec<u8> = (0..24).collect();
        std::fs::write(&imgs, idx_bytes(UBYTE, &[2, 2, 2, 3], &hwc)).unwrap();
        let (ds, _, note) = load(&imgs, &labs, None, "--data").unwrap();
        assert_eq!(ds.image, Some([3, 2, 2]));
        assert!(note.contains("N,H,W,C (guessed from the sizes)"), "{note}");
        let red: Vec<f32> = ds.row(0)[..4].to_vec();
        assert_eq!(red, vec![0.0, 3.0, 6.0, 9.0]);
        assert_eq!(ds.row(1)[4..8].to_vec(), vec![13.0, 16.0, 19.0, 22.0]);
        // 4-d [N,C,H,W]: read as stored
        std::fs::write(&imgs, idx_bytes(UBYTE, &[2, 3, 2, 2], &hwc)).unwrap();
        let (ds, _, note) = load(&imgs, &labs, None, "--data").unwrap();
        assert_eq!(ds.image, Some([3, 2, 2]));
        assert!(note.contains("N,C,H,W"), "{note}");
        assert_eq!(ds.x, (0..24).map(|v| v as f32).collect::<Vec<_>>());
        // the same bytes, said to be channels last
        let (ds, _, note) = load(&imgs, &labs, Some(ImageLayout::ChannelsLast), "--data").unwrap();
        assert_eq!(ds.image, Some([2, 3, 2]));
        assert!(note.contains("(layout=nhwc)"), "{note}");
        assert_eq!(ds.row(0)[..6].to_vec(), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        // 2-d [N,D]: flat vectors
        std::fs::write(&imgs, idx_bytes(UBYTE, &[2, 5], &[0; 10])).unwrap();
        assert_eq!(load(&imgs, &labs, None, "--data").unwrap().0.image, None);
    }
}
