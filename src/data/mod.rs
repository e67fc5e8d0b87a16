//! Datasets: the embedded digits set, CSV, IDX (MNIST format), a seeded synthetic teacher set,
//! seeded synthetic images, CIFAR and image folders; image shapes; the seeded train/validation
//! split and the input normalisation. Picture sets (CIFAR, folders) make their samples when a
//! batch is cut (decode, augment, normalise), the others hold theirs ready.

mod cifar;
mod csv;
mod dataset;
mod decode;
mod download;
mod folder;
mod header;
pub mod held_out;
pub mod host_memory;
mod idx;
mod image_shape;
mod labels;
mod overlap;
mod picture;
mod picture_set;
mod picture_specs;
mod spec;
mod split_classes;
mod synthetic;
mod synthetic_images;
mod table;
mod transform;

use std::path::PathBuf;

pub use csv::LabelColumn;
use dataset::finish;
pub use dataset::{Dataset, MicroBatch};
pub use image_shape::{parse_shape, shape_text, shape_values, ImageLayout, MAX_IMAGE_VALUES};
pub use overlap::shared_rows;
pub use picture_set::{ImageSet, LostClasses, Pictures};
pub use spec::DataSpec;
pub use table::Normalisation;
pub use transform::{Augment, NormSpec};

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("{flag}: cannot read {path} ({source}); check the path")]
    Io {
        path: PathBuf,
        source: std::io::Error,
        /// The flag that named the file: `--data`, or `--val-data` (`of_val_data`).
        flag: &'static str,
    },
    #[error("{path}: {msg}")]
    Format { path: PathBuf, msg: String },
    #[error("--data {spec}: {msg}")]
    Spec { spec: String, msg: String },
    #[error("--val-data {spec}: {msg}")]
    ValSpec { spec: String, msg: String },
}

impl DataError {
    /// The same problem, found in `--val-data`'s set.
    pub fn of_val_data(self) -> DataError {
        match self {
            DataError::Spec { spec, msg } => DataError::ValSpec { spec, msg },
            DataError::Io { path, source, .. } => DataError::Io {
                path,
                source,
                flag: "--val-data",
            },
            e => e,
        }
    }
}

impl DataError {
    /// A file `flag` named could not be read.
    pub fn read(e: crate::files::read::ReadError, flag: &'static str) -> DataError {
        match e {
            crate::files::read::ReadError::Io { path, source } => {
                DataError::Io { path, source, flag }
            }
            crate::files::read::ReadError::Refused { path, problem } => {
                DataError::Format { path, msg: problem }
            }
        }
    }
}

impl From<crate::files::read::ReadError> for DataError {
    fn from(e: crate::files::read::ReadError) -> Self {
        DataError::read(e, "--data")
    }
}

/// A loaded dataset, split and normalised, with a one-line description for the log and notes
/// (a folder's classes, files skipped, whether decoded images are kept).
pub struct LoadedData {
    pub train: Dataset,
    pub val: Dataset,
    pub description: String,
    /// The training set's notes, then the validation set's (from `val_notes` on).
    pub notes: Vec<String>,
    /// Where the notes of the validation set (read apart: its own folder, `--val-data`) begin.
    pub val_notes: usize,
    /// Where validation comes from, as `description` says it: `split 80 train / 20 val (seed 1)`,
    /// `validation images cats/val: 400 images`.
    pub val_text: String,
    pub recipe: InputRecipe,
}

/// How a sample's values are made from the data for inference (validation's way), for those
/// who use the weights elsewhere: a checkpoint records it, an export says it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InputRecipe {
    /// In words: `shorter side to 224, centre crop 224x224, normalised per channel (x/255-mean)/std
    /// with mean [..] std [..]`, `scaled x*1/16 to [0,1]`.
    pub text: String,
    /// A table's values become (x - shift) * scale, per feature (one of each: every feature
    /// alike); None where they are used as given, and for pictures.
    pub affine: Option<Affine>,
    /// A sample's shape, [C, H, W], where the samples are pictures (or a table's rows read as
    /// pictures).
    pub sample: Option<[usize; 3]>,
}

impl InputRecipe {
    /// Where a picture recipe's words turn from how the pictures are sized to how their
    /// values are made.
    pub const NORMALISED: &'static str = "normalised per channel";

    /// The part of recipe words `text` that says how a picture's values are made, apart from
    /// how it is sized and cropped (None for a recipe of no pictures).
    pub fn values_part(text: &str) -> Option<&str> {
        text.find(Self::NORMALISED).map(|i| &text[i..])
    }
}

/// Per-feature (shift, scale): a value becomes (x - shift) * scale. In f64: a shift of a column
/// around 1.6e9 (a timestamp) in f32 would be off by up to 64, whole deviations of a column
/// that varies by a hundred.
pub type Affine = (Vec<f64>, Vec<f64>);

/// The share of a set without its own validation set that validates, unless `--val-split`.
pub const DEFAULT_VAL_FRACTION: f64 = 0.2;

/// Said after a validation set given as `--val-data` that is the training data again.
const TRAINING_DATA_ITSELF: &str = ", the training data itself: it shows how the training set is fit, not how the model does on data it has not seen";

