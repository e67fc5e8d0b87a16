//! How `cifar10:`/`cifar100:` and `images:` specs become training and validation picture sets:
//! where validation comes from (the set's own test file or `val/` folder, `--val-data`, or a
//! seeded split), the input size (`--image-size` or the pictures' own), the augmentation, the
//! normalisation, and whether decoded files are kept in memory.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::cifar::{self, Kind};
use super::folder::splits::Role;
use super::folder::{self, Folder};
use super::host_memory;
use super::picture_set::{ImageSet, Pictures};
use super::transform::{Augment, Look, NormSpec, CIFAR10, CIFAR100, IMAGENET};
use super::{DataError, DataOptions, DataSpec, Dataset, LoadedData};
use crate::nn::rng::{tag, Rng};

/// The share of the machine's memory decoded files may be kept in.
const KEEP_SHARE: u64 = 4;

/// One set as read, before it is cut or shown: its pictures, their sizes, and what the log
/// says about it.
struct Read {
    set: Arc<ImageSet>,
    sizes: Vec<(usize, usize)>,
    classes: usize,
    names: Vec<String>,
    /// What the set is, for the log: "cifar10 data/c10" or "images photos".
    what: String,
    /// The folder read (canonical), for a folder's pictures; None for a CIFAR file's.
    folder: Option<PathBuf>,
    notes: Vec<String>,
}

pub(super) fn spec_err(spec: &DataSpec, msg: String) -> DataError {
    DataError::Spec {
        spec: spec.to_string(),
        msg,
    }
}

fn from_folder(f: Folder, side: Option<usize>) -> Read {
    let mut notes = folder::notes(&f, true);
    // decoded pictures are scaled down to `side` at most (`kept_side`), kept or not: the
    // samples are the same on every machine; kept when every picture fits in the memory
    // granted, otherwise decoded whenever needed
    let stored: u64 = (f.sizes.iter())
        .map(|&(w, h)| {
            let s = side.map_or(1.0, |s| (s as f64 / w.min(h) as f64).min(1.0));
            ((w as f64 * s).round() * (h as f64 * s).round() * 3.0) as u64
        })
        .sum();
    let keep = stored <= host_memory::machine_memory().0 / KEEP_SHARE;
    notes.push(if keep {
        format!(
            "{}: decoded images are kept in memory after their first use ({}{})",
            f.dir.display(),
            crate::text::bytes(stored),
            side.map_or(String::new(), |s| format!(", shorter side {s} at most"))
        )
    } else {
        format!(
            "{}: images are decoded every epoch (keeping them would take {}, more than a quarter of {})",
            f.dir.display(),
            crate::text::bytes(stored),
            host_memory::memory_text()
        )
    });
    let what = format!("images {}", f.dir.display());
    Read {
        folder: std::fs::canonicalize(&f.dir).ok(),
        classes: f.classes.len(),
        names: f.classes.clone(),
        set: Arc::new(
            ImageSet::files((f.files, f.sizes.clone()), f.labels, side, keep)
                .named(f.classes.clone()),
        ),
        sizes: f.sizes,
        what,
        notes,
    }
}

/// The set `spec` names, and its own validation set where it has one (a folder's only when no
/// `--val-data` replaces it). With `known` (the training set's class names, for `--val-data`),
/// a folder's class folders are matched to them by name.
fn read_spec(
    spec: &DataSpec,
    side: Option<usize>,
    opts: &DataOptions,
    known: Option<&[String]>,
) -> Result<(Read, Option<Read>), DataError> {
    match spec {
        DataSpec::Cifar { dir, kind } => {
            let (train, test) = cifar_reads(
                cifar::load(dir, *kind, &spec.to_string(), opts.download)?,
                *kind,
            );
            Ok((train, Some(test)))
        }
        DataSpec::Images { dir } => {
            let (train_dir, val_dir) = folder_halves(spec, dir, Role::Training)?;
            let train = folder::scan(&train_dir, known).map_err(|m| spec_err(spec, m))?;
            // (--val-split 0: its val/ is neither read nor checked)
            let (val_dir, unused) = match opts.val_fraction == Some(0.0) {
                true => (None, val_dir),
                false => (val_dir, None),
            };
            let val = match val_dir.filter(|_| opts.val_data.is_none()) {
                Some(v) => {
                    Some(folder::scan(&v, Some(&train.classes)).map_err(|m| spec_err(spec, m))?)
                }
                None => None,
            };
            let mut train = from_folder(train, side);
            if let Some(v) = unused.filter(|_| opts.val_data.is_none()) {
                let why = "not used: --val-split 0 turns validation off";
                train.notes.push(format!("{}: {why}", v.display()));
            }
            Ok((train, val.map(|v| from_folder(v, side))))
        }
        _ => unreachable!("read_spec is called for picture specs"),
    }
}

