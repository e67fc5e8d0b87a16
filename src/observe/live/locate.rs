//! Which socket `attach` opens: a run directory's `live.sock` (or the path its pointer file
//! names), a socket given itself, or by default the newest live run under `./runs`.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::client::{denied, AttachError};
use crate::files::read::read_note;
use crate::observe::metrics::reader::FILE_NAME;

use crate::engine::rundir;

pub use crate::engine::rundir::SOCKET as SOCKET_NAME;
pub use crate::engine::rundir::{socket_in, RUNS};

/// A socket to open and the run directory it serves (for the messages).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub socket: PathBuf,
    pub run: PathBuf,
}

fn is_socket(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.file_type().is_socket())
}

/// The newest run below `dir` whose socket takes a connection, one still training before one
/// that ended (a terminal UI on its summary serves its run still): the one started last.
pub fn newest_live(dir: &Path) -> Result<Target, AttachError> {
    let runs: Vec<PathBuf> = rundir::runs_under(dir)
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    let mut live: Vec<(bool, SystemTime, Target)> = runs
        .iter()
        .filter_map(|run| {
            let socket = socket_in(run)?;
            let born = std::fs::metadata(&socket).and_then(|m| m.modified()).ok()?;
            super::socket::listened(&socket).then_some(())?;
            let training = crate::engine::rundir::end_status(&run.join(FILE_NAME)).is_none();
            Some((
                training,
                born,
                Target {
                    socket,
                    run: run.clone(),
                },
            ))
        })
        .collect();
    live.sort_by_key(|(training, t, _)| (*training, *t));
    if live.is_empty() {
        if let Some((run, pid)) = starting(dir) {
            return Err(AttachError::Starting { run, pid });
        }
    }
    match live.pop() {
        Some((.., t)) => Ok(t),
        None => Err(AttachError::NoLiveRun {
            dir: dir.to_path_buf(),
            ended: match runs.len() {
                0 => String::new(),
                // (`runs` alone lists ./runs, the folder attach looks in by default)
                n => format!(
                    " ({n} run{} there, none live: list them with `mgtop-train runs{}`, see one with `mgtop-train view RUN_DIR`)",
                    if n == 1 { "" } else { "s" },
                    match dir == Path::new("runs") {
                        true => String::new(),
                        false => format!(" {}", dir.display()),
                    }
                ),
            },
        }),
    }
}

/// A run starting in `dir` or a directory up to two levels under it, and its process: its
/// checkpoint lock's process runs, and it has neither a metrics file nor a socket yet (both
/// come once its model is built and its devices are open; a run whose socket failed, or one
/// that ended, has its metrics file). The newest such directory where several are.
fn starting(dir: &Path) -> Option<(PathBuf, u32)> {
    let starting = |d: &Path| {
        if d.join(FILE_NAME).exists() || socket_in(d).is_some() {
            return None;
        }
        let pid = crate::engine::checkpoint::holder(&d.join(rundir::CHECKPOINTS))?;
        let born = std::fs::metadata(d).and_then(|m| m.modified()).ok()?;
        Some((born, d.to_path_buf(), pid))
    };
    let newest = std::iter::once(dir.to_path_buf())
        .chain(
            rundir::children(dir)
                .into_iter()
                .flat_map(|c| std::iter::once(c.clone()).chain(rundir::children(&c))),
        )
        .filter_map(|d| starting(&d))
        .max_by_key(|(born, ..)| *born);
    newest.map(|(_, run, pid)| (run, pid))
}

