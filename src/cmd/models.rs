//! `mgtop-train models [MODEL]`: what `--model` takes (the named networks and the layer
//! language), or one model planned for an input: its outline, parameters and FLOPs, and with
//! `--tensors` every tensor by PyTorch's name and shape (what `--init` reads and `export`
//! writes).

use crate::cli::ModelsArgs;
use crate::nn::model::{flops_text, Model, ModelSpec, Preset};
use crate::nn::shape::Shape;

/// The named networks, a line each.
const NETWORKS: [(&str, &str); 4] = [
    ("resnet20, resnet32, resnet44, resnet56", "He et al.'s CIFAR ResNets (3x3 stem, 3 stages of basic blocks at 16/32/64 channels)"),
    ("resnet18, resnet34, resnet50", "torchvision's ResNets (basic blocks; resnet50 bottlenecks); a small-image stem at 64x64 or less"),
    ("mobilenetv2, mobilenetv2:W", "torchvision's MobileNetV2 at width W (default 1.0); a stride-1 first conv at 64x64 or less"),
    ("mlp:H1,H2,...", "dense layers of these widths (ReLU between), on any input flattened"),
];

/// The layer language's tokens, a line each.
const TOKENS: [(&str, &str); 12] = [
    (
        "convNkK[sS][pP]",
        "N output channels, KxK kernel, stride S (1), padding P (0)",
    ),
    (
        "dwconvK[sS][pP]",
        "a depthwise KxK convolution (one kernel per channel)",
    ),
    ("denseN", "N fully connected units (flattening an image)"),
    (
        "bn",
        "batch norm of the layer before, before its activation",
    ),
    (
        "relu, relu6, linear",
        "the activation of the layer before (ReLU unless said)",
    ),
    (
        "poolK[sS][pP]",
        "KxK max pooling, stride S (K), padding P (0); maxpoolK... the same",
    ),
    ("avgpoolK[sS][pP]", "KxK average pooling"),
    ("gap", "global average pooling: C x H x W becomes C"),
    ("dropoutP", "dropout with probability P (training only)"),
    (
        "basicN[sS]",
        "ResNet's basic block (projection shortcut where the shape changes)",
    ),
    (
        "bottleneckN[sS]",
        "ResNet's bottleneck: 1x1 to N, 3x3/S, 1x1 to 4N",
    ),
    (
        "invertedN[tT][sS]",
        "MobileNetV2's inverted residual, expansion T (6)",
    ),
];

/// The most elements of an input `models` plans for (a picture's bound: a 4096x4096 RGB one).
const MOST_INPUT: usize = crate::data::MAX_IMAGE_VALUES;

pub fn command(args: &ModelsArgs) -> anyhow::Result<()> {
    let Some(given) = &args.model else {
        if args.tensors || args.input.is_some() || args.classes.is_some() {
            anyhow::bail!(
                "--tensors, --input and --classes describe one model: name it, e.g. mgtop-train models resnet50 --tensors"
            );
        }
        for line in overview() {
            crate::say!("{line}");
        }
        return Ok(());
    };
    let spec: ModelSpec = given.parse().map_err(anyhow::Error::msg)?;
    let (input, classes) = (
        input_for(&spec, args.input.as_deref())?,
        classes_for(&spec, args.classes),
    );
    let model = Model::new(input, &spec, classes).map_err(anyhow::Error::msg)?;
    for line in described(&spec, &model, args.tensors) {
        crate::say!("{line}");
    }
    Ok(())
}

/// What `--model` takes, and how to see one.
fn overview() -> Vec<String> {
    let w = (NETWORKS.iter().chain(TOKENS.iter()))
        .map(|(n, _)| n.len())
        .max()
        .unwrap_or(0);
    let mut lines = vec!["--model takes a named network:".to_string()];
    lines.extend(
        NETWORKS
            .iter()
            .map(|(n, what)| format!("  {n:<w$}  {what}")),
    );
    lines.push(
        "or a comma-separated list of layers (each named kind.index: conv.0.weight; a final linear layer to the classes is implicit):"
            .into(),
    );
    lines.extend(TOKENS.iter().map(|(n, what)| format!("  {n:<w$}  {what}")));
    lines.extend([
        "e.g. conv32k3,pool2 (a conv, ReLU, max pool, then the classes), conv16k3p1,bn,basic16,basic32s2,basic64s2,gap (a small ResNet)".into(),
        "one model's layers, parameters and FLOPs: mgtop-train models MODEL [--input CxHxW|N] [--classes N]; with --tensors, every tensor by PyTorch's name (what --init reads, export writes)".into(),
    ]);
    lines
}

/// The input `models` plans for: `--input`, else the network's own (CIFAR's 3x32x32,
/// ImageNet's 3x224x224), else the built-in digits' 1x8x8 (the default data).
fn input_for(spec: &ModelSpec, given: Option<&str>) -> anyhow::Result<Shape> {
    let Some(s) = given else {
        return Ok(match spec {
            ModelSpec::Preset(Preset::CifarResNet { .. }) => Shape::Image { c: 3, h: 32, w: 32 },
            ModelSpec::Preset(_) => Shape::Image {
                c: 3,
                h: 224,
                w: 224,
            },
            ModelSpec::Layers(_) => Shape::Image { c: 1, h: 8, w: 8 },
        });
    };
    // (a number, whatever its size or sign, is a flat vector's length: held to the bound below)
    let shape = match s.parse::<i128>() {
        Ok(n) => Shape::Flat(usize::try_from(n).unwrap_or(0)),
        Err(_) => {
            let [c, h, w] = crate::data::parse_shape(s).map_err(|e| {
                let e = e.replace("shape=1x28x28", "--input 1x28x28");
                anyhow::anyhow!("--input {e} (or N, a flat vector's length)")
            })?;
            Shape::Image { c, h, w }
        }
    };
    match shape.checked_numel() {
        Some(1..=MOST_INPUT) => Ok(shape),
        _ => anyhow::bail!(
            "--input {s}: give 1 to {MOST_INPUT} values a sample (CxHxW such as 3x224x224, or N)"
        ),
    }
}

