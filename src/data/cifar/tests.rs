use super::*;

/// A CIFAR-10 record: label, then red, green, blue planes of `(r, g, b)` with pixel 0's red
/// set to `first`.
fn record(label: u8, rgb: [u8; 3], first: u8) -> Vec<u8> {
    let mut r = vec![label];
    for c in rgb {
        r.extend(std::iter::repeat_n(c, SIDE * SIDE));
    }
    r[1] = first;
    r
}

fn write_ten(dir: &Path, per_file: usize) {
    for f in Kind::Ten.archive().2.into_iter().chain(["test_batch.bin"]) {
        let bytes: Vec<u8> = (0..per_file)
            .flat_map(|i| record((i % 10) as u8, [10, 20, 30], i as u8))
            .collect();
        std::fs::write(dir.join(f), bytes).unwrap();
    }
}

#[test]
fn cifar10_records_become_pictures_and_labels() {
    let dir = tempfile::tempdir().unwrap();
    let inner = dir.path().join("cifar-10-batches-bin");
    std::fs::create_dir(&inner).unwrap();
    write_ten(&inner, 3);
    let names: String = (0..10).map(|i| format!("class{i}\n")).collect();
    std::fs::write(inner.join("batches.meta.txt"), names).unwrap();
    // found from the parent folder too
    let c = load(dir.path(), Kind::Ten, "cifar10:x", false).unwrap();
    assert_eq!((c.train.0.len(), c.test.0.len(), c.classes), (15, 3, 10));
    assert_eq!(&c.train.1[..4], &[0, 1, 2, 0]);
    let p = &c.train.0[1];
    assert_eq!((p.w, p.h), (32, 32));
    assert_eq!(&p.rgb[..6], &[1, 20, 30, 10, 20, 30]);
    assert_eq!(c.names.unwrap()[9], "class9");
    assert_eq!(c.names_note, None);
    // a list it cannot take is said, the classes numbered
    for bad in [&b"a\nb\n"[..], b"\xff\xfe\n"] {
        std::fs::write(inner.join("batches.meta.txt"), bad).unwrap();
        let c = load(dir.path(), Kind::Ten, "cifar10:x", false).unwrap();
        assert_eq!(c.names, None);
        let note = c.names_note.unwrap();
        assert!(note.ends_with("the classes are numbered 0 to 9"), "{note}");
    }
    std::fs::write(inner.join("batches.meta.txt"), b"a\nb\n").unwrap();
    let note = load(dir.path(), Kind::Ten, "cifar10:x", false)
        .unwrap()
        .names_note;
    assert!(note
        .unwrap()
        .contains("batches.meta.txt names 2 classes, not 10"));
}

#[test]
fn the_test_file_alone_is_read_for_eval() {
    let dir = tempfile::tempdir().unwrap();
    let inner = dir.path().join("cifar-10-batches-bin");
    std::fs::create_dir(&inner).unwrap();
    let bytes: Vec<u8> = (0..4).flat_map(|i| record(i as u8, [1, 2, 3], 0)).collect();
    std::fs::write(inner.join("test_batch.bin"), bytes).unwrap();
    // training wants the training files; eval does not
    assert!(load(dir.path(), Kind::Ten, "cifar10:x", false).is_err());
    let c = load_test(dir.path(), Kind::Ten, "cifar10:x").unwrap();
    assert_eq!((c.train.0.len(), c.test.1.clone()), (0, vec![0, 1, 2, 3]));
    let e = load_test(&inner.join("none"), Kind::Ten, "cifar10:x")
        .err()
        .unwrap();
    assert!(
        e.to_string()
            .contains("holds no test_batch.bin (cifar10's test set)"),
        "{e}"
    );
}

#[test]
fn download_takes_every_file_the_loader_reads_from_the_archive() {
    use crate::data::download::{fetch, tests::md5_hex, tests::serve, tests::targz};
    let files = tempfile::tempdir().unwrap();
    write_ten(files.path(), 2);
    let names: String = (0..10).map(|i| format!("c{i}\n")).collect();
    std::fs::write(files.path().join("batches.meta.txt"), names).unwrap();
    let mut a = Kind::Ten.download();
    let bodies: Vec<(String, Vec<u8>)> = (a.files.iter())
        .map(|f| {
            let bytes = std::fs::read(files.path().join(f)).unwrap();
            (format!("cifar-10-batches-bin/{f}"), bytes)
        })
        .collect();
    let members: Vec<(&str, &[u8])> = (bodies.iter())
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    let body = targz(&members);
    let (url, _) = serve(body.clone(), body.len());
    assert!(a.url.ends_with("/cifar-10-binary.tar.gz"), "{}", a.url);
    a.url = format!("{url}/x.tar.gz");
    a.md5 = md5_hex(&body);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    fetch(&a, &dir.path().join("cache"), &data, &|_| {}).unwrap();
    let c = load(&data, Kind::Ten, "cifar10:data", false).unwrap();
    assert_eq!((c.train.0.len(), c.test.0.len()), (10, 2));
    assert_eq!(c.names.unwrap()[3], "c3");
}

