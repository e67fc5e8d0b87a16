//! Fine-tuning: weights in and out by PyTorch's names. `--init` of a file PyTorch's
//! `safetensors` package wrote (the vision fixtures) gives PyTorch's logits; a classifier head
//! for another class count is re-initialised; `export` after training loads back to the same
//! weights; damaged and hostile files are clear errors; `--freeze` leaves frozen tensors
//! bit-identical, and N ranks train as 1.

mod common;

use std::path::{Path, PathBuf};

use mgtop::config::{BnStats, Budget, DeviceSpec, RunConfig};
use mgtop::engine::weights::{export, import};
use mgtop::engine::Engine;
use mgtop::nn::model::{Model, Op, Workspace};
use mgtop::nn::shape::Shape;
use safetensors::SafeTensors;

use common::cli::run_in;

/// A two-step run on one CPU worker (the flags a run of the binary here starts with).
const SHORT_RUN: [&str; 5] = ["--headless", "--devices", "cpu:1", "--steps", "2"];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/vision/{name}.safetensors"))
}

fn tensor(path: &Path, name: &str) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let v = st.tensor(name).unwrap();
    v.data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// `m`'s initial parameters as a safetensors file of its names.
fn saved(m: &Model) -> tempfile::NamedTempFile {
    let params = m.init_params(1);
    f32_file(
        (m.tensors.iter())
            .map(|t| (t.name.clone(), params[t.range()].to_vec(), t.shape.clone()))
            .collect(),
    )
}

#[test]
fn a_head_is_told_from_a_hidden_layer_by_the_layers_the_model_lacks() {
    // an MLP whose hidden width is the file's class count: its head still starts afresh
    let ten = saved(&Model::mlp(64, &[10, 10], 10));
    let two = Model::mlp(64, &[10, 10], 2);
    let (mut p, mut b) = (two.init_params(0), two.init_buffers());
    let notes = import(ten.path(), &two, &mut p, &mut b, false)
        .unwrap()
        .join("\n");
    assert!(notes.contains("re-initialised for 2 classes"), "{notes}");
    // a deeper file's layer in the head's place takes inputs from a layer after it: refused
    let deeper = saved(&Model::mlp(64, &[10, 10, 10], 10));
    let (mut p, mut b) = (two.init_params(0), two.init_buffers());
    let e = import(deeper.path(), &two, &mut p, &mut b, false).unwrap_err();
    assert!(e.contains("another --model"), "{e}");
}

/// A file of the parameters alone (`named_parameters()`, not `state_dict()`) is told by what it
/// lacks: the batch norms' running statistics, which --init-partial starts at 0 and 1.
#[test]
fn a_file_without_running_statistics_is_said_to_lack_them() {
    let m = Model::new(
        Shape::Image { c: 3, h: 8, w: 8 },
        &"conv8k3,bn,pool2,dense16".parse().unwrap(),
        2,
    )
    .unwrap();
    let file = saved(&m);
    let (mut p, mut b) = (m.init_params(0), m.init_buffers());
    let e = import(file.path(), &m, &mut p, &mut b, false).unwrap_err();
    assert!(
        e.contains("it has no batch-norm running statistics (bn.1.running_mean, bn.1.running_var)")
            && e.contains("save model.state_dict()"),
        "{e}"
    );
    let notes = import(file.path(), &m, &mut p, &mut b, true).unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("batch-norm statistics at mean 0 and variance 1")),
        "{notes:?}"
    );
}

#[test]
fn a_layer_list_with_a_layer_more_before_is_said_to_be_renumbered() {
    let image = Shape::Image { c: 3, h: 8, w: 8 };
    let of = |spec: &str| Model::new(image, &spec.parse().unwrap(), 2).unwrap();
    let file = saved(&of("conv8k3,pool2,dense16"));
    let more = of("dropout0.5,conv8k3,pool2,dense16");
    let (mut p, mut b) = (more.init_params(0), more.init_buffers());
    let e = import(file.path(), &more, &mut p, &mut b, false).unwrap_err();
    assert!(
        e.contains("a layer list names each layer by its place in the list"),
        "{e}"
    );
    // a layer more and other widths: only the head fits (as any head of as many classes
    // does), which says nothing of a layer renumbered
    let mlp = |hidden: usize| Model::mlp(64, &[hidden], 10);
    let file = saved(&mlp(128));
    let flat = Shape::Flat(64);
    let other = Model::new(flat, &"dropout0.1,dense64".parse().unwrap(), 10).unwrap();
    let (mut p, mut b) = (other.init_params(0), other.init_buffers());
    let e = import(file.path(), &other, &mut p, &mut b, false).unwrap_err();
    assert!(!e.contains("may be this model's"), "{e}");
    // as wide: its hidden layer fits, renumbered
    let same = Model::new(flat, &"dropout0.1,dense128".parse().unwrap(), 10).unwrap();
    let (mut p, mut b) = (same.init_params(0), same.init_buffers());
    let e = import(file.path(), &same, &mut p, &mut b, false).unwrap_err();
    assert!(e.contains("may be this model's `dense.1.weight`"), "{e}");
    // a dropout less before the classifier head: the head is named at another place, and
    // the file's is said to be it
    let file = saved(&of("conv8k3,pool2,dense16,dropout0.5"));
    let less = of("conv8k3,pool2,dense16");
    let (mut p, mut b) = (less.init_params(0), less.init_buffers());
    let e = import(file.path(), &less, &mut p, &mut b, false).unwrap_err();
    assert!(
        e.contains("not in the file (dense.3.weight, dense.3.bias)")
            && e.contains("the file's `dense.4.weight` may be this model's `dense.3.weight`"),
        "{e}"
    );
}

/// A named network's tensor of another shape is not said to be a layer list's renumbered
/// layer, even where a tensor of the file named alike but for its numbers fits.
#[test]
fn a_named_network_s_wrong_shape_gets_no_layer_list_advice() {
    let m = model("mobilenetv2:0.5", 2);
    let params = m.init_params(1);
    // a depthwise kernel another block has the same shape of, made 5x5
    let wrong = (m.tensors.iter())
        .find(|t| {
            t.shape.len() == 4
                && t.shape[1] == 1
                && (m.tensors.iter()).any(|o| o.name != t.name && o.shape == t.shape)
        })
        .unwrap();
    let file = f32_file(
        (m.tensors.iter())
            .map(|t| match t.name == wrong.name {
                true => {
                    let shape = vec![t.shape[0], 1, 5, 5];
                    (t.name.clone(), vec![0.0; t.shape[0] * 25], shape)
                }
                false => (t.name.clone(), params[t.range()].to_vec(), t.shape.clone()),
            })
            .collect(),
    );
    let (mut p, mut b) = (m.init_params(0), m.init_buffers());
    let e = import(file.path(), &m, &mut p, &mut b, false).unwrap_err();
    assert!(
        e.contains(&format!("tensor `{}` is [", wrong.name)) && e.contains("another --model"),
        "{e}"
    );
    assert!(!e.contains("layer list"), "{e}");
}

fn model(preset: &str, classes: usize) -> Model {
    let mut m = Model::new(
        Shape::Image { c: 3, h: 32, w: 32 },
        &preset.parse().unwrap(),
        classes,
    )
    .unwrap();
    for n in &mut m.nodes {
        if let Op::Dropout { p } = &mut n.op {
            *p = 0.0;
        }
    }
    m
}

/// The model's eval-mode logits of the fixture's input, from `params` and `buffers`.
fn logits(m: &Model, params: &[f32], buffers: &[f32], x: &[f32]) -> Vec<f32> {
    let b = x.len() / 3072;
    let mut ws = Workspace::default();
    m.evaluate(params, buffers, &mut ws, x, &vec![0; b], b);
    ws.logits(m, b).to_vec()
}

