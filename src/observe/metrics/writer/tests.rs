use super::*;

#[test]
fn a_claimed_file_refuses_a_second_run_and_goes_where_its_run_did_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.jsonl");
    // made and held: a second run started at once is refused
    let claim = MetricsWriter::preflight(&path).unwrap();
    assert!(path.is_file());
    let e = MetricsWriter::preflight(&path).err().unwrap().to_string();
    assert!(
        e.contains("another run that is still going writes it"),
        "{e}"
    );
    // the run did not start: the file it made is taken back
    drop(claim);
    assert!(!path.exists());
    // a run's earlier file: kept whole until the run starts, then replaced
    std::fs::write(&path, "{\"type\":\"run\"}\n").unwrap();
    drop(MetricsWriter::preflight(&path).unwrap());
    assert_eq!(std::fs::read(&path).unwrap().len(), 15);
    let mut w = MetricsWriter::claimed(MetricsWriter::preflight(&path).unwrap()).unwrap();
    w.write(&Line::new(&serde_json::json!({"type": "x"})))
        .unwrap();
    w.flush().unwrap();
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "{\"type\":\"x\"}\n"
    );
    // (a made file its run started with stays, as the run's record)
    let fresh = dir.path().join("n.jsonl");
    drop(MetricsWriter::claimed(MetricsWriter::preflight(&fresh).unwrap()).unwrap());
    assert!(fresh.is_file());
    // a made file replaced since is not this claim's to remove
    let other = dir.path().join("o.jsonl");
    let claim = MetricsWriter::preflight(&other).unwrap();
    std::fs::remove_file(&other).unwrap();
    std::fs::write(&other, "theirs").unwrap();
    drop(claim);
    assert_eq!(std::fs::read_to_string(&other).unwrap(), "theirs");
}

/// A writer whose next flush looks for its file.
fn looked_for(w: &mut MetricsWriter) -> Option<String> {
    w.looked -= LOOK_EVERY;
    w.write(&Line::new(&serde_json::json!({"type": "x"})))
        .unwrap();
    w.flush().unwrap();
    w.take_warning()
}

#[test]
fn a_failed_write_leaves_whole_records_and_a_later_one_follows_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.jsonl");
    let mut w = MetricsWriter::create(&path).unwrap();
    let rec = |n: u32| Line::new(&serde_json::json!({"type": "x", "n": n}));
    w.write(&rec(1)).unwrap();
    w.flush().unwrap();
    w.write(&rec(2)).unwrap();
    w.write(&rec(3)).unwrap();
    // the disk filled as the buffer went out: record 2 whole, record 3 cut short
    let (two, three) = (rec(2), rec(3));
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(two.as_bytes()).unwrap();
    f.write_all(&three.as_bytes()[..5]).unwrap();
    w.cut_back();
    let whole = [rec(1).as_bytes(), two.as_bytes()].concat();
    assert_eq!(std::fs::read(&path).unwrap(), whole);
    // nothing held back goes out later; the next record follows the last whole one
    w.write(&rec(4)).unwrap();
    w.flush().unwrap();
    drop(w);
    let lines: Vec<serde_json::Value> = (std::fs::read_to_string(&path).unwrap().lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let n: Vec<u64> = lines.iter().map(|v| v["n"].as_u64().unwrap()).collect();
    assert_eq!(n, [1, 2, 4]);
}

#[test]
fn room_is_made_by_whole_records_and_never_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.jsonl");
    let mut w = MetricsWriter::create(&path).unwrap();
    let rec = |n: u32| Line::new(&serde_json::json!({"type": "x", "n": n}));
    for n in 0..10 {
        w.write(&rec(n)).unwrap();
    }
    w.flush().unwrap();
    let one = rec(0).as_bytes().len() as u64;
    // room for two and a bit: three records go
    assert!(w.make_room(2 * one + 1));
    w.write(&rec(99)).unwrap();
    w.flush().unwrap();
    let n: Vec<u64> = (std::fs::read_to_string(&path).unwrap().lines())
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["n"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(n, [0, 1, 2, 3, 4, 5, 6, 99]);
    // more room than the records after the first: all of them go, the first stays (a full
    // disk in a run's first few records: its end record then follows its run record)
    assert!(w.make_room(100 * one));
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
    assert!(!w.make_room(100 * one), "nothing more to give");
    w.write(&rec(7)).unwrap();
    w.flush().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.starts_with(r#"{"n":0"#) && text.lines().count() == 2,
        "{text}"
    );
}

#[test]
fn a_file_removed_while_written_is_told_once_and_one_moved_or_replaced_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.jsonl");
    let mut w = MetricsWriter::create(&path).unwrap();
    assert_eq!(looked_for(&mut w), None);
    // replaced under the same name (a rotation): what is written still lands somewhere
    std::fs::rename(&path, dir.path().join("old.jsonl")).unwrap();
    std::fs::write(&path, "").unwrap();
    assert_eq!(looked_for(&mut w), None);
    std::fs::remove_file(dir.path().join("old.jsonl")).unwrap();
    let said = looked_for(&mut w).unwrap();
    assert!(said.contains("was removed or moved away"), "{said}");
    assert_eq!(looked_for(&mut w), None, "told once");
    // a device is never looked for
    let mut null = MetricsWriter::create(Path::new("/dev/null")).unwrap();
    assert_eq!(looked_for(&mut null), None);
}

