//! What training leaves as it is: the parameters `--freeze` names, and the batch norms whose
//! statistics `--bn-stats` fixes.

/// `--freeze`: which parameters training leaves as they are.
#[derive(Clone, Debug, PartialEq)]
pub enum Freeze {
    /// Everything but the classifier head (the last linear layer).
    Backbone,
    /// Tensors whose names start with one of these (`layer1.`, `features`), up to a `.`.
    Prefixes(Vec<String>),
}

impl Freeze {
    /// Whether tensor `name` is under prefix `p`: `p` is the whole name, or its start up to a
    /// `.` (`layer1` and `layer1.` take `layer1.0.conv1.weight`; `conv.1` is not `conv.10`).
    pub fn under(name: &str, p: &str) -> bool {
        name.strip_prefix(p)
            .is_some_and(|rest| rest.is_empty() || p.ends_with('.') || rest.starts_with('.'))
    }
}

impl std::str::FromStr for Freeze {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "backbone" {
            return Ok(Freeze::Backbone);
        }
        let p: Vec<String> = s.split(',').map(|p| p.trim().to_string()).collect();
        if p.iter().any(|p| p.is_empty()) {
            return Err(format!(
                "`{s}`: give backbone or name prefixes separated by commas, e.g. layer1,layer2"
            ));
        }
        Ok(Freeze::Prefixes(p))
    }
}

impl std::fmt::Display for Freeze {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Freeze::Backbone => f.write_str("backbone"),
            Freeze::Prefixes(p) => f.write_str(&p.join(",")),
        }
    }
}

/// `--bn-stats`: which statistics batch norm normalises by in training.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BnStats {
    /// The batch's, the running ones moved toward them (PyTorch's train mode).
    #[default]
    Batch,
    /// The running ones, left as they are, at every batch norm (PyTorch's eval mode for batch
    /// norm, Keras's `training=False`); its weight and bias still train unless frozen.
    Running,
    /// The running ones where `--freeze` leaves the batch norm's weight and bias (PyTorch's
    /// `backbone.eval()`, Keras's frozen layers), the batch's elsewhere.
    Frozen,
}

impl std::str::FromStr for BnStats {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "batch" => Ok(BnStats::Batch),
            "running" => Ok(BnStats::Running),
            "frozen" => Ok(BnStats::Frozen),
            _ => Err(format!("`{s}`: give batch, running or frozen")),
        }
    }
}

impl std::fmt::Display for BnStats {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(match self {
            BnStats::Batch => "batch",
            BnStats::Running => "running",
            BnStats::Frozen => "frozen",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_freeze_prefix_takes_whole_parts_of_a_name() {
        assert!(Freeze::under("layer1.0.conv1.weight", "layer1"));
        assert!(Freeze::under("layer1.0.conv1.weight", "layer1."));
        assert!(Freeze::under("conv.1.weight", "conv.1"));
        assert!(!Freeze::under("conv.10.weight", "conv.1"));
        assert!(!Freeze::under("layer10.weight", "layer1"));
        assert!(Freeze::under("fc.weight", "fc.weight"));
        assert!(!Freeze::under("fc.weight", "fc.weights"));
    }

    #[test]
    fn bn_stats_round_trips_and_names_its_values() {
        for s in ["batch", "running", "frozen"] {
            assert_eq!(s.parse::<BnStats>().unwrap().to_string(), s);
        }
        let e = "eval".parse::<BnStats>().unwrap_err();
        assert!(e.contains("batch, running or frozen"), "{e}");
    }
}
