//! 2-D convolution on a GPU, mirroring `nn::conv` (NCHW, weights [OC, C, KH, KW], stride, zero
//! padding): `im2col_f32` lays a chunk of images' patches out as columns, one strided-batched
//! cuBLAS product per chunk multiplies them by the shared weights (stride 0) straight into NCHW
//! order, and `conv_bias_add_f32` adds the bias. Backward: the bias gradient by one block per
//! channel, per-image weight gradients by one batched product summed in image order by
//! `conv_dw_sum_f32` (no atomics: the same bits at every run), and the input gradient by a
//! batched product and `col2im_f32`, a gather per input pixel. A 1x1 kernel with stride 1 and
//! no padding reads the images as their own columns, as on the CPU.
//!
//! The caller's `col_scratch` sets how many images go in one chunk (`conv2d_scratch_len`): a
//! whole batch is one launch of each kernel and one product per pass; one image is the least it
//! may hold. Shapes and lengths are checked before anything is launched, and a bad one is a
//! `CudaError` saying what and how to fix it, never a panic.

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaView, CudaViewMut};

use super::blas::sgemm_strided_batched;
use super::elem::Elem;
use super::launch::{blocks_cfg, grid_stride_cfg};
use super::layout::Layout;
use super::shape::ConvShape;
use super::{fail, CudaError, Gpu};

/// Floats of `col_scratch` for `images` images per chunk, forward and backward: each image's
/// columns (C*KH*KW x OH*OW) and its weight gradient (OC x C*KH*KW). `images` = the batch is
/// fastest; 1 is the least.
pub fn conv2d_scratch_len(
    c: usize,
    oc: usize,
    kh: usize,
    kw: usize,
    oh: usize,
    ow: usize,
    images: usize,
) -> usize {
    let ckk = c * kh * kw;
    images * (ckk * oh * ow + oc * ckk)
}

/// col[B, C*KH*KW, OH*OW] = the zero-padded patches of inp[B, C, H, W] (`nn::im2col::im2col`
/// for each image, ld = OH*OW), B = `s.b`; one launch.
pub fn im2col(
    gpu: &Gpu,
    col: &mut CudaViewMut<'_, f32>,
    inp: &CudaView<'_, f32>,
    s: &ConvShape,
) -> Result<(), CudaError> {
    let what = "im2col";
    s.need(&[
        ("col", col.len(), s.b * s.col_len()),
        ("inp", inp.len(), s.inp_len()),
    ])
    .map_err(|e| fail(gpu, what, e))?;
    let [n, c, h, w, kh, kw, st, p, oh, ow] = s.ints();
    let cfg = grid_stride_cfg(s.b * s.col_len());
    try_launch!(
        gpu,
        "im2col_f32",
        cfg,
        &mut *col,
        inp,
        &n,
        &c,
        &h,
        &w,
        &kh,
        &kw,
        &st,
        &p,
        &oh,
        &ow
    )
}

/// dinp[B, C, H, W] = the adjoint of `im2col` of col[B, C*KH*KW, OH*OW] (overwritten: what
/// `nn::im2col::col2im` adds into a zeroed image, in the same order); one launch.
pub fn col2im(
    gpu: &Gpu,
    dinp: &mut CudaViewMut<'_, f32>,
    col: &CudaView<'_, f32>,
    s: &ConvShape,
) -> Result<(), CudaError> {
    let what = "col2im";
    s.need(&[
        ("dinp", dinp.len(), s.inp_len()),
        ("col", col.len(), s.b * s.col_len()),
    ])
    .map_err(|e| fail(gpu, what, e))?;
    let [n, c, h, w, kh, kw, st, p, oh, ow] = s.ints();
    let cfg = grid_stride_cfg(s.inp_len());
    try_launch!(
        gpu,
        "col2im_f32",
        cfg,
        &mut *dinp,
        col,
        &n,
        &c,
        &h,
        &w,
        &kh,
        &kw,
        &st,
        &p,
        &oh,
        &ow
    )
}

