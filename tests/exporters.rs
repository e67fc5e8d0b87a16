//! The run where teams already look: the Prometheus endpoint scraped while a run trains
//! (checked by promtool where it is installed, and by reading values back), hostile clients
//! that must not stall it, and TensorBoard's event files read back by the `tensorboard`
//! package and compared with the metrics file. promtool and tensorboard are installed by
//! .ci/run; elsewhere what needs them is skipped (loudly), unless MGTOP_REQUIRE_PROMTOOL=1 /
//! MGTOP_REQUIRE_TENSORBOARD=1.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cli::{run_in, signal, spawn_in, text};
use serde_json::Value;

/// A request and the whole answer (empty where the server closed or reset the connection).
fn http(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(request);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn scrape(addr: SocketAddr) -> String {
    let answer = http(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(
        answer.contains("Content-Type: text/plain; version=0.0.4"),
        "{answer}"
    );
    answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap()
}

/// The value of the series written exactly as `series` (name and labels).
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// `promtool check metrics` accepts the text, where promtool is installed.
fn promtool_accepts(text: &str) {
    let Ok(mut child) = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    else {
        assert!(
            std::env::var_os("MGTOP_REQUIRE_PROMTOOL").is_none(),
            "MGTOP_REQUIRE_PROMTOOL is set but promtool is missing: apt install prometheus"
        );
        common::skipped("promtool check: promtool is not installed (apt install prometheus)");
        return;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "promtool: {}\n{text}",
        common::cli::text(&o)
    );
}

/// A long CPU run serving Prometheus on a port the system chooses; its address, and its log
/// lines as they come.
fn serving(dir: &Path) -> (Child, SocketAddr, Arc<Mutex<Vec<String>>>) {
    let mut child = spawn_in(
        dir,
        &[
            "--headless",
            "--devices",
            "cpu:2",
            "--data",
            "synthetic:20000,64,10",
            "--steps",
            "100000000",
            "--log-every",
            "20",
            "--prometheus",
            "127.0.0.1:0",
        ],
    );
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("a start-up line").unwrap();
        if let Some(rest) = line.strip_prefix("prometheus: http://") {
            break rest.trim_end_matches("/metrics").parse().unwrap();
        }
    };
    let log = Arc::new(Mutex::new(Vec::new()));
    let keep = log.clone();
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            keep.lock().unwrap().push(l);
        }
    });
    (child, addr, log)
}

/// Step lines logged so far.
fn step_lines(log: &Mutex<Vec<String>>) -> usize {
    log.lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("samples/s"))
        .count()
}

