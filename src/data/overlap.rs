//! Samples of one set that are samples of another: a validation or held-out row with the values
//! of a training row (a file that repeats rows, a held-out file cut from the training file)
//! makes its figures say how the training set is fit, not how the model does on what it has
//! not seen.

use std::collections::HashMap;

use super::Dataset;

/// How many of `held`'s samples have the values of a sample of `train`, feature for feature
/// (labels aside); 0 for picture sets, whose samples are made from files as they are cut, and
/// where the memory to tell is not to be had.
pub fn shared_rows(train: &Dataset, held: &Dataset) -> usize {
    let d = train.features;
    if train.pictures.is_some() || held.pictures.is_some() || d == 0 || held.features != d {
        return 0;
    }
    // the held rows (the fewer, usually: a validation share) as their distinct values, each
    // with its copies counted, by hash (those of one hash chained); each training row's hash
    // looked up and its chain compared value for value. Some 30 bytes a held row: a set of
    // millions of short rows takes no more than its values do.
    let mut held_rows = Distinct::default();
    let n = held.len();
    // (rows numbered in 32 bits, END kept apart)
    if n >= END as usize
        || held_rows.first.try_reserve(n).is_err()
        || [
            &mut held_rows.row,
            &mut held_rows.next,
            &mut held_rows.copies,
        ]
        .into_iter()
        .any(|v| v.try_reserve_exact(n).is_err())
    {
        return 0;
    }
    for (i, row) in held.x.chunks_exact(d).enumerate() {
        held_rows.add(held, i, row);
    }
    let mut shared = vec![false; held_rows.row.len()];
    for row in train.x.chunks_exact(d) {
        if let Some(k) = held_rows.find(held, row) {
            shared[k] = true;
        }
    }
    (shared.iter().zip(&held_rows.copies))
        .filter(|(&s, _)| s)
        .map(|(_, &c)| c as usize)
        .sum()
}

/// The distinct rows of a set: each by the index of its first copy, with its copies counted,
/// found by hash.
#[derive(Default)]
struct Distinct {
    /// The newest distinct row of each hash.
    first: HashMap<u64, u32>,
    row: Vec<u32>,
    /// The distinct row of the same hash before each (`END`: none).
    next: Vec<u32>,
    copies: Vec<u32>,
}

/// No more distinct row in a chain.
const END: u32 = u32::MAX;

/// The most rows of one hash compared (values that collide by the thousand are made to: a
/// row past them goes uncounted rather than the check taking quadratic time).
const CHAIN: usize = 16;

impl Distinct {
    /// Row `i` of `set`, `values`: a copy of a distinct row found, or a new one.
    fn add(&mut self, set: &Dataset, i: usize, values: &[f32]) {
        let h = hash(values);
        if let Some(k) = self.find_hashed(set, values, h) {
            self.copies[k] += 1;
            return;
        }
        let head = self.first.entry(h).or_insert(END);
        self.next.push(*head);
        *head = self.row.len() as u32;
        self.row.push(i as u32);
        self.copies.push(1);
    }

    /// The distinct row with `values` (a row of `set`, whose rows these are), where one is.
    fn find(&self, set: &Dataset, values: &[f32]) -> Option<usize> {
        self.find_hashed(set, values, hash(values))
    }

    /// `find`, `values`' hash `h` given.
    fn find_hashed(&self, set: &Dataset, values: &[f32], h: u64) -> Option<usize> {
        let mut k = self.first.get(&h).copied().unwrap_or(END);
        for _ in 0..CHAIN {
            if k == END {
                return None;
            }
            if same(set.row(self.row[k as usize] as usize), values) {
                return Some(k as usize);
            }
            k = self.next[k as usize];
        }
        None
    }
}

/// A row's values as their bits (0.0 and -0.0 alike), mixed as FxHash mixes words.
fn hash(row: &[f32]) -> u64 {
    row.iter().fold(0u64, |h, v| {
        (h.rotate_left(5) ^ (v + 0.0).to_bits() as u64).wrapping_mul(0x517c_c1b7_2722_0a95)
    })
}

fn same(a: &[f32], b: &[f32]) -> bool {
    a.iter().zip(b).all(|(x, y)| x == y)
}

/// The note for a validation set (`split`: cut from the training set; else `--val-data`'s)
/// of which `shared` of `n` samples are training samples; none where none are. `csv`: the
/// training set is a CSV file (whose repeated lines a command can drop).
pub(super) fn validation_note(shared: usize, n: usize, split: bool, csv: bool) -> Option<String> {
    const OVERSTATE: &str =
        "the validation figures overstate how the model does on data it has not seen";
    match (shared, split) {
        (0, _) => None,
        (_, false) if shared == n => Some(format!(
            "every one of the {n} validation samples has the values of a training sample (is --val-data a copy of the training data?): {OVERSTATE}; validate on samples the run does not train on"
        )),
        (_, false) => Some(format!(
            "{shared} of the {n} validation samples have the values of a training sample (--val-data holds samples of the training set): {OVERSTATE}; drop them from one of the two"
        )),
        (_, true) => {
            let fix = match csv {
                true => "keep one of each (repeated lines: awk '!seen[$0]++' in.csv > out.csv)",
                false => "keep one of each",
            };
            Some(format!(
                "{shared} of the {n} validation samples have the values of a training sample (the set holds samples more than once, and the split put copies on both sides): {OVERSTATE}; {fix}"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(rows: &[[f32; 2]]) -> Dataset {
        Dataset {
            features: 2,
            classes: 2,
            image: None,
            x: rows.iter().flatten().copied().collect(),
            y: vec![0; rows.len()],
            names: Vec::new(),
            pictures: None,
        }
    }

    #[test]
    fn rows_of_the_same_values_are_counted_once_each() {
        let train = set(&[[1.0, 2.0], [3.0, 4.0], [1.0, 2.0], [0.0, 5.0]]);
        let held = set(&[[1.0, 2.0], [2.0, 1.0], [-0.0, 5.0], [3.0, 4.0], [3.0, 4.5]]);
        assert_eq!(shared_rows(&train, &held), 3);
        assert_eq!(shared_rows(&train, &set(&[[9.0, 9.0]])), 0);
        // a held row repeated: each copy counts
        let held = set(&[[3.0, 4.0], [9.0, 9.0], [3.0, 4.0], [1.0, 2.0]]);
        assert_eq!(shared_rows(&train, &held), 3);
        let note = validation_note(3, 5, true, true).unwrap();
        assert!(
            note.starts_with("3 of the 5 validation samples") && note.contains("awk"),
            "{note}"
        );
        assert!(!validation_note(3, 5, true, false).unwrap().contains("awk"));
        let note = validation_note(5, 5, false, true).unwrap();
        assert!(
            note.contains("is --val-data a copy of the training data?"),
            "{note}"
        );
        assert!(validation_note(0, 5, false, true).is_none());
    }
}