/// The classes `models` plans for: `--classes`, else ImageNet's 1000 for ImageNet's networks
/// (as their pretrained files have), else 10.
fn classes_for(spec: &ModelSpec, given: Option<usize>) -> usize {
    given.unwrap_or(match spec {
        ModelSpec::Preset(Preset::ResNet { .. } | Preset::MobileNetV2 { .. }) => 1000,
        _ => 10,
    })
}

/// A model as the start-up lines say it, then (`tensors`) each tensor by PyTorch's name.
fn described(spec: &ModelSpec, model: &Model, tensors: bool) -> Vec<String> {
    let classes = model.dims.last().copied().unwrap_or(0);
    let mut lines = vec![format!(
        "model: {spec} ({}) on {} inputs, {classes} classes: {} parameters, {} per sample forward (a multiply-add is 2 FLOPs)",
        model.shape_string(),
        model.input,
        model.n_params,
        flops_text(model.flops_per_sample())
    )];
    lines.extend(model.layer_summary().into_iter().map(|l| format!("  {l}")));
    lines.extend(model.stem.iter().map(|s| format!("  note: {s}")));
    if !tensors {
        lines.push(format!(
            "{} tensors, {} of running statistics: --tensors lists each by PyTorch's name and shape (what --init reads, export writes)",
            model.tensors.len(),
            model.buffers.len()
        ));
        return lines;
    }
    let w = (model.tensors.iter().chain(&model.buffers))
        .map(|t| t.name.len())
        .max()
        .unwrap_or(0);
    let dims = |s: &[usize]| {
        let d: Vec<String> = s.iter().map(usize::to_string).collect();
        format!("[{}]", d.join(", "))
    };
    lines.push(format!(
        "tensors ({} trained, {} running statistics; batch norm's num_batches_tracked beside each, as PyTorch keeps it, is not needed):",
        model.tensors.len(),
        model.buffers.len()
    ));
    lines.extend((model.tensors.iter()).map(|t| format!("  {:<w$}  {}", t.name, dims(&t.shape))));
    lines.extend(
        (model.buffers.iter())
            .map(|t| format!("  {:<w$}  {}  (running statistic)", t.name, dims(&t.shape))),
    );
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(model: &str, input: Option<&str>, tensors: bool) -> Vec<String> {
        let spec: ModelSpec = model.parse().unwrap();
        let input = input_for(&spec, input).unwrap();
        let m = Model::new(input, &spec, classes_for(&spec, None)).unwrap();
        described(&spec, &m, tensors)
    }

    /// resnet18 at ImageNet's size with 1000 classes, as torchvision's pretrained file: its
    /// parameter count and names are torchvision's.
    #[test]
    fn a_network_is_described_at_its_own_input_with_pytorchs_names() {
        let l = lines("resnet18", None, true);
        assert!(
            l[0].contains("on 3x224x224 inputs, 1000 classes: 11689512 parameters"),
            "{}",
            l[0]
        );
        let has = |name: &str, shape: &str| {
            l.iter()
                .any(|x| x.trim_start().starts_with(name) && x.contains(shape))
        };
        assert!(has("conv1.weight ", "[64, 3, 7, 7]"));
        assert!(has("layer2.0.downsample.0.weight ", "[128, 64, 1, 1]"));
        assert!(has("fc.weight ", "[1000, 512]"));
        assert!(l
            .iter()
            .any(|x| x.contains("bn1.running_mean") && x.ends_with("(running statistic)")));
        // without --tensors: the outline and how to ask for them
        let short = lines("resnet20", None, false);
        assert!(short[0].contains("on 3x32x32 inputs, 10 classes: 272474 parameters"));
        assert!(short.last().unwrap().contains("--tensors lists each"));
        assert!(!short.iter().any(|x| x.contains("conv1.weight")));
    }

    #[test]
    fn a_layer_list_plans_on_the_default_data_or_the_input_given() {
        let l = lines("conv8k3,pool2", None, true);
        assert!(l[0].contains("on 1x8x8 inputs"), "{}", l[0]);
        assert!(l
            .iter()
            .any(|x| x.trim_start().starts_with("conv.0.weight") && x.contains("[8, 1, 3, 3]")));
        let flat = lines("mlp:32", Some("784"), true);
        assert!(
            flat.iter()
                .any(|x| x.contains("mlp.0.weight") && x.contains("[32, 784]")),
            "{flat:?}"
        );
        let spec: ModelSpec = "resnet20".parse().unwrap();
        for bad in [
            "0x3x3",
            "3x8",
            "100000x1000x1000",
            "cat",
            "-5",
            "0",
            "18446744073709551616",
        ] {
            let e = input_for(&spec, Some(bad)).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("--input {bad}")) || e.starts_with("--input shape"),
                "{bad}: {e}"
            );
        }
        // a network that cannot take the input says so, naming it
        let e = Model::new(Shape::Flat(10), &spec, 10).unwrap_err();
        assert!(e.contains("needs images"), "{e}");
    }

    #[test]
    fn the_overview_names_every_network_and_token() {
        let text = overview().join("\n");
        for name in [
            "resnet50",
            "mobilenetv2:W",
            "mlp:H1",
            "bottleneckN",
            "invertedN",
            "dropoutP",
        ] {
            assert!(text.contains(name), "{name}");
        }
    }
}
