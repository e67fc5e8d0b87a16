//! JPEG and PNG files to [`Picture`]s (through the `image` crate: zune-jpeg and png), with EXIF
//! orientation applied, any colour type brought to 8-bit RGB (greyscale repeated, alpha dropped,
//! 16-bit rounded), and a cap on the pixels a file may declare, so a decompression bomb is
//! refused before anything is allocated for it.

use std::io::{BufRead, Cursor, Read, Seek};
use std::path::Path;

use image::{DynamicImage, ImageDecoder, ImageError, ImageReader, Limits};

use super::picture::Picture;

/// The most pixels a file may declare (a 64-megapixel photo; 192 MiB as RGB).
pub const MAX_PIXELS: u64 = 64 << 20;

/// The longest side a file may declare.
const MAX_SIDE: u32 = 1 << 15;

fn limits() -> Limits {
    let mut l = Limits::default();
    l.max_image_width = Some(MAX_SIDE);
    l.max_image_height = Some(MAX_SIDE);
    // the decoder's own buffers besides the RGB result (a 16-bit RGBA image is 8 bytes a pixel)
    l.max_alloc = Some(MAX_PIXELS * 8 + (16 << 20));
    l
}

/// The most bytes a picture file may hold (far past any JPEG or PNG of `MAX_PIXELS`).
const MAX_FILE: u64 = 1 << 30;

/// `path` opened for reading, with its length: a regular file, or why not.
pub(super) fn open_file(path: &Path) -> Result<(std::fs::File, u64), String> {
    use std::os::unix::fs::OpenOptionsExt;
    // (without blocking: a FIFO put in a picture's place is refused, not waited on)
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("cannot open: {e}"))?;
    match file.metadata() {
        Ok(m) if m.is_file() => Ok((file, m.len())),
        Ok(m) => Err(format!(
            "{}, not a regular file",
            crate::files::read::kind_of(m.file_type())
        )),
        Err(e) => Err(format!("cannot open: {e}")),
    }
}

fn too_large_a_side() -> String {
    format!(
        "declares an image larger than {MAX_SIDE} pixels a side or {MAX_PIXELS} pixels in all; resize it, or remove it from the folder"
    )
}

/// Whether a picture may be as large as its header declares: 1 to `MAX_SIDE` pixels a side,
/// at most `MAX_PIXELS` in all (a decompression bomb is refused before anything is allocated).
pub(super) fn declared(w: u32, h: u32) -> Result<(), String> {
    if w > MAX_SIDE || h > MAX_SIDE {
        return Err(too_large_a_side());
    }
    if w == 0 || h == 0 || w as u64 * h as u64 > MAX_PIXELS {
        return Err(format!(
            "declares {w}x{h} pixels; images of 1 to {MAX_PIXELS} pixels are read (resize it, or remove it from the folder)"
        ));
    }
    Ok(())
}

fn decoder(read: impl BufRead + Seek + 'static) -> Result<impl ImageDecoder, String> {
    let mut reader = ImageReader::new(read)
        .with_guessed_format()
        .map_err(|e| format!("cannot read: {e}"))?;
    reader.limits(limits());
    let decoder = reader.into_decoder().map_err(|e| match e {
        ImageError::Limits(_) => too_large_a_side(),
        e => format!("not a readable JPEG or PNG: {}", plain(&e)),
    })?;
    let (w, h) = decoder.dimensions();
    declared(w, h)?;
    Ok(decoder)
}

/// A decoder's error as words: the PNG decoder's debug form of a chunk's type
/// (`ChunkType { type: IDAT, critical: true, ... }`) as its name, the trailing space and
/// full stop dropped.
fn plain(e: &ImageError) -> String {
    let mut said = e.to_string();
    const CHUNK: &str = "ChunkType { type: ";
    while let Some(at) = said.find(CHUNK) {
        let rest = &said[at + CHUNK.len()..];
        let (Some(name_end), Some(end)) = (rest.find(','), rest.find('}')) else {
            break;
        };
        said = format!(
            "{}{}{}",
            &said[..at],
            &rest[..name_end.min(end)],
            &rest[end + 1..]
        );
    }
    said.trim_end().trim_end_matches(['.', ';']).to_string()
}

