//! Sets of pictures: held in memory (CIFAR) or image files decoded when a batch needs them, on
//! the loader threads, and kept once decoded when the whole set fits the memory granted to it.
//! [`Pictures`] is one split's view of a set: its rows and how they become samples.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::decode;
use super::picture::Picture;
use super::transform::Look;
use crate::nn::rng::{tag, Rng};

/// Pictures by row, and their labels.
#[derive(Debug)]
pub struct ImageSet {
    /// Where each picture is read from (empty: every picture was given in memory).
    files: Vec<PathBuf>,
    /// Each file's width and height as its header gave them when the set was read: a picture
    /// decoded at another size was replaced since (the run's input size was checked on these).
    sizes: Vec<(usize, usize)>,
    pictures: Vec<OnceLock<Arc<Picture>>>,
    labels: Vec<u32>,
    /// Decoded files larger than this shorter side are scaled down to it before they are kept.
    side: Option<usize>,
    /// Whether decoded files are kept (else decoded every time they are needed).
    keep: bool,
    failed: Vec<AtomicBool>,
    failures: AtomicUsize,
    /// Failures not yet reported.
    news: Mutex<Vec<Skipped>>,
    /// Each label's class name (a folder's, CIFAR's), in label order; empty where unnamed.
    names: Vec<String>,
}

impl ImageSet {
    pub fn in_memory(pictures: Vec<Picture>, labels: Vec<u32>) -> ImageSet {
        let n = pictures.len();
        ImageSet {
            files: Vec::new(),
            sizes: Vec::new(),
            pictures: pictures
                .into_iter()
                .map(|p| OnceLock::from(Arc::new(p)))
                .collect(),
            labels,
            side: None,
            keep: true,
            failed: (0..n).map(|_| AtomicBool::new(false)).collect(),
            failures: AtomicUsize::new(0),
            news: Mutex::new(Vec::new()),
            names: Vec::new(),
        }
    }

    /// Pictures decoded from `files` of the `sizes` their headers give, as they are needed.
    pub fn files(
        (files, sizes): (Vec<PathBuf>, Vec<(usize, usize)>),
        labels: Vec<u32>,
        side: Option<usize>,
        keep: bool,
    ) -> ImageSet {
        let n = files.len();
        ImageSet {
            files,
            sizes,
            pictures: (0..n).map(|_| OnceLock::new()).collect(),
            labels,
            side,
            keep,
            failed: (0..n).map(|_| AtomicBool::new(false)).collect(),
            failures: AtomicUsize::new(0),
            news: Mutex::new(Vec::new()),
            names: Vec::new(),
        }
    }

    /// Whether its pictures are decoded from files on their first use and kept: the first pass
    /// over them is slower than the rest.
    pub fn decodes_and_keeps(&self) -> bool {
        self.keep && !self.files.is_empty()
    }

    /// The set with its classes named, label 0's first.
    pub fn named(self, names: Vec<String>) -> ImageSet {
        ImageSet { names, ..self }
    }

