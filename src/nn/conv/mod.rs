//! 2-D convolution over NCHW tensors, weights [OC, C, KH, KW] (PyTorch's layout), computed one
//! of three ways (`Path`): 3x3 windows with stride 1 and padding 1 by `nn::winograd` where the
//! CPU's widest vectors are AVX2; odd square windows padded by k/2 with stride 1 or 2 (a
//! ResNet's 3x3 layers; with AVX-512 also its 1x1 shortcuts and pointwise layers over at least
//! 256 pixels) by `nn::direct` where the CPU has AVX-512 or AVX2, 1.2-4x the products on
//! ResNet-20's layers (`benches/direct_conv`); the rest by im2col + GEMM (`columns`). All run
//! per group of images (`nn::grouped` spreads the groups over a worker's threads).

mod columns;
#[cfg(test)]
mod tests;

use crate::nn::direct;
use crate::nn::direct::dense;
use crate::nn::simd::lane_sum;
use crate::nn::window::out_size;
use crate::nn::winograd;

/// Pointwise layers over fewer pixels than this take the products. With AVX-512: 256 (with
/// every pointwise layer direct, MobileNetV2 at 32x32 ran 30% slower: on 4x4 and 8x8 images a
/// tile of 4 channels x 1-4 vectors of pixels loads more than it multiplies; from 16x16 up the
/// direct kernels are ahead). With AVX2 the products are ahead at every size measured (16x16
/// to 56x56, `benches/direct_conv`: 10-25%), so none is direct.
fn direct_pointwise_pixels(isa: Option<direct::Isa>) -> usize {
    match isa {
        Some(direct::Isa::Avx512) => 256,
        _ => usize::MAX,
    }
}

/// Which kernels the convolutions of a CPU with the direct kernels' instruction set `isa` take,
/// with or without `winograd` (what `winograd::enabled` says), none of them where `turned_off`
/// (`direct::turned_off`) or the CPU lacks them, in words (the start-up line
/// `convolutions:` of a CPU run).
pub fn kernels(isa: Option<direct::Isa>, winograd: bool, turned_off: bool) -> String {
    let direct = |set: &str, which: &str| {
        format!("direct kernels ({set}) for {which}; im2col + GEMM for the rest")
    };
    let windows = "odd square windows padded by k/2, stride 1 or 2";
    match isa {
        // (AVX-512 on 256-bit units, or MGTOP_WINOGRAD=on)
        Some(direct::Isa::Avx512) if winograd => format!(
            "Winograd F(2x2, 3x3) for 3x3 windows with stride 1 over 8+ channels (MGTOP_WINOGRAD=off: none); {}",
            direct(
                "AVX-512",
                &format!(
                    "other {windows}, and pointwise layers of {}+ pixels",
                    direct_pointwise_pixels(isa)
                )
            )
        ),
        Some(direct::Isa::Avx512) => direct(
            "AVX-512",
            &format!(
                "{windows}, and pointwise layers of {}+ pixels",
                direct_pointwise_pixels(isa)
            ),
        ),
        Some(direct::Isa::Avx2) if winograd => format!(
            "Winograd F(2x2, 3x3) (AVX2 + FMA) for 3x3 windows with stride 1 over 8+ channels (MGTOP_WINOGRAD=off: none); {}",
            direct("AVX2 + FMA", &format!("other {windows}, except pointwise"))
        ),
        Some(direct::Isa::Avx2) => direct("AVX2 + FMA", &format!("{windows}, except pointwise")),
        None => format!(
            "im2col + GEMM and row-by-row depthwise ({}): about half the speed of the direct kernels",
            match turned_off {
                true => "MGTOP_DIRECT=off",
                false => "no AVX2 or AVX-512 on this CPU",
            }
        ),
    }
}

/// How a convolution is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// `nn::winograd`: 3x3 windows, stride 1, padding 1, on CPUs where it is enabled.
    Winograd,
    /// `nn::direct`: odd square windows padded by k/2 with stride 1 or 2, on CPUs with AVX-512
    /// or AVX2 (not the smaller pointwise layers).
    Direct,
    /// im2col + GEMM per image (or one GEMM per group for small pointwise layers).
    Columns,
}

