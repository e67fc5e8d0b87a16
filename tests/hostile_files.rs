//! The binary against hostile input files: devices, FIFOs, directories, oversized and malformed
//! files each end in one `error: ...` line and exit 1, quickly, without a panic.

mod common;

use std::io::Write;
use std::path::Path;

use common::cli::run_limited;

/// Runs a headless training run with `args` in `dir` (see `run_limited`).
fn run(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let args: Vec<&str> = ["--headless", "--checkpoint-dir", "ck"]
        .iter()
        .chain(args)
        .copied()
        .collect();
    run_limited(dir, &args)
}

/// Exit 1 with a single `error:` line holding every needle.
fn refused(dir: &Path, args: &[&str], needles: &[&str]) {
    let (code, out) = run(dir, args);
    assert_eq!(code, Some(1), "{args:?} should fail with 1: {out}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines.len() == 1 && lines[0].starts_with("error: "),
        "{args:?}: not one error line: {out}"
    );
    assert!(out.len() < 500, "{args:?}: {} bytes of message", out.len());
    for n in needles {
        assert!(out.contains(n), "{args:?}: `{n}` missing from: {out}");
    }
}

fn idx(kind: u8, dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut v = vec![0, 0, kind, dims.len() as u8];
    for d in dims {
        v.extend_from_slice(&d.to_be_bytes());
    }
    v.extend_from_slice(data);
    v
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

#[test]
fn devices_fifos_and_directories_are_refused_by_every_flag_that_reads_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fifo = d.join("pipe");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let not_regular = ", not a regular file;";
    refused(
        d,
        &["--data", "csv:/dev/zero"],
        &["/dev/zero: a character device", not_regular, "--data needs"],
    );
    refused(
        d,
        &["--config", "/dev/zero"],
        &["config file /dev/zero: a character device", not_regular],
    );
    refused(
        d,
        &["--theme", "/dev/zero"],
        &["theme `/dev/zero`: a character device", not_regular],
    );
    refused(
        d,
        &["--data", "idx:/dev/zero,/dev/zero"],
        &["/dev/zero: a character device", "an IDX file"],
    );
    for args in [&["--data", "csv:pipe"][..], &["--theme", "pipe"]] {
        refused(d, args, &["pipe", "a FIFO (named pipe)", not_regular]);
    }
    // (a config file may come through a pipe: one that no process writes is said at once)
    refused(
        d,
        &["--config", "pipe"],
        &["config file pipe: a FIFO (named pipe) with nothing written to it"],
    );
    refused(d, &["--data", "csv:."], &["a directory", not_regular]);
    refused(d, &["--config", "."], &["a directory", not_regular]);
}

#[test]
fn oversized_settings_files_are_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::File::create(d.join("big.toml"))
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    refused(
        d,
        &["--config", "big.toml"],
        &["more than the 1 MiB mgtop-train reads as a config file"],
    );
    refused(
        d,
        &["--theme", "big.toml"],
        &["more than the 1 MiB mgtop-train reads as a theme file"],
    );
}

#[test]
fn hostile_idx_headers_and_a_gzip_bomb_get_one_line_each() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("labels"), idx(0x08, &[2], &[0, 1])).unwrap();
    let mut bomb = idx(0x08, &[2, 2], &[0; 4]);
    bomb.resize(256 << 20, 0);
    std::fs::write(d.join("bomb.gz"), gzip(&bomb)).unwrap();
    refused(
        d,
        &["--data", "idx:bomb.gz,labels"],
        &[
            "bomb.gz: decompresses to more than its header declares (16 bytes)",
            "not an IDX file, or corrupt",
        ],
    );
    std::fs::write(d.join("zero"), idx(0x08, &[2, 0, 28], &[])).unwrap();
    refused(
        d,
        &["--data", "idx:zero,labels"],
        &["zero: header", "dimension 1 is 0"],
    );
    std::fs::write(d.join("wraps"), idx(0x0D, &[1 << 31; 4], &[])).unwrap();
    refused(
        d,
        &["--data", "idx:wraps,labels"],
        &["wraps: header", "more than 64-bit sizes count"],
    );
    std::fs::write(d.join("huge"), idx(0x08, &[u32::MAX, u32::MAX], &[])).unwrap();
    refused(
        d,
        &["--data", "idx:huge,labels"],
        &[
            "huge: header",
            "in memory once loaded (as floats, split), more than this machine's memory",
        ],
    );
    let nan: Vec<u8> = [1.0f32, f32::NAN]
        .iter()
        .flat_map(|v| v.to_be_bytes())
        .collect();
    std::fs::write(d.join("nan"), idx(0x0D, &[2, 1], &nan)).unwrap();
    refused(
        d,
        &["--data", "idx:nan,labels"],
        &["nan: image 1, value 0: NaN is not a finite number"],
    );
}

