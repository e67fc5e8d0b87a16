//! Run directories: every run writes into one directory, `runs/<name>/<YYYYmmdd-HHMMSS>/` by
//! default (`--run-dir` to choose), holding `metrics.jsonl`, `checkpoints/` and the live socket;
//! `runs/<name>/latest` points at the newest. And what `--resume PATH` means: a checkpoint
//! (`step-N/`), a run directory (its newest checkpoint), a checkpoint directory (its newest, when
//! all its checkpoints are of one run), or a directory of runs (when it holds exactly one).

use std::fs;
use std::path::{Path, PathBuf};

use super::checkpoint;

mod created;
mod metrics_file;
mod resume_point;

pub use created::{Created, Kept};
pub use metrics_file::{end_record, end_status, open_metrics, tail_lines};
pub use resume_point::{checkpoint_for, continuing, resume_arg, resume_point, Purpose};

/// Where runs go unless `--run-dir` says otherwise.
pub const RUNS: &str = "runs";
/// The metrics file every run writes into its directory.
pub const METRICS: &str = "metrics.jsonl";
pub const CHECKPOINTS: &str = "checkpoints";
/// The live socket a running run serves itself on (`observe::live`).
pub const SOCKET: &str = "live.sock";
/// Where `--tensorboard` without a folder writes a run's event files (`observe::tensorboard`).
pub const TENSORBOARD: &str = "tensorboard";
/// The link to the newest run of a name.
pub const LATEST: &str = "latest";
/// The most a `live.sock.path` note may hold (a path).
pub const POINTER_MAX: u64 = 4096;

/// `runs/<name>/<now>` under `root`, made unique with `-2`, `-3`... should a run of that name
/// have started in the same second.
pub fn default_dir(root: &Path, name: &str) -> PathBuf {
    let parent = root.join(RUNS).join(file_name_of(name));
    let stamp = local_stamp();
    let mut dir = parent.join(&stamp);
    let mut n = 2;
    while dir.exists() {
        dir = parent.join(format!("{stamp}-{n}"));
        n += 1;
    }
    dir
}

/// `path` with the links of its existing part followed (absolute, where it has one; as given
/// where it has none): a checkpoint directory given through `runs/NAME/latest` stays in the run
/// the link names as the command starts, not the one it names once this run's start has moved it.
pub fn followed(path: &Path) -> PathBuf {
    if !path.ancestors().any(Path::is_symlink) {
        return path.to_path_buf();
    }
    let full = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut rest = Vec::new();
    let mut at = full.as_path();
    loop {
        if let Ok(real) = at.canonicalize() {
            return rest.iter().rev().fold(real, |p, name| p.join(name));
        }
        match (at.parent(), at.file_name()) {
            (Some(up), Some(name)) => {
                rest.push(name.to_os_string());
                at = up;
            }
            _ => return full,
        }
    }
}

/// The order default run directories were started in: by their stamp, then by the number
/// that makes one unique within its second (`-2` after none, `-10` after `-9`).
fn started_order(leaf: &str) -> (&str, u32) {
    let numbered = leaf.rsplit_once('-').and_then(|(stamp, n)| {
        let n = n.parse().ok().filter(|_| stamp.len() == 15)?;
        Some((stamp, n))
    });
    numbered.unwrap_or((leaf, 1))
}

/// A run name as one safe path component: letters, digits, `.`, `-`, `_`; others become `_`.
pub fn file_name_of(name: &str) -> String {
    let s: String = name
        .chars()
        .take(100)
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    match s.trim_start_matches('.') {
        "" => "run".to_string(),
        t => t.to_string(),
    }
}

