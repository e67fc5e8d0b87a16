//! JPEG and PNG files to [`Picture`]s (through the `image` crate: zune-jpeg and png), with EXIF
//! orientation applied, any colour type brought to 8-bit RGB (greyscale repeated, alpha dropped,
//! 16-bit rounded), and a cap on the pixels a file may declare, so a decompression bomb is
//! refused before anything is allocated for it.

use std::io::BufReader;
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

fn open(path: &Path) -> Result<impl ImageDecoder, String> {
    use std::os::unix::fs::OpenOptionsExt;
    // (without blocking: a FIFO put in a picture's place is refused, not waited on)
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("cannot open: {e}"))?;
    match file.metadata() {
        Ok(m) if m.is_file() => {}
        Ok(m) => return Err(format!("{}, not a regular file", super::read::kind_of(&m))),
        Err(e) => return Err(format!("cannot open: {e}")),
    }
    let mut reader = ImageReader::new(BufReader::new(file))
        .with_guessed_format()
        .map_err(|e| format!("cannot read: {e}"))?;
    reader.limits(limits());
    let decoder = reader
        .into_decoder()
        .map_err(|e| match e {
            ImageError::Limits(_) => format!(
                "declares an image larger than {MAX_SIDE} pixels a side or {MAX_PIXELS} pixels in all; resize it, or remove it from the folder"
            ),
            e => format!("not a readable JPEG or PNG: {}", e.to_string().trim_end()),
        })?;
    let (w, h) = decoder.dimensions();
    if w == 0 || h == 0 || w as u64 * h as u64 > MAX_PIXELS {
        return Err(format!(
            "declares {w}x{h} pixels; images of 1 to {MAX_PIXELS} pixels are read (resize it, or remove it from the folder)"
        ));
    }
    Ok(decoder)
}

/// A file's width and height as it will be seen (after its EXIF orientation), from its
/// header alone.
pub fn dimensions(path: &Path) -> Result<(usize, usize), String> {
    let mut d = open(path)?;
    let (w, h) = d.dimensions();
    let turned = matches!(
        d.orientation()
            .unwrap_or(image::metadata::Orientation::NoTransforms),
        image::metadata::Orientation::Rotate90
            | image::metadata::Orientation::Rotate270
            | image::metadata::Orientation::Rotate90FlipH
            | image::metadata::Orientation::Rotate270FlipH
    );
    Ok(if turned {
        (h as usize, w as usize)
    } else {
        (w as usize, h as usize)
    })
}

/// Decodes a whole file to 8-bit RGB, upright.
pub fn decode(path: &Path) -> Result<Picture, String> {
    let mut d = open(path)?;
    let orientation = d
        .orientation()
        .unwrap_or(image::metadata::Orientation::NoTransforms);
    let mut img = DynamicImage::from_decoder(d)
        .map_err(|e| format!("cannot be decoded: {}", e.to_string().trim_end()))?;
    img.apply_orientation(orientation);
    let rgb = img.into_rgb8();
    let (w, h) = (rgb.width() as usize, rgb.height() as usize);
    Ok(Picture {
        w,
        h,
        rgb: rgb.into_raw(),
    })
}