#[test]
fn hostile_csv_files_get_one_short_line_each() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("wide.csv"), ",".repeat(3 << 20)).unwrap();
    refused(
        d,
        &["--data", "csv:wide.csv"],
        &["wide.csv: line 1 has more than 1048576 fields"],
    );
    let field = "7".repeat(10 << 20);
    std::fs::write(d.join("field.csv"), format!("1,2,0\n1,{field}x,1\n")).unwrap();
    refused(
        d,
        &["--data", "csv:field.csv"],
        &[
            "field.csv: line 2, column 1 (from 0): `7777",
            "…` is not a number",
        ],
    );
    std::fs::write(d.join("cr.csv"), "\r".repeat(1000)).unwrap();
    refused(
        d,
        &["--data", "csv:cr.csv"],
        &["cr.csv: file has no data rows", "1000 carriage return (CR)"],
    );
    std::fs::write(d.join("nan.csv"), "1,2,0\n3,NaN,1\n").unwrap();
    refused(
        d,
        &["--data", "csv:nan.csv"],
        &["nan.csv: line 2, column 1 (from 0): `NaN` is not a finite number"],
    );
    refused(
        d,
        &["--data", "synthetic:1000000000000,1000000,10"],
        &["needs about", "to make and split, more than the "],
    );
}

/// 40 headerless rows of two features and a label of two classes.
fn small_csv() -> String {
    (0..40)
        .map(|i| format!("{},{},{}\n", i % 7, i % 5, i % 2))
        .collect()
}

#[test]
fn a_headerless_csv_with_a_byte_order_mark_trains() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("bom.csv"), format!("\u{feff}{}", small_csv())).unwrap();
    let (code, out) = run(d, &["--data", "csv:bom.csv", "--steps", "2"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("40 samples, 2 features, 2 classes"), "{out}");
}