/// A FIFO whose reader stalls holds up no write (the records go to a thread of their own); the
/// records it is slow to take reach it whole, in order, once it reads.
#[test]
fn a_fifo_whose_reader_stalls_holds_no_write_up() {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.fifo");
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string; mkfifo only creates the node
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let mut reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .unwrap();
    let mut w = MetricsWriter::create(&path).unwrap();
    // far more than a pipe holds (64 KiB), written and flushed while nothing is read
    let (done_tx, done) = crossbeam_channel::bounded(1);
    let writing = std::thread::spawn(move || {
        for n in 0..20_000u32 {
            w.write(&Line::new(&serde_json::json!({"type": "x", "n": n})))
                .unwrap();
            w.flush().unwrap();
        }
        done_tx.send(()).unwrap();
        w
    });
    let held = done.recv_timeout(std::time::Duration::from_secs(30));
    assert!(held.is_ok(), "the writes waited for the reader");
    let w = writing.join().unwrap();
    // read now: every record, whole and in order (the writer's end waits for them)
    let reading = std::thread::spawn(move || {
        let mut text = String::new();
        loop {
            let mut buf = [0u8; 1 << 16];
            match reader.read(&mut buf) {
                Ok(0) => break text,
                Ok(n) => text.push_str(std::str::from_utf8(&buf[..n]).unwrap()),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(std::time::Duration::from_millis(5))
                }
                Err(e) => panic!("{e}"),
            }
        }
    });
    drop(w);
    let text = reading.join().unwrap();
    let ns: Vec<u64> = (text.lines())
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["n"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(ns, (0..20_000).collect::<Vec<u64>>());
}

/// Cuts the file at `path` to `len` bytes, as another program would under the run.
fn cut_to(path: &std::path::Path, len: u64) {
    (std::fs::OpenOptions::new().write(true).open(path))
        .and_then(|f| f.set_len(len))
        .unwrap()
}

/// A file cut to nothing under its run (logrotate's copytruncate) goes on from the run's
/// record, told once: it began with a hole of zero bytes, and read as no metrics file.
#[test]
fn a_file_cut_short_under_its_run_goes_on_from_the_run_s_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.jsonl");
    let mut w = MetricsWriter::create(&path).unwrap();
    let rec = |t: &str, n: u32| Line::new(&serde_json::json!({"type": t, "n": n}));
    w.write(&rec("run", 0)).unwrap();
    for n in 1..50 {
        w.write(&rec("step", n)).unwrap();
    }
    w.flush().unwrap();
    assert!(w.take_warning().is_none());
    cut_to(&path, 0);
    w.write(&rec("step", 50)).unwrap();
    w.flush().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        text,
        "{\"n\":0,\"type\":\"run\"}\n{\"n\":50,\"type\":\"step\"}\n"
    );
    let said = w.take_warning().unwrap();
    assert!(
        said.contains("was cut short while the run writes it"),
        "{said}"
    );
    assert!(w.take_warning().is_none(), "told once");
    // a failed write after it cuts back to the records written since
    w.write(&rec("step", 51)).unwrap();
    w.cut_back();
    w.write(&rec("step", 52)).unwrap();
    w.flush().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.ends_with("{\"n\":50,\"type\":\"step\"}\n{\"n\":52,\"type\":\"step\"}\n"),
        "{text}"
    );
}

/// A cut the buffer's own write-out would pass over (more than it holds written before the next
/// flush) is found before that write; a cut to some length goes on from its last whole record.
#[test]
fn a_cut_is_found_before_a_full_buffer_goes_out_and_a_partial_cut_keeps_whole_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.jsonl");
    let mut w = MetricsWriter::create(&path).unwrap();
    let pad = "x".repeat(900);
    let rec = |t: &str, n: u32| Line::new(&serde_json::json!({"type": t, "n": n, "pad": pad}));
    w.write(&rec("run", 0)).unwrap();
    for n in 1..20 {
        w.write(&rec("step", n)).unwrap();
    }
    w.flush().unwrap();
    cut_to(&path, 0);
    for n in 20..40 {
        w.write(&rec("step", n)).unwrap();
    }
    w.flush().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains('\0'), "a hole of zeros");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["type"], "run");
    assert_eq!((lines[1]["n"].as_u64(), lines.len()), (Some(20), 21));
    // cut mid-record: back to the record before it
    let len = std::fs::metadata(&path).unwrap().len();
    cut_to(&path, len - 100);
    w.write(&rec("step", 40)).unwrap();
    w.flush().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let ns: Vec<u64> = (text.lines())
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["n"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(ns[ns.len() - 2..], [38, 40]);
}