/// What `attach [TARGET]` opens.
pub fn locate(target: Option<&Path>) -> Result<Target, AttachError> {
    let Some(p) = target else {
        let runs = Path::new(RUNS);
        if !runs.is_dir() {
            return Err(AttachError::NoLiveRun {
                dir: std::env::current_dir().unwrap_or_default().join(RUNS),
                ended: " (no runs directory here: cd to where the run was started)".into(),
            });
        }
        return newest_live(runs);
    };
    let meta = std::fs::metadata(p).map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => denied(p),
        _ => AttachError::NotFound(p.to_path_buf()),
    })?;
    // the run itself, not what a link names now (`runs/NAME/latest` moves to the next run of
    // that name: `r` must reconnect to this one); only the link given is followed, so the
    // socket's path stays as short as the server bound it
    let resolved = match std::fs::read_link(p) {
        Ok(target) => p.parent().unwrap_or(Path::new("")).join(target),
        Err(_) => p.to_path_buf(),
    };
    let p = resolved.as_path();
    let parent = || {
        p.parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf()
    };
    if meta.file_type().is_socket() {
        return Ok(Target {
            socket: p.to_path_buf(),
            run: parent(),
        });
    }
    if meta.is_dir() {
        if let Err(e) = std::fs::read_dir(p) {
            return Err(match e.kind() {
                std::io::ErrorKind::PermissionDenied => denied(p),
                _ => AttachError::Io {
                    path: p.to_path_buf(),
                    source: e,
                },
            });
        }
        if let Some(socket) = socket_in(p) {
            return Ok(Target {
                socket,
                run: p.to_path_buf(),
            });
        }
        if p.join(FILE_NAME).is_file() {
            return Err(super::client::not_live(&p.join(SOCKET_NAME), p));
        }
        // a directory of runs (runs/, runs/NAME): its newest live one
        return newest_live(p);
    }
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name.ends_with(".path") {
        if let Some(text) = read_note(p, rundir::POINTER_MAX) {
            let socket = PathBuf::from(text);
            if is_socket(&socket) {
                return Ok(Target {
                    socket,
                    run: parent(),
                });
            }
        }
    }
    if name.ends_with(".jsonl") {
        return Err(AttachError::MetricsFile(p.to_path_buf()));
    }
    Err(AttachError::NotSocket(p.to_path_buf()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn a_run_directory_a_socket_and_a_directory_of_runs_each_find_the_socket() {
        let d = tempfile::tempdir().unwrap();
        let old = d.path().join("runs/a/20260101-000000");
        let new = d.path().join("runs/a/20260102-000000");
        let dead = d.path().join("runs/b/20260103-000000");
        for r in [&old, &new, &dead] {
            std::fs::create_dir_all(r).unwrap();
        }
        let _l1 = UnixListener::bind(old.join(SOCKET_NAME)).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let _l2 = UnixListener::bind(new.join(SOCKET_NAME)).unwrap();
        // a run that ended: its metrics file, no socket
        std::fs::write(dead.join(FILE_NAME), "").unwrap();
        let t = locate(Some(&new)).unwrap();
        assert_eq!(t.socket, new.join(SOCKET_NAME));
        assert_eq!(locate(Some(&new.join(SOCKET_NAME))).unwrap().run, new);
        assert_eq!(locate(Some(&d.path().join("runs"))).unwrap().run, new);
        // the newer run ended (a terminal UI on its summary serves it still): the one training
        std::fs::write(
            new.join(FILE_NAME),
            "{\"type\":\"run\"}\n{\"type\":\"end\"}\n",
        )
        .unwrap();
        assert_eq!(locate(Some(&d.path().join("runs"))).unwrap().run, old);
        std::fs::write(old.join(FILE_NAME), "{\"type\":\"end\"}\n").unwrap();
        assert_eq!(locate(Some(&d.path().join("runs"))).unwrap().run, new);
        std::fs::write(new.join(FILE_NAME), "").unwrap();
        // through `latest`: the run it names now, kept when the link moves on to another run
        let latest = d.path().join("runs/a/latest");
        std::os::unix::fs::symlink("20260102-000000", &latest).unwrap();
        let t = locate(Some(&latest)).unwrap();
        assert_eq!(t.run, new);
        assert_eq!(t.socket, t.run.join(SOCKET_NAME));
        // (its metrics file empty: nothing `view` could show; a run's own is named: tests/live.rs)
        match locate(Some(&dead)) {
            Err(e @ AttachError::NotLive { .. }) => {
                assert!(
                    e.to_string()
                        .contains("holds no metrics file `view` can read"),
                    "{e}"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn what_is_no_run_says_so() {
        let d = tempfile::tempdir().unwrap();
        let missing = d.path().join("nope");
        assert!(matches!(
            locate(Some(&missing)),
            Err(AttachError::NotFound(_))
        ));
        let f = d.path().join("notes.txt");
        std::fs::write(&f, "x").unwrap();
        assert!(matches!(locate(Some(&f)), Err(AttachError::NotSocket(_))));
        let m = d.path().join("m.jsonl");
        std::fs::write(&m, "x").unwrap();
        assert!(matches!(locate(Some(&m)), Err(AttachError::MetricsFile(_))));
        let empty = d.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        assert!(matches!(
            locate(Some(&empty)),
            Err(AttachError::NoLiveRun { .. })
        ));
    }

    #[test]
    fn a_pointer_file_leads_to_the_socket_elsewhere() {
        let d = tempfile::tempdir().unwrap();
        let run = d.path().join("run");
        std::fs::create_dir(&run).unwrap();
        let elsewhere = d.path().join("s.sock");
        let _l = UnixListener::bind(&elsewhere).unwrap();
        std::fs::write(
            rundir::pointer_of(&run.join(SOCKET_NAME)),
            format!("{}\n", elsewhere.display()),
        )
        .unwrap();
        assert_eq!(locate(Some(&run)).unwrap().socket, elsewhere);
    }
}
