//! A convolution described to cuDNN's graph API: its tensors (dimensions, strides of the
//! layout, alignment, unique ids), the convolution, and the operation of one direction.

use cudarc::cudnn::sys as ffi;
use ffi::cudnnBackendAttributeName_t as A;
use ffi::cudnnBackendDescriptorType_t as K;

use super::super::backend::Desc;
use super::super::Key;
use crate::backend::cuda::layout::Layout;

/// Which of a convolution's three products a plan computes.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Dir {
    /// y from x and w.
    Forward,
    /// dx from dy and w.
    Data,
    /// dw from x and dy.
    Filter,
}

/// The tensors' unique ids in every graph, in `run`'s pointer order: x (or dx), w (or dw),
/// y (or dy).
pub const UIDS: [i64; 3] = [1, 2, 3];

/// The alignment a buffer at device address `p` is described with: the largest power of two
/// up to 16 bytes dividing it.
pub fn alignment(p: u64) -> u8 {
    match p {
        0 => 16,
        _ => (p & p.wrapping_neg()).min(16) as u8,
    }
}

/// The strides of a tensor of dimensions `[n, c, h, w]` (filters: `[k, c, r, s]`) in `layout`
/// (channels last: NHWC tensors, KRSC filters).
pub fn strides(layout: Layout, [_, c, h, w]: [usize; 4]) -> [usize; 4] {
    match layout {
        Layout::Nchw => [c * h * w, h * w, w, 1],
        Layout::Nhwc => [h * w * c, 1, w * c, c],
    }
}

fn i64s<const N: usize>(v: [usize; N]) -> Result<[i64; N], String> {
    let mut out = [0i64; N];
    for (o, x) in out.iter_mut().zip(v) {
        *o = i64::try_from(x).map_err(|_| format!("dimension {x} is beyond cuDNN's sizes"))?;
    }
    Ok(out)
}

/// A finalized tensor descriptor.
fn tensor(
    uid: i64,
    dims: [usize; 4],
    layout: Layout,
    data: ffi::cudnnDataType_t,
    align: u8,
) -> Result<Desc, String> {
    let mut t = Desc::new(K::CUDNN_BACKEND_TENSOR_DESCRIPTOR)?;
    t.set(A::CUDNN_ATTR_TENSOR_DATA_TYPE, data)?;
    t.set_i64s(A::CUDNN_ATTR_TENSOR_DIMENSIONS, &i64s(dims)?)?;
    t.set_i64s(A::CUDNN_ATTR_TENSOR_STRIDES, &i64s(strides(layout, dims))?)?;
    t.set(A::CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)?;
    t.set(A::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, i64::from(align))?;
    t.finalize()
}

