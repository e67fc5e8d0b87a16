use super::*;

fn hidden(spec: &str) -> Vec<usize> {
    let m: ModelSpec = spec.parse().unwrap();
    assert!(m.is_mlp(), "{spec}");
    m.layers
        .layers
        .iter()
        .map(|l| match l {
            Layer::Dense { units } => *units,
            _ => unreachable!(),
        })
        .collect()
}

#[test]
fn parses_specs_and_rejects_bad_ones() {
    assert_eq!(hidden("mlp:128"), vec![128]);
    assert_eq!(hidden("mlp:256,64"), vec![256, 64]);
    assert_eq!(hidden("mlp:"), Vec::<usize>::new());
    // dense layers are an MLP, however written
    assert_eq!(hidden("dense32,dense16"), vec![32, 16]);
    assert_eq!(
        "dense32".parse::<ModelSpec>().unwrap().to_string(),
        "mlp:32"
    );
    let cnn: ModelSpec = "conv32k3,pool2".parse().unwrap();
    assert!(!cnn.is_mlp());
    assert_eq!(cnn.to_string(), "conv32k3,pool2");
    assert!("cnn:3".parse::<ModelSpec>().unwrap_err().contains("mlp:H1"));
    assert!("cnn:3"
        .parse::<ModelSpec>()
        .unwrap_err()
        .contains("conv32k3"));
    let e = "conv32k3,pool,dense8".parse::<ModelSpec>().unwrap_err();
    assert!(e.contains("layer 2 `pool`"), "{e}");
    assert!("mlp:12x".parse::<ModelSpec>().unwrap_err().contains("12x"));
    assert!("mlp:0".parse::<ModelSpec>().is_err());
    assert!("mlp:1,,2"
        .parse::<ModelSpec>()
        .unwrap_err()
        .contains("empty hidden width"));
    assert!("mlp:8,".parse::<ModelSpec>().is_err());
    let deep = format!("mlp:{}", vec!["4"; 65].join(","));
    assert!(deep
        .parse::<ModelSpec>()
        .unwrap_err()
        .contains("at most 64"));
}

#[test]
fn layout_is_contiguous() {
    let m = Model::mlp(64, &[128], 10);
    assert_eq!(m.n_params, 64 * 128 + 128 + 128 * 10 + 10);
    assert_eq!(m.shape_string(), "64-128-10");
    assert_eq!(m.tensors[1].name, "mlp.0.bias");
    assert_eq!(m.tensors[3].offset + m.tensors[3].len, m.n_params);
    // an MLP reads an image as a flat vector
    let img = Shape::Image { c: 1, h: 8, w: 8 };
    let flat = Model::new(img, &ModelSpec::mlp(&[128]), 10).unwrap();
    assert_eq!(flat, m);
}

#[test]
fn the_seed_cnn_has_pytorch_shapes_and_names() {
    let input = Shape::Image { c: 1, h: 28, w: 28 };
    let m = Model::new(input, &"conv32k3,pool2".parse().unwrap(), 10).unwrap();
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
            ("dense.2.weight", &[5408, 10][..]),
            ("dense.2.bias", &[10][..]),
        ]
    );
    assert_eq!(m.shape_string(), "1x28x28-32x26x26-32x13x13-10");
    assert_eq!(m.dims, vec![784, 21632, 5408, 10]);
    // conv layers need an image, and the error names the layer
    let e = Model::new(Shape::Flat(64), &"conv8k3".parse().unwrap(), 10).unwrap_err();
    assert!(
        e.contains("layer 1 `conv8k3`") && e.contains("flat vector"),
        "{e}"
    );
    let tiny = Shape::Image { c: 1, h: 4, w: 4 };
    let e = Model::new(tiny, &"conv8k3,pool2,pool2".parse().unwrap(), 10).unwrap_err();
    assert!(e.contains("layer 3 `pool2`"), "{e}");
}

/// Central differences of the loss against the backward pass, every `step`-th parameter.
/// ReLU and max pooling have kinks: a parameter whose difference quotient still moves
/// between two step sizes straddles one and is not judged (at most a few may).
fn gradcheck(m: &Model, b: usize, step: usize, seed: u64) {
    let params = m.init_params(seed);
    let mut rng = Rng::new(seed + 1);
    let x: Vec<f32> = (0..b * m.dims[0]).map(|_| rng.normal()).collect();
    let classes = m.dims[m.layers()] as u32;
    let y: Vec<u32> = (0..b as u32).map(|i| (i * 7 + 1) % classes).collect();
    let mut ws = Workspace::default();
    let mut grads = vec![0.0; m.n_params];
    m.forward_backward(&params, &mut grads, &mut ws, &x, &y, b);
    let mut p = params.clone();
    let mut quotient = |i: usize, h: f32| {
        let p0 = p[i];
        p[i] = p0 + h;
        let lp = m.evaluate(&p, &mut ws, &x, &y, b).0;
        p[i] = p0 - h;
        let lm = m.evaluate(&p, &mut ws, &x, &y, b).0;
        p[i] = p0;
        (lp - lm) / (2.0 * h as f64)
    };
    let (mut judged, mut kinked) = (0, 0);
    for i in (0..m.n_params).step_by(step) {
        let (coarse, fine) = (quotient(i, 4e-3), quotient(i, 2e-3));
        if (coarse - fine).abs() > 1e-3 + 0.02 * fine.abs() {
            kinked += 1;
            continue;
        }
        judged += 1;
        assert!(
            (grads[i] as f64 - fine).abs() <= 2e-3 + 1e-2 * fine.abs(),
            "{}: param {i}: {} vs {fine}",
            m.shape_string(),
            grads[i]
        );
    }
    assert!(kinked * 5 <= judged, "{kinked} kinked, {judged} judged");
}

#[test]
fn whole_model_gradient_matches_finite_differences() {
    gradcheck(&Model::mlp(5, &[7, 6], 4), 3, 3, 9);
}

#[test]
fn whole_cnn_gradient_matches_finite_differences() {
    // conv (padded, then strided), pooling with a partial window dropped, dense layers
    let input = Shape::Image { c: 2, h: 7, w: 6 };
    let spec = "conv3k3p1,pool2,conv4k2s2,dense5".parse().unwrap();
    gradcheck(&Model::new(input, &spec, 3).unwrap(), 2, 1, 4);
    // a pooling layer first (no input gradient needed)
    let spec = "pool2,conv2k2,dense3".parse().unwrap();
    let input = Shape::Image { c: 1, h: 6, w: 6 };
    gradcheck(&Model::new(input, &spec, 2).unwrap(), 3, 1, 5);
}
