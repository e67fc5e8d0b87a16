//! A decoded image as 8-bit RGB rows (height x width x 3), and how a region of it becomes a
//! sample: resampled to the model's input size with PIL's antialiased bilinear filter (the
//! triangle stretched by the downscale factor, separable; at an edge the weights past it are
//! dropped and the rest scaled to sum to 1, as PIL does), mirrored if asked,
//! normalised per channel and written as channel planes (CHW floats).

use crate::nn::simd::twice;

/// An 8-bit RGB image, rows top to bottom, each `w` pixels of R, G, B.
#[derive(Clone, Debug, PartialEq)]
pub struct Picture {
    pub w: usize,
    pub h: usize,
    pub rgb: Vec<u8>,
}

/// A rectangle of a picture in its pixel coordinates: `x, y` its top-left corner, `w, h` its
/// size. It may reach past the picture's edges (a padded crop): what lies outside is black.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Region {
    pub x: f32,
    pub y: f32,
    pub w: f32,
    pub h: f32,
}

impl Region {
    /// The `w x h` rectangle centred on a `pw x ph` picture (torchvision's CenterCrop
    /// rounding: Python's `round`, halves to even).
    pub fn centre(pw: f32, ph: f32, w: usize, h: usize) -> Region {
        let x = ((pw - w as f32) / 2.0).round_ties_even();
        let y = ((ph - h as f32) / 2.0).round_ties_even();
        Region {
            x,
            y,
            w: w as f32,
            h: h as f32,
        }
    }
}

/// A `w x h` picture's size scaled so its shorter side is `side`: the longer side rounded
/// down, as torchvision's `Resize(side)` does (`int(side * long / short)`).
pub fn shorter_side_size(w: usize, h: usize, side: usize) -> (usize, usize) {
    let short = w.min(h).max(1);
    let scale = |v: usize| (v * side / short).max(1);
    (scale(w), scale(h))
}

/// Per-channel normalisation of 0..255 pixels: (p/255 - mean) / std.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Norm {
    pub mean: [f32; 3],
    pub std: [f32; 3],
}

impl Norm {
    /// `p * a + b` per channel.
    fn affine(&self) -> ([f32; 3], [f32; 3]) {
        let a = [0, 1, 2].map(|c| 1.0 / (255.0 * self.std[c]));
        let b = [0, 1, 2].map(|c| -self.mean[c] / self.std[c]);
        (a, b)
    }
}

/// Where resampled rows go: row `y` as `w` pixels of four floats, R, G, B (0..255) and one
/// unused (so that the passes before take a pixel as one 4-lane vector), mirrored left-right
/// if asked.
trait Sink {
    fn put_row(&mut self, y: usize, rgbx: &[f32], flip: bool);
}

/// Normalised channel planes of `w x h`.
struct Planes<'a> {
    out: &'a mut [f32],
    plane: usize,
    w: usize,
    a: [f32; 3],
    b: [f32; 3],
}

impl Sink for Planes<'_> {
    fn put_row(&mut self, y: usize, rgbx: &[f32], flip: bool) {
        let w = self.w;
        let (a, b) = (self.a, self.b);
        let [r, g, bl] = [0, 1, 2].map(|c| c * self.plane + y * w);
        let (rs, rest) = self.out.split_at_mut(g);
        let (gs, bs) = rest.split_at_mut(bl - g);
        let (rs, gs, bs) = (&mut rs[r..r + w], &mut gs[..w], &mut bs[..w]);
        normalise_row(rs, gs, bs, rgbx, a, b);
        // mirrored afterwards: written back to front, the pass above was scalar code
        if flip {
            rs.reverse();
            gs.reverse();
            bs.reverse();
        }
    }
}