/// Decodes a whole file to 8-bit RGB, upright.
pub fn decode(path: &Path) -> Result<Picture, String> {
    let (file, len) = open_file(path)?;
    let too_large = || {
        format!(
            "is larger than {} MiB; no picture needs that (remove it from the folder)",
            MAX_FILE >> 20
        )
    };
    if len > MAX_FILE {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(too_large());
    }
    if jpeg_cut_short(&bytes) {
        // (the JPEG decoder fills what is missing with grey rather than failing)
        return Err(
            "cannot be decoded: the JPEG is cut short (no end-of-image marker after its last scan)"
                .into(),
        );
    }
    let mut d = decoder(Cursor::new(without_colour_profile(bytes)))?;
    let orientation = d
        .orientation()
        .unwrap_or(image::metadata::Orientation::NoTransforms);
    let mut img =
        DynamicImage::from_decoder(d).map_err(|e| format!("cannot be decoded: {}", plain(&e)))?;
    img.apply_orientation(orientation);
    let rgb = img.into_rgb8();
    let (w, h) = (rgb.width() as usize, rgb.height() as usize);
    Ok(Picture {
        w,
        h,
        rgb: rgb.into_raw(),
    })
}

/// A PNG's bytes without its colour profile (iCCP chunk, before the image data), other files'
/// as they are. The pictures are taken as sRGB, so the profile is never used, and the decoder
/// would inflate it within the limit set for the pixels: a 4 MiB file whose profile is 4 GiB of
/// zeros cost over 500 MiB and 0.4 s of a core per decoding (PIL refuses a profile past 1 MiB).
fn without_colour_profile(bytes: Vec<u8>) -> Vec<u8> {
    const SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";
    if !bytes.starts_with(SIGNATURE) {
        return bytes;
    }
    let mut pos = SIGNATURE.len();
    // (a chunk: its data's length, its type, the data, a checksum; a walk that runs past the
    // end leaves the file to the decoder, to be said damaged there)
    while let Some(head) = bytes.get(pos..pos + 8) {
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let end = pos.saturating_add(12).saturating_add(len);
        match &head[4..] {
            b"iCCP" if end <= bytes.len() => {
                let mut out = bytes[..pos].to_vec();
                out.extend_from_slice(&bytes[end..]);
                return out;
            }
            b"IDAT" | b"IEND" => break,
            _ => pos = end,
        }
    }
    bytes
}