fn worst(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(1e-6f32, |s, v| s.max(v.abs()));
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
        / scale
}

#[test]
fn a_file_pytorch_wrote_gives_pytorchs_logits() {
    for (preset, name) in [
        ("resnet20", "resnet20"),
        ("mobilenetv2:0.25", "mobilenetv2_0.25"),
    ] {
        let path = fixture(name);
        let m = model(preset, 10);
        let (mut params, mut buffers) = (m.init_params(0), m.init_buffers());
        let notes = import(&path, &m, &mut params, &mut buffers, false).unwrap();
        let all = m.tensors.len() + m.buffers.len();
        assert!(
            notes[0].contains(&format!("loaded {all} of this model's {all} tensors")),
            "{notes:?}"
        );
        // the fixture's inputs, logits and gradients are not the model's: reported, ignored
        assert!(
            notes
                .iter()
                .any(|n| n.contains("in the file but not in this model, ignored: after.")),
            "{notes:?}"
        );
        let x = tensor(&path, "input");
        let got = logits(&m, &params, &buffers, &x);
        let e = worst(&got, &tensor(&path, "eval.logits"));
        assert!(e <= 1e-4, "{preset}: logits off by {e} of their scale");
    }
}

#[test]
fn a_head_for_other_classes_starts_afresh_and_the_rest_loads() {
    let path = fixture("resnet20");
    let m = model("resnet20", 2);
    let init = m.init_params(5);
    let (mut params, mut buffers) = (init.clone(), m.init_buffers());
    let notes = import(&path, &m, &mut params, &mut buffers, false).unwrap();
    let text = notes.join("\n");
    assert!(
        text.contains("classifier head re-initialised for 2 classes")
            && text.contains("fc.weight [10, 64] -> [2, 64]"),
        "{text}"
    );
    for t in &m.tensors {
        let ours = &params[t.range()];
        if t.name.starts_with("fc.") {
            assert_eq!(
                ours,
                &init[t.range()],
                "{} keeps its initialisation",
                t.name
            );
        } else {
            assert_eq!(ours, tensor(&path, &t.name).as_slice(), "{}", t.name);
        }
    }
    // a mismatch elsewhere is an error naming the tensor
    let wide = model("resnet32", 10);
    let (mut p, mut b) = (wide.init_params(0), wide.init_buffers());
    // a deeper model's layers the file lacks: refused as PyTorch's strict loading does,
    // unless --init-partial
    let e = import(&path, &wide, &mut p, &mut b, false).unwrap_err();
    assert!(
        e.contains("60 of this model's 167 tensors are not in the file (layer1.3.conv1.weight")
            && e.contains("or add --init-partial to load the 107 that match"),
        "{e}"
    );
    let loaded = import(&path, &wide, &mut p, &mut b, true).unwrap();
    // a deeper model's file into a shallower model, which it gives every tensor: refused too
    let of_wide = (wide.tensors.iter().map(|t| (t, &p)))
        .chain(wide.buffers.iter().map(|t| (t, &b)))
        .map(|(t, v)| (t.name.clone(), v[t.range()].to_vec(), t.shape.clone()))
        .collect();
    let deeper = f32_file(of_wide);
    let (mut p, mut b) = (m.init_params(0), m.init_buffers());
    let e = import(deeper.path(), &m, &mut p, &mut b, false).unwrap_err();
    assert!(
        e.contains("tensors of layers this model lacks (layer1.3.bn1.bias")
            && e.contains("the weights of a deeper model"),
        "{e}"
    );
    let notes = import(deeper.path(), &m, &mut p, &mut b, true).unwrap();
    // a backbone's file without its classifier head (as fine-tuning exports it): loaded, the
    // head at random, as one for another class count
    let buffers = m.init_buffers();
    let backbone = (m.tensors.iter().map(|t| (t, &init)))
        .chain(m.buffers.iter().map(|t| (t, &buffers)))
        .filter(|(t, _)| !t.name.starts_with("fc."))
        .map(|(t, v)| (t.name.clone(), v[t.range()].to_vec(), t.shape.clone()))
        .collect();
    let backbone = f32_file(backbone);
    let (mut p2, mut b2) = (m.init_params(0), m.init_buffers());
    let said = import(backbone.path(), &m, &mut p2, &mut b2, false).unwrap();
    assert!(
        said.iter().any(|n| n.contains(
            "the file has no classifier head (fc.weight, fc.bias): it starts at random for this data's 2 classes"
        )),
        "{said:?}"
    );
    assert!(
        notes.iter().any(|n| n.contains("ignored: layer1.3.")),
        "{notes:?}"
    );
    assert!(
        loaded
            .iter()
            .any(|n| n.contains("missing from the file") && n.contains("layer1.3.")),
        "{loaded:?}"
    );
    let mlp = Model::mlp(3072, &[64], 10);
    let (mut p, mut b) = (mlp.init_params(0), mlp.init_buffers());
    let e = import(&path, &mlp, &mut p, &mut b, false).unwrap_err();
    assert!(
        e.contains("none of its") && e.contains("is it a checkpoint of this --model"),
        "{e}"
    );
    // a file of the head alone, for another class count: it says so
    let bytes = std::fs::read(&path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let head: Vec<(String, safetensors::tensor::TensorView)> = ["fc.weight", "fc.bias"]
        .iter()
        .map(|n| (n.to_string(), st.tensor(n).unwrap()))
        .collect();
    let only_head = tempfile::NamedTempFile::new().unwrap();
    safetensors::serialize_to_file(head, &None, only_head.path()).unwrap();
    let (mut p, mut b) = (m.init_params(0), m.init_buffers());
    let e = import(only_head.path(), &m, &mut p, &mut b, false).unwrap_err();
    assert!(
        e.contains("only the classifier head is named as this model's")
            && e.contains("fc.weight [10, 64] -> [2, 64]"),
        "{e}"
    );
    // a head of the same class count over other features is another model, not a new head
    let narrow = vec![0u8; 10 * 32 * 4];
    let tensors: Vec<(String, safetensors::tensor::TensorView)> = (st.names().into_iter())
        .map(|n| match n.as_str() {
            "fc.weight" => {
                let v = safetensors::tensor::TensorView::new(
                    safetensors::Dtype::F32,
                    vec![10, 32],
                    &narrow,
                );
                (n.clone(), v.unwrap())
            }
            _ => (n.clone(), st.tensor(n).unwrap()),
        })
        .collect();
    let other_width = tempfile::NamedTempFile::new().unwrap();
    safetensors::serialize_to_file(tensors, &None, other_width.path()).unwrap();
    let ten = model("resnet20", 10);
    let (mut p, mut b) = (ten.init_params(0), ten.init_buffers());
    let e = import(other_width.path(), &ten, &mut p, &mut b, false).unwrap_err();
    assert!(
        e.contains("tensor `fc.weight` is [10, 32] but this model's `fc.weight` is [10, 64]")
            && e.contains("another --model"),
        "{e}"
    );
}

#[test]
fn damaged_and_hostile_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let m = model("resnet20", 10);
    let try_file = |bytes: &[u8]| {
        let f = dir.path().join("w.safetensors");
        std::fs::write(&f, bytes).unwrap();
        let (mut p, mut b) = (m.init_params(0), m.init_buffers());
        import(&f, &m, &mut p, &mut b, false).unwrap_err()
    };
    let good = std::fs::read(fixture("resnet20")).unwrap();
    let e = try_file(&good[..good.len() / 2]);
    assert!(
        e.contains("not a whole safetensors file") && e.contains("cut short"),
        "{e}"
    );
    // longer than its header lays out (judged from the header, the bulk unread)
    let long = [&good[..], &[0u8; 1000][..]].concat();
    let e = try_file(&long);
    assert!(
        e.contains(&format!(
            "not a whole safetensors file (it is {} bytes long where its header lays out {})",
            long.len(),
            good.len()
        )),
        "{e}"
    );
    // a header that claims more bytes than the file holds
    let header =
        br#"{"conv1.weight":{"dtype":"F32","shape":[100000000],"data_offsets":[0,400000000]}}"#;
    let mut claim = (header.len() as u64).to_le_bytes().to_vec();
    claim.extend(header);
    claim.extend([0u8; 64]);
    let e = try_file(&claim);
    assert!(
        e.contains(&format!(
            "not a whole safetensors file (it ends at byte {} of the {} its header lays out)",
            claim.len(),
            400_000_000 + 8 + header.len()
        )),
        "{e}"
    );
    // an entry whose shape needs other bytes than its offsets hold; metadata of numbers
    let header = br#"{"conv1.weight":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#;
    let mut odd = (header.len() as u64).to_le_bytes().to_vec();
    odd.extend(header);
    odd.extend([0u8; 8]);
    let e = try_file(&odd);
    assert!(
        e.contains("its header's entry `conv1.weight` is [3] of F32, 12 bytes, but its data_offsets [0, 8] hold 8"),
        "{e}"
    );
    let header = br#"{"__metadata__":{"a":1},"conv1.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    let mut meta = (header.len() as u64).to_le_bytes().to_vec();
    meta.extend(header);
    meta.extend([0u8; 8]);
    let e = try_file(&meta);
    assert!(e.contains("`__metadata__` holds more than text"), "{e}");
    // an entry safetensors cannot take is named, with what is wrong with it
    for (entry, says) in [
        (
            r#"{"dtype":"F99","shape":[2],"data_offsets":[0,8]}"#,
            "has dtype `F99`, one this program does not read",
        ),
        (
            r#"{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}"#,
            "has a shape that is not a list of whole numbers",
        ),
        (r#"{"dtype":"F32","shape":[2]}"#, "has no data_offsets"),
    ] {
        let header = format!(r#"{{"conv1.weight":{entry}}}"#);
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend(header.as_bytes());
        file.extend([0u8; 8]);
        let e = try_file(&file);
        assert!(
            e.contains(&format!("its header's entry `conv1.weight` {says}")),
            "{e}"
        );
    }
    // a file of another model is refused by its header, its bulk unread (this one's is cut
    // short: read whole, it would be refused as damaged)
    let header =
        br#"{"encoder.embed.weight":{"dtype":"F32","shape":[100000000],"data_offsets":[0,400000000]}}"#;
    let mut other = (header.len() as u64).to_le_bytes().to_vec();
    other.extend(header);
    other.extend([0u8; 64]);
    let e = try_file(&other);
    assert!(
        e.contains("none of its 1 tensor is named as this model's")
            && e.contains("the file has encoder.embed.weight"),
        "{e}"
    );
    // a header length past the file
    let e = try_file(&u64::MAX.to_le_bytes());
    assert!(
        e.contains(
            "not a whole safetensors file (its first 8 bytes claim a header of over 100 MB)"
        ),
        "{e}"
    );
    // integers where weights should be
    let header = br#"{"conv1.weight":{"dtype":"I32","shape":[16,3,3,3],"data_offsets":[0,1728]}}"#;
    let mut ints = (header.len() as u64).to_le_bytes().to_vec();
    ints.extend(header);
    ints.extend(vec![0u8; 1728]);
    let e = try_file(&ints);
    assert!(
        e.contains("`conv1.weight` is I32") && e.contains("F32, F16, BF16"),
        "{e}"
    );
    let e = try_file(b"PK\x03\x04 a zip file, as torch.save writes");
    assert!(
        e.contains("a zip archive, as PyTorch's torch.save writes")
            && e.contains("pth_to_safetensors.py"),
        "{e}"
    );
}

#[test]
fn trained_weights_export_for_pytorch_and_load_back() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    Engine::run(RunConfig {
        grad_accum: 2,
        ..one_cpu(
            &run,
            "conv4k3p1,bn,basic4,gap",
            "synthetic-images:64,3,8,8,3",
            4,
        )
    })
    .unwrap();
    let out = dir.path().join("trained.safetensors");
    let done = export(&run.join("checkpoints"), &out).unwrap();
    let n = done.tensors;
    assert_eq!(done.torchvision_changes, None);
    // torchvision has no such model: its module is written beside the weights
    let how = done.how_to_load(&out);
    let py = dir.path().join("trained.py");
    assert_eq!(done.module.as_deref(), Some(py.as_path()));
    assert!(
        how.starts_with(&format!(
            "load in PyTorch: model = runpy.run_path(\"{}\")[\"Net\"](); model.load_state_dict(",
            py.display()
        )),
        "{how}"
    );
    let meta = st_metadata(&out);
    assert_eq!(meta["mgtop.model"], "conv4k3p1,bn,basic4,gap");
    assert_eq!(meta["mgtop.input"], "3x8x8");
    let source = std::fs::read_to_string(&py).unwrap();
    assert!(
        source.starts_with(mgtop::nn::model::pytorch::MARK)
            && source.contains("--model conv4k3p1,bn,basic4,gap on 3x8x8 inputs, 3 classes")
            && source.contains(
                "self._add(\"basic.2.conv1\", nn.Conv2d(4, 4, 3, padding=1, bias=False))"
            ),
        "{source}"
    );
    let bytes = std::fs::read(&out).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let names: Vec<String> = st.names().into_iter().cloned().collect();
    assert_eq!(n, names.len());
    assert!(names.iter().all(|n| !n.starts_with("optim.")), "{names:?}");
    // every batch norm carries num_batches_tracked, as PyTorch's state_dict does: its training
    // passes (4 steps of 2 micro-batches)
    for bn in names.iter().filter_map(|n| n.strip_suffix("running_mean")) {
        let t = st.tensor(&format!("{bn}num_batches_tracked")).unwrap();
        assert_eq!((t.dtype(), t.shape()), (safetensors::Dtype::I64, &[][..]));
        assert_eq!(i64::from_le_bytes(t.data().try_into().unwrap()), 8);
    }
    // loaded back into a fresh model: the checkpoint's weights, bit for bit
    let m = Model::new(
        Shape::Image { c: 3, h: 8, w: 8 },
        &"conv4k3p1,bn,basic4,gap".parse().unwrap(),
        3,
    )
    .unwrap();
    let (mut params, mut buffers) = (m.init_params(9), m.init_buffers());
    import(&out, &m, &mut params, &mut buffers, false).unwrap();
    let ckpt = run.join("checkpoints/step-00000004");
    for t in &m.tensors {
        assert_eq!(
            &params[t.range()],
            tensor(&ckpt.join("model.safetensors"), &t.name).as_slice()
        );
    }
    for t in &m.buffers {
        assert_eq!(
            &buffers[t.range()],
            tensor(&ckpt.join("model.safetensors"), &t.name).as_slice()
        );
    }
    // a checkpoint's file is not its checkpoint; a directory is not a weights file
    let weights = run.join("checkpoints/step-00000004/model.safetensors");
    let e = export(&weights, &out).unwrap_err();
    assert!(
        e.contains("a file of checkpoint") && e.contains("give the checkpoint's folder"),
        "{e}"
    );
    // an export is a weights file: it starts a run, it is no checkpoint to export or resume
    let e = export(&out, &run.join("again.safetensors")).unwrap_err();
    assert!(
        e.contains("a file, not a checkpoint")
            && e.contains(&format!(
                "it is weights already: copy it (cp {} NEW.safetensors)",
                out.display()
            )),
        "{e}"
    );
    use mgtop::engine::rundir::{checkpoint_for, Purpose};
    let e = checkpoint_for(&out, Purpose::Resume).unwrap_err();
    assert!(e.ends_with(&format!("--init {}", out.display())), "{e}");
    let e = import(&run, &m, &mut params, &mut buffers, false).unwrap_err();
    assert!(
        e.contains("give the weights file of its checkpoint: --init /")
            && e.ends_with("step-00000004/model.safetensors"),
        "{e}"
    );
    // bad targets
    let e = export(&dir.path().join("nowhere"), &out).unwrap_err();
    assert!(e.contains("no such file or directory"), "{e}");
    let e = export(&run.join("checkpoints"), dir.path()).unwrap_err();
    assert!(e.contains("is a directory"), "{e}");
}

/// A BN model on 3x8x8 images: 2 ranks of 8 or 1 rank of 16, `--freeze` as given, --sync-bn
/// (so N ranks == 1 rank holds through batch norm), weight decay on.
fn frozen_run(ranks: usize, freeze: &str, ckpt: &Path) -> mgtop::engine::RunResult {
    let cfg = RunConfig {
        devices: DeviceSpec::Cpu(ranks),
        model: "conv4k3p1,bn,relu,basic4,gap,dense6".parse().unwrap(),
        data: "synthetic-images:96,3,8,8,3".parse().unwrap(),
        inputs: mgtop::data::DataOptions::no_validation(),
        budget: Budget::Steps(6),
        batch_per_replica: 16 / ranks,
        optimizer: "momentum".parse().unwrap(),
        weight_decay: 0.01,
        sync_bn: true,
        freeze: Some(freeze.parse().unwrap()),
        checkpoint_dir: ckpt.to_path_buf(),
        final_checkpoint: false,
        ..RunConfig::default()
    };
    Engine::run(cfg).unwrap()
}

#[test]
fn frozen_parameters_stay_bit_identical_and_ranks_agree() {
    let dir = tempfile::tempdir().unwrap();
    let m = Model::new(
        Shape::Image { c: 3, h: 8, w: 8 },
        &"conv4k3p1,bn,relu,basic4,gap,dense6".parse().unwrap(),
        3,
    )
    .unwrap();
    let init = m.init_params(0);
    let head = m.head_tensors();
    for freeze in ["backbone", "conv.0.,basic"] {
        let one = frozen_run(1, freeze, dir.path());
        let two = frozen_run(2, freeze, dir.path());
        let (mut frozen, mut trained) = (0, 0);
        for (i, t) in m.tensors.iter().enumerate() {
            let r = t.range();
            let is_frozen = match freeze {
                "backbone" => !head.contains(&i),
                _ => t.name.starts_with("conv.0.") || t.name.starts_with("basic"),
            };
            if is_frozen {
                assert_eq!(
                    &one.state.params[r.clone()],
                    &init[r.clone()],
                    "{freeze}: {} moved",
                    t.name
                );
                assert_eq!(
                    &two.state.params[r.clone()],
                    &init[r],
                    "{freeze}: {} moved on 2 ranks",
                    t.name
                );
                frozen += 1;
            } else {
                assert_ne!(
                    &one.state.params[r.clone()],
                    &init[r],
                    "{freeze}: {} did not train",
                    t.name
                );
                trained += 1;
            }
        }
        assert!(
            frozen > 0 && trained > 0,
            "{freeze}: {frozen} frozen, {trained} trained"
        );
        let worst = one
            .state
            .params
            .iter()
            .zip(&two.state.params)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(worst <= 1e-5, "{freeze}: 2 ranks differ from 1 by {worst}");
    }
}

#[test]
fn a_frozen_run_keeps_no_moments_for_frozen_tensors_and_resumes_exactly() {
    use mgtop::engine::strategy::Strategy;
    let dir = tempfile::tempdir().unwrap();
    for (strategy, freeze) in [
        (Strategy::Mirrored, "conv.0.,basic"),
        (Strategy::CentralStorage, "backbone"),
    ] {
        let ckpt = dir.path().join(strategy.to_string());
        let base = RunConfig {
            devices: DeviceSpec::Cpu(2),
            model: "conv4k3p1,bn,relu,basic4,gap,dense6".parse().unwrap(),
            data: "synthetic-images:96,3,8,8,3".parse().unwrap(),
            inputs: mgtop::data::DataOptions::no_validation(),
            budget: Budget::Steps(8),
            batch_per_replica: 8,
            optimizer: "adam".parse().unwrap(),
            // the ranks' running statistics then agree, and a checkpoint's averaging of them is
            // exact: the resumed state must equal the straight one bit for bit
            sync_bn: true,
            strategy,
            freeze: Some(freeze.parse().unwrap()),
            checkpoint_dir: ckpt.clone(),
            final_checkpoint: false,
            ..RunConfig::default()
        };
        let straight = Engine::run(base.clone()).unwrap();
        // what a run hands out (checkpoints, exports) is laid out over every parameter, with
        // the frozen tensors' moments zero
        let m = &straight.state.opt.m;
        assert_eq!(m.len(), straight.state.params.len(), "{strategy}");
        let zeros = m.iter().filter(|&&x| x == 0.0).count();
        assert!(
            zeros > 0 && zeros < m.len(),
            "{strategy}: {zeros} zero moments"
        );
        let half = Engine::run(RunConfig {
            budget: Budget::Steps(4),
            final_checkpoint: true,
            ..base.clone()
        })
        .unwrap();
        assert!(half.last_checkpoint.is_some());
        let rest = Engine::run(RunConfig {
            resume: Some(ckpt.clone()),
            ..base.clone()
        })
        .unwrap();
        assert_eq!(
            straight.state, rest.state,
            "{strategy}: resumed != straight"
        );
        // and without --freeze the checkpoint resumes too: every tensor trains from there
        let thawed = Engine::run(RunConfig {
            resume: Some(ckpt),
            freeze: None,
            ..base
        })
        .unwrap();
        assert_ne!(thawed.state.params, rest.state.params, "{strategy}");
    }
}

#[test]
fn a_tensor_a_resume_unfreezes_takes_adam_steps_of_its_own_count() {
    // PyTorch's recipe of a head trained first, then everything: the backbone's Adam state
    // starts at its first step (with the run's count, its zero moments moved it ~3x the LR)
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("ck");
    let lr = 1e-3;
    let base = RunConfig {
        devices: DeviceSpec::Cpu(1),
        model: "mlp:16".parse().unwrap(),
        data: "synthetic:256,8,3".parse().unwrap(),
        inputs: mgtop::data::DataOptions::no_validation(),
        budget: Budget::Steps(30),
        batch_per_replica: 16,
        optimizer: "adam".parse().unwrap(),
        lr: Some(lr),
        freeze: Some("backbone".parse().unwrap()),
        checkpoint_dir: ckpt.clone(),
        ..RunConfig::default()
    };
    let head_first = Engine::run(base.clone()).unwrap();
    let m = Model::new(Shape::Flat(8), &"mlp:16".parse().unwrap(), 3).unwrap();
    let first = m.tensors[0].range();
    let moved = |a: &[f32], b: &[f32]| -> f32 {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
            / lr
    };
    let thawed = |steps| {
        Engine::run(RunConfig {
            resume: Some(ckpt.clone()),
            freeze: None,
            budget: Budget::Steps(steps),
            ..base.clone()
        })
        .unwrap()
    };
    // Adam's first step moves each weight by the LR at most (|m^| / sqrt(v^) = 1)
    let one = thawed(31);
    let step = moved(
        &one.state.params[first.clone()],
        &head_first.state.params[first.clone()],
    );
    assert!(
        (0.9..=1.0001).contains(&step),
        "the first step moved {step} x lr"
    );
    // and it goes on counting from there through the thawed run's checkpoint (step 31's)
    let ten = thawed(40);
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ckpt.join("step-00000040/state.json")).unwrap())
            .unwrap();
    assert_eq!(meta["optimizer_began"][&m.tensors[0].name], 30, "{meta}");
    // (the head, trained from the start, is no tensor that began late)
    assert!(
        meta["optimizer_began"].get(&m.tensors[2].name).is_none(),
        "{meta}"
    );
    assert_ne!(ten.state.params, one.state.params);
}

