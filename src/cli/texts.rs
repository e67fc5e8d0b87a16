//! The texts `--help` ends with and `--version` says, apart from the flags they describe.

pub(super) const EXAMPLES: &str = "\
Examples:
  mgtop-train                                  train the MLP 64-128-10 on the embedded digits data, live in the terminal UI
  mgtop-train --headless                       the same run as log lines
  mgtop-train --data synthetic:60000,784,10 --model mlp:1024 --batch-per-replica 128 --epochs 60
                                               a run to watch (~1.5 min on 2 cores; keys: p pause, ]/[ batch, s checkpoint, ? help)
  mgtop-train --headless --devices cpu:4 --epochs 5 --batch-per-replica 64
  mgtop-train --headless --data csv:data/digits.csv,label=last --model mlp:16   (a table: features, then a class number 0 to N-1 or a class name)
  mgtop-train --headless --data idx:train-images-idx3-ubyte.gz,train-labels-idx1-ubyte.gz --model mlp:256,128
  mgtop-train --headless --config run.toml --lr 3e-4     (flags override the file)
  mgtop-train --headless --model conv16k3,pool2,dense64   (a small CNN on the digits' 1x8x8 images, ~97.5%)
  mgtop-train --headless --resume runs/digits-mlp_128/latest   (continue a run from its newest checkpoint)
  mgtop-train --devices cpu:2 --data synthetic:60000,784,10 --model mlp:1024 --batch-per-replica 128 --steps 10000 --slow-rank 1:2.0 --rebalance
                                               (watch rank 1 found as a straggler at step ~50, the batch re-cut from step 51, cleared once it keeps pace)
  mgtop-train --headless --strategy local-sgd:8   (ranks step alone and average every 8 steps, after 100 synchronous ones)
  mgtop-train scale --data synthetic:60000,784,10 --counts 1,2 --strategies mirrored,central-storage,local-sgd:8 --slow-rank 1:2.0
                                               (the strategies side by side on the README's workload: samples/s, speedup, comm, transfer, loss, accuracy)
  mgtop-train --headless --metrics-out run.jsonl && mgtop-train view run.jsonl
                                               (the UI over a finished or still running run's metrics file; --headless: its summary)
  mgtop-train attach runs/digits-mlp_128/latest  (the UI of a running job over its live socket; q detaches or stops it)
  mpirun -np 2 -H nodeA,nodeB mgtop-train --headless --devices auto
                                               (one run over two machines: a build with --features mpi; see the README)
  mgtop-train scale --counts 1,2 --batches 32,128 --out scale.csv   (scaling report)
  mgtop-train --headless --model mobilenetv2 --data images:photos --image-size 224 --augment random-resized-crop,flip --init mobilenet_v2.safetensors
                                               (fine-tune pretrained torchvision weights on a folder of class folders)
  mgtop-train export runs/photos-mobilenetv2/latest trained.safetensors   (the weights for PyTorch's load_state_dict)
  mgtop-train eval runs/photos-mobilenetv2/latest --data images:photos_test   (loss, accuracy, per class, on a held-out folder)
  mgtop-train selftest                                 (every GPU op, training step and all-reduce vs the CPU)
  mgtop-train bench                                    (throughput, all-reduce, UI cost, rebalancing)";

/// The groups `--help` lists the training flags under, in this order.
pub(super) mod heading {
    pub const RUN: &str = "Run";
    pub const DATA: &str = "Data";
    pub const OPTIMIZER: &str = "Optimizer and schedule";
    pub const WEIGHTS: &str = "Weights in and out";
    pub const PARALLEL: &str = "Parallelism";
    pub const GPUS: &str = "GPUs";
    pub const OUTPUT: &str = "Run directory, checkpoints and metrics";
    pub const UI: &str = "Terminal UI and log";
    pub const FAULTS: &str = "Demo faults";
}

/// `--version`: the version, and what this build can do that another might not (MPI is a
/// build feature; CUDA's libraries are looked for when a run starts).
pub(super) const VERSION: &str = if cfg!(feature = "mpi") {
    concat!(
        env!("CARGO_PKG_VERSION"),
        " (MPI: built in, runs under mpirun; CUDA: its libraries loaded at run time, `selftest` says which are found)"
    )
} else {
    concat!(
        env!("CARGO_PKG_VERSION"),
        " (MPI: not built in, for several processes build with --features mpi; CUDA: its libraries loaded at run time, `selftest` says which are found)"
    )
};
