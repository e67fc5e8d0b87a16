//! A picture file's width and height as it will be seen (after its EXIF orientation), from the
//! first bytes of the file: a JPEG's markers walked to its start of scan (the frame header's
//! size, the last EXIF segment's orientation), a PNG's chunks walked to its image data (IHDR's
//! size, an eXIf chunk's orientation). What the decoders read to make their headers, without
//! reading the rest: the JPEG decoder reads a whole file for its header, and a folder's scan
//! reads every file's header at start (a photo set of 100 GB would be read whole for that).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::decode;

/// Bytes read at a time: one read holds the header of nearly every file (a camera's EXIF with
/// its thumbnail, an ICC profile).
const WINDOW: usize = 64 << 10;
/// Bytes between a JPEG's segments that are passed over looking for the next marker (the
/// decoder passes over any number; some encoders pad), before the file is called unreadable.
const MAX_GAP: u64 = 1 << 20;
/// The largest eXIf chunk of a PNG that is read for its orientation (larger is refused).
const MAX_EXIF: u64 = 16 << 20;

/// `path`'s width and height, upright, or why it cannot be read.
pub fn dimensions(path: &Path) -> Result<(usize, usize), String> {
    let (file, len) = decode::open_file(path)?;
    upright(&mut Head {
        file,
        len,
        at: 0,
        buf: Vec::new(),
        fetched: 0,
    })
}

/// The picture format a file's first bytes `magic` show, among those this program does not read.
fn other_format(magic: &[u8], head: &mut Head) -> Result<Option<&'static str>, String> {
    Ok(match magic {
        m if m.starts_with(b"GIF8") => Some("a GIF"),
        m if m.starts_with(b"BM") => Some("a BMP"),
        m if m.starts_with(b"RIFF") && head.len >= 12 && head.bytes(8, 4)? == b"WEBP" => {
            Some("a WebP")
        }
        _ => None,
    })
}

fn upright(head: &mut Head) -> Result<(usize, usize), String> {
    let len = head.len;
    let magic = head.bytes(0, 8.min(len as usize))?.to_vec();
    let (w, h, turned) = if magic.starts_with(&[0xFF, 0xD8]) {
        jpeg(head)?
    } else if magic == PNG_SIGNATURE {
        png(head)?
    } else if len == 0 {
        return Err("an empty file (0 bytes), not a picture".into());
    } else if let Some(format) = other_format(&magic, head)? {
        return Err(format!(
            "{format} picture under a JPEG's or PNG's name: only JPEG and PNG are read; convert it to PNG (or remove it)"
        ));
    } else {
        return Err("not a readable JPEG or PNG: it begins with neither format's signature".into());
    };
    Ok(match turned {
        true => (h as usize, w as usize),
        false => (w as usize, h as usize),
    })
}

/// The file, read a window at a time where it is asked for.
struct Head {
    file: File,
    len: u64,
    /// Where `buf` starts in the file.
    at: u64,
    buf: Vec<u8>,
    /// Bytes read so far.
    fetched: u64,
}

impl Head {
    /// `n` bytes at `pos`, or an error where the file ends before them.
    fn bytes(&mut self, pos: u64, n: usize) -> Result<&[u8], String> {
        let end = pos.checked_add(n as u64).filter(|&e| e <= self.len);
        let Some(end) = end else {
            return Err(format!(
                "not a readable JPEG or PNG: it ends at byte {} inside its header (cut short?)",
                self.len
            ));
        };
        if pos < self.at || end > self.at + self.buf.len() as u64 {
            let want = (n.max(WINDOW) as u64).min(self.len - pos) as usize;
            self.buf.resize(want, 0);
            self.file
                .read_exact_at(&mut self.buf, pos)
                .map_err(|e| format!("cannot read: {e}"))?;
            self.at = pos;
            self.fetched += want as u64;
        }
        let from = (pos - self.at) as usize;
        Ok(&self.buf[from..from + n])
    }

    fn byte(&mut self, pos: u64) -> Result<u8, String> {
        Ok(self.bytes(pos, 1)?[0])
    }

