//! Which of cuDNN's engines a convolution may take: the configurations its heuristics list,
//! those whose numerical notes the run allows (`allowed`), made into execution plans.

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

/// The engine configurations cuDNN's heuristics list for `graph`, mode A's then its
/// fallback list's (a mode that fails lists none).
pub fn configs(graph: &Desc) -> Vec<Desc> {
    use ffi::cudnnBackendHeurMode_t::{CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    let list = |mode| -> Result<Vec<Desc>, String> {
        let mut h = Desc::new(K::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)?;
        h.set_descs(A::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, &[graph])?;
        h.set_heur_mode(A::CUDNN_ATTR_ENGINEHEUR_MODE, mode)?;
        let h = h.finalize()?;
        let n = h.count_descs(A::CUDNN_ATTR_ENGINEHEUR_RESULTS)?;
        h.get_descs(
            A::CUDNN_ATTR_ENGINEHEUR_RESULTS,
            K::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
            n,
        )
    };
    [CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK]
        .into_iter()
        .flat_map(|mode| list(mode).unwrap_or_default())
        .collect()
}

/// Engine configuration `cfg` made into a plan, where the run's numerics allow its engine
/// and it builds within the workspace bound (`MAX_WORKSPACE`): (plan, workspace
/// bytes), made on `handle`.
pub fn plan(cfg: &Desc, handle: ffi::cudnnHandle_t, numerics: Numerics) -> Option<(Desc, usize)> {
    use ffi::cudnnBackendAttributeType_t::CUDNN_TYPE_NUMERICAL_NOTE;
    let engine = cfg
        .get_descs(
            A::CUDNN_ATTR_ENGINECFG_ENGINE,
            K::CUDNN_BACKEND_ENGINE_DESCRIPTOR,
            1,
        )
        .ok()?
        .pop()?;
    let notes = engine
        .notes(
            A::CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
            CUDNN_TYPE_NUMERICAL_NOTE,
        )
        .ok()?;
    if !allowed(&notes, numerics) {
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
}
