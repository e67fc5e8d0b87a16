use std::path::Path;
use std::process::Command;

use safetensors::tensor::{Dtype, TensorView};

use super::*;
use crate::nn::model::{ModelSpec, Workspace};
use crate::nn::rng::{tag, Rng};

fn built(spec: &str, input: Shape, classes: usize) -> Model {
    let spec: ModelSpec = spec.parse().unwrap();
    spec.build(input, classes).unwrap()
}

#[test]
fn a_layer_list_becomes_modules_under_its_weights_names_and_its_ops_in_order() {
    let m = built(
        "conv8k3p1,bn,pool2,dense16,dropout0.25",
        Shape::Image { c: 1, h: 8, w: 8 },
        10,
    );
    let made = Inputs {
        text: "RGB pictures \"as stored\"\n\"\"\"",
        affine: None,
    };
    let about = "model: conv8k3p1,bn,pool2,dense16,dropout0.25\ndata: digits";
    let py = module(&m, about, made);
    assert!(py.starts_with(MARK), "{py}");
    assert!(py.contains("# data: digits\n"), "{py}");
    // how the samples are made, where no quote or line break gets out of the docstring
    assert!(
        py.contains("made as the run made its samples:\n    RGB pictures 'as stored'?'''"),
        "{py}"
    );
    assert_eq!(py.matches("\"\"\"").count(), 2, "{py}");
    for line in [
        "self._add(\"conv.0\", nn.Conv2d(1, 8, 3, padding=1, bias=False))",
        "self._add(\"bn.1\", nn.BatchNorm2d(8))",
        "self._add(\"dense.3\", nn.Linear(128, 16))",
        "self._add(\"dense.5\", nn.Linear(16, 10))",
        "x0 = x.reshape(x.shape[0], 1, 8, 8)",
        "x1 = m(\"conv.0\")(x0)  # 8x8x8",
        "x2 = F.relu(m(\"bn.1\")(x1))",
        "x3 = F.max_pool2d(x2, 2, 2, 0)  # 8x4x4",
        "x4 = F.relu(m(\"dense.3\")(x3.flatten(1)))  # 16",
        "x5 = F.dropout(x4, 0.25, self.training)",
        "x6 = m(\"dense.5\")(x5)  # 10",
        "return x6",
    ] {
        assert!(py.contains(line), "no `{line}` in\n{py}");
    }
    // every parameter's module is made, and no other
    let adds = py.matches("self._add(\"").count();
    let named = m.nodes.iter().filter(|n| !n.name.is_empty()).count();
    assert_eq!(adds, named, "{py}");
}

#[test]
fn an_mlp_reads_its_input_flat_and_a_flat_batch_norm_is_1d() {
    let m = built("mlp:32", Shape::Image { c: 3, h: 4, w: 4 }, 5);
    let py = module(&m, "", Inputs::default());
    assert!(py.contains("x0 = x.flatten(1)"), "{py}");
    assert!(
        py.contains("self._add(\"mlp.0\", nn.Linear(48, 32))"),
        "{py}"
    );
    let m = built("dense32,bn,dense16", Shape::Flat(48), 5);
    let py = module(&m, "", Inputs::default());
    assert!(py.contains("nn.BatchNorm1d(32)"), "{py}");
    // a depthwise convolution says its groups, a residual its sum
    let m = built(
        "conv8k3p1,dwconv3s2p1,relu6,basic8",
        Shape::Image { c: 3, h: 8, w: 8 },
        2,
    );
    let py = module(&m, "", Inputs::default());
    assert!(
        py.contains("nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8))"),
        "{py}"
    );
    assert!(py.contains("F.relu6("), "{py}");
    assert!(py.contains("F.relu(x") && py.contains(" + x"), "{py}");
}

/// A float32 tensor's little-endian bytes.
fn le(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|f| f.to_le_bytes()).collect()
}

/// Writes `m` with random weights and running statistics, as `export` writes them (with
/// `num_batches_tracked`), its module, and an input with the logits mgtop-train computes for it
/// (from the input scaled by `affine`, as a table's values are, where there is one).
fn write_case(dir: &Path, name: &str, m: &Model, seed: u64, affine: Option<(&[f64], &[f64])>) {
    let mut rng = Rng::stream(seed, tag::INIT, 1);
    let mut params = m.init_params(seed);
    for p in &mut params {
        *p += 0.1 * rng.normal();
    }
    let mut buffers = m.init_buffers();
    for t in &m.buffers {
        for v in &mut buffers[t.range()] {
            *v = match t.name.ends_with("running_var") {
                true => 0.5 + rng.uniform(0.0, 1.0),
                false => 0.3 * rng.normal(),
            };
        }
    }
    let b = 3;
    let x: Vec<f32> = (0..b * m.dims[0]).map(|_| rng.normal()).collect();
    let d = m.dims[0];
    let scaled: Vec<f32> = match affine {
        Some((shift, scale)) => (x.iter().enumerate())
            .map(|(i, v)| {
                let j = if shift.len() == 1 { 0 } else { i % d };
                ((*v as f64 - shift[j]) * scale[j]) as f32
            })
            .collect(),
        None => x.clone(),
    };
    let mut ws = Workspace::default();
    m.evaluate(&params, &buffers, &mut ws, &scaled, &vec![0; b], b);
    let logits = ws.logits(m, b).to_vec();

    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = (m.tensors.iter().map(|t| (t, &params)))
        .chain(m.buffers.iter().map(|t| (t, &buffers)))
        .map(|(t, from)| (t.name.clone(), t.shape.clone(), le(&from[t.range()])))
        .collect();
    let tracked = 7i64.to_le_bytes();
    let mut views: Vec<(String, TensorView)> = Vec::new();
    for (n, shape, data) in &bytes {
        views.push((
            n.clone(),
            TensorView::new(Dtype::F32, shape.clone(), data).unwrap(),
        ));
        if let Some(bn) = n.strip_suffix("running_mean") {
            let t = TensorView::new(Dtype::I64, Vec::new(), &tracked).unwrap();
            views.push((format!("{bn}num_batches_tracked"), t));
        }
    }
    let weights = safetensors::serialize(views, &None).unwrap();
    std::fs::write(dir.join(format!("{name}.safetensors")), weights).unwrap();
    let (xb, yb) = (le(&x), le(&logits));
    let io = vec![
        (
            "x",
            TensorView::new(Dtype::F32, vec![b, m.dims[0]], &xb).unwrap(),
        ),
        (
            "logits",
            TensorView::new(Dtype::F32, vec![b, m.classes()], &yb).unwrap(),
        ),
    ];
    let io = safetensors::serialize(io, &None).unwrap();
    std::fs::write(dir.join(format!("{name}.io.safetensors")), io).unwrap();
    let inputs = Inputs {
        // (what a hand-edited state.json may hold: the module still imports)
        text: "a table's \"values\" \u{1b}[31m \\u{1b} \\x",
        affine,
    };
    std::fs::write(dir.join(format!("{name}.py")), module(m, name, inputs)).unwrap();
}

