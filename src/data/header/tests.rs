use std::io::Cursor;
use std::path::{Path, PathBuf};

use image::{ImageBuffer, ImageFormat, Luma, Rgb, Rgba};

use super::*;

type Rgb8 = ImageBuffer<Rgb<u8>, Vec<u8>>;

/// A w x h picture of seeded noise (JPEG cannot shrink it much).
fn noise(w: u32, h: u32, seed: u32) -> Rgb8 {
    let mut s = seed.wrapping_mul(2_654_435_761).max(1);
    ImageBuffer::from_fn(w, h, |_, _| {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        Rgb([s as u8, (s >> 8) as u8, (s >> 16) as u8])
    })
}

fn jpeg(img: &Rgb8) -> Vec<u8> {
    let mut out = Vec::new();
    let enc = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 95);
    img.write_with_encoder(enc).unwrap();
    out
}

fn png<P: image::PixelWithColorType>(img: &ImageBuffer<P, Vec<P::Subpixel>>) -> Vec<u8>
where
    [P::Subpixel]: image::EncodableLayout,
{
    let mut out = Vec::new();
    img.write_to(&mut Cursor::new(&mut out), ImageFormat::Png)
        .unwrap();
    out
}

/// A TIFF block whose first directory holds a Make entry, then Orientation = `orientation`.
fn exif(big: bool, orientation: u16) -> Vec<u8> {
    let u16b = |v: u16| match big {
        true => v.to_be_bytes(),
        false => v.to_le_bytes(),
    };
    let u32b = |v: u32| match big {
        true => v.to_be_bytes(),
        false => v.to_le_bytes(),
    };
    let mut t = match big {
        true => b"MM\0*".to_vec(),
        false => b"II*\0".to_vec(),
    };
    t.extend(u32b(8));
    t.extend(u16b(2));
    for (tag, format, value) in [(0x010F, 2, 0x41), (0x0112, 3, orientation)] {
        t.extend(u16b(tag));
        t.extend(u16b(format));
        t.extend(u32b(1));
        t.extend(u16b(value));
        t.extend([0, 0]);
    }
    t.extend(u32b(0));
    t
}

/// `jpeg` with segments (marker code, body) put right after its start-of-image marker.
fn with_segments(jpeg: &[u8], segments: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut out = jpeg[..2].to_vec();
    for (code, body) in segments {
        out.extend([0xFF, *code]);
        out.extend(((body.len() + 2) as u16).to_be_bytes());
        out.extend(body);
    }
    out.extend(&jpeg[2..]);
    out
}

fn app1_exif(big: bool, orientation: u16) -> (u8, Vec<u8>) {
    let mut body = b"Exif\0\0".to_vec();
    body.extend(exif(big, orientation));
    (0xE1, body)
}

/// `png` with a chunk put right after its IHDR.
fn with_chunk(png: &[u8], kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let mut out = png[..33].to_vec();
    out.extend((data.len() as u32).to_be_bytes());
    let mut crc = flate2::Crc::new();
    crc.update(kind);
    crc.update(data);
    out.extend(kind);
    out.extend(data);
    out.extend(crc.sum().to_be_bytes());
    out.extend(&png[33..]);
    out
}

fn file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn an_empty_file_is_said_empty() {
    let tmp = tempfile::tempdir().unwrap();
    let e = dimensions(&file(tmp.path(), "zero.jpg", b"")).unwrap_err();
    assert_eq!(e, "an empty file (0 bytes), not a picture");
    let e = dimensions(&file(tmp.path(), "text.jpg", b"hello")).unwrap_err();
    assert!(e.contains("begins with neither format's signature"), "{e}");
}

/// The header's size agrees with the decoded picture's, orientation applied.
fn agrees(path: &Path) -> (usize, usize) {
    let got = dimensions(path).unwrap();
    let p = decode::decode(path).unwrap();
    assert_eq!(got, (p.w, p.h), "{}", path.display());
    got
}