/// out[B,OC,OH,OW] = inp[B,C,H,W] (*) w[OC,C,KH,KW] + bias[OC], zero padding `pad` on each side;
/// col_scratch[>= conv2d_scratch_len(C,OC,KH,KW,OH,OW, 1)] is overwritten. As
/// `nn::conv::conv2d_forward`.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_forward(
    gpu: &Gpu,
    blas: &CudaBlas,
    out: &mut CudaViewMut<'_, f32>,
    inp: &CudaView<'_, f32>,
    w: &CudaView<'_, f32>,
    bias: &CudaView<'_, f32>,
    b: usize,
    c: usize,
    h: usize,
    w_in: usize,
    oc: usize,
    kh: usize,
    kw: usize,
    stride: usize,
    pad: usize,
    col_scratch: &mut CudaViewMut<'_, f32>,
) -> Result<(), CudaError> {
    let what = "conv2d forward";
    let s =
        ConvShape::new(b, c, h, w_in, oc, kh, kw, stride, pad).map_err(|e| fail(gpu, what, e))?;
    s.need(&[
        ("inp", inp.len(), s.inp_len()),
        ("w", w.len(), s.w_len()),
        ("bias", bias.len(), oc),
        ("out", out.len(), s.out_len()),
    ])
    .map_err(|e| fail(gpu, what, e))?;
    let chunk = s
        .images_per_chunk(col_scratch.len(), false)
        .map_err(|e| fail(gpu, what, e))?;
    let (ckk, ohw, chw, ochw) = (s.ckk(), s.ohw(), s.chw(), oc * s.ohw());
    let mut start = 0;
    while start < b {
        let n = chunk.min(b - start);
        let part = ConvShape { b: n, ..s };
        let img = inp.slice(start * chw..(start + n) * chw);
        let mut o = out.slice_mut(start * ochw..(start + n) * ochw);
        let mut col = col_scratch.slice_mut(..if s.pointwise() { 0 } else { n * ckk * ohw });
        if !s.pointwise() {
            im2col(gpu, &mut col, &img, &part)?;
        }
        // out_i[OC, OHW] = w[OC, CKK] col_i[CKK, OHW]
        let cols = if s.pointwise() { img } else { col.as_view() };
        sgemm_strided_batched(
            blas,
            false,
            false,
            oc,
            ohw,
            ckk,
            1.0,
            (w, 0),
            (&cols, ckk * ohw),
            0.0,
            (&mut o, ochw),
            n,
        )
        .map_err(|e| fail(gpu, what, e))?;
        start += n;
    }
    bias_add(gpu, out, bias, b, oc, ohw, Layout::Nchw)
}

/// out[B, OC, OHW] (in `layout`) += bias[OC] (the caller checked the lengths).
pub fn bias_add<E: Elem>(
    gpu: &Gpu,
    out: &mut CudaViewMut<'_, E>,
    bias: &CudaView<'_, f32>,
    b: usize,
    oc: usize,
    ohw: usize,
    layout: Layout,
) -> Result<(), CudaError> {
    if b * oc * ohw == 0 {
        return Ok(());
    }
    let (nb, oci, ohwi, nhwc) = (b as i32, oc as i32, ohw as i32, layout.code());
    let cfg = grid_stride_cfg(b * oc * ohw);
    try_launch!(
        gpu,
        named!(E, "conv_bias_add"),
        cfg,
        &mut *out,
        bias,
        &nb,
        &oci,
        &ohwi,
        &nhwc
    )
}

/// dbias[OC] += the sums of dout[B, OC, OHW] (in `layout`) per channel (the caller checked the
/// lengths).
pub fn bias_grad<E: Elem>(
    gpu: &Gpu,
    dbias: &mut CudaViewMut<'_, f32>,
    dout: &CudaView<'_, E>,
    b: usize,
    oc: usize,
    ohw: usize,
    layout: Layout,
) -> Result<(), CudaError> {
    if b * oc * ohw == 0 {
        return Ok(());
    }
    let (nb, oci, ohwi, nhwc) = (b as i32, oc as i32, ohw as i32, layout.code());
    try_launch!(
        gpu,
        named!(E, "conv_bias_grad"),
        blocks_cfg(oc),
        &mut *dbias,
        dout,
        &nb,
        &oci,
        &ohwi,
        &nhwc
    )
}

