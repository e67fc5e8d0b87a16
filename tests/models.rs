//! ResNet-20 and MobileNetV2 (width 0.25, small-input stem) against PyTorch: the same weights,
//! running statistics and batch give the same logits (training and inference mode), loss,
//! gradients and updated running statistics. The fixtures were written once by
//! `scripts/vision_fixtures.py` (PyTorch from PyPI); this test needs only the files.

use std::collections::HashMap;

use mgtop::nn::model::{Model, Op, TensorInfo, Workspace};
use mgtop::nn::shape::Shape;
use safetensors::SafeTensors;

struct Fixture {
    tensors: HashMap<String, Vec<f32>>,
}

impl Fixture {
    fn load(name: &str) -> Fixture {
        let path = format!(
            "{}/tests/fixtures/vision/{name}.safetensors",
            env!("CARGO_MANIFEST_DIR")
        );
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let st = SafeTensors::deserialize(&bytes).unwrap();
        let tensors = st
            .tensors()
            .into_iter()
            .map(|(k, v)| {
                let f = v
                    .data()
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()));
                (k, f.collect())
            })
            .collect();
        Fixture { tensors }
    }

    fn get(&self, name: &str) -> &[f32] {
        self.tensors
            .get(name)
            .unwrap_or_else(|| panic!("fixture has no `{name}`"))
    }

    /// A flat buffer laid out as `infos`, each tensor read by its name (prefixed).
    fn flat(&self, infos: &[TensorInfo], prefix: &str, len: usize) -> Vec<f32> {
        let mut out = vec![0.0; len];
        for t in infos {
            let src = self.get(&format!("{prefix}{}", t.name));
            assert_eq!(
                src.len(),
                t.len,
                "{} has {} values, we hold {}",
                t.name,
                src.len(),
                t.len
            );
            out[t.range()].copy_from_slice(src);
        }
        out
    }
}

/// Every element within `rel` of the reference's largest magnitude (per tensor, but at least
/// `floor`: a gradient that cancels to nearly nothing is compared at its neighbours' scale).
fn close(what: &str, ours: &[f32], theirs: &[f32], rel: f32, floor: f32) {
    assert_eq!(ours.len(), theirs.len(), "{what}: lengths");
    let scale = theirs.iter().fold(floor, |a, v| a.max(v.abs()));
    let worst = ours
        .iter()
        .zip(theirs)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(
        worst <= rel * scale,
        "{what}: off by {worst} (largest reference value {scale})"
    );
}

fn check(preset: &str, fixture: &str) {
    let f = Fixture::load(fixture);
    let mut model = Model::new(
        Shape::Image { c: 3, h: 32, w: 32 },
        &preset.parse().unwrap(),
        10,
    )
    .unwrap();
    // the fixture turned dropout off (its masks are PyTorch's random numbers)
    for n in &mut model.nodes {
        if let Op::Dropout { p } = &mut n.op {
            *p = 0.0;
        }
    }
    let params = f.flat(&model.tensors, "", model.n_params);
    let buffers = f.flat(&model.buffers, "", model.n_buffers);
    let x = f.get("input");
    let y: Vec<u32> = f.get("labels").iter().map(|&v| v as u32).collect();
    let b = y.len();
    let mut ws = Workspace::default();

    // inference: the running statistics
    model.evaluate(&params, &buffers, &mut ws, x, &y, b);
    close(
        &format!("{preset} eval logits"),
        ws.logits(&model, b),
        f.get("eval.logits"),
        1e-4,
        1e-6,
    );

    // training: batch statistics, the loss, every gradient, the running statistics moved
    let mut grads = vec![0.0; model.n_params];
    let mut running = buffers.clone();
    let (loss, _) =
        model.forward_backward(&params, &mut grads, &mut running, &mut ws, x, &y, b, None);
    close(
        &format!("{preset} train logits"),
        ws.logits(&model, b),
        f.get("train.logits"),
        1e-4,
        1e-6,
    );
    let want = f.get("train.loss")[0] as f64;
    assert!(
        (loss / b as f64 - want).abs() <= 1e-4 * want,
        "{preset} loss {} vs {want}",
        loss / b as f64
    );
    let largest = (model.tensors.iter())
        .flat_map(|t| f.get(&format!("grad.{}", t.name)).iter())
        .fold(0.0f32, |a, v| a.max(v.abs()));
    for t in &model.tensors {
        // ours are sums over the batch, PyTorch's of the mean loss. A gradient has been through
        // the whole backward pass in f32, so the order of its sums moves it: most tensors agree
        // within 5e-5 of their scale, the worst seen (a MobileNetV2 bias, a sum of values that
        // cancel) 1.1e-4.
        let mean: Vec<f32> = grads[t.range()].iter().map(|g| g / b as f32).collect();
        close(
            &format!("{preset} grad {}", t.name),
            &mean,
            f.get(&format!("grad.{}", t.name)),
            2e-4,
            1e-3 * largest,
        );
    }
    let after = f.flat(&model.buffers, "after.", model.n_buffers);
    for t in &model.buffers {
        close(
            &format!("{preset} {}", t.name),
            &running[t.range()],
            &after[t.range()],
            1e-5,
            1e-6,
        );
    }
}

#[test]
fn resnet20_matches_pytorch() {
    check("resnet20", "resnet20");
}

#[test]
fn mobilenetv2_matches_pytorch() {
    check("mobilenetv2:0.25", "mobilenetv2_0.25");
}
