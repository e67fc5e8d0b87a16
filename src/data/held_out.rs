//! A held-out set for `eval`: read as `--val-data` reads a set (a CIFAR directory's test file,
//! the `val/` of a folder with `train/` and `val/`, else the folder itself; a table file), and
//! made into samples as the run made its validation samples, from what its checkpoint records
//! (the class names, the model's input, a table's scaling) and not from its training data,
//! which may have moved or changed since.

use std::path::Path;
use std::sync::Arc;

use super::folder::splits::Role;
use super::image_shape::shape_text;
use super::picture_set::{ImageSet, Pictures};
use super::picture_specs::{folder_halves, kept_side, normalisation, spec_err, stored_side};
use super::transform::Look;
use super::{cifar, folder, labels, table, Affine, DataError, DataOptions, DataSpec, Dataset};

/// What a run's checkpoint says of how it made its samples.
pub struct Recipe<'a> {
    /// The run's `--data` (its kind, and CIFAR's statistics under `--normalize auto`).
    pub run_data: &'a DataSpec,
    /// The run's `--image-size`, `--augment` (the margin random resized crops keep) and
    /// `--normalize`.
    pub opts: &'a DataOptions,
    /// The model's outputs by class name, in order (empty where the data named none).
    pub names: &'a [String],
    pub classes: usize,
    /// The model's input: a picture's [C, H, W], or a row's features.
    pub image: Option<[usize; 3]>,
    pub features: usize,
    /// A table's scaling, (x - shift) * scale (one of each: every feature alike); None: the
    /// values as given.
    pub affine: Option<&'a Affine>,
    pub seed: u64,
}

/// The set, what it is for the report (`images cats/test: 400 images`), its notes.
pub struct HeldOut {
    pub set: Dataset,
    pub what: String,
    pub notes: Vec<String>,
}

/// `spec`'s samples made as `r` says.
pub fn load(spec: &DataSpec, r: &Recipe) -> Result<HeldOut, DataError> {
    let pictures = super::picture_specs::is_picture_spec;
    match (pictures(r.run_data), pictures(spec)) {
        (true, true) => load_pictures(spec, r),
        (false, false) => load_table(spec, r),
        _ => Err(spec_err(
            spec,
            format!(
                "is not a set of the same kind as the run's --data {}: give eval a set like it ({})",
                r.run_data,
                match pictures(r.run_data) {
                    true => "cifar10:DIR, cifar100:DIR or images:DIR",
                    false => "csv:FILE or idx:FILES, with the training file's columns",
                }
            ),
        )),
    }
}

/// Whether `spec`, read as `load` reads it, is what the run of `--data run` trained on (all of
/// it, or a folder that holds its training split): figures on it say how the training set is fit. A
/// table file is the run's where it is its file or a copy of it (or of the embedded digits).
pub fn is_training_data(spec: &DataSpec, run: &DataSpec) -> bool {
    let same = |a: &Path, b: &Path| crate::files::same_path(a, b) || same_bytes(a, b);
    match (spec, run) {
        (DataSpec::Images { dir }, DataSpec::Images { dir: trained }) => {
            let read = folder_halves(spec, dir, Role::Evaluated).map(|(all, v)| v.unwrap_or(all));
            let train = folder_halves(run, trained, Role::Training).map(|(train, _)| train);
            matches!((read, train), (Ok(r), Ok(t)) if same(&r, &t))
        }
        (DataSpec::Csv { path, .. }, DataSpec::Csv { path: trained, .. }) => same(path, trained),
        (DataSpec::Csv { path, .. }, DataSpec::Digits) => {
            let digits = table::DIGITS_CSV.as_bytes();
            holds(path, digits.len() as u64, &mut &digits[..])
        }
        (
            DataSpec::Idx { images, .. },
            DataSpec::Idx {
                images: trained, ..
            },
        ) => same(images, trained),
        // (a CIFAR set's test file is not its training files)
        (DataSpec::Cifar { .. }, _) => false,
        // the same built-in or generated set
        (a, b) => a == b,
    }
}

/// Whether files `a` and `b` hold the same bytes (a copy under another name), compared a
/// chunk at a time where their lengths agree.
fn same_bytes(a: &Path, b: &Path) -> bool {
    let len = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.len())
    };
    match (len(a), std::fs::File::open(b)) {
        (Some(n), Ok(mut other)) if len(b) == Some(n) => holds(a, n, &mut other),
        _ => false,
    }
}

