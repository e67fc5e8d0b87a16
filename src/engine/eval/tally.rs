//! What an evaluation counts from a model's logits: the loss, top-1 and top-5 hits, and per
//! class its samples, hits, predictions and the classes it was taken for. Held in memory by
//! samples, not classes squared: a model of many classes tallies no table of every pair.

use std::collections::HashMap;

/// The counts of an evaluation so far; two tallies of parts of a set merge into the whole's.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    /// Softmax cross-entropy summed over the samples (the model's own loss, without smoothing).
    pub loss_sum: f64,
    pub samples: u64,
    /// Samples whose label is the largest logit (the first of equal ones, as training counts).
    pub correct: u64,
    /// Samples whose label's logit has fewer than 5 larger ones; counted where there are more
    /// than 5 classes.
    pub top5: u64,
    /// Per class: samples of it, of them taken for it, samples predicted as it.
    pub per_class: Vec<ClassCounts>,
    /// (label, prediction) of the samples taken for another class, and how many.
    pub mistakes: HashMap<(u32, u32), u64>,
    /// Samples whose logits were not all finite (weights that overflow on them).
    pub not_finite: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ClassCounts {
    pub samples: u64,
    pub correct: u64,
    pub predicted: u64,
}

/// Top-k accuracy is counted for k = 5 where the model has more classes than that.
pub const TOP_K: usize = 5;

impl Tally {
    pub fn new(classes: usize) -> Tally {
        Tally {
            per_class: vec![ClassCounts::default(); classes],
            ..Tally::default()
        }
    }

    pub fn classes(&self) -> usize {
        self.per_class.len()
    }

    /// Adds samples of labels `y` whose logits are `logits` (row-major, one row of `classes`
    /// per sample), and their summed loss.
    pub fn add(&mut self, logits: &[f32], y: &[u32], loss_sum: f64) {
        let c = self.classes();
        self.loss_sum += loss_sum;
        for (row, &label) in logits.chunks_exact(c).zip(y) {
            let label = label as usize;
            let predicted = argmax(row);
            self.samples += 1;
            if !row.iter().all(|v| v.is_finite()) {
                self.not_finite += 1;
            }
            self.per_class[label].samples += 1;
            self.per_class[predicted].predicted += 1;
            if predicted == label {
                self.correct += 1;
                self.per_class[label].correct += 1;
            } else {
                *(self.mistakes)
                    .entry((label as u32, predicted as u32))
                    .or_default() += 1;
            }
            // (a NaN logit of the label is in no top-k)
            let own = row[label];
            let above = row.iter().filter(|&&v| v > own).count();
            if c > TOP_K && !own.is_nan() && above < TOP_K {
                self.top5 += 1;
            }
        }
    }

    /// Adds `other`'s counts (a tally of another part of the set).
    pub fn merge(&mut self, other: Tally) {
        self.loss_sum += other.loss_sum;
        self.samples += other.samples;
        self.correct += other.correct;
        self.top5 += other.top5;
        self.not_finite += other.not_finite;
        for (a, b) in self.per_class.iter_mut().zip(&other.per_class) {
            a.samples += b.samples;
            a.correct += b.correct;
            a.predicted += b.predicted;
        }
        for (k, n) in other.mistakes {
            *self.mistakes.entry(k).or_default() += n;
        }
    }

    /// Mean loss per sample (None before any).
    pub fn loss(&self) -> Option<f64> {
        (self.samples > 0).then(|| self.loss_sum / self.samples as f64)
    }

    pub fn accuracy(&self) -> Option<f64> {
        share(self.correct, self.samples)
    }

    /// Top-5 accuracy, where the model has more than 5 classes.
    pub fn top5_accuracy(&self) -> Option<f64> {
        (self.classes() > TOP_K)
            .then(|| share(self.top5, self.samples))
            .flatten()
    }

    /// The classes `class`'s samples were most often taken for, most first (equal counts in
    /// class order), at most `n`.
    pub fn taken_for(&self, class: usize, n: usize) -> Vec<(usize, u64)> {
        let mut got: Vec<(usize, u64)> = (self.mistakes.iter())
            .filter(|((label, _), _)| *label as usize == class)
            .map(|((_, p), &k)| (*p as usize, k))
            .collect();
        got.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        got.truncate(n);
        got
    }

