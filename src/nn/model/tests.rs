use super::*;
use crate::nn::layer_language::Layer;

pub(super) fn img(c: usize, h: usize, w: usize) -> Shape {
    Shape::Image { c, h, w }
}

fn hidden(spec: &str) -> Vec<usize> {
    let m: ModelSpec = spec.parse().unwrap();
    assert!(m.is_mlp(), "{spec}");
    let ModelSpec::Layers(l) = m else {
        unreachable!()
    };
    l.layers
        .iter()
        .map(|l| match l {
            Layer::Dense { units } => *units,
            _ => unreachable!(),
        })
        .collect()
}

pub(super) fn build(spec: &str, input: Shape, classes: usize) -> Result<Model, String> {
    Model::new(input, &spec.parse()?, classes)
}

#[test]
fn parses_specs_and_rejects_bad_ones() {
    assert_eq!(hidden("mlp:128"), vec![128]);
    assert_eq!(hidden("mlp:256,64"), vec![256, 64]);
    // no hidden layer is `mlp` (a linear classifier); `mlp:` with nothing after the colon lost
    // its widths (an empty shell variable), and says so
    assert_eq!(hidden("mlp"), Vec::<usize>::new());
    let e = "mlp:".parse::<ModelSpec>().unwrap_err();
    assert!(e.contains("no hidden width") && e.contains("`mlp`"), "{e}");
    assert!(" mlp:  ".parse::<ModelSpec>().is_err());
    // a comma too many before the layers is an empty layer, as one after them is
    let e = ",conv32k3".parse::<ModelSpec>().unwrap_err();
    assert!(e.contains("layer 1 ``: empty layer"), "{e}");
    // spaces about a spec are no part of it
    assert_eq!(
        " dense16\n".parse::<ModelSpec>(),
        "dense16".parse::<ModelSpec>()
    );
    // dense layers are an MLP, however written
    assert_eq!(hidden("dense32,dense16"), vec![32, 16]);
    assert_eq!(
        "dense32".parse::<ModelSpec>().unwrap().to_string(),
        "mlp:32"
    );
    let cnn: ModelSpec = "conv32k3,pool2".parse().unwrap();
    assert!(!cnn.is_mlp());
    assert_eq!(cnn.to_string(), "conv32k3,pool2");
    for name in [
        "resnet20",
        "resnet56",
        "resnet18",
        "resnet50",
        "mobilenetv2",
        "mobilenetv2:0.5",
    ] {
        assert_eq!(name.parse::<ModelSpec>().unwrap().to_string(), name);
    }
    let e = "cnn:3".parse::<ModelSpec>().unwrap_err();
    assert!(
        e.contains("mlp:H1") && e.contains("conv32k3") && e.contains("resnet20"),
        "{e}"
    );
    let e = "resnet19".parse::<ModelSpec>().unwrap_err();
    assert!(
        e.contains("unknown model `resnet19`") && e.contains("resnet50"),
        "{e}"
    );
    // torchvision's and capitalised spellings: the name likely meant
    for (given, meant) in [
        ("mobilenet_v2", "mobilenetv2"),
        ("ResNet50", "resnet50"),
        ("Conv32k3,Dense10", "conv32k3,dense10"),
    ] {
        let e = given.parse::<ModelSpec>().unwrap_err();
        assert!(e.ends_with(&format!("; did you mean {meant}?")), "{e}");
    }
    assert!(!"cnn:3"
        .parse::<ModelSpec>()
        .unwrap_err()
        .contains("did you mean"));
    let e = "mobilenetv2:wide".parse::<ModelSpec>().unwrap_err();
    assert!(e.contains("width `wide` is not a number"), "{e}");
    assert!("mobilenetv2:9"
        .parse::<ModelSpec>()
        .unwrap_err()
        .contains("between 0.1 and 4"));
    let e = "conv32k3,pool,dense8".parse::<ModelSpec>().unwrap_err();
    assert!(e.contains("layer 2 `pool`"), "{e}");
    assert!("mlp:12x".parse::<ModelSpec>().unwrap_err().contains("12x"));
    assert!("mlp:0".parse::<ModelSpec>().is_err());
    assert!("mlp:1,,2"
        .parse::<ModelSpec>()
        .unwrap_err()
        .contains("empty hidden width"));
    assert!("mlp:8,".parse::<ModelSpec>().is_err());
    let deep = format!("mlp:{}", vec!["4"; 257].join(","));
    assert!(deep
        .parse::<ModelSpec>()
        .unwrap_err()
        .contains("at most 256"));
    // a layer list of dense layers alone is said (and recorded) as the MLP, which reads back
    for n in [100, 256] {
        let list: ModelSpec = vec!["dense8"; n].join(",").parse().unwrap();
        let said = list.to_string();
        assert!(said.starts_with("mlp:8,8,"), "{said}");
        assert_eq!(said.parse::<ModelSpec>(), Ok(list), "{n} layers");
    }
}

