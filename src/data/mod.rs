//! Datasets: the embedded digits set, CSV, IDX (MNIST format) and a seeded synthetic teacher
//! set; the seeded train/validation split and the input normalisation.

mod csv;
mod idx;
pub mod read;
mod synthetic;

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::nn::rng::{tag, Rng};

pub use csv::LabelColumn;

/// One micro-batch: x[n, features] and labels[n].
#[derive(Clone, Debug, Default)]
pub struct MicroBatch {
    pub x: Vec<f32>,
    pub y: Vec<u32>,
    pub n: usize,
}

/// A labelled dataset: `x` is row-major [len, features], labels are 0..classes.
#[derive(Clone, Debug)]
pub struct Dataset {
    pub features: usize,
    pub classes: usize,
    pub x: Vec<f32>,
    pub y: Vec<u32>,
}

impl Dataset {
    pub fn len(&self) -> usize {
        self.y.len()
    }

    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }

    pub fn row(&self, i: usize) -> &[f32] {
        &self.x[i * self.features..(i + 1) * self.features]
    }

    fn subset(&self, idx: &[usize]) -> Dataset {
        let mut x = Vec::with_capacity(idx.len() * self.features);
        for &i in idx {
            x.extend_from_slice(self.row(i));
        }
        Dataset {
            features: self.features,
            classes: self.classes,
            x,
            y: idx.iter().map(|&i| self.y[i]).collect(),
        }
    }

    /// Seeded split: `val_fraction` of the samples (rounded) go to validation.
    pub fn split(&self, val_fraction: f64, seed: u64) -> (Dataset, Dataset) {
        let mut idx: Vec<usize> = (0..self.len()).collect();
        Rng::stream(seed, tag::SPLIT, 0).shuffle(&mut idx);
        let n_val = (self.len() as f64 * val_fraction).round() as usize;
        let (val, train) = idx.split_at(n_val);
        (self.subset(train), self.subset(val))
    }
}

/// How raw inputs are brought to a common scale (stated in the log).
#[derive(Clone, Debug, PartialEq)]
pub enum Normalisation {
    /// x * factor (known pixel range).
    Scale(f32),
    /// Per-feature (x - mean) / std with statistics from the training split.
    Standardise,
    None,
}

/// What `--data` asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum DataSpec {
    Digits,
    Csv {
        path: PathBuf,
        label: LabelColumn,
        header: bool,
    },
    Idx {
        images: PathBuf,
        labels: PathBuf,
    },
    Synthetic {
        n: usize,
        d: usize,
        c: usize,
    },
}

const DATA_HELP: &str =
    "use digits, csv:PATH[,label=last|first|N][,header], idx:IMAGES,LABELS or synthetic:N,D,C";

impl FromStr for DataSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, rest) = s.split_once(':').unwrap_or((s, ""));
        match kind {
            "digits" if rest.is_empty() => Ok(DataSpec::Digits),
            "csv" => {
                let mut parts = rest.split(',');
                let path = parts.next().filter(|p| !p.is_empty()).ok_or(format!("data `{s}`: missing path; {DATA_HELP}"))?;
                let (mut label, mut header) = (LabelColumn::Last, false);
                for opt in parts {
                    match opt.split_once('=') {
                        Some(("label", v)) => label = v.parse().map_err(|e| format!("data `{s}`: {e}"))?,
                        None if opt == "header" => header = true,
                        _ => return Err(format!("data `{s}`: unknown CSV option `{opt}`; {DATA_HELP}")),
                    }
                }
                Ok(DataSpec::Csv { path: path.into(), label, header })
            }
            "idx" => match rest.split_once(',') {
                Some((i, l)) if !i.is_empty() && !l.is_empty() => Ok(DataSpec::Idx { images: i.into(), labels: l.into() }),
                _ => Err(format!("data `{s}`: idx needs two files, idx:IMAGES,LABELS (e.g. idx:train-images-idx3-ubyte.gz,train-labels-idx1-ubyte.gz)")),
            },
            "synthetic" => {
                let nums: Result<Vec<usize>, _> = rest.split(',').map(|p| p.trim().parse::<usize>()).collect();
                match nums.as_deref() {
                    Ok(&[n, d, c]) if n >= 2 && d >= 1 && (2..=65536).contains(&c) => Ok(DataSpec::Synthetic { n, d, c }),
                    _ => Err(format!("data `{s}`: synthetic needs N,D,C (samples >= 2, features >= 1, 2..65536 classes), e.g. synthetic:60000,784,10")),
                }
            }
            _ => Err(format!("unknown data `{s}`: {DATA_HELP}")),
        }
    }
}