/// Whether file `path` holds exactly the `n` bytes `other` reads.
fn holds(path: &Path, n: u64, other: &mut impl std::io::Read) -> bool {
    use std::io::Read;
    let Ok(mut file) = std::fs::File::open(path) else {
        return false;
    };
    if file.metadata().map(|m| m.len()).ok() != Some(n) {
        return false;
    }
    let (mut x, mut y) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let Ok(k) = file.read(&mut x) else {
            return false;
        };
        if k == 0 {
            return other.read(&mut y[..1]).is_ok_and(|r| r == 0);
        }
        if other.read_exact(&mut y[..k]).is_err() || x[..k] != y[..k] {
            return false;
        }
    }
}

fn load_pictures(spec: &DataSpec, r: &Recipe) -> Result<HeldOut, DataError> {
    let names: Vec<String> = match r.names.is_empty() {
        true => (0..r.classes).map(|c| c.to_string()).collect(),
        false => r.names.to_vec(),
    };
    let (set, what, sizes, notes) = match spec {
        DataSpec::Cifar { dir, kind } => {
            same_labels(spec, *kind, r)?;
            let c = cifar::load_test(dir, *kind, &spec.to_string())?;
            let n = c.test.1.len();
            let what = format!("{} {}", kind.name(), c.dir.display());
            let set = ImageSet::in_memory(c.test.0, c.test.1).named(names.clone());
            (set, what, vec![(32, 32); n], Vec::new())
        }
        DataSpec::Images { dir } => {
            let (whole, val) = folder_halves(spec, dir, Role::Evaluated)?;
            let f = folder::scan(val.as_deref().unwrap_or(&whole), Some(&names))
                .map_err(|m| spec_err(spec, m))?;
            let notes = folder::notes(&f, false);
            let what = format!("images {}", f.dir.display());
            // (read once: nothing is kept; scaled as the run's own validation pictures were)
            let files = (f.files, f.sizes.clone());
            let set =
                ImageSet::files(files, f.labels, kept_side(r.opts), false).named(names.clone());
            (set, what, f.sizes, notes)
        }
        _ => unreachable!("pictures"),
    };
    let (w, h) = match (r.image, r.opts.image_size) {
        (Some([_, h, w]), _) => (w, h),
        (None, Some(s)) => (s, s),
        // (a checkpoint from before it recorded its pictures' size, of a model that flattens
        // them: the pictures' own, where it gives the model's input)
        (None, None) => (sizes.first().copied())
            .filter(|(w, h)| 3 * w * h == r.features)
            .ok_or_else(|| {
                spec_err(
                    spec,
                    format!(
                        "its pictures do not make the {} values the run's model takes (the checkpoint, from an earlier version, does not say the pictures' size)",
                        r.features
                    ),
                )
            })?,
    };
    if r.opts.image_size.is_none() {
        // as stored: every picture must be the model's size
        if let Some((i, (pw, ph))) = (sizes.iter().enumerate()).find(|(_, s)| **s != (w, h)) {
            let file = set
                .file(i)
                .map_or(String::new(), |p| format!(" ({})", p.display()));
            return Err(spec_err(
                spec,
                format!(
                    "a picture is {pw}x{ph}{file}: the run trained on pictures as stored, {w}x{h}, so its model takes that size only; bring the pictures to {w}x{h}, or train with --image-size N (which resizes and crops any picture)"
                ),
            ));
        }
    }
    let n = set.len();
    let look = Look {
        w,
        h,
        norm: normalisation(r.run_data, r.opts),
        augment: None,
        side: stored_side(r.opts),
    };
    let set = Arc::new(set);
    let y = set.labels().to_vec();
    let pictures = Pictures::new(set, (0..n as u32).collect(), look, r.seed);
    Ok(HeldOut {
        set: Dataset {
            features: 3 * w * h,
            classes: r.classes,
            image: Some([3, h, w]),
            x: Vec::new(),
            y,
            names: Vec::new(),
            pictures: Some(pictures),
        },
        what: format!("{what}: {}", crate::text::counted(n, "image")),
        notes,
    })
}

/// A CIFAR set's labels are its own classes: only a run of the same set (and labels) has
/// outputs for them, in that order.
fn same_labels(spec: &DataSpec, kind: cifar::Kind, r: &Recipe) -> Result<(), DataError> {
    let trained = match r.run_data {
        DataSpec::Cifar { kind, .. } => Some(*kind),
        _ => None,
    };
    if trained == Some(kind) {
        return Ok(());
    }
    let fix = match trained {
        Some(cifar::Kind::Ten) => "evaluate it on CIFAR-10 (--data cifar10:DIR)",
        Some(cifar::Kind::Hundred { coarse: false }) => {
            "evaluate it on CIFAR-100's fine labels (--data cifar100:DIR)"
        }
        Some(cifar::Kind::Hundred { coarse: true }) => {
            "evaluate it on CIFAR-100's coarse labels (--data cifar100:DIR,labels=coarse)"
        }
        None => "evaluate it on a folder of its classes (--data images:DIR)",
    };
    Err(spec_err(
        spec,
        format!(
            "its labels are {}, not the outputs of the run's model, which trained on --data {} ({}): {fix}",
            kind.labels(),
            r.run_data,
            crate::text::counted(r.classes, "class"),
        ),
    ))
}

