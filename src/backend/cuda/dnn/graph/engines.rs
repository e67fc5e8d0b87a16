//! Which of cuDNN's engines a convolution may take: the configurations its heuristics list,
//! those whose numerical notes the run allows (`allowed`), made into execution plans
//! (precompiled engines first: `runtime_compiled`).

use cudarc::cudnn::sys as ffi;
use ffi::cudnnBackendAttributeName_t as A;
use ffi::cudnnBackendDescriptorType_t as K;

use super::super::backend::Desc;
use super::super::MAX_WORKSPACE;

/// What the run's numerics allow of an engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Numerics {
    /// Tensor cores (TF32 for fp32 tensors, bf16 products): all but `--precision fp32`.
    pub tensor_cores: bool,
    /// The same bits every run (`MGTOP_CUDNN_ALGOS=deterministic`).
    pub deterministic: bool,
}

/// Whether an engine with numerical notes `notes` (their C values) may run under `n`: never
/// one that converts its inputs down (fp32 to fp16, as PyTorch refuses them too); tensor-core
/// engines only where allowed; deterministic ones only where asked for.
pub fn allowed(notes: &[u32], n: Numerics) -> bool {
    use ffi::cudnnBackendNumericalNote_t::*;
    let has = |note: ffi::cudnnBackendNumericalNote_t| notes.contains(&(note as u32));
    !(has(CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS)
        || (!n.tensor_cores && has(CUDNN_NUMERICAL_NOTE_TENSOR_CORE))
        || (n.deterministic && has(CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)))
}

/// Whether an engine with behaviour notes `notes` compiles its kernels when its plan is made
/// (NVRTC at finalize: up to seconds a plan; PyTorch leaves these engines out by default).
pub fn runtime_compiled(notes: &[u32]) -> bool {
    use ffi::cudnnBackendBehaviorNote_t::CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION as RTC;
    notes.contains(&(RTC as u32))
}

/// The engine a configuration uses.
fn engine(cfg: &Desc) -> Option<Desc> {
    let kind = K::CUDNN_BACKEND_ENGINE_DESCRIPTOR;
    cfg.get_descs(A::CUDNN_ATTR_ENGINECFG_ENGINE, kind, 1)
        .ok()?
        .pop()
}

/// The engine configurations cuDNN's heuristics list for `graph`: mode A's, then those of its
/// fallback list on other engines (a mode that fails lists none).
pub fn configs(graph: &Desc) -> Vec<Desc> {
    use ffi::cudnnBackendHeurMode_t::{CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    let list = |mode| -> Result<Vec<Desc>, String> {
        let mut h = Desc::new(K::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)?;
        h.set_descs(A::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, &[graph])?;
        h.set_heur_mode(A::CUDNN_ATTR_ENGINEHEUR_MODE, mode)?;
        let h = h.finalize()?;
        let n = h.count_descs(A::CUDNN_ATTR_ENGINEHEUR_RESULTS)?;
        let kind = K::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR;
        h.get_descs(A::CUDNN_ATTR_ENGINEHEUR_RESULTS, kind, n)
    };
    let index =
        |cfg: &Desc| engine(cfg).and_then(|e| e.get_i64(A::CUDNN_ATTR_ENGINE_GLOBAL_INDEX).ok());
    let mut out = list(CUDNN_HEUR_MODE_A).unwrap_or_default();
    let seen: Vec<Option<i64>> = out.iter().map(index).collect();
    let more = list(CUDNN_HEUR_MODE_FALLBACK).unwrap_or_default();
    out.extend(more.into_iter().filter(|c| {
        let i = index(c);
        i.is_none() || !seen.contains(&i)
    }));
    out
}

/// Up to `want` of `configs` made into plans, in order: those whose engines the run's numerics
/// allow, precompiled ones or (`compiled`) runtime-compiled ones only, that build within the
/// workspace bound (`MAX_WORKSPACE`) on `handle`: (plan, workspace bytes).
pub fn plans(
    configs: &[Desc],
    handle: ffi::cudnnHandle_t,
    numerics: Numerics,
    (want, compiled): (usize, bool),
) -> Vec<(Desc, usize)> {
    configs
        .iter()
        .filter_map(|cfg| {
            let e = engine(cfg)?;
            let (num, how) = (e.numerical_notes().ok()?, e.behavior_notes().ok()?);
            if !allowed(&num, numerics) || runtime_compiled(&how) != compiled {
                return None;
            }
            let mut p = Desc::new(K::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR).ok()?;
            p.set_handle(A::CUDNN_ATTR_EXECUTION_PLAN_HANDLE, handle)
                .ok()?;
            p.set_descs(A::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, &[cfg])
                .ok()?;
            let p = p.finalize().ok()?;
            let need = p
                .get_i64(A::CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)
                .ok()?;
            let need = usize::try_from(need).ok().filter(|&n| n <= MAX_WORKSPACE)?;
            Some((p, need))
        })
        .take(want)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engines_are_kept_as_the_precision_and_determinism_allow() {
        use ffi::cudnnBackendNumericalNote_t::*;
        let n = |v: &[ffi::cudnnBackendNumericalNote_t]| {
            v.iter().map(|x| *x as u32).collect::<Vec<_>>()
        };
        let tf32 = Numerics {
            tensor_cores: true,
            deterministic: false,
        };
        let strict = Numerics {
            tensor_cores: false,
            deterministic: false,
        };
        let same = Numerics {
            tensor_cores: true,
            deterministic: true,
        };
        let tc = n(&[CUDNN_NUMERICAL_NOTE_TENSOR_CORE]);
        assert!(allowed(&tc, tf32));
        assert!(!allowed(&tc, strict));
        assert!(allowed(&[], strict));
        assert!(!allowed(
            &n(&[CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS]),
            tf32
        ));
        let atomics = n(&[
            CUDNN_NUMERICAL_NOTE_TENSOR_CORE,
            CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC,
        ]);
        assert!(allowed(&atomics, tf32));
        assert!(!allowed(&atomics, same));
        // a note this build does not know is no reason to refuse an engine
        assert!(allowed(&[77], strict));
    }

    #[test]
    fn runtime_compiled_engines_are_told_by_their_behaviour_note() {
        use ffi::cudnnBackendBehaviorNote_t::*;
        assert!(runtime_compiled(&[
            CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION as u32
        ]));
        assert!(!runtime_compiled(&[]));
        let graph_native = CUDNN_BEHAVIOR_NOTE_SUPPORTS_CUDA_GRAPH_NATIVE_API as u32;
        assert!(!runtime_compiled(&[graph_native, 99]));
    }
}