#[test]
fn layout_is_contiguous_and_linear_weights_are_pytorchs() {
    let m = Model::mlp(64, &[128], 10);
    assert_eq!(m.n_params, 64 * 128 + 128 + 128 * 10 + 10);
    assert_eq!(m.shape_string(), "64-128-10");
    assert_eq!(
        Model::mlp(64, &[512, 512], 10).shape_string(),
        "64-512-512-10"
    );
    assert_eq!(m.tensors[0].name, "mlp.0.weight");
    // [out, in], as nn.Linear holds it
    assert_eq!(m.tensors[0].shape, [128, 64]);
    assert_eq!(m.tensors[1].name, "mlp.0.bias");
    assert_eq!(m.tensors[3].offset + m.tensors[3].len, m.n_params);
    assert_eq!(m.n_buffers, 0);
    // an MLP reads an image as a flat vector
    let flat = Model::new(img(1, 8, 8), &ModelSpec::mlp(&[128]), 10).unwrap();
    assert_eq!(flat, m);
}

#[test]
fn the_seed_cnn_has_pytorch_shapes_and_names() {
    let m = build("conv32k3,pool2", img(1, 28, 28), 10).unwrap();
    assert_eq!(m.n_params, 320 + 54090);
    let names: Vec<(&str, &[usize])> = m
        .tensors
        .iter()
        .map(|t| (t.name.as_str(), t.shape.as_slice()))
        .collect();
    assert_eq!(
        names,
        [
            ("conv.0.weight", &[32, 1, 3, 3][..]),
            ("conv.0.bias", &[32][..]),
            ("dense.2.weight", &[10, 5408][..]),
            ("dense.2.bias", &[10][..]),
        ]
    );
    assert_eq!(m.shape_string(), "1x28x28-32x26x26-32x13x13-10");
    // the conv's ReLU is fused onto it: three values after the input
    assert_eq!(m.dims, vec![784, 21632, 5408, 10]);
    let kinds: Vec<String> = m.nodes.iter().map(|n| n.op.kind()).collect();
    assert_eq!(kinds, ["conv3x3+relu", "maxpool2x2/2", "linear"]);
    // conv layers need an image, and the error names the layer
    let e = build("conv8k3", Shape::Flat(64), 10).unwrap_err();
    assert!(
        e.contains("layer 1 `conv8k3`") && e.contains("flat vector"),
        "{e}"
    );
    let e = build("conv8k3,pool2,pool2", img(1, 4, 4), 10).unwrap_err();
    assert!(e.contains("layer 3 `pool2`"), "{e}");
}

#[test]
fn a_deeper_spec_with_stride_padding_and_dense_layers() {
    let m = build("conv32k3,pool2,conv64k3,pool2,dense128", img(1, 28, 28), 10).unwrap();
    let shapes: Vec<String> = m.values[1..].iter().map(|s| s.to_string()).collect();
    // 11x11 pooled by 2 floors to 5x5
    assert_eq!(
        shapes,
        ["32x26x26", "32x13x13", "64x11x11", "64x5x5", "128", "10"]
    );
    let params: Vec<usize> = m.nodes.iter().map(|n| m.node_params(n)).collect();
    assert_eq!(
        params,
        [320, 0, 64 * 32 * 9 + 64, 0, 1600 * 128 + 128, 1290]
    );
    let m = build("conv16k5s2p2,pool3s2", img(3, 32, 32), 7).unwrap();
    assert_eq!(m.values[1].to_string(), "16x16x16");
    assert_eq!(m.values[2].to_string(), "16x7x7");
    assert_eq!(m.node_params(&m.nodes[2]), 16 * 7 * 7 * 7 + 7);
}

