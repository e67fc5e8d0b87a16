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
/// Bytes between a JPEG's segments that are passed over looking for the next marker (some
/// encoders pad), before the file is called unreadable.
const MAX_GAP: u64 = 4096;
/// The largest eXIf chunk of a PNG that is read for its orientation.
const MAX_EXIF: usize = 1 << 20;

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

fn upright(head: &mut Head) -> Result<(usize, usize), String> {
    let len = head.len;
    let magic = head.bytes(0, 8.min(len as usize))?;
    let (w, h, turned) = if magic.starts_with(&[0xFF, 0xD8]) {
        jpeg(head)?
    } else if magic == PNG_SIGNATURE {
        png(head)?
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

/// A JPEG's frame size (refused as soon as it is read where it is too large) and whether its EXIF orientation turns it a quarter: the segments up to
/// the first scan, as the JPEG decoder reads them (the last EXIF segment's orientation counts).
fn jpeg(head: &mut Head) -> Result<(u32, u32, bool), String> {
    let (mut pos, mut frame, mut turned) = (2u64, None, false);
    loop {
        // a marker: 0xFF, any fill bytes 0xFF, then its code
        let start = pos;
        while head.byte(pos)? != 0xFF {
            pos += 1;
            if pos - start > MAX_GAP {
                return Err(not_jpeg(format!("has no marker at byte {start}")));
            }
        }
        while head.byte(pos + 1)? == 0xFF {
            pos += 1;
        }
        let code = head.byte(pos + 1)?;
        pos += 2;
        match code {
            // markers without a segment
            0x00 | 0x01 | 0xD0..=0xD8 => continue,
            0xD9 => {
                return Err(not_jpeg(
                    "ends (an end-of-image marker) before any image data",
                ))
            }
            0xDA => break,
            _ => {}
        }
        let len = head.be16(pos)? as u64;
        if len < 2 {
            return Err(not_jpeg(format!(
                "has a segment of length {len} at byte {pos}"
            )));
        }
        let body = pos + 2;
        match code {
            // baseline, extended and progressive Huffman frames: precision, height, width
            0xC0..=0xC2 => {
                if len < 8 {
                    return Err(not_jpeg("has a frame header too short for its size"));
                }
                let (h, w) = (head.be16(body + 1)?, head.be16(body + 3)?);
                decode::declared(w as u32, h as u32)?;
                frame = Some((w as u32, h as u32));
            }
            // lossless, hierarchical and arithmetic-coded frames, which are not decoded
            0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF => {
                return Err(format!(
                    "a JPEG of a kind that is not read (frame marker 0xFF{code:02X}: lossless, hierarchical or arithmetic-coded); re-save it as a baseline or progressive JPEG"
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
    // the chunks before the image data, for an eXIf chunk
    let (mut pos, mut turned) = (33u64, false);
    loop {
        let len = head.be32(pos)? as u64;
        let kind = head.bytes(pos + 4, 4)?.to_vec();
        match &kind[..] {
            b"IDAT" => return Ok((w, h, turned)),
            b"IEND" => return Err(not_png("chunks end before any image data")),
            b"eXIf" if len as usize <= MAX_EXIF => {
                turned = quarter_turn(head.bytes(pos + 8, len as usize)?)
            }
            _ => {}
        }
        pos += 12 + len;
    }
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
