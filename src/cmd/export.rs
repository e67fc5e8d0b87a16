//! `mgtop-train export RUN_DIR|CHECKPOINT FILE`: a run's trained weights for PyTorch.

use crate::cli::ExportArgs;
use crate::engine::weights;

pub fn command(args: &ExportArgs) -> anyhow::Result<()> {
    let done = weights::export(&args.from, &args.out).map_err(anyhow::Error::msg)?;
    crate::say!(
        "exported {} of {} to {} ({})",
        crate::text::counted(done.tensors, "tensor"),
        done.checkpoint.display(),
        done.written(&args.out),
        done.how_to_load(&args.out)
    );
    Ok(())
}
