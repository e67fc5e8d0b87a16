use super::*;

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
            stride: 3,
            pad: 0
        }]
    );
    // the new layers, blocks and activations print back as written
    for spec in [
        "conv16k3p1,bn,relu6,dwconv3s2p1,bn,linear,gap,dropout0.2,dense10",
        "pool3s2p1,avgpool2,basic16,basic32s2,bottleneck64s2,inverted24s2,inverted16t1",
        "conv8k3,relu,dense4,relu6",
    ] {
        assert_eq!(spec.parse::<LayerSpec>().unwrap().to_string(), spec);
    }
    assert_eq!(
        "maxpool3s2p1,dropout0.25"
            .parse::<LayerSpec>()
            .unwrap()
            .to_string(),
        "pool3s2p1,dropout0.25"
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
            "conv8k3,rel",
            "layer 2 `rel`: unknown layer; use convNkK[sS][pP]",
        ),
        (
            "dropout1.5",
            "layer 1 `dropout1.5`: dropout probability 1.5 must be more than 0 and less than 1",
        ),
        (
            "dropout",
            "expected a probability after `dropout`, e.g. dropout0.2",
        ),
        (
            "conv8k3p1s2",
            "unexpected `s2` after `conv8k3p1` (the stride comes before the padding, e.g. conv64k3s2p1)",
        ),
        (
            "dropout0.12345",
            "dropout probability 0.12345 is finer than thousandths: give one of 0.001 to 0.999 in steps of 0.001, e.g. dropout0.123",
        ),
        (
            "dropout0.00001",
            "is finer than thousandths: give one of 0.001 to 0.999 in steps of 0.001, e.g. dropout0.001",
        ),
        (
            "dense8,dropout0",
            "layer 2 `dropout0`: dropout probability 0 drops nothing: leave the layer out",
        ),
        (
            "basic16s",
            "layer 1 `basic16s`: expected the stride after `basic16s`",
        ),
        ("inverted24t0", "expansion 0 must be between 1 and 256"),
        ("gapx", "unexpected `x` after `gap`"),
        ("Conv8k3", "layer 1 `Conv8k3`: unknown layer"),
        (
            "conv8k3,,pool2",
            "layer 2 ``: empty layer (a comma at an end, or two in a row?)",
        ),
        ("conv8k3,", "layer 2 ``: empty layer"),
    ];
    for (spec, want) in cases {
        let e = spec.parse::<LayerSpec>().unwrap_err().to_string();
        assert!(e.contains(want), "`{spec}`: {e}");
    }
    assert_eq!("".parse::<LayerSpec>(), Err(SpecError::Empty));
    assert_eq!(" ".parse::<LayerSpec>(), Err(SpecError::Empty));
    let deep = vec!["dense4"; 257].join(",");
    assert_eq!(
        deep.parse::<LayerSpec>(),
        Err(SpecError::TooManyLayers(257))
    );
}
