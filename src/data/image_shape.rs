//! Image shapes: the per-sample C x H x W of an image dataset (its rows are row-major CHW), the
//! `CxHxW` spelling of `shape=`, and how a 4-d IDX images file is read: channels first
//! (N,C,H,W) or last (N,H,W,C, turned into CHW here).

use std::fmt;
use std::str::FromStr;

/// The most values one image may hold (C*H*W): a 4096x4096 RGB picture, the largest
/// `--image-size` makes (192 MiB as floats).
pub const MAX_IMAGE_VALUES: usize = 3 * 4096 * 4096;

/// `1x8x8` for `[1, 8, 8]` (channels x height x width).
pub fn shape_text(shape: &[usize; 3]) -> String {
    format!("{}x{}x{}", shape[0], shape[1], shape[2])
}

/// The values one image of `shape` holds, C*H*W; `None` past `usize`.
pub fn shape_values(shape: &[usize; 3]) -> Option<usize> {
    shape[0].checked_mul(shape[1])?.checked_mul(shape[2])
}

const SHAPE_FIX: &str = "write it as CxHxW, channels x height x width, e.g. shape=1x28x28";

/// Parses `CxHxW` (channels x height x width, e.g. `1x28x28`): three whole numbers, each at
/// least 1, of at most [`MAX_IMAGE_VALUES`] values in all.
pub fn parse_shape(s: &str) -> Result<[usize; 3], String> {
    let parts: Vec<&str> = s.split(['x', 'X']).collect();
    if parts.len() != 3 {
        return Err(format!(
            "shape `{s}` has {} part{}, not three; {SHAPE_FIX}",
            parts.len(),
            if parts.len() == 1 { "" } else { "s" }
        ));
    }
    let mut shape = [0; 3];
    for (i, name) in ["channels", "height", "width"].iter().enumerate() {
        let p = parts[i].trim();
        shape[i] = p
            .parse()
            .map_err(|_| format!("shape `{s}`: {name} `{p}` is not a whole number; {SHAPE_FIX}"))?;
        if shape[i] == 0 {
            return Err(format!(
                "shape `{s}`: {name} is 0; every size must be at least 1, e.g. shape=1x28x28"
            ));
        }
    }
    match shape_values(&shape) {
        Some(v) if v <= MAX_IMAGE_VALUES => Ok(shape),
        _ => Err(format!(
            "shape `{s}` is more than {MAX_IMAGE_VALUES} values per image; check the sizes (channels x height x width)"
        )),
    }
}

/// Where the channels of a 4-d images file are: `layout=nchw` or `layout=nhwc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageLayout {
    /// N,C,H,W: each image is stored channel by channel (PyTorch's layout).
    ChannelsFirst,
    /// N,H,W,C: each pixel's channels are stored together (NumPy/TensorFlow image arrays).
    ChannelsLast,
}

impl FromStr for ImageLayout {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "nchw" => Ok(Self::ChannelsFirst),
            "nhwc" => Ok(Self::ChannelsLast),
            _ => Err(format!(
                "layout `{s}` is not nchw or nhwc; use layout=nchw (channels first) or layout=nhwc (channels last)"
            )),
        }
    }
}

impl fmt::Display for ImageLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ChannelsFirst => "nchw",
            Self::ChannelsLast => "nhwc",
        })
    }
}

/// How the images of an IDX file of dimensions `dims` ([N, ...]) are read.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct IdxImages {
    /// The per-sample shape, C x H x W; `None` for flat vectors.
    pub shape: Option<[usize; 3]>,
    /// The samples are stored HWC with more than one channel: turn them into CHW.
    pub hwc: bool,
    /// For the data description: how the layout was decided; empty when there was nothing to
    /// decide.
    pub note: String,
}

