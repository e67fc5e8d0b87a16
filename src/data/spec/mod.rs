//! What `--data` asks for: [`DataSpec`], its parsing, its spelling (Display round-trips) and a
//! short name for run names.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::cifar::Kind as CifarKind;
use super::image_shape::{parse_shape, shape_text, ImageLayout};
use super::synthetic_images;
use super::LabelColumn;

/// What `--data` asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum DataSpec {
    Digits,
    /// `csv:PATH[,label=last|first|N|NAME][,header][,shape=CxHxW]`
    Csv {
        path: PathBuf,
        label: LabelColumn,
        header: bool,
        /// Each row's features are an image of this C x H x W (row-major CHW).
        shape: Option<[usize; 3]>,
    },
    /// `idx:IMAGES,LABELS[,layout=nchw|nhwc]`
    Idx {
        images: PathBuf,
        labels: PathBuf,
        /// Where a 4-d images file keeps its channels; `None`: guessed from the header.
        layout: Option<ImageLayout>,
    },
    /// `synthetic:N,D,C`: N samples of D features in C classes.
    Synthetic {
        n: usize,
        d: usize,
        c: usize,
    },
    /// `synthetic-images:N,C,H,W,K`: N images of C x H x W in K classes.
    SyntheticImages {
        n: usize,
        c: usize,
        h: usize,
        w: usize,
        k: usize,
    },
    /// `cifar10:DIR`, `cifar100:DIR[,labels=coarse]`: the official binary files.
    Cifar {
        dir: PathBuf,
        kind: CifarKind,
    },
    /// `images:DIR`: a folder of class folders of JPEG/PNG files (or DIR/train + DIR/val).
    Images {
        dir: PathBuf,
    },
}

/// Folder names of a set's splits rather than of a set.
const SPLIT_FOLDERS: [&str; 6] = ["train", "training", "val", "valid", "validation", "test"];

const DATA_HELP: &str = "use digits, cifar10:DIR, cifar100:DIR[,labels=coarse], images:DIR, csv:PATH[,label=last|first|N|NAME][,header][,shape=CxHxW], idx:IMAGES,LABELS[,layout=nchw|nhwc], synthetic:N,D,C or synthetic-images:N,C,H,W,K";

/// The first path of `parts` (the comma-separated pieces of a data spec), and the pieces after
/// it: the longest run of pieces from the start that names something on disk, so a path with
/// commas in it is one path (`csv:exports/a,b.csv`); the first piece where none does (the
/// error then names it).
fn path_first<'a, 'p>(parts: &'p [&'a str]) -> (String, &'p [&'a str]) {
    let k = (1..=parts.len())
        .rev()
        .find(|&k| Path::new(&parts[..k].join(",")).exists())
        .unwrap_or(1.min(parts.len()));
    (parts[..k].join(","), &parts[k..])
}

/// The error for `opt` following `path`, no option of `what`: where `path` names nothing, the
/// likely cause is a path with a comma that does not exist (`csv:a,b.csv`), so it says that
/// (an `opt` with `=` in it was meant as an option).
fn unknown_option(s: &str, path: &str, opt: &str, what: &str, help: &str) -> String {
    if opt.contains('=') || path.is_empty() {
        format!("data `{s}`: unknown {what} `{opt}`; {help}")
    } else if Path::new(path).exists() {
        format!("data `{s}`: unknown {what} `{opt}` (nor is there a file `{path},{opt}`); {help}")
    } else {
        format!("data `{s}`: neither `{path},{opt}` nor `{path}` exists (and `{opt}` is no {what}); {help}")
    }
}

/// Options given twice are refused (the last would win unsaid): each option's key is kept in
/// `seen`.
fn once<'a>(s: &str, seen: &mut Vec<&'a str>, opt: &'a str) -> Result<(), String> {
    let key = opt.split_once('=').map_or(opt, |(k, _)| k);
    if seen.contains(&key) {
        return Err(format!("data `{s}`: `{key}` is given twice; give it once"));
    }
    seen.push(key);
    Ok(())
}