#[test]
fn bn_takes_the_layers_bias_and_activations_follow_the_spelling() {
    let m = build(
        "conv8k3p1,bn,relu6,dwconv3s2p1,bn,linear,conv4k1,gap",
        img(3, 8, 8),
        5,
    )
    .unwrap();
    let kinds: Vec<String> = m.nodes.iter().map(|n| n.op.kind()).collect();
    assert_eq!(
        kinds,
        [
            "conv3x3",
            "bn+relu6",
            "dwconv3x3/2",
            "bn",
            "conv1x1+relu",
            "gap",
            "linear"
        ]
    );
    let names: Vec<&str> = m.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "conv.0.weight",
            "bn.1.weight",
            "bn.1.bias",
            "dwconv.3.weight",
            "bn.4.weight",
            "bn.4.bias",
            "conv.6.weight",
            "conv.6.bias",
            "dense.8.weight",
            "dense.8.bias"
        ]
    );
    assert_eq!(m.tensors[3].shape, [8, 1, 3, 3]);
    let bufs: Vec<&str> = m.buffers.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        bufs,
        [
            "bn.1.running_mean",
            "bn.1.running_var",
            "bn.4.running_mean",
            "bn.4.running_var"
        ]
    );
    assert_eq!(
        m.init_buffers(),
        [[0.0; 8], [1.0; 8], [0.0; 8], [1.0; 8]].concat()
    );
    // a residual block's shortcut projects where the shape changes
    let m = build("conv4k3p1,bn,basic4,basic8s2,gap", img(3, 6, 6), 3).unwrap();
    let names: Vec<&str> = m.tensors.iter().map(|t| t.name.as_str()).collect();
    assert!(names.contains(&"basic.3.downsample.0.weight"), "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with("basic.2.downsample")),
        "{names:?}"
    );
    // errors name the layer and the fix
    let e = build("gap,linear", img(3, 8, 8), 2).unwrap_err();
    assert!(
        e.contains("layer 2 `linear`") && e.contains("`gap` has none to set"),
        "{e}"
    );
    // an activation sets one: first, twice, or after a layer without one is a slip
    for (spec, layer) in [
        ("relu,dense8", "layer 1 `relu`"),
        ("dense8,relu6,relu", "layer 3 `relu`"),
        ("conv4k3,pool2,relu", "layer 3 `relu`"),
    ] {
        let e = build(spec, img(3, 8, 8), 2).unwrap_err();
        assert!(
            e.contains(layer) && e.contains("sets the activation"),
            "{e}"
        );
    }
    assert!(build("conv4k3,bn,relu6,pool2,dense8,linear", img(3, 8, 8), 2).is_ok());
    let e = build("dense8,basic8", img(3, 8, 8), 2).unwrap_err();
    assert!(
        e.contains("layer 2 `basic8`") && e.contains("flat vector"),
        "{e}"
    );
    let e = build("conv8k3,bn,pool9", img(3, 8, 8), 2).unwrap_err();
    assert!(
        e.contains("layer 3 `pool9`") && e.contains("smaller"),
        "{e}"
    );
}

/// Parameter counts as torchvision's (printed by scripts/vision_fixtures.py --counts).
#[test]
fn every_preset_has_torchvisions_parameter_count() {
    let imagenet = img(3, 224, 224);
    let cifar = img(3, 32, 32);
    for (name, input, classes, params, buffers) in [
        ("resnet20", cifar, 10, 272_474, 1_568),
        ("resnet32", cifar, 10, 466_906, 2_464),
        ("resnet44", cifar, 100, 667_188, 3_360),
        ("resnet56", cifar, 10, 855_770, 4_256),
        ("resnet18", imagenet, 1000, 11_689_512, 9_600),
        ("resnet34", imagenet, 1000, 21_797_672, 17_024),
        ("resnet50", imagenet, 1000, 25_557_032, 53_120),
        ("resnet18", cifar, 10, 11_173_962, 9_600),
        ("resnet50", cifar, 10, 23_520_842, 53_120),
        ("mobilenetv2", imagenet, 1000, 3_504_872, 34_112),
        ("mobilenetv2", cifar, 10, 2_236_682, 34_112),
        ("mobilenetv2:0.5", cifar, 10, 700_490, 18_544),
        ("mobilenetv2:0.25", cifar, 10, 250_922, 10_656),
        ("mobilenetv2:1.4", cifar, 10, 4_333_706, 47_936),
    ] {
        let m = build(name, input, classes).unwrap();
        assert_eq!(
            (m.n_params, m.n_buffers),
            (params, buffers),
            "{name} on {input}"
        );
    }
}

