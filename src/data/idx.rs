//! IDX, the MNIST / Fashion-MNIST file format (raw or gzip): a big-endian header
//! `0 0 TYPE NDIMS`, NDIMS u32 sizes, then the data.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::{finish, DataError, Dataset, Normalisation};

const UBYTE: u8 = 0x08;
const FLOAT: u8 = 0x0D;

struct Idx {
    kind: u8,
    dims: Vec<usize>,
    data: Vec<u8>,
}

fn read(path: &Path) -> Result<Idx, DataError> {
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let raw = std::fs::read(path).map_err(io)?;
    let bytes = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .map_err(|e| {
                fmt_err(
                    path,
                    format!("gzip data is corrupt ({e}); download the file again"),
                )
            })?;
        out
    } else {
        raw
    };
    parse(&bytes).map_err(|msg| fmt_err(path, msg))
}

fn fmt_err(path: &Path, msg: String) -> DataError {
    DataError::Format {
        path: PathBuf::from(path),
        msg,
    }
}

fn parse(bytes: &[u8]) -> Result<Idx, String> {
    if bytes.len() < 4 || bytes[0] != 0 || bytes[1] != 0 {
        return Err(
            "not an IDX file: the first two bytes must be 0 (is it an MNIST idx1/idx3 file?)"
                .into(),
        );
    }
    let kind = bytes[2];
    if kind != UBYTE && kind != FLOAT {
        return Err(format!("byte 2: element type 0x{kind:02X} is not supported; use unsigned bytes (0x08) or f32 (0x0D)"));
    }
    let ndims = bytes[3] as usize;
    let header = 4 + 4 * ndims;
    if ndims == 0 || bytes.len() < header {
        return Err(format!(
            "header says {ndims} dimensions but the file ends at byte {}",
            bytes.len()
        ));
    }
    let dims: Vec<usize> = (0..ndims)
        .map(|i| u32::from_be_bytes(bytes[4 + 4 * i..8 + 4 * i].try_into().unwrap()) as usize)
        .collect();
    let elem = if kind == UBYTE { 1 } else { 4 };
    let want = dims.iter().product::<usize>() * elem;
    let have = bytes.len() - header;
    if have != want {
        let dims_txt: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
        return Err(format!(
            "header (byte 4..{header}) says {} = {want} bytes of data but {have} follow; the file is truncated or not IDX",
            dims_txt.join("x")
        ));
    }
    Ok(Idx {
        kind,
        dims,
        data: bytes[header..].to_vec(),
    })
}

/// Loads an images file and a labels file; u8 images are scaled by 1/255.
pub(super) fn load(images: &Path, labels: &Path) -> Result<(Dataset, Normalisation), DataError> {
    let im = read(images)?;
    let lb = read(labels)?;
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
    let features: usize = im.dims[1..].iter().product();
    let (x, norm) = if im.kind == UBYTE {
        (
            im.data.iter().map(|&b| b as f32).collect(),
            Normalisation::Scale(1.0 / 255.0),
        )
    } else {
        (
            im.data
                .chunks_exact(4)
                .map(|c| f32::from_be_bytes(c.try_into().unwrap()))
                .collect(),
            Normalisation::None,
        )
    };
    let y = lb.data.iter().map(|&b| b as u32).collect();
    let ds = finish(features.max(1), x, y).map_err(|m| fmt_err(labels, m))?;
    Ok((ds, norm))
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn idx_bytes(kind: u8, dims: &[u32], data: &[u8]) -> Vec<u8> {
        let mut v = vec![0, 0, kind, dims.len() as u8];
        for d in dims {
            v.extend_from_slice(&d.to_be_bytes());
        }
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn parses_and_rejects() {
        let ok = parse(&idx_bytes(UBYTE, &[2, 2, 2], &[0; 8])).unwrap();
        assert_eq!(ok.dims, vec![2, 2, 2]);
        let e = parse(&idx_bytes(UBYTE, &[2, 2, 2], &[0; 7])).err().unwrap();
        assert!(e.contains("2x2x2 = 8 bytes of data but 7 follow"), "{e}");
        let e = parse(b"PK\x03\x04").err().unwrap();
        assert!(e.contains("not an IDX file"), "{e}");
        let e = parse(&idx_bytes(0x0B, &[1], &[0, 0])).err().unwrap();
        assert!(e.contains("0x0B"), "{e}");
    }

    #[test]
    fn loads_gzip_and_raw_pairs() {
        let dir = tempfile::tempdir().unwrap();
        let imgs = dir.path().join("img.gz");
        let labs = dir.path().join("lab");
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut enc, &idx_bytes(UBYTE, &[3, 2], &[0, 255, 51, 0, 0, 0]))
            .unwrap();
        std::fs::write(&imgs, enc.finish().unwrap()).unwrap();
        std::fs::write(&labs, idx_bytes(UBYTE, &[3], &[1, 0, 2])).unwrap();
        let (ds, norm) = load(&imgs, &labs).unwrap();
        assert_eq!((ds.len(), ds.features, ds.classes), (3, 2, 3));
        assert_eq!(norm, Normalisation::Scale(1.0 / 255.0));
        std::fs::write(&labs, idx_bytes(UBYTE, &[2], &[1, 0])).unwrap();
        let e = load(&imgs, &labs).err().unwrap().to_string();
        assert!(e.contains("2 labels but") && e.contains("3 images"), "{e}");
    }
}
