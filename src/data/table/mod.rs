//! The sets that hold their samples ready (the embedded digits, CSV, IDX, synthetic): read,
//! given a validation set, and normalised (`Normalisation`).

use super::image_shape::{shape_text, shape_values};
use super::{
    csv, idx, labels, overlap, synthetic, synthetic_images, DataError, DataOptions, DataSpec,
    Dataset,
};
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
pub(super) const DIGITS_CSV: &str = include_str!("../../../data/digits.csv");

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
pub(super) fn read(
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
            let line_one = csv::line_one_note(&text, *label, *header, &ds)
                .map_or(String::new(), |n| format!(" ({n})"));
            (
                ds,
                Normalisation::Standardise,
                format!("csv {}{line_one}", path.display()),
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
            unreachable!("picture sets are read by picture_specs")
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
    let (full, norm, what) = read(spec, seed, "--data")?;
    if let Some(&only) = full.y.first().filter(|&&l| full.y.iter().all(|&y| y == l)) {
        let only = match full.names.first() {
            Some(name) => format!("`{}`", crate::text::excerpt(name)),
            None => only.to_string(),
        };
        let fix = match spec {
            DataSpec::Csv { .. } => {
                "; is the label in another column? (label=first, label=last or label=N)"
            }
            DataSpec::Idx { .. } => "; is the labels file the one that goes with the images?",
            DataSpec::Synthetic { .. } | DataSpec::SyntheticImages { .. } => {
                "; a synthetic set this small drew the same label for every sample: give it more samples"
            }
            _ => "",
        };
        return Err(DataError::Spec {
            spec: spec.to_string(),
            msg: format!(
                "every sample's label is {only}: a classifier needs two or more classes{fix}"
            ),
        });
    }
    let (mut train, mut val, split_text) = cut(spec, &full, opts, seed)?;
    // validation samples that are training samples: repeated rows split apart, or samples of
    // the training set in --val-data's (the training file itself is said as such)
    let given = (opts.val_data.as_ref()).filter(|_| opts.val_fraction != Some(0.0));
    let itself = given.is_some_and(|v| v.absolute() == spec.absolute());
    let repeated = match itself || val.is_empty() {
        true => None,
        false => {
            let shared = overlap::shared_rows(&train, &val);
            let csv = matches!(spec, DataSpec::Csv { .. });
            overlap::validation_note(shared, val.len(), given.is_none(), csv)
        }
    };
    let (norm_text, affine) = normalise(&mut train, &mut val, &norm);
    let notes = (affine.as_ref())
        .filter(|_| matches!(norm, Normalisation::Standardise))
        .and_then(coarse_columns)
        .into_iter()
        .chain(repeated)
        .collect();
    // labels are class numbers 0..classes-1: most of them unused says they may be something else
    let used = full
        .y
        .iter()
        .collect::<std::collections::HashSet<_>>()
        .len();
    let from_one = full.y.iter().min() == Some(&1) && full.classes > 2;
    let sparse = match (used * 2 < full.classes, from_one) {
        (true, _) => format!(
            " (labels run to {} but only {used} values occur: the output layer has a unit for each number; labels are class numbers 0 to N-1)",
            full.classes - 1
        ),
        (false, true) => format!(
            " (labels run from 1 to {}: no sample is class 0, whose unit learns nothing; labels are class numbers 0 to N-1, so numbering from 1 costs only that unit)",
            full.classes - 1
        ),
        (false, false) => String::new(),
    };
    let description = format!(
        "{what}: {}, {}{}, {} classes{}{sparse}; {split_text}; inputs {norm_text}",
        crate::text::counted(full.len(), "sample"),
        crate::text::counted(full.features, "feature"),
        full.image
            .map_or(String::new(), |s| format!(" ({})", shape_text(&s))),
        full.classes,
        labels::listed(&full.names, full.len()),
    );
    Ok(LoadedData {
        train,
        val,
        description,
        notes,
        val_notes: 0,
        val_text: split_text,
        recipe: super::InputRecipe {
            text: norm_text,
            affine,
            sample: full.image,
        },
    })
}

/// The training and validation splits of the set `full` that `spec` read (`--val-data`'s set,
/// or a seeded split), raw, and where validation comes from in words.
fn cut(
    spec: &DataSpec,
    full: &Dataset,
    opts: &DataOptions,
    seed: u64,
) -> Result<(Dataset, Dataset, String), DataError> {
    Ok(match &opts.val_data {
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
        Some(v @ (DataSpec::Cifar { .. } | DataSpec::Images { .. })) => {
            // (synthetic pictures are made here, a table of pixel values: not a set of files)
            let made = match spec {
                DataSpec::SyntheticImages { .. } => {
                    "makes its pictures and validates on a split of them (--val-split)"
                }
                _ => "is not pictures",
            };
            return Err(DataError::ValSpec {
                spec: v.to_string(),
                msg: format!("is a set of picture files and --data {spec} {made}: give --val-data a set of the same kind (csv:FILE or idx:FILES), or train on picture files too"),
            });
        }
        Some(v) => {
            let (mut val, _, vwhat) =
                read(v, seed, "--val-data").map_err(DataError::of_val_data)?;
            let refused = |msg: String| DataError::ValSpec {
                spec: v.to_string(),
                msg,
            };
            // (its width first: a set of another width is another set, whatever its labels)
            if val.features != full.features {
                return Err(refused(format!(
                    "it has {} features; the training set has {}: is it a set of the same kind?",
                    val.features, full.features
                )));
            }
            labels::onto(&mut val, &full.names, "the training set's").map_err(refused)?;
            let max = val.y.iter().max().copied().unwrap_or(0) as usize;
            if max >= full.classes {
                return Err(refused(format!(
                    "it has labels up to {max}; the training set has {}: 0 to {}",
                    crate::text::counted(full.classes, "class"),
                    full.classes.saturating_sub(1)
                )));
            }
            // pictures of another shape (of as many values) would be read as the training set's
            let shapes = val.image.zip(full.image).filter(|(a, b)| a != b);
            if let Some((theirs, ours)) = shapes {
                return Err(DataError::ValSpec {
                    spec: v.to_string(),
                    msg: format!(
                        "its samples are pictures of {} and the training set's of {}: give --val-data the training set's shape (shape={}), or leave its shape out",
                        shape_text(&theirs),
                        shape_text(&ours),
                        shape_text(&ours)
                    ),
                });
            }
            // (the training data again: a check of fit, not of what was not seen)
            let same = match v.absolute() == spec.absolute() {
                true => super::TRAINING_DATA_ITSELF,
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
    })
}

/// Scales the samples as `norm` says: how, in words, and as (shift, scale) per feature.
fn normalise(
    train: &mut Dataset,
    val: &mut Dataset,
    norm: &Normalisation,
) -> (String, Option<super::Affine>) {
    match norm {
        Normalisation::None => ("used as given (no scaling)".into(), None),
        Normalisation::Scale(f) => {
            for v in train.x.iter_mut().chain(val.x.iter_mut()) {
                *v *= f;
            }
            let text = format!("scaled x*{f} to [0,1]", f = format_factor(*f));
            (text, Some((vec![0.0], vec![*f as f64])))
        }
        Normalisation::Standardise => {
            let d = train.features;
            let n = train.len().max(1) as f64;
            // (two passes: the mean, then the squares about it; one pass's sum of squares less
            // the squared mean cancels to nothing on a column far from 0, a timestamp's)
            let mut mean = vec![0.0f64; d];
            for row in train.x.chunks_exact(d) {
                for (m, v) in mean.iter_mut().zip(row) {
                    *m += *v as f64;
                }
            }
            mean.iter_mut().for_each(|m| *m /= n);
            let mut sq = vec![0.0f64; d];
            for row in train.x.chunks_exact(d) {
                for ((s, m), v) in sq.iter_mut().zip(&mean).zip(row) {
                    *s += (*v as f64 - m).powi(2);
                }
            }
            let stats: Vec<(f64, f64)> = (mean.iter().zip(&sq))
                .map(|(&m, s)| {
                    let var = s / n;
                    let sd = if var > 1e-12 { var.sqrt() } else { 1.0 };
                    (m, 1.0 / sd)
                })
                .collect();
            scale_rows(&mut train.x, d, &stats);
            scale_rows(&mut val.x, d, &stats);
            let text = "standardised per feature, (x-mean)/std from the train split".into();
            let shift = stats.iter().map(|s| s.0).collect();
            let scale = stats.iter().map(|s| s.1).collect();
            (text, Some((shift, scale)))
        }
    }
}

/// The columns standardised by `affine` that vary by less than 64 of the 32-bit float steps of
/// their values (a timestamp's 1.6e9 steps by 128: a column of them that varies by 90 is read
/// as a few values), said with the fix; none where there are none.
fn coarse_columns((shift, scale): &super::Affine) -> Option<String> {
    let step = |m: f64| 2f64.powi(m.abs().log2().floor() as i32 - 23);
    let coarse: Vec<(usize, f64, f64)> = (shift.iter().zip(scale).enumerate())
        .filter(|&(_, (&m, &k))| m != 0.0 && k != 1.0 && 1.0 / k < 64.0 * step(m))
        .map(|(j, (&m, &k))| (j, m, 1.0 / k))
        .collect();
    let &(j, m, sd) = coarse.first()?;
    let more = match coarse.len() {
        1 => String::new(),
        n => format!(" (and {} more)", n - 1),
    };
    Some(format!(
        "feature {j} (from 0, not counting the label column){more}: values around {m:.4e} vary by {sd:.3} (std), under 64 of the steps ({}) that 32-bit floats take there, so most of what it says is lost; subtract an offset in the file (x - {m:.0}) to keep it",
        step(m)
    ))
}

/// Each row of `x` (`d` features) made (x - shift) * scale: `by` one (shift, scale) per feature,
/// or one for every feature. In f64: values near f32's limits (x - mean) would overflow to
/// infinity in f32; a value millions of deviations out is held to f32's range.
pub(super) fn scale_rows(x: &mut [f32], d: usize, by: &[(f64, f64)]) {
    let most = f32::MAX as f64;
    for row in x.chunks_exact_mut(d) {
        for (j, v) in row.iter_mut().enumerate() {
            let (shift, scale) = by[if by.len() == 1 { 0 } else { j }];
            *v = ((*v as f64 - shift) * scale).clamp(-most, most) as f32;
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
mod tests;