#[test]
fn presets_use_torchvision_names_and_count_their_flops() {
    let m = build("resnet20", img(3, 32, 32), 10).unwrap();
    let names: Vec<&str> = m.tensors.iter().map(|t| t.name.as_str()).collect();
    for want in [
        "conv1.weight",
        "bn1.weight",
        "layer1.0.conv1.weight",
        "layer2.0.downsample.0.weight",
        "layer2.0.downsample.1.bias",
        "layer3.2.bn2.weight",
        "fc.weight",
        "fc.bias",
    ] {
        assert!(names.contains(&want), "{want} missing");
    }
    assert!(m
        .buffers
        .iter()
        .any(|t| t.name == "layer1.0.bn1.running_var"));
    // --no-decay-bn-bias: every batch norm weight and bias (as many as the running
    // statistics), and fc.bias
    let spared: usize = m.no_decay_ranges().iter().map(|r| r.len()).sum();
    assert_eq!(spared, m.n_buffers + 10);
    let fc_bias = m
        .tensors
        .iter()
        .find(|t| t.name == "fc.bias")
        .unwrap()
        .range();
    assert!(m
        .no_decay_ranges()
        .iter()
        .any(|r| r.start <= fc_bias.start && fc_bias.end <= r.end));
    // conv and linear multiply-adds as counted in PyTorch, 2 FLOPs each
    let macs: u64 = m.nodes.iter().map(|n| n.op.macs()).sum();
    assert_eq!(macs, 40_813_184);
    assert!(m.flops_per_sample() > 2 * macs);
    assert!(m.stem.unwrap().contains("CIFAR"));
    let m = build("mobilenetv2", img(3, 32, 32), 10).unwrap();
    assert_eq!(m.nodes.iter().map(|n| n.op.macs()).sum::<u64>(), 24_461_312);
    let names: Vec<&str> = m.tensors.iter().map(|t| t.name.as_str()).collect();
    for want in [
        "features.0.0.weight",
        "features.1.conv.0.0.weight",
        "features.1.conv.2.weight",
        "features.2.conv.3.bias",
        "features.18.1.weight",
        "classifier.1.weight",
    ] {
        assert!(names.contains(&want), "{want} missing");
    }
    assert_eq!(m.tensors[0].shape, [32, 3, 3, 3]);
    let m = build("resnet50", img(3, 224, 224), 1000).unwrap();
    assert_eq!(
        m.nodes.iter().map(|n| n.op.macs()).sum::<u64>(),
        4_089_184_256
    );
    assert!(m.stem.unwrap().contains("ImageNet"));
    // a flat input, or an image too small for the network, is refused naming the fix
    let e = build("resnet20", Shape::Flat(3072), 10).unwrap_err();
    assert!(e.contains("needs images"), "{e}");
}

#[test]
fn dense_convolutions_on_large_images_are_the_resnets_on_imagenet_sized_pictures() {
    let on = |spec: &str, side: usize| {
        build(spec, img(3, side, side), 10)
            .unwrap()
            .dense_convs_on_large_images()
    };
    assert!(on("resnet50", 224) && on("resnet18", 224));
    // measured slower channels last and in bf16: depthwise, and CIFAR-sized images
    assert!(!on("mobilenetv2", 224) && !on("resnet20", 32) && !on("resnet50", 64));
    // the bound on the first convolution's input, and a model without convolutions
    assert!(on("conv8k3p1,bn,gap", LARGE_SIDE));
    assert!(!on("conv8k3p1,bn,gap", LARGE_SIDE - 1));
    assert!(!build("mlp:16", Shape::Flat(20), 10)
        .unwrap()
        .dense_convs_on_large_images());
    // a side narrower than the bound counts: a 224 x 64 image is not large
    let wide = build("conv8k3p1,gap", img(3, 64, 224), 10).unwrap();
    assert!(!wide.dense_convs_on_large_images());
}
