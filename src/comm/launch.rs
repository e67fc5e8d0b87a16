//! How this process was started: alone, or as one of several by a launcher (mpirun, mpiexec,
//! srun), read from the variables launchers set.

/// A start by a launcher of `size` processes (None: the launcher does not say how many).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    pub launcher: &'static str,
    pub size: Option<usize>,
    pub rank: Option<usize>,
    /// The number of the launch's processes on this machine.
    pub local_size: Option<usize>,
}

impl Launch {
    /// Process 0, by the launcher's word (or a launcher that does not say).
    pub fn is_lead(&self) -> bool {
        self.rank.is_none_or(|r| r == 0)
    }

    /// More than one process (or a launcher that does not say how many, so maybe more).
    pub fn is_multi(&self) -> bool {
        self.size.is_none_or(|n| n > 1)
    }

    pub fn describe(&self) -> String {
        match (self.rank, self.size) {
            (Some(r), Some(n)) => format!("process {r} of {n}, started by {}", self.launcher),
            _ => format!("started by {}", self.launcher),
        }
    }
}

/// The launchers' variables read as numbers.
const NUMBERS: [&str; 12] = [
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_SIZE",
    "PMI_RANK",
    "MPI_LOCALNRANKS",
    "PMI_LOCAL_SIZE",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_NTASKS",
    "SLURM_PROCID",
    "PMIX_RANK",
    "WORLD_SIZE",
];

