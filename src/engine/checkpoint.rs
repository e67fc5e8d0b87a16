//! Checkpoints: `step-NNNNNNNN/` holding `model.safetensors` (weights and optimizer moments)
//! and `state.json` (position in the data, batch size, LR, config). Written to a temporary
//! directory, fsynced, then renamed, so a crash mid-write never damages an earlier checkpoint.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use serde::{Deserialize, Serialize};

use crate::backend::TrainState;
use crate::nn::model::Mlp;
use crate::nn::optim::OptState;

pub const FORMAT: &str = "mgtop-checkpoint/1";
const WEIGHTS: &str = "model.safetensors";
const STATE: &str = "state.json";

/// `state.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMeta {
    pub format: String,
    /// Optimizer steps completed.
    pub step: u64,
    /// Where the data stream continues (epoch and offset into its seeded permutation): with
    /// the seed, this is the whole data-order RNG state.
    pub epoch: u64,
    pub offset: usize,
    pub per_replica: usize,
    pub ranks: usize,
    /// Base LR in effect (after any batch-size rescaling).
    pub lr: f32,
    pub optimizer: String,
    pub optimizer_steps: u64,
    /// Layer widths, input to classes.
    pub dims: Vec<usize>,
    pub seed: u64,
    pub data: String,
    /// The run's settings, for the record.
    pub config: serde_json::Value,
}

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("cannot write checkpoint in {path}: {source}; check that the --checkpoint-dir is writable and the disk has space")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "no checkpoint at {0}: pass a step-NNNNNNNN directory or a --checkpoint-dir that holds one"
    )]
    NotFound(PathBuf),
    #[error("checkpoint {path} is unreadable: {msg}")]
    Corrupt { path: PathBuf, msg: String },
    #[error("checkpoint {path} was written for model {theirs} but this run builds {ours}; use the same --model and --data, or start without --resume")]
    ShapeMismatch {
        path: PathBuf,
        theirs: String,
        ours: String,
    },
    #[error("checkpoint {path} holds {theirs} optimizer state but this run uses --optimizer {ours}; pass --optimizer {theirs}")]
    OptimizerMismatch {
        path: PathBuf,
        theirs: String,
        ours: String,
    },
}

fn to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Writes a checkpoint for `meta.step` under `dir`; returns its directory.
pub fn write(
    dir: &Path,
    model: &Mlp,
    state: &TrainState,
    meta: &CheckpointMeta,
) -> Result<PathBuf, CheckpointError> {
    let final_dir = dir.join(format!("step-{:08}", meta.step));
    let tmp = dir.join(format!(".tmp-step-{:08}-{}", meta.step, std::process::id()));
    let werr = |source| CheckpointError::Write {
        path: dir.to_path_buf(),
        source,
    };
    fs::create_dir_all(&tmp).map_err(werr)?;
    let result = (|| {
        let mut blobs: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
        for t in &model.tensors {
            let r = t.offset..t.offset + t.len;
            blobs.push((
                t.name.clone(),
                t.shape.clone(),
                to_bytes(&state.params[r.clone()]),
            ));
            if !state.opt.m.is_empty() {
                blobs.push((
                    format!("optim.m.{}", t.name),
                    t.shape.clone(),
                    to_bytes(&state.opt.m[r.clone()]),
                ));
            }
            if !state.opt.v.is_empty() {
                blobs.push((
                    format!("optim.v.{}", t.name),
                    t.shape.clone(),
                    to_bytes(&state.opt.v[r]),
                ));
            }
        }
        let views = blobs.iter().map(|(n, s, b)| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), b).expect("tensor sizes match shapes"),
            )
        });
        let info: HashMap<String, String> = [("format".to_string(), FORMAT.to_string())].into();
        let bytes = safetensors::serialize(views, &Some(info))
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        write_synced(&tmp.join(WEIGHTS), &bytes)?;
        let json = serde_json::to_vec_pretty(meta).map_err(std::io::Error::other)?;
        write_synced(&tmp.join(STATE), &json)?;
        File::open(&tmp)?.sync_all()?;
        // an older run's checkpoint of the same step is replaced: moved aside first (a
        // directory cannot be renamed over a non-empty one), so a crash leaves one of the two
        let old = dir.join(format!(".old-step-{:08}-{}", meta.step, std::process::id()));
        let replacing = final_dir.exists();
        if replacing {
            fs::rename(&final_dir, &old)?;
        }
        fs::rename(&tmp, &final_dir)?;
        File::open(dir)?.sync_all()?;
        if replacing {
            fs::remove_dir_all(&old)?;
        }
        Ok(())
    })();
    if let Err(e) = result {
        let _ = fs::remove_dir_all(&tmp);
        return Err(werr(e));
    }
    Ok(final_dir)
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = File::create(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// A checkpoint directory, or the newest complete `step-*` inside a checkpoint dir.
pub fn resolve(path: &Path) -> Result<PathBuf, CheckpointError> {
    if path.join(STATE).is_file() {
        return Ok(path.to_path_buf());
    }
    let newest = fs::read_dir(path)
        .map_err(|_| CheckpointError::NotFound(path.to_path_buf()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("step-"))
                && p.join(STATE).is_file()
        })
        .max();
    newest.ok_or_else(|| CheckpointError::NotFound(path.to_path_buf()))
}