impl Path {
    fn choose(c: usize, (kh, kw): (usize, usize), stride: usize, pad: usize, ohw: usize) -> Path {
        let small_pointwise = kh == 1 && kw == 1 && ohw < direct_pointwise_pixels(direct::isa());
        if winograd::applies(c, kh, kw, stride, pad) {
            Path::Winograd
        } else if direct::dense::applies(kh, kw, stride, pad) && !small_pointwise {
            Path::Direct
        } else {
            Path::Columns
        }
    }
}

/// Floats of `col_scratch` the convolution needs: one image's columns, C*KH*KW x OH*OW, or none
/// where the direct path takes it.
pub fn conv2d_scratch_len(
    c: usize,
    (kh, kw): (usize, usize),
    (stride, pad): (usize, usize),
    (oh, ow): (usize, usize),
) -> usize {
    match Path::choose(c, (kh, kw), stride, pad, oh * ow) {
        Path::Winograd | Path::Direct => 0,
        Path::Columns => columns::len(c, kh, kw, oh, ow),
    }
}

/// One call's geometry with its output size.
#[derive(Clone, Copy, Debug)]
struct Shape {
    b: usize,
    c: usize,
    h: usize,
    w: usize,
    oc: usize,
    kh: usize,
    kw: usize,
    stride: usize,
    pad: usize,
    oh: usize,
    ow: usize,
}

impl Shape {
    fn chw(&self) -> usize {
        self.c * self.h * self.w
    }
    fn ohw(&self) -> usize {
        self.oh * self.ow
    }
    fn ckk(&self) -> usize {
        self.c * self.kh * self.kw
    }
    fn path(&self) -> Path {
        Path::choose(
            self.c,
            (self.kh, self.kw),
            self.stride,
            self.pad,
            self.ohw(),
        )
    }
}

/// The shape, panicking with the reason on a bad geometry (callers validate the model spec
/// first, so this is a programming error), and the length checks every op does.
#[allow(clippy::too_many_arguments)]
fn geometry(
    b: usize,
    c: usize,
    h: usize,
    w: usize,
    oc: usize,
    kh: usize,
    kw: usize,
    stride: usize,
    pad: usize,
    lens: [(&str, usize); 3],
) -> Shape {
    let (oh, ow) = out_size(h, w, kh, kw, stride, pad).unwrap_or_else(|e| panic!("conv2d: {e}"));
    let need = [
        ("inp", b * c * h * w),
        ("w", oc * c * kh * kw),
        ("out", b * oc * oh * ow),
    ];
    for ((name, need), (_, have)) in need.iter().zip(lens) {
        assert!(
            have >= *need,
            "conv2d: {name} has {have} elements, need {need}"
        );
    }
    Shape {
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
    }
}

/// A convolution's weights made ready once for every call of one pass over them (the direct
/// kernels' regrouped weights, the Winograd transforms; nothing on the im2col path):
/// `nn::grouped` prepares a layer's once and hands them to each group of images, instead of
/// each call making them again.
#[derive(Default)]
pub enum Prepared {
    #[default]
    Nothing,
    DirectForward(dense::ForwardWeights),
    DirectInputGrad(dense::InputGradWeights),
    /// `winograd::Weights::forward` or `input_grad`, as the pass asked.
    Winograd(winograd::Weights),
}

impl Prepared {
    /// For the forward pass of w[OC,C,KH,KW] over images of `geom` (its batch size unused).
    pub fn forward(w: &[f32], (_, c, (h, w_in), oc, (kh, kw), stride, pad): Geom) -> Prepared {
        match path_of(c, (h, w_in), (kh, kw), stride, pad) {
            Path::Winograd => Prepared::Winograd(winograd::Weights::forward(w, c, oc)),
            Path::Direct => Prepared::DirectForward(dense::ForwardWeights::new(w, c, oc, kh)),
            Path::Columns => Prepared::Nothing,
        }
    }