/// The set `--val-data` names, to validate on: a CIFAR directory's test set, a folder's `val/`
/// where it has `train/` and `val/`, else the folder itself; its class folders matched by name
/// to the training set's (`known`).
fn read_val_spec(
    spec: &DataSpec,
    side: Option<usize>,
    opts: &DataOptions,
    known: &[String],
) -> Result<Read, DataError> {
    match spec {
        DataSpec::Images { dir } => {
            let (whole, val_dir) = folder_halves(spec, dir, Role::Validation)?;
            let val = folder::scan(val_dir.as_deref().unwrap_or(&whole), Some(known))
                .map_err(|m| spec_err(spec, m))?;
            Ok(from_folder(val, side))
        }
        DataSpec::Cifar { dir, kind } => {
            // (its test file alone: the training batches are neither needed nor read)
            let missing = cifar::test_folder(dir, *kind).is_none();
            let c = match cifar::load_test(dir, *kind, &spec.to_string()) {
                Ok(c) => c,
                Err(_) if missing && opts.download => {
                    cifar::load(dir, *kind, &spec.to_string(), true)?
                }
                Err(DataError::Spec { spec, msg }) if missing => {
                    let msg = format!("{msg}; add --download to fetch the set there");
                    return Err(DataError::Spec { spec, msg });
                }
                Err(e) => return Err(e),
            };
            Ok(cifar_reads(c, *kind).1)
        }
        _ => unreachable!("read_val_spec is called for picture specs"),
    }
}

/// A CIFAR set's training and test pictures as sets (the training one empty where only the
/// test file was read).
fn cifar_reads(c: cifar::Cifar, kind: Kind) -> (Read, Read) {
    let names =
        (c.names.clone()).unwrap_or_else(|| (0..c.classes).map(|i| i.to_string()).collect());
    let what = format!("{} {}", kind.name(), c.dir.display());
    let read = |(p, l): (Vec<_>, Vec<u32>), what: String, notes| Read {
        sizes: vec![(32, 32); l.len()],
        set: Arc::new(ImageSet::in_memory(p, l).named(names.clone())),
        classes: c.classes,
        names: names.clone(),
        what,
        folder: None,
        notes,
    };
    let test_name = match kind {
        Kind::Ten => "test_batch.bin",
        Kind::Hundred { .. } => "test.bin",
    };
    let notes = c.names_note.clone().into_iter().collect();
    (
        read(c.train, what.clone(), notes),
        read(c.test, format!("{what}/{test_name}"), Vec::new()),
    )
}

/// The folder of training pictures of an `images:` directory, and its validation folder: its
/// `train/` and `val/` (or `valid/`, `validation/`) where it has both, else itself alone.
pub(super) fn folder_halves(
    spec: &DataSpec,
    dir: &Path,
    role: Role,
) -> Result<(PathBuf, Option<PathBuf>), DataError> {
    folder::splits::halves(dir, role).map_err(|m| spec_err(spec, m))
}

/// The input size every picture is brought to: `--image-size`, or the pictures' own when they
/// are all the same.
fn input_size(
    spec: &DataSpec,
    reads: &[&Read],
    size: Option<usize>,
) -> Result<(usize, usize), DataError> {
    if let Some(s) = size {
        return Ok((s, s));
    }
    let first = reads[0].sizes.first().copied().unwrap_or((1, 1));
    let named = |r: &Read, i: usize| {
        r.set
            .file(i)
            .map_or(String::new(), |p| format!(" ({})", p.display()))
    };
    for r in reads {
        if let Some((i, s)) = r.sizes.iter().enumerate().find(|(_, s)| **s != first) {
            return Err(spec_err(
                spec,
                format!(
                    "the images have different sizes ({}x{}{} and {}x{}{}); give --image-size N to resize them (shorter side to N, centre crop)",
                    first.0,
                    first.1,
                    named(reads[0], 0),
                    s.0,
                    s.1,
                    named(r, i)
                ),
            ));
        }
    }
    Ok(first)
}

fn view(r: &Read, rows: Vec<u32>, look: Look, seed: u64) -> (Pictures, Vec<u32>) {
    let y = rows.iter().map(|&i| r.set.labels()[i as usize]).collect();
    (Pictures::new(r.set.clone(), rows, look, seed), y)
}

