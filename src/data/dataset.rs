//! A labelled dataset and the micro-batches cut from it: samples held ready as rows, or made
//! from a picture set when gathered; the seeded train/validation split.

use super::picture_set::{ImageSet, Pictures};
use crate::nn::rng::{tag, Rng};

/// One micro-batch: x[n, features] and labels[n], and the samples' rows in the training set.
/// For a replica that holds the training set (`Replica::hold_data`) the loader sends the rows
/// alone: `x` is then empty.
#[derive(Clone, Debug, Default)]
pub struct MicroBatch {
    pub x: Vec<f32>,
    pub y: Vec<u32>,
    pub n: usize,
    pub rows: Vec<u32>,
}

impl MicroBatch {
    /// Rows `r` of a batch held in memory (`x` row-major with `d` features per row, `y` its
    /// labels), numbered by their place in it.
    pub fn of_rows(x: &[f32], y: &[u32], d: usize, r: std::ops::Range<usize>) -> MicroBatch {
        MicroBatch {
            x: x[r.start * d..r.end * d].to_vec(),
            y: y[r.clone()].to_vec(),
            n: r.len(),
            rows: (r.start as u32..r.end as u32).collect(),
        }
    }
}

/// A labelled dataset: labels are 0..classes; samples are `x`, row-major [len, features], or,
/// for picture sets, made from `pictures` when they are gathered (`x` is then empty).
#[derive(Clone, Debug)]
pub struct Dataset {
    pub features: usize,
    pub classes: usize,
    /// The shape of one sample, [C, H, W], when the samples are images: each row is the image
    /// row-major CHW (channel planes, each H rows of W), and `features == C*H*W`. `None` for
    /// flat vectors.
    pub image: Option<[usize; 3]>,
    pub x: Vec<f32>,
    pub y: Vec<u32>,
    /// A table's class names, label by label, where its labels are names (a picture set keeps
    /// its own); empty where they are class numbers.
    pub names: Vec<String>,
    pub pictures: Option<Pictures>,
}

impl Dataset {
    /// Each class's name, label by label, where the set names them (a picture set's folders,
    /// CIFAR's names, a table's named labels); empty where its labels are numbers.
    pub fn class_names(&self) -> &[String] {
        match &self.pictures {
            Some(p) => p.set.names(),
            None => &self.names,
        }
    }

    /// What a model takes of one sample: the image, else a flat vector.
    pub fn input_shape(&self) -> crate::nn::shape::Shape {
        use crate::nn::shape::Shape;
        match self.image {
            Some([c, h, w]) => Shape::Image { c, h, w },
            None => Shape::Flat(self.features),
        }
    }

    /// The features of samples `idx` (epoch `epoch`'s augmentation for a training picture
    /// set) into `out`, its old contents replaced. A picture set writes over the buffer in
    /// place, so one reused from an earlier batch is neither cleared nor zeroed first.
    pub fn gather(&self, idx: &[u32], epoch: u64, out: &mut Vec<f32>) {
        let d = self.features;
        match &self.pictures {
            None => {
                out.clear();
                out.reserve_exact(idx.len() * d);
                for &i in idx {
                    out.extend_from_slice(self.row(i as usize));
                }
            }
            Some(p) => {
                // every value is written below: only a longer buffer's new tail is zeroed
                out.resize(idx.len() * d, 0.0);
                for (&i, o) in idx.iter().zip(out.chunks_exact_mut(d)) {
                    p.fill(i as usize, epoch, o);
                }
            }
        }
    }

    /// Samples `lo..hi` as features: a slice of `x`, or made into `buf` for a picture set.
    pub fn rows<'a>(&'a self, lo: usize, hi: usize, buf: &'a mut Vec<f32>) -> &'a [f32] {
        if self.pictures.is_none() {
            return &self.x[lo * self.features..hi * self.features];
        }
        let idx: Vec<u32> = (lo as u32..hi as u32).collect();
        self.gather(&idx, 0, buf);
        buf
    }