fn parse_cifar(s: &str, rest: &str, hundred: bool) -> Result<DataSpec, String> {
    let parts: Vec<&str> = rest.split(',').collect();
    let (dir, parts) = path_first(&parts);
    if dir.is_empty() {
        return Err(format!(
            "data `{s}`: missing folder, e.g. cifar10:data/cifar-10-batches-bin"
        ));
    }
    let (mut coarse, mut seen) = (false, Vec::new());
    for &opt in parts {
        once(s, &mut seen, opt)?;
        match opt {
            "labels=coarse" if hundred => coarse = true,
            "labels=fine" if hundred => coarse = false,
            _ => {
                let known = if hundred {
                    "labels=fine|coarse"
                } else {
                    "none (labels= is cifar100's)"
                };
                let help = format!("options: {known}");
                return Err(unknown_option(s, &dir, opt, "option", &help));
            }
        }
    }
    let kind = if hundred {
        CifarKind::Hundred { coarse }
    } else {
        CifarKind::Ten
    };
    Ok(DataSpec::Cifar {
        dir: dir.into(),
        kind,
    })
}

fn parse_csv(s: &str, rest: &str) -> Result<DataSpec, String> {
    let parts: Vec<&str> = rest.split(',').collect();
    let (path, parts) = path_first(&parts);
    if path.is_empty() {
        return Err(format!("data `{s}`: missing path; {DATA_HELP}"));
    }
    let (mut label, mut header, mut shape) = (LabelColumn::Last, false, None);
    let (mut seen, mut named) = (Vec::new(), None);
    for &opt in parts {
        once(s, &mut seen, opt)?;
        match opt.split_once('=') {
            Some(("label", v)) => match v.parse() {
                Ok(l) => label = l,
                Err(_) if !v.trim().is_empty() => named = Some(v),
                Err(e) => return Err(format!("data `{s}`: {e}")),
            },
            Some(("shape", v)) => {
                shape = Some(parse_shape(v).map_err(|e| format!("data `{s}`: {e}"))?)
            }
            None if opt == "header" => header = true,
            _ => return Err(unknown_option(s, &path, opt, "CSV option", DATA_HELP)),
        }
    }
    // a column named by the header: its position, and line 1 is the header
    if let Some(name) = named {
        label = super::csv::column_named(Path::new(&path), name)
            .map(LabelColumn::Index)
            .map_err(|e| format!("data `{s}`: label={name}: {e}"))?;
        header = true;
    }
    Ok(DataSpec::Csv {
        path: path.into(),
        label,
        header,
        shape,
    })
}

fn parse_idx(s: &str, rest: &str) -> Result<DataSpec, String> {
    let usage = "idx needs two files, idx:IMAGES,LABELS[,layout=nchw|nhwc] (e.g. idx:train-images-idx3-ubyte.gz,train-labels-idx1-ubyte.gz)";
    let parts: Vec<&str> = rest.split(',').collect();
    let (images, parts) = path_first(&parts);
    let (labels, parts) = path_first(parts);
    if images.is_empty() || labels.is_empty() {
        return Err(format!("data `{s}`: {usage}"));
    }
    let (mut layout, mut seen) = (None, Vec::new());
    for opt in parts {
        once(s, &mut seen, opt)?;
        match opt.split_once('=') {
            Some(("layout", v)) => {
                layout = Some(v.parse().map_err(|e| format!("data `{s}`: {e}"))?)
            }
            _ => return Err(unknown_option(s, &labels, opt, "idx option", usage)),
        }
    }
    Ok(DataSpec::Idx {
        images: images.into(),
        labels: labels.into(),
        layout,
    })
}