    /// For the input gradient of the same.
    pub fn input_grad(w: &[f32], (_, c, (h, w_in), oc, (kh, kw), stride, pad): Geom) -> Prepared {
        match path_of(c, (h, w_in), (kh, kw), stride, pad) {
            Path::Winograd => Prepared::Winograd(winograd::Weights::input_grad(w, c, oc)),
            Path::Direct => Prepared::DirectInputGrad(dense::InputGradWeights::new(
                w,
                c,
                oc,
                (h, w_in, kh, stride),
            )),
            Path::Columns => Prepared::Nothing,
        }
    }
}

/// A convolution's geometry: b, c, (h, w), oc, (kh, kw), stride, pad.
pub type Geom = (
    usize,
    usize,
    (usize, usize),
    usize,
    (usize, usize),
    usize,
    usize,
);

/// The path of a convolution over h x w images (a bad geometry takes the im2col path, whose
/// checks name it).
fn path_of(
    c: usize,
    (h, w): (usize, usize),
    (kh, kw): (usize, usize),
    stride: usize,
    pad: usize,
) -> Path {
    match out_size(h, w, kh, kw, stride, pad) {
        Ok((oh, ow)) => Path::choose(c, (kh, kw), stride, pad, oh * ow),
        Err(_) => Path::Columns,
    }
}

/// out[B,OC,OH,OW] = inp[B,C,H,W] (*) w[OC,C,KH,KW] + bias[OC], zero padding `pad` on each side;
/// col_scratch[>= conv2d_scratch_len(..)] is overwritten.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_forward(
    out: &mut [f32],
    inp: &[f32],
    w: &[f32],
    bias: &[f32],
    b: usize,
    c: usize,
    h: usize,
    w_in: usize,
    oc: usize,
    kh: usize,
    kw: usize,
    stride: usize,
    pad: usize,
    col_scratch: &mut [f32],
) {
    let geom = (b, c, (h, w_in), oc, (kh, kw), stride, pad);
    let none = Prepared::default();
    conv2d_forward_prepared(&none, out, (inp, w, bias), geom, col_scratch);
}

/// `conv2d_forward` with the weights `prep` (made for this layer by `Prepared::forward`).
pub fn conv2d_forward_prepared(
    prep: &Prepared,
    out: &mut [f32],
    (inp, w, bias): (&[f32], &[f32], &[f32]),
    (b, c, (h, w_in), oc, (kh, kw), stride, pad): Geom,
    col_scratch: &mut [f32],
) {
    let lens = [("inp", inp.len()), ("w", w.len()), ("out", out.len())];
    let s = geometry(b, c, h, w_in, oc, kh, kw, stride, pad, lens);
    assert!(
        bias.len() >= oc,
        "conv2d: bias has {}, need {oc}",
        bias.len()
    );
    forward_by(s.path(), out, inp, w, prep, bias, &s, col_scratch);
}

#[allow(clippy::too_many_arguments)]
fn forward_by(
    path: Path,
    out: &mut [f32],
    inp: &[f32],
    w: &[f32],
    prepared: &Prepared,
    bias: &[f32],
    s: &Shape,
    col_scratch: &mut [f32],
) {
    match path {
        Path::Winograd => {
            let made;
            let wf = match prepared {
                Prepared::Winograd(wf) => wf,
                _ => {
                    made = winograd::Weights::forward(w, s.c, s.oc);
                    &made
                }
            };
            winograd::forward(out, inp, wf, bias, s.b, s.c, s.oc, (s.h, s.w))
        }
        Path::Direct => {
            let win = (s.h, s.w, s.kh, s.stride);
            let made;
            let wf = match prepared {
                Prepared::DirectForward(wf) => wf,
                _ => {
                    made = dense::ForwardWeights::new(w, s.c, s.oc, s.kh);
                    &made
                }
            };
            dense::forward(out, inp, wf, bias, s.b, s.c, s.oc, win)
        }
        Path::Columns => columns::forward(out, inp, w, bias, s, col_scratch),
    }
}