/// A JPEG whose bytes end before its end-of-image marker: a file cut short. Walked as a
/// decoder reads it: segments by their lengths (an EXIF thumbnail inside APP1 is skipped whole),
/// each scan's entropy-coded data up to the next marker (`FF 00` and restart markers are
/// inside it); whatever follows the end marker (a phone's trailer) is not looked at. A file
/// whose structure is broken otherwise is left to the decoder.
fn jpeg_cut_short(b: &[u8]) -> bool {
    if !b.starts_with(&[0xFF, 0xD8]) {
        return false;
    }
    let mut i = 2;
    loop {
        if i >= b.len() {
            return true;
        }
        if b[i] != 0xFF {
            return false;
        }
        while i < b.len() && b[i] == 0xFF {
            i += 1;
        }
        let Some(&marker) = b.get(i) else {
            return true;
        };
        i += 1;
        match marker {
            0xD9 => return false,
            0x01 | 0xD0..=0xD7 => continue,
            _ => {}
        }
        let Some(len) = b.get(i..i + 2) else {
            return true;
        };
        let len = u16::from_be_bytes([len[0], len[1]]) as usize;
        if len < 2 {
            return false;
        }
        i += len;
        if marker == 0xDA {
            // the scan's data: to the first byte pair that is a marker of its own
            loop {
                match (b.get(i), b.get(i + 1)) {
                    (None, _) | (Some(_), None) => return true,
                    (Some(0xFF), Some(0x00 | 0xD0..=0xD7)) => i += 2,
                    (Some(0xFF), Some(0xFF)) => i += 1,
                    (Some(0xFF), Some(_)) => break,
                    _ => i += 1,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jpeg(w: u32, h: u32) -> Vec<u8> {
        // (noise: the scan, not the header, is most of the file)
        let img = image::RgbImage::from_fn(w, h, |x, y| {
            let n = (x * 7919 + y * 104_729) % 251;
            image::Rgb([n as u8, (n * 3) as u8, (x + y) as u8])
        });
        let mut out = Cursor::new(Vec::new());
        img.write_to(&mut out, image::ImageFormat::Jpeg).unwrap();
        out.into_inner()
    }

    #[test]
    fn a_png_s_colour_profile_is_not_inflated() {
        let dir = tempfile::tempdir().unwrap();
        let img = image::RgbImage::from_fn(8, 8, |x, y| image::Rgb([x as u8 * 30, y as u8, 7]));
        let mut png = Cursor::new(Vec::new());
        img.write_to(&mut png, image::ImageFormat::Png).unwrap();
        let png = png.into_inner();
        // a profile of 600 MiB of zeros, deflated to under 1 MiB, right after IHDR
        let mut data = b"bomb\0\0".to_vec();
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..600 {
            std::io::Write::write_all(&mut z, &zeros).unwrap();
        }
        data.extend(z.finish().unwrap());
        let mut bomb = png[..33].to_vec();
        bomb.extend((data.len() as u32).to_be_bytes());
        let mut crc = flate2::Crc::new();
        crc.update(b"iCCP");
        crc.update(&data);
        bomb.extend(b"iCCP");
        bomb.extend(&data);
        bomb.extend(crc.sum().to_be_bytes());
        bomb.extend(&png[33..]);
        assert_eq!(without_colour_profile(bomb.clone()), png);
        let f = dir.path().join("p.png");
        std::fs::write(&f, &bomb).unwrap();
        // (the profile past the decoder's allocation limit: refused, had it been inflated)
        let p = decode(&f).unwrap();
        assert_eq!((p.w, p.h, &p.rgb[..3]), (8, 8, &[0u8, 0, 7][..]));
        assert_eq!(p.rgb, img.into_raw());
    }

    #[test]
    fn a_jpeg_cut_short_is_refused_and_a_whole_one_with_a_trailer_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let whole = jpeg(160, 120);
        let f = dir.path().join("p.jpg");
        // bytes after the end (a phone's video or metadata trailer, markers and all) are no harm
        let mut trailer = whole.clone();
        trailer.extend_from_slice(&[0xFF, 0xDA, 0x00, 0x08, 1, 2, 0xFF, 0xD8, 0xFF, 0xDA, 9]);
        std::fs::write(&f, &trailer).unwrap();
        let p = decode(&f).unwrap();
        assert_eq!((p.w, p.h), (160, 120));
        for cut in [whole.len() - 2, whole.len() / 2, whole.len() - 40] {
            std::fs::write(&f, &whole[..cut]).unwrap();
            let e = decode(&f).unwrap_err();
            assert!(e.contains("the JPEG is cut short"), "{cut}: {e}");
        }
    }

    /// A PNG whose image data fails its checksum is said in words, not the decoder's debug
    /// form of the chunk's type.
    #[test]
    fn a_png_s_damaged_chunk_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let img = image::RgbImage::from_fn(8, 8, |x, y| image::Rgb([x as u8 * 30, y as u8, 7]));
        let mut png = Cursor::new(Vec::new());
        img.write_to(&mut png, image::ImageFormat::Png).unwrap();
        let mut png = png.into_inner();
        let idat = png.windows(4).position(|w| w == b"IDAT").unwrap();
        let len: [u8; 4] = png[idat - 4..idat].try_into().unwrap();
        // (its checksum, after the type and the data)
        png[idat + 4 + u32::from_be_bytes(len) as usize] ^= 0x55;
        let f = dir.path().join("p.png");
        std::fs::write(&f, &png).unwrap();
        let e = decode(&f).unwrap_err();
        assert!(e.contains("CRC error") && e.contains("IDAT"), "{e}");
        assert!(
            !e.contains("ChunkType {") && !e.contains("critical:"),
            "{e}"
        );
    }
}