#[test]
fn exporting_a_damaged_checkpoint_names_a_whole_one_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| run_in(dir.path(), args);
    let o = run(&[
        "--headless",
        "--steps",
        "20",
        "--checkpoint-every",
        "10",
        "--run-dir",
        "run",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let newest = dir
        .path()
        .join("run/checkpoints/step-00000020/model.safetensors");
    // a NaN where the first tensor's first value was: refused as --resume refuses it
    let mut bytes = std::fs::read(&newest).unwrap();
    let start = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    bytes[start..start + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    std::fs::write(&newest, &bytes).unwrap();
    // the checksum its state.json recorded finds it first
    let o = run(&["export", "run", "w.safetensors"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(1)
            && err.contains("does not match the checksum its state.json recorded")
            && err.contains("export a whole one beside it: mgtop-train export ")
            && err.contains("step-00000010"),
        "{err}"
    );
    // and --init of its weights file (the README's way to fine-tune from a run) too
    let weights = newest.to_str().unwrap();
    let o = run(&["--headless", "--steps", "1", "--init", weights]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(1)
            && err.contains("does not match the checksum its state.json recorded")
            && err.contains("--init ")
            && err.contains("step-00000010/model.safetensors"),
        "{err}"
    );
    // a checkpoint from before checksums: the NaN itself is found
    let state = newest.with_file_name("state.json");
    let mut meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    meta.as_object_mut().unwrap().remove("weights_crc32c");
    std::fs::write(&state, serde_json::to_vec(&meta).unwrap()).unwrap();
    let o = run(&["export", "run", "w.safetensors"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(1)
            && err.contains("holds NaN or infinity")
            && err.contains("step-00000010"),
        "{err}"
    );
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .unwrap();
    f.set_len(100).unwrap();
    let o = run(&["export", "run", "w.safetensors"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(1)
            && err.contains("not a whole safetensors file")
            && err.contains("export a whole one beside it: ")
            && err.contains("step-00000010"),
        "{err}"
    );
    // its weights file gone: unreadable as --resume says it, with the one beside it
    std::fs::remove_file(&newest).unwrap();
    let o = run(&["export", "run", "w.safetensors"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(1)
            && err.contains("step-00000020 is unreadable: model.safetensors: No such file")
            && err.contains("export a whole one beside it: ")
            && err.contains("step-00000010"),
        "{err}"
    );
    assert!(!dir.path().join("w.safetensors").exists());
}

/// Weights trained on inputs prepared one way, started from on inputs prepared another: said,
/// with the data they learned on.
#[test]
fn an_init_file_of_inputs_prepared_otherwise_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let o = run_in(dir.path(), &[&SHORT_RUN[..], args].concat());
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            o.status.success(),
            "{out}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        out
    };
    // the digits scaled x/16; then a table of as many features and classes, used as given
    run(&["--export", "w.safetensors"]);
    let out = run(&["--init", "w.safetensors", "--data", "synthetic:200,64,10"]);
    assert!(
        out.contains("--init: the file's weights learned on inputs scaled x*1/16 to [0,1], from --data digits; this run's are "),
        "{out}"
    );
    // the same preparation: nothing said
    let out = run(&["--init", "w.safetensors"]);
    assert!(!out.contains("learned on inputs"), "{out}");
    // the file it starts from is not the export's to replace, before any training
    let before = std::fs::read(dir.path().join("w.safetensors")).unwrap();
    let export_over_init = ["--init", "w.safetensors", "--export", "./w.safetensors"];
    let o = run_in(dir.path(), &[&SHORT_RUN[..], &export_over_init].concat());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(1) && err.contains("the --init file this run starts from"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(dir.path().join("w.safetensors")).unwrap(),
        before
    );
}

#[test]
fn export_at_the_end_of_a_run_and_as_a_command_write_the_same_weights() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_in(
        dir.path(),
        &[
            "--headless",
            "--steps",
            "20",
            "--run-dir",
            "run",
            "--export",
            "end.safetensors",
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("exported 4 tensors to end.safetensors and its PyTorch module to end.py (--export; load in PyTorch: "),
        "{out}"
    );
    let o = run_in(dir.path(), &["export", "run", "later.safetensors"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(dir.path().join("end.py").is_file() && dir.path().join("later.py").is_file());
    let (a, b) = (
        std::fs::read(dir.path().join("end.safetensors")).unwrap(),
        std::fs::read(dir.path().join("later.safetensors")).unwrap(),
    );
    // (the same bytes: content hashes of exports hold; the metadata's keys were in a
    // HashMap's order)
    assert!(a == b, "two exports of one checkpoint differ");
    let (a, b) = (
        SafeTensors::deserialize(&a).unwrap(),
        SafeTensors::deserialize(&b).unwrap(),
    );
    let mut names: Vec<String> = a.names().into_iter().cloned().collect();
    names.sort();
    assert!(!names.is_empty());
    for n in &names {
        assert!(
            a.tensor(n).unwrap().data() == b.tensor(n).unwrap().data(),
            "{n} differs"
        );
    }
    let o = run_in(dir.path(), &["--headless", "--steps", "1", "--export", "."]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(1) && err.contains("--export . is a directory"),
        "{err}"
    );
    // the run's own files are refused before it trains, not after
    for (args, said) in [
        (
            ["--metrics-out", "m.jsonl", "--export", "m.jsonl"],
            "the run's --metrics-out file",
        ),
        (
            [
                "--run-dir",
                "r2",
                "--export",
                "r2/checkpoints/step-00000001/w.safetensors",
            ],
            "inside the checkpoint directory the run writes",
        ),
    ] {
        let o = run_in(
            dir.path(),
            &[&["--headless", "--steps", "1"][..], &args].concat(),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.code() == Some(1) && err.contains(said), "{err}");
        assert!(
            !String::from_utf8_lossy(&o.stdout).contains("step 1"),
            "trained first"
        );
    }
}

#[test]
fn an_export_says_which_pytorch_model_takes_it() {
    let exported = |model: &str, changes: Option<&str>| mgtop::engine::weights::Exported {
        checkpoint: PathBuf::new(),
        tensors: 1,
        torchvision_changes: changes.map(String::from),
        model: model.into(),
        classes: 2,
        named: false,
        module: None,
        no_module: None,
        replaced: false,
        module_replaced: false,
        stale_module: None,
        edited_module: None,
        inputs: None,
    };
    let how = |model: &str, changes: Option<&str>| {
        let done = exported(model, changes);
        done.how_to_load(Path::new("w.safetensors"))
    };
    let without = |why: &str| mgtop::engine::weights::Exported {
        no_module: Some(why.into()),
        ..exported("mlp:128", None)
    };
    // an earlier export's module edited since is left beside other weights, and said
    let left = mgtop::engine::weights::Exported {
        edited_module: Some("w.py".into()),
        ..exported("resnet18", None)
    };
    assert!(
        (left.written(Path::new("w.safetensors")))
            .ends_with("; left w.py, an earlier export's module edited since, which does not fit these weights: move it away"),
        "{}",
        left.written(Path::new("w.safetensors"))
    );
    assert_eq!(
        how("mobilenetv2", None),
        "load in PyTorch: model = torchvision.models.mobilenet_v2(num_classes=2); model.load_state_dict(safetensors.torch.load_file(\"w.safetensors\")); model.eval()"
    );
    assert!(how("mobilenetv2:0.5", None).contains("mobilenet_v2(num_classes=2, width_mult=0.5)"));
    let small = how("resnet18", Some("model.maxpool = torch.nn.Identity()"));
    assert!(
        small.contains("model = torchvision.models.resnet18(num_classes=2); model.maxpool = torch.nn.Identity(); model.load_state_dict("),
        "{small}"
    );
    assert!(how("resnet20", None).contains("a CIFAR ResNet (torchvision has none)"));
    assert!(how("mlp:128", None).contains("torch.nn.Module whose parameters have the file's names"));
    let how = without("the checkpoint recorded no --model").how_to_load(Path::new("w.safetensors"));
    assert!(
        how.ends_with("(no module was written beside it: the checkpoint recorded no --model)"),
        "{how}"
    );
}

/// The module beside an export: it replaces a module an export wrote, never another file (the
/// weights are then not written either); a checkpoint whose weights do not fit the model it
/// recorded is refused, as --resume and eval refuse it, and the earlier export is kept.
#[test]
fn an_export_s_module_replaces_only_its_own_and_fits_the_weights() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    Engine::run(one_cpu(&run, "mlp:8", "synthetic:64,6,3", 2)).unwrap();
    let out = dir.path().join("w.safetensors");
    let py = dir.path().join("w.py");
    std::fs::write(&py, "print('my own script')\n").unwrap();
    let e = export(&run, &out).unwrap_err();
    assert!(
        e.contains("w.safetensors: ")
            && e.contains("w.py is there and not a module an export wrote")
            && e.contains("another name"),
        "{e}"
    );
    assert!(!out.exists());
    assert_eq!(
        std::fs::read_to_string(&py).unwrap(),
        "print('my own script')\n"
    );
    std::fs::remove_file(&py).unwrap();
    let done = export(&run, &out).unwrap();
    assert_eq!(
        done.written(&out),
        format!(
            "{} and its PyTorch module to {}",
            out.display(),
            py.display()
        )
    );
    let first = std::fs::read_to_string(&py).unwrap();
    assert!(first.contains("nn.Linear(6, 8)"), "{first}");
    // again: what it replaced is said
    let done = export(&run, &out).unwrap();
    assert_eq!(std::fs::read_to_string(&py).unwrap(), first);
    assert!(
        done.written(&out).ends_with(&format!(
            " (replacing the file there) and its PyTorch module to {} (replacing an earlier export's)",
            py.display()
        )),
        "{}",
        done.written(&out)
    );
    // the module edited since it was written: the user's lines are kept, the export refused
    let edited = first.clone() + "# my own line\n";
    std::fs::write(&py, &edited).unwrap();
    let e = export(&run, &out).unwrap_err();
    assert!(
        e.contains("w.py is there and an export's module edited since")
            && e.contains("move it away"),
        "{e}"
    );
    assert_eq!(std::fs::read_to_string(&py).unwrap(), edited);
    std::fs::write(&py, &first).unwrap();
    // through a link: the module goes beside the file written, the link's target
    let link = dir.path().join("link.safetensors");
    std::os::unix::fs::symlink(&out, &link).unwrap();
    let done = export(&run, &link).unwrap();
    assert_eq!(
        done.module.as_deref(),
        Some(py.canonicalize().unwrap().as_path())
    );
    assert!(!dir.path().join("link.py").exists());
    assert!(link.is_symlink());
    // a state.json edited to another model: its weights are not that model's, and would go
    // out labelled as them; refused, the earlier export left as it was
    let state = run.join("checkpoints/step-00000002/state.json");
    let text = std::fs::read_to_string(&state).unwrap();
    std::fs::write(&state, text.replace("\"mlp:8\"", "\"mlp:9\"")).unwrap();
    let weights = std::fs::read(&out).unwrap();
    let e = export(&run, &out).unwrap_err();
    assert!(
        e.contains("the weights do not fit its model `mlp:9` on 6 inputs")
            && e.contains("mlp.0.bias is [8] in the file, [9] in the model")
            && e.contains("(its state.json or its weights were edited)")
            && e.contains("no other whole checkpoint is beside it"),
        "{e}"
    );
    assert_eq!(std::fs::read_to_string(&py).unwrap(), first);
    assert_eq!(std::fs::read(&out).unwrap(), weights);
    // the export into another model: the model its metadata records is said
    let image = Shape::Image { c: 3, h: 8, w: 8 };
    let conv = Model::new(image, &"conv4k3p1,gap".parse().unwrap(), 3).unwrap();
    let (mut p, mut b) = (conv.init_params(0), conv.init_buffers());
    let e = import(&out, &conv, &mut p, &mut b, false).unwrap_err();
    assert!(
        e.contains("none of its 4 tensors")
            && e.contains(": its weights are of --model mlp:8 on 6 inputs, not this run's"),
        "{e}"
    );
}

#[test]
fn imagenet_weights_on_small_pictures_name_the_small_image_stem_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let small = model("resnet18", 10);
    assert!(small
        .torchvision_changes
        .unwrap()
        .contains("model.maxpool = torch.nn.Identity()"));
    let big = Model::new(
        Shape::Image {
            c: 3,
            h: 224,
            w: 224,
        },
        &"resnet18".parse().unwrap(),
        10,
    )
    .unwrap();
    assert_eq!(big.torchvision_changes, None);
    // ImageNet's 7x7 stem, as torchvision's resnet18 holds it
    let stem = vec![0u8; 64 * 3 * 7 * 7 * 4];
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![64, 3, 7, 7], &stem)
            .unwrap();
    let f = dir.path().join("imagenet.safetensors");
    safetensors::serialize_to_file(vec![("conv1.weight", view)], &None, &f).unwrap();
    let (mut p, mut b) = (small.init_params(0), small.init_buffers());
    let e = import(&f, &small, &mut p, &mut b, false).unwrap_err();
    assert!(
        e.contains("small-image stem")
            && e.contains("pictures of 65 pixels or more")
            && e.contains("--image-size 224, ImageNet's, for picture folders and CIFAR"),
        "{e}"
    );
    // on grey pictures (digits): the channels are what differs first
    let grey = Model::new(
        Shape::Image { c: 1, h: 8, w: 8 },
        &"resnet18".parse().unwrap(),
        10,
    )
    .unwrap();
    let (mut p, mut b) = (grey.init_params(0), grey.init_buffers());
    let e = import(&f, &grey, &mut p, &mut b, false).unwrap_err();
    assert!(
        e.contains("the file's first layer takes 3 input channels and this data gives 1"),
        "{e}"
    );
    // the other way: a small-image run's weights for pictures of 65 pixels or more
    let small_stem = vec![0u8; 64 * 3 * 3 * 3 * 4];
    let view = safetensors::tensor::TensorView::new(
        safetensors::Dtype::F32,
        vec![64, 3, 3, 3],
        &small_stem,
    )
    .unwrap();
    let f = dir.path().join("small.safetensors");
    safetensors::serialize_to_file(vec![("conv1.weight", view)], &None, &f).unwrap();
    let (mut p, mut b) = (big.init_params(0), big.init_buffers());
    let e = import(&f, &big, &mut p, &mut b, false).unwrap_err();
    assert!(
        e.contains("the file has the small-image stem") && e.contains("--image-size 64 or less"),
        "{e}"
    );
    // an MLP of pictures of another size: its first layer's inputs
    let mlp = Model::mlp(64, &[16], 10);
    let file = f32_file(vec![(
        "mlp.0.weight".into(),
        vec![0.0; 16 * 768],
        vec![16, 768],
    )]);
    let (mut p, mut b) = (mlp.init_params(0), mlp.init_buffers());
    let e = import(file.path(), &mlp, &mut p, &mut b, false).unwrap_err();
    assert!(
        e.contains("the file's first layer takes 768 inputs and this data gives 64"),
        "{e}"
    );
}

#[test]
fn a_deeper_model_s_hidden_layer_is_not_taken_for_a_head() {
    // mlp:32,16's second layer (16 rows, fed to its head) where mlp:32 has its head
    let deep = Model::mlp(64, &[32, 16], 10);
    let params = deep.init_params(0);
    let tensors = (deep.tensors.iter())
        .map(|t| (t.name.clone(), params[t.range()].to_vec(), t.shape.clone()))
        .collect();
    let file = f32_file(tensors);
    let shallow = Model::mlp(64, &[32], 10);
    let (mut p, mut b) = (shallow.init_params(0), shallow.init_buffers());
    let e = import(file.path(), &shallow, &mut p, &mut b, false).unwrap_err();
    assert!(
        e.contains("mlp.1.weight") && e.contains("[16, 32]") && e.contains("another --model"),
        "{e}"
    );
}

/// A checkpoint's weights file given to --init: its optimizer state is said once, apart (not
/// listed as tensors of another model), and an empty file says it holds none.
#[test]
fn a_checkpoint_s_optimizer_state_is_said_apart_and_an_empty_file_holds_none() {
    let m = Model::mlp(8, &[4], 2);
    let params = m.init_params(0);
    let mut tensors = Vec::new();
    for t in &m.tensors {
        let v = params[t.range()].to_vec();
        tensors.push((t.name.clone(), v.clone(), t.shape.clone()));
        tensors.push((format!("optim.m.{}", t.name), v, t.shape.clone()));
    }
    let file = f32_file(tensors);
    let (mut p, mut b) = (m.init_params(1), m.init_buffers());
    let notes = import(file.path(), &m, &mut p, &mut b, false)
        .unwrap()
        .join("\n");
    assert!(
        notes.contains("the file's optimizer state (optim.*, a checkpoint's) is not taken")
            && !notes.contains("ignored: optim."),
        "{notes}"
    );
    assert_eq!(p, params);
    let empty = f32_file(Vec::new());
    let e = import(empty.path(), &m, &mut p, &mut b, false).unwrap_err();
    assert!(e.contains("it holds no tensors"), "{e}");
}

/// A run of `model` on `data` for `steps` steps of 8 samples on one CPU worker, in the run
/// directory `run`.
fn one_cpu(run: &Path, model: &str, data: &str, steps: u64) -> RunConfig {
    RunConfig {
        devices: DeviceSpec::Cpu(1),
        model: model.parse().unwrap(),
        data: data.parse().unwrap(),
        budget: Budget::Steps(steps),
        batch_per_replica: 8,
        checkpoint_dir: run.join("checkpoints"),
        run_dir: Some(run.to_path_buf()),
        ..RunConfig::default()
    }
}

/// A safetensors file's metadata.
fn st_metadata(path: &Path) -> std::collections::HashMap<String, String> {
    let bytes = std::fs::read(path).unwrap();
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    meta.metadata().clone().unwrap_or_default()
}

/// A safetensors file of F32 tensors: (name, values, shape).
fn f32_file(tensors: Vec<(String, Vec<f32>, Vec<usize>)>) -> tempfile::NamedTempFile {
    let bytes: Vec<(String, Vec<u8>, Vec<usize>)> = (tensors.into_iter())
        .map(|(n, v, s)| (n, v.iter().flat_map(|x| x.to_le_bytes()).collect(), s))
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView)> = (bytes.iter())
        .map(|(n, b, s)| {
            let v = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b);
            (n.clone(), v.unwrap())
        })
        .collect();
    let file = tempfile::NamedTempFile::new().unwrap();
    safetensors::serialize_to_file(views, &None, file.path()).unwrap();
    file
}

/// `--export` into the `--run-dir` the run is to make: written there at its end; under a name
/// of the run's own files, refused before the run starts.
#[test]
fn export_into_the_run_directory_the_run_makes() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let scratch = ["--headless", "--steps", "2", "--run-dir", "scratch"];
        run_in(dir.path(), &[&scratch[..], args].concat())
    };
    let o = run(&["--export", "scratch/metrics.jsonl"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(1) && err.contains("a file of the run directory the run makes"),
        "{err}"
    );
    assert!(
        !dir.path().join("scratch").exists(),
        "refused before the run"
    );
    let o = run(&["--export", "scratch/w.safetensors"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(dir.path().join("scratch/w.safetensors").is_file());
}

#[test]
fn frozen_tensors_the_init_file_does_not_give_are_said_to_stay_random() {
    let mut m = Model::new(Shape::Flat(8), &"mlp:16".parse().unwrap(), 3).unwrap();
    m.freeze(&[0, 1]);
    let head_only = f32_file(vec![
        ("mlp.1.weight".into(), vec![0.5; 48], vec![3, 16]),
        ("mlp.1.bias".into(), vec![0.0; 3], vec![3]),
    ]);
    let (mut params, mut buffers) = (m.init_params(0), m.init_buffers());
    let notes = import(head_only.path(), &m, &mut params, &mut buffers, true).unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("2 frozen tensors (--freeze) are not loaded")
                && n.contains("mlp.0.weight, mlp.0.bias")),
        "{notes:?}"
    );
    // where the file gives them, nothing is said
    m.freeze(&[2, 3]);
    let notes = import(head_only.path(), &m, &mut params, &mut buffers, true).unwrap();
    assert!(!notes.iter().any(|n| n.contains("frozen")), "{notes:?}");
}