/// dinp[B,C,H,W] = d/dinp (overwritten; skipped when `None`), dw[OC,C,KH,KW] += d/dw,
/// dbias[OC] += sums of dout[B,OC,OH,OW] over B, OH, OW; col_scratch as in the forward pass.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_backward(
    dinp: Option<&mut [f32]>,
    dw: &mut [f32],
    dbias: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    w: &[f32],
    b: usize,
    c: usize,
    h: usize,
    w_in: usize,
    oc: usize,
    kh: usize,
    kw: usize,
    stride: usize,
    pad: usize,
    col_scratch: &mut [f32],
) {
    let geom = (b, c, (h, w_in), oc, (kh, kw), stride, pad);
    let none = Prepared::default();
    let grads = (dinp, dw, Some(dbias));
    conv2d_backward_prepared(&none, grads, dout, inp, w, geom, col_scratch);
}

/// `conv2d_backward` with the input gradient's weights `prep` (made for this layer by
/// `Prepared::input_grad` where `dinp` is wanted), and no bias gradient where `dbias` is `None`
/// (a layer without a bias: no pass over dout for it).
pub fn conv2d_backward_prepared(
    prep: &Prepared,
    (dinp, dw, dbias): (Option<&mut [f32]>, &mut [f32], Option<&mut [f32]>),
    dout: &[f32],
    inp: &[f32],
    w: &[f32],
    (b, c, (h, w_in), oc, (kh, kw), stride, pad): Geom,
    col_scratch: &mut [f32],
) {
    let lens = [("inp", inp.len()), ("w", w.len()), ("dout", dout.len())];
    let s = geometry(b, c, h, w_in, oc, kh, kw, stride, pad, lens);
    assert!(
        dw.len() >= oc * s.ckk(),
        "conv2d: dw has {}, need {}",
        dw.len(),
        oc * s.ckk()
    );
    if let Some(db) = dbias.as_deref() {
        assert!(db.len() >= oc, "conv2d: dbias has {}, need {oc}", db.len());
    }
    if let Some(d) = dinp.as_deref() {
        assert!(
            d.len() >= b * s.chw(),
            "conv2d: dinp has {}, need {}",
            d.len(),
            b * s.chw()
        );
    }
    if let Some(db) = dbias {
        bias_sums(db, dout, &s);
    }
    backward_by(s.path(), dinp, dw, dout, inp, w, prep, &s, col_scratch);
}

/// dbias[OC] += each output channel's sum over the images, image by image.
fn bias_sums(dbias: &mut [f32], dout: &[f32], s: &Shape) {
    let per = s.oc * s.ohw();
    if per == 0 {
        return;
    }
    for img in dout[..s.b * per].chunks_exact(per) {
        for (g, row) in dbias[..s.oc].iter_mut().zip(img.chunks_exact(s.ohw())) {
            *g += lane_sum(row);
        }
    }
}

/// The input and weight gradients of `conv2d_backward`.
#[allow(clippy::too_many_arguments)]
fn backward_by(
    path: Path,
    dinp: Option<&mut [f32]>,
    dw: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    w: &[f32],
    prepared: &Prepared,
    s: &Shape,
    col_scratch: &mut [f32],
) {
    match path {
        Path::Winograd => {
            let made;
            let dinp = match (dinp, prepared) {
                (None, _) => None,
                (Some(d), Prepared::Winograd(wi)) => Some((d, wi)),
                (Some(d), _) => {
                    made = winograd::Weights::input_grad(w, s.c, s.oc);
                    Some((d, &made))
                }
            };
            winograd::backward(dinp, dw, dout, inp, s.b, s.c, s.oc, (s.h, s.w))
        }
        Path::Direct => {
            let win = (s.h, s.w, s.kh, s.stride);
            let made;
            let dinp = match (dinp, prepared) {
                (None, _) => None,
                (Some(d), Prepared::DirectInputGrad(wi)) => Some((d, wi)),
                (Some(d), _) => {
                    made = dense::InputGradWeights::new(w, s.c, s.oc, win);
                    Some((d, &made))
                }
            };
            dense::backward(dinp, dw, dout, inp, s.b, s.c, s.oc, win)
        }
        Path::Columns => columns::backward(dinp, dw, dout, inp, w, s, col_scratch),
    }
}