/// One convolution of shape `k` in direction `dir` (its output scaled by `beta` before the
/// product is added), on tensors of `data` aligned as `align` (x, w, y), fp32 compute: the
/// finalized operation, and the descriptors it was made of (kept alive beside it).
pub fn operation(
    k: Key,
    dir: Dir,
    beta: f32,
    data: ffi::cudnnDataType_t,
    align: [u8; 3],
) -> Result<(Desc, Vec<Desc>), String> {
    let g = &k.g;
    let x = tensor(UIDS[0], [k.b, g.c, g.h, g.w], k.layout, data, align[0])?;
    let w = tensor(
        UIDS[1],
        [g.oc, g.c / k.groups, g.k, g.k],
        k.layout,
        data,
        align[1],
    )?;
    let y = tensor(UIDS[2], [k.b, g.oc, g.oh, g.ow], k.layout, data, align[2])?;
    let mut conv = Desc::new(K::CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR)?;
    conv.set(
        A::CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
        ffi::cudnnDataType_t::CUDNN_DATA_FLOAT,
    )?;
    conv.set(
        A::CUDNN_ATTR_CONVOLUTION_CONV_MODE,
        ffi::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
    )?;
    conv.set(A::CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, 2i64)?;
    conv.set_i64s(A::CUDNN_ATTR_CONVOLUTION_DILATIONS, &[1, 1])?;
    conv.set_i64s(
        A::CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
        &i64s([g.stride; 2])?,
    )?;
    conv.set_i64s(A::CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, &i64s([g.pad; 2])?)?;
    conv.set_i64s(A::CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, &i64s([g.pad; 2])?)?;
    let conv = conv.finalize()?;
    // (alpha, beta, convolution, x, w, y) of each direction's operation
    let (kind, [alpha, b, c, xa, wa, ya]) = match dir {
        Dir::Forward => (
            K::CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
            [
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
            ],
        ),
        Dir::Data => (
            K::CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
            [
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
            ],
        ),
        Dir::Filter => (
            K::CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
            [
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
            ],
        ),
    };
    let mut op = Desc::new(kind)?;
    op.set(alpha, 1.0f32)?;
    op.set(b, beta)?;
    op.set_descs(c, &[&conv])?;
    op.set_descs(xa, &[&x])?;
    op.set_descs(wa, &[&w])?;
    op.set_descs(ya, &[&y])?;
    Ok((op.finalize()?, vec![x, w, y, conv]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::grouped::ConvGeom;

    #[test]
    fn alignment_is_the_largest_power_of_two_up_to_16_dividing_the_address() {
        assert_eq!(alignment(0x7f00_0000_0000), 16);
        assert_eq!(alignment(0x1008), 8);
        assert_eq!(alignment(0x1002), 2);
        assert_eq!(alignment(0x1001), 1);
        assert_eq!(alignment(0x1030), 16);
    }

    #[test]
    fn strides_lay_out_nchw_and_channels_last() {
        assert_eq!(strides(Layout::Nchw, [2, 3, 4, 5]), [60, 20, 5, 1]);
        assert_eq!(strides(Layout::Nhwc, [2, 3, 4, 5]), [60, 1, 15, 3]);
        // KRSC filters: 8 outputs of 3x3 taps over 4 channels
        assert_eq!(strides(Layout::Nhwc, [8, 4, 3, 3]), [36, 1, 12, 4]);
    }

    fn geom(c: usize, oc: usize, k: usize, stride: usize, hw: usize) -> ConvGeom {
        let pad = k / 2;
        let o = (hw + 2 * pad - k) / stride + 1;
        ConvGeom {
            c,
            h: hw,
            w: hw,
            oc,
            k,
            stride,
            pad,
            oh: o,
            ow: o,
        }
    }

    /// cuDNN checks an operation's tensors against its convolution when it is finalized, with
    /// no GPU: where the library loads (a PyPI nvidia-cudnn wheel on LD_LIBRARY_PATH will do),
    /// every direction of dense and depthwise shapes in both layouts and types builds, and a
    /// mismatched one is refused.
    #[test]
    fn operations_finalize_where_cudnn_loads() {
        if !crate::backend::cuda::dnn::available() {
            eprintln!(
                "SKIPPED graph::operations_finalize_where_cudnn_loads: cuDNN is not loadable here"
            );
            return;
        }
        use ffi::cudnnDataType_t::{CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT};
        for layout in [Layout::Nchw, Layout::Nhwc] {
            for data in [CUDNN_DATA_FLOAT, CUDNN_DATA_BFLOAT16] {
                for (g, groups) in [
                    (geom(16, 32, 3, 1, 32), 1),
                    (geom(64, 64, 3, 2, 14), 64),
                    (geom(24, 144, 1, 1, 7), 1),
                ] {
                    for dir in [Dir::Forward, Dir::Data, Dir::Filter] {
                        let k = Key {
                            b: 8,
                            groups,
                            g,
                            layout,
                        };
                        let made = operation(k, dir, 1.0, data, [16, 4, 16]);
                        assert!(
                            made.is_ok(),
                            "{layout:?} {data:?} {g:?} {dir:?}: {:?}",
                            made.err()
                        );
                    }
                }
            }
        }
        // what was set reads back (a finalized tensor's id; cuDNN 9.28 reads no alignment)
        let t = tensor(5, [1, 2, 3, 4], Layout::Nchw, CUDNN_DATA_FLOAT, 4).unwrap();
        assert_eq!(t.get_i64(A::CUDNN_ATTR_TENSOR_UNIQUE_ID), Ok(5));
        // an output of the wrong size
        let mut g = geom(16, 32, 3, 1, 32);
        g.oh += 1;
        let k = Key {
            b: 8,
            groups: 1,
            g,
            layout: Layout::Nchw,
        };
        let e = operation(k, Dir::Forward, 0.0, CUDNN_DATA_FLOAT, [16; 3]).unwrap_err();
        assert!(e.contains("finalize"), "{e}");
    }
}
