//! The sets that hold their samples ready (the embedded digits, CSV, IDX, synthetic): read,
//! given a validation set, and normalised (`Normalisation`).

use super::images::{shape_text, shape_values};
use super::{csv, idx, synthetic, synthetic_images, DataError, DataOptions, DataSpec, Dataset};
use super::{Augment, LabelColumn, LoadedData, NormSpec, DEFAULT_VAL_FRACTION};

/// How raw inputs are brought to a common scale (stated in the log).
#[derive(Clone, Debug, PartialEq)]
pub enum Normalisation {
    /// x * factor (known pixel range).
    Scale(f32),
    /// Per-feature (x - mean) / std with statistics from the training split.
    Standardise,
    None,
}

/// The embedded digits set (see data/README.md for its origin and licence).
const DIGITS_CSV: &str = include_str!("../../data/digits.csv");

/// The embedded digits are 8x8 grey images.
const DIGITS_SHAPE: [usize; 3] = [1, 8, 8];

/// Checks a CSV's `shape=` against its rows' features.
fn csv_shape(shape: [usize; 3], features: usize) -> Result<[usize; 3], String> {
    match shape_values(&shape) {
        Some(v) if v == features => Ok(shape),
        v => {
            let side = (features as f64).sqrt().round() as usize;
            let e_g = if side * side == features {
                format!(" (e.g. shape=1x{side}x{side})")
            } else {
                String::new()
            };
            Err(format!(
                "shape={} is {} values per image but the rows have {features} features (every column but the label); give a shape of {features} values{e_g}, or check label= and header",
                shape_text(&shape),
                v.map_or("more".to_string(), |v| v.to_string())
            ))
        }
    }
}

/// Reads a set that holds its samples ready (all but the picture sets): the set, how its
/// inputs are normalised, and what it is for the log; its messages name `flag` (`--data`,
/// `--val-data`).
fn read_table(
    spec: &DataSpec,
    seed: u64,
    flag: &'static str,
) -> Result<(Dataset, Normalisation, String), DataError> {
    let spec_err = |msg| DataError::Spec {
        spec: spec.to_string(),
        msg,
    };
    Ok(match spec {
        DataSpec::Digits => {
            let mut ds = csv::parse(DIGITS_CSV, LabelColumn::Last, false, flag).map_err(|msg| {
                DataError::Format {
                    path: "embedded digits".into(),
                    msg,
                }
            })?;
            ds.image = Some(DIGITS_SHAPE);
            (
                ds,
                Normalisation::Scale(1.0 / 16.0),
                "digits (UCI optical digits, embedded)".to_string(),
            )
        }
        DataSpec::Csv {
            path,
            label,
            header,
            shape,
        } => {
            let text = csv::read(path, flag)?;
            let mut ds =
                csv::parse(&text, *label, *header, flag).map_err(|msg| DataError::Format {
                    path: path.clone(),
                    msg,
                })?;
            if let Some(shape) = shape {
                ds.image = Some(csv_shape(*shape, ds.features).map_err(spec_err)?);
            }
            (
                ds,
                Normalisation::Standardise,
                format!("csv {}", path.display()),
            )
        }
        DataSpec::Idx {
            images,
            labels,
            layout,
        } => {
            let (ds, scale, note) = idx::load(images, labels, *layout, flag)?;
            let note = if note.is_empty() {
                note
            } else {
                format!(" ({note})")
            };
            (ds, scale, format!("idx {}{note}", images.display()))
        }
        DataSpec::Synthetic { n, d, c } => (
            synthetic::teacher(*n, *d, *c, seed).map_err(spec_err)?,
            Normalisation::None,
            format!("synthetic teacher (seed {seed})"),
        ),
        DataSpec::SyntheticImages { n, c, h, w, k } => (
            synthetic_images::generate(*n, [*c, *h, *w], *k, seed).map_err(spec_err)?,
            Normalisation::None,
            format!("synthetic images (seed {seed})"),
        ),
        DataSpec::Cifar { .. } | DataSpec::Images { .. } => {
            unreachable!("picture sets are read by image_sets")
        }
    })
}