/// Reads a checkpoint and checks it fits `model` and the optimizer named `optimizer`.
pub fn read(
    path: &Path,
    model: &Mlp,
    optimizer: &str,
) -> Result<(CheckpointMeta, TrainState), CheckpointError> {
    let dir = resolve(path)?;
    let corrupt = |msg: String| CheckpointError::Corrupt {
        path: dir.clone(),
        msg,
    };
    let json = fs::read(dir.join(STATE)).map_err(|e| corrupt(format!("{STATE}: {e}")))?;
    let meta: CheckpointMeta =
        serde_json::from_slice(&json).map_err(|e| corrupt(format!("{STATE}: {e}")))?;
    if meta.format != FORMAT {
        return Err(corrupt(format!("format `{}` is not {FORMAT}", meta.format)));
    }
    if meta.dims != model.dims {
        let s = |d: &[usize]| {
            d.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join("-")
        };
        return Err(CheckpointError::ShapeMismatch {
            path: dir,
            theirs: s(&meta.dims),
            ours: s(&model.dims),
        });
    }
    if meta.optimizer != optimizer {
        return Err(CheckpointError::OptimizerMismatch {
            path: dir,
            theirs: meta.optimizer,
            ours: optimizer.to_string(),
        });
    }
    let bytes = fs::read(dir.join(WEIGHTS)).map_err(|e| corrupt(format!("{WEIGHTS}: {e}")))?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| corrupt(format!("{WEIGHTS}: {e}")))?;
    let n = model.n_params;
    let mut params = vec![0.0; n];
    let mut m = Vec::new();
    let mut v = Vec::new();
    let has_m = st.names().iter().any(|k| k.starts_with("optim.m."));
    let has_v = st.names().iter().any(|k| k.starts_with("optim.v."));
    if has_m {
        m = vec![0.0; n];
    }
    if has_v {
        v = vec![0.0; n];
    }
    for t in &model.tensors {
        let r = t.offset..t.offset + t.len;
        let fill = |name: &str, dst: &mut [f32]| -> Result<(), CheckpointError> {
            let view = st
                .tensor(name)
                .map_err(|_| corrupt(format!("tensor `{name}` is missing")))?;
            if view.dtype() != Dtype::F32 || view.shape() != t.shape.as_slice() {
                return Err(corrupt(format!(
                    "tensor `{name}` is {:?} {:?}, expected F32 {:?}",
                    view.dtype(),
                    view.shape(),
                    t.shape
                )));
            }
            for (d, c) in dst.iter_mut().zip(view.data().chunks_exact(4)) {
                *d = f32::from_le_bytes(c.try_into().expect("4 bytes"));
            }
            Ok(())
        };
        fill(&t.name, &mut params[r.clone()])?;
        if has_m {
            fill(&format!("optim.m.{}", t.name), &mut m[r.clone()])?;
        }
        if has_v {
            fill(&format!("optim.v.{}", t.name), &mut v[r])?;
        }
    }
    if params.iter().any(|p| !p.is_finite()) {
        return Err(corrupt("weights contain NaN or infinity".into()));
    }
    let opt = OptState {
        t: meta.optimizer_steps,
        m,
        v,
    };
    Ok((meta, TrainState { params, opt }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::model::ModelSpec;
    use crate::nn::optim::OptimizerKind;

    fn sample() -> (Mlp, TrainState, CheckpointMeta) {
        let model = Mlp::new(4, &ModelSpec { hidden: vec![3] }, 2);
        let params = model.init_params(1);
        let mut opt = OptState::new(OptimizerKind::Adam, model.n_params);
        opt.t = 7;
        opt.m
            .iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = i as f32);
        let meta = CheckpointMeta {
            format: FORMAT.into(),
            step: 12,
            epoch: 1,
            offset: 40,
            per_replica: 8,
            ranks: 2,
            lr: 1e-3,
            optimizer: "adam".into(),
            optimizer_steps: 7,
            dims: model.dims.clone(),
            seed: 0,
            data: "digits".into(),
            config: serde_json::json!({}),
        };
        (model, TrainState { params, opt }, meta)
    }

    #[test]
    fn round_trips_and_resolves_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let (model, state, mut meta) = sample();
        write(dir.path(), &model, &state, &meta).unwrap();
        meta.step = 30;
        let p = write(dir.path(), &model, &state, &meta).unwrap();
        assert!(p.ends_with("step-00000030"));
        let (m2, s2) = read(dir.path(), &model, "adam").unwrap();
        assert_eq!((m2, s2), (meta.clone(), state.clone()));
        // a later run writing the same step replaces it
        let mut other = state.clone();
        other.params[0] += 1.0;
        write(dir.path(), &model, &other, &meta).unwrap();
        assert_eq!(read(&p, &model, "adam").unwrap().1, other);
        let leftovers: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
    }

    #[test]
    fn rejects_other_shapes_optimizers_and_damaged_files() {
        let dir = tempfile::tempdir().unwrap();
        let (model, state, meta) = sample();
        let p = write(dir.path(), &model, &state, &meta).unwrap();
        let other = Mlp::new(4, &ModelSpec { hidden: vec![5] }, 2);
        let e = read(&p, &other, "adam").unwrap_err().to_string();
        assert!(
            e.contains("4-3-2") && e.contains("4-5-2") && e.contains("--model"),
            "{e}"
        );
        let e = read(&p, &model, "sgd").unwrap_err().to_string();
        assert!(e.contains("--optimizer adam"), "{e}");
        let bytes = fs::read(p.join(WEIGHTS)).unwrap();
        fs::write(p.join(WEIGHTS), &bytes[..bytes.len() / 2]).unwrap();
        let e = read(&p, &model, "adam").unwrap_err().to_string();
        assert!(e.contains("unreadable"), "{e}");
        let e = read(&dir.path().join("nope"), &model, "adam")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no checkpoint at"), "{e}");
    }
}
