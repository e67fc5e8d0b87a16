//! CIFAR-10 and CIFAR-100, the official binary versions: records of a label byte (CIFAR-100: a
//! coarse and a fine label byte) and 3072 pixel bytes, the red, green and blue 32x32 planes.
//! CIFAR-10 trains on `data_batch_1..5.bin` and validates on `test_batch.bin`; CIFAR-100 on
//! `train.bin` and `test.bin`. Class names come from the archive's text files when present.

use std::path::{Path, PathBuf};

use super::picture::Picture;
use super::DataError;
use crate::files::read::{self, Expect};

const SIDE: usize = 32;
const PIXELS: usize = 3 * SIDE * SIDE;
/// The largest file of either archive is CIFAR-100's train.bin (150 MB).
const MAX_FILE: u64 = 200 << 20;

/// Which of the two sets, and for CIFAR-100 which labels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    Ten,
    Hundred { coarse: bool },
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Ten => "cifar10",
            Kind::Hundred { .. } => "cifar100",
        }
    }

    pub fn classes(self) -> usize {
        match self {
            Kind::Ten => 10,
            Kind::Hundred { coarse: true } => 20,
            Kind::Hundred { coarse: false } => 100,
        }
    }

    /// The archive's folder once unpacked, its download address, and its files.
    fn archive(self) -> (&'static str, &'static str, Vec<&'static str>, &'static str) {
        match self {
            Kind::Ten => (
                "cifar-10-batches-bin",
                "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",
                vec![
                    "data_batch_1.bin",
                    "data_batch_2.bin",
                    "data_batch_3.bin",
                    "data_batch_4.bin",
                    "data_batch_5.bin",
                ],
                "test_batch.bin",
            ),
            Kind::Hundred { .. } => (
                "cifar-100-binary",
                "https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz",
                vec!["train.bin"],
                "test.bin",
            ),
        }
    }

    /// What `--download` fetches: the published archive (from `$MGTOP_DATASETS_MIRROR/<file>`
    /// where that is set), its MD5 and (about) its size, and the files the loader reads from it.
    pub fn download(self) -> super::download::Archive {
        let (folder, url, train, test) = self.archive();
        let url = match std::env::var("MGTOP_DATASETS_MIRROR") {
            Ok(m) if !m.is_empty() => format!(
                "{}/{}",
                m.trim_end_matches('/'),
                url.rsplit('/').next().unwrap_or(url)
            ),
            _ => url.to_string(),
        };
        let (md5, size, names) = match self {
            Kind::Ten => (
                "c32a1d4ab5d03f1284b67883e8d87530",
                170_052_171,
                vec!["batches.meta.txt"],
            ),
            Kind::Hundred { .. } => (
                "03b5dce01913d631647c71ecec9e9cb8",
                170_000_000,
                vec!["coarse_label_names.txt", "fine_label_names.txt"],
            ),
        };
        super::download::Archive {
            url,
            md5: md5.into(),
            size,
            folder: folder.into(),
            files: (train.into_iter().chain([test]).chain(names))
                .map(String::from)
                .collect(),
        }
    }

    /// Its labels, for a message: `CIFAR-100's 20 coarse classes`.
    pub fn labels(self) -> String {
        match self {
            Kind::Ten => "CIFAR-10's 10 classes".into(),
            Kind::Hundred { coarse } => {
                let which = if coarse { "coarse" } else { "fine" };
                format!("CIFAR-100's {} {which} classes", self.classes())
            }
        }
    }

    fn names_file(self) -> &'static str {
        match self {
            Kind::Ten => "batches.meta.txt",
            Kind::Hundred { coarse: true } => "coarse_label_names.txt",
            Kind::Hundred { coarse: false } => "fine_label_names.txt",
        }
    }
}

/// The CIFAR training and test sets, and the class names (if the archive's list is there).
pub struct Cifar {
    pub train: (Vec<Picture>, Vec<u32>),
    pub test: (Vec<Picture>, Vec<u32>),
    pub classes: usize,
    pub names: Option<Vec<String>>,
    /// Why the archive's list of class names was not taken, where it has one.
    pub names_note: Option<String>,
    pub dir: PathBuf,
}