/// A set that holds its samples ready, with its validation set (`--val-data` or a seeded
/// split), normalised; the picture flags are refused for it.
pub(super) fn load(
    spec: &DataSpec,
    opts: &DataOptions,
    seed: u64,
) -> Result<LoadedData, DataError> {
    let picture_flags = [
        ("--image-size", opts.image_size.is_some()),
        ("--augment", opts.augment != Augment::default()),
        ("--normalize", opts.normalize != NormSpec::Auto),
    ];
    if let Some((flag, _)) = picture_flags.iter().find(|f| f.1) {
        return Err(DataError::Spec {
            spec: spec.to_string(),
            msg: format!("{flag} applies to picture data (cifar10:DIR, cifar100:DIR, images:DIR); these samples are used as given"),
        });
    }
    let (full, norm, what) = read_table(spec, seed, "--data")?;
    if let Some(&only) = full.y.first().filter(|&&l| full.y.iter().all(|&y| y == l)) {
        let fix = match spec {
            DataSpec::Csv { .. } => {
                "; is the label in another column? (label=first, label=last or label=N)"
            }
            DataSpec::Idx { .. } => "; is the labels file the one that goes with the images?",
            _ => "",
        };
        return Err(DataError::Spec {
            spec: spec.to_string(),
            msg: format!(
                "every sample's label is {only}: a classifier needs two or more classes{fix}"
            ),
        });
    }
    let (mut train, mut val, split_text) = match &opts.val_data {
        Some(v) if opts.val_fraction.is_some_and(|f| f > 0.0) => {
            return Err(DataError::ValSpec {
                spec: v.to_string(),
                msg: "--val-data and --val-split both choose the validation set; give one".into(),
            })
        }
        Some(v) if opts.val_fraction == Some(0.0) => {
            let (train, val) = full.split(0.0, seed);
            let said = format!("no validation (--val-split 0: --val-data {v} is not read)");
            (train, val, said)
        }
        Some(v) => {
            let (val, _, vwhat) =
                read_table(v, seed, "--val-data").map_err(DataError::of_val_data)?;
            let max = val.y.iter().max().copied().unwrap_or(0) as usize;
            if val.features != full.features || max >= full.classes {
                return Err(DataError::ValSpec {
                    spec: v.to_string(),
                    msg: format!(
                        "it has {} features and labels up to {max}; the training set has {} features and {} classes",
                        val.features, full.features, full.classes
                    ),
                });
            }
            // (the training data again: a check of fit, not of what was not seen)
            let same = match v.absolute() == spec.absolute() {
                true => ", the training data itself: it shows how the training set is fit, not how the model does on data it has not seen",
                false => "",
            };
            let text = format!("validation {vwhat}: {} samples{same}", val.len());
            (full.clone(), val, text)
        }
        None => {
            let f = opts.val_fraction.unwrap_or(DEFAULT_VAL_FRACTION);
            let (train, val) = full.split(f, seed);
            let text = super::split_text(train.len(), val.len(), f, seed);
            (train, val, text)
        }
    };
    let norm_text = normalise(&mut train, &mut val, &norm);
    // labels are class numbers 0..classes-1: most of them unused says they may be something else
    let used = full
        .y
        .iter()
        .collect::<std::collections::HashSet<_>>()
        .len();
    let from_one = full.y.iter().min() == Some(&1) && full.classes > 2;
    let sparse = match (used * 2 < full.classes, from_one) {
        (true, _) => format!(
            " (labels run to {} but only {used} values occur: the output layer has a unit for each number; labels are class numbers 0..N-1)",
            full.classes - 1
        ),
        (false, true) => format!(
            " (labels run from 1 to {}: no sample is class 0, whose unit learns nothing; labels are class numbers 0..N-1, so numbering from 1 costs only that unit)",
            full.classes - 1
        ),
        (false, false) => String::new(),
    };
    let description = format!(
        "{what}: {}, {} features{}, {} classes{sparse}; {split_text}; inputs {norm_text}",
        crate::text::counted(full.len(), "sample"),
        full.features,
        full.image
            .map_or(String::new(), |s| format!(" ({})", shape_text(&s))),
        full.classes,
    );
    Ok(LoadedData {
        train,
        val,
        description,
        notes: Vec::new(),
    })
}

fn normalise(train: &mut Dataset, val: &mut Dataset, norm: &Normalisation) -> String {
    match norm {
        Normalisation::None => "used as given (no scaling)".into(),
        Normalisation::Scale(f) => {
            for v in train.x.iter_mut().chain(val.x.iter_mut()) {
                *v *= f;
            }
            format!("scaled x*{f} to [0,1]", f = format_factor(*f))
        }
        Normalisation::Standardise => {
            let d = train.features;
            let n = train.len().max(1) as f64;
            let mut mean = vec![0.0f64; d];
            let mut sq = vec![0.0f64; d];
            for row in train.x.chunks_exact(d) {
                for j in 0..d {
                    mean[j] += row[j] as f64;
                    sq[j] += (row[j] as f64) * (row[j] as f64);
                }
            }
            let stats: Vec<(f64, f64)> = (0..d)
                .map(|j| {
                    let m = mean[j] / n;
                    let var = (sq[j] / n - m * m).max(0.0);
                    let sd = if var > 1e-12 { var.sqrt() } else { 1.0 };
                    (m, 1.0 / sd)
                })
                .collect();
            // in f64: values near f32's limits (x - mean) would overflow to infinity in f32; a
            // validation value millions of deviations out is held to f32's range
            let most = f32::MAX as f64;
            for row in train.x.chunks_exact_mut(d).chain(val.x.chunks_exact_mut(d)) {
                for (v, (m, inv)) in row.iter_mut().zip(&stats) {
                    *v = ((*v as f64 - m) * inv).clamp(-most, most) as f32;
                }
            }
            "standardised per feature, (x-mean)/std from the train split".into()
        }
    }
}

