//! The model in lines, for the start-up text: one per op (`conv3x3 layer1.0.conv1  16x32x32 ->
//! 16x32x32  2304 params  4.7 MFLOP`), or, for a model of many ops (a ResNet, a MobileNet), one
//! per block of PyTorch's names (`layer1.0`, `features.3`), so a log opens with the network's
//! outline in a screenful rather than a table of 50-170 lines.

use super::{flops_text, Model, Node, Op};

/// Models of up to this many ops are listed op by op.
pub const LISTED_OPS: usize = 30;

impl Model {
    /// One line per op: `conv3x3+relu layer1.0.conv1  16x32x32 -> 16x32x32  2304 params  4.7 MFLOP`.
    pub fn layer_lines(&self) -> Vec<String> {
        let name_w = (self.nodes.iter().map(|n| n.to_string().len()))
            .max()
            .unwrap_or(0);
        (self.nodes.iter())
            .map(|n| {
                format!(
                    "{:<name_w$}  {}  {} params  {}",
                    n.to_string(),
                    self.shapes(n),
                    self.node_params(n),
                    flops_text(n.op.flops(self.dims[n.output]))
                )
            })
            .collect()
    }

    /// `layer_lines` up to `LISTED_OPS` ops; beyond, a line per block (`layer1.0  conv3x3 x2,
    /// bn+relu, bn, add+relu  16x32x32 -> 16x32x32  4672 params  9.5 MFLOP`) and how many ops
    /// they hold.
    pub fn layer_summary(&self) -> Vec<String> {
        if self.nodes.len() <= LISTED_OPS {
            return self.layer_lines();
        }
        let blocks = blocks(&self.nodes);
        // per block: its name, its ops, its input and output, its parameters and FLOPs
        let rows: Vec<[String; 5]> = (blocks.iter())
            .map(|(key, nodes)| {
                let (first, last) = (&self.nodes[nodes[0]], &self.nodes[*nodes.last().unwrap()]);
                let ins: Vec<String> = (first.inputs.iter())
                    .map(|&i| self.values[i].to_string())
                    .collect();
                let shapes = format!("{} -> {}", ins.join(" + "), self.values[last.output]);
                let params: usize = (nodes.iter())
                    .map(|&n| self.node_params(&self.nodes[n]))
                    .sum();
                let flops = (nodes.iter())
                    .map(|&n| self.nodes[n].op.flops(self.dims[self.nodes[n].output]))
                    .sum();
                // (an op without a name is its own block, named by its kind)
                let kinds = match first.name.is_empty() {
                    true => String::new(),
                    false => kinds(&self.nodes, nodes),
                };
                let params = format!("{params} params");
                [key.clone(), kinds, shapes, params, flops_text(flops)]
            })
            .collect();
        let w: Vec<usize> = (0..5)
            .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
            .collect();
        let mut lines: Vec<String> = (rows.iter())
            .map(|[key, kinds, shapes, params, flops]| {
                format!(
                    "{key:<k$}  {kinds:<o$}  {shapes:<s$}  {params:>p$}  {flops:>f$}",
                    k = w[0],
                    o = w[1],
                    s = w[2],
                    p = w[3],
                    f = w[4]
                )
            })
            .collect();
        lines.push(format!(
            "({} ops in {} blocks)",
            self.nodes.len(),
            blocks.len()
        ));
        lines
    }
}

/// The block a named op belongs to: its name up to its first number (`layer1.0.conv1` ->
/// `layer1.0`, `features.3.conv.0.0` -> `features.3`), or the whole name (`conv1`, `fc`).
fn block_of(name: &str) -> String {
    let parts: Vec<&str> = name.split('.').collect();
    let end = (parts.iter())
        .position(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        .map_or(parts.len(), |i| i + 1);
    parts[..end].join(".")
}

/// The ops grouped into blocks, in order: consecutive named ops of one block, a residual add
/// with the block before it, any other op without a name alone (under its kind: `gap`).
fn blocks(nodes: &[Node]) -> Vec<(String, Vec<usize>)> {
    let mut out: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let key = match (n.name.is_empty(), &n.op) {
            (false, _) => block_of(&n.name),
            (true, Op::Add { .. }) if !out.is_empty() => {
                out.last_mut().unwrap().1.push(i);
                continue;
            }
            (true, op) => op.kind(),
        };
        match out.last_mut() {
            Some((k, members)) if *k == key && !nodes[i].name.is_empty() => members.push(i),
            _ => out.push((key, vec![i])),
        }
    }
    out
}

/// A block's op kinds in order, a run of one kind counted: `conv3x3, bn+relu, conv3x3, bn,
/// add+relu`; `bn x2`.
fn kinds(nodes: &[Node], members: &[usize]) -> String {
    let mut counted: Vec<(String, usize)> = Vec::new();
    for &m in members {
        let k = nodes[m].op.kind();
        match counted.last_mut() {
            Some((c, n)) if *c == k => *n += 1,
            _ => counted.push((k, 1)),
        }
    }
    (counted.into_iter())
        .map(|(k, n)| match n {
            1 => k,
            n => format!("{k} x{n}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::shape::Shape;

    fn model(spec: &str, side: usize) -> Model {
        let input = Shape::Image {
            c: 3,
            h: side,
            w: side,
        };
        Model::new(input, &spec.parse().unwrap(), 10).unwrap()
    }

    #[test]
    fn blocks_are_named_as_pytorch_names_them() {
        assert_eq!(block_of("layer1.0.conv1"), "layer1.0");
        assert_eq!(block_of("features.3.conv.0.0"), "features.3");
        assert_eq!(block_of("layer2.0.downsample.1"), "layer2.0");
        assert_eq!(block_of("conv1"), "conv1");
        assert_eq!(block_of("classifier.1"), "classifier.1");
    }

    #[test]
    fn a_resnet_is_outlined_a_line_per_block_with_every_op_counted() {
        let m = model("resnet20", 32);
        let lines = m.layer_summary();
        // conv1, bn1, nine blocks, the pooling and fc, and the count
        assert_eq!(lines.len(), 14, "{lines:#?}");
        assert_eq!(lines[13], format!("({} ops in 13 blocks)", m.nodes.len()));
        let block = lines.iter().find(|l| l.starts_with("layer2.0 ")).unwrap();
        assert!(
            block.contains("conv3x3/2, bn+relu, conv3x3, bn, conv1x1/2, bn, add+relu")
                && block.contains("16x32x32 -> 32x16x16"),
            "{block}"
        );
        assert!(lines.iter().any(|l| l.starts_with("gap ")), "{lines:#?}");
        // every parameter and FLOP is in some block
        let params: usize = (lines.iter().filter_map(|l| {
            let (head, _) = l.split_once(" params")?;
            head.split_whitespace().last()?.parse::<usize>().ok()
        }))
        .sum();
        // the columns line up
        let at = |l: &str| l.find(" params");
        assert!(
            lines[..13].iter().all(|l| at(l) == at(&lines[0])),
            "{lines:#?}"
        );
        assert_eq!(params, m.n_params);
    }

    #[test]
    fn a_short_model_is_listed_op_by_op() {
        let m = model("conv8k3,pool2,dense16", 8);
        assert_eq!(m.layer_summary(), m.layer_lines());
        assert_eq!(m.layer_lines().len(), m.nodes.len());
    }
}
