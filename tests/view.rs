//! `view`: a metrics file read back into the UI's state. The App built from a real run's file
//! shows what the App fed live showed; damaged, oversized and foreign files are refused with
//! the file and the line; a file still being written is read as it grows; `view --headless`
//! prints the summary.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crossbeam_channel::unbounded;
use mgtop::config::log_every::LogEvery;
use mgtop::config::{Budget, DeviceSpec, RunConfig};
use mgtop::engine::Engine;
use mgtop::front::tui::app::{App, RunState};
use mgtop::front::tui::replay::read_all;
use mgtop::front::tui::theme::Theme;
use mgtop::front::tui::{drive, TuiOptions};
use mgtop::observe::metrics::{MetricsReader, MetricsWriter, ReadError, Record};
use mgtop::observe::Recorder;
use ratatui::backend::TestBackend;
use ratatui::Terminal;

use common::cli::{bin, run_limited};

/// A 2-rank digits run of 3 epochs watched live by the UI (a test terminal), every step
/// recorded in `dir/run.jsonl`; returns the App as the UI last showed it.
fn live_run(dir: &Path) -> (App, PathBuf) {
    let path = dir.join("run.jsonl");
    let cfg = RunConfig {
        devices: DeviceSpec::Cpu(2),
        budget: Budget::Epochs(3),
        log_every: LogEvery::Steps(1),
        checkpoint_dir: dir.join("ck"),
        clip_grad_norm: Some(0.5),
        val_every: Some(10),
        checkpoint_best: true,
        schedule: mgtop::nn::schedule::Schedule::Cosine,
        warmup: 5,
        ..RunConfig::default()
    };
    let engine = Engine::start(cfg).unwrap();
    let opts = TuiOptions {
        theme: Theme::choose(None, false).unwrap(),
        readonly: false,
        exit_when_done: true,
        sample_interval: Duration::from_millis(20),
        notes: Vec::new(),
    };
    let mut terminal = Terminal::new(TestBackend::new(100, 30)).unwrap();
    let (_keys, inputs) = unbounded();
    let (_sig, signals) = unbounded();
    let writer = MetricsWriter::create(&path).unwrap();
    let recorder = Recorder::new(vec![writer], None, LogEvery::Steps(1));
    let end = drive(&mut terminal, engine, &opts, inputs, signals, recorder);
    end.result.unwrap();
    (end.app, path)
}

fn replay(path: &Path) -> App {
    let mut reader = MetricsReader::open(path).unwrap();
    let mut app = App::watching(reader.info().clone());
    read_all(&mut reader, &mut app).unwrap();
    app
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * a.abs().max(b.abs()).max(1e-9)
}