/// dinp[B,C,H,W] = d/dinp (overwritten; skipped when `None`), dw[OC,C,KH,KW] += d/dw,
/// dbias[OC] += sums of dout[B,OC,OH,OW] over B, OH, OW; col_scratch[>=
/// conv2d_scratch_len(C,OC,KH,KW,OH,OW, 1)] is overwritten. As `nn::conv::conv2d_backward`.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_backward(
    gpu: &Gpu,
    blas: &CudaBlas,
    mut dinp: Option<&mut CudaViewMut<'_, f32>>,
    dw: &mut CudaViewMut<'_, f32>,
    dbias: &mut CudaViewMut<'_, f32>,
    dout: &CudaView<'_, f32>,
    inp: &CudaView<'_, f32>,
    w: &CudaView<'_, f32>,
    b: usize,
    c: usize,
    h: usize,
    w_in: usize,
    oc: usize,
    kh: usize,
    kw: usize,
    stride: usize,
    pad: usize,
    col_scratch: &mut CudaViewMut<'_, f32>,
) -> Result<(), CudaError> {
    let what = "conv2d backward";
    let s =
        ConvShape::new(b, c, h, w_in, oc, kh, kw, stride, pad).map_err(|e| fail(gpu, what, e))?;
    let dinp_len = dinp.as_ref().map_or(s.inp_len(), |d| d.len());
    s.need(&[
        ("dout", dout.len(), s.out_len()),
        ("inp", inp.len(), s.inp_len()),
        ("w", w.len(), s.w_len()),
        ("dw", dw.len(), s.w_len()),
        ("dbias", dbias.len(), oc),
        ("dinp", dinp_len, s.inp_len()),
    ])
    .map_err(|e| fail(gpu, what, e))?;
    let chunk = s
        .images_per_chunk(col_scratch.len(), true)
        .map_err(|e| fail(gpu, what, e))?;
    let (ckk, ohw, chw, ochw) = (s.ckk(), s.ohw(), s.chw(), oc * s.ohw());
    let (oci, ckki) = (oc as i32, ckk as i32);
    bias_grad(gpu, dbias, dout, b, oc, ohw, Layout::Nchw)?;
    let mut start = 0;
    while start < b {
        let n = chunk.min(b - start);
        let ni = n as i32;
        let part = ConvShape { b: n, ..s };
        let img = inp.slice(start * chw..(start + n) * chw);
        let dout_n = dout.slice(start * ochw..(start + n) * ochw);
        let col_len = if s.pointwise() { 0 } else { n * ckk * ohw };
        let (mut col, mut rest) = col_scratch.split_at_mut(col_len);
        let mut dw_n = rest.slice_mut(..n * oc * ckk);
        if !s.pointwise() {
            im2col(gpu, &mut col, &img, &part)?;
        }
        // dw_i[OC, CKK] = dout_i[OC, OHW] col_i^T, then dw += their sum in image order
        let cols = if s.pointwise() {
            img.slice(..)
        } else {
            col.as_view()
        };
        sgemm_strided_batched(
            blas,
            false,
            true,
            oc,
            ckk,
            ohw,
            1.0,
            (&dout_n, ochw),
            (&cols, ckk * ohw),
            0.0,
            (&mut dw_n, oc * ckk),
            n,
        )
        .map_err(|e| fail(gpu, what, e))?;
        let parts = dw_n.as_view();
        let cfg = grid_stride_cfg(oc * ckk);
        try_launch!(
            gpu,
            "conv_dw_sum_f32",
            cfg,
            &mut *dw,
            &parts,
            &ni,
            &oci,
            &ckki
        )?;
        if let Some(d) = dinp.as_mut() {
            // dcol_i[CKK, OHW] = w^T[CKK, OC] dout_i, into dinp when pointwise, else into the
            // columns (the product above has read them: same stream) and then col2im
            let mut d_n = d.slice_mut(start * chw..(start + n) * chw);
            let (target, ld) = if s.pointwise() {
                (&mut d_n, chw)
            } else {
                (&mut col, ckk * ohw)
            };
            sgemm_strided_batched(
                blas,
                true,
                false,
                ckk,
                ohw,
                oc,
                1.0,
                (w, 0),
                (&dout_n, ochw),
                0.0,
                (target, ld),
                n,
            )
            .map_err(|e| fail(gpu, what, e))?;
            if !s.pointwise() {
                col2im(gpu, &mut d_n, &col.as_view(), &part)?;
            }
        }
        start += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::kernels::SOURCES;
    use super::super::launch::THREADS;

    #[test]
    fn the_bias_gradient_block_is_the_launch_block() {
        // conv_bias_grad_f32 sizes its shared memory and strides by CONV_BLOCK; `blocks_cfg`
        // launches THREADS per block: they must agree or channels lose terms
        let (_, src) = SOURCES.iter().find(|(f, _)| *f == "conv.cu").unwrap();
        let block: u32 = src
            .lines()
            .find_map(|l| l.strip_prefix("#define CONV_BLOCK "))
            .expect("conv.cu defines CONV_BLOCK")
            .trim()
            .parse()
            .unwrap();
        assert_eq!(block, THREADS);
        assert!(block.is_power_of_two(), "the tree reduction halves it");
    }
}
