//! Direct convolutions of "same" windows (stride 1, an odd square kernel, padding k/2: every 3x3
//! layer of a ResNet, MobileNet's stride-1 depthwise layers) with AVX-512, multiplying straight
//! from the image instead of an im2col matrix that a GEMM then packs again.
//!
//! Each channel is copied once into a zero-bordered plane whose rows are `ws = w + k/2` floats
//! apart (the pad columns at the end of a row are also the left border of the next one). Output
//! pixel (y, x) is position q = y*ws + x of an output plane with the same row length, and what it
//! reads under tap (c, ky, kx) is plane_c[q + ky*ws + kx]: for 16 consecutive positions, 16
//! consecutive floats: a convolution becomes products and sums whose operands are read in place
//! (`dense`: a matrix product against the taps; `depthwise`: each plane against its own taps).
//! The positions x >= w of each row are computed and dropped.
//!
//! Every sum runs in a fixed order, so results do not depend on threads; they differ from the
//! im2col and row-by-row paths by rounding only.

pub mod dense;
pub mod depthwise;

/// Floats per vector.
const V: usize = 16;

/// Whether this CPU runs the direct kernels (checked once by std, then a load).
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512vl")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether a window is "same" with stride 1 (the planes' geometry; 1x1 included).
fn same(kh: usize, kw: usize, stride: usize, pad: usize) -> bool {
    kh == kw && kh % 2 == 1 && stride == 1 && pad == kh / 2
}

/// The padded-plane geometry of an h x w image under a k x k window.
#[derive(Clone, Copy, Debug)]
struct Plane {
    h: usize,
    w: usize,
    k: usize,
    /// Border width, k/2.
    p: usize,
    /// Row length.
    ws: usize,
    /// Floats per plane: rows -p..h+p, then room for the last tile's reads past the end.
    len: usize,
}

impl Plane {
    fn new(h: usize, w: usize, k: usize) -> Plane {
        let p = k / 2;
        let ws = w + p;
        let len = ((h + 2 * p) * ws + 2 * p + V).next_multiple_of(V);
        Plane {
            h,
            w,
            k,
            p,
            ws,
            len,
        }
    }

    /// Output positions, rounded up to whole vectors (those past h*ws read zeros).
    fn positions(&self) -> usize {
        (self.h * self.ws).next_multiple_of(V)
    }

    /// Where pixel (0, 0) sits.
    fn origin(&self) -> usize {
        self.p * self.ws + self.p
    }

    /// plane = img[h, w] inside zero borders.
    fn fill(&self, plane: &mut [f32], img: &[f32]) {
        plane[..self.len].fill(0.0);
        for (y, row) in img[..self.h * self.w].chunks_exact(self.w).enumerate() {
            let at = self.origin() + y * self.ws;
            plane[at..at + self.w].copy_from_slice(row);
        }
    }

    /// img[h, w] = the kept positions of an output plane.
    fn gather(&self, img: &mut [f32], outq: &[f32]) {
        for (y, row) in img[..self.h * self.w].chunks_exact_mut(self.w).enumerate() {
            row.copy_from_slice(&outq[y * self.ws..y * self.ws + self.w]);
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

fn grow(v: &mut Vec<f32>, n: usize) {
    if v.len() < n {
        v.resize(n, 0.0);
    }
}