#[test]
fn the_app_built_from_the_file_shows_what_the_live_app_showed() {
    let dir = tempfile::tempdir().unwrap();
    let (live, path) = live_run(dir.path());
    let seen = replay(&path);

    assert_eq!(seen.info.name, live.info.name);
    assert_eq!(seen.info.model, live.info.model);
    assert_eq!(seen.info.budget, live.info.budget);
    assert_eq!(seen.info.ranks(), 2);
    assert_eq!(seen.info.per_replica, live.info.per_replica);
    let (a, b) = (
        seen.last_row.as_ref().unwrap(),
        live.last_row.as_ref().unwrap(),
    );
    assert_eq!((a.step, a.epoch, a.loss), (b.step, b.epoch, b.loss));
    assert_eq!(a.step, 69, "3 epochs of 1438 samples at 64 a step");
    assert!(close(a.progress, 1.0, 1e-9), "{}", a.progress);
    // the whole loss history, raw and smoothed, and every epoch's validation
    assert_eq!(seen.loss.all(), live.loss.all());
    assert_eq!(seen.loss_smooth.all(), live.loss_smooth.all());
    // the LR's schedule (the loss above followed it)
    assert_eq!(
        (seen.info.schedule, seen.info.warmup),
        (mgtop::nn::schedule::Schedule::Cosine, 5)
    );
    // the gradient's norm per step, and how many steps the bound clipped
    assert_eq!(seen.info.clip_grad_norm, Some(0.5));
    assert_eq!(seen.grad_norm.all(), live.grad_norm.all());
    assert_eq!(seen.grad_norm.all().len(), 69);
    assert_eq!(seen.clipped, live.clipped);
    assert!(
        seen.clipped.1 > 0 && seen.clipped.1 < 69,
        "{:?}",
        seen.clipped
    );
    assert_eq!(seen.epochs, live.epochs);
    assert_eq!(seen.epochs.len(), 3);
    assert_eq!(seen.val_accuracy(), live.val_accuracy());
    // each epoch's validation and --val-every's 6 within them (none falls on an epoch's end)
    assert_eq!(seen.validations, live.validations);
    assert_eq!(seen.validations.len(), 9);
    assert_eq!(seen.best_checkpoint, live.best_checkpoint);
    assert!(seen.best_checkpoint.is_some());
    assert_eq!(seen.last_checkpoint, live.last_checkpoint);
    assert!(seen.last_checkpoint.is_some());
    // the summary: steps, how it ended, throughput (times are kept to the microsecond)
    assert_eq!(seen.state, RunState::Done);
    let (s, l) = (seen.summary.clone().unwrap(), live.summary.clone().unwrap());
    assert_eq!(
        (s.steps, s.ending, &s.failed, s.best_val_accuracy),
        (l.steps, l.ending, &l.failed, l.best_val_accuracy)
    );
    let (rs, rl) = (
        s.mean_samples_per_sec.unwrap(),
        l.mean_samples_per_sec.unwrap(),
    );
    assert!(close(rs, rl, 1e-2), "samples/s {rs} vs {rl}");
    // a digits step takes tens of microseconds, so the file's microsecond rounding of each
    // rank's compute, optimizer and step time moves the share by up to about a percent
    let (cs, cl) = (s.time_shares.unwrap()[0], l.time_shares.unwrap()[0]);
    assert!((cs - cl).abs() <= 0.03, "compute share {cs} vs {cl}");
    assert!((s.wall.as_secs_f64() - l.wall.as_secs_f64()).abs() < 0.5);
    // each device's recent step times and its busy share
    for (d, e) in seen.devices.iter().zip(&live.devices) {
        assert_eq!(d.label, e.label);
        let (x, y): (Vec<f64>, Vec<f64>) = (d.step_ms().collect(), e.step_ms().collect());
        assert_eq!(x.len(), y.len());
        assert!(
            x.iter().zip(&y).all(|(x, y)| (x - y).abs() < 2e-3),
            "{x:?} vs {y:?}"
        );
        assert_eq!(d.sample.util.is_some(), e.sample.util.is_some());
    }
    // the epoch and checkpoint lines of the events panel
    let text = |app: &App| -> Vec<String> { app.log.iter().map(|l| l.text.clone()).collect() };
    assert_eq!(text(&seen), text(&live));
}

/// The file's lines, with `edit` applied, written to `name` in `dir`.
fn edited(src: &Path, dir: &Path, name: &str, edit: impl FnOnce(&mut Vec<String>)) -> PathBuf {
    let mut lines: Vec<String> = std::fs::read_to_string(src)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    edit(&mut lines);
    let out = dir.join(name);
    std::fs::write(&out, lines.join("\n") + "\n").unwrap();
    out
}

fn read_err(path: &Path) -> String {
    let r = MetricsReader::open(path).and_then(|mut r| {
        let mut app = App::watching(r.info().clone());
        read_all(&mut r, &mut app)
    });
    match r {
        Err(e) => e.to_string(),
        Ok(()) => panic!("{} was read without an error", path.display()),
    }
}