#[test]
fn sizes_and_orientations_agree_with_the_decoded_pictures() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let plain = jpeg(&noise(37, 21, 1));
    assert_eq!(agrees(&file(d, "plain.jpg", &plain)), (37, 21));
    for big in [false, true] {
        for o in 0..=9 {
            let f = file(d, "o.jpg", &with_segments(&plain, &[app1_exif(big, o)]));
            let want = match o {
                5..=8 => (21, 37),
                _ => (37, 21),
            };
            assert_eq!(agrees(&f), want, "orientation {o}, big-endian {big}");
        }
    }
    // the last EXIF segment counts, as the decoder takes it
    for (first, last) in [(6, 1), (1, 6)] {
        let both = [app1_exif(false, first), app1_exif(true, last)];
        agrees(&file(d, "two.jpg", &with_segments(&plain, &both)));
    }
    // segments past the first window: two ICC-sized APP2s, then the EXIF one
    let big = [
        (0xE2, vec![7u8; 65_000]),
        (0xE2, vec![9u8; 65_000]),
        app1_exif(false, 8),
    ];
    let far = file(d, "far.jpg", &with_segments(&plain, &big));
    assert_eq!(agrees(&far), (21, 37));
    // bytes between segments are passed over, and every marker but the scan's has a segment
    // (a restart marker's hides what looks like a frame header), as the decoder reads them
    let app0 = 4 + u16::from_be_bytes([plain[4], plain[5]]) as usize;
    let padded = [&plain[..app0], &[0x55; 5000], &plain[app0..]].concat();
    assert_eq!(agrees(&file(d, "padded.jpg", &padded)), (37, 21));
    let fake = vec![0xFF, 0xC0, 0, 11, 8, 0, 16, 0, 16, 1, 1, 0x11, 0];
    let hidden = file(d, "hidden.jpg", &with_segments(&plain, &[(0xD0, fake)]));
    assert_eq!(agrees(&hidden), (37, 21));
    // PNGs of several colour types, and an eXIf chunk before the image data
    let rgb = png(&noise(13, 9, 2));
    assert_eq!(agrees(&file(d, "a.png", &rgb)), (13, 9));
    let grey: ImageBuffer<Luma<u16>, Vec<u16>> =
        ImageBuffer::from_fn(5, 11, |x, _| Luma([x as u16]));
    assert_eq!(agrees(&file(d, "g.png", &png(&grey))), (5, 11));
    let rgba: ImageBuffer<Rgba<u8>, Vec<u8>> = ImageBuffer::from_fn(6, 4, |_, _| Rgba([1; 4]));
    assert_eq!(agrees(&file(d, "rgba.png", &png(&rgba))), (6, 4));
    for o in [1, 6] {
        let turned = with_chunk(&rgb, b"eXIf", &exif(true, o));
        agrees(&file(d, "exif.png", &turned));
        // the first of two counts, and one whose checksum fails none
        let two = with_chunk(&turned, b"eXIf", &exif(true, 7 - o));
        agrees(&file(d, "two.png", &two));
        let mut damaged = turned.clone();
        damaged[33 + 8 + exif(true, o).len()] ^= 1; // its checksum
        assert_eq!(agrees(&file(d, "bad_exif.png", &damaged)), (13, 9));
    }
}

#[test]
fn only_the_header_is_read() {
    let tmp = tempfile::tempdir().unwrap();
    let bytes = jpeg(&noise(1200, 900, 3));
    assert!(bytes.len() > 4 * WINDOW, "{}", bytes.len());
    let path = file(tmp.path(), "photo.jpg", &bytes);
    let (file, len) = decode::open_file(&path).unwrap();
    let mut head = Head {
        file,
        len,
        at: 0,
        buf: Vec::new(),
        fetched: 0,
    };
    assert_eq!(upright(&mut head), Ok((1200, 900)));
    assert_eq!(head.fetched, WINDOW as u64);
}

