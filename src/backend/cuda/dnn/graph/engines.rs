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

/// What became of a shape's engine configurations: the message of a shape the graph API does
/// not run (read from a GPU run's log, it names what to fix).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Configurations the heuristics listed.
    pub listed: usize,
    /// A heuristics mode's failure.
    pub heuristics: Vec<String>,
    /// Passed over: numerics the run does not allow.
    pub numerics: usize,
    /// Passed over while a precompiled engine might do: compiled at plan time.
    pub compiled: usize,
    /// Plans that did not build (the first one's error).
    pub unbuilt: (usize, Option<String>),
    /// Plans needing more workspace than `MAX_WORKSPACE`.
    pub too_big: usize,
    /// Plans that failed to run (the first one's error).
    pub unrun: (usize, Option<String>),
}

impl Tally {
    pub fn unbuilt(&mut self, e: String) {
        self.unbuilt.0 += 1;
        self.unbuilt.1.get_or_insert(e);
    }

    pub fn unrun(&mut self, e: String) {
        self.unrun.0 += 1;
        self.unrun.1.get_or_insert(e);
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "its heuristics listed {} engine configurations",
            self.listed
        )?;
        for e in &self.heuristics {
            write!(f, " ({e})")?;
        }
        write!(
            f,
            "; {} passed over for the run's numerics, {} runtime-compiled ones for precompiled, {} over the workspace bound; {} plans did not build",
            self.numerics, self.compiled, self.too_big, self.unbuilt.0
        )?;
        if let Some(e) = &self.unbuilt.1 {
            write!(f, " (first: {e})")?;
        }
        write!(f, ", {} did not run", self.unrun.0)?;
        if let Some(e) = &self.unrun.1 {
            write!(f, " (first: {e})")?;
        }
        Ok(())
    }
}

/// The engine configurations cuDNN's heuristics list for `graph`: mode A's, then those of its
/// fallback list on other engines (a mode that fails lists none: `tally` keeps why).
pub fn configs(graph: &Desc, tally: &mut Tally) -> Vec<Desc> {
    use ffi::cudnnBackendHeurMode_t::{CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    let list = |mode| -> Result<Vec<Desc>, String> {
        let mut h = Desc::new(K::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)?;
        h.set_descs(A::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, &[graph])?;
        h.set(A::CUDNN_ATTR_ENGINEHEUR_MODE, mode)?;
        let h = h.finalize()?;
        let n = h.count_descs(A::CUDNN_ATTR_ENGINEHEUR_RESULTS)?;
        let kind = K::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR;
        h.get_descs(A::CUDNN_ATTR_ENGINEHEUR_RESULTS, kind, n)
    };
    let listed = |mode, tally: &mut Tally| {
        list(mode).unwrap_or_else(|e| {
            tally.heuristics.push(format!("{mode:?}: {e}"));
            Vec::new()
        })
    };
    let index =
        |cfg: &Desc| engine(cfg).and_then(|e| e.get_i64(A::CUDNN_ATTR_ENGINE_GLOBAL_INDEX).ok());
    let mut out = listed(CUDNN_HEUR_MODE_A, tally);
    let seen: Vec<Option<i64>> = out.iter().map(index).collect();
    let more = listed(CUDNN_HEUR_MODE_FALLBACK, tally);
    out.extend(more.into_iter().filter(|c| {
        let i = index(c);
        i.is_none() || !seen.contains(&i)
    }));
    tally.listed = out.len();
    out
}

/// Up to `want` of `configs` made into plans, in order: those whose engines the run's numerics
/// allow, precompiled ones or (`compiled`) runtime-compiled ones only, that build within the
/// workspace bound (`MAX_WORKSPACE`) on `handle`: (plan, workspace bytes). `tally` counts what
/// was passed over (the precompiled pass) and what did not build.
pub fn plans(
    configs: &[Desc],
    handle: ffi::cudnnHandle_t,
    numerics: Numerics,
    (want, compiled): (usize, bool),
    tally: &mut Tally,
) -> Vec<(Desc, usize)> {
    let mut out = Vec::new();
    for cfg in configs {
        if out.len() == want {
            break;
        }
        let Some(e) = engine(cfg) else {
            tally.unbuilt("its engine could not be read".into());
            continue;
        };
        let (num, how) = (e.numerical_notes(), e.behavior_notes());
        let (Ok(num), Ok(how)) = (num, how) else {
            tally.unbuilt("its engine's notes could not be read".into());
            continue;
        };
        if runtime_compiled(&how) != compiled {
            tally.compiled += usize::from(!compiled);
            continue;
        }
        if !allowed(&num, numerics) {
            tally.numerics += 1;
            continue;
        }
        let built = (|| {
            let mut p = Desc::new(K::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)?;
            p.set(A::CUDNN_ATTR_EXECUTION_PLAN_HANDLE, handle)?;
            p.set_descs(A::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, &[cfg])?;
            let p = p.finalize()?;
            let need = p.get_i64(A::CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)?;
            Ok::<_, String>((p, need))
        })();
        match built {
            Err(e) => tally.unbuilt(e),
            Ok((p, need)) => match usize::try_from(need).ok().filter(|&n| n <= MAX_WORKSPACE) {
                Some(need) => out.push((p, need)),
                None => tally.too_big += 1,
            },
        }
    }
    out
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
    fn a_tally_names_what_became_of_each_configuration() {
        let mut t = Tally {
            listed: 9,
            heuristics: vec!["CUDNN_HEUR_MODE_FALLBACK: no".into()],
            numerics: 2,
            compiled: 3,
            too_big: 1,
            ..Tally::default()
        };
        t.unbuilt("BAD_PARAM".into());
        t.unbuilt("NOT_SUPPORTED".into());
        t.unrun("EXECUTION_FAILED".into());
        let said = t.to_string();
        for part in [
            "listed 9 engine configurations (CUDNN_HEUR_MODE_FALLBACK: no)",
            "2 passed over for the run's numerics, 3 runtime-compiled",
            "1 over the workspace bound; 2 plans did not build (first: BAD_PARAM)",
            "1 did not run (first: EXECUTION_FAILED)",
        ] {
            assert!(said.contains(part), "{said}");
        }
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
