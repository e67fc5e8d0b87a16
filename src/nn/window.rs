//! Sliding-window geometry shared by convolution and pooling: how many positions a KHxKW
//! window takes over an HxW image padded with zeros, with checked arithmetic.

use thiserror::Error;

/// Why a window cannot slide over an image.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ShapeError {
    #[error("the stride must be at least 1")]
    ZeroStride,
    #[error("the window must be at least 1x1, not {kh}x{kw}")]
    ZeroWindow { kh: usize, kw: usize },
    #[error("{}", too_small(*.h, *.w, *.pad, *.kh, *.kw))]
    TooSmall {
        h: usize,
        w: usize,
        pad: usize,
        kh: usize,
        kw: usize,
    },
    #[error("a {h}x{w} input with padding {pad} overflows the sizes this machine can index")]
    Overflow { h: usize, w: usize, pad: usize },
}

fn too_small(h: usize, w: usize, pad: usize, kh: usize, kw: usize) -> String {
    if pad == 0 {
        format!("{h}x{w} input is smaller than the {kh}x{kw} window")
    } else {
        // only built after the padded sizes were computed without overflow
        let (ph, pw) = (h + 2 * pad, w + 2 * pad);
        format!("{h}x{w} input (padded to {ph}x{pw}) is smaller than the {kh}x{kw} window")
    }
}

/// (OH, OW) = ((H + 2*pad - KH)/stride + 1, (W + 2*pad - KW)/stride + 1), rounded down as
/// PyTorch does (a partial window at the bottom or right edge is dropped). Refuses a zero
/// stride or window, a window larger than the padded image (which would leave no output, or
/// less than 1x1), and sizes that overflow.
pub fn out_size(
    h: usize,
    w: usize,
    kh: usize,
    kw: usize,
    stride: usize,
    pad: usize,
) -> Result<(usize, usize), ShapeError> {
    if stride == 0 {
        return Err(ShapeError::ZeroStride);
    }
    if kh == 0 || kw == 0 {
        return Err(ShapeError::ZeroWindow { kh, kw });
    }
    let padded = |n: usize| pad.checked_mul(2).and_then(|p| n.checked_add(p));
    let (Some(ph), Some(pw)) = (padded(h), padded(w)) else {
        return Err(ShapeError::Overflow { h, w, pad });
    };
    match (ph.checked_sub(kh), pw.checked_sub(kw)) {
        (Some(dh), Some(dw)) => Ok((dh / stride + 1, dw / stride + 1)),
        _ => Err(ShapeError::TooSmall { h, w, pad, kh, kw }),
    }
}

/// A 2-D window (pooling) over C x H x W images with padding `pad` on each side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub k: usize,
    pub stride: usize,
    pub pad: usize,
    pub oh: usize,
    pub ow: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_floor_formula() {
        assert_eq!(out_size(28, 28, 3, 3, 1, 0), Ok((26, 26)));
        assert_eq!(out_size(26, 26, 2, 2, 2, 0), Ok((13, 13)));
        assert_eq!(out_size(7, 5, 2, 2, 2, 0), Ok((3, 2)));
        assert_eq!(out_size(7, 6, 3, 3, 2, 1), Ok((4, 3)));
        assert_eq!(out_size(1, 1, 3, 3, 1, 1), Ok((1, 1)));
        assert_eq!(out_size(3, 4, 3, 4, 5, 0), Ok((1, 1)));
        assert_eq!(out_size(5, 5, 1, 1, 1, 2), Ok((9, 9)));
    }

    #[test]
    fn refuses_windows_larger_than_the_image_with_a_clear_message() {
        let e = out_size(1, 1, 2, 2, 2, 0).unwrap_err();
        assert_eq!(e.to_string(), "1x1 input is smaller than the 2x2 window");
        let e = out_size(2, 9, 5, 3, 1, 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "2x9 input (padded to 4x11) is smaller than the 5x3 window"
        );
        // one side is enough to refuse
        assert!(out_size(9, 2, 3, 3, 1, 0).is_err());
    }

    #[test]
    fn refuses_zero_stride_zero_window_and_overflow() {
        assert_eq!(out_size(4, 4, 2, 2, 0, 0), Err(ShapeError::ZeroStride));
        assert!(out_size(4, 4, 0, 2, 1, 0)
            .unwrap_err()
            .to_string()
            .contains("0x2"));
        let e = out_size(usize::MAX, 4, 3, 3, 1, 1).unwrap_err();
        assert!(matches!(e, ShapeError::Overflow { .. }), "{e}");
        assert!(out_size(4, 4, 3, 3, 1, usize::MAX / 2 + 1).is_err());
    }
}
