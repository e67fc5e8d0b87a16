//! How a GPU replica lays out its image activations: NCHW (as the CPU, the checkpoints and
//! PyTorch's default), or channels last (NHWC: [B, H, W, C]), the layout cuDNN's tensor-core
//! convolutions work in (PyTorch's `channels_last`): in NCHW each bf16 convolution transposes
//! its operands inside cuDNN. `MGTOP_GPU_LAYOUT=nhwc` or `nchw` asks for one; unset (or `auto`)
//! takes channels last where it was measured faster (`Model::dense_convs_on_large_images`:
//! ResNet-50 at 224x224 1.24x in TF32 and 1.29x in bf16 on an H100) and NCHW elsewhere
//! (MobileNetV2's depthwise convolutions and the CIFAR ResNets ran slower channels last).
//!
//! Channels last is only a layout: the parameters stay in PyTorch's layout (dense KxK
//! convolutions read a copy in cuDNN's NHWC filter layout, `replica::weights`, and their
//! weight gradients are moved back), the input batch arrives in NCHW and is moved once
//! (`kernels/layout.cu`), and every op computes what it computes in NCHW: convolutions through
//! cuDNN, batch norm through its channels-last kernels (`kernels/bn_nhwc.cu`), pooling through
//! the same kernels with a layout flag, elementwise ops as they are. A model whose layers would
//! see the layout (a linear layer or dropout over an image with more than one position, batch
//! norm over an odd number of channels, convolutions without cuDNN) stays NCHW, and says why.

use cudarc::cudnn::sys::cudnnTensorFormat_t;

use crate::nn::model::{Model, Op, LARGE_SIDE};
use crate::nn::shape::Shape;

/// What a run asks for: a layout (None: auto, the model decides), and the note of an unknown
/// `MGTOP_GPU_LAYOUT`.
pub type Asked = (Option<Layout>, Option<String>);

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Layout {
    #[default]
    Nchw,
    Nhwc,
}

/// The variable that asks for a layout.
pub const VAR: &str = "MGTOP_GPU_LAYOUT";

impl Layout {
    /// `MGTOP_GPU_LAYOUT`'s value: a layout, or None for unset, empty or `auto` (the model
    /// decides, `choose`); an unknown one is an error naming the choices.
    pub fn parse(v: Option<&str>) -> Result<Option<Layout>, String> {
        match v.map(|s| s.trim().to_ascii_lowercase()).as_deref() {
            None | Some("") | Some("auto") => Ok(None),
            Some("nchw") => Ok(Some(Layout::Nchw)),
            Some("nhwc") | Some("channels-last") | Some("channels_last") => Ok(Some(Layout::Nhwc)),
            Some(_) => Err(format!(
                "{VAR}={} is not understood: use auto (the default), nchw or nhwc",
                v.unwrap_or_default()
            )),
        }
    }

    /// The layout the environment asks for (None: auto), or (an unknown value) NCHW and why.
    pub fn asked() -> Asked {
        match Layout::parse(std::env::var(VAR).ok().as_deref()) {
            Ok(l) => (l, None),
            Err(e) => (Some(Layout::Nchw), Some(e)),
        }
    }

    pub fn nhwc(self) -> bool {
        self == Layout::Nhwc
    }

    /// The kernels' `nhwc` flag (`elem_at` in `kernels/elem.cuh`).
    pub fn code(self) -> i32 {
        self.nhwc() as i32
    }

    /// cuDNN's format for the activations and the filters.
    pub fn format(self) -> cudnnTensorFormat_t {
        match self {
            Layout::Nchw => cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
            Layout::Nhwc => cudnnTensorFormat_t::CUDNN_TENSOR_NHWC,
        }
    }
}

/// Whether value shape `s` has more than one position per channel (where the layouts differ).
fn spatial(s: &Shape) -> bool {
    matches!(*s, Shape::Image { h, w, .. } if h * w > 1)
}