fn number(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<usize> {
    env(name).and_then(|v| v.trim().parse().ok())
}

/// The tasks of the Slurm job step this process is one of: srun's, not the allocation's (an
/// sbatch script sees SLURM_NTASKS of the whole job, but is one process).
fn slurm_step_tasks(n: &dyn Fn(&str) -> Option<usize>) -> Option<usize> {
    n("SLURM_STEP_NUM_TASKS").or_else(|| n("SLURM_STEP_ID").and(n("SLURM_NTASKS")))
}

/// The launcher that started this process, from its environment (`env` reads a variable).
/// A torchrun-style start (`WORLD_SIZE` > 1, no MPI launcher) is refused: its processes would
/// each train alone.
pub fn detect(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Launch>, String> {
    // a launcher's count or rank that is not a number is not read as "no launcher"
    for name in NUMBERS {
        // an empty one is unset (`WORLD_SIZE=` in a shell profile, say)
        let set = env(name).filter(|v| !v.trim().is_empty());
        if let Some(v) = set.filter(|v| v.trim().parse::<usize>().is_err()) {
            return Err(format!(
                "{name}={} is not a process count or rank (launchers set it to a whole number): unset it, or start mgtop-train with the launcher that sets it",
                crate::text::excerpt(&v)
            ));
        }
    }
    let n = |name: &str| number(env, name);
    let launch = if n("OMPI_COMM_WORLD_SIZE").is_some() {
        Some(Launch {
            launcher: "mpirun (Open MPI)",
            size: n("OMPI_COMM_WORLD_SIZE"),
            rank: n("OMPI_COMM_WORLD_RANK"),
            local_size: n("OMPI_COMM_WORLD_LOCAL_SIZE"),
        })
    } else if n("PMI_SIZE").is_some() {
        Some(Launch {
            launcher: "an MPI launcher (PMI)",
            size: n("PMI_SIZE"),
            rank: n("PMI_RANK"),
            local_size: n("MPI_LOCALNRANKS").or_else(|| n("PMI_LOCAL_SIZE")),
        })
    } else if slurm_step_tasks(&n).is_some_and(|n| n > 1) && n("SLURM_PROCID").is_some() {
        Some(Launch {
            launcher: "srun (Slurm)",
            size: slurm_step_tasks(&n),
            rank: n("SLURM_PROCID"),
            local_size: None,
        })
    } else if n("PMIX_RANK").is_some() {
        Some(Launch {
            launcher: "a PMIx launcher",
            size: None,
            rank: n("PMIX_RANK"),
            local_size: None,
        })
    } else {
        None
    };
    if launch.is_none() && n("WORLD_SIZE").is_some_and(|n| n > 1) {
        return Err(format!(
            "WORLD_SIZE={} says this process is one of several (torchrun-style), but mgtop-train is started across processes and machines by MPI: run `mpirun -np N mgtop-train ...` or `srun -n N mgtop-train ...` with a build that has MPI (`cargo install --path . --features mpi`); unset WORLD_SIZE to train in this process alone",
            n("WORLD_SIZE").unwrap_or(0)
        ));
    }
    Ok(launch)
}

/// This process's environment.
pub fn from_env() -> Result<Option<Launch>, String> {
    detect(&|name| std::env::var(name).ok())
}

/// The error of a build without MPI started as one of several processes.
pub fn needs_mpi(launch: &Launch) -> String {
    format!(
        "this process was {}, but this mgtop-train was built without MPI, so each process would train alone on its own copy of the model; build it with MPI (`apt install libopenmpi-dev openmpi-bin libclang-dev pkgconf`, then `cargo install --path . --features mpi`), or run it once without the launcher to train on this machine alone",
        launch.describe()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Result<Option<Launch>, String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        detect(&move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn launchers_are_recognised_with_rank_and_local_rank() {
        let l = with(&[
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((l.size, l.rank, l.local_size), (Some(4), Some(3), Some(2)));
        assert!(l.is_multi());
        let l = with(&[
            ("SLURM_NTASKS", "2"),
            ("SLURM_STEP_NUM_TASKS", "2"),
            ("SLURM_PROCID", "1"),
            ("SLURM_LOCALID", "0"),
        ]);
        assert_eq!(l.unwrap().unwrap().launcher, "srun (Slurm)");
        let l = with(&[
            ("SLURM_STEP_ID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_PROCID", "1"),
        ]);
        assert_eq!(l.unwrap().unwrap().size, Some(2));
        let l = with(&[("PMI_SIZE", "2"), ("PMI_RANK", "0")])
            .unwrap()
            .unwrap();
        assert!(l.is_multi());
        assert!(with(&[("PMIX_RANK", "0")]).unwrap().unwrap().is_multi());
    }

    #[test]
    fn a_single_process_is_no_multi_process_run() {
        assert_eq!(with(&[]).unwrap(), None);
        // an sbatch script (the whole job's task count, but one process), one task, mpirun -np 1
        assert_eq!(
            with(&[("SLURM_NTASKS", "4"), ("SLURM_PROCID", "0")]).unwrap(),
            None
        );
        assert_eq!(
            with(&[("SLURM_NTASKS", "1"), ("SLURM_PROCID", "0")]).unwrap(),
            None
        );
        assert!(!with(&[("OMPI_COMM_WORLD_SIZE", "1")])
            .unwrap()
            .unwrap()
            .is_multi());
        assert_eq!(with(&[("WORLD_SIZE", "1")]).unwrap(), None);
    }

    #[test]
    fn a_launcher_variable_that_is_not_a_number_is_an_error_naming_it() {
        for (name, value) in [
            ("OMPI_COMM_WORLD_SIZE", "abc"),
            ("WORLD_SIZE", "99999999999999999999999"),
            ("SLURM_PROCID", "-1"),
        ] {
            let e = with(&[(name, value)]).unwrap_err();
            assert!(
                e.starts_with(&format!("{name}={value} is not a process count or rank")),
                "{e}"
            );
        }
        // surrounding spaces are forgiven, an empty one is unset
        assert!(with(&[("OMPI_COMM_WORLD_SIZE", " 2 ")]).unwrap().is_some());
        assert_eq!(
            with(&[("WORLD_SIZE", ""), ("PMI_SIZE", " ")]).unwrap(),
            None
        );
    }

    #[test]
    fn torchrun_style_starts_are_refused_naming_mpirun() {
        let e = with(&[("WORLD_SIZE", "2"), ("RANK", "1")]).unwrap_err();
        assert!(e.contains("mpirun") && e.contains("srun"), "{e}");
        let l = with(&[("OMPI_COMM_WORLD_SIZE", "2"), ("OMPI_COMM_WORLD_RANK", "0")]);
        let msg = needs_mpi(&l.unwrap().unwrap());
        assert!(
            msg.contains("--features mpi") && msg.contains("process 0 of 2"),
            "{msg}"
        );
    }
}
