//! The sizes of a convolution or a max pooling on the GPU, checked once on the host before any
//! launch: the window geometry (`nn::window::out_size`), every buffer length without overflow,
//! and every size that the kernels and cuBLAS take as a 32-bit int. Pure, so tested without a
//! GPU; the error strings say what is wrong and what to change.

use crate::nn::window::out_size;

/// The most images in one strided-batched cuBLAS call (its batch count; cuBLAS releases differ
/// in what they accept above 65535 on grid dimensions, so stay below).
pub const MAX_GEMM_BATCH: usize = 65535;

/// `Err` naming the first size above i32::MAX.
pub(crate) fn fit_i32(what: &str, sizes: &[(&str, usize)]) -> Result<(), String> {
    match sizes.iter().find(|(_, v)| i32::try_from(*v).is_err()) {
        Some((name, v)) => Err(format!(
            "{what}: {name} = {v} is above the GPU kernels' 32-bit limit ({}): use a smaller layer or batch",
            i32::MAX
        )),
        None => Ok(()),
    }
}

/// The product of `factors`, or `Err` naming it when it overflows.
fn product(what: &str, name: &str, factors: &[usize]) -> Result<usize, String> {
    factors
        .iter()
        .try_fold(1usize, |acc, &f| acc.checked_mul(f))
        .ok_or_else(|| format!("{what}: {name} overflows: use a smaller layer or batch"))
}

/// `Err` naming the first buffer shorter than needed: (name, has, needs).
pub(crate) fn need(what: &str, lens: &[(&str, usize, usize)]) -> Result<(), String> {
    match lens.iter().find(|(_, have, need)| have < need) {
        Some((name, have, need)) => Err(format!(
            "{what}: {name} has {have} elements, needs {need}: pass a buffer sized for this layer and batch"
        )),
        None => Ok(()),
    }
}

/// A convolution over B images [C, H, W] to [OC, OH, OW], weights [OC, C, KH, KW].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvShape {
    pub b: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub oc: usize,
    pub kh: usize,
    pub kw: usize,
    pub stride: usize,
    pub pad: usize,
    pub oh: usize,
    pub ow: usize,
}

impl ConvShape {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        b: usize,
        c: usize,
        h: usize,
        w: usize,
        oc: usize,
        kh: usize,
        kw: usize,
        stride: usize,
        pad: usize,
    ) -> Result<ConvShape, String> {
        let what = "conv2d";
        if c == 0 || oc == 0 {
            return Err(format!(
                "{what}: {c} input and {oc} output channels: each must be at least 1"
            ));
        }
        let (oh, ow) = out_size(h, w, kh, kw, stride, pad).map_err(|e| format!("{what}: {e}"))?;
        let s = ConvShape {
            b,
            c,
            h,
            w,
            oc,
            kh,
            kw,
            stride,
            pad,
            oh,
            ow,
        };
        let ckk = product(what, "C*KH*KW", &[c, kh, kw])?;
        let ohw = product(what, "OH*OW", &[oh, ow])?;
        for (name, factors) in [
            ("the input B*C*H*W", &[b, c, h, w][..]),
            ("the output B*OC*OH*OW", &[b, oc, ohw]),
            ("the weights OC*C*KH*KW", &[oc, ckk]),
            ("one image's columns C*KH*KW*OH*OW", &[ckk, ohw]),
            ("the scratch for the batch", &[b, ckk, ohw + oc]),
        ] {
            product(what, name, factors)?;
        }
        fit_i32(
            what,
            &[
                ("the batch", b),
                ("C", c),
                ("H", h),
                ("W", w),
                ("OC", oc),
                ("KH", kh),
                ("KW", kw),
                ("the stride", stride),
                ("the padding", pad),
                ("OH*OW", ohw),
                ("C*KH*KW", ckk),
            ],
        )?;
        Ok(s)
    }

    pub fn ckk(&self) -> usize {
        self.c * self.kh * self.kw
    }
    pub fn ohw(&self) -> usize {
        self.oh * self.ow
    }
    pub fn chw(&self) -> usize {
        self.c * self.h * self.w
    }
    pub fn inp_len(&self) -> usize {
        self.b * self.chw()
    }
    pub fn w_len(&self) -> usize {
        self.oc * self.ckk()
    }
    pub fn out_len(&self) -> usize {
        self.b * self.oc * self.ohw()
    }
    /// One image's columns: C*KH*KW x OH*OW.
    pub fn col_len(&self) -> usize {
        self.ckk() * self.ohw()
    }

    /// A 1x1 kernel with stride 1 and no padding: an image is its own column matrix.
    pub fn pointwise(&self) -> bool {
        self.kh == 1 && self.kw == 1 && self.stride == 1 && self.pad == 0
    }

    /// The kernels' int arguments: [B, C, H, W, KH, KW, stride, pad, OH, OW] (all checked by
    /// `new` to fit; a chunk's B is at most the batch).
    pub fn ints(&self) -> [i32; 10] {
        [
            self.b,
            self.c,
            self.h,
            self.w,
            self.kh,
            self.kw,
            self.stride,
            self.pad,
            self.oh,
            self.ow,
        ]
        .map(|v| v as i32)
    }

    /// `Err` naming the first buffer shorter than needed: (name, has, needs).
    pub fn need(&self, lens: &[(&str, usize, usize)]) -> Result<(), String> {
        need("conv2d", lens)
    }

    /// Scratch floats one image needs: its columns (none when pointwise) and, backward, its
    /// weight gradient.
    pub fn scratch_per_image(&self, backward: bool) -> usize {
        let col = if self.pointwise() { 0 } else { self.col_len() };
        col + if backward { self.w_len() } else { 0 }
    }

    /// How many images one chunk takes with `scratch` floats: as many as fit, at most the batch
    /// and `MAX_GEMM_BATCH`, at least 1; `Err` when not even one image fits (an empty batch
    /// needs none).
    pub fn images_per_chunk(&self, scratch: usize, backward: bool) -> Result<usize, String> {
        let per = self.scratch_per_image(backward);
        if per == 0 || self.b == 0 {
            return Ok(self.b.clamp(1, MAX_GEMM_BATCH));
        }
        if scratch < per {
            return Err(format!(
                "conv2d: col_scratch has {scratch} floats, one image needs {per}: size it with conv::conv2d_scratch_len (images = the batch is fastest)"
            ));
        }
        Ok((scratch / per).min(self.b).clamp(1, MAX_GEMM_BATCH))
    }
}

