//! Image folders as torchvision's ImageFolder reads them: one sub-folder per class (sorted by
//! name: the first is class 0), JPEG and PNG files anywhere below it. Every file's header is read
//! up front (its first bytes, on many threads: `headers`): one that cannot be read is skipped
//! with a line naming it, and the sizes are known before training (mixed sizes need
//! `--image-size`).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

mod headers;
mod notes;
pub(super) mod splits;

use headers::{headers, Progress};
pub use notes::notes;

/// The most image files a folder may hold (the names alone of more would take gigabytes).
const MAX_FILES: usize = 20_000_000;
/// How deep below a class folder files are looked for.
const MAX_DEPTH: usize = 16;

/// A scanned folder.
#[derive(Debug)]
pub struct Folder {
    pub dir: PathBuf,
    pub classes: Vec<String>,
    pub files: Vec<PathBuf>,
    pub labels: Vec<u32>,
    /// Width and height of each file (upright).
    pub sizes: Vec<(usize, usize)>,
    /// Files and folders skipped, each with why.
    pub skipped: Vec<Skipped>,
    /// Pictures beside the class folders, in none: how many, and one of them.
    pub loose: Option<(usize, String)>,
    /// Files that are not JPEG or PNG by their extension (ignored), counted by extension
    /// (`.webp`; `no extension`).
    pub ignored: std::collections::BTreeMap<String, usize>,
}

/// A file or folder a scan left out, and why.
#[derive(Debug)]
pub struct Skipped {
    pub path: PathBuf,
    pub why: String,
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // (a line break in a file's name would split the note's line)
        let path = crate::text::printable(&self.path.display().to_string());
        write!(f, "skipped {path}: {}", self.why)
    }
}

impl Folder {
    pub fn counts(&self) -> Vec<usize> {
        let mut c = vec![0; self.classes.len()];
        for &l in &self.labels {
            c[l as usize] += 1;
        }
        c
    }
}

pub(super) fn is_image(p: &Path) -> bool {
    p.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e.to_ascii_lowercase().as_str(), "jpg" | "jpeg" | "png"))
}

/// A folder's entries in name order, each with its type as the listing gives it (a link's
/// own: no file is asked for its type where the listing says it).
fn listed(dir: &Path) -> io::Result<Vec<(PathBuf, io::Result<fs::FileType>)>> {
    let mut v: Vec<_> = fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| (e.path(), e.file_type())))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(v)
}

fn entries(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let listing = listed(dir).map_err(|e| unlistable(dir, &e, false))?;
    Ok(listing.into_iter().map(|(p, _)| p).collect())
}

/// A folder that must be read (the data folder, a class folder: `class`) and cannot be
/// listed: why, and the fix.
fn unlistable(dir: &Path, e: &io::Error, class: bool) -> String {
    format!(
        "cannot list {}: {e}; make it readable (chmod -R u+rX {}){}",
        dir.display(),
        dir.display(),
        if class {
            ", or move the class out of the data folder"
        } else {
            ""
        }
    )
}

/// What a walk of the class folders finds: image files (sorted), other files counted, and
/// what it would not read (not regular files, links back into the data folder), each with why.
struct Walk {
    /// The data folder, resolved: a link to a folder inside it is a loop or a second copy.
    root: PathBuf,
    /// The folders read so far, resolved, and the path each was first read by.
    seen: std::collections::HashMap<PathBuf, PathBuf>,
    out: Vec<PathBuf>,
    ignored: std::collections::BTreeMap<String, usize>,
    skipped: Vec<Skipped>,
    progress: Progress,
}

impl Walk {
    fn new(root: &Path) -> Walk {
        Walk {
            root: root.canonicalize().unwrap_or_else(|_| root.to_path_buf()),
            seen: Default::default(),
            out: Vec::new(),
            ignored: Default::default(),
            skipped: Vec::new(),
            progress: Progress::new(root),
        }
    }

