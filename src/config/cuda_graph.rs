//! `--cuda-graph auto|on|off`: whether a GPU's training passes are captured once as CUDA
//! graphs and replayed (`backend::cuda::replica::graphs`), and what the start-up lines say.

use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CudaGraph {
    /// Graphs wherever a pass can be one (the default: on an H100 they gave the same losses
    /// bit for bit as launch by launch, 1.1-1.7x the images/s; `scripts/gpu-check`).
    #[default]
    Auto,
    /// Graphs, and a run where a pass cannot be one is refused.
    On,
    /// Every kernel launched by the host, each pass.
    Off,
}

impl FromStr for CudaGraph {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(CudaGraph::Auto),
            "on" => Ok(CudaGraph::On),
            "off" => Ok(CudaGraph::Off),
            _ => Err(format!("unknown value `{s}`: use auto, on or off")),
        }
    }
}

impl fmt::Display for CudaGraph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CudaGraph::Auto => "auto",
            CudaGraph::On => "on",
            CudaGraph::Off => "off",
        })
    }
}

impl CudaGraph {
    /// Whether GPU passes go through graphs in a run with or without `--sync-bn`, and the
    /// start-up line that says so; an error names the flags that cannot go together.
    pub fn resolve(self, sync_bn: bool) -> Result<(bool, String), String> {
        const WHY: &str = "--sync-bn exchanges batch norm's statistics through the host in the middle of each training pass, which a CUDA graph cannot hold";
        match (self, sync_bn) {
            (CudaGraph::Off, _) => Ok((
                false,
                "off: every kernel launched by the host (--cuda-graph auto captures each training pass once per micro-batch size and replays it)".into(),
            )),
            (CudaGraph::On, true) => Err(format!(
                "--cuda-graph on: {WHY}; use --cuda-graph auto (graphs where they can be) or off, or leave out --sync-bn"
            )),
            (CudaGraph::Auto, true) => Ok((false, format!("off: {WHY}"))),
            (mode, false) => Ok((
                true,
                format!(
                    "on{}: each training pass (forward, loss, backward) captured once per micro-batch size and replayed; the all-reduce and the optimizer's update are launched as before (--cuda-graph off launches every kernel)",
                    if mode == CudaGraph::Auto { " (auto)" } else { "" }
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_reads_each_mode_and_names_the_choices_otherwise() {
        assert_eq!("auto".parse(), Ok(CudaGraph::Auto));
        assert_eq!("ON".parse(), Ok(CudaGraph::On));
        assert_eq!("off".parse(), Ok(CudaGraph::Off));
        assert_eq!(CudaGraph::default(), CudaGraph::Auto);
        let e = "yes".parse::<CudaGraph>().unwrap_err();
        assert!(e.contains("`yes`") && e.contains("auto, on or off"), "{e}");
        for m in [CudaGraph::Auto, CudaGraph::On, CudaGraph::Off] {
            assert_eq!(m.to_string().parse(), Ok(m));
        }
    }

    #[test]
    fn sync_bn_keeps_passes_eager_and_refuses_on_with_the_fix() {
        let (on, line) = CudaGraph::Auto.resolve(false).unwrap();
        assert!(on && line.starts_with("on (auto):"), "{line}");
        let (on, line) = CudaGraph::On.resolve(false).unwrap();
        assert!(on && line.starts_with("on:"), "{line}");
        let (on, line) = CudaGraph::Auto.resolve(true).unwrap();
        assert!(!on && line.contains("--sync-bn"), "{line}");
        let e = CudaGraph::On.resolve(true).unwrap_err();
        assert!(
            e.contains("--cuda-graph auto") && e.contains("--sync-bn"),
            "{e}"
        );
        let (on, line) = CudaGraph::Off.resolve(true).unwrap();
        assert!(!on && line.contains("--cuda-graph auto"), "{line}");
    }
}