/// How a seeded split cut `fraction` of a set: `split 80 train / 20 val (seed 1)`, and where
/// the share of a small set rounds to no sample, that it did and the share that gives one.
pub fn split_text(train: usize, val: usize, fraction: f64, seed: u64) -> String {
    let text = format!("split {train} train / {val} val (seed {seed})");
    let n = train + val;
    if val > 0 || fraction <= 0.0 || n < 2 {
        return text;
    }
    // (a share rounded up to hundredths, which rounds to one sample or more)
    let one = ((100.0 / n as f64).ceil() / 100.0).min(0.5);
    let fraction = crate::text::number(fraction);
    format!(
        "{text}: a share of {fraction} of {n} samples rounds to none, so nothing validates (--val-split {one} for one)"
    )
}

/// Which samples validate, and how pictures become samples.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DataOptions {
    /// `--val-split`: the share cut off for validation; `None`: the set's own validation set
    /// (CIFAR's test file, a folder's `val/`) or else [`DEFAULT_VAL_FRACTION`]. 0: none.
    pub val_fraction: Option<f64>,
    /// `--val-data`: a separate validation set.
    pub val_data: Option<DataSpec>,
    /// `--image-size`: pictures' shorter side resized to this, then a square crop.
    pub image_size: Option<usize>,
    /// `--augment`, for training samples.
    pub augment: Augment,
    /// `--normalize`.
    pub normalize: NormSpec,
    /// `--download`: fetch a CIFAR set that is not in its folder.
    pub download: bool,
}

impl DataOptions {
    /// No validation set (benchmarks, calibration).
    pub fn no_validation() -> DataOptions {
        DataOptions {
            val_fraction: Some(0.0),
            ..DataOptions::default()
        }
    }
}

/// The shape of `spec`'s samples where it is known before the set is loaded: from the spec
/// alone (a synthetic set's; pictures' at `--image-size`, `image_size`, CIFAR's own 32x32
/// without), else from a file's first bytes (a CSV's first row, with its `shape=` where that
/// fits the row; an IDX images file's header). None where only loading tells (a folder's
/// pictures at their own size).
pub fn sample_shape(spec: &DataSpec, image_size: Option<usize>) -> Option<crate::nn::shape::Shape> {
    use crate::nn::shape::Shape;
    let square = |s: usize| Shape::Image { c: 3, h: s, w: s };
    match (spec, image_size) {
        (DataSpec::Synthetic { d, .. }, _) => Some(Shape::Flat(*d)),
        (&DataSpec::SyntheticImages { c, h, w, .. }, None) => Some(Shape::Image { c, h, w }),
        (DataSpec::Cifar { .. }, s) => Some(square(s.unwrap_or(32))),
        (DataSpec::Images { .. }, Some(s)) => Some(square(s)),
        (
            DataSpec::Csv {
                path,
                label,
                header,
                shape,
            },
            _,
        ) => {
            let features = csv::features_of_first_row(path, *label, *header)?;
            match *shape {
                None => Some(Shape::Flat(features)),
                Some([c, h, w]) if c * h * w == features => Some(Shape::Image { c, h, w }),
                // (the load says the shape does not fit the rows)
                Some(_) => None,
            }
        }
        (DataSpec::Idx { images, layout, .. }, _) => idx::sample_shape(images, *layout),
        _ => None,
    }
}

/// Loads `spec` with its validation set (the set's own, `--val-data`, or a seeded split) and
/// normalises.
pub fn load(spec: &DataSpec, opts: &DataOptions, seed: u64) -> Result<LoadedData, DataError> {
    if let Some(f) = opts.val_fraction.filter(|f| !(0.0..1.0).contains(f)) {
        return Err(DataError::Spec {
            spec: spec.to_string(),
            msg: format!("--val-split {} is out of range: use a share from 0 (no validation) to below 1, e.g. 0.2", crate::text::number(f)),
        });
    }
    let cifar = |s: &DataSpec| matches!(s, DataSpec::Cifar { .. });
    if opts.download && !cifar(spec) && !opts.val_data.as_ref().is_some_and(cifar) {
        return Err(DataError::Spec {
            spec: spec.to_string(),
            msg: "--download fetches CIFAR-10 and CIFAR-100 (--data cifar10:DIR or cifar100:DIR); other data is read from where it is".into(),
        });
    }
    let loaded = match picture_specs::is_picture_spec(spec) {
        true => picture_specs::load(spec, opts, seed)?,
        false => table::load(spec, opts, seed)?,
    };
    split_classes::check(loaded, &spec.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_share_that_rounds_to_no_sample_says_so_and_what_gives_one() {
        assert_eq!(
            super::split_text(80, 20, 0.2, 1),
            "split 80 train / 20 val (seed 1)"
        );
        let t = super::split_text(4, 0, 0.1, 1);
        assert!(
            t.ends_with("a share of 0.1 of 4 samples rounds to none, so nothing validates (--val-split 0.25 for one)"),
            "{t}"
        );
        // (a tiny share as written, not three hundred zeros)
        let t = super::split_text(4, 0, 1e-300, 1);
        assert!(t.contains("a share of 1e-300 of 4 samples"), "{t}");
        for n in 2..300usize {
            let one: f64 = super::split_text(n, 0, 0.001, 1)
                .rsplit_once("--val-split ")
                .and_then(|(_, f)| f.trim_end_matches(" for one)").parse().ok())
                .unwrap();
            assert!((n as f64 * one).round() >= 1.0, "{n}: {one}");
        }
    }
}