/// The layout of 4-d images [N, A, B, C] from its sizes: channels are the axis of 1, 3 or 4
/// (grey, RGB, RGBA) when only one of A and C is; else the axis beside a square H x W when only
/// one is; else unknown.
fn guess_layout(a: usize, b: usize, c: usize) -> Option<ImageLayout> {
    let channels = |v| matches!(v, 1 | 3 | 4);
    match (channels(a), channels(c)) {
        (true, false) => Some(ImageLayout::ChannelsFirst),
        (false, true) => Some(ImageLayout::ChannelsLast),
        _ => match (b == c, a == b) {
            (true, false) => Some(ImageLayout::ChannelsFirst),
            (false, true) => Some(ImageLayout::ChannelsLast),
            _ => None,
        },
    }
}

/// Decides the image shape of an IDX images file of dimensions `dims` ([N, ...]): 3-d [N,H,W]
/// is 1xHxW; 4-d is N,C,H,W or N,H,W,C, as `layout=` says or as guessed from the sizes (see
/// [`guess_layout`]); other ranks are flat vectors. `layout=` on a file other than 4-d is
/// refused, naming the flag that gave it (`--data`, `--val-data`).
pub(super) fn idx_images(
    dims: &[usize],
    layout: Option<ImageLayout>,
    flag: &str,
) -> Result<IdxImages, String> {
    let flat = |what: &str| IdxImages {
        shape: None,
        hwc: false,
        note: what.into(),
    };
    match (dims, layout) {
        (&[_, h, w], None) => Ok(IdxImages {
            shape: Some([1, h, w]),
            hwc: false,
            note: String::new(),
        }),
        (&[_, a, b, c], _) => {
            let (chosen, how) = match layout {
                Some(l) => (Some(l), format!("layout={l}")),
                None => (guess_layout(a, b, c), "guessed from the sizes".into()),
            };
            let (shape, order, change) = match chosen {
                Some(ImageLayout::ChannelsFirst) => ([a, b, c], "N,C,H,W", "nhwc"),
                Some(ImageLayout::ChannelsLast) => ([c, a, b], "N,H,W,C", "nchw"),
                None => {
                    return Ok(flat(&format!(
                        "4-d images {a}x{b}x{c} of unknown layout, read as flat vectors; add ,layout=nchw or ,layout=nhwc for an image shape"
                    )))
                }
            };
            let tail = if layout.is_none() {
                format!("; add ,layout={change} if that is wrong")
            } else {
                String::new()
            };
            Ok(IdxImages {
                shape: Some(shape),
                hwc: chosen == Some(ImageLayout::ChannelsLast) && shape[0] > 1,
                note: format!("4-d images read as {order} ({how}){tail}"),
            })
        }
        (_, None) => Ok(flat("")),
        (_, Some(l)) => Err(format!(
            "layout={l} is for 4-d images files, but this one has {} dimensions ({}); drop ,layout={l} from {flag}",
            dims.len(),
            if dims.len() == 3 {
                "N,H,W: one channel"
            } else {
                "not images"
            }
        )),
    }
}