#[test]
fn damaged_oversized_and_foreign_files_are_refused_naming_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let (_, run) = live_run(dir.path());
    let d = dir.path();

    let p = edited(&run, d, "garbage.jsonl", |l| {
        l[4] = "{\"type\":\"step\",".into()
    });
    let e = read_err(&p);
    assert!(e.contains("garbage.jsonl: line 5: not JSON"), "{e}");

    // the second step record (events such as the replica check sit between them)
    let text = std::fs::read_to_string(&run).unwrap();
    let second = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains("\"type\":\"step\""))
        .nth(1)
        .map(|(i, _)| i)
        .unwrap();
    let p = edited(&run, d, "field.jsonl", |l| {
        l[second] = l[second].replace("\"per_rank\"", "\"per_rnak\"")
    });
    let e = read_err(&p);
    assert!(
        e.contains(&format!("field.jsonl: line {}:", second + 1)) && e.contains("`per_rank`"),
        "{e}"
    );

    let p = edited(&run, d, "norm.jsonl", |l| {
        let at = l[second].find("\"grad_norm\":").unwrap() + 12;
        l[second].insert(at, '-');
    });
    let e = read_err(&p);
    assert!(
        e.contains(&format!("norm.jsonl: line {}:", second + 1)) && e.contains("`grad_norm` -"),
        "{e}"
    );

    let p = edited(&run, d, "long.jsonl", |l| l[3] = "x".repeat(3 << 20));
    let e = read_err(&p);
    assert!(e.contains("long.jsonl: line 4: longer than 1 MiB"), "{e}");

    let p = edited(&run, d, "v2.jsonl", |l| {
        l[0] = l[0].replace("mgtop.metrics/1", "mgtop.metrics/2")
    });
    let e = read_err(&p);
    assert!(
        e.contains("v2.jsonl: line 1: schema \"mgtop.metrics/2\"")
            && e.contains("reads mgtop.metrics/1"),
        "{e}"
    );

    let p = edited(&run, d, "headless.jsonl", |l| {
        l.remove(0);
    });
    let e = read_err(&p);
    assert!(e.contains("line 1: not a `run` record"), "{e}");

    let p = d.join("empty.jsonl");
    std::fs::write(&p, "").unwrap();
    assert!(read_err(&p).contains("empty.jsonl: empty"));
    let e = read_err(&d.join("missing.jsonl"));
    assert!(
        e.contains("cannot read metrics file") && e.contains("missing.jsonl"),
        "{e}"
    );

    // a huge line with no newline at all is refused without reading it all into memory
    let p = d.join("endless.jsonl");
    let mut f = std::fs::File::create(&p).unwrap();
    for _ in 0..64 {
        f.write_all(&[b'{'; 1 << 16]).unwrap();
    }
    drop(f);
    assert!(read_err(&p).contains("line 1: longer than 1 MiB"));

    // what follows the run's end (an editor's leftovers, a second copy) is left unread, and
    // said where it starts, rather than refusing a whole run
    let mut lines = 0;
    let p = edited(&run, d, "after-end.jsonl", |l| {
        l.extend(["garbage".into(), "{\"type\":\"step\",".into()]);
        lines = l.len();
    });
    let mut r = MetricsReader::open(&p).unwrap();
    let mut app = App::watching(r.info().clone());
    read_all(&mut r, &mut app).unwrap();
    assert!(app.summary.is_some());
    assert_eq!(r.past_end(), Some(lines as u64 - 1));
    // a line too long to read after the end is no refusal either
    let p = edited(&run, d, "long-after-end.jsonl", |l| {
        l.push("x".repeat(3 << 20))
    });
    let mut r = MetricsReader::open(&p).unwrap();
    let mut app = App::watching(r.info().clone());
    read_all(&mut r, &mut app).unwrap();
    assert!(app.summary.is_some() && r.past_end().is_some());
    // (a whole file has none)
    let mut r = MetricsReader::open(&run).unwrap();
    let mut app = App::watching(r.info().clone());
    read_all(&mut r, &mut app).unwrap();
    assert_eq!(r.past_end(), None);

    // a gone writer's last line without its newline: read, where a record; where cut off
    // mid-record (killed while writing it), where the file stops, not damage
    let text = std::fs::read_to_string(&run).unwrap();
    let whole = text.trim_end();
    let tail = d.join("no-newline.jsonl");
    std::fs::write(&tail, whole).unwrap();
    let mut r = MetricsReader::open(&tail).unwrap();
    let mut app = App::watching(r.info().clone());
    read_all(&mut r, &mut app).unwrap();
    assert!(app.summary.is_none(), "its last line waits for its newline");
    r.writer_gone();
    read_all(&mut r, &mut app).unwrap();
    assert!(app.summary.is_some() && r.cut_off().is_none());
    let torn = d.join("torn.jsonl");
    std::fs::write(&torn, &whole[..whole.len() - 10]).unwrap();
    let mut r = MetricsReader::open(&torn).unwrap();
    let mut app = App::watching(r.info().clone());
    r.writer_gone();
    read_all(&mut r, &mut app).unwrap();
    assert!(app.summary.is_none());
    assert_eq!(r.cut_off(), Some(whole.lines().count() as u64));

    // a record type this version does not know is skipped (newer writers may add some)
    let p = edited(&run, d, "newer.jsonl", |l| {
        l.insert(3, "{\"type\":\"future\",\"t\":1}".into())
    });
    assert_eq!(replay(&p).last_row.unwrap().step, 69);
}

