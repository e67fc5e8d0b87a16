use super::*;

fn img(c: usize, h: usize, w: usize) -> Shape {
    Shape::Image { c, h, w }
}

fn plan(spec: &str, input: Shape, classes: usize) -> Result<Plan, SpecError> {
    spec.parse::<LayerSpec>()?.plan(input, classes)
}

fn err(spec: &str, input: Shape) -> String {
    plan(spec, input, 10).unwrap_err().to_string()
}

#[test]
fn the_seed_cnn_has_the_expected_shapes_and_parameters() {
    let p = plan("conv32k3,pool2", img(1, 28, 28), 10).unwrap();
    let lines: Vec<String> = p.layers.iter().map(|l| l.to_string()).collect();
    assert_eq!(
        lines,
        [
            "conv 1x28x28 -> 32x26x26",
            "pool 32x26x26 -> 32x13x13",
            "dense 32x13x13 -> 10"
        ]
    );
    let params: Vec<usize> = p.layers.iter().map(|l| l.params).collect();
    assert_eq!(params, [320, 0, 54090]);
    assert_eq!(p.n_params, 54410);
    let relu: Vec<bool> = p.layers.iter().map(|l| l.relu).collect();
    assert_eq!(relu, [true, false, false]);
    assert_eq!(p.layers[0].weight_shape(), Some(vec![32, 1, 3, 3]));
    assert_eq!(p.layers[1].weight_shape(), None);
    assert_eq!(p.layers[2].weight_shape(), Some(vec![5408, 10]));
    assert_eq!(
        p.to_string(),
        "conv 1x28x28 -> 32x26x26 (320 params)\n\
         pool 32x26x26 -> 32x13x13 (0 params)\n\
         dense 32x13x13 -> 10 (54090 params)\n\
         54410 params"
    );
}

#[test]
fn a_deeper_spec_with_stride_padding_and_dense_layers() {
    let p = plan("conv32k3,pool2,conv64k3,pool2,dense128", img(1, 28, 28), 10).unwrap();
    let shapes: Vec<String> = p.layers.iter().map(|l| l.output.to_string()).collect();
    // 11x11 pooled by 2 floors to 5x5
    assert_eq!(
        shapes,
        ["32x26x26", "32x13x13", "64x11x11", "64x5x5", "128", "10"]
    );
    let params: Vec<usize> = p.layers.iter().map(|l| l.params).collect();
    assert_eq!(
        params,
        [320, 0, 64 * 32 * 9 + 64, 0, 1600 * 128 + 128, 1290]
    );
    assert_eq!(p.n_params, params.iter().sum::<usize>());
    assert_eq!(p.layers[4].to_string(), "dense 64x5x5 -> 128");
    assert_eq!(p.layers[5].to_string(), "dense 128 -> 10");
    assert!(p.layers[4].relu && !p.layers[5].relu);

    let p = plan("conv16k5s2p2,pool3s2", img(3, 32, 32), 7).unwrap();
    assert_eq!(p.layers[0].to_string(), "conv 3x32x32 -> 16x16x16");
    assert_eq!(p.layers[0].params, 16 * 3 * 25 + 16);
    assert_eq!(p.layers[1].to_string(), "pool 16x16x16 -> 16x7x7");
    assert_eq!(p.layers[2].params, 16 * 7 * 7 * 7 + 7);
}

#[test]
fn a_flat_input_takes_dense_layers_like_the_mlp() {
    let p = plan("dense128", Shape::Flat(784), 10).unwrap();
    assert_eq!(p.n_params, 784 * 128 + 128 + 128 * 10 + 10);
    assert_eq!(p.layers[0].to_string(), "dense 784 -> 128");
    let e = err("conv8k3", Shape::Flat(784));
    assert!(
        e.starts_with("layer 1 `conv8k3`: conv needs an image"),
        "{e}"
    );
}

#[test]
fn specs_print_back_in_canonical_form() {
    for (given, canonical) in [
        ("conv32k3,pool2", "conv32k3,pool2"),
        ("conv32k3s1p0, pool2s2 ,dense128", "conv32k3,pool2,dense128"),
        (
            "conv64k3s2p1,pool3s2,dense10",
            "conv64k3s2p1,pool3s2,dense10",
        ),
        ("conv8k5p2,conv8k1s2", "conv8k5p2,conv8k1s2"),
        ("conv032k03", "conv32k3"),
    ] {
        let spec: LayerSpec = given.parse().unwrap();
        assert_eq!(spec.to_string(), canonical);
        assert_eq!(canonical.parse::<LayerSpec>().unwrap(), spec);
    }
    assert_eq!(
        "conv64k3s2p1".parse::<LayerSpec>().unwrap().layers,
        [Layer::Conv {
            channels: 64,
            kernel: 3,
            stride: 2,
            pad: 1
        }]
    );
    assert_eq!(
        "pool3".parse::<LayerSpec>().unwrap().layers,
        [Layer::Pool {
            kernel: 3,
            stride: 3
        }]
    );
}