fn format_factor(f: f32) -> String {
    let inv = 1.0 / f;
    if (inv - inv.round()).abs() < 1e-4 {
        format!("1/{}", inv.round())
    } else {
        format!("{f}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(f: f64) -> DataOptions {
        DataOptions {
            val_fraction: Some(f),
            ..DataOptions::default()
        }
    }

    #[test]
    fn digits_loads_with_expected_shape_and_split() {
        let d = load(&DataSpec::Digits, &DataOptions::default(), 0).unwrap();
        assert_eq!(d.train.len() + d.val.len(), 1797);
        assert_eq!(d.val.len(), 359);
        assert_eq!((d.train.features, d.train.classes), (64, 10));
        assert!(d.train.x.iter().all(|v| (0.0..=1.0).contains(v)));
        assert!(d.description.contains("x*1/16"), "{}", d.description);
        assert_eq!(
            (d.train.image, d.val.image),
            (Some([1, 8, 8]), Some([1, 8, 8]))
        );
        assert!(
            d.description
                .contains("1797 samples, 64 features (1x8x8), 10 classes"),
            "{}",
            d.description
        );
        // the same seed gives the same split; another seed a different one
        let again = load(&DataSpec::Digits, &DataOptions::default(), 0).unwrap();
        assert_eq!(again.val.y, d.val.y);
        assert_ne!(
            load(&DataSpec::Digits, &DataOptions::default(), 1)
                .unwrap()
                .val
                .y,
            d.val.y
        );
    }

    #[test]
    fn a_file_whose_every_label_is_the_same_is_refused_with_the_likely_cause() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("one.csv");
        // (the label read from a column of features that are all 1)
        std::fs::write(&f, "0.5,1\n0.25,1\n0.75,1\n").unwrap();
        let spec: DataSpec = format!("csv:{}", f.display()).parse().unwrap();
        let e = load(&spec, &split(0.0), 0).err().unwrap().to_string();
        assert!(
            e.contains("every sample's label is 1") && e.contains("label=first"),
            "{e}"
        );
    }

    #[test]
    fn labels_that_are_not_class_numbers_are_said() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("ids.csv");
        std::fs::write(&f, "0.5,0\n0.25,6000\n0.75,0\n").unwrap();
        let spec: DataSpec = format!("csv:{}", f.display()).parse().unwrap();
        let d = load(&spec, &split(0.0), 0).unwrap();
        assert!(
            d.description
                .contains("6001 classes (labels run to 6000 but only 2 values occur"),
            "{}",
            d.description
        );
        // numbered from 1: said, as the output layer's idle unit 0
        std::fs::write(&f, "0.5,1\n0.25,3\n0.75,2\n").unwrap();
        let d = load(&spec, &split(0.0), 0).unwrap();
        assert!(
            d.description
                .contains("4 classes (labels run from 1 to 3: no sample is class 0"),
            "{}",
            d.description
        );
        // class numbers as they should be: nothing said
        std::fs::write(&f, "0.5,0\n0.25,2\n0.75,1\n").unwrap();
        let d = load(&spec, &split(0.0), 0).unwrap();
        assert!(!d.description.contains("values occur"), "{}", d.description);
        assert!(!d.description.contains("run from 1"), "{}", d.description);
    }

    #[test]
    fn val_data_that_val_split_0_leaves_unread_is_said() {
        let opts = DataOptions {
            val_data: Some("csv:nowhere.csv".parse().unwrap()),
            ..split(0.0)
        };
        let d = load(&DataSpec::Digits, &opts, 0).unwrap();
        assert_eq!(d.val.len(), 0);
        assert!(
            d.description
                .contains("no validation (--val-split 0: --val-data csv:nowhere.csv"),
            "{}",
            d.description
        );
    }

    #[test]
    fn validating_on_the_training_data_is_said() {
        let opts = DataOptions {
            val_data: Some(DataSpec::Digits),
            ..DataOptions::default()
        };
        let d = load(&DataSpec::Digits, &opts, 0).unwrap();
        assert!(
            d.description.contains("the training data itself"),
            "{}",
            d.description
        );
    }

    #[test]
    fn too_large_a_synthetic_set_names_the_spec() {
        let spec: DataSpec = "synthetic:18446744073709551615,2,2".parse().unwrap();
        let e = load(&spec, &split(0.1), 0).err().unwrap().to_string();
        assert!(
            e.starts_with("--data synthetic:18446744073709551615,2,2: ")
                && e.contains("use fewer samples or features"),
            "{e}"
        );
    }

    #[test]
    fn standardise_uses_train_statistics() {
        let mut train = Dataset {
            features: 1,
            classes: 2,
            image: None,
            x: vec![1.0, 3.0],
            y: vec![0, 1],
            pictures: None,
        };
        let mut val = Dataset {
            features: 1,
            classes: 2,
            image: None,
            x: vec![5.0],
            y: vec![0],
            pictures: None,
        };
        normalise(&mut train, &mut val, &Normalisation::Standardise);
        assert_eq!(train.x, vec![-1.0, 1.0]);
        assert_eq!(val.x, vec![3.0]);
        // values at f32's limits stay finite (their difference overflowed f32)
        let mut train = Dataset {
            x: vec![-3e38, 3e38, 3e38, -3e38],
            y: vec![0, 1, 1, 0],
            ..train
        };
        let mut val = Dataset {
            x: vec![f32::MAX],
            ..val
        };
        normalise(&mut train, &mut val, &Normalisation::Standardise);
        assert_eq!(train.x, vec![-1.0, 1.0, 1.0, -1.0]);
        assert!(
            val.x[0].is_finite() && (val.x[0] - 1.134).abs() < 1e-3,
            "{:?}",
            val.x
        );
    }

    #[test]
    fn a_csv_shape_must_match_the_features() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pixels.csv");
        std::fs::write(&f, "0,1,2,3,4,5,6,7,8\n1,8,7,6,5,4,3,2,1\n").unwrap();
        let spec = |opts: &str| -> DataSpec {
            format!("csv:{},label=first{opts}", f.display())
                .parse()
                .unwrap()
        };
        let d = load(&spec(",shape=1x2x4"), &split(0.5), 0).unwrap();
        assert_eq!(
            (d.train.image, d.val.image),
            (Some([1, 2, 4]), Some([1, 2, 4]))
        );
        assert!(
            d.description.contains("8 features (1x2x4)"),
            "{}",
            d.description
        );
        let d = load(&spec(""), &split(0.5), 0).unwrap();
        assert_eq!(d.train.image, None);
        assert!(
            d.description.contains("8 features, 2 classes"),
            "{}",
            d.description
        );
        let e = load(&spec(",shape=1x3x3"), &split(0.5), 0)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.starts_with(&format!(
                "--data {}: shape=1x3x3 is 9 values per image but the rows have 8 features",
                spec(",shape=1x3x3")
            )) && e.contains("give a shape of 8 values"),
            "{e}"
        );
        let e = csv_shape([1, 4, 4], 16 * 3).unwrap_err();
        assert!(e.contains("give a shape of 48 values, or"), "{e}");
        let e = csv_shape([1, 3, 3], 16).unwrap_err();
        assert!(e.contains("(e.g. shape=1x4x4)"), "{e}");
    }

    #[test]
    fn synthetic_images_keep_their_shape_through_the_split() {
        let spec: DataSpec = "synthetic-images:50,3,4,5,2".parse().unwrap();
        let d = load(&spec, &split(0.2), 3).unwrap();
        assert_eq!((d.train.len(), d.val.len()), (40, 10));
        assert_eq!(
            (d.train.image, d.val.image),
            (Some([3, 4, 5]), Some([3, 4, 5]))
        );
        assert_eq!((d.train.features, d.train.classes), (60, 2));
        assert!(
            d.description.starts_with(
                "synthetic images (seed 3): 50 samples, 60 features (3x4x5), 2 classes"
            ),
            "{}",
            d.description
        );
        let spec: DataSpec = "synthetic-images:18446744073709551615,1,28,28,10"
            .parse()
            .unwrap();
        let e = load(&spec, &split(0.1), 0).err().unwrap().to_string();
        assert!(
            e.starts_with("--data synthetic-images:18446744073709551615,1,28,28,10: ")
                && e.contains("use fewer samples or smaller images"),
            "{e}"
        );
    }
}