    /// Image files below `dir` (a class folder at `depth` 0), in name order.
    fn dir(&mut self, dir: &Path, depth: usize) -> Result<(), String> {
        let real = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
        if let Some(first) = self.seen.get(&real) {
            if depth == 0 {
                return Err(format!(
                    "class folders {} and {} are one folder (a link to the other, or both to one): give each class its own folder",
                    first.display(),
                    dir.display()
                ));
            }
            self.skipped.push(Skipped {
                path: dir.to_path_buf(),
                why: format!(
                    "the folder {} again (a link), already read",
                    first.display()
                ),
            });
            return Ok(());
        }
        self.seen.insert(real, dir.to_path_buf());
        let listing = match listed(dir) {
            Ok(l) => l,
            // (a class folder left out would drop its class: that stops the scan)
            Err(e) if depth == 0 => return Err(unlistable(dir, &e, true)),
            Err(e) => {
                let why = format!("cannot be listed: {e}");
                self.skipped.push(Skipped {
                    path: dir.to_path_buf(),
                    why,
                });
                return Ok(());
            }
        };
        // (hidden files are the system's and the tools': .DS_Store, ._IMG_1.jpg, .ipynb_checkpoints)
        for (p, kind) in listing
            .into_iter()
            .filter(|(p, _)| !name_of(p).starts_with('.'))
        {
            self.progress.listed(self.out.len());
            // (following links; a dangling one is a file that cannot be read)
            let linked = kind.as_ref().is_ok_and(|k| k.is_symlink());
            let kind = match linked {
                true => fs::metadata(&p).map(|m| m.file_type()),
                false => kind,
            };
            match kind {
                Ok(k) if k.is_dir() => {
                    let inside = linked
                        && p.canonicalize()
                            .is_ok_and(|real| real.starts_with(&self.root));
                    if inside {
                        self.skipped.push(Skipped {
                            path: p,
                            why: "a link to a folder inside the data folder (its images are read where they are)".into(),
                        });
                    } else if depth < MAX_DEPTH {
                        self.dir(&p, depth + 1)?;
                    } else {
                        self.skipped.push(Skipped {
                            path: p,
                            why: format!(
                                "more than {MAX_DEPTH} folders below its class folder: not read"
                            ),
                        });
                    }
                }
                _ if !is_image(&p) => {
                    let ext = p.extension().map_or("no extension".into(), |e| {
                        format!(".{}", e.to_string_lossy().to_lowercase())
                    });
                    *self.ignored.entry(ext).or_default() += 1;
                }
                Ok(k) if !k.is_file() => self.skipped.push(Skipped {
                    path: p,
                    why: format!("{}, not a regular file", crate::files::read::kind_of(k)),
                }),
                _ => {
                    if self.out.len() >= MAX_FILES {
                        return Err(format!(
                            "more than {MAX_FILES} image files; split the data set into several folders"
                        ));
                    }
                    self.out.push(p);
                }
            }
        }
        Ok(())
    }
}

/// The class folders among `subs` that are none of the training set's `classes`, all named
/// (the first few where many), with a name that differs from one of them only in case said.
fn unknown_classes(subs: &[PathBuf], classes: &[String]) -> Result<(), String> {
    const NAMED: usize = 5;
    const LISTED: usize = 20;
    let unknown: Vec<&PathBuf> = (subs.iter())
        .filter(|s| !classes.contains(&name_of(s)))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let mut named: Vec<String> = unknown
        .iter()
        .take(NAMED)
        .map(|s| s.display().to_string())
        .collect();
    if unknown.len() > NAMED {
        named.push(format!("{} more", unknown.len() - NAMED));
    }
    let mut known: Vec<&str> = classes.iter().take(LISTED).map(String::as_str).collect();
    if classes.len() > LISTED {
        known.push("...");
    }
    let case = unknown.iter().find_map(|s| {
        let n = name_of(s);
        let k = classes
            .iter()
            .find(|k| k.to_lowercase() == n.to_lowercase())?;
        Some(format!(
            "; {n} differs from the class {k} only in case: rename it"
        ))
    });
    let (what, is) = match unknown.len() {
        1 => ("class folder", "is not a class"),
        _ => ("class folders", "are not classes"),
    };
    Err(format!(
        "{what} {} {is} of the training set ({}){}; a folder validated or evaluated on may hold only the training set's classes",
        named.join(", "),
        known.join(", "),
        case.unwrap_or_default()
    ))
}

fn name_of(p: &Path) -> String {
    p.file_name()
        .map(|n| crate::text::printable(&n.to_string_lossy()))
        .unwrap_or_default()
}

