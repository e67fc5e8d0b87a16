//! The number format a model's products run in: a policy of the run, applied by the GPU
//! backend (cuBLAS's math mode today); CPU workers always compute in fp32 and are the
//! reference.

use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// IEEE single precision throughout.
    Fp32,
    /// fp32 storage; matrix products on the tensor cores with TF32 inputs (10-bit mantissa)
    /// and fp32 accumulation (Ampere and newer).
    Tf32,
    /// bf16 autocast as PyTorch's: convolutions and matrix products on bf16 operands with
    /// fp32 accumulation, activations stored in bf16; batch norm's statistics, the loss, master
    /// weights, gradients and optimizer state in fp32 (Ampere and newer).
    Bf16,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Tf32 => "tf32",
            Precision::Bf16 => "bf16",
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "fp32" => Ok(Precision::Fp32),
            "tf32" => Ok(Precision::Tf32),
            "bf16" => Ok(Precision::Bf16),
            _ => Err(format!(
                "unknown precision `{s}`: use auto, fp32, tf32 or bf16"
            )),
        }
    }
}

/// `--precision`: one precision, or `auto` (None: TF32 where every GPU has it, else fp32).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrecisionFlag(pub Option<Precision>);

impl FromStr for PrecisionFlag {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.eq_ignore_ascii_case("auto") {
            true => Ok(PrecisionFlag(None)),
            false => s.parse().map(|p| PrecisionFlag(Some(p))),
        }
    }
}

impl fmt::Display for PrecisionFlag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => f.write_str("auto"),
            Some(p) => p.fmt(f),
        }
    }
}

/// `--grad-dtype`: what the gradients' all-reduce between GPUs carries. bf16 halves its bytes
/// (NVLink, PCIe, the network between machines), as PyTorch DDP's `bf16_compress_hook`: each
/// rank's gradient sums rounded to bf16, summed in bf16 by NCCL, widened back to the fp32
/// gradients the optimizer reads. The batch's metrics (loss, counts) stay fp32.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GradDtype {
    #[default]
    Fp32,
    Bf16,
}

impl GradDtype {
    pub fn name(self) -> &'static str {
        match self {
            GradDtype::Fp32 => "fp32",
            GradDtype::Bf16 => "bf16",
        }
    }
}

impl fmt::Display for GradDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for GradDtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "fp32" => Ok(GradDtype::Fp32),
            "bf16" => Ok(GradDtype::Bf16),
            _ => Err(format!(
                "unknown gradient type `{s}`: use fp32 (the default) or bf16 (the GPUs' all-reduce in bf16, half the bytes)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gradient_type_reads_fp32_and_bf16_and_names_the_choices_otherwise() {
        assert_eq!("bf16".parse(), Ok(GradDtype::Bf16));
        assert_eq!("FP32".parse(), Ok(GradDtype::Fp32));
        let e = "fp16".parse::<GradDtype>().unwrap_err();
        assert!(
            e.contains("`fp16`") && e.contains("fp32") && e.contains("bf16"),
            "{e}"
        );
    }

    #[test]
    fn the_flag_reads_auto_and_each_precision_and_names_the_choices_otherwise() {
        assert_eq!("auto".parse(), Ok(PrecisionFlag(None)));
        assert_eq!("TF32".parse(), Ok(PrecisionFlag(Some(Precision::Tf32))));
        assert_eq!("fp32".parse(), Ok(PrecisionFlag(Some(Precision::Fp32))));
        let e = "fp16".parse::<PrecisionFlag>().unwrap_err();
        assert!(
            e.contains("`fp16`") && e.contains("auto, fp32, tf32 or bf16"),
            "{e}"
        );
        for f in ["auto", "fp32", "tf32", "bf16"] {
            assert_eq!(f.parse::<PrecisionFlag>().unwrap().to_string(), f);
        }
    }
}
