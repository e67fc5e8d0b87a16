//! The flags of the commands that read runs, checkpoints and models rather than train:
//! `export`, `eval`, `models`, `runs`, `attach`, `view`.

use std::path::PathBuf;

use clap::Args;

use super::at_least_one;

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// A run directory (its newest checkpoint), a checkpoint directory or a step-NNNNNNNN checkpoint.
    #[arg(value_name = "RUN_DIR|CHECKPOINT")]
    pub from: PathBuf,
    /// The safetensors file to write.
    #[arg(value_name = "FILE")]
    pub out: PathBuf,
}

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// A run directory (its newest checkpoint), a checkpoint directory or a step-NNNNNNNN checkpoint (a --checkpoint-best's `best` too).
    #[arg(value_name = "RUN_DIR|CHECKPOINT")]
    pub from: PathBuf,
    /// The labelled set to evaluate on, given as --val-data would give it (cifar10:DIR's test file, images:DIR's val/ or the folder itself, csv:FILE with the training file's columns, read with the run's label=, shape= and header where given without options)  [default: the run's own validation set]
    #[arg(long, value_name = "SPEC")]
    pub data: Option<String>,
    /// Where to evaluate: cpu (cpu:N: on N threads), or a GPU's number (0, 1, ...) in the run's --precision; one device, --devices as training spells it taken too  [default: cpu]
    #[arg(long, visible_alias = "devices", value_name = "cpu|cpu:N|N")]
    pub device: Option<String>,
    /// CPU threads to evaluate on  [default: this machine's cores]
    #[arg(long, value_name = "N", value_parser = at_least_one(4096))]
    pub threads: Option<usize>,
    /// Also write every figure (every class, every confusion) as JSON to FILE (`-`: stdout, the report then goes to stderr)
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ModelsArgs {
    /// A --model (resnet50, mobilenetv2:0.5, conv32k3,pool2, mlp:128)  [default: list what --model takes]
    #[arg(value_name = "MODEL")]
    pub model: Option<String>,
    /// The sample it takes: CxHxW (3x224x224) or N (a flat vector)  [default: the network's own: 3x32x32 for the CIFAR ResNets, 3x224x224 for the others; 1x8x8, the built-in digits', for a layer list]
    #[arg(long, value_name = "CxHxW|N")]
    pub input: Option<String>,
    /// Its classes  [default: 1000 for resnet18/34/50 and mobilenetv2, as their pretrained files have; else 10]
    #[arg(long, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(2..=65536))]
    pub classes: Option<usize>,
    /// Every tensor by PyTorch's name and shape (what --init reads, export writes)
    #[arg(long)]
    pub tensors: bool,
}

#[derive(Args, Debug)]
pub struct RunsArgs {
    /// A directory of runs, or one run's directory  [default: runs]
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct AttachArgs {
    /// A run directory (runs/NAME/TIMESTAMP), its live.sock, a forwarded socket, or a directory of runs (its newest live one)  [default: the newest live run under ./runs]
    #[arg(value_name = "RUN_DIR|SOCKET")]
    pub target: Option<PathBuf>,
    /// Watch only: the keys that would change the run are disabled, q detaches.
    #[arg(long)]
    pub readonly: bool,
    /// Terminal UI colours: dark | light | mono | PATH of a theme file  [default: dark; mono under NO_COLOR or a TERM without colours]
    #[arg(long, value_name = "NAME|PATH")]
    pub theme: Option<String>,
}

#[derive(Args, Debug)]
pub struct ViewArgs {
    /// A metrics file (--metrics-out), a run directory holding metrics.jsonl, or a directory of runs (its newest run, e.g. runs or runs/NAME).
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
    /// Print the run's summary lines instead of the terminal UI (also what a non-terminal stdout gets).
    #[arg(long)]
    pub headless: bool,
    /// Terminal UI colours: dark | light | mono | PATH of a theme file  [default: dark; mono under NO_COLOR or a TERM without colours]
    #[arg(long, value_name = "NAME|PATH")]
    pub theme: Option<String>,
    /// Instead of showing the run, write its scalars as TensorBoard events to DIR (=false: show the run)  [default: tensorboard/ beside the metrics file]
    #[arg(long, value_name = "DIR", num_args = 0..=1)]
    pub tensorboard: Option<Option<PathBuf>>,
}