/// The whole numbers of `rest`, comma-separated; the error names the first that is not one.
fn numbers(rest: &str) -> Result<Vec<usize>, String> {
    rest.split(',')
        .map(|p| {
            p.trim()
                .parse::<usize>()
                .map_err(|_| format!("`{}` is not a whole number", p.trim()))
        })
        .collect()
}

fn parse_synthetic_images(s: &str, rest: &str) -> Result<DataSpec, String> {
    let usage = "synthetic-images needs N,C,H,W,K (samples, channels, height, width, classes), e.g. synthetic-images:60000,1,28,28,10";
    let nums = numbers(rest).map_err(|e| format!("data `{s}`: {e}; {usage}"))?;
    let &[n, c, h, w, k] = nums.as_slice() else {
        return Err(format!("data `{s}`: {} numbers given; {usage}", nums.len()));
    };
    synthetic_images::check_spec(n, c, h, w, k).map_err(|e| format!("data `{s}`: {e}"))?;
    Ok(DataSpec::SyntheticImages { n, c, h, w, k })
}

impl FromStr for DataSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, rest) = s.split_once(':').unwrap_or((s, ""));
        // (a kind in capitals is the kind: `CSV:data.csv`)
        match kind.to_ascii_lowercase().as_str() {
            "digits" if rest.is_empty() => Ok(DataSpec::Digits),
            "csv" => parse_csv(s, rest),
            "idx" => parse_idx(s, rest),
            "synthetic" => match numbers(rest).as_deref() {
                Ok(&[n, d, c]) if n >= 2 && d >= 1 && (2..=65536).contains(&c) => {
                    Ok(DataSpec::Synthetic { n, d, c })
                }
                _ => Err(format!("data `{s}`: synthetic needs N,D,C (samples >= 2, features >= 1, 2 to 65536 classes), e.g. synthetic:60000,784,10")),
            },
            "synthetic-images" => parse_synthetic_images(s, rest),
            "cifar10" => parse_cifar(s, rest, false),
            "cifar100" => parse_cifar(s, rest, true),
            "images" if !rest.is_empty() => Ok(DataSpec::Images { dir: rest.into() }),
            "images" => Err(format!("data `{s}`: missing folder, e.g. images:photos (photos/cat/*.jpg, photos/dog/*.jpg)")),
            // a bare path: the kind it is likely to be
            _ if Path::new(s).is_dir() => Err(format!(
                "unknown data `{s}`: a folder is given as images:{s} (its class folders: {s}/cat/*.jpg, {s}/dog/*.png), or cifar10:{s} for CIFAR's binary files"
            )),
            _ if s.to_lowercase().ends_with(".csv") => Err(format!(
                "unknown data `{s}`: a CSV file is given as csv:{s} (the label in the last column; csv:{s},label=first,header for others)"
            )),
            _ => Err(format!("unknown data `{s}`: {DATA_HELP}")),
        }
    }
}

impl DataSpec {
    /// The same data with its paths absolute (against the working directory), as a run's
    /// checkpoints record it: a run resumed from elsewhere finds the same files.
    pub fn absolute(&self) -> DataSpec {
        let abs = |p: &PathBuf| std::path::absolute(p).unwrap_or_else(|_| p.clone());
        match self {
            DataSpec::Csv {
                path,
                label,
                header,
                shape,
            } => DataSpec::Csv {
                path: abs(path),
                label: *label,
                header: *header,
                shape: *shape,
            },
            DataSpec::Idx {
                images,
                labels,
                layout,
            } => DataSpec::Idx {
                images: abs(images),
                labels: abs(labels),
                layout: *layout,
            },
            DataSpec::Cifar { dir, kind } => DataSpec::Cifar {
                dir: abs(dir),
                kind: *kind,
            },
            DataSpec::Images { dir } => DataSpec::Images { dir: abs(dir) },
            other => other.clone(),
        }
    }