/// Loads each case's weights into its module (strictly: every name, no other) and compares
/// the logits with mgtop-train's.
const CHECK: &str = r#"
import runpy, sys, torch, safetensors.torch as st
torch.manual_seed(0)
for case in sys.argv[1:]:
    net = runpy.run_path(case + ".py")["Net"]()
    net.load_state_dict(st.load_file(case + ".safetensors"))
    net.eval()
    io = st.load_file(case + ".io.safetensors")
    with torch.no_grad():
        y = net(io["x"])
    scale = max(1.0, io["logits"].abs().max().item())
    err = (y - io["logits"]).abs().max().item() / scale
    print(case, "max relative difference", err)
    assert err < 1e-4, case
"#;

/// The modules compute what mgtop-train computes, where PyTorch is at hand (`pip install torch
/// safetensors`); CI has none, and says so.
#[test]
fn the_modules_compute_the_same_logits_in_pytorch() {
    let python = Command::new("python3")
        .args(["-c", "import torch, safetensors"])
        .output();
    if !python.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: no PyTorch (python3 -c 'import torch, safetensors' fails)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let image = |c, h, w| Shape::Image { c, h, w };
    let cases = [
        ("mlp", built("mlp:32,16", Shape::Flat(20), 4)),
        (
            "layers",
            built(
                "conv8k3p1,bn,relu6,dwconv3s2p1,pool3s1p1,avgpool2,conv12k1,basic12,\
                 bottleneck8s2,inverted16t2,dropout0.3,gap,dense10,bn,linear",
                image(3, 12, 10),
                7,
            ),
        ),
        (
            "flatten",
            built("conv6k3s2,pool2s1p1,dense9", image(2, 9, 9), 3),
        ),
        ("resnet20", built("resnet20", image(3, 16, 16), 10)),
        (
            "mobilenetv2",
            built("mobilenetv2:0.25", image(3, 32, 32), 5),
        ),
    ];
    let mut args = vec!["-c".to_string(), CHECK.to_string()];
    for (i, (name, m)) in cases.iter().enumerate() {
        write_case(tmp.path(), name, m, i as u64 + 1, None);
        args.push(tmp.path().join(name).display().to_string());
    }
    // a table's scaling, per feature and for every feature alike, in the module
    let (shift, scale): (Vec<f64>, Vec<f64>) = (0..20)
        .map(|j| (j as f64 * 0.1, 1.0 + j as f64 * 0.05))
        .unzip();
    let standardised = built("mlp:16", Shape::Flat(20), 3);
    write_case(
        tmp.path(),
        "standardised",
        &standardised,
        9,
        Some((&shift, &scale)),
    );
    let pictures = built("conv4k3,dense5", Shape::Image { c: 1, h: 6, w: 6 }, 3);
    write_case(
        tmp.path(),
        "scaled",
        &pictures,
        10,
        Some((&[0.0], &[0.0625])),
    );
    for name in ["standardised", "scaled"] {
        args.push(tmp.path().join(name).display().to_string());
    }
    let out = Command::new("python3").args(&args).output().unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    eprint!("{said}");
    assert_eq!(
        said.matches("max relative difference").count(),
        cases.len() + 2,
        "{said}"
    );
}

#[test]
fn a_module_is_told_unedited_by_its_checksum_line() {
    let m = built("dense4", Shape::Flat(3), 2);
    let py = module(&m, "model: dense4\n", Inputs::default());
    assert!(unedited(py.as_bytes()), "{py}");
    // a line added, a character changed, the checksum line cut: edited
    assert!(!unedited(format!("{py}# mine\n").as_bytes()));
    assert!(!unedited(
        py.replacen("Linear(3, 4)", "Linear(3, 5)", 1).as_bytes()
    ));
    let cut = py.trim_end().rsplit_once('\n').unwrap().0.to_string() + "\n";
    assert!(!unedited(cut.as_bytes()));
    // another file that ends as a module does is not one
    let tail = py.rsplit_once("import torch").unwrap().1;
    assert!(!unedited(tail.as_bytes()));
}
