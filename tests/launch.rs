//! Starts by a launcher that this build cannot serve are refused before anything is written:
//! never N independent runs that each think they are the whole job.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_mgtop-train");

fn start(dir: &std::path::Path, vars: &[(&str, &str)]) -> (bool, String) {
    let mut c = Command::new(BIN);
    c.current_dir(dir).args(["--headless", "--steps", "5"]);
    for v in [
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_RANK",
        "PMI_SIZE",
        "PMI_RANK",
        "PMIX_RANK",
        "SLURM_NTASKS",
        "SLURM_STEP_NUM_TASKS",
        "SLURM_STEP_ID",
        "SLURM_PROCID",
        "WORLD_SIZE",
    ] {
        c.env_remove(v);
    }
    c.envs(vars.iter().copied());
    let out = c.output().expect("starts");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[cfg(not(feature = "mpi"))]
#[test]
fn a_launcher_start_without_mpi_is_refused_naming_the_build_to_use() {
    let dir = tempfile::tempdir().unwrap();
    for vars in [
        &[("OMPI_COMM_WORLD_SIZE", "2"), ("OMPI_COMM_WORLD_RANK", "1")][..],
        &[("SLURM_STEP_NUM_TASKS", "4"), ("SLURM_PROCID", "0")],
        &[("PMI_SIZE", "2"), ("PMI_RANK", "0")],
    ] {
        let (ok, err) = start(dir.path(), vars);
        assert!(!ok, "{vars:?}");
        assert!(
            err.contains("--features mpi") && err.contains("built without MPI"),
            "{vars:?}: {err}"
        );
    }
    assert!(
        !dir.path().join("runs").exists(),
        "a refused start wrote a run"
    );
    // one process under a launcher is a plain run
    let (ok, err) = start(dir.path(), &[("OMPI_COMM_WORLD_SIZE", "1")]);
    assert!(ok, "{err}");
}

#[test]
fn a_torchrun_style_start_is_refused_naming_mpirun() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, err) = start(dir.path(), &[("WORLD_SIZE", "2"), ("RANK", "0")]);
    assert!(!ok);
    assert!(err.contains("mpirun") && err.contains("srun"), "{err}");
    assert!(!dir.path().join("runs").exists());
}