/// The local time as `YYYYmmdd-HHMMSS`.
fn local_stamp() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as libc::time_t;
    // SAFETY: localtime_r only writes the `tm` it is given.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = !unsafe { libc::localtime_r(&now, &mut tm) }.is_null();
    if !ok {
        return format!("t{now}");
    }
    format!(
        "{:04}{:02}{:02}-{:02}{:02}{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

/// Refuses a run directory that already holds a run (its metrics file); for a run that
/// resumes one (`resuming`), saying that it writes a directory of its own.
pub fn unused(dir: &Path, resuming: bool) -> Result<(), String> {
    let d = dir.display();
    // (a checkpoint goes whole: --keep-checkpoints, a newer run of its line, a user's rm)
    let full = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    if let Some(ck) = full.ancestors().find(|a| checkpoint::is_checkpoint(a)) {
        return Err(format!(
            "--run-dir {d} is inside checkpoint {}, which is removed or replaced whole (--keep-checkpoints, --checkpoint-best): give a folder of its own",
            ck.display()
        ));
    }
    // (a checkpoint directory, a live run's or another's: `--resume` of it would take this
    // run's files for its checkpoints' run, and continue this one)
    let held = checkpoint::holder(dir).map(|pid| format!("run {pid} writes its checkpoints there"));
    let kept = (checkpoint::steps(dir).pop())
        .map(|(_, ck)| ck)
        .or_else(|| Some(dir.join(checkpoint::BEST)).filter(|b| checkpoint::is_checkpoint(b)))
        .map(|ck| format!("it holds checkpoint {}", ck.display()));
    if let Some(why) = held.or(kept) {
        return Err(format!(
            "--run-dir {d} is a checkpoint directory ({why}): a run directory is one run's own; give a new folder"
        ));
    }
    // (a folder of runs, `runs` itself: this run's files would stand for all of them to
    // `runs`, `view` and `--resume` of the folder)
    if let Some(inner) = (!dir.join(METRICS).exists())
        // (any run there: found, not read or ordered)
        .then(|| walk(dir).0.into_iter().next())
        .flatten()
    {
        return Err(format!(
            "--run-dir {d} holds other runs' directories ({} ...): a run directory is one run's own; give a new folder, e.g. --run-dir {}",
            inner.display(),
            dir.join("NAME").display()
        ));
    }
    match (dir.join(METRICS).exists(), resuming) {
        (false, _) => Ok(()),
        (true, _) if is_live(dir) => Err(format!(
            "run directory {d} holds a run that is running now: pick a new --run-dir (watch that one with: mgtop-train attach {d})"
        )),
        (true, false) => Err(format!(
            "run directory {d} already holds a run: pick a new --run-dir, or --resume {d} to continue it"
        )),
        (true, true) => Err(format!(
            "run directory {d} already holds a run, and a resumed run writes a directory of its own: leave out --run-dir (a new one is made under runs/), or pick a new one"
        )),
    }
}

/// The run `dir/latest` names (`runs/NAME`: the one of that name started last), where it is
/// a run directory.
pub fn latest_in(dir: &Path) -> Option<PathBuf> {
    let run = dir.join(fs::read_link(dir.join(LATEST)).ok()?);
    is_run_dir(&run).then_some(run)
}

/// Points `<parent>/latest` at `dir`: a new link beside the old, renamed over it, so `latest`
/// is never missing; left where it points at a run started later that is starting or running
/// (runs started together finish starting in any order; a stamp from before the clock went
/// back, a finished run's, is passed). A `latest` that is not a link (a file or folder put
/// there) is left as it is, said in the note returned.
fn link_latest_to(dir: &Path) -> Option<String> {
    let (Some(parent), Some(leaf)) = (dir.parent(), dir.file_name()) else {
        return None;
    };
    let latest = parent.join(LATEST);
    if fs::symlink_metadata(&latest).is_ok_and(|m| !m.file_type().is_symlink()) {
        return Some(format!(
            "{} is not the link to the newest run this program keeps there (a file or folder of that name): left as it is, not pointed at this run",
            latest.display()
        ));
    }
    let later = |n: &Path| n.to_str().map(started_order) > leaf.to_str().map(started_order);
    let recent = |d: &Path| {
        let age = fs::metadata(d)
            .and_then(|m| m.modified())
            .map(|t| t.elapsed());
        age.is_ok_and(|a| a.is_ok_and(|a| a.as_secs() < 60))
    };
    if let Ok(now) = fs::read_link(parent.join(LATEST)) {
        let theirs = parent.join(&now);
        if theirs.is_dir() && later(&now) && (recent(&theirs) || is_live(&theirs)) {
            return None;
        }
    }
    let tmp = parent.join(format!(".{LATEST}.{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    #[cfg(unix)]
    let linked =
        std::os::unix::fs::symlink(leaf, &tmp).and_then(|_| fs::rename(&tmp, parent.join(LATEST)));
    #[cfg(not(unix))]
    let linked: std::io::Result<()> = Ok(());
    if linked.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    None
}

/// Whether `name` is one a run directory's own files and folders take (what a file written
/// into one, an export, must not be named).
pub fn own_name(name: &std::ffi::OsStr) -> bool {
    let pointer = pointer_of(Path::new(SOCKET));
    [METRICS, SOCKET, CHECKPOINTS, TENSORBOARD]
        .iter()
        .any(|n| name == std::ffi::OsStr::new(n))
        || name == pointer.as_os_str()
}

/// The pointer file of a socket asked for at `socket` (`live.sock.path`: where the socket went
/// when its path was too long for a Unix socket).
pub fn pointer_of(socket: &Path) -> PathBuf {
    let mut p = socket.as_os_str().to_owned();
    p.push(".path");
    PathBuf::from(p)
}

/// The socket of run directory `dir`: `live.sock`, or where `live.sock.path` points.
pub fn socket_in(dir: &Path) -> Option<PathBuf> {
    let s = dir.join(SOCKET);
    if fs::symlink_metadata(&s).is_ok() {
        return Some(s);
    }
    crate::files::read::read_note(&pointer_of(&s), POINTER_MAX).map(PathBuf::from)
}

/// Whether run `dir`'s process is still running: it holds its checkpoint lock, or its live
/// socket answers.
pub fn is_live(dir: &Path) -> bool {
    checkpoint::holder(&dir.join(CHECKPOINTS)).is_some()
        || socket_in(dir).is_some_and(|s| crate::observe::live::socket::listened(&s))
}

/// The process of run `dir` where it runs on this machine and is suspended (Ctrl-Z in its
/// terminal, `kill -STOP`): it holds its socket and its lock but neither trains nor answers.
pub fn suspended(dir: &Path) -> Option<u32> {
    checkpoint::holder(&dir.join(CHECKPOINTS)).filter(|&pid| crate::pids::stopped(pid))
}

/// How to wake the suspended process `pid`, for a message.
pub fn wake_hint(pid: u32) -> String {
    format!("the run's process (pid {pid}) is suspended (Ctrl-Z in its terminal, or kill -STOP): `fg` in that terminal, or `kill -CONT {pid}`, resumes it")
}

/// Whether a run directory's run ended without a word: not live (`is_live`), where its first
/// process ran on this machine (`host`, as its `run` record names it); else also its metrics
/// file unchanged for a minute (a live run writes its telemetry there every
/// `--sample-interval`, so one on another machine sharing this filesystem is not taken for
/// killed).
pub fn is_gone(dir: &Path, host: Option<&str>) -> bool {
    liveness(dir, host) == Some(false)
}

/// Run `dir` is running (`Some(true)`, `is_live`), gone (`Some(false)`, `is_gone`), or cannot
/// be told yet (another machine's, quiet only a short while).
pub fn liveness(dir: &Path, host: Option<&str>) -> Option<bool> {
    match is_live(dir) {
        true => Some(true),
        false => gone_if_not_live(dir, host).then_some(false),
    }
}

/// Whether run `dir`, known not live (`is_live`), is gone: its first process ran on this
/// machine (`host`), or its metrics file has been unchanged for a minute.
pub fn gone_if_not_live(dir: &Path, host: Option<&str>) -> bool {
    const QUIET: std::time::Duration = std::time::Duration::from_secs(60);
    // (`?`: a machine that could not tell its name is no machine in particular)
    let here = host.is_some_and(|h| h != "?" && h == crate::pids::hostname());
    // (a metrics file that cannot be read is not known to be quiet)
    let quiet = || {
        let t = updated(dir);
        t != std::time::UNIX_EPOCH && t.elapsed().is_ok_and(|e| e > QUIET)
    };
    here || quiet()
}

/// When run `dir`'s metrics file last changed (the epoch where it cannot be told).
pub fn updated(dir: &Path) -> std::time::SystemTime {
    fs::metadata(dir.join(METRICS))
        .and_then(|m| m.modified())
        .unwrap_or(std::time::UNIX_EPOCH)
}

/// Whether `dir` is a run's directory (its metrics file there in any form: one that cannot be
/// read is its run's state, `unreadable`).
pub fn is_run_dir(dir: &Path) -> bool {
    fs::symlink_metadata(dir.join(METRICS)).is_ok()
        || fs::symlink_metadata(dir.join(SOCKET)).is_ok()
}

/// The run directory whose checkpoints `dir` is (`RUN/checkpoints`) or holds one of
/// (`RUN/checkpoints/step-N`), where it is a run directory.
pub fn run_of_checkpoints(dir: &Path) -> Option<&Path> {
    let named = |d: &Path| d.file_name().is_some_and(|n| n == CHECKPOINTS);
    let run = match named(dir) {
        true => dir.parent(),
        false => dir.parent().filter(|p| named(p)).and_then(Path::parent),
    };
    run.filter(|r| !r.as_os_str().is_empty() && is_run_dir(r))
}

/// The run directory that run directory `dir` was copied from: the one its file records
/// (`recorded`), another run directory than `dir` whose run started when this one's did (asked
/// of a copy without an end record: one made while its run ran, whose run goes on, or went on,
/// in the original; a directory moved away, whose place a later run took, is no copy of it).
pub fn copy_of(dir: &Path, recorded: Option<&Path>) -> Option<PathBuf> {
    let recorded = recorded?;
    let other = recorded.exists() && !crate::files::same_path(dir, recorded);
    let same_run = || started(dir).is_some_and(|t| started(recorded) == Some(t));
    (other && is_run_dir(recorded) && same_run()).then(|| recorded.to_path_buf())
}

/// The run directory whose run wrote metrics file `path`: the one it is in, or the one its
/// `run` record names (`recorded`: a `--metrics-out` file, or a copy on the same machine),
/// where that is one; whether the run still runs is asked there.
pub fn of_metrics(path: &Path, recorded: Option<&Path>) -> Option<PathBuf> {
    let own = path.parent().filter(|d| is_run_dir(d));
    (own.or(recorded.filter(|d| is_run_dir(d)))).map(Path::to_path_buf)
}

/// The directories in `d` (none where it cannot be read); links are not followed.
pub fn children(d: &Path) -> Vec<PathBuf> {
    fs::read_dir(d)
        .map(|es| {
            es.filter_map(|e| e.ok())
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Run directories at most two levels under `dir` (`runs/<name>/<time>` from `runs`), or three
/// through its `runs` (from the folder runs were started in), the one started last first (so
/// two live runs writing in turn keep their places), with their metrics file's last change.
/// `latest` links are not followed.
pub fn runs_under(dir: &Path) -> Vec<(PathBuf, std::time::SystemTime)> {
    runs_and_closed(dir).0
}

/// `runs_under`, and how many folders where it looks for runs this user may not read
/// (another user's run directories: mode 0700).
pub fn runs_and_closed(dir: &Path) -> (Vec<(PathBuf, std::time::SystemTime)>, usize) {
    let (found, closed) = walk(dir);
    let mut runs: Vec<_> = (found.into_iter())
        .map(|p| {
            let t = updated(&p);
            let at = started(&p).unwrap_or(t);
            (p, t, at)
        })
        .collect();
    // (runs started together, or copies of one: the one written last first)
    runs.sort_by(|a, b| (b.2, b.1, &b.0).cmp(&(a.2, a.1, &a.0)));
    (runs.into_iter().map(|(p, t, _)| (p, t)).collect(), closed)
}

/// The run directories where `runs_under` looks, and how many folders there it could not read.
fn walk(dir: &Path) -> (Vec<PathBuf>, usize) {
    let closed =
        |d: &Path| fs::read_dir(d).is_err_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied);
    let (mut found, mut shut) = (Vec::new(), 0);
    for c in children(dir) {
        if is_run_dir(&c) {
            found.push(c);
            continue;
        }
        if closed(&c) {
            shut += 1;
            continue;
        }
        let runs = c.file_name() == Some(RUNS.as_ref());
        for g in children(&c) {
            if is_run_dir(&g) {
                found.push(g);
            } else if closed(&g) {
                shut += 1;
            } else if runs {
                // (the folder runs were started in: its ./runs/NAME/TIME too)
                for r in children(&g) {
                    if is_run_dir(&r) {
                        found.push(r);
                    } else if closed(&r) {
                        shut += 1;
                    }
                }
            }
        }
    }
    (found, shut)
}

/// Run `dir`'s metrics file's first record (its `run` record, a few KiB), as JSON.
fn run_record(dir: &Path) -> Option<serde_json::Value> {
    use std::io::{BufRead, Read};
    let mut first = Vec::new();
    (std::io::BufReader::new(open_metrics(&dir.join(METRICS))?).take(1 << 20))
        .read_until(b'\n', &mut first)
        .ok()?;
    serde_json::from_slice(&first).ok()
}

/// When run `dir` started, as its metrics file's first record says (`started_unix`).
fn started(dir: &Path) -> Option<std::time::SystemTime> {
    let secs = run_record(dir)?.get("started_unix")?.as_f64()?;
    let since = std::time::Duration::try_from_secs_f64(secs).ok()?;
    Some(std::time::UNIX_EPOCH + since)
}

#[cfg(test)]
mod tests;
