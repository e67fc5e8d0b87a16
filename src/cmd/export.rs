//! `mgtop-train export RUN_DIR|CHECKPOINT FILE`: a run's trained weights for PyTorch.

use crate::cli::ExportArgs;
use crate::engine::weights;

pub fn command(args: &ExportArgs) -> anyhow::Result<()> {
    let (dir, n) = weights::export(&args.from, &args.out).map_err(anyhow::Error::msg)?;
    crate::say!(
        "exported {n} tensors of {} to {} (load in PyTorch: model.load_state_dict(safetensors.torch.load_file(\"{}\")))",
        dir.display(),
        args.out.display(),
        args.out.display()
    );
    Ok(())
}