    /// Each label's class name, in label order; empty where the set's classes have none.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    pub fn labels(&self) -> &[u32] {
        &self.labels
    }

    pub fn file(&self, i: usize) -> Option<&PathBuf> {
        self.files.get(i)
    }

    /// What picture `i` is, as words for a fingerprint: a file's class folder, name and length
    /// (not where the set lies, which may differ between machines and runs), or the pixels of
    /// a picture given in memory.
    pub fn identity(&self, i: usize) -> Vec<u64> {
        let Some(path) = self.files.get(i) else {
            let pixels = self.pictures[i].get().map_or(&[][..], |p| &p.rgb[..]);
            return pixels
                .chunks(8)
                .map(|c| c.iter().fold(0u64, |w, &b| w << 8 | b as u64))
                .collect();
        };
        let named = path.iter().rev().take(2);
        let name = named.flat_map(|part| part.as_encoded_bytes().iter().map(|&b| b as u64));
        let length = std::fs::metadata(path).map_or(u64::MAX, |m| m.len());
        name.chain([length]).collect()
    }

    /// Picture `i`, decoded now if it is not held.
    fn load(&self, i: usize) -> Result<Arc<Picture>, String> {
        if let Some(p) = self.pictures[i].get() {
            return Ok(p.clone());
        }
        let path = &self.files[i];
        let mut p = decode::decode(path)?;
        if let Some(&(w, h)) = self.sizes.get(i).filter(|&&s| s != (p.w, p.h)) {
            return Err(format!(
                "it is {}x{} now, {w}x{h} when the run read the folder (replaced while the run went on?)",
                p.w, p.h
            ));
        }
        if let Some(side) = self.side.filter(|&s| p.w.min(p.h) > s) {
            p = p.shorter_side(side);
        }
        let p = Arc::new(p);
        if self.keep {
            let _ = self.pictures[i].set(p.clone());
        }
        Ok(p)
    }

    /// Picture `among[at]` (the rows of a split); one that cannot be decoded is reported once
    /// and stood in for by the next picture of the same class among them that can (the split's
    /// own: a validation picture never stands in for a training one, nor the other way), the
    /// same one every time. Where none can, why (the class's samples would be blank).
    fn picture(&self, among: &[u32], at: usize) -> Result<Arc<Picture>, String> {
        let (n, i) = (among.len(), among[at] as usize);
        let mut failed = Vec::new();
        let tell = |stood_in: bool, failed: Vec<String>| {
            let mut news = self.news.lock().expect("image failures lock");
            news.extend(
                failed
                    .into_iter()
                    .map(|message| Skipped { message, stood_in }),
            );
        };
        for k in 0..n {
            let j = among[(at + k) % n] as usize;
            if self.labels[j] != self.labels[i] || self.failed[j].load(Ordering::Relaxed) {
                continue;
            }
            match self.load(j) {
                Ok(p) => {
                    tell(true, failed);
                    return Ok(p);
                }
                Err(why) => {
                    if !self.failed[j].swap(true, Ordering::Relaxed) {
                        self.failures.fetch_add(1, Ordering::Relaxed);
                        // (a line break in a file's name would split the log's line)
                        let name = crate::text::printable(&self.files[j].display().to_string());
                        failed.push(format!("skipped {name}: {why}"));
                    }
                }
            }
        }
        tell(false, failed);
        let files = (among.iter()).filter(|&&j| self.labels[j as usize] == self.labels[i]);
        let (files, all) = (files.count(), self.labels.len() == n);
        let class =
            (self.files[i].parent()).map_or(String::new(), |d| format!(" ({})", d.display()));
        Err(format!(
            "no picture of class {}{class} {}can be decoded: all {files} of its files {}failed",
            self.labels[i],
            if all { "" } else { "in this split " },
            if all { "" } else { "there " },
        ))
    }

    /// Files that failed to decode since the last call, one each.
    pub fn take_failures(&self) -> Vec<Skipped> {
        std::mem::take(&mut *self.news.lock().expect("image failures lock"))
    }

    /// Whether picture `i` failed to decode (so far).
    pub fn has_failed(&self, i: usize) -> bool {
        self.failed[i].load(Ordering::Relaxed)
    }

    /// Files that failed to decode so far.
    pub fn failures(&self) -> usize {
        self.failures.load(Ordering::Relaxed)
    }
}

/// A picture file that failed to decode, as said: `skipped FILE: why`, and whether another
/// picture of its class stands in for it (none does where the class is lost).
#[derive(Debug)]
pub struct Skipped {
    pub message: String,
    pub stood_in: bool,
}

/// One split of an image set: its rows of the set and how they become samples.
#[derive(Clone, Debug)]
pub struct Pictures {
    pub set: Arc<ImageSet>,
    pub rows: Vec<u32>,
    pub look: Look,
    /// Seeds the augmentation: sample `row` of epoch `e` is drawn from its own stream.
    pub seed: u64,
    /// This split's classes none of whose pictures decode, found as its samples are made.
    pub lost: Arc<LostClasses>,
}

/// A split's classes none of whose pictures decode (their samples are blank), found as its
/// samples are made: each label with why, and whether that was said. Shared by the split's
/// clones (a process's ranks).
#[derive(Debug, Default)]
pub struct LostClasses(Mutex<BTreeMap<u32, (String, bool)>>);

impl LostClasses {
    fn add(&self, label: u32, why: String) {
        let mut lost = self.0.lock().unwrap_or_else(|p| p.into_inner());
        lost.entry(label).or_insert((why, false));
    }