/// Why `m` cannot train channels last (None: it can), with cuDNN (`cudnn`) or without.
pub fn refusal(m: &Model, cudnn: bool) -> Option<String> {
    if !m.values.iter().any(spatial) {
        return Some("the model has no image activations to lay out".into());
    }
    if !cudnn {
        return Some("channels-last convolutions need cuDNN".into());
    }
    for node in &m.nodes {
        let reads_image = spatial(&m.values[node.inputs[0]]);
        let named = |what: &str| {
            let name = match node.name.is_empty() {
                true => node.op.kind(),
                false => node.name.clone(),
            };
            Some(format!("{what} ({name})"))
        };
        match node.op {
            Op::Linear { .. } if reads_image => {
                return named("a linear layer reads an image's positions in NCHW order")
            }
            Op::Dropout { .. } if reads_image => {
                return named("dropout over an image draws its masks in NCHW order")
            }
            Op::BatchNorm { c, .. } if c % 2 == 1 => {
                return named("channels-last batch norm takes channels in pairs: an odd count")
            }
            _ => {}
        }
    }
    None
}

/// The layout a replica of `m` trains in, given what was asked (None: auto) and whether its
/// convolutions go through cuDNN, and what the run should be told (channels last taken,
/// refused, or an unknown `MGTOP_GPU_LAYOUT`).
pub fn choose(asked: Asked, m: &Model, cudnn: bool) -> (Layout, Option<String>) {
    match asked {
        (_, Some(unknown)) => (
            Layout::Nchw,
            Some(format!("{unknown}; activations stay NCHW")),
        ),
        (None, None) => match m.dense_convs_on_large_images() && refusal(m, cudnn).is_none() {
            true => (
                Layout::Nhwc,
                Some(format!(
                    "activations channels last (NHWC: auto's pick for dense convolutions on inputs of {LARGE_SIDE}x{LARGE_SIDE} or more; {VAR}=nchw keeps NCHW)"
                )),
            ),
            false => (Layout::Nchw, None),
        },
        (Some(Layout::Nchw), None) => (Layout::Nchw, None),
        (Some(Layout::Nhwc), None) => match refusal(m, cudnn) {
            None => (
                Layout::Nhwc,
                Some(format!("activations channels last (NHWC, {VAR}=nhwc)")),
            ),
            Some(why) => (
                Layout::Nchw,
                Some(format!("{VAR}=nhwc: {why}; activations stay NCHW")),
            ),
        },
    }
}

/// Whether convolution `op`'s weights differ between PyTorch's layout [OC, C/groups, K, K] and
/// cuDNN's NHWC filter layout [OC, K, K, C/groups]: a KxK window over more than one input
/// channel (1x1 and depthwise convolutions read the same memory either way).
pub fn moves_weights(op: &Op) -> bool {
    matches!(*op, Op::Conv { g, groups, .. } if g.k > 1 && g.c / groups > 1)
}

/// x[b, c, hw] as laid out in `layout` (NCHW: a copy; channels last: [b, hw, c]), on the host
/// as `kernels/layout.cu`'s nchw_to_nhwc on the device: for checks against the CPU's ops.
pub fn laid<T: Copy>(layout: Layout, x: &[T], (b, c, hw): (usize, usize, usize)) -> Vec<T> {
    assert_eq!(x.len(), b * c * hw, "laid: a [{b}, {c}, {hw}] tensor");
    match layout {
        Layout::Nchw => x.to_vec(),
        Layout::Nhwc => (0..b * hw * c)
            .map(|i| {
                let (ch, p, n) = (i % c, i / c % hw, i / c / hw);
                x[(n * c + ch) * hw + p]
            })
            .collect(),
    }
}