/// The folder holding the files: `dir` itself or the archive's folder inside it.
fn locate(dir: &Path, kind: Kind) -> Result<PathBuf, String> {
    let (folder, url, train, test) = kind.archive();
    for d in [dir.to_path_buf(), dir.join(folder)] {
        if (train.iter().chain([&test])).all(|f| d.join(f).is_file()) {
            return Ok(d);
        }
    }
    let base = url.rsplit('/').next().unwrap_or(url);
    // some of the files: an unpacking cut short, or a file removed
    for d in [dir.to_path_buf(), dir.join(folder)] {
        let missing: Vec<&str> = (train.iter().chain([&test]))
            .filter(|f| !d.join(f).is_file())
            .copied()
            .collect();
        // (one there that is no file: a folder, a pipe, a link to a device)
        let odd = (missing.iter()).find_map(|f| {
            let kind = crate::files::read::kind_of(std::fs::metadata(d.join(f)).ok()?.file_type());
            Some(format!(
                "{} is {kind}, not a regular file",
                d.join(f).display()
            ))
        });
        if let Some(odd) = odd.filter(|_| missing.len() < train.len() + 1) {
            return Err(format!(
                "{odd}: put the archive's file there (unpack {base} there again, or add --download)"
            ));
        }
        if missing.len() < train.len() + 1 {
            return Err(format!(
                "{} holds {} binary files but not {}: unpack {base} there again, or add --download",
                d.display(),
                kind.name(),
                missing.join(", ")
            ));
        }
    }
    // the other CIFAR's files
    let other = match kind {
        Kind::Ten => Kind::Hundred { coarse: false },
        Kind::Hundred { .. } => Kind::Ten,
    };
    let (other_folder, _, other_train, other_test) = other.archive();
    let whole = |d: &Path| (other_train.iter().chain([&other_test])).all(|f| d.join(f).is_file());
    if [dir.to_path_buf(), dir.join(other_folder)]
        .iter()
        .any(|d| whole(d))
    {
        return Err(format!(
            "{} holds the {} binary files, not {}'s: give --data {}:{}",
            dir.display(),
            other.name(),
            kind.name(),
            other.name(),
            dir.display()
        ));
    }
    // the archive itself, given or not unpacked; torchvision's pickled batches
    if dir.is_file() || dir.join(base).is_file() {
        let (archive, d) = match dir.is_file() {
            true => (dir.to_path_buf(), dir.parent().unwrap_or(Path::new("."))),
            false => (dir.join(base), dir),
        };
        return Err(format!(
            "{} is the archive, not unpacked: unpack it, then give its folder: tar xzf {} -C {d} and --data {}:{d}",
            archive.display(),
            archive.display(),
            kind.name(),
            d = d.display(),
        ));
    }
    let python = match kind {
        Kind::Ten => "cifar-10-batches-py",
        Kind::Hundred { .. } => "cifar-100-python",
    };
    if dir.join(python).is_dir() || dir.ends_with(python) {
        return Err(format!(
            "{} holds the Python (pickled) version of {}, which is not read here: download the binary version, {url}, or add --download",
            dir.display(),
            kind.name()
        ));
    }
    Err(format!(
        "no {} binary files here (looked for {} and {test} in {} and in {}); add --download to fetch them, or download {url} and unpack it there: mkdir -p {d} && tar xzf {base} -C {d}",
        kind.name(),
        train.join(", "),
        dir.display(),
        dir.join(folder).display(),
        d = dir.display(),
    ))
}

/// Reads one binary file's records.
fn records(path: &Path, kind: Kind) -> Result<(Vec<Picture>, Vec<u32>), DataError> {
    let expect = Expect {
        what: "a CIFAR binary file",
        flag: "--data",
        max: MAX_FILE,
        fix: "the largest CIFAR file is 150 MB; is it the right file?",
    };
    let bytes = read::read_bytes(path, &expect)?;
    let (label_bytes, label_at) = match kind {
        Kind::Ten => (1, 0),
        Kind::Hundred { coarse } => (2, usize::from(!coarse)),
    };
    let record = label_bytes + PIXELS;
    let bad = |msg: String| DataError::Format {
        path: path.to_path_buf(),
        msg,
    };
    if bytes.is_empty() {
        return Err(bad(format!(
            "an empty file (0 bytes), not {} records; remove it and add --download (or unpack the archive again)",
            kind.name()
        )));
    }
    if bytes.len() % record != 0 {
        return Err(bad(format!(
            "{} bytes is not a whole number of {record}-byte {} records; the file is cut short or not from the {} binary archive",
            bytes.len(),
            kind.name(),
            kind.name()
        )));
    }
    let mut pictures = Vec::with_capacity(bytes.len() / record);
    let mut labels = Vec::with_capacity(bytes.len() / record);
    for (n, r) in bytes.chunks_exact(record).enumerate() {
        let label = r[label_at] as usize;
        if label >= kind.classes() {
            return Err(bad(format!(
                "record {n} has label {label}, but {} has {} classes; the file is damaged or not from the {} binary archive",
                kind.name(),
                kind.classes(),
                kind.name()
            )));
        }
        let planes = &r[label_bytes..];
        let rgb = (0..SIDE * SIDE)
            .flat_map(|i| {
                [
                    planes[i],
                    planes[SIDE * SIDE + i],
                    planes[2 * SIDE * SIDE + i],
                ]
            })
            .collect();
        pictures.push(Picture {
            w: SIDE,
            h: SIDE,
            rgb,
        });
        labels.push(label as u32);
    }
    Ok((pictures, labels))
}