fn load_table(spec: &DataSpec, r: &Recipe) -> Result<HeldOut, DataError> {
    let (mut set, _, what) = table::read(spec, r.seed, "--data")?;
    // (its width first: a set of another width is another set, whatever its labels)
    if set.features != r.features {
        return Err(spec_err(
            spec,
            format!(
                "it has {} features; the run's model takes {}: is it a set of the run's kind?",
                set.features, r.features
            ),
        ));
    }
    labels::onto(&mut set, r.names, "the run's model's").map_err(|m| spec_err(spec, m))?;
    let max = set.y.iter().max().copied().unwrap_or(0) as usize;
    if max >= r.classes {
        return Err(spec_err(
            spec,
            format!(
                "it has labels up to {max}; the run's model has {}: 0 to {}",
                crate::text::counted(r.classes, "class"),
                r.classes.saturating_sub(1)
            ),
        ));
    }
    if let Some((theirs, ours)) = set.image.zip(r.image).filter(|(a, b)| a != b) {
        return Err(spec_err(
            spec,
            format!(
                "its samples are pictures of {} and the run's of {}: give it the run's shape (shape={}), or leave its shape out",
                shape_text(&theirs),
                shape_text(&ours),
                shape_text(&ours)
            ),
        ));
    }
    if let Some((shift, scale)) = r.affine {
        let d = set.features;
        if !(shift.len() == scale.len() && (shift.len() == 1 || shift.len() == d)) {
            return Err(spec_err(
                spec,
                format!(
                    "the checkpoint's scaling is of {} features, the set's rows of {d}",
                    shift.len()
                ),
            ));
        }
        // as the run scaled its validation rows
        let by: Vec<(f64, f64)> = shift.iter().copied().zip(scale.iter().copied()).collect();
        table::scale_rows(&mut set.x, d, &by);
    }
    // (rows given without a shape are read as the run's model reads them)
    set.image = set.image.or(r.image);
    set.classes = r.classes;
    let n = set.len();
    Ok(HeldOut {
        set,
        what: format!("{what}: {}", crate::text::counted(n, "sample")),
        notes: Vec::new(),
    })
}

/// `csv:FILE` given without options (`spec`, as the user gave it), for a run that read its CSV
/// (`run`) with some (`label=2`, `shape=`, `header`): read as the run read its own, a file "of
/// the training file's columns", and a note saying so. (A line 1 of values taken for a header
/// is said by the load: given its own options, the file is read as they say.)
pub fn as_the_run_read(
    spec: &DataSpec,
    run: &DataSpec,
    classes: &[String],
) -> Option<(DataSpec, String)> {
    use super::LabelColumn;
    let DataSpec::Csv {
        path,
        label: LabelColumn::Last,
        header: false,
        shape: None,
    } = spec
    else {
        return None;
    };
    let &DataSpec::Csv {
        label,
        header,
        shape,
        ..
    } = run
    else {
        return None;
    };
    // (the run's header where this file has one: a line 1 of numbers is a sample)
    let sample = header && super::csv::line_one_is_a_sample(path, label, classes);
    let read = DataSpec::Csv {
        path: path.clone(),
        label,
        header: header && !sample,
        shape,
    };
    let why = match sample {
        true => ", but not its header: line 1 here is a row of numbers",
        false => "",
    };
    (read != *spec).then(|| {
        let note = format!(
            "--data {spec} read as the run read its CSV ({run}{why}): as {read} (give it options of its own to read it otherwise)"
        );
        (read, note)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_of_the_training_file_or_of_the_embedded_digits_is_the_training_data() {
        let digits = concat!(env!("CARGO_MANIFEST_DIR"), "/data/digits.csv");
        let csv = |p: &str| format!("csv:{p},label=last").parse::<DataSpec>().unwrap();
        assert!(is_training_data(&csv(digits), &DataSpec::Digits));
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("copy.csv");
        std::fs::copy(digits, &copy).unwrap();
        let copy = copy.to_str().unwrap();
        assert!(is_training_data(&csv(copy), &csv(digits)));
        // one byte other: another set
        let mut bytes = std::fs::read(digits).unwrap();
        bytes[0] = b'1';
        let other = dir.path().join("other.csv");
        std::fs::write(&other, bytes).unwrap();
        let other = other.to_str().unwrap();
        assert!(!is_training_data(&csv(other), &DataSpec::Digits));
        assert!(!is_training_data(&csv(other), &csv(digits)));
    }
}