/// Turns every image of `x` from HWC into CHW in place (one image of scratch).
pub(super) fn hwc_to_chw(x: &mut [f32], shape: [usize; 3]) {
    let [c, h, w] = shape;
    let per = c * h * w;
    if c <= 1 || per == 0 {
        return;
    }
    let mut scratch = vec![0.0f32; per];
    for img in x.chunks_exact_mut(per) {
        scratch.copy_from_slice(img);
        for (p, pixel) in scratch.chunks_exact(c).enumerate() {
            for (ch, &v) in pixel.iter().enumerate() {
                img[ch * h * w + p] = v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_parse_and_print() {
        assert_eq!(parse_shape("1x8x8"), Ok([1, 8, 8]));
        assert_eq!(parse_shape("3X32x32"), Ok([3, 32, 32]));
        assert_eq!(shape_text(&[3, 32, 32]), "3x32x32");
        assert_eq!(shape_values(&[3, 32, 32]), Some(3072));
        assert_eq!(shape_values(&[usize::MAX, 2, 1]), None);
    }

    #[test]
    fn bad_shapes_say_what_and_how() {
        let cases = [
            ("8x8", "has 2 parts, not three; write it as CxHxW"),
            ("64", "has 1 part, not three"),
            ("1x8x8x1", "has 4 parts"),
            ("0x8x8", "channels is 0; every size must be at least 1"),
            ("1x8x0", "width is 0"),
            (
                "1xax8",
                "height `a` is not a whole number; write it as CxHxW",
            ),
            ("1x-8x8", "height `-8` is not a whole number"),
            ("1x8x", "width `` is not a whole number"),
            ("4096x4096x4096", "more than 50331648 values per image"),
            (
                "99999999999x99999999999x99999999999",
                "more than 50331648 values",
            ),
        ];
        for (s, want) in cases {
            let e = parse_shape(s).unwrap_err();
            assert!(e.contains(want), "{s}: {e}");
        }
    }

    #[test]
    fn layouts_parse_and_print() {
        assert_eq!("NCHW".parse(), Ok(ImageLayout::ChannelsFirst));
        assert_eq!(ImageLayout::ChannelsLast.to_string(), "nhwc");
        let e = "chw".parse::<ImageLayout>().unwrap_err();
        assert!(e.contains("layout `chw` is not nchw or nhwc"), "{e}");
    }

    #[test]
    fn idx_dimensions_give_shapes() {
        let got = |dims: &[usize], l| idx_images(dims, l, "--data").unwrap();
        // MNIST / Fashion-MNIST: 3-d
        assert_eq!(got(&[60000, 28, 28], None).shape, Some([1, 28, 28]));
        // flat vectors
        assert_eq!(got(&[10, 5], None).shape, None);
        assert_eq!(got(&[10], None).shape, None);
        // 4-d: channel counts 1/3/4 decide, then a square H x W
        let last = got(&[10, 32, 32, 3], None);
        assert_eq!((last.shape, last.hwc), (Some([3, 32, 32]), true));
        assert!(last.note.contains("N,H,W,C") && last.note.contains("layout=nchw if"));
        let first = got(&[10, 3, 32, 32], None);
        assert_eq!((first.shape, first.hwc), (Some([3, 32, 32]), false));
        assert_eq!(got(&[10, 16, 8, 8], None).shape, Some([16, 8, 8]));
        assert_eq!(got(&[10, 8, 8, 16], None).shape, Some([16, 8, 8]));
        // one channel last needs no reordering
        let one = got(&[10, 28, 28, 1], None);
        assert_eq!((one.shape, one.hwc), (Some([1, 28, 28]), false));
        // neither rule decides: flat, and the note says how to fix it
        let unknown = got(&[10, 8, 8, 8], None);
        assert_eq!(unknown.shape, None);
        assert!(unknown.note.contains("add ,layout=nchw or ,layout=nhwc"));
        // layout= decides, and is refused where there is nothing to decide
        let given = got(&[10, 8, 8, 8], Some(ImageLayout::ChannelsLast));
        assert_eq!(given.shape, Some([8, 8, 8]));
        assert!(given.note.contains("(layout=nhwc)"), "{}", given.note);
        assert_eq!(
            got(&[10, 3, 32, 32], Some(ImageLayout::ChannelsLast)).shape,
            Some([32, 3, 32])
        );
        let e = idx_images(
            &[10, 28, 28],
            Some(ImageLayout::ChannelsFirst),
            "--val-data",
        )
        .unwrap_err();
        assert!(
            e.contains("layout=nchw is for 4-d images files")
                && e.contains("3 dimensions (N,H,W: one channel)")
                && e.contains("drop ,layout=nchw from --val-data"),
            "{e}"
        );
    }

    #[test]
    fn hwc_images_become_chw() {
        // two 2x2 RGB images, values CHW-indexed so that the result reads 0..12 per image
        let chw: Vec<f32> = (0..24).map(|v| v as f32).collect();
        let mut hwc = vec![0.0; 24];
        for img in 0..2 {
            for c in 0..3 {
                for p in 0..4 {
                    hwc[img * 12 + p * 3 + c] = chw[img * 12 + c * 4 + p];
                }
            }
        }
        hwc_to_chw(&mut hwc, [3, 2, 2]);
        assert_eq!(hwc, chw);
    }
}