pub(super) fn load(
    spec: &DataSpec,
    opts: &DataOptions,
    seed: u64,
) -> Result<LoadedData, DataError> {
    let a = opts.augment;
    let (side, kept) = (stored_side(opts), kept_side(opts));
    let (train, own_val) = read_spec(spec, kept, opts, None)?;
    // (a validation folder may hold some of the classes only)
    if let (true, [only]) = (spec_is_folder(spec), train.names.as_slice()) {
        return Err(spec_err(
            spec,
            format!("the training folder holds one class folder ({only}): a classifier needs two or more; add a folder per class (<class>/<image>.jpg)"),
        ));
    }
    // (--val-split 0 turns validation off: a --val-data given is neither read nor checked)
    let off = opts.val_fraction == Some(0.0);
    let val_read = match &opts.val_data {
        Some(DataSpec::Cifar { .. } | DataSpec::Images { .. }) if off => None,
        Some(v @ (DataSpec::Cifar { .. } | DataSpec::Images { .. })) => {
            let known = train.names.as_slice();
            Some(read_val_spec(v, kept, opts, known).map_err(DataError::of_val_data)?)
        }
        Some(v) => {
            return Err(spec_err(
                v,
                format!(
                "must be a set of the same kind as --data {spec} (cifar10:, cifar100: or images:)"
            ),
            )
            .of_val_data())
        }
        None => own_val,
    };
    // (a folder's classes are matched by name; a CIFAR file's are numbers, the training set's
    // in order)
    if let Some(v) = &val_read {
        if v.classes > train.classes || v.names != train.names[..v.names.len()] {
            let msg = format!(
                "the validation set's classes ({}) are not the training set's ({}): name its class folders as the training set's (it may leave out only the last of them in sorted order)",
                v.names.join(", "),
                train.names.join(", ")
            );
            return Err(match &opts.val_data {
                Some(given) => spec_err(given, msg).of_val_data(),
                None => spec_err(spec, msg),
            });
        }
    }
    // (a --val-data set of pictures of another size is that flag's to mend)
    let mut size = input_size(spec, &[&train], opts.image_size);
    if let (Ok(_), Some(v)) = (&size, &val_read) {
        size = match &opts.val_data {
            Some(given) => {
                input_size(given, &[&train, v], opts.image_size).map_err(DataError::of_val_data)
            }
            None => input_size(spec, &[&train, v], opts.image_size),
        };
    }
    let (w, h) = size?;
    let norm = normalisation(spec, opts);
    let train_look = Look {
        w,
        h,
        norm,
        augment: Some(a),
        side,
    };
    let val_look = Look {
        augment: None,
        ..train_look.clone()
    };
    let all = |r: &Read| (0..r.set.len() as u32).collect::<Vec<u32>>();
    let ((tp, ty), (vp, vy), split_text) = match (&val_read, opts.val_fraction) {
        (v, Some(0.0)) => (
            view(&train, all(&train), train_look, seed),
            view(&train, Vec::new(), val_look, seed),
            match (v, &opts.val_data) {
                (Some(v), _) => format!("no validation (--val-split 0: {} is not used)", v.what),
                (None, Some(d)) => format!("no validation (--val-split 0: --val-data {d} is not used)"),
                (None, None) => "no validation (--val-split 0)".to_string(),
            },
        ),
        (Some(v), Some(_)) => {
            return Err(spec_err(
                spec,
                format!("validation is {} (the set's own, or --val-data); --val-split only cuts a set without one (0 turns validation off)", v.what),
            ))
        }
        (Some(v), None) => (
            view(&train, all(&train), train_look, seed),
            view(v, all(v), val_look, seed),
            format!(
                "validation {}: {}{}",
                v.what,
                crate::text::counted(v.set.len(), "image"),
                // (a folder's val/ beside its train/, a CIFAR directory's test file, are not)
                match v.folder.is_some() && v.folder == train.folder {
                    true => super::TRAINING_DATA_ITSELF,
                    false => "",
                }
            ),
        ),
        (None, f) => {
            let f = f.unwrap_or(super::DEFAULT_VAL_FRACTION);
            let mut idx = all(&train);
            Rng::stream(seed, tag::SPLIT, 0).shuffle(&mut idx);
            let n_val = (idx.len() as f64 * f).round() as usize;
            let (v, t) = idx.split_at(n_val);
            (
                view(&train, t.to_vec(), train_look, seed),
                view(&train, v.to_vec(), val_look, seed),
                super::split_text(t.len(), v.len(), f, seed),
            )
        }
    };
    let features = 3 * w * h;
    let dataset = |pictures: Pictures, y: Vec<u32>| Dataset {
        features,
        classes: train.classes,
        image: Some([3, h, w]),
        x: Vec::new(),
        y,
        names: Vec::new(),
        pictures: Some(pictures),
    };
    let resize = match opts.image_size {
        Some(s) if a.resized_crop => format!(
            "shorter side to {} then {s}x{s} crops (centre for validation)",
            side.unwrap_or(s)
        ),
        Some(s) => format!("shorter side to {s}, centre crop {s}x{s}"),
        None => "as stored".into(),
    };
    let augmented = match a == Augment::default() {
        true => "not augmented".to_string(),
        false => format!("augmented {a} in training"),
    };
    let description = format!(
        "{}: {}, 3x{h}x{w}, {} classes; {split_text}; inputs {resize}, {augmented}, normalised per channel (x/255-mean)/std with mean {:?} std {:?}",
        train.what,
        crate::text::counted(train.set.len(), "image"),
        train.classes,
        norm.mean,
        norm.std,
    );
    let mut notes = train.notes.clone();
    let val_notes = notes.len();
    if let Some(v) = &val_read {
        notes.extend(v.notes.iter().cloned());
    }
    // a padding as large as the picture: most of each crop is padding (crop:P pads, it is not
    // the crop's size; CIFAR's is crop:4)
    if a.pad_crop * 2 >= w.min(h) {
        notes.push(format!(
            "--augment crop:{p} pads {p} black pixels a side of {w}x{h} pictures: most of a crop is padding; crop:P takes the padding, not the crop's size (CIFAR's recipe is crop:4)",
            p = a.pad_crop
        ));
    }
    // (validation's way: a centre crop, not augmented)
    let made = match opts.image_size {
        Some(s) => {
            let shorter = if a.resized_crop { side.unwrap_or(s) } else { s };
            format!("shorter side to {shorter}, centre crop {s}x{s}")
        }
        None => format!("{w}x{h} as stored"),
    };
    let recipe = super::InputRecipe {
        text: format!(
            "RGB pictures {made}, {} (x/255-mean)/std with mean {:?} std {:?}",
            super::InputRecipe::NORMALISED,
            norm.mean,
            norm.std
        ),
        affine: None,
        sample: Some([3, h, w]),
    };
    Ok(LoadedData {
        train: dataset(tp, ty),
        val: dataset(vp, vy),
        description,
        notes,
        val_notes,
        val_text: split_text,
        recipe,
    })
}