twice! {
    /// One pass over the RGBx pixels, each channel's row written in step: c = px[c] * a + b.
    fn normalise_row(rs: &mut [f32], gs: &mut [f32], bs: &mut [f32], rgbx: &[f32], a: [f32; 3], b: [f32; 3]) {
        let rows = rs.iter_mut().zip(gs.iter_mut()).zip(bs.iter_mut());
        for (((r, g), bl), px) in rows.zip(rgbx.chunks_exact(4)) {
            *r = px[0] * a[0] + b[0];
            *g = px[1] * a[1] + b[1];
            *bl = px[2] * a[2] + b[2];
        }
    }
}

/// 8-bit RGB rows of width `w`.
struct Bytes<'a> {
    out: &'a mut [u8],
    w: usize,
    /// One row's RGBx bytes.
    rounded: Vec<u8>,
}

impl Sink for Bytes<'_> {
    fn put_row(&mut self, y: usize, rgbx: &[f32], _flip: bool) {
        let row = &mut self.out[y * self.w * 3..(y + 1) * self.w * 3];
        // rounded in one pass over every lane, then three bytes of four kept. 0..=255 plus
        // 2^23 is a float whose low mantissa bits are the value rounded to the nearest
        // integer (ties to even): no float-to-integer conversion, so the pass is vectors.
        self.rounded.resize(rgbx.len(), 0);
        let r = &mut self.rounded;
        r.iter_mut()
            .zip(rgbx)
            .for_each(|(o, v)| *o = (v.clamp(0.0, 255.0) + 8_388_608.0).to_bits() as u8);
        for (px, q) in row.chunks_exact_mut(3).zip(r.chunks_exact(4)) {
            px.copy_from_slice(&q[..3]);
        }
    }
}

/// The source pixels and weights of each output pixel along one axis: output `o` reads the
/// `n` pixels from `first[o]`, all inside the picture (PIL's taps, those past an edge left
/// out, and zeros where fewer than `n`).
struct Taps {
    n: usize,
    first: Vec<usize>,
    w: Vec<f32>,
}

impl Taps {
    /// `out` pixels from the span `start .. start + len` of an axis `src` pixels long.
    fn new(start: f32, len: f32, out: usize, src: usize) -> Taps {
        let scale = f64::from(len) / out as f64;
        let support = scale.max(1.0);
        // (PIL's taps of an output are at most ceil(2 x support) pixels)
        let n = ((2.0 * support).ceil() as usize + 1).min(src);
        let (mut first, mut w) = (Vec::with_capacity(out), vec![0f32; out * n]);
        // (a region reaching past the picture, a padded crop: what lies outside is black, its
        // taps weighed as black pixels; PIL takes no such region)
        let padded = start < 0.0 || start + len > src as f32;
        for o in 0..out {
            let centre = f64::from(start) + (o as f64 + 0.5) * scale;
            // PIL's: the pixels whose centres the filter reaches, inside the picture (`as`
            // truncates toward 0, as C's cast PIL takes does)
            let (reach_lo, reach_hi) = (
                (centre - support + 0.5).floor() as i64,
                (centre + support + 0.5).floor() as i64,
            );
            let lo = ((centre - support + 0.5) as i64).max(0);
            let hi = ((centre + support + 0.5) as i64).min(src as i64);
            // the window of n pixels inside the picture from them
            let f = lo.min((src - n) as i64);
            let ws = &mut w[o * n..(o + 1) * n];
            let mut sum = 0.0;
            for s in lo..hi {
                let wt = (1.0 - ((s as f64 + 0.5 - centre) / support).abs()).max(0.0);
                ws[(s - f) as usize] = wt as f32;
                sum += wt;
            }
            if padded {
                let outside = (reach_lo..reach_hi).filter(|&s| s < 0 || s >= src as i64);
                sum += outside
                    .map(|s| (1.0 - ((s as f64 + 0.5 - centre) / support).abs()).max(0.0))
                    .sum::<f64>();
            }
            if sum > 0.0 {
                ws.iter_mut()
                    .for_each(|v| *v = (f64::from(*v) / sum) as f32);
            }
            first.push(f as usize);
        }
        Taps { n, first, w }
    }

    fn of(&self, o: usize) -> (usize, &[f32]) {
        (self.first[o], &self.w[o * self.n..(o + 1) * self.n])
    }

