//! A gzip file of several members (files compressed apart and joined: `cat a.gz b.gz`, bgzip,
//! pigz) read as `gunzip` reads it, every member's data one after the other. Unlike flate2's
//! `MultiGzDecoder` it stops where the next bytes are no gzip member, so what follows the
//! last one (zeros a tape padded it with, or another file) is left to be looked at.

use std::io::{BufRead, Read};

use flate2::bufread::GzDecoder;

use super::GZIP_MAGIC;

pub(super) enum Members<R: BufRead> {
    Reading(GzDecoder<R>),
    Done(R),
    /// (only while a member is swapped for the next)
    Taken,
}

impl<R: BufRead> Members<R> {
    pub fn new(r: R) -> Members<R> {
        Members::Reading(GzDecoder::new(r))
    }

    /// The bytes after the last member read.
    pub fn into_inner(self) -> R {
        match self {
            Members::Reading(gz) => gz.into_inner(),
            Members::Done(r) => r,
            Members::Taken => unreachable!("a member is swapped within a read"),
        }
    }
}

impl<R: BufRead> Read for Members<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let Members::Reading(gz) = self else {
                return Ok(0);
            };
            let n = gz.read(buf)?;
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            // a member ended: the next, where one begins here
            let Members::Reading(gz) = std::mem::replace(self, Members::Taken) else {
                unreachable!("matched above")
            };
            let mut r = gz.into_inner();
            // (a buffer may hold the magic's first byte alone: the next read gives the rest)
            let next = r.fill_buf()?;
            let member = match next.len() {
                1 => next[0] == GZIP_MAGIC[0],
                _ => next.starts_with(&GZIP_MAGIC),
            };
            *self = match member {
                true => Members::Reading(GzDecoder::new(r)),
                false => Members::Done(r),
            };
        }
    }
}