#[test]
fn cifar100_reads_fine_or_coarse_labels() {
    let dir = tempfile::tempdir().unwrap();
    for f in ["train.bin", "test.bin"] {
        let mut r = vec![7u8, 42];
        r.extend(vec![5u8; PIXELS]);
        std::fs::write(dir.path().join(f), r.repeat(2)).unwrap();
    }
    let fine = load(dir.path(), Kind::Hundred { coarse: false }, "s", false).unwrap();
    assert_eq!((fine.train.1.clone(), fine.classes), (vec![42, 42], 100));
    let coarse = load(dir.path(), Kind::Hundred { coarse: true }, "s", false).unwrap();
    assert_eq!((coarse.test.1.clone(), coarse.classes), (vec![7, 7], 20));
}

#[test]
fn missing_or_damaged_files_say_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let e = load(dir.path(), Kind::Ten, "cifar10:d", false)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.starts_with("--data cifar10:d: no cifar10 binary files here")
            && e.contains("cifar-10-binary.tar.gz")
            && e.contains("tar xzf cifar-10-binary.tar.gz -C"),
        "{e}"
    );
    // the archive not unpacked, given or in the folder; torchvision's pickled version
    let packed = tempfile::tempdir().unwrap();
    let archive = packed.path().join("cifar-10-binary.tar.gz");
    std::fs::write(&archive, b"x").unwrap();
    for given in [packed.path(), archive.as_path()] {
        let e = load(given, Kind::Ten, "c", false)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("cifar-10-binary.tar.gz is the archive, not unpacked: unpack it")
                && e.contains(&format!(
                    "tar xzf {} -C {}",
                    archive.display(),
                    packed.path().display()
                )),
            "{e}"
        );
    }
    let pickled = tempfile::tempdir().unwrap();
    std::fs::create_dir(pickled.path().join("cifar-10-batches-py")).unwrap();
    let e = load(pickled.path(), Kind::Ten, "c", false)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("the Python (pickled) version of cifar10"), "{e}");
    // one file missing is named; the other CIFAR's files are said to be
    write_ten(dir.path(), 2);
    // a training file missing is said as the test file is
    std::fs::remove_file(dir.path().join("data_batch_4.bin")).unwrap();
    let e = load(dir.path(), Kind::Ten, "c", false)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("holds cifar10 binary files but not data_batch_4.bin: unpack"),
        "{e}"
    );
    // one there that is no file is said to be what it is
    std::fs::create_dir(dir.path().join("data_batch_4.bin")).unwrap();
    let e = load(dir.path(), Kind::Ten, "c", false).err().unwrap();
    assert!(
        e.to_string().contains(
            "data_batch_4.bin is a directory, not a regular file: put the archive's file there"
        ),
        "{e}"
    );
    std::fs::remove_dir(dir.path().join("data_batch_4.bin")).unwrap();
    write_ten(dir.path(), 2);
    std::fs::remove_file(dir.path().join("test_batch.bin")).unwrap();
    let e = load(dir.path(), Kind::Ten, "c", false).err().unwrap();
    assert!(
        e.to_string()
            .contains("holds cifar10 binary files but not test_batch.bin"),
        "{e}"
    );
    let e = load(dir.path(), Kind::Hundred { coarse: false }, "c", false).err();
    assert!(e
        .unwrap()
        .to_string()
        .contains("no cifar100 binary files here"));
    let hundred = tempfile::tempdir().unwrap();
    for f in ["train.bin", "test.bin"] {
        std::fs::write(hundred.path().join(f), [0u8; 3074]).unwrap();
    }
    let e = load(hundred.path(), Kind::Ten, "c", false).err().unwrap();
    assert!(
        e.to_string()
            .contains("holds the cifar100 binary files, not cifar10's: give --data cifar100:"),
        "{e}"
    );
    write_ten(dir.path(), 2);
    let cut = dir.path().join("data_batch_3.bin");
    std::fs::write(&cut, vec![0u8; 3073 + 100]).unwrap();
    let e = load(dir.path(), Kind::Ten, "c", false)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("data_batch_3.bin") && e.contains("not a whole number of 3073-byte"),
        "{e}"
    );
    std::fs::write(&cut, record(10, [0; 3], 0)).unwrap();
    let e = load(dir.path(), Kind::Ten, "c", false)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("record 0 has label 10, but cifar10 has 10 classes"),
        "{e}"
    );
}