#[test]
fn a_file_still_being_written_is_read_as_it_grows() {
    let dir = tempfile::tempdir().unwrap();
    let (_, run) = live_run(dir.path());
    let text = std::fs::read_to_string(&run).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let growing = dir.path().join("growing.jsonl");
    let mut f = std::fs::File::create(&growing).unwrap();
    // the run record, two records and half of the third (a writer mid-line)
    let half = lines[3].len() / 2;
    write!(
        f,
        "{}\n{}\n{}\n{}",
        lines[0],
        lines[1],
        lines[2],
        &lines[3][..half]
    )
    .unwrap();
    f.flush().unwrap();

    let mut r = MetricsReader::open(&growing).unwrap();
    let mut got = Vec::new();
    while let Some(rec) = r.next().unwrap() {
        got.push(rec);
    }
    assert_eq!(got.len(), 2, "the incomplete line waits");
    assert!(r.next().unwrap().is_none());
    writeln!(f, "{}", &lines[3][half..]).unwrap();
    for l in &lines[4..] {
        writeln!(f, "{l}").unwrap();
    }
    f.flush().unwrap();
    let mut app = App::watching(r.info().clone());
    let mut ended = false;
    while let Some(rec) = r.next().unwrap() {
        ended |= matches!(
            rec,
            Record::Event {
                event: mgtop::engine::events::Event::Finished { .. },
                ..
            }
        );
        app.apply_record(rec);
    }
    assert!(ended);
    assert_eq!(app.last_row.unwrap().step, 69);

    // a new run overwriting the file is noticed
    std::fs::write(&growing, "").unwrap();
    assert!(matches!(r.next(), Err(ReadError::File { .. })));
}

/// A copy of a file without its end record, outside any run directory: running while it
/// grows, then said to have no end (not RUNNING for ever, its rate and ETA gone).
#[test]
fn a_copy_without_an_end_that_stops_growing_is_said_to_have_none() {
    use mgtop::front::tui::app::Silent;
    use mgtop::front::tui::replay::FileSource;
    use mgtop::front::tui::source::Source;
    let dir = tempfile::tempdir().unwrap();
    let (_, run) = live_run(dir.path());
    let cut = edited(&run, dir.path(), "cut.jsonl", |l| {
        l.pop();
    });
    let reader = MetricsReader::open(&cut).unwrap();
    let mut app = App::watching(reader.info().clone());
    let mut source = FileSource::new(reader).quiet_after(Duration::from_millis(300));
    assert!(source.on_timer(&mut app), "records read");
    assert_eq!((app.state, app.silent), (RunState::Running, None));
    assert!(app.heard_running());
    std::thread::sleep(Duration::from_millis(400));
    assert!(source.on_timer(&mut app), "the change is drawn");
    assert_eq!(app.silent, Some(Silent::NoEnd));
    assert!(!app.heard_running());
    // it grows again: heard again
    let mut f = std::fs::OpenOptions::new().append(true).open(&cut).unwrap();
    let text = std::fs::read_to_string(&run).unwrap();
    writeln!(f, "{}", text.lines().last().unwrap()).unwrap();
    assert!(source.on_timer(&mut app));
    assert_eq!(app.silent, None);
    assert!(app.state.ended());
}

