//! Direct convolutions of odd square windows padded by k/2, stride 1 or 2 (every 3x3 layer and
//! shortcut of a ResNet, MobileNet's depthwise layers) with AVX-512 or AVX2, multiplying
//! straight from the image instead of an im2col matrix that a GEMM then packs again.
//!
//! Each channel is copied once into a zero-bordered plane whose rows are `ws = w + k/2` floats
//! apart (the pad columns at the end of a row are also the left border of the next one). Output
//! pixel (y, x) is position q = y*ws + x of an output plane with the same row length, and what it
//! reads under tap (c, ky, kx) is plane_c[q + ky*ws + kx]: for 16 consecutive positions, 16
//! consecutive floats: a convolution becomes products and sums whose operands are read in place
//! (`dense`: a matrix product against the taps; `depthwise`: each plane against its own taps).
//! The positions x >= w of each row are computed and dropped. A stride-2 window reads the four
//! planes of its input's even and odd rows and columns instead (`Halves`), where each tap again
//! reads consecutive floats; its input gradient is one such product per parity plane.
//!
//! The register tiles are in `avx512` and `avx2` (same functions, picked once per process by
//! `isa`). Every sum runs in a fixed order, so results do not depend on threads; they differ
//! from the im2col and row-by-row paths, and between the two instruction sets, by rounding only.

pub mod dense;
pub mod depthwise;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

use crate::nn::grow;
use std::sync::OnceLock;

/// Floats per vector of positions (one AVX-512 register, two AVX2 ones).
const V: usize = 16;

/// The vector instructions the direct kernels run with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    Avx512,
    Avx2,
}

/// `MGTOP_DIRECT` refused where it is none of its values (unset or empty: the widest this CPU
/// has).
pub fn check_env() -> Result<(), String> {
    crate::switches::check(
        "MGTOP_DIRECT",
        &["off", "avx2"],
        "off (no direct kernels) or avx2 (the AVX2 kernels on an AVX-512 CPU)",
    )
}

/// Whether `MGTOP_DIRECT=off` turned the direct kernels off (not the CPU's lack of them).
pub fn turned_off() -> bool {
    std::env::var("MGTOP_DIRECT").as_deref() == Ok("off")
}

/// What this CPU runs the direct kernels with: the widest it has, or none (then every
/// convolution takes the im2col / row-by-row paths). `MGTOP_DIRECT=avx2` keeps an AVX-512 CPU
/// on the AVX2 kernels and `MGTOP_DIRECT=off` off the direct path (for comparisons and tests);
/// read once per process.
pub fn isa() -> Option<Isa> {
    static ISA: OnceLock<Option<Isa>> = OnceLock::new();
    *ISA.get_or_init(|| {
        let wanted = std::env::var("MGTOP_DIRECT").unwrap_or_default();
        detect(&wanted)
    })
}