    /// The span of source pixels some output reads.
    fn span(&self) -> std::ops::Range<usize> {
        let lo = self.first.iter().min().copied().unwrap_or(0);
        let hi = self.first.iter().max().map_or(0, |f| f + self.n);
        lo..hi
    }
}

/// A thread's rows for `resample`, kept between pictures.
#[derive(Default)]
struct Rows {
    /// One source row as floats (R, G, B per pixel, and one spare).
    source: Vec<f32>,
    /// The ring of rows resampled across (RGBx).
    ring: Vec<f32>,
    /// One output row (RGBx).
    line: Vec<f32>,
}

thread_local! {
    static ROWS: std::cell::RefCell<Rows> = Default::default();
}

/// The horizontal pass over one row: `out` (`tx.first.len()` RGBx pixels) from `row` (the
/// source row's R, G, B floats from column `x0` on, and one spare float): a tap is one 4-lane
/// product of the four floats from a pixel's red (its x lane is the next pixel's red: summed
/// but never read). `N` taps per output when known at compile time (the loop unrolled), else
/// `tx.n`. Sums tap by tap from 0, as the plain definition does. Dispatched to an AVX2 copy
/// by hand as `nn::simd::twice!` does (the macro takes no generic functions).
fn across<const N: usize>(out: &mut [f32], row: &[f32], x0: usize, tx: &Taps) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2,fma")]
        unsafe fn wide<const N: usize>(out: &mut [f32], row: &[f32], x0: usize, tx: &Taps) {
            across_by::<N>(out, row, x0, tx)
        }
        if crate::nn::simd::wide() {
            // SAFETY: the CPU has the features `wide` was compiled for.
            return unsafe { wide::<N>(out, row, x0, tx) };
        }
    }
    across_by::<N>(out, row, x0, tx)
}

#[inline(always)]
fn across_by<const N: usize>(out: &mut [f32], row: &[f32], x0: usize, tx: &Taps) {
    for (o, acc) in out.chunks_exact_mut(4).enumerate() {
        let (f, wt) = tx.of(o);
        let wt = if N == 0 { wt } else { &wt[..N] };
        let px = &row[(f - x0) * 3..(f - x0 + wt.len()) * 3 + 1];
        let mut sum = [0f32; 4];
        for (i, &k) in wt.iter().enumerate() {
            let q: &[f32; 4] = px[i * 3..i * 3 + 4].try_into().expect("4 floats");
            for l in 0..4 {
                sum[l] += k * q[l];
            }
        }
        acc.copy_from_slice(&sum);
    }
}

/// Resamples `region` of `p` to `w x h` pixels into `sink`, mirrored left-right if `flip`:
/// each source row the vertical taps reach is resampled across once (into RGBx pixels), just
/// before the first output row that sums it.
fn resample(p: &Picture, region: Region, w: usize, h: usize, flip: bool, sink: &mut impl Sink) {
    let tx = Taps::new(region.x, region.w, w, p.w);
    let ty = Taps::new(region.y, region.h, h, p.h);
    let xs = tx.span();
    let pass = match tx.n {
        3 => across::<3>,
        4 => across::<4>,
        5 => across::<5>,
        6 => across::<6>,
        7 => across::<7>,
        _ => across::<0>,
    };
    // the rows resampled across live in a ring of as many rows as an output row sums: the
    // outputs' first rows never go back, so a row is made once and read while still in cache
    let ring = ty.n;
    ROWS.with(|s| {
        let Rows {
            source: row,
            ring: rows,
            line,
        } = &mut *s.borrow_mut();
        row.resize(xs.len() * 3 + 1, 0.0);
        rows.resize(ring * w * 4, 0.0);
        line.resize(w * 4, 0.0);
        let mut next = 0;
        for y in 0..h {
            let (f, wt) = ty.of(y);
            for sy in next.max(f)..f + wt.len() {
                let src = &p.rgb[(sy * p.w + xs.start) * 3..(sy * p.w + xs.end) * 3];
                widen(row, src);
                let at = sy % ring * w * 4;
                pass(&mut rows[at..at + w * 4], row, xs.start, &tx);
            }
            next = f + wt.len();
            down(line, rows, f % ring, wt);
            sink.put_row(y, line, flip);
        }
    });
}