impl DataSpec {
    /// A short name for the data: `digits`, a file's stem, or `synthetic`.
    pub fn short_name(&self) -> String {
        let stem = |p: &std::path::Path| {
            p.file_stem()
                .map_or("data".into(), |s| s.to_string_lossy().into_owned())
        };
        match self {
            DataSpec::Digits => "digits".into(),
            DataSpec::Csv { path, .. } => stem(path),
            DataSpec::Idx { images, .. } => stem(images),
            DataSpec::Synthetic { .. } => "synthetic".into(),
        }
    }
}

impl fmt::Display for DataSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataSpec::Digits => f.write_str("digits"),
            DataSpec::Csv {
                path,
                label,
                header,
            } => {
                write!(
                    f,
                    "csv:{},label={label}{}",
                    path.display(),
                    if *header { ",header" } else { "" }
                )
            }
            DataSpec::Idx { images, labels } => {
                write!(f, "idx:{},{}", images.display(), labels.display())
            }
            DataSpec::Synthetic { n, d, c } => write!(f, "synthetic:{n},{d},{c}"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("cannot read {path}: {source}; check the path given to --data")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {msg}")]
    Format { path: PathBuf, msg: String },
    #[error("--data {spec}: {msg}")]
    Spec { spec: String, msg: String },
}

impl From<read::ReadError> for DataError {
    fn from(e: read::ReadError) -> Self {
        match e {
            read::ReadError::Io { path, source } => DataError::Io { path, source },
            read::ReadError::Refused { path, problem } => DataError::Format { path, msg: problem },
        }
    }
}

/// A loaded dataset, split and normalised, with a one-line description for the log.
pub struct LoadedData {
    pub train: Dataset,
    pub val: Dataset,
    pub description: String,
}

/// The embedded digits set (see data/README.md for its origin and licence).
const DIGITS_CSV: &str = include_str!("../../data/digits.csv");