#[test]
fn view_headless_prints_a_real_runs_summary_and_errors_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = bin()
        .current_dir(d)
        .args(["--headless", "--devices", "cpu:2", "--epochs", "3"])
        .args(["--metrics-out", "run.jsonl"])
        .output()
        .unwrap();
    assert!(run.status.success());
    std::fs::create_dir(d.join("rundir")).unwrap();
    std::fs::copy(d.join("run.jsonl"), d.join("rundir/metrics.jsonl")).unwrap();
    // (a directory of runs: its newest)
    for path in ["run.jsonl", "rundir", "runs"] {
        let o = bin()
            .current_dir(d)
            .args(["view", path, "--headless"])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{out}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "run: digits-mlp:128", "{out}");
        assert!(
            lines[1].starts_with("finished: 69 steps in ")
                && lines[1].contains(" s | best val accuracy ")
                && lines[1].contains(" samples/s of training | ranks' time: compute ")
                && lines[1].ends_with("%"),
            "{out}"
        );
        assert!(
            // (the metrics file names checkpoints by absolute paths)
            lines[2].starts_with("checkpoint: /")
                && lines[2].contains("/runs/digits-mlp_128/")
                && lines[2].ends_with("/checkpoints/step-00000069"),
            "{out}"
        );
        // how it learned: each epoch's validation, the best marked
        assert_eq!(lines[3], "validations:", "{out}");
        let steps: Vec<&str> = (lines[5..8].iter())
            .map(|l| l.split_whitespace().next().unwrap())
            .collect();
        assert_eq!(steps, ["23", "46", "69"], "{out}");
        assert!(lines[7].contains(" 3.00 "), "{out}");
        assert_eq!(
            lines[5..8]
                .iter()
                .filter(|l| l.ends_with("%  best"))
                .count(),
            1,
            "{out}"
        );
    }
    // the checkpoint `view DIR --headless` names is under DIR
    let named_under = |dir: &str| {
        let o = bin()
            .current_dir(d)
            .args(["view", dir, "--headless"])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let line = out
            .lines()
            .find(|l| l.starts_with("checkpoint: "))
            .unwrap_or_default();
        assert!(
            line.contains(&format!("/{dir}/digits-mlp_128/"))
                && line.ends_with("/checkpoints/step-00000069"),
            "{out}"
        );
    };
    // a run directory moved since: its checkpoint where it is now
    std::fs::rename(d.join("runs"), d.join("moved")).unwrap();
    named_under("moved");
    std::fs::rename(d.join("moved"), d.join("runs")).unwrap();
    // a copy beside the original: its own checkpoint, not the original's
    let copied = std::process::Command::new("cp")
        .args(["-r", "runs", "copy"])
        .current_dir(d)
        .status()
        .unwrap();
    assert!(copied.success());
    named_under("copy");
    // `--tensorboard=false` as the training flag reads it: no conversion (and no folder `false`)
    let o = bin()
        .current_dir(d)
        .args(["view", "run.jsonl", "--headless", "--tensorboard=false"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.starts_with("run: digits-mlp:128"),
        "{out}"
    );
    assert!(!d.join("false").exists(), "{out}");
    std::fs::write(d.join("notes.txt"), "hello\n").unwrap();
    std::fs::create_dir(d.join("empty")).unwrap();
    for (path, says) in [
        (
            "missing.jsonl",
            "error: cannot read metrics file missing.jsonl: ",
        ),
        (
            "notes.txt",
            "error: notes.txt: line 1: not JSON: not a metrics file",
        ),
        ("empty", "error: empty: a directory without a metrics.jsonl"),
    ] {
        let o = bin().current_dir(d).args(["view", path]).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with(says), "{err}");
    }
}

/// `view --headless path` in `dir` (see `run_limited`).
fn view_headless(dir: &Path, path: &Path) -> (Option<i32>, String) {
    run_limited(dir, &["view", "--headless", path.to_str().unwrap()])
}

#[test]
fn hostile_metrics_files_neither_panic_nor_hang_nor_drive_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_, src) = live_run(d);
    // a clock that goes backwards
    let back = edited(&src, d, "back.jsonl", |lines| {
        let last = lines
            .iter()
            .rposition(|l| l.contains(r#""type":"step""#))
            .unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&lines[last]).unwrap();
        v["t"] = serde_json::json!(0.0);
        lines[last] = v.to_string();
    });
    let (code, out) = view_headless(d, &back);
    assert!(code == Some(0) && !out.contains("panicked"), "{out}");
    // a name that would retitle and clear the terminal
    let esc = edited(&src, d, "esc.jsonl", |lines| {
        let mut v: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        v["name"] = serde_json::json!("x\u{1b}]0;PWNED\u{7}\u{1b}[2J");
        lines[0] = v.to_string();
    });
    let (code, out) = view_headless(d, &esc);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        !out.contains('\u{1b}') && out.contains(r"run: x\u{1b}]0;PWNED\u{7}"),
        "{out}"
    );
    // a FIFO in a metrics file's place: refused, not waited on
    let fifo = d.join("fifo.jsonl");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string; mkfifo only creates the node
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let (code, out) = view_headless(d, &fifo);
    assert!(code == Some(1) && out.contains("a FIFO"), "{out}");
}