#[test]
fn a_head_in_part_for_another_class_count_is_refused() {
    let m = Model::new(Shape::Flat(8), &"mlp:16".parse().unwrap(), 3).unwrap();
    let mixed = f32_file(vec![
        ("mlp.0.weight".into(), vec![0.1; 128], vec![16, 8]),
        ("mlp.0.bias".into(), vec![0.0; 16], vec![16]),
        ("mlp.1.weight".into(), vec![0.5; 48], vec![3, 16]),
        ("mlp.1.bias".into(), vec![0.0; 5], vec![5]),
    ]);
    let (mut params, mut buffers) = (m.init_params(0), m.init_buffers());
    let e = import(mixed.path(), &m, &mut params, &mut buffers, false).unwrap_err();
    assert!(
        e.contains("the classifier head is in part for this model's 3 classes and in part for another count"),
        "{e}"
    );
    // a whole head for another count starts afresh, as before
    let other = f32_file(vec![
        ("mlp.0.weight".into(), vec![0.1; 128], vec![16, 8]),
        ("mlp.0.bias".into(), vec![0.0; 16], vec![16]),
        ("mlp.1.weight".into(), vec![0.5; 80], vec![5, 16]),
        ("mlp.1.bias".into(), vec![0.0; 5], vec![5]),
    ]);
    let notes = import(other.path(), &m, &mut params, &mut buffers, false).unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("re-initialised for 3 classes")),
        "{notes:?}"
    );
}