/// The shorter side pictures are brought to before their crop (`--image-size`): with random
/// resized crops the stored pictures keep a margin (ImageNet's 256 for 224), which validation's
/// centre crop leaves out as torchvision's Resize(256) + CenterCrop(224) does.
pub(super) fn stored_side(opts: &DataOptions) -> Option<usize> {
    opts.image_size.map(|s| match opts.augment.resized_crop {
        true => (s as f64 * 8.0 / 7.0).round() as usize,
        false => s,
    })
}

/// The shorter side decoded pictures are kept at, at most (larger ones are scaled to it once
/// decoded, kept or not: the samples are the same on every machine, and a 64-pixel run does not
/// hold whole photos): the crops' side; under random-resized-crop twice that (512 for 224), so
/// that its small crops are still cut from a sharp picture and a photo of ordinary size is
/// resampled once, from what was decoded.
pub(super) fn kept_side(opts: &DataOptions) -> Option<usize> {
    stored_side(opts).map(|s| match opts.augment.resized_crop {
        true => 2 * s,
        false => s,
    })
}

/// `--normalize`, or under `auto` the statistics of the set a run trains on (`spec`).
pub(super) fn normalisation(spec: &DataSpec, opts: &DataOptions) -> super::picture::Norm {
    match opts.normalize {
        NormSpec::Given(n) => n,
        NormSpec::Auto => match spec {
            DataSpec::Cifar {
                kind: Kind::Ten, ..
            } => CIFAR10,
            DataSpec::Cifar { .. } => CIFAR100,
            _ => IMAGENET,
        },
    }
}

fn spec_is_folder(spec: &DataSpec) -> bool {
    matches!(spec, DataSpec::Images { .. })
}

/// Whether `spec` is read as pictures (made into samples batch by batch).
pub(super) fn is_picture_spec(spec: &DataSpec) -> bool {
    matches!(spec, DataSpec::Cifar { .. } | DataSpec::Images { .. })
}