/// Max pooling over B images [C, H, W], KxK windows moved by `stride`, no padding (floor mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolShape {
    pub b: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub k: usize,
    pub stride: usize,
    pub oh: usize,
    pub ow: usize,
}

impl PoolShape {
    pub fn new(
        b: usize,
        c: usize,
        h: usize,
        w: usize,
        k: usize,
        stride: usize,
    ) -> Result<PoolShape, String> {
        let what = "maxpool2d";
        let (oh, ow) = out_size(h, w, k, k, stride, 0).map_err(|e| format!("{what}: {e}"))?;
        let hw = product(what, "H*W", &[h, w])?;
        if u32::try_from(hw).is_err() {
            return Err(format!(
                "{what}: a {h}x{w} plane is too large for u32 argmax: use smaller images"
            ));
        }
        product(what, "the input B*C*H*W", &[b, c, hw])?;
        product(what, "the output B*C*OH*OW", &[b, c, oh, ow])?;
        let sizes = [
            ("the batch", b),
            ("C", c),
            ("H", h),
            ("W", w),
            ("K", k),
            ("the stride", stride),
        ];
        fit_i32(what, &sizes)?;
        Ok(PoolShape {
            b,
            c,
            h,
            w,
            k,
            stride,
            oh,
            ow,
        })
    }

    pub fn inp_len(&self) -> usize {
        self.b * self.c * self.h * self.w
    }
    pub fn out_len(&self) -> usize {
        self.b * self.c * self.oh * self.ow
    }

    /// The kernels' int arguments: [B, C, H, W, K, stride, OH, OW].
    pub fn ints(&self) -> [i32; 8] {
        [
            self.b,
            self.c,
            self.h,
            self.w,
            self.k,
            self.stride,
            self.oh,
            self.ow,
        ]
        .map(|v| v as i32)
    }