/// Loads `spec`, splits off `val_fraction` for validation (seeded) and normalises.
pub fn load(spec: &DataSpec, val_fraction: f64, seed: u64) -> Result<LoadedData, DataError> {
    let (full, norm, what) = match spec {
        DataSpec::Digits => {
            let ds = csv::parse(DIGITS_CSV, LabelColumn::Last, false).map_err(|msg| {
                DataError::Format {
                    path: "embedded digits".into(),
                    msg,
                }
            })?;
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
        } => {
            let text = csv::read(path)?;
            let ds = csv::parse(&text, *label, *header).map_err(|msg| DataError::Format {
                path: path.clone(),
                msg,
            })?;
            (
                ds,
                Normalisation::Standardise,
                format!("csv {}", path.display()),
            )
        }
        DataSpec::Idx { images, labels } => {
            let (ds, scale) = idx::load(images, labels)?;
            (ds, scale, format!("idx {}", images.display()))
        }
        DataSpec::Synthetic { n, d, c } => (
            synthetic::teacher(*n, *d, *c, seed).map_err(|msg| DataError::Spec {
                spec: spec.to_string(),
                msg,
            })?,
            Normalisation::None,
            format!("synthetic teacher (seed {seed})"),
        ),
    };
    let (mut train, mut val) = full.split(val_fraction, seed);
    let norm_text = normalise(&mut train, &mut val, &norm);
    let description = format!(
        "{what}: {} samples, {} features, {} classes; split {} train / {} val (seed {seed}); inputs {norm_text}",
        full.len(),
        full.features,
        full.classes,
        train.len(),
        val.len()
    );
    Ok(LoadedData {
        train,
        val,
        description,
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
            let stats: Vec<(f32, f32)> = (0..d)
                .map(|j| {
                    let m = mean[j] / n;
                    let var = (sq[j] / n - m * m).max(0.0);
                    let sd = if var > 1e-12 { var.sqrt() } else { 1.0 };
                    (m as f32, (1.0 / sd) as f32)
                })
                .collect();
            for row in train.x.chunks_exact_mut(d).chain(val.x.chunks_exact_mut(d)) {
                for (v, (m, inv)) in row.iter_mut().zip(&stats) {
                    *v = (*v - m) * inv;
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

/// Checks the labels of a freshly parsed dataset and sets `classes`.
fn finish(features: usize, x: Vec<f32>, y: Vec<u32>) -> Result<Dataset, String> {
    if y.is_empty() {
        return Err("no samples found; the file is empty".into());
    }
    if y.len().checked_mul(features) != Some(x.len()) {
        return Err(format!(
            "{} values for {} samples of {features} features; the file is not a table of samples",
            x.len(),
            y.len()
        ));
    }
    let max = *y.iter().max().unwrap_or(&0);
    if max >= 65536 {
        return Err(format!(
            "label {max} is out of range: labels must be class indices 0..65535"
        ));
    }
    Ok(Dataset {
        features,
        classes: (max as usize + 1).max(2),
        x,
        y,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_loads_with_expected_shape_and_split() {
        let d = load(&DataSpec::Digits, 0.2, 0).unwrap();
        assert_eq!(d.train.len() + d.val.len(), 1797);
        assert_eq!(d.val.len(), 359);
        assert_eq!((d.train.features, d.train.classes), (64, 10));
        assert!(d.train.x.iter().all(|v| (0.0..=1.0).contains(v)));
        assert!(d.description.contains("x*1/16"), "{}", d.description);
        // the same seed gives the same split; another seed a different one
        let again = load(&DataSpec::Digits, 0.2, 0).unwrap();
        assert_eq!(again.val.y, d.val.y);
        assert_ne!(load(&DataSpec::Digits, 0.2, 1).unwrap().val.y, d.val.y);
    }

    #[test]
    fn parses_data_specs() {
        assert_eq!("digits".parse::<DataSpec>().unwrap(), DataSpec::Digits);
        assert_eq!(
            "csv:a.csv,label=first,header".parse::<DataSpec>().unwrap(),
            DataSpec::Csv {
                path: "a.csv".into(),
                label: LabelColumn::First,
                header: true
            }
        );
        assert_eq!(
            "synthetic:100,5,3".parse::<DataSpec>().unwrap(),
            DataSpec::Synthetic { n: 100, d: 5, c: 3 }
        );
        assert!("idx:onlyone"
            .parse::<DataSpec>()
            .unwrap_err()
            .contains("IMAGES,LABELS"));
        assert!("synthetic:1,2"
            .parse::<DataSpec>()
            .unwrap_err()
            .contains("N,D,C"));
        assert!("parquet:x"
            .parse::<DataSpec>()
            .unwrap_err()
            .contains("unknown data"));
        assert!("csv:x.csv,sep=;"
            .parse::<DataSpec>()
            .unwrap_err()
            .contains("sep=;"));
    }

    #[test]
    fn a_parsed_set_must_hold_rows_times_features_values() {
        assert!(finish(2, vec![0.0; 4], vec![0, 1]).is_ok());
        let e = finish(2, vec![0.0; 3], vec![0, 1]).unwrap_err();
        assert!(e.contains("3 values for 2 samples of 2 features"), "{e}");
        let e = finish(usize::MAX, vec![0.0], vec![0, 1]).unwrap_err();
        assert!(e.contains("1 values for 2 samples"), "{e}");
    }

    #[test]
    fn too_large_a_synthetic_set_names_the_spec() {
        let spec: DataSpec = "synthetic:18446744073709551615,2,2".parse().unwrap();
        let e = load(&spec, 0.1, 0).err().unwrap().to_string();
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
            x: vec![1.0, 3.0],
            y: vec![0, 1],
        };
        let mut val = Dataset {
            features: 1,
            classes: 2,
            x: vec![5.0],
            y: vec![0],
        };
        normalise(&mut train, &mut val, &Normalisation::Standardise);
        assert_eq!(train.x, vec![-1.0, 1.0]);
        assert_eq!(val.x, vec![3.0]);
    }
}