#[test]
fn an_escape_in_a_data_path_never_reaches_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let name = "e\x1b[2J\x1b]0;PWN\x07.csv";
    std::fs::write(d.join(name), small_csv()).unwrap();
    let spec = format!("csv:{name}");
    let (code, out) = run(d, &["--data", &spec, "--steps", "2"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(!out.contains('\x1b') && !out.contains('\x07'), "{out:?}");
    assert!(out.contains("e\\u{1b}[2J"), "{out}");
    // nor the run's name (from the data's), nor its directory's
    assert!(out.contains("run: e[2J]0;PWN-mlp"), "{out}");
}

#[test]
fn picture_and_weights_flags_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fifo = d.join("pipe");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let pipe = fifo.to_str().unwrap();
    refused(
        d,
        &["--init", "/dev/zero"],
        &["--init", "not a regular file"],
    );
    refused(d, &["--init", pipe], &["not a regular file"]);
    refused(d, &["--init", "."], &["a directory"]);
    std::fs::write(
        d.join("w.safetensors"),
        b"\xff\xff\xff\xff\xff\xff\xff\x7fjunk",
    )
    .unwrap();
    refused(
        d,
        &["--init", "w.safetensors"],
        &["--init w.safetensors", "not a whole safetensors file"],
    );
    // a model that cannot take the data's samples, where the spec gives their shape: refused
    // before the data is read (here: is found missing), as a large set takes a minute
    refused(
        d,
        &[
            "--data",
            "cifar10:nowhere",
            "--model",
            "conv8k7,conv8k7,conv8k7,conv8k7,conv8k7,conv8k7,gap",
        ],
        &["on 3x32x32 inputs: layer 6 `conv8k7`: 2x2 input is smaller than the 7x7 window"],
    );
    // where a file's first bytes give it: an IDX images file's header (its labels file cut
    // short, which reading the data would find), a CSV's line 1 (its line 2 unreadable)
    let deep = "conv8k3,pool2,conv8k3,pool2,conv8k3,pool2";
    std::fs::write(d.join("im.idx"), idx(0x08, &[1000, 6, 6], &[0; 36000])).unwrap();
    std::fs::write(d.join("lb.idx"), idx(0x08, &[1000], &[0; 10])).unwrap();
    refused(
        d,
        &["--data", "idx:im.idx,lb.idx", "--model", deep],
        &["on 1x6x6 inputs: layer 3 `conv8k3`"],
    );
    std::fs::write(d.join("t.csv"), "a,b,c,label\n1,2,3,x\n1,2,oops,y\n").unwrap();
    refused(
        d,
        &["--data", "csv:t.csv,header", "--model", deep],
        &["on 3 inputs: layer 1 `conv8k3`: a convolution needs an image"],
    );
    // a header of a million tensors' entries (reading its JSON would take gigabytes): refused
    // from its length
    let mut many = std::fs::File::create(d.join("many.safetensors")).unwrap();
    many.write_all(&(9u64 << 20).to_le_bytes()).unwrap();
    many.set_len(8 + (9 << 20)).unwrap();
    refused(
        d,
        &["--init", "many.safetensors"],
        &[
            "--init many.safetensors: its header is 9 MiB long",
            "right file",
        ],
    );
    refused(
        d,
        &["--augment", "crop:4,rotate"],
        &["--augment", "unknown augmentation `rotate`"],
    );
    refused(
        d,
        &["--normalize", "0.5/0.5"],
        &["--normalize", "1 mean value given"],
    );
    refused(
        d,
        &["--image-size", "0"],
        &["--image-size 0 is out of range"],
    );
    refused(
        d,
        &["--val-split", "1.5"],
        &["--val-split 1.5 is out of range"],
    );
    refused(
        d,
        &["--augment", "flip"],
        &["--augment applies to picture data"],
    );
    refused(
        d,
        &["--freeze", "layer9."],
        &["--freeze `layer9.`", "no parameter's name starts with"],
    );
    refused(
        d,
        &["--freeze", "backbone", "--model", "mlp"],
        &["--freeze backbone: the model `mlp` is its classifier head alone (2 tensors), with no backbone"],
    );
    refused(
        d,
        &["--data", "cifar10:nowhere"],
        &["cifar-10-binary.tar.gz", "tar xzf"],
    );
    refused(
        d,
        &["--data", "images:nowhere"],
        &["nowhere does not exist"],
    );
    refused(d, &["--data", "images:/dev"], &["holds no"]);
    refused(
        d,
        &["--devices", "cpu:256", "--threads-per-worker", "256"],
        &["--devices cpu:256 with --threads-per-worker 256 asks for 65536 threads"],
    );
    // a negative number is a value of its flag, refused with the flag's range
    refused(
        d,
        &["--weight-decay", "-1"],
        &["--weight-decay -1 is invalid"],
    );
    refused(
        d,
        &["--val-split", "-0.1"],
        &["--val-split -0.1 is out of range"],
    );
    std::fs::write(d.join("a-file"), "mine").unwrap();
    refused(
        d,
        &["--run-dir", "a-file"],
        &["--run-dir a-file: it is a file, not a directory"],
    );
    assert_eq!(std::fs::read_to_string(d.join("a-file")).unwrap(), "mine");
    // batch norm over one value per channel is refused (PyTorch refuses it too), over two is not
    let bn = [
        "--model",
        "conv8k8,bn",
        "--data",
        "synthetic-images:20,1,8,8,2",
    ];
    refused(
        d,
        &[&bn[..], &["--batch-per-replica", "1", "--devices", "cpu:1"]].concat(),
        &[
            "batch norm `bn.1` would normalise one value per channel",
            "--batch-per-replica 2",
        ],
    );
    let (code, out) = run(
        d,
        &[
            &bn[..],
            &["--batch-per-replica", "1", "--sync-bn", "--steps", "1"],
        ]
        .into_iter()
        .chain([&["--checkpoint-dir", "bn-ck", "--devices", "cpu:2"][..]])
        .collect::<Vec<_>>()
        .concat(),
    );
    assert_eq!(code, Some(0), "two replicas' values: {out}");
    // a picture model on flat data is told how the data's format says it holds pictures
    std::fs::write(d.join("flat.csv"), "1,2,3,4,0\n4,3,2,1,1\n1,1,1,1,0\n").unwrap();
    refused(
        d,
        &[
            "--model",
            "conv4k2",
            "--data",
            "csv:flat.csv",
            "--val-split",
            "0",
        ],
        &[
            "a convolution needs an image",
            "give their shape: --data csv:PATH,shape=CxHxW",
        ],
    );
    // a file in the way further up is named
    refused(
        d,
        &["--run-dir", "a-file/sub/run"],
        &["cannot create run directory a-file/sub/run: a-file is a file, not a directory"],
    );
    // a spec is quoted by its start, however long (this one was echoed whole: 40 KB)
    let long = format!("mlp:{}", vec!["8"; 20_000].join(","));
    refused(
        d,
        &["--model", &long],
        &["20000 hidden layers; use at most"],
    );
    let layers = format!("{},conv{}", vec!["dense8"; 30].join(","), "9".repeat(3000));
    refused(
        d,
        &["--model", &layers],
        &["layer 31", "must be between 1 and"],
    );
    // command-line mistakes are one line too, clap's tips kept
    refused(
        d,
        &["--step", "3"],
        &[
            "unexpected argument '--step'",
            "(tip: a similar argument exists: '--steps')",
        ],
    );
    refused(
        d,
        &["--loader-threads", "x"],
        &["--loader-threads `x`: use a number of threads per rank or auto"],
    );
    refused(
        d,
        &["--val-data", "csv:nope.csv"],
        &["--val-data: cannot read nope.csv (", "check the path"],
    );
    // a validation file's fixes name --val-data
    std::fs::write(d.join("headed.csv"), "x,y,label\n1,2,0\n").unwrap();
    refused(
        d,
        &["--val-data", "csv:headed.csv"],
        &["`x` is not a number (if line 1 is a header, add ,header to --val-data)"],
    );
    // a learning rate a float32 rounds to 0 would train nothing
    refused(
        d,
        &["--lr", "1e-300"],
        &["--lr 1e-300 is invalid", "from 1.2e-38"],
    );
    // (before this was refused, start-up ran past a minute making 16384 threads)
    refused(
        d,
        &["--devices", "cpu:256", "--loader-threads", "64"],
        &["--devices cpu:256 with --loader-threads 64 asks for 16384 loader threads"],
    );
    refused(
        d,
        &["--export", "nowhere/out.safetensors"],
        &["the folder nowhere does not exist", "mkdir -p nowhere"],
    );
    let (code, out) = run_limited(d, &["export", "nowhere", "out.safetensors"]);
    assert!(
        code == Some(1) && out.contains("no such file or directory"),
        "{out}"
    );
    assert!(!d.join("out.safetensors").exists());
}