    /// `Err` naming the first buffer shorter than needed: (name, has, needs).
    pub fn need(&self, lens: &[(&str, usize, usize)]) -> Result<(), String> {
        need("maxpool2d", lens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_convolution_shape_has_the_cpu_sizes() {
        // the seed's conv32k3 on 1x28x28, batch 128
        let s = ConvShape::new(128, 1, 28, 28, 32, 3, 3, 1, 0).unwrap();
        assert_eq!((s.oh, s.ow, s.ckk(), s.ohw()), (26, 26, 9, 676));
        assert_eq!(s.inp_len(), 128 * 784);
        assert_eq!(s.out_len(), 128 * 32 * 676);
        assert_eq!(s.w_len(), 32 * 9);
        assert_eq!(s.col_len(), 9 * 676);
        assert_eq!(s.ints(), [128, 1, 28, 28, 3, 3, 1, 0, 26, 26]);
        assert!(!s.pointwise());
        let s = ConvShape::new(2, 3, 7, 6, 4, 3, 3, 2, 1).unwrap();
        assert_eq!((s.oh, s.ow), (4, 3));
        assert!(ConvShape::new(2, 3, 4, 5, 4, 1, 1, 1, 0)
            .unwrap()
            .pointwise());
        assert!(!ConvShape::new(2, 3, 4, 5, 4, 1, 1, 2, 0)
            .unwrap()
            .pointwise());
    }

    #[test]
    fn scratch_sets_the_images_per_chunk() {
        let s = ConvShape::new(10, 2, 7, 7, 3, 3, 3, 1, 1).unwrap();
        let (fwd, bwd) = (s.scratch_per_image(false), s.scratch_per_image(true));
        assert_eq!(fwd, 18 * 49);
        assert_eq!(bwd, 18 * 49 + 3 * 18);
        assert_eq!(
            super::super::conv::conv2d_scratch_len(2, 3, 3, 3, 7, 7, 1),
            bwd
        );
        assert_eq!(s.images_per_chunk(bwd * 10, true), Ok(10));
        assert_eq!(s.images_per_chunk(bwd * 100, true), Ok(10)); // at most the batch
        assert_eq!(s.images_per_chunk(bwd * 3 + 1, true), Ok(3));
        assert_eq!(s.images_per_chunk(bwd * 3, false), Ok(3 * bwd / fwd));
        assert_eq!(s.images_per_chunk(bwd, true), Ok(1));
        let e = s.images_per_chunk(bwd - 1, true).unwrap_err();
        assert!(
            e.contains("one image needs") && e.contains("conv2d_scratch_len"),
            "{e}"
        );
        // pointwise: forward needs no scratch, backward only the weight gradients
        let p = ConvShape::new(4, 3, 5, 5, 2, 1, 1, 1, 0).unwrap();
        assert_eq!(p.images_per_chunk(0, false), Ok(4));
        assert_eq!(p.scratch_per_image(true), 6);
        assert_eq!(p.images_per_chunk(13, true), Ok(2));
        // an empty batch needs no scratch (the CPU op does nothing either)
        let e = ConvShape::new(0, 1, 3, 3, 1, 3, 3, 1, 0).unwrap();
        assert_eq!(e.images_per_chunk(0, false), Ok(1));
        // a huge scratch never exceeds the cuBLAS batch
        let big = ConvShape::new(100_000, 1, 3, 3, 1, 1, 1, 1, 0).unwrap();
        assert_eq!(big.images_per_chunk(0, false), Ok(MAX_GEMM_BATCH));
    }

    #[test]
    fn bad_convolutions_are_errors_that_say_what_to_change() {
        let e = ConvShape::new(1, 1, 2, 2, 1, 3, 3, 1, 0).unwrap_err();
        assert_eq!(e, "conv2d: 2x2 input is smaller than the 3x3 window");
        assert!(ConvShape::new(1, 1, 5, 5, 1, 3, 3, 0, 0)
            .unwrap_err()
            .contains("stride"));
        assert!(ConvShape::new(1, 0, 5, 5, 1, 3, 3, 1, 0)
            .unwrap_err()
            .contains("at least 1"));
        let e = ConvShape::new(1 << 31, 1, 3, 3, 1, 3, 3, 1, 0).unwrap_err();
        assert!(e.contains("the batch") && e.contains("32-bit"), "{e}");
        let e = ConvShape::new(1, 1 << 28, 3, 3, 1, 3, 3, 1, 1).unwrap_err();
        assert!(e.contains("C*KH*KW = 2415919104"), "{e}");
        let e = ConvShape::new(usize::MAX / 2, 4, 3, 3, 1, 3, 3, 1, 0).unwrap_err();
        assert!(e.contains("overflows"), "{e}");
        let s = ConvShape::new(2, 1, 3, 3, 1, 3, 3, 1, 0).unwrap();
        assert_eq!(s.need(&[("inp", 18, 18), ("w", 9, 9)]), Ok(()));
        let e = s.need(&[("inp", 18, 18), ("out", 1, 2)]).unwrap_err();
        assert!(e.starts_with("conv2d: out has 1 elements, needs 2"), "{e}");
    }

    #[test]
    fn a_pooling_shape_has_the_cpu_sizes_and_refuses_bad_ones() {
        let s = PoolShape::new(128, 32, 26, 26, 2, 2).unwrap();
        assert_eq!((s.oh, s.ow), (13, 13));
        assert_eq!(s.inp_len(), 128 * 32 * 676);
        assert_eq!(s.out_len(), 128 * 32 * 169);
        assert_eq!(s.ints(), [128, 32, 26, 26, 2, 2, 13, 13]);
        // floor mode: 7x5 by 2x2 windows is 3x2
        let s = PoolShape::new(1, 1, 7, 5, 2, 2).unwrap();
        assert_eq!((s.oh, s.ow), (3, 2));
        assert_eq!(
            PoolShape::new(1, 1, 1, 1, 2, 2).unwrap_err(),
            "maxpool2d: 1x1 input is smaller than the 2x2 window"
        );
        let e = PoolShape::new(1, 1, 1 << 17, 1 << 17, 2, 2).unwrap_err();
        assert!(e.contains("u32 argmax"), "{e}");
        let e = PoolShape::new(1 << 31, 1, 4, 4, 2, 2).unwrap_err();
        assert!(e.contains("the batch") && e.contains("32-bit"), "{e}");
        let e = s.need(&[("argmax", 5, 6)]).unwrap_err();
        assert!(e.starts_with("maxpool2d: argmax has 5 elements"), "{e}");
    }
}