    /// A class another process found lost (its files of the class are damaged where this
    /// process's may not be): left out here too, so that every process validates over the
    /// same classes; told where `tell` (process 0, whose records are the run's).
    pub fn add_elsewhere(&self, label: u32, tell: bool) {
        let mut lost = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let why = format!("no picture of class {label} decodes on another machine of the run");
        lost.entry(label).or_insert((why, !tell));
    }

    /// Why the first class lost is (`None`: every class's pictures decode, so far).
    pub fn first(&self) -> Option<String> {
        let lost = self.0.lock().unwrap_or_else(|p| p.into_inner());
        lost.values().next().map(|(why, _)| why.clone())
    }

    /// The labels of the classes lost so far.
    pub fn labels(&self) -> Vec<u32> {
        let lost = self.0.lock().unwrap_or_else(|p| p.into_inner());
        lost.keys().copied().collect()
    }

    /// Why each class lost since the last call is (each told once).
    pub fn unsaid(&self) -> Vec<String> {
        let mut lost = self.0.lock().unwrap_or_else(|p| p.into_inner());
        (lost.values_mut())
            .filter_map(|(why, said)| (!std::mem::replace(said, true)).then(|| why.clone()))
            .collect()
    }
}

impl Pictures {
    /// `rows` of `set` as a split, made samples by `look`, augmented from `seed`.
    pub fn new(set: Arc<ImageSet>, rows: Vec<u32>, look: Look, seed: u64) -> Pictures {
        Pictures {
            set,
            rows,
            look,
            seed,
            lost: Arc::default(),
        }
    }

    /// Writes sample `i` of this split (as of `epoch`'s augmentation draws) to `out`: blank
    /// where no picture of its class decodes (the class is then [`lost`](Self::lost)).
    pub fn fill(&self, i: usize, epoch: u64, out: &mut [f32]) {
        let row = self.rows[i] as usize;
        match self.set.picture(&self.rows, i) {
            Ok(p) => {
                let mut rng = Rng::stream(
                    self.seed ^ epoch.wrapping_mul(0xD1B5_4A32_D192_ED03),
                    tag::AUGMENT,
                    row as u64,
                );
                self.look.render(&p, &mut rng, out);
            }
            Err(why) => {
                self.lost.add(self.set.labels[row], why);
                out.fill(0.0);
            }
        }
    }

    /// The rows `idx` of this split as another split.
    pub fn subset(&self, idx: &[usize]) -> Pictures {
        let rows = idx.iter().map(|&i| self.rows[i]).collect();
        Pictures::new(self.set.clone(), rows, self.look.clone(), self.seed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::picture::Norm;

    /// A picture replaced while the run went on by one of another size is not made into a
    /// sample (it was cropped or padded with black, unsaid): it is told, and another of its
    /// class stands in for it, as for a file that no longer decodes.
    #[test]
    fn a_picture_replaced_by_one_of_another_size_is_told_and_stood_in_for() {
        let dir = tempfile::tempdir().unwrap();
        let png = |name: &str, w: u32, h: u32, v: u8| {
            let path = dir.path().join(name);
            image::RgbImage::from_pixel(w, h, image::Rgb([v, v, v]))
                .save(&path)
                .unwrap();
            path
        };
        let files = vec![png("a.png", 4, 4, 10), png("b.png", 4, 4, 200)];
        let set = ImageSet::files((files, vec![(4, 4); 2]), vec![0, 0], None, false);
        let look = Look {
            w: 4,
            h: 4,
            norm: Norm {
                mean: [0.0; 3],
                std: [1.0 / 255.0; 3],
            },
            augment: None,
            side: None,
        };
        let split = Pictures::new(Arc::new(set), vec![0, 1], look, 0);
        let mut out = vec![0.0; 3 * 4 * 4];
        split.fill(0, 0, &mut out);
        assert!(out.iter().all(|&v| v == 10.0), "{out:?}");
        png("a.png", 2, 8, 10);
        split.fill(0, 0, &mut out);
        assert!(out.iter().all(|&v| v == 200.0), "b stands in: {out:?}");
        let told = split.set.take_failures();
        assert_eq!(told.len(), 1, "{told:?}");
        assert!(
            told[0].stood_in
                && told[0]
                    .message
                    .contains("a.png: it is 2x8 now, 4x4 when the run read"),
            "{told:?}"
        );
        assert!(split.lost.first().is_none());
    }
}