    /// Every (label, prediction, count) of the mistakes, most first (equal counts in class order).
    pub fn confusions(&self) -> Vec<(usize, usize, u64)> {
        let mut all: Vec<(usize, usize, u64)> = (self.mistakes.iter())
            .map(|(&(l, p), &k)| (l as usize, p as usize, k))
            .collect();
        all.sort_by(|a, b| b.2.cmp(&a.2).then((a.0, a.1).cmp(&(b.0, b.1))));
        all
    }
}

impl ClassCounts {
    /// Of the class's samples, the share taken for it (recall).
    pub fn accuracy(&self) -> Option<f64> {
        share(self.correct, self.samples)
    }

    /// Of the samples taken for the class, the share that are of it.
    pub fn precision(&self) -> Option<f64> {
        share(self.correct, self.predicted)
    }
}

fn share(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

/// The index of the largest value, the first of equal ones (as the loss counts a hit; a row of
/// NaN is class 0's).
fn argmax(row: &[f32]) -> usize {
    let (mut best, mut at) = (f32::NEG_INFINITY, 0);
    for (j, &v) in row.iter().enumerate() {
        if v > best {
            (best, at) = (v, j);
        }
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_hits_per_class_and_what_each_class_was_taken_for() {
        let mut t = Tally::new(3);
        // labels 0, 0, 1, 2, 2: predicted 0, 1, 1, 1, 2
        let logits = [
            5.0, 1.0, 0.0, //
            0.0, 2.0, 1.0, //
            0.0, 3.0, 0.0, //
            0.0, 4.0, 1.0, //
            0.0, 0.0, 9.0,
        ];
        t.add(&logits, &[0, 0, 1, 2, 2], 2.5);
        assert_eq!((t.samples, t.correct), (5, 3));
        assert_eq!(t.accuracy(), Some(0.6));
        assert_eq!(t.loss(), Some(0.5));
        assert_eq!(t.per_class[1].predicted, 3);
        assert_eq!(t.per_class[1].precision(), Some(1.0 / 3.0));
        assert_eq!(t.per_class[0].accuracy(), Some(0.5));
        assert_eq!(t.taken_for(2, 3), vec![(1, 1)]);
        assert_eq!(t.confusions(), vec![(0, 1, 1), (2, 1, 1)]);
        // three classes: no top-5
        assert_eq!(t.top5_accuracy(), None);
    }

    #[test]
    fn equal_logits_count_the_first_as_training_does() {
        let mut t = Tally::new(2);
        t.add(&[1.0, 1.0, 1.0, 1.0], &[0, 1], 0.0);
        assert_eq!(t.correct, 1);
        assert_eq!(t.per_class[0].predicted, 2);
        // a row of NaN is taken for class 0, as the loss takes it
        let mut t = Tally::new(2);
        t.add(&[f32::NAN, f32::NAN], &[1], 0.0);
        assert_eq!((t.correct, t.per_class[0].predicted), (0, 1));
        // and counted as not finite, as is a row with an infinity; merged with the rest
        t.add(&[f32::INFINITY, 0.0, 1.0, 2.0], &[0, 1], 0.0);
        let mut whole = Tally::new(2);
        whole.merge(t);
        assert_eq!((whole.samples, whole.not_finite), (3, 2));
    }

    #[test]
    fn top5_counts_a_label_with_fewer_than_five_larger_logits() {
        let mut t = Tally::new(7);
        // label 6: five larger logits (out); label 5: four larger (in); a NaN label logit: out
        let row = |own: f32| vec![6.0, 5.0, 4.0, 3.0, 2.0, 1.0, own];
        let mut logits = row(0.5);
        logits.extend([6.0, 5.0, 4.0, 3.0, 0.0, 2.5, 1.0]);
        logits.extend(row(f32::NAN));
        t.add(&logits, &[6, 5, 6], 0.0);
        assert_eq!(t.top5, 1);
        assert_eq!(t.top5_accuracy(), Some(1.0 / 3.0));
    }

    #[test]
    fn tallies_of_parts_merge_into_the_whole() {
        let logits = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.2, 0.1];
        let y = [0, 0, 1, 1];
        let mut whole = Tally::new(2);
        whole.add(&logits, &y, 4.0);
        let (mut a, mut b) = (Tally::new(2), Tally::new(2));
        a.add(&logits[..4], &y[..2], 1.5);
        b.add(&logits[4..], &y[2..], 2.5);
        a.merge(b);
        assert_eq!(a, whole);
        assert_eq!(whole.taken_for(0, 5), vec![(1, 1)]);
        assert_eq!(whole.taken_for(1, 5), vec![(0, 2)]);
    }
}