/// Scans `dir`. With `classes` (a training folder's), the sub-folders must be among them and
/// keep their numbers (a validation folder); otherwise they are the classes.
pub fn scan(dir: &Path, classes: Option<&[String]>) -> Result<Folder, String> {
    if !dir.exists() {
        return Err(format!(
            "{} does not exist; images:DIR needs a folder of class folders (DIR/cat/*.jpg, DIR/dog/*.png)",
            dir.display()
        ));
    }
    if !dir.is_dir() {
        return Err(format!(
            "{} is not a folder; images:DIR needs a folder of class folders (DIR/cat/*.jpg, DIR/dog/*.png)",
            dir.display()
        ));
    }
    let (folders, loose): (Vec<PathBuf>, Vec<PathBuf>) =
        entries(dir)?.into_iter().partition(|p| p.is_dir());
    let (hidden, subs): (Vec<PathBuf>, Vec<PathBuf>) =
        (folders.into_iter()).partition(|p| name_of(p).starts_with('.'));
    // pictures beside the class folders belong to none (hidden files, such as macOS's `._`
    // twins, are passed over as inside the class folders)
    let loose: Vec<PathBuf> = (loose.into_iter())
        .filter(|p| is_image(p) && !name_of(p).starts_with('.'))
        .collect();
    if subs.is_empty() && !loose.is_empty() {
        let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
        return Err(format!(
            "{} holds {} but no class folders: images:DIR takes a folder of class folders (DIR/cat/*.jpg, DIR/dog/*.png){}",
            dir.display(),
            crate::text::counted(loose.len(), "picture"),
            match (classes, parent) {
                // (a validation folder's: the training set's classes, by name)
                (Some(c), _) => format!(
                    "; a validation folder holds the training set's class folders ({}), its pictures in them",
                    c.join(", ")
                ),
                (None, Some(p)) => format!("; if this is one class's folder, give the folder above it: images:{}", p.display()),
                (None, None) => String::new(),
            }
        ));
    }
    if subs.is_empty() {
        return Err(format!(
            "{} holds no class folders; arrange the images one folder per class: {}/<class>/<image>.jpg",
            dir.display(),
            dir.display()
        ));
    }
    let names: Vec<String> = match classes {
        Some(c) => c.to_vec(),
        None => subs.iter().map(|p| name_of(p)).collect(),
    };
    // (a class is its name as shown, which names not valid UTF-8, or holding control
    // characters, can share: they would be one class)
    let mut first = std::collections::HashMap::new();
    for (j, b) in names.iter().enumerate().filter(|_| classes.is_none()) {
        if let Some(i) = first.insert(b, j) {
            return Err(format!(
                "class folders {} and {} have the same name as shown (`{b}`: not valid UTF-8, or holding control characters) and would be one class; rename one",
                subs[i].display(),
                subs[j].display(),
            ));
        }
    }
    let (mut walk, mut labels) = (Walk::new(dir), Vec::new());
    // (a notebook's .ipynb_checkpoints is no class; torchvision's ImageFolder would count it)
    walk.skipped.extend(hidden.into_iter().map(|h| Skipped {
        path: h,
        why: "a hidden folder, not a class (torchvision's ImageFolder would take it as one, numbering the classes differently)".into(),
    }));
    if let Some(classes) = classes {
        unknown_classes(&subs, classes)?;
    }
    for sub in &subs {
        let name = name_of(sub);
        let Some(label) = names.iter().position(|n| *n == name) else {
            unreachable!("every class folder is one of the known classes (checked above)");
        };
        let (before, others) = (walk.out.len(), walk.ignored.clone());
        walk.dir(sub, 0)?;
        if walk.out.len() == before && classes.is_none() {
            // what it holds instead
            let found: Vec<String> = (walk.ignored.iter())
                .map(|(e, n)| (e, n - others.get(e).copied().unwrap_or(0)))
                .filter(|&(_, n)| n > 0)
                .map(|(e, n)| format!("{e} {n}"))
                .collect();
            return Err(format!(
                "class folder {} holds no JPEG or PNG images (.jpg, .jpeg, .png){}; add some or remove the folder",
                sub.display(),
                match found.is_empty() {
                    true => String::new(),
                    false => format!(", only other files ({}): convert them to JPEG or PNG", found.join(", ")),
                }
            ));
        }
        labels.resize(walk.out.len(), label as u32);
    }
    let files = walk.out;
    let mut folder = Folder {
        dir: dir.to_path_buf(),
        classes: names,
        files: Vec::with_capacity(files.len()),
        labels: Vec::with_capacity(files.len()),
        sizes: Vec::with_capacity(files.len()),
        skipped: walk.skipped,
        loose: loose.first().map(|l| (loose.len(), name_of(l))),
        ignored: walk.ignored,
    };
    for ((f, l), h) in files
        .iter()
        .zip(&labels)
        .zip(headers(&mut walk.progress, &files))
    {
        match h {
            Ok(size) => {
                folder.files.push(f.clone());
                folder.labels.push(*l);
                folder.sizes.push(size);
            }
            Err(why) => folder.skipped.push(Skipped {
                path: f.clone(),
                why,
            }),
        }
    }
    let others = folder.ignored.values().sum::<usize>();
    if folder.files.is_empty() && folder.skipped.is_empty() && others == 0 {
        let shown: Vec<String> = subs.iter().take(8).map(|p| name_of(p)).collect();
        return Err(format!(
            "{} holds no images: its class folders ({}{}) are empty; put the pictures in them",
            dir.display(),
            shown.join(", "),
            if subs.len() > shown.len() {
                ", ..."
            } else {
                ""
            }
        ));
    }
    // (one skipped file under `within`, and why: what the fix starts from)
    let example = |within: &Path| {
        (folder.skipped.iter())
            .find(|s| s.path.starts_with(within))
            .map_or(String::new(), |s| {
                format!("; e.g. {}: {}", s.path.display(), s.why)
            })
    };
    if folder.files.is_empty() {
        return Err(format!(
            "{} holds no readable JPEG or PNG images ({} skipped, {others} other files){}",
            dir.display(),
            folder.skipped.len(),
            example(dir),
        ));
    }
    if classes.is_none() {
        if let Some(c) = folder.counts().iter().position(|&c| c == 0) {
            let class = dir.join(&folder.classes[c]);
            return Err(format!(
                "class folder {} holds no readable images (every file was skipped{}); fix or remove them",
                class.display(),
                example(&class),
            ));
        }
    }
    Ok(folder)
}