/// The class names the archive's list in `dir` gives; where there is a list it cannot take,
/// the note that says so (the classes are then numbered).
fn names(dir: &Path, kind: Kind) -> (Option<Vec<String>>, Option<String>) {
    let expect = Expect {
        what: "a class names file",
        flag: "--data",
        max: 1 << 16,
        fix: "a list of class names is a line a class",
    };
    let path = dir.join(kind.names_file());
    if std::fs::symlink_metadata(&path).is_err() {
        return (None, None);
    }
    let numbered = format!("the classes are numbered 0 to {}", kind.classes() - 1);
    let text = match read::read_text(&path, &expect) {
        Ok(t) => t,
        Err(e) => return (None, Some(format!("{e}; {numbered}"))),
    };
    let names: Vec<String> = text
        .lines()
        .map(|l| crate::text::printable(l.trim()))
        .filter(|l| !l.is_empty())
        .collect();
    match names.len() == kind.classes() {
        true => (Some(names), None),
        false => (
            None,
            Some(format!(
                "{} names {} classes, not {}; {numbered}",
                path.display(),
                names.len(),
                kind.classes()
            )),
        ),
    }
}

/// Reads the set in `dir`; where it is not there and `download`, fetches it first.
pub fn load(dir: &Path, kind: Kind, spec: &str, download: bool) -> Result<Cifar, DataError> {
    let err = |msg| DataError::Spec {
        spec: spec.to_string(),
        msg,
    };
    let found = match locate(dir, kind) {
        Ok(f) => f,
        Err(_) if download => {
            let tell = |l: &str| crate::tell!("{l}");
            let cache = super::download::cache_dir();
            super::download::fetch(&kind.download(), &cache, dir, &tell).map_err(err)?;
            locate(dir, kind).map_err(err)?
        }
        Err(msg) => return Err(err(msg)),
    };
    let (_, _, train_files, test_file) = kind.archive();
    let (mut pictures, mut labels) = (Vec::new(), Vec::new());
    for f in train_files {
        let (p, l) = records(&found.join(f), kind)?;
        pictures.extend(p);
        labels.extend(l);
    }
    let (names, names_note) = names(&found, kind);
    Ok(Cifar {
        train: (pictures, labels),
        test: records(&found.join(test_file), kind)?,
        classes: kind.classes(),
        names,
        names_note,
        dir: found,
    })
}

/// The folder holding the CIFAR set's test file: `dir`, or the archive's folder inside it.
pub fn test_folder(dir: &Path, kind: Kind) -> Option<std::path::PathBuf> {
    let (folder, _, _, test_file) = kind.archive();
    [dir.to_path_buf(), dir.join(folder)]
        .into_iter()
        .find(|d| d.join(test_file).is_file())
}

/// The test file alone of the CIFAR set in `dir` (or the archive's folder inside it), for
/// `eval`: a folder holding only `test_batch.bin` will do. `train` is empty.
pub fn load_test(dir: &Path, kind: Kind, spec: &str) -> Result<Cifar, DataError> {
    let (folder, _, _, test_file) = kind.archive();
    let Some(found) = test_folder(dir, kind) else {
        return Err(DataError::Spec {
            spec: spec.to_string(),
            msg: format!(
                "{} holds no {test_file} ({}'s test set), nor does {}",
                dir.display(),
                kind.name(),
                dir.join(folder).display()
            ),
        });
    };
    let (names, names_note) = names(&found, kind);
    Ok(Cifar {
        train: (Vec::new(), Vec::new()),
        test: records(&found.join(test_file), kind)?,
        classes: kind.classes(),
        names,
        names_note,
        dir: found,
    })
}

#[cfg(test)]
mod tests;