/// `laid`'s inverse: x laid out in `layout` back as [b, c, hw].
pub fn unlaid<T: Copy>(layout: Layout, x: &[T], (b, c, hw): (usize, usize, usize)) -> Vec<T> {
    assert_eq!(x.len(), b * c * hw, "unlaid: a [{b}, {c}, {hw}] tensor");
    match layout {
        Layout::Nchw => x.to_vec(),
        Layout::Nhwc => (0..b * c * hw)
            .map(|i| {
                let (p, ch, n) = (i % hw, i / hw % c, i / hw / c);
                x[(n * hw + p) * c + ch]
            })
            .collect(),
    }
}

/// Convolution weights [OC, C, kk] (PyTorch's) as `layout`'s convolutions read them (NCHW:
/// a copy; channels last: cuDNN's NHWC filter layout [OC, kk, C], as `kernels/layout.cu`'s
/// krsc_from_kcrs on the device).
pub fn laid_weights(layout: Layout, w: &[f32], (oc, c, kk): (usize, usize, usize)) -> Vec<f32> {
    // [OC, C, kk] -> [OC, kk, C] is `laid` with OC as the images and kk as the positions
    laid(layout, w, (oc, c, kk))
}

/// `laid_weights`' inverse.
pub fn unlaid_weights(layout: Layout, w: &[f32], (oc, c, kk): (usize, usize, usize)) -> Vec<f32> {
    unlaid(layout, w, (oc, c, kk))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(spec: &str, input: Shape) -> Model {
        Model::new(input, &spec.parse().unwrap(), 10).unwrap()
    }

    fn image(c: usize, hw: usize) -> Shape {
        Shape::Image { c, h: hw, w: hw }
    }

    #[test]
    fn the_variable_reads_each_layout_and_names_the_choices_otherwise() {
        assert_eq!(Layout::parse(None), Ok(None));
        assert_eq!(Layout::parse(Some("")), Ok(None));
        assert_eq!(Layout::parse(Some("auto")), Ok(None));
        assert_eq!(Layout::parse(Some("nchw")), Ok(Some(Layout::Nchw)));
        assert_eq!(Layout::parse(Some("NHWC")), Ok(Some(Layout::Nhwc)));
        assert_eq!(Layout::parse(Some("channels-last")), Ok(Some(Layout::Nhwc)));
        let e = Layout::parse(Some("nwhc")).unwrap_err();
        assert!(
            e.contains("nwhc") && e.contains("nhwc") && e.contains("auto") && e.contains(VAR),
            "{e}"
        );
        let (l, note) = choose(
            (Some(Layout::Nchw), Some(e)),
            &model("resnet20", image(3, 32)),
            true,
        );
        assert_eq!(l, Layout::Nchw);
        assert!(note.unwrap().contains("stay NCHW"));
    }

    #[test]
    fn residual_networks_go_channels_last_when_asked_with_cudnn() {
        for (spec, input) in [
            ("resnet20", image(3, 32)),
            ("resnet50", image(3, 64)),
            ("mobilenetv2", image(3, 32)),
        ] {
            let m = model(spec, input);
            assert_eq!(refusal(&m, true), None, "{spec}");
            let (l, note) = choose((Some(Layout::Nhwc), None), &m, true);
            assert_eq!(l, Layout::Nhwc, "{spec}");
            assert!(note.unwrap().contains("channels last"));
            // NCHW asked: NCHW, nothing to say
            let nchw = (Some(Layout::Nchw), None);
            assert_eq!(choose(nchw, &m, true), (Layout::Nchw, None));
        }
    }

    #[test]
    fn auto_takes_channels_last_for_dense_convolutions_on_imagenet_sized_inputs_only() {
        let auto = (None, None);
        // ResNet-50 at 224x224 (measured faster channels last): NHWC, and the run is told
        let m = model("resnet50", image(3, 224));
        let (l, note) = choose(auto.clone(), &m, true);
        assert_eq!(l, Layout::Nhwc);
        let note = note.unwrap();
        assert!(note.contains("auto") && note.contains("nchw"), "{note}");
        // ... not without cuDNN, and quietly
        assert_eq!(choose(auto.clone(), &m, false), (Layout::Nchw, None));
        // measured slower channels last: MobileNetV2 (depthwise) at 224, ResNet-20 at 32
        for (spec, input) in [("mobilenetv2", image(3, 224)), ("resnet20", image(3, 32))] {
            let m = model(spec, input);
            assert_eq!(
                choose(auto.clone(), &m, true),
                (Layout::Nchw, None),
                "{spec}"
            );
        }
        // a model that could not go channels last at all
        let m = model("conv8k3p1,pool2,dense10", image(3, LARGE_SIDE));
        assert_eq!(choose(auto, &m, true), (Layout::Nchw, None));
    }

    #[test]
    fn models_whose_layers_would_see_the_layout_stay_nchw_and_say_why() {
        let cases = [
            ("conv8k3p1,pool2,dense10", image(3, 8), "linear layer"),
            ("conv8k3p1,dropout0.5,gap", image(3, 8), "dropout"),
            ("conv7k3p1,bn,gap", image(3, 8), "odd"),
            ("conv8k3p1", image(3, 8), "linear layer"),
            ("dense16", Shape::Flat(20), "no image"),
        ];
        for (spec, input, why) in cases {
            let m = model(spec, input);
            let (l, note) = choose((Some(Layout::Nhwc), None), &m, true);
            assert_eq!(l, Layout::Nchw, "{spec}");
            let note = note.unwrap();
            assert!(
                note.contains(why) && note.contains("stay NCHW"),
                "{spec}: {note}"
            );
        }
        // without cuDNN no model goes channels last
        let m = model("resnet20", image(3, 32));
        assert!(refusal(&m, false).unwrap().contains("cuDNN"));
        // a linear layer after global pooling, dropout over logits: fine
        let m = model("conv8k3p1,bn,gap,dropout0.2,dense10", image(3, 8));
        assert_eq!(refusal(&m, true), None);
    }

    #[test]
    fn channels_last_puts_each_images_channels_of_a_position_together_and_back() {
        // 2 images, 3 channels, 2 positions: value = 100 n + 10 c + p
        let x: Vec<u32> = (0..12)
            .map(|i| 100 * (i / 6) + 10 * (i / 2 % 3) + i % 2)
            .collect();
        let t = laid(Layout::Nhwc, &x, (2, 3, 2));
        assert_eq!(t, [0, 10, 20, 1, 11, 21, 100, 110, 120, 101, 111, 121]);
        assert_eq!(unlaid(Layout::Nhwc, &t, (2, 3, 2)), x);
        assert_eq!(laid(Layout::Nchw, &x, (2, 3, 2)), x);
    }

    #[test]
    fn nhwc_filters_put_each_taps_input_channels_together() {
        // 2 output channels, 3 input channels, 2 taps: value = 100 k + 10 c + tap
        let w: Vec<f32> = (0..12)
            .map(|i| (100 * (i / 6) + 10 * (i / 2 % 3) + i % 2) as f32)
            .collect();
        let krsc = laid_weights(Layout::Nhwc, &w, (2, 3, 2));
        let want = [
            0., 10., 20., 1., 11., 21., 100., 110., 120., 101., 111., 121.,
        ];
        assert_eq!(krsc, want);
        assert_eq!(unlaid_weights(Layout::Nhwc, &krsc, (2, 3, 2)), w);
        assert_eq!(laid_weights(Layout::Nchw, &w, (2, 3, 2)), w);
    }

    #[test]
    fn only_kxk_convolutions_over_several_channels_move_their_weights() {
        let m = model("conv8k3p1,conv16k1,dwconv3p1,gap", image(3, 8));
        let moved: Vec<bool> = (m.nodes.iter())
            .filter(|n| matches!(n.op, Op::Conv { .. }))
            .map(|n| moves_weights(&n.op))
            .collect();
        assert_eq!(moved, [true, false, false]);
        // a 3x3 stem over one input channel reads the same memory either way
        let m = model("conv8k3p1,gap", image(1, 8));
        assert!(!moves_weights(&m.nodes[0].op));
    }
}