/// `view --headless` of a run directory without an end record says whether its run still runs
/// or was killed (it used to say "still running, or killed" either way).
#[test]
fn a_killed_run_is_said_killed_and_a_live_one_running() {
    let d = tempfile::tempdir().unwrap();
    let mut run =
        common::run::Run::start(d.path(), &["--steps", "1000000", "--checkpoint-every", "5"]);
    run.wait_log("two checkpoints", |l| l.contains("checkpoint at step 10"));
    let view = |what: &str| {
        let (code, out) = run_limited(d.path(), &["view", "--headless", "run"]);
        assert_eq!(code, Some(0), "{what}: {out}");
        out
    };
    let out = view("live");
    assert!(out.contains("still running"), "{out}");
    // a copy of its directory made while it runs is no run: its lock file names the live
    // process, which holds the original's lock, not the copy's
    let copy = d.path().join("copy");
    std::fs::create_dir_all(copy.join("checkpoints")).unwrap();
    for f in ["metrics.jsonl", "checkpoints/.lock"] {
        std::fs::copy(d.path().join("run").join(f), copy.join(f)).unwrap();
    }
    let (code, out) = run_limited(d.path(), &["view", "--headless", "copy"]);
    let original = d.path().join("run").canonicalize().unwrap();
    assert!(
        code == Some(0)
            && out.contains(&format!(
                "a copy of run directory {}, whose run still runs: mgtop-train view {0}",
                original.display()
            ))
            && !out.contains("it was killed")
            && !out.contains("resume with"),
        "{out}"
    );
    let (_, out) = run_limited(d.path(), &["runs", "."]);
    let state = |dir: &str| {
        let words = out
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>());
        let row = words
            .into_iter()
            .find(|w| w.first().is_some_and(|p| p.ends_with(dir)));
        row.and_then(|w| w.get(1).map(|s| s.to_string()))
    };
    assert_eq!(
        (state("/run").as_deref(), state("/copy").as_deref()),
        (Some("live"), Some("copy")),
        "{out}"
    );
    run.child.kill().unwrap();
    run.wait_exit();
    // the copy, once its run has ended, is still a copy: not itself killed
    let (code, out) = run_limited(d.path(), &["view", "--headless", "copy"]);
    assert!(
        code == Some(0)
            && out.contains("no end recorded in this copy")
            && out.contains(&format!(
                "a copy of run directory {}, where its run went on",
                original.display()
            ))
            && !out.contains("it was killed"),
        "{out}"
    );
    let (_, out) = run_limited(d.path(), &["runs", "."]);
    assert!(
        out.lines()
            .any(|l| l.contains("/copy ") && l.contains(" copy ")),
        "{out}"
    );
    // a run of this machine that is not running was killed, whenever it last wrote
    let out = view("just killed");
    assert!(
        out.contains("the run is not running: it was killed"),
        "{out}"
    );
    // and how to go on from its newest checkpoint: its run directory (a kill can come between
    // a checkpoint and its record: below)
    let run_dir = d.path().join("run").canonicalize().unwrap();
    assert!(
        out.contains("its newest checkpoint")
            && out.contains(&format!("resume with: --resume {}\n", run_dir.display())),
        "{out}"
    );
    // killed between its newest checkpoint and the record of it (or copied while it ran): the
    // one --resume takes is named, not the file's last
    let metrics = d.path().join("run/metrics.jsonl");
    let text = std::fs::read_to_string(&metrics).unwrap();
    let mut kept: Vec<&str> = text.lines().collect();
    let last = (kept.iter())
        .rposition(|l| l.contains(r#""kind":"checkpoint""#))
        .unwrap();
    kept.remove(last);
    std::fs::write(&metrics, kept.join("\n") + "\n").unwrap();
    let newest = (std::fs::read_dir(run_dir.join("checkpoints")).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("state.json").is_file())
        .max()
        .unwrap();
    let out = view("killed before its last record");
    assert!(
        out.contains(&format!(
            "its newest checkpoint: {} (newer than the last its file records, of step ",
            newest.display()
        )) && out.contains(&format!("resume with: --resume {}\n", run_dir.display())),
        "{out}"
    );
    // one of another machine sharing this folder could be running there, until a minute
    // without a word
    let text = std::fs::read_to_string(&metrics).unwrap();
    let (first, rest) = text.split_once('\n').unwrap();
    let mut run_record: serde_json::Value = serde_json::from_str(first).unwrap();
    run_record["host"] = "another-machine".into();
    std::fs::write(&metrics, format!("{run_record}\n{rest}")).unwrap();
    let out = view("just killed elsewhere");
    assert!(out.contains("still running, or killed"), "{out}");
    let touched = std::process::Command::new("touch")
        .args(["-d", "2 minutes ago"])
        .arg(&metrics)
        .status()
        .unwrap();
    assert!(touched.success());
    let out = view("killed");
    assert!(
        out.contains("the run is not running: it was killed"),
        "{out}"
    );
    // its checkpoints gone: the one recorded named as not there (it said nothing)
    std::fs::remove_dir_all(run_dir.join("checkpoints")).unwrap();
    let out = view("killed, its checkpoints removed");
    assert!(
        out.contains("is not there now (moved or removed?), nor any other of the run")
            && !out.contains("resume with"),
        "{out}"
    );
}

/// A stopped run's summary gives where its time went and how to go on, as its own last lines did.
#[test]
fn a_stopped_run_s_summary_says_how_to_resume_it() {
    let d = tempfile::tempdir().unwrap();
    let run = common::run::Run::start(d.path(), &["--steps", "1000000"]);
    run.wait_log("a step line", |l| l.contains("] step "));
    common::cli::signal(&run.child, "TERM");
    let mut run = run;
    run.wait_exit();
    let (code, out) = run_limited(d.path(), &["view", "--headless", "run"]);
    assert_eq!(code, Some(0), "{out}");
    let run_dir = d.path().join("run").canonicalize().unwrap();
    assert!(
        out.contains("\nstopped at step ") || out.contains("\nstopped: "),
        "{out}"
    );
    assert!(out.contains("| ranks' time: compute "), "{out}");
    assert!(
        out.ends_with(&format!("resume with: --resume {}\n", run_dir.display())),
        "{out}"
    );
    // its checkpoints moved away: the one its summary names is said not to be there now
    let named = (out.lines())
        .find_map(|l| l.strip_prefix("checkpoint: "))
        .unwrap()
        .to_string();
    std::fs::rename(run_dir.join("checkpoints"), d.path().join("moved")).unwrap();
    let (code, out) = run_limited(d.path(), &["view", "--headless", "run"]);
    assert!(
        code == Some(0)
            && out.contains(&format!(
                "its checkpoint {named} is not there now: moved or removed since"
            ))
            && !out.contains("resume with"),
        "{out}"
    );
}

/// A run stopped without a checkpoint after an earlier one: `view` says, as the run's own last
/// line did, which steps a resume from that checkpoint leaves out.
#[test]
fn a_run_stopped_past_its_checkpoint_says_the_steps_a_resume_leaves_out() {
    let d = tempfile::tempdir().unwrap();
    let mut run = common::run::Run::start(d.path(), &["--steps", "1000000"]);
    let mut c = common::run::Client::connect(&run.socket());
    c.until("the live marker", |v| v["type"] == "live");
    let checkpoint = serde_json::json!({});
    assert_eq!(c.control("checkpoint", checkpoint)["ok"], true);
    run.wait_log("the checkpoint", |l| l.contains("checkpoint at step "));
    let saved = c.until("a step", |v| v["type"] == "step")["step"]
        .as_u64()
        .unwrap();
    c.until("a later step", |v| {
        v["type"] == "step" && v["step"].as_u64().unwrap() > saved + 2
    });
    let no_checkpoint = serde_json::json!({"checkpoint": false});
    assert_eq!(c.control("stop", no_checkpoint)["ok"], true);
    assert!(run.wait_exit().success());
    let log = run.log();
    let said = (log.lines())
        .find_map(|l| l.split_once("resume with: --resume "))
        .map(|(_, r)| r.to_string())
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        said.contains(" steps trained after it are not in it)"),
        "{log}"
    );
    let (code, out) = run_limited(d.path(), &["view", "--headless", "run"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.ends_with(&format!("resume with: --resume {said}\n")),
        "{out}\n{log}"
    );
}

/// A run that failed before its first logged step: `view` says how far it got (from the
/// failure) and why, as the live screen did (it said `failed: 0 steps` without the error).
#[test]
fn a_failed_run_s_summary_says_how_far_it_got_and_why() {
    let d = tempfile::tempdir().unwrap();
    let args = [
        "--headless",
        "--devices",
        "cpu:2",
        "--data",
        "synthetic:600,8,3",
        "--model",
        "mlp:8",
        "--steps",
        "100",
        "--inject-panic",
        "0:3",
        "--run-dir",
        "r",
    ];
    let (code, out) = run_limited(d.path(), &args);
    assert_eq!(code, Some(1), "{out}");
    let (code, out) = run_limited(d.path(), &["view", "--headless", "r"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("failed: 2 steps"), "{out}");
    assert!(out.contains("injected fault (--inject-panic 0:3)"), "{out}");
}

#[test]
fn view_of_a_directory_of_runs_opens_the_live_one_as_attach_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = bin()
        .current_dir(d)
        .args(["--headless", "--steps", "5", "--metrics-out", "run.jsonl"])
        .output()
        .unwrap();
    assert!(run.status.success());
    let (live, ended) = (d.join("runs/a/1"), d.join("runs/b/2"));
    for r in [&live, &ended] {
        std::fs::create_dir_all(r).unwrap();
        std::fs::copy(d.join("run.jsonl"), r.join("metrics.jsonl")).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // what `view DIR --headless` says it opened
    let viewed = |dir: &str| {
        let o = bin()
            .current_dir(d)
            .args(["view", dir, "--headless"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{err}");
        err
    };
    // the ended run wrote last; the other still serves its socket
    let _socket = std::os::unix::net::UnixListener::bind(live.join("live.sock")).unwrap();
    let err = viewed("runs");
    assert!(err.contains("the newest run under runs: runs/a/1"), "{err}");
    drop(_socket);
    std::fs::remove_file(live.join("live.sock")).unwrap();
    let err = viewed("runs");
    assert!(err.contains("the newest run under runs: runs/b/2"), "{err}");
    // runs/NAME: the run its `latest` names (started last), not the one that wrote last
    let older = d.join("runs/b/1");
    std::fs::create_dir_all(&older).unwrap();
    std::fs::copy(d.join("run.jsonl"), older.join("metrics.jsonl")).unwrap();
    std::os::unix::fs::symlink("2", d.join("runs/b/latest")).unwrap();
    let err = viewed("runs/b");
    assert!(
        err.contains("the newest run under runs/b: runs/b/2"),
        "{err}"
    );
}

#[test]
fn view_of_a_resumed_run_says_where_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for args in [
        &["--steps", "10", "--run-dir", "a"][..],
        &["--steps", "20", "--resume", "a", "--run-dir", "b"][..],
    ] {
        let o = bin()
            .current_dir(d)
            .args(["--headless", "--devices", "cpu:1"])
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let (code, out) = view_headless(d, Path::new("b"));
    assert_eq!(code, Some(0), "{out}");
    // the steps this run trained, not its line's since the first run's start
    assert!(
        out.lines()
            .any(|l| l.starts_with("finished at step 20: 10 steps in ")),
        "{out}"
    );
    assert!(
        out.lines().any(|l| l.starts_with("resumed from /")
            && l.ends_with("/a/checkpoints/step-00000010 at step 10")),
        "{out}"
    );
}

/// A run killed before it wrote any checkpoint: `view` says there is none to resume from (it
/// said nothing of a way on).
#[test]
fn a_run_killed_before_any_checkpoint_is_said_to_have_none() {
    let d = tempfile::tempdir().unwrap();
    let mut run = common::run::Run::start(d.path(), &["--steps", "1000000"]);
    run.wait_log("a step line", |l| l.contains("] step "));
    run.child.kill().unwrap();
    run.wait_exit();
    let (code, out) = run_limited(d.path(), &["view", "--headless", "run"]);
    assert!(
        code == Some(0)
            && out.contains("it was killed")
            && out.contains("no checkpoint to resume it from: it wrote none"),
        "{out}"
    );
}