twice! {
    /// out = src as floats.
    fn widen(out: &mut [f32], src: &[u8]) {
        out.iter_mut().zip(src).for_each(|(f, &s)| *f = s as f32);
    }
}

twice! {
    /// The vertical pass of one output row: line = sum over taps r of wt[r] * ring row
    /// (first + r) mod (the ring's rows), tap by tap from 0, as the plain definition does (the
    /// first tap's product is its sum from 0: the products are never -0).
    fn down(line: &mut [f32], ring: &[f32], first: usize, wt: &[f32]) {
        let (len, rows) = (line.len(), ring.len() / line.len().max(1));
        let slot = |r: usize| &ring[(first + r) % rows * len..][..len];
        line.iter_mut()
            .zip(slot(0))
            .for_each(|(l, s)| *l = wt[0] * s);
        for (r, &k) in wt.iter().enumerate().skip(1) {
            line.iter_mut().zip(slot(r)).for_each(|(l, s)| *l += k * s);
        }
    }
}

/// A same-size crop at whole-pixel offsets (CIFAR's padded random crop): pixels copied, black
/// outside the picture.
fn copy(p: &Picture, x0: i64, y0: i64, w: usize, h: usize, flip: bool, sink: &mut impl Sink) {
    let mut line = vec![0f32; w * 4];
    for y in 0..h {
        line.fill(0.0);
        let sy = y0 + y as i64;
        if (0..p.h as i64).contains(&sy) {
            // the columns of the picture the row covers
            let (a, b) = (x0.max(0), (x0 + w as i64).min(p.w as i64));
            if a < b {
                let src = &p.rgb
                    [(sy as usize * p.w + a as usize) * 3..(sy as usize * p.w + b as usize) * 3];
                let at = (a - x0) as usize * 4;
                for (q, s) in line[at..].chunks_exact_mut(4).zip(src.chunks_exact(3)) {
                    q[..3].iter_mut().zip(s).for_each(|(f, &s)| *f = s as f32);
                }
            }
        }
        sink.put_row(y, &line, flip);
    }
}

fn draw(p: &Picture, region: Region, w: usize, h: usize, flip: bool, sink: &mut impl Sink) {
    let whole = |v: f32| v == v.round();
    if region.w == w as f32 && region.h == h as f32 && whole(region.x) && whole(region.y) {
        copy(p, region.x as i64, region.y as i64, w, h, flip, sink);
    } else {
        resample(p, region, w, h, flip, sink);
    }
}

impl Picture {
    /// `region` as a `w x h` sample: channel planes normalised by `norm`, written to `out`
    /// (`3 * w * h` values).
    pub fn render(
        &self,
        region: Region,
        w: usize,
        h: usize,
        flip: bool,
        norm: &Norm,
        out: &mut [f32],
    ) {
        let (a, b) = norm.affine();
        let mut sink = Planes {
            out,
            plane: w * h,
            w,
            a,
            b,
        };
        draw(self, region, w, h, flip, &mut sink);
    }

    /// The picture scaled so its shorter side is `side` pixels (aspect kept, `shorter_side_size`).
    pub fn shorter_side(&self, side: usize) -> Picture {
        if self.w.min(self.h) == side {
            return self.clone();
        }
        let (w, h) = shorter_side_size(self.w, self.h, side);
        let mut rgb = vec![0u8; w * h * 3];
        let whole = Region {
            x: 0.0,
            y: 0.0,
            w: self.w as f32,
            h: self.h as f32,
        };
        resample(
            self,
            whole,
            w,
            h,
            false,
            &mut Bytes {
                out: &mut rgb,
                w,
                rounded: Vec::new(),
            },
        );
        Picture { w, h, rgb }
    }
}

#[cfg(test)]
mod tests;