#[cfg(target_arch = "x86_64")]
fn detect(wanted: &str) -> Option<Isa> {
    use std::arch::is_x86_feature_detected as has;
    let avx2 = has!("avx2") && has!("fma");
    let avx512 = has!("avx512f") && has!("avx512vl");
    match wanted {
        "off" => None,
        "avx2" => avx2.then_some(Isa::Avx2),
        _ if avx512 => Some(Isa::Avx512),
        _ => avx2.then_some(Isa::Avx2),
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect(_: &str) -> Option<Isa> {
    None
}

/// Whether this CPU runs the direct kernels.
pub fn available() -> bool {
    isa().is_some()
}

/// `kernel!(name(args))`: `avx512::name(args)` or `avx2::name(args)` by `isa()` (unsafe: the
/// caller states the bounds; it runs only where `available()` holds).
macro_rules! kernel {
    ($f:ident($($a:expr),* $(,)?)) => {{
        #[cfg(target_arch = "x86_64")]
        let done = match $crate::nn::direct::isa() {
            Some($crate::nn::direct::Isa::Avx512) => $crate::nn::direct::avx512::$f($($a),*),
            Some($crate::nn::direct::Isa::Avx2) => $crate::nn::direct::avx2::$f($($a),*),
            None => unreachable!("direct convolutions without AVX2 or AVX-512"),
        };
        #[cfg(not(target_arch = "x86_64"))]
        let done = {
            $(let _ = $a;)*
            unreachable!("direct convolutions need AVX2 or AVX-512")
        };
        done
    }};
}
use kernel;

/// The padded-plane geometry of `n` h x w images of one channel under a k x k window, stacked
/// one under the other with k/2 zero rows between them (so each reads only zeros past its own
/// edges and one sweep covers them all: small planes cost one call, not one each).
#[derive(Clone, Copy, Debug)]
struct Plane {
    h: usize,
    w: usize,
    k: usize,
    /// Border width, k/2.
    p: usize,
    /// Row length.
    ws: usize,
    /// Images stacked, and rows from one image's first row to the next one's (h + p).
    n: usize,
    pitch: usize,
    /// Floats per plane: rows -p..n*pitch, then room for the last tile's reads past the end.
    len: usize,
}

impl Plane {
    fn stacked(h: usize, w: usize, k: usize, n: usize) -> Plane {
        let p = k / 2;
        let (ws, pitch) = (w + p, h + p);
        let len = ((n * pitch + p) * ws + 2 * p + V).next_multiple_of(V);
        Plane {
            h,
            w,
            k,
            p,
            ws,
            n,
            pitch,
            len,
        }
    }

    /// Output positions, rounded up to whole vectors (those past the last row read zeros).
    fn positions(&self) -> usize {
        ((self.n * self.pitch - self.p) * self.ws).next_multiple_of(V)
    }

    /// Where pixel (0, 0) of the first image sits.
    fn origin(&self) -> usize {
        self.p * self.ws + self.p
    }

    /// Where image i's pixel (y, 0) sits in an output plane (add `origin()` for an input's).
    fn row(&self, i: usize, y: usize) -> usize {
        (i * self.pitch + y) * self.ws
    }

    /// plane = img[h, w] inside zero borders (one image).
    fn fill(&self, plane: &mut [f32], img: &[f32]) {
        self.clear(plane);
        self.put(plane, 0, img);
    }

    /// Zeroes the plane (borders and gaps included).
    fn clear(&self, plane: &mut [f32]) {
        plane[..self.len].fill(0.0);
    }

    /// Image i's place in a cleared plane = img[h, w].
    fn put(&self, plane: &mut [f32], i: usize, img: &[f32]) {
        for (y, row) in img[..self.h * self.w].chunks_exact(self.w).enumerate() {
            let at = self.origin() + self.row(i, y);
            plane[at..at + self.w].copy_from_slice(row);
        }
    }

    /// img[h, w] = the kept positions of an output plane (one image).
    fn gather(&self, img: &mut [f32], outq: &[f32]) {
        self.take(img, 0, outq);
    }

    /// img[h, w] = image i's kept positions of an output plane.
    fn take(&self, img: &mut [f32], i: usize, outq: &[f32]) {
        for (y, row) in img[..self.h * self.w].chunks_exact_mut(self.w).enumerate() {
            let at = self.row(i, y);
            row.copy_from_slice(&outq[at..at + self.w]);
        }
    }

    /// Offsets of the taps of `channels` consecutive planes, channel-major then ky, kx (the
    /// order of a weight row), padded with zeros to a multiple of `multiple`.
    fn taps(&self, channels: usize, multiple: usize, offs: &mut Vec<usize>) {
        offs.clear();
        for c in 0..channels {
            for ky in 0..self.k {
                for kx in 0..self.k {
                    offs.push(c * self.len + ky * self.ws + kx);
                }
            }
        }
        offs.resize(offs.len().next_multiple_of(multiple), 0);
    }
}

/// A stride-2 window with padding k/2 over `n` stacked h x w images: its input read as four
/// planes, one per parity of row and column (`Halves::put`). Tap t of an axis reads input index
/// 2o + t - p = 2(o + d) + phase with phase = (t - p) mod 2 and d = floor((t - p) / 2), so every
/// tap of every output again reads consecutive floats of one plane: `g`, the planes' geometry,
/// has the output's size and a border of ceil(p/2) (the most negative d; the most positive is no
/// larger), the images stacked as in `Plane`.
#[derive(Clone, Copy, Debug)]
struct Halves {
    h: usize,
    w: usize,
    k: usize,
    /// The window's padding, k/2.
    p: usize,
    g: Plane,
}

impl Halves {
    fn new(h: usize, w: usize, k: usize, n: usize) -> Halves {
        let p = k / 2;
        let (oh, ow) = ((h - 1) / 2 + 1, (w - 1) / 2 + 1);
        let g = Plane::stacked(oh, ow, 2 * p.div_ceil(2) + 1, n);
        Halves { h, w, k, p, g }
    }

    /// Tap index t's plane parity and shift d along one axis.
    fn split(&self, t: usize) -> (usize, isize) {
        let i = t as isize - self.p as isize;
        (i.rem_euclid(2) as usize, i.div_euclid(2))
    }

    /// Zeroes the four planes.
    fn clear(&self, planes: &mut [f32]) {
        planes[..4 * self.g.len].fill(0.0);
    }

    /// Image i's place in four cleared planes (rows then columns: even-even, even-odd,
    /// odd-even, odd-odd) = img[h, w]'s pixels of that parity.
    fn put(&self, planes: &mut [f32], i: usize, img: &[f32]) {
        let g = &self.g;
        assert!(planes.len() >= 4 * g.len && img.len() >= self.h * self.w && i < g.n);
        assert!(g.w >= self.w.div_ceil(2) && g.h >= self.h.div_ceil(2));
        for y in 0..self.h {
            let at = (y % 2) * 2 * g.len + g.origin() + g.row(i, y / 2);
            let (base, src) = (planes.as_mut_ptr(), img[y * self.w..].as_ptr());
            // SAFETY: the direct paths run only where `available()`; the row's even and odd
            // halves (at most g.w floats each, asserted) land in planes (y%2, 0) and (y%2, 1)
            // at image i's row y/2 < g.h, inside their g.len floats; the row is read below w.
            unsafe {
                let (even, odd) = (base.add(at), base.add(at + g.len));
                kernel!(deinterleave(even, odd, src, self.w))
            }
        }
    }

    /// img[h, w] = image i's kept positions of four output planes (one per parity, `apart`
    /// floats apart).
    fn scatter(&self, img: &mut [f32], i: usize, outq: &[f32], apart: usize) {
        let g = &self.g;
        let (half, w) = (self.w.div_ceil(2), self.w);
        assert!(img.len() >= self.h * w && i < g.n && g.w >= half);
        for (y, row) in img[..self.h * w].chunks_exact_mut(w).enumerate() {
            // row y's even columns come from parity plane (y % 2, 0), its odd ones from
            // (y % 2, 1), both at output row y / 2
            let at = (y % 2) * 2 * apart + g.row(i, y / 2);
            let (even, odd) = (&outq[at..at + half], &outq[at + apart..at + apart + w / 2]);
            // SAFETY: the direct paths run only where `available()`; the row's w floats are
            // written from ceil(w/2) even and floor(w/2) odd ones, each slice that long.
            unsafe { kernel!(interleave(row.as_mut_ptr(), even.as_ptr(), odd.as_ptr(), w)) }
        }
    }

    /// The forward pass's offsets of the taps of `channels` channels (four planes each), in
    /// the order of a weight row.
    fn taps(&self, channels: usize, offs: &mut Vec<usize>) {
        let (g, b) = (&self.g, self.g.p as isize);
        offs.clear();
        for c in 0..channels {
            for ky in 0..self.k {
                for kx in 0..self.k {
                    let ((py, dy), (px, dx)) = (self.split(ky), self.split(kx));
                    let at = (b + dy) as usize * g.ws + (b + dx) as usize;
                    offs.push((c * 4 + py * 2 + px) * g.len + at);
                }
            }
        }
    }

    /// For the input gradient of parity plane `phase`: the taps that read it (index into a
    /// weight row of one channel) and where each reads dout's plane: that plane's position
    /// q - dy*ws - dx, counted from its start.
    fn back_taps(&self, phase: usize, taps: &mut Vec<usize>, offs: &mut Vec<usize>) {
        let (g, b) = (&self.g, self.g.p as isize);
        taps.clear();
        offs.clear();
        for ky in 0..self.k {
            for kx in 0..self.k {
                let ((py, dy), (px, dx)) = (self.split(ky), self.split(kx));
                if py * 2 + px == phase {
                    taps.push(ky * self.k + kx);
                    offs.push((b - dy) as usize * g.ws + (b - dx) as usize);
                }
            }
        }
    }
}

/// A plane's height and width, the kernel's size and the stride.
pub type Window = (usize, usize, usize, usize);

/// How a window with padding k/2 reads its input: one plane per channel (stride 1) or four
/// parity planes (stride 2).
enum Reads {
    Same(Plane),
    Halved(Halves),
}

impl Reads {
    /// The window over one image.
    fn new(win: Window) -> Reads {
        Reads::stacked(win, 1)
    }

    /// The window over `n` images stacked.
    fn stacked((h, w, k, stride): Window, n: usize) -> Reads {
        match stride {
            1 => Reads::Same(Plane::stacked(h, w, k, n)),
            _ => Reads::Halved(Halves::new(h, w, k, n)),
        }
    }

    /// The output planes' geometry (and dout's).
    fn out(&self) -> &Plane {
        match self {
            Reads::Same(g) => g,
            Reads::Halved(s) => &s.g,
        }
    }

    /// Floats of input planes per channel.
    fn per_channel(&self) -> usize {
        match self {
            Reads::Same(g) => g.len,
            Reads::Halved(s) => 4 * s.g.len,
        }
    }

    /// planes[per_channel()] = one channel's image inside zero borders.
    fn fill(&self, planes: &mut [f32], img: &[f32]) {
        self.fill_all(planes, &[img]);
    }

    /// planes[per_channel()] = one channel of the stacked images inside zero borders.
    fn fill_all(&self, planes: &mut [f32], imgs: &[&[f32]]) {
        match self {
            Reads::Same(g) => {
                g.clear(planes);
                for (i, img) in imgs.iter().enumerate() {
                    g.put(planes, i, img);
                }
            }
            Reads::Halved(s) => {
                s.clear(planes);
                for (i, img) in imgs.iter().enumerate() {
                    s.put(planes, i, img);
                }
            }
        }
    }

    /// The forward pass's tap offsets for `channels` channels, padded with zeros to a multiple
    /// of `multiple`.
    fn taps(&self, channels: usize, multiple: usize, offs: &mut Vec<usize>) {
        match self {
            Reads::Same(g) => g.taps(channels, multiple, offs),
            Reads::Halved(s) => {
                s.taps(channels, offs);
                offs.resize(offs.len().next_multiple_of(multiple), 0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleave_undoes_deinterleave_at_every_length() {
        if !available() {
            return eprintln!("skipped: no AVX2 or AVX-512");
        }
        for n in 0..50usize {
            let src: Vec<f32> = (0..n).map(|i| i as f32 + 0.5).collect();
            let (mut even, mut odd) = (vec![-1.0; n.div_ceil(2)], vec![-1.0; n / 2]);
            // SAFETY: each buffer is as long as the kernels read or write
            unsafe {
                kernel!(deinterleave(
                    even.as_mut_ptr(),
                    odd.as_mut_ptr(),
                    src.as_ptr(),
                    n
                ))
            }
            let mut back = vec![-1.0; n];
            unsafe {
                kernel!(interleave(
                    back.as_mut_ptr(),
                    even.as_ptr(),
                    odd.as_ptr(),
                    n
                ))
            }
            assert_eq!(back, src, "n {n}");
        }
    }

    #[test]
    fn scatter_puts_each_parity_planes_values_back_in_their_rows_and_columns() {
        if !available() {
            return eprintln!("skipped: no AVX2 or AVX-512");
        }
        for (h, w, k) in [(5, 6, 3), (7, 7, 3), (4, 9, 5), (32, 32, 3), (3, 35, 3)] {
            let n = 2;
            let s = Halves::new(h, w, k, n);
            let apart = s.g.positions();
            let outq: Vec<f32> = (0..4 * apart).map(|v| v as f32).collect();
            for i in 0..n {
                let mut img = vec![-1.0; h * w];
                s.scatter(&mut img, i, &outq, apart);
                for y in 0..h {
                    for x in 0..w {
                        let phase = (y % 2) * 2 + x % 2;
                        let want = outq[phase * apart + s.g.row(i, y / 2) + x / 2];
                        assert_eq!(img[y * w + x], want, "{h}x{w} k{k} image {i} ({y}, {x})");
                    }
                }
            }
        }
    }
}
