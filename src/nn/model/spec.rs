//! `--model`: an MLP's hidden widths or the layer language, parsed and written back.

use std::fmt;
use std::str::FromStr;

use crate::nn::layers::{Layer, LayerSpec};

/// What `--model` says: `mlp:H1,H2,...` (hidden widths) or the layer language of
/// `nn::layers` (`conv32k3,pool2,dense128`). An MLP is a spec of dense layers only, and is
/// written `mlp:...` either way. Input and output sizes come from the data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelSpec {
    pub layers: LayerSpec,
}

impl ModelSpec {
    /// An MLP with these hidden widths.
    pub fn mlp(hidden: &[usize]) -> ModelSpec {
        ModelSpec {
            layers: LayerSpec {
                layers: hidden.iter().map(|&units| Layer::Dense { units }).collect(),
            },
        }
    }

    /// Only dense layers: trains on any input, flat or image.
    pub fn is_mlp(&self) -> bool {
        self.layers
            .layers
            .iter()
            .all(|l| matches!(l, Layer::Dense { .. }))
    }
}

impl Default for ModelSpec {
    fn default() -> Self {
        ModelSpec::mlp(&[128])
    }
}

/// Hidden layers an MLP may have.
const MAX_HIDDEN_LAYERS: usize = 64;

const FORMS: &str = "use mlp:H1,H2,... (hidden widths, e.g. mlp:128 or mlp:256,128) or layers like conv32k3,pool2,dense128 (convNkK[sS][pP], poolK[sS], denseN)";

impl FromStr for ModelSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let Some(rest) = s
            .strip_prefix("mlp:")
            .or_else(|| (s == "mlp").then_some(""))
        else {
            if ["conv", "pool", "dense"].iter().any(|k| s.starts_with(k)) {
                return s
                    .parse::<LayerSpec>()
                    .map(|layers| ModelSpec { layers })
                    .map_err(|e| format!("model `{s}`: {e}"));
            }
            return Err(format!("unknown model `{s}`: {FORMS}"));
        };
        let mut hidden = Vec::new();
        for part in rest.split(',').filter(|_| !rest.trim().is_empty()) {
            if part.trim().is_empty() {
                return Err(format!(
                    "model `{s}`: an empty hidden width between commas; use e.g. mlp:128,64"
                ));
            }
            let h: usize = part.trim().parse().map_err(|_| {
                format!(
                    "model `{s}`: hidden width `{part}` is not a whole number; use e.g. mlp:128,64"
                )
            })?;
            if h == 0 || h > 1 << 16 {
                return Err(format!(
                    "model `{s}`: hidden width {h} must be between 1 and 65536"
                ));
            }
            hidden.push(h);
        }
        if hidden.len() > MAX_HIDDEN_LAYERS {
            return Err(format!(
                "model `{s}`: {} hidden layers; use at most {MAX_HIDDEN_LAYERS}",
                hidden.len()
            ));
        }
        Ok(ModelSpec::mlp(&hidden))
    }
}

/// `mlp:128,64` for dense layers only, else the layer list (`conv16k3,pool2,dense64`).
impl fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.is_mlp() {
            return write!(f, "{}", self.layers);
        }
        let hs: Vec<String> = self
            .layers
            .layers
            .iter()
            .map(|l| match l {
                Layer::Dense { units } => units.to_string(),
                _ => unreachable!("an MLP has dense layers only"),
            })
            .collect();
        write!(f, "mlp:{}", hs.join(","))
    }
}