/// A fine-tuning run of `BN_NET` from `init` on `ranks` CPU ranks sharing a batch of 12, batch
/// norm as `bn_stats` says, `--freeze` as given (no --sync-bn).
fn fine_tuned(
    init: &Path,
    ranks: usize,
    bn_stats: BnStats,
    freeze: Option<&str>,
) -> mgtop::engine::RunResult {
    let dir = tempfile::tempdir().unwrap();
    Engine::run(RunConfig {
        devices: DeviceSpec::Cpu(ranks),
        model: BN_NET.parse().unwrap(),
        data: "synthetic-images:96,3,8,8,3".parse().unwrap(),
        inputs: mgtop::data::DataOptions::no_validation(),
        budget: Budget::Steps(6),
        batch_per_replica: 12 / ranks,
        optimizer: "momentum".parse().unwrap(),
        init: Some(init.to_path_buf()),
        bn_stats,
        freeze: freeze.map(|f| f.parse().unwrap()),
        checkpoint_dir: dir.path().to_path_buf(),
        final_checkpoint: false,
        ..RunConfig::default()
    })
    .unwrap()
}

const BN_NET: &str = "conv4k3p1,bn,relu,basic4,gap,dense6";

#[test]
fn batch_norm_on_running_statistics_leaves_them_and_n_ranks_train_as_one() {
    // weights whose running statistics are a trained network's (not PyTorch's start of 0 and 1)
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    Engine::run(one_cpu(&run, BN_NET, "synthetic-images:96,3,8,8,3", 4)).unwrap();
    let init = dir.path().join("trained.safetensors");
    export(&run.join("checkpoints"), &init).unwrap();
    let m = Model::new(
        Shape::Image { c: 3, h: 8, w: 8 },
        &BN_NET.parse().unwrap(),
        3,
    )
    .unwrap();
    let file: Vec<f32> = (m.buffers.iter())
        .flat_map(|t| tensor(&init, &t.name))
        .collect();
    let weights = |state: &mgtop::backend::TrainState, name: &str| {
        let t = m.tensors.iter().find(|t| t.name == name).unwrap();
        state.params[t.range()].to_vec()
    };
    // on the batch's statistics (the default) the running ones move
    let batch = fine_tuned(&init, 3, BnStats::Batch, None);
    assert_ne!(batch.state.buffers, file);
    // on the running ones: left bit for bit, on 3 ranks too (whose averaging would round
    // them), batch norm's weight and bias trained; and each sample normalised alone, 3 ranks
    // train as 1 without --sync-bn
    let one = fine_tuned(&init, 1, BnStats::Running, None);
    let three = fine_tuned(&init, 3, BnStats::Running, None);
    assert_eq!(one.state.buffers, file);
    assert_eq!(three.state.buffers, file);
    assert_ne!(
        weights(&one.state, "bn.1.weight"),
        tensor(&init, "bn.1.weight")
    );
    let worst = (one.state.params.iter().zip(&three.state.params))
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(worst <= 1e-5, "3 ranks differ from 1 by {worst}");
    // frozen: the batch norms --freeze leaves keep theirs, the others follow the data
    let part = fine_tuned(&init, 3, BnStats::Frozen, Some("conv.0.,bn.1"));
    let first = m
        .buffers
        .iter()
        .filter(|t| t.name.starts_with("bn.1."))
        .count();
    let (bn1, rest) = m.buffers.split_at(first);
    let span = |ts: &[mgtop::nn::model::TensorInfo]| ts[0].offset..ts[ts.len() - 1].range().end;
    assert_eq!(part.state.buffers[span(bn1)], file[span(bn1)]);
    assert_ne!(part.state.buffers[span(rest)], file[span(rest)]);
    let backbone = fine_tuned(&init, 2, BnStats::Frozen, Some("backbone"));
    assert_eq!(backbone.state.buffers, file);
}