#[test]
fn unreadable_headers_say_why() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let err = |name: &str, bytes: &[u8]| dimensions(&file(d, name, bytes)).unwrap_err();
    let plain = jpeg(&noise(8, 8, 4));
    let signature = "begins with neither format's signature";
    for (name, bytes) in [("text.jpg", &b"hello"[..]), ("zip.png", b"PK\x03\x04")] {
        let e = err(name, bytes);
        assert!(
            e.contains("not a readable JPEG or PNG") && e.contains(signature),
            "{e}"
        );
    }
    // a format this program does not read, under a JPEG's or PNG's name: named
    for (name, bytes, format) in [
        ("gif.jpg", &b"GIF89a\x01\0\x01\0"[..], "a GIF"),
        ("webp.jpg", b"RIFF\0\0\0\0WEBPVP8 ", "a WebP"),
        ("bmp.png", b"BM\0\0\0\0\0\0\0\0", "a BMP"),
    ] {
        let e = err(name, bytes);
        assert!(
            e.starts_with(&format!("{format} picture")) && e.contains("convert it to PNG"),
            "{e}"
        );
    }
    // cut short inside a segment past the first window
    let long = with_segments(&plain, &[(0xE2, vec![0; 65_000]), (0xE2, vec![0; 65_000])]);
    let e = err("cut.jpg", &long[..100_000]);
    assert!(e.contains("ends at byte 100000 inside its header"), "{e}");
    // an arithmetic-coded frame: named, with the fix
    let sof = plain.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
    let mut arith = plain.clone();
    arith[sof + 1] = 0xC9;
    let e = err("arith.jpg", &arith);
    assert!(
        e.contains("0xFFC9") && e.contains("re-save it as a baseline or progressive JPEG"),
        "{e}"
    );
    let mut deep = plain.clone();
    deep[sof + 4] = 12;
    assert!(err("deep.jpg", &deep).contains("12 bits a sample"));
    let frame = plain[sof..sof + 19].to_vec();
    let twice = [&plain[..sof], &frame, &plain[sof..]].concat();
    assert!(err("twice.jpg", &twice).contains("two frame headers"));
    for (name, bytes, why) in [
        ("eoi.jpg", &b"\xFF\xD8\xFF\xD9"[..], "before any image data"),
        ("scan.jpg", b"\xFF\xD8\xFF\xDA\0\x02\0\0", "no frame header"),
        ("short.jpg", b"\xFF\xD8\xFF\xE0\0\x01", "length 1"),
        (
            "gap.jpg",
            &[&[0xFF, 0xD8][..], &[0u8; 5000]].concat(),
            "ends at byte 5002",
        ),
        // past a megabyte of nothing but fill or padding, no marker is looked for further
        (
            "fill.jpg",
            &[&[0xFF, 0xD8, 0xFF][..], &vec![0u8; 1_100_000]].concat(),
            "no marker at byte 2",
        ),
        (
            "pad.jpg",
            &[&[0xFF, 0xD8][..], &vec![7u8; 1_100_000]].concat(),
            "no marker at byte 2",
        ),
    ] {
        let e = err(name, bytes);
        assert!(e.contains(why), "{name}: {e}");
    }
    // a PNG's damaged IHDR, one that declares no valid PNG, one without image data, a bomb
    let good = png(&noise(4, 4, 5));
    let mut damaged = good.clone();
    damaged[18] ^= 1;
    assert!(err("crc.png", &damaged).contains("fails its checksum"));
    let mut ihdr = good[12..29].to_vec();
    ihdr[13] = 5; // colour type 5
    let mut crc = flate2::Crc::new();
    crc.update(&ihdr);
    let odd = [&good[..12], &ihdr, &crc.sum().to_be_bytes(), &good[33..]].concat();
    assert!(err("odd.png", &odd).contains("colour type 5"));
    let unknown = with_chunk(&good, b"ABCD", b"?");
    assert!(err("unknown.png", &unknown).contains("ABCD chunk is critical and unknown"));
    // a type damaged into bytes that are no letters is said to be damaged, by its bytes
    let damaged = unknown
        .windows(4)
        .position(|w| w == b"ABCD")
        .map(|at| {
            let mut d = unknown.clone();
            d[at + 3] = 0x0e;
            d
        })
        .unwrap();
    let said = err("damaged.png", &damaged);
    assert!(
        said.contains("(bytes 41 42 43 0e): the file is damaged"),
        "{said}"
    );
    let end = good.len() - 12;
    let idat = good.windows(4).position(|w| w == b"IDAT").unwrap() - 4;
    let no_data = [&good[..idat], &good[end..]].concat();
    assert!(err("nodata.png", &no_data).contains("before any image data"));
    let mut ihdr = good[12..29].to_vec();
    ihdr[4..12].copy_from_slice(&[0, 1, 0x86, 0xA0, 0, 1, 0x86, 0xA0]);
    let mut crc = flate2::Crc::new();
    crc.update(&ihdr);
    let bomb = [&good[..12], &ihdr, &crc.sum().to_be_bytes(), &good[33..]].concat();
    assert!(err("bomb.png", &bomb).contains("larger than 32768 pixels a side"));
    // a bomb's header alone is refused for its size, as the decoder refuses it
    let e = err("bomb_head.png", &bomb[..33]);
    assert!(e.contains("larger than 32768 pixels a side"), "{e}");
    let mut huge = plain[..sof + 10].to_vec();
    huge[sof + 5..sof + 9].copy_from_slice(&[0x40, 0, 0x40, 0]);
    let e = err("bomb_head.jpg", &huge);
    assert!(e.contains("declares 16384x16384 pixels"), "{e}");
}