#[test]
fn a_training_run_is_scraped_live_and_hostile_clients_never_stall_it() {
    let dir = tempfile::tempdir().unwrap();
    let (child, addr, log) = serving(dir.path());
    assert!(addr.ip().is_loopback(), "{addr}: loopback unless told");
    // the run moves between two scrapes, and every rank's step time is counted by part
    let start = Instant::now();
    let mut first = scrape(addr);
    while value(&first, "mgtop_step").unwrap_or(0.0) < 1.0 {
        assert!(start.elapsed() < Duration::from_secs(60), "{first}");
        std::thread::sleep(Duration::from_millis(100));
        first = scrape(addr);
    }
    std::thread::sleep(Duration::from_millis(1500));
    let second = scrape(addr);
    let (a, b) = (
        value(&first, "mgtop_step").unwrap(),
        value(&second, "mgtop_step").unwrap(),
    );
    assert!(b > a, "step {a} then {b}");
    for series in [
        r#"mgtop_step_time_seconds_total{part="compute",rank="1",worker="cpu1"}"#,
        r#"mgtop_device_utilization_ratio{rank="0",worker="cpu0"}"#,
        r#"mgtop_loader_busy_seconds_total{rank="1",worker="cpu1"}"#,
        r#"mgtop_run_state{state="running"}"#,
        "mgtop_samples_per_second",
        "mgtop_learning_rate",
        "mgtop_grad_norm",
    ] {
        assert!(value(&second, series).is_some(), "no {series}:\n{second}");
    }
    assert!(
        second.contains(r#"mgtop_run_info{data="synthetic"#),
        "{second}"
    );
    promtool_accepts(&second);

    // HEAD: the same head, no body (what uptime checks send)
    let a = http(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n");
    let (head, body) = a.split_once("\r\n\r\n").expect("a whole head");
    assert!(head.starts_with("HTTP/1.1 200") && body.is_empty(), "{a}");
    let length: usize = (head.lines())
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|n| n.parse().ok())
        .expect("a length");
    assert!(length > 1000, "{head}");

    // only GET /metrics
    let a = http(addr, b"GET / HTTP/1.1\r\n\r\n");
    assert!(a.starts_with("HTTP/1.1 404"), "{a}");
    let a = http(addr, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert!(
        a.starts_with("HTTP/1.1 405") && a.contains("Allow: GET"),
        "{a}"
    );
    let a = http(
        addr,
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
    );
    assert!(a.starts_with("HTTP/1.1 400"), "{a}");
    // binary bytes with no end of head: answered at once, not after the 5 s deadline
    let t = Instant::now();
    let a = http(addr, b"\x16\x03\x01\x02\x00\x01\x00");
    assert!(a.starts_with("HTTP/1.1 400"), "{a}");
    assert!(t.elapsed() < Duration::from_secs(3), "waited for more");
    // a huge head: 431, or the connection closed
    let mut huge = b"GET /metrics HTTP/1.1\r\nX-Big: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 64 * 1024));
    huge.extend_from_slice(b"\r\n\r\n");
    let a = http(addr, &huge);
    assert!(a.is_empty() || a.starts_with("HTTP/1.1 431"), "{a}");
    // just past the 8 KiB the README states, arriving whole
    let mut over = b"GET /metrics HTTP/1.1\r\nX-Big: ".to_vec();
    over.extend(std::iter::repeat_n(b'a', 9000 - over.len() - 4));
    over.extend_from_slice(b"\r\n\r\n");
    let a = http(addr, &over);
    assert!(a.starts_with("HTTP/1.1 431"), "{a}");

    // slowloris: every connection slot held by a head that never ends
    let open = || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nX-Slow: ").unwrap();
        s
    };
    let mut slow: Vec<TcpStream> = (0..8).map(|_| open()).collect();
    let held = Instant::now();
    let lines_before = step_lines(&log);
    // (where an earlier connection's thread had not yet given its slot back, one of them got a
    // 503 and holds none: another takes its place)
    let busy = loop {
        let busy = http(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        if busy.starts_with("HTTP/1.1 503") || slow.len() >= 12 {
            break busy;
        }
        slow.push(open());
    };
    assert!(busy.starts_with("HTTP/1.1 503"), "{busy}");
    assert!(held.elapsed() < Duration::from_secs(2), "503 at once");
    // each is closed once its time to send the head is up, having been sent nothing (or a 503,
    // where an earlier connection's thread had not yet given its slot back)
    for mut s in slow {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        let got = String::from_utf8_lossy(&got);
        assert!(got.is_empty() || got.starts_with("HTTP/1.1 503"), "{got}");
    }
    assert!(
        held.elapsed() < Duration::from_secs(9),
        "{:?}",
        held.elapsed()
    );
    // training went on meanwhile, and the endpoint serves again
    assert!(
        step_lines(&log) > lines_before,
        "no step was logged while the slots were held"
    );
    assert!(value(&scrape(addr), "mgtop_step").unwrap() > b);

    signal(&child, "TERM");
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    // the endpoint went with the run
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err());
}

#[test]
fn a_port_in_use_or_a_folder_that_cannot_be_made_is_refused_before_the_run_starts() {
    let dir = tempfile::tempdir().unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    // (the port after it taken too, where it can be: not suggested)
    let next = TcpListener::bind(("127.0.0.1", port.wrapping_add(1))).ok();
    let o = run_in(
        dir.path(),
        &[
            "--headless",
            "--steps",
            "5",
            "--prometheus",
            &port.to_string(),
        ],
    );
    drop(next);
    let out = text(&o);
    assert!(!o.status.success(), "{out}");
    assert!(
        out.contains(&format!("127.0.0.1:{port} is already in use")),
        "{out}"
    );
    let suggested: u16 = (out.split("e.g. --prometheus ").nth(1))
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no port suggested: {out}"));
    assert!(
        u32::from(suggested) > u32::from(port) + 1 || suggested == 0,
        "{out}"
    );
    assert!(!dir.path().join("runs").exists(), "nothing started: {out}");
    std::fs::write(dir.path().join("file"), "").unwrap();
    let o = run_in(
        dir.path(),
        &["--headless", "--steps", "5", "--tensorboard", "file/tb"],
    );
    let out = text(&o);
    assert!(
        !o.status.success()
            && out
                .contains("file is not a directory; give a writable directory: --tensorboard DIR"),
        "{out}"
    );
    assert!(!dir.path().join("runs").exists(), "nothing started: {out}");
    // a folder no one may write in, root included: refused before the run makes its directory
    let o = run_in(
        dir.path(),
        &["--headless", "--steps", "5", "--tensorboard", "/proc/tb"],
    );
    let out = text(&o);
    assert!(
        !o.status.success() && out.contains("--tensorboard /proc/tb: cannot make a file in /proc"),
        "{out}"
    );
    assert!(!dir.path().join("runs").exists(), "nothing started: {out}");
    for bad in ["nine", "127.0.0.1:99999", "no.such.host.invalid:9400"] {
        let o = run_in(
            dir.path(),
            &["--headless", "--steps", "5", "--prometheus", bad],
        );
        let out = text(&o);
        assert!(
            !o.status.success() && out.contains("--prometheus 9400"),
            "{bad}: {out}"
        );
    }
}

/// Every scalar of an event file as (tag, step, wall time, value), read by TensorBoard's own
/// loader; `None` where the package is missing (the test is then skipped).
fn tensorboard_scalars(file: &Path) -> Option<Vec<(String, u64, f64, f64)>> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tb_scalars.py");
    let probe = Command::new("python3")
        .args(["-c", "import tensorboard"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        assert!(
            std::env::var_os("MGTOP_REQUIRE_TENSORBOARD").is_none(),
            "MGTOP_REQUIRE_TENSORBOARD is set but python3 cannot import tensorboard: pip install tensorboard"
        );
        common::skipped("python3 cannot import tensorboard (pip install tensorboard)");
        return None;
    }
    let o = Command::new("python3")
        .arg(&script)
        .arg(file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let v: Vec<(String, u64, f64, f64)> = serde_json::from_slice(&o.stdout).unwrap();
    Some(v)
}

/// Every file and folder under `dir` (none where it does not exist).
fn walkdir_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut all = Vec::new();
    for e in entries {
        let p = e.unwrap().path();
        all.extend(walkdir_files(&p));
        all.push(p);
    }
    all
}

fn event_file(dir: &Path) -> std::path::PathBuf {
    let files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("tfevents"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

/// The one scalar with this tag at this step.
fn at(scalars: &[(String, u64, f64, f64)], tag: &str, step: u64) -> (f64, f64) {
    let found: Vec<_> = scalars
        .iter()
        .filter(|s| s.0 == tag && s.1 == step)
        .collect();
    assert_eq!(found.len(), 1, "{tag} at step {step}: {found:?}");
    (found[0].2, found[0].3)
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * (1.0 + b.abs())
}

#[test]
fn tensorboard_holds_every_scalar_of_the_metrics_file_and_view_converts_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_in(
        dir.path(),
        &[
            "--headless",
            "--devices",
            "cpu:2",
            "--data",
            "synthetic:3000,16,4",
            "--epochs",
            "3",
            "--log-every",
            "10",
            "--sample-interval",
            "0.05",
            "--run-dir",
            "run",
            "--tensorboard",
        ],
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let run = dir.path().join("run");
    let live = event_file(&run.join("tensorboard"));
    assert!(
        out.contains("tensorboard: "),
        "the start-up says where: {out}"
    );
    let Some(scalars) = tensorboard_scalars(&live) else {
        return;
    };
    let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let records: Vec<Value> = metrics
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let started = records[0]["started_unix"].as_f64().expect("started_unix");
    let (mut steps, mut epochs, mut samples) = (0, 0, 0);
    let mut cut_short = false;
    for r in &records {
        match r["type"].as_str().unwrap() {
            "step" => {
                steps += 1;
                let step = r["step"].as_u64().unwrap();
                let (wall, loss) = at(&scalars, "train/loss", step);
                assert!(close(loss, r["loss"].as_f64().unwrap(), 1e-6), "{r}");
                assert!(close(wall, started + r["t"].as_f64().unwrap(), 1e-9), "{r}");
                let lr = at(&scalars, "train/learning_rate", step).1;
                assert!(close(lr, r["lr"].as_f64().unwrap(), 1e-6));
                let norm = r["grad_norm"].as_f64().expect("a step's gradient norm");
                assert!(norm > 0.0, "{r}");
                assert!(close(at(&scalars, "train/grad_norm", step).1, norm, 1e-6));
                // the batch the run trains at: an epoch's last step, cut short, keeps it
                let batch = at(&scalars, "train/global_batch", step).1;
                let whole = r["per_replica"].as_f64().unwrap() * r["ranks"].as_f64().unwrap();
                assert_eq!(batch, whole, "{r}");
                cut_short |= r["global_batch"].as_f64().unwrap() < whole;
                if let Some(rate) = r["samples_per_s"].as_f64() {
                    assert!(close(
                        at(&scalars, "train/samples_per_s", step).1,
                        rate,
                        1e-6
                    ));
                }
                for rank in r["per_rank"].as_array().unwrap() {
                    let n = rank["rank"].as_u64().unwrap();
                    for part in [
                        "step",
                        "data_wait",
                        "compute",
                        "comm",
                        "sync_wait",
                        "optimizer",
                        "transfer",
                        "loader_busy",
                    ] {
                        let tag = format!("step_time/{part}_ms/rank{n}");
                        let ms = rank[format!("{part}_ms")].as_f64().unwrap();
                        // the file rounds to the microsecond
                        assert!((at(&scalars, &tag, step).1 - ms).abs() < 1.5e-3, "{tag}");
                    }
                }
            }
            "epoch" => {
                epochs += 1;
                let step = r["step"].as_u64().unwrap();
                let vl = at(&scalars, "validation/loss", step).1;
                assert!(close(vl, r["val_loss"].as_f64().unwrap(), 1e-6), "{r}");
                let va = at(&scalars, "validation/accuracy", step).1;
                assert!(close(va, r["val_accuracy"].as_f64().unwrap(), 1e-6), "{r}");
            }
            "telemetry" => samples += 1,
            _ => {}
        }
    }
    assert!(
        steps >= 10 && epochs == 3 && samples >= 1 && cut_short,
        "{steps} {epochs} {samples} {cut_short}"
    );
    let tags = |t: &str| scalars.iter().filter(|s| s.0 == t).count();
    assert_eq!(tags("train/loss"), steps);
    assert_eq!(tags("validation/loss"), epochs);
    // every sample's busy share, in %, in the order sampled
    let util: Vec<f64> = scalars
        .iter()
        .filter(|s| s.0 == "utilization/rank1")
        .map(|s| s.3)
        .collect();
    let want: Vec<f64> = records
        .iter()
        .filter(|r| r["type"] == "telemetry")
        .filter_map(|r| r["devices"][1]["util"].as_f64())
        .map(|u| u * 100.0)
        .collect();
    assert_eq!(util.len(), want.len());
    assert!(util.iter().zip(&want).all(|(a, b)| close(*a, *b, 1e-5)));

    // the metrics file converted afterwards gives the same scalars
    // (under a DIR given, as a run given it writes: DIR/<name>/<run directory's name>)
    let o = run_in(dir.path(), &["view", "run", "--tensorboard", "converted"]);
    assert!(o.status.success(), "{}", text(&o));
    let named: Vec<_> = (std::fs::read_dir(dir.path().join("converted")).unwrap())
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(named.len(), 1, "{named:?}");
    let converted = tensorboard_scalars(&event_file(&named[0].join("run"))).unwrap();
    assert_eq!(converted.len(), scalars.len());
    for (a, b) in converted.iter().zip(&scalars) {
        assert_eq!((&a.0, a.1), (&b.0, b.1));
        assert!(
            (a.3 - b.3).abs() < 1.5e-3 * (1.0 + b.3.abs()),
            "{a:?} {b:?}"
        );
    }
    // nor a second time under that DIR (into a folder numbered apart)
    let o = run_in(dir.path(), &["view", "run", "--tensorboard", "converted"]);
    assert!(
        text(&o).contains("/run already holds this run's TensorBoard events"),
        "{}",
        text(&o)
    );
    assert_eq!(std::fs::read_dir(&named[0]).unwrap().count(), 1);
    // a damaged file converts to nothing, and leaves no folder
    let damaged = dir.path().join("damaged.jsonl");
    let whole = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let mut lines: Vec<&str> = whole.lines().collect();
    lines[3] = "{\"type\": \"step\", cut";
    std::fs::write(&damaged, lines.join("\n")).unwrap();
    let o = run_in(
        dir.path(),
        &["view", "damaged.jsonl", "--tensorboard", "cut"],
    );
    assert!(!o.status.success(), "{}", text(&o));
    let left: Vec<_> = walkdir_files(&dir.path().join("cut"));
    assert!(left.is_empty(), "{left:?}");
    assert!(!dir.path().join("cut").exists(), "the folder made for it");
    // and never into a folder that has events already
    let o = run_in(dir.path(), &["view", "run", "--tensorboard"]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("already holds TensorBoard event files"),
        "{}",
        text(&o)
    );
    assert_eq!(
        std::fs::read_dir(run.join("tensorboard")).unwrap().count(),
        1
    );
}

/// The runs of a sweep given one `--tensorboard DIR` each get a folder of their own under it,
/// named as their run directories are: `tensorboard --logdir DIR` shows them apart (in one
/// folder TensorBoard merged their scalars into one run).
#[test]
fn runs_given_one_tensorboard_dir_stay_apart() {
    let dir = tempfile::tempdir().unwrap();
    // (a run of the sweep into run directory `run`, its events under tb)
    let sweep = |run: &str| {
        let data = ["--data", "synthetic:600,8,3", "--model", "mlp:8"];
        let rest = ["--name", "sweep", "--run-dir", run, "--tensorboard", "tb"];
        let args = [&["--headless", "--steps", "5"][..], &data, &rest].concat();
        run_in(dir.path(), &args)
    };
    for run in ["r1", "r2"] {
        let o = sweep(run);
        assert!(o.status.success(), "{}", text(&o));
        assert!(
            text(&o).contains("(tensorboard --logdir tb)"),
            "{}",
            text(&o)
        );
        event_file(&dir.path().join("tb/sweep").join(run));
    }
    // a run whose run directory ends as another's (a/r1 beside r1) gets a folder of its own
    let o = sweep("a/r1");
    assert!(text(&o).contains("tb/sweep/r1-2/events."), "{}", text(&o));
    event_file(&dir.path().join("tb/sweep/r1-2"));
    let first = std::fs::read_dir(dir.path().join("tb/sweep/r1")).unwrap();
    assert_eq!(
        first.count(),
        1,
        "the first run's folder holds its events alone"
    );
    // metrics files from before the run record named its run directory: each converted into a
    // folder named as its file, not all into DIR (where the second would be refused)
    let metrics = std::fs::read_to_string(dir.path().join("r1/metrics.jsonl")).unwrap();
    let (first, rest) = metrics.split_once('\n').unwrap();
    let mut record: Value = serde_json::from_str(first).unwrap();
    record.as_object_mut().unwrap().remove("run_dir").unwrap();
    for old in ["old1", "old2"] {
        let file = dir.path().join(format!("{old}.jsonl"));
        std::fs::write(&file, format!("{record}\n{rest}")).unwrap();
        let o = run_in(
            dir.path(),
            &["view", file.to_str().unwrap(), "--tensorboard", "tb2"],
        );
        assert!(o.status.success(), "{}", text(&o));
        event_file(&dir.path().join("tb2/sweep").join(old));
    }
}