#[test]
fn a_fine_tuned_line_of_runs_records_the_file_it_began_from() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let data = "synthetic-images:64,3,8,8,3";
    Engine::run(one_cpu(&d.join("first"), BN_NET, data, 2)).unwrap();
    let init = d.join("first.safetensors");
    export(&d.join("first/checkpoints"), &init).unwrap();
    // a run from random weights began from none
    assert_eq!(st_metadata(&init).get("mgtop.init"), None);
    let tuned = d.join("tuned");
    Engine::run(RunConfig {
        init: Some(init.clone()),
        ..one_cpu(&tuned, BN_NET, data, 2)
    })
    .unwrap();
    let again = d.join("again");
    Engine::run(RunConfig {
        resume: Some(tuned.join("checkpoints")),
        ..one_cpu(&again, BN_NET, data, 4)
    })
    .unwrap();
    // the fine-tuning run's export, and its resumed run's, name the file the line began from
    for run in [tuned, again] {
        let out = run.with_extension("safetensors");
        export(&run.join("checkpoints"), &out).unwrap();
        let said = st_metadata(&out).get("mgtop.init").cloned();
        assert_eq!(
            said.as_deref(),
            Some(init.to_str().unwrap()),
            "{}",
            run.display()
        );
    }
}

#[test]
fn fixed_batch_norms_a_partial_file_gives_no_statistics_are_said() {
    // the parameters alone of conv4k3p1,bn,gap for a model with a residual block more: none of
    // its three batch norms has running statistics in the file
    let small = Model::new(
        Shape::Image { c: 3, h: 8, w: 8 },
        &"conv4k3p1,bn,gap".parse().unwrap(),
        3,
    )
    .unwrap();
    let file = saved(&small);
    let mut m = Model::new(
        Shape::Image { c: 3, h: 8, w: 8 },
        &"conv4k3p1,bn,basic4,gap".parse().unwrap(),
        3,
    )
    .unwrap();
    let said = |m: &Model| {
        let (mut p, mut b) = (m.init_params(0), m.init_buffers());
        let notes = import(file.path(), m, &mut p, &mut b, true).unwrap();
        notes
            .into_iter()
            .find(|n| n.contains("no running statistics"))
    };
    assert_eq!(
        said(&m),
        None,
        "on the batch's statistics they are of no matter"
    );
    m.fix_statistics(&m.batch_norms());
    let note = said(&m).unwrap();
    assert!(
        note.ends_with("3 batch norms on fixed statistics (--bn-stats), which keep PyTorch's start (means 0, variances 1) and normalise nothing: bn.1.running_mean, basic.2.bn1.running_mean, basic.2.bn2.running_mean"),
        "{note}"
    );
}

/// `--init` weights whose outputs overflow stop the run at its first step, the file blamed:
/// no learning rate made the loss of a step before any update (the message said to lower it).
#[test]
fn init_weights_that_overflow_are_blamed_not_the_learning_rate() {
    let m = Model::new(Shape::Flat(12), &"mlp:16".parse().unwrap(), 4).unwrap();
    let huge = f32_file(
        (m.tensors.iter())
            .map(|t| (t.name.clone(), vec![1e30; t.range().len()], t.shape.clone()))
            .collect(),
    );
    let dir = tempfile::tempdir().unwrap();
    let init = huge.path().display().to_string();
    let args = [
        "--headless",
        "--data",
        "synthetic:301,12,4",
        "--model",
        "mlp:16",
    ];
    let more = ["--steps", "3", "--lr", "1e-9", "--init", &init];
    let o = run_in(dir.path(), &[&args[..], &more[..]].concat());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("not finite at step 1, this run's first, before any update")
            && err.contains(&format!("--init {init}"))
            && !err.contains("lower --lr"),
        "{err}"
    );
}