#[test]
fn a_config_file_value_out_of_range_is_refused_naming_the_file_and_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("run.toml"),
        "# a sweep's base\nepochs = 2\nbatch-per-replica = 0\nmomentum = 0.5\noptimizer = \"momentum\"\n",
    )
    .unwrap();
    refused(
        d,
        &["--config", "run.toml"],
        &["error: config file run.toml (line 3): --batch-per-replica 0 is out of range"],
    );
    // a flag over the file: the file is not blamed for it
    let (code, out) = run(
        d,
        &[
            "--config",
            "run.toml",
            "--batch-per-replica",
            "8",
            "--optimizer",
            "momentum",
            "--momentum",
            "1.5",
        ],
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.starts_with("error: --momentum 1.5 is out of range"),
        "{out}"
    );
    // (a flag's range is clap's; the file's value is checked as the run starts)
    std::fs::write(d.join("val.toml"), "steps = 5\nval-every = 0\n").unwrap();
    refused(
        d,
        &["--config", "val.toml"],
        &["error: config file val.toml (line 2): --val-every 0 is invalid: use 1 or more steps"],
    );
    // devices and data the file names are its own too
    std::fs::write(
        d.join("dev.toml"),
        "steps = 2\ndevices = \"cpu:1\"\ndata = \"csv:none.csv\"\n",
    )
    .unwrap();
    refused(
        d,
        &["--config", "dev.toml"],
        &["error: config file dev.toml (line 3): --data: cannot read none.csv"],
    );
    // and the outputs and screen it names, refused before the run starts
    for (key, value, said) in [
        (
            "export",
            "\"no/x.safetensors\"",
            "--export no/x.safetensors",
        ),
        ("theme", "\"t.toml\"", "--theme `t.toml`"),
        (
            "metrics-out",
            "\"no/m.jsonl\"",
            "--metrics-out: cannot write",
        ),
    ] {
        std::fs::write(d.join("out.toml"), format!("steps = 2\n{key} = {value}\n")).unwrap();
        let (code, out) = run(d, &["--config", "out.toml", "--headless"]);
        assert_eq!(code, Some(1), "{out}");
        let want = format!("error: config file out.toml (line 2): {said}");
        assert!(out.starts_with(&want), "{want}\n{out}");
    }
}