#[test]
fn bad_tokens_are_refused_naming_the_layer() {
    let cases = [
        (
            "conv32",
            "layer 1 `conv32`: expected `k` and the kernel size after `conv32`",
        ),
        (
            "conv32k",
            "layer 1 `conv32k`: expected the kernel size after `conv32k`",
        ),
        (
            "convk3",
            "layer 1 `convk3`: expected the output channel count after `conv`",
        ),
        (
            "conv0k3",
            "layer 1 `conv0k3`: output channel count 0 must be between 1 and 65536",
        ),
        (
            "conv32k3x",
            "layer 1 `conv32k3x`: unexpected `x` after `conv32k3`",
        ),
        (
            "conv32k3p1s2",
            "layer 1 `conv32k3p1s2`: unexpected `s2` after `conv32k3p1`",
        ),
        (
            "conv32k3s0",
            "layer 1 `conv32k3s0`: stride 0 must be between 1 and 256",
        ),
        (
            "conv32k3,pool",
            "layer 2 `pool`: expected the window size after `pool`",
        ),
        (
            "pool2s",
            "layer 1 `pool2s`: expected the stride after `pool2s`",
        ),
        (
            "conv8k3,pool2,dense",
            "layer 3 `dense`: expected the unit count after `dense`",
        ),
        (
            "dense99999999999999999999999",
            "unit count 99999999999999999999999 must be between",
        ),
        (
            "conv8k3,relu",
            "layer 2 `relu`: unknown layer; use convNkK[sS][pP]",
        ),
        ("Conv8k3", "layer 1 `Conv8k3`: unknown layer"),
        (
            "conv8k3,,pool2",
            "layer 2 ``: empty layer (two commas in a row?)",
        ),
        ("conv8k3,", "layer 2 ``: empty layer"),
    ];
    for (spec, want) in cases {
        let e = spec.parse::<LayerSpec>().unwrap_err().to_string();
        assert!(e.contains(want), "`{spec}`: {e}");
    }
    assert_eq!("".parse::<LayerSpec>(), Err(SpecError::Empty));
    assert_eq!(" ".parse::<LayerSpec>(), Err(SpecError::Empty));
    let deep = vec!["dense4"; 65].join(",");
    assert_eq!(deep.parse::<LayerSpec>(), Err(SpecError::TooManyLayers(65)));
}

#[test]
fn layers_that_shrink_the_image_below_1x1_are_refused() {
    assert_eq!(
        err("conv8k3,pool2,pool2", img(1, 5, 5)),
        "layer 3 `pool2`: 1x1 input is smaller than the 2x2 window"
    );
    assert_eq!(
        err("conv8k5", img(3, 4, 9)),
        "layer 1 `conv8k5`: 4x9 input is smaller than the 5x5 window"
    );
    assert_eq!(
        err("conv8k3,conv8k7p1", img(1, 6, 6)),
        "layer 2 `conv8k7p1`: 4x4 input (padded to 6x6) is smaller than the 7x7 window"
    );
    // padding makes the same layer fit; a 1x1 output is fine
    assert!(plan("conv8k7p3", img(1, 1, 1), 10).is_ok());
    assert!(plan("pool5", img(2, 5, 5), 10).is_ok());
}

#[test]
fn conv_after_dense_zero_classes_and_overflow_are_refused() {
    let e = err("dense64,pool2", img(1, 28, 28));
    assert!(
        e.starts_with("layer 2 `pool2`: pool needs an image, but its input is a flat vector of 64"),
        "{e}"
    );
    assert_eq!(
        plan("conv8k3", img(1, 28, 28), 0),
        Err(SpecError::NoClasses)
    );
    assert_eq!(err("conv8k3", img(0, 28, 28)), "the 0x28x28 input is empty");
    let huge = img(1 << 16, 1 << 24, 1 << 24);
    assert!(err("dense8", huge).contains("input is empty"));
    let big = img(1 << 16, 1 << 20, 1 << 20);
    assert_eq!(
        err("dense65536", big),
        "layer 1 `dense65536`: its sizes overflow"
    );
    // the implicit output layer is named as such
    let e = err("conv65536k1", img(1 << 16, 1 << 23, 1 << 23));
    assert_eq!(e, "layer 2 `dense10 (output)`: its sizes overflow");
}