    fn be16(&mut self, pos: u64) -> Result<u16, String> {
        let b = self.bytes(pos, 2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn be32(&mut self, pos: u64) -> Result<u32, String> {
        let b = self.bytes(pos, 4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

fn not_jpeg(why: impl std::fmt::Display) -> String {
    format!("not a readable JPEG or PNG: a JPEG whose header {why}")
}

/// A JPEG's frame size (refused as soon as it is read where it is too large) and whether its
/// EXIF orientation turns it a quarter: the segments up to the first scan, as the JPEG decoder
/// reads them (the last EXIF segment's orientation counts).
fn jpeg(head: &mut Head) -> Result<(u32, u32, bool), String> {
    let (mut pos, mut frame, mut turned) = (2u64, None, false);
    loop {
        // a marker: 0xFF, any fill bytes (0xFF or 0), then its code; every code but the
        // scan's and the end's has a segment, as the decoder reads them
        let start = pos;
        while head.byte(pos)? != 0xFF {
            pos += 1;
            if pos - start > MAX_GAP {
                return Err(not_jpeg(format!("has no marker at byte {start}")));
            }
        }
        while matches!(head.byte(pos + 1)?, 0xFF | 0) {
            pos += 1;
            if pos - start > MAX_GAP {
                return Err(not_jpeg(format!("has no marker at byte {start}")));
            }
        }
        let code = head.byte(pos + 1)?;
        pos += 2;
        match code {
            0xD9 => {
                let why = "ends (an end-of-image marker) before any image data";
                return Err(not_jpeg(why));
            }
            0xDA => break,
            _ => {}
        }
        let len = head.be16(pos)? as u64;
        if len < 2 {
            let why = format!("has a segment of length {len} at byte {pos}");
            return Err(not_jpeg(why));
        }
        let body = pos + 2;
        match code {
            // baseline, extended and progressive Huffman frames
            0xC0..=0xC2 => {
                if frame.is_some() {
                    return Err(not_jpeg("has two frame headers"));
                }
                frame = Some(frame_size(head, body, len)?);
            }
            // lossless, hierarchical and arithmetic-coded frames, which are not decoded
            0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF => {
                return Err(format!(
                    "a JPEG of a kind that is not read (frame marker 0xFF{code:02X}: lossless, hierarchical or arithmetic-coded); re-save it as a baseline or progressive JPEG"
                ))
            }
            // arithmetic-coding conditioning, a height given after the image data
            0xCC | 0xDC => {
                return Err(format!(
                    "a JPEG of a kind that is not read (marker 0xFF{code:02X}: arithmetic coding or a height after the image data); re-save it as a baseline or progressive JPEG"
                ))
            }
            0xE1 if len - 2 > 6 && head.bytes(body, 6)? == b"Exif\0\0" => {
                turned = quarter_turn(head.bytes(body + 6, len as usize - 8)?);
            }
            _ => {}
        }
        pos = body + len - 2;
    }
    let (w, h) = frame.ok_or_else(|| not_jpeg("has no frame header before its image data"))?;
    Ok((w, h, turned))
}

/// A frame header's size, checked as the decoder checks it: 8 bits a sample, and as many
/// bytes as its components need.
fn frame_size(head: &mut Head, body: u64, len: u64) -> Result<(u32, u32), String> {
    let f = head.bytes(body, 6.min(len as usize - 2))?;
    let [bits, h0, h1, w0, w1, parts] = f[..] else {
        return Err(not_jpeg("has a frame header too short for its size"));
    };
    if bits != 8 {
        return Err(format!(
            "a JPEG of {bits} bits a sample, which is not read (8 are); re-save it as an 8-bit JPEG"
        ));
    }
    if parts == 0 || len != 8 + 3 * parts as u64 {
        let why = format!("has a frame header of {parts} components in {len} bytes");
        return Err(not_jpeg(why));
    }
    let (w, h) = (u16::from_be_bytes([w0, w1]), u16::from_be_bytes([h0, h1]));
    decode::declared(w as u32, h as u32)?;
    Ok((w as u32, h as u32))
}

const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

fn not_png(why: impl std::fmt::Display) -> String {
    format!("not a readable JPEG or PNG: a PNG whose {why}")
}

/// A PNG's size from its IHDR chunk (checked as the decoder checks it, a size too large refused
/// at once) and whether an eXIf
/// chunk before its image data turns it a quarter.
fn png(head: &mut Head) -> Result<(u32, u32, bool), String> {
    if head.be32(8)? != 13 || head.bytes(12, 4)? != b"IHDR" {
        return Err(not_png("first chunk is not a 13-byte IHDR"));
    }
    let ihdr = head.bytes(12, 4 + 13)?.to_vec();
    let mut crc = flate2::Crc::new();
    crc.update(&ihdr);
    if head.be32(29)? != crc.sum() {
        return Err(not_png("IHDR chunk fails its checksum (damaged)"));
    }
    let word = |i: usize| u32::from_be_bytes([ihdr[i], ihdr[i + 1], ihdr[i + 2], ihdr[i + 3]]);
    let (w, h, depth, colour) = (word(4), word(8), ihdr[12], ihdr[13]);
    let depth_ok = match colour {
        0 => matches!(depth, 1 | 2 | 4 | 8 | 16),
        3 => matches!(depth, 1 | 2 | 4 | 8),
        2 | 4 | 6 => matches!(depth, 8 | 16),
        _ => false,
    };
    if !depth_ok || ihdr[14] != 0 || ihdr[15] != 0 || ihdr[16] > 1 {
        return Err(not_png(format!(
            "IHDR declares no valid PNG (colour type {colour}, bit depth {depth}, methods {}/{}/{})",
            ihdr[14], ihdr[15], ihdr[16]
        )));
    }
    decode::declared(w, h)?;
    // the chunks before the image data, for an eXIf chunk (the first whose checksum holds,
    // as the decoder takes it); a critical chunk damaged or unknown is refused, as there
    let (mut pos, mut exif) = (33u64, None);
    loop {
        let len = head.be32(pos)? as u64;
        let kind: [u8; 4] = head.bytes(pos + 4, 4)?.try_into().unwrap_or_default();
        match &kind {
            b"IDAT" => return Ok((w, h, exif.unwrap_or(false))),
            b"IEND" => return Err(not_png("chunks end before any image data")),
            b"eXIf" if len > MAX_EXIF => {
                return Err(not_png(format!("eXIf chunk holds {len} bytes")))
            }
            b"eXIf" if exif.is_none() && checksum_holds(head, pos, len)? => {
                exif = Some(quarter_turn(head.bytes(pos + 8, len as usize)?));
            }
            b"PLTE" if len > 768 => return Err(not_png(format!("PLTE chunk holds {len} bytes"))),
            b"PLTE" if !checksum_holds(head, pos, len)? => {
                return Err(not_png("PLTE chunk fails its checksum (damaged)"))
            }
            _ if !kind.iter().all(u8::is_ascii_alphabetic) => {
                let bytes = kind.map(|b| format!("{b:02x}")).join(" ");
                return Err(not_png(format!(
                    "chunk type is not four letters (bytes {bytes}): the file is damaged"
                )));
            }
            _ if kind[0].is_ascii_uppercase() && &kind != b"PLTE" => {
                let named = String::from_utf8_lossy(&kind).into_owned();
                return Err(not_png(format!("{named} chunk is critical and unknown")));
            }
            _ => {}
        }
        pos += 12 + len;
    }
}

/// Whether the PNG chunk at `pos` of `len` data bytes (a palette's or an eXIf's: at most
/// `MAX_EXIF`) carries its checksum.
fn checksum_holds(head: &mut Head, pos: u64, len: u64) -> Result<bool, String> {
    let mut crc = flate2::Crc::new();
    crc.update(head.bytes(pos + 4, 4 + len as usize)?);
    Ok(head.be32(pos + 8 + len)? == crc.sum())
}

/// Whether an EXIF block (a TIFF header and its first directory) says the picture is stored a
/// quarter turn from upright (orientations 5 to 8), read as the decoders read it: the first
/// directory's Orientation entry of one SHORT.
fn quarter_turn(exif: &[u8]) -> bool {
    let big = match exif.get(..4) {
        Some([0x49, 0x49, 42, 0]) => false,
        Some([0x4D, 0x4D, 0, 42]) => true,
        _ => return false,
    };
    let at = |i: usize, n: usize| exif.get(i..i.checked_add(n)?);
    let u16_at = |i: usize| {
        at(i, 2).map(|b| match big {
            true => u16::from_be_bytes([b[0], b[1]]),
            false => u16::from_le_bytes([b[0], b[1]]),
        })
    };
    let u32_at = |i: usize| {
        at(i, 4).map(|b| match big {
            true => u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            false => u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        })
    };
    let Some(dir) = u32_at(4) else { return false };
    let dir = dir as usize;
    let Some(entries) = u16_at(dir) else {
        return false;
    };
    for e in 0..entries as usize {
        let entry = dir + 2 + 12 * e;
        if at(entry, 12).is_none() {
            return false;
        }
        let (Some(tag), Some(format), Some(count), Some(value)) = (
            u16_at(entry),
            u16_at(entry + 2),
            u32_at(entry + 4),
            u16_at(entry + 8),
        ) else {
            return false;
        };
        if tag == 0x112 && format == 3 && count == 1 {
            return (5..=8).contains(&value);
        }
    }
    false
}

#[cfg(test)]
mod tests;