    /// The files and folders it reads.
    pub fn paths(&self) -> Vec<&Path> {
        match self {
            DataSpec::Csv { path, .. } => vec![path],
            DataSpec::Idx { images, labels, .. } => vec![images, labels],
            DataSpec::Cifar { dir, .. } | DataSpec::Images { dir } => vec![dir],
            DataSpec::Digits | DataSpec::Synthetic { .. } | DataSpec::SyntheticImages { .. } => {
                vec![]
            }
        }
    }

    /// A short name for the data: `digits`, a file's stem, a folder's name (`cats-train` for
    /// `cats/train`), `synthetic` or `synthetic-images`. A file or folder named as a built-in
    /// set is told apart by its kind (`digits-csv` for `csv:digits.csv`, `cifar10-folder` for
    /// `images:cifar10`), so that its runs are
    /// not kept among the built-in set's.
    pub fn short_name(&self) -> String {
        const BUILT_IN: [&str; 5] = [
            "digits",
            "synthetic",
            "synthetic-images",
            "cifar10",
            "cifar100",
        ];
        let apart = |name: String, kind: &str| match BUILT_IN.contains(&name.as_str()) {
            true => format!("{name}-{kind}"),
            false => name,
        };
        let stem = |p: &std::path::Path| {
            p.file_stem()
                .map_or("data".into(), |s| s.to_string_lossy().into_owned())
        };
        match self {
            DataSpec::Digits => "digits".into(),
            DataSpec::Csv { path, .. } => apart(stem(path), "csv"),
            DataSpec::Idx { images, .. } => apart(stem(images), "idx"),
            DataSpec::Synthetic { .. } => "synthetic".into(),
            DataSpec::SyntheticImages { .. } => "synthetic-images".into(),
            DataSpec::Cifar { kind, .. } => kind.name().into(),
            DataSpec::Images { dir } => {
                fn name(p: &Path) -> Option<std::borrow::Cow<'_, str>> {
                    p.file_name().map(|s| s.to_string_lossy())
                }
                match name(dir) {
                    // a split's folder (`cats/train`, as the refusal of train/ + test/ asks
                    // for) is named with its set's, so that every set's runs are not `train`
                    Some(n) if SPLIT_FOLDERS.contains(&n.to_lowercase().as_str()) => {
                        match dir.parent().and_then(name) {
                            Some(set) => format!("{set}-{n}"),
                            None => n.into_owned(),
                        }
                    }
                    // (`-images` would make `synthetic` the built-in synthetic-images)
                    Some(n) => apart(n.into_owned(), "folder"),
                    None => "images".into(),
                }
            }
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
                shape,
            } => {
                // (the last column, the default, is not spelled out)
                write!(f, "csv:{}", path.display())?;
                if *label != LabelColumn::Last {
                    write!(f, ",label={label}")?;
                }
                if *header {
                    f.write_str(",header")?;
                }
                match shape {
                    Some(s) => write!(f, ",shape={}", shape_text(s)),
                    None => Ok(()),
                }
            }
            DataSpec::Idx {
                images,
                labels,
                layout,
            } => {
                write!(f, "idx:{},{}", images.display(), labels.display())?;
                match layout {
                    Some(l) => write!(f, ",layout={l}"),
                    None => Ok(()),
                }
            }
            DataSpec::Synthetic { n, d, c } => write!(f, "synthetic:{n},{d},{c}"),
            DataSpec::SyntheticImages { n, c, h, w, k } => {
                write!(f, "synthetic-images:{n},{c},{h},{w},{k}")
            }
            DataSpec::Cifar { dir, kind } => {
                write!(f, "{}:{}", kind.name(), dir.display())?;
                match kind {
                    CifarKind::Hundred { coarse: true } => f.write_str(",labels=coarse"),
                    _ => Ok(()),
                }
            }
            DataSpec::Images { dir } => write!(f, "images:{}", dir.display()),
        }
    }
}

#[cfg(test)]
mod tests;