    /// Samples `lo..hi` as features into `out` (replaced), a picture set's made on `threads`
    /// threads (each a run of the rows): a GPU's chunk, made as fast as the host's cores allow.
    pub fn rows_on(&self, lo: usize, hi: usize, threads: usize, out: &mut Vec<f32>) {
        let d = self.features;
        let Some(p) = &self.pictures else {
            out.clear();
            out.extend_from_slice(&self.x[lo * d..hi * d]);
            return;
        };
        out.resize((hi - lo) * d, 0.0);
        let per = (hi - lo).div_ceil(threads.max(1)).max(1);
        std::thread::scope(|s| {
            for (k, part) in out.chunks_mut(per * d).enumerate() {
                s.spawn(move || {
                    for (j, o) in part.chunks_exact_mut(d).enumerate() {
                        p.fill(lo + k * per + j, 0, o);
                    }
                });
            }
        });
    }

    /// The features ready in memory, for a device that holds the set (`None` for a picture
    /// set, made batch by batch).
    pub fn dense(&self) -> Option<&[f32]> {
        self.pictures.is_none().then_some(&self.x[..])
    }

    pub fn len(&self) -> usize {
        self.y.len()
    }

    /// Whether its samples are pictures decoded from files on their first use and kept: the
    /// first pass over them is slower than the rest.
    pub fn decoded_once(&self) -> bool {
        (self.pictures.as_ref()).is_some_and(|p| p.set.decodes_and_keeps())
    }

    /// Whether sample `i`'s picture failed to decode (so far): another of its class stands in
    /// for it. Never for a table's rows.
    pub fn stood_in(&self, i: usize) -> bool {
        (self.pictures.as_ref()).is_some_and(|p| p.set.has_failed(p.rows[i] as usize))
    }

    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }

    pub fn row(&self, i: usize) -> &[f32] {
        &self.x[i * self.features..(i + 1) * self.features]
    }

    /// Samples `idx` as a set of their own (a picture set's as another split).
    pub fn subset(&self, idx: &[usize]) -> Dataset {
        let mut x = Vec::new();
        if self.pictures.is_none() {
            x.reserve_exact(idx.len() * self.features);
            for &i in idx {
                x.extend_from_slice(self.row(i));
            }
        }
        Dataset {
            features: self.features,
            classes: self.classes,
            image: self.image,
            x,
            y: idx.iter().map(|&i| self.y[i]).collect(),
            names: self.names.clone(),
            pictures: self.pictures.as_ref().map(|p| p.subset(idx)),
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

impl Dataset {
    /// The picture sets a run on these splits reads, each once (a split's training and
    /// validation rows share one).
    pub fn picture_sets(train: &Dataset, val: &Dataset) -> Vec<std::sync::Arc<ImageSet>> {
        let mut sets: Vec<std::sync::Arc<ImageSet>> = Vec::new();
        for p in [&train.pictures, &val.pictures].into_iter().flatten() {
            if !sets.iter().any(|s| std::sync::Arc::ptr_eq(s, &p.set)) {
                sets.push(p.set.clone());
            }
        }
        sets
    }
}

/// Checks the labels of a freshly parsed dataset and sets `classes`.
pub(super) fn finish(features: usize, x: Vec<f32>, y: Vec<u32>) -> Result<Dataset, String> {
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
            "label {max} is out of range: labels must be class indices 0 to 65535"
        ));
    }
    Ok(Dataset {
        features,
        classes: (max as usize + 1).max(2),
        image: None,
        x,
        y,
        names: Vec::new(),
        pictures: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parsed_set_must_hold_rows_times_features_values() {
        assert!(finish(2, vec![0.0; 4], vec![0, 1]).is_ok());
        let e = finish(2, vec![0.0; 3], vec![0, 1]).unwrap_err();
        assert!(e.contains("3 values for 2 samples of 2 features"), "{e}");
        let e = finish(usize::MAX, vec![0.0], vec![0, 1]).unwrap_err();
        assert!(e.contains("1 values for 2 samples"), "{e}");
    }
}
