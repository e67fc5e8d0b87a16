//! Classes the training split lacks. A random validation split of a small set can take every
//! sample of a class, and then the model never trains on it: said as a note; a training split
//! left with one class alone (nothing to tell apart) is refused, as a set of one class is.

use super::{DataError, Dataset, LoadedData};

/// `loaded` (of `spec`, as said in errors) with a note on each class that has validation
/// samples and no training sample, or why it cannot train.
pub(super) fn check(mut loaded: LoadedData, spec: &str) -> Result<LoadedData, DataError> {
    let (train, val) = (&loaded.train, &loaded.val);
    if train.y.is_empty() {
        // (an empty training split is refused where the run starts, with its own fix)
        return Ok(loaded);
    }
    let trained = counts(train);
    let validated = counts(val);
    let name = |label: usize| match train.class_names().get(label) {
        Some(n) => format!("`{}`", crate::text::excerpt(n)),
        None => label.to_string(),
    };
    let lacking: Vec<usize> = (0..validated.len())
        .filter(|&c| validated[c] > 0 && trained.get(c).is_none_or(|&n| n == 0))
        .collect();
    if lacking.is_empty() {
        return Ok(loaded);
    }
    let present: Vec<usize> = (0..trained.len()).filter(|&c| trained[c] > 0).collect();
    let them = match lacking.len() {
        1 => "it",
        _ => "them",
    };
    let fix = match loaded.val_text.starts_with("split ") {
        true => format!("give the set more samples of {them}, a smaller --val-split, another --seed, or a validation set of its own (--val-data)"),
        false => format!("add training samples of {them}, or leave {them} out of the validation set"),
    };
    let names = |classes: &[usize]| {
        let shown: Vec<String> = classes.iter().take(10).map(|&c| name(c)).collect();
        match classes.len() {
            1 => format!("class {}", shown[0]),
            n if n > 10 => format!("classes {} and {} more", shown.join(", "), n - 10),
            _ => format!("classes {}", shown.join(", ")),
        }
    };
    if let [only] = present[..] {
        return Err(DataError::Spec {
            spec: spec.to_string(),
            msg: format!(
                "the training split holds class {} alone, the validation split every sample of {} ({}), so there is nothing to tell apart; {fix}",
                name(only),
                names(&lacking),
                loaded.val_text
            ),
        });
    }
    let shown: Vec<String> = (lacking.iter().take(10))
        .map(|&c| format!("{} ({} in validation)", name(c), validated[c]))
        .collect();
    let more = match lacking.len() {
        n if n > 10 => format!(" and {} more", n - 10),
        _ => String::new(),
    };
    let note = format!(
        "{} no training sample, so the model cannot learn {them}: {}{more}; {fix}",
        match lacking.len() {
            1 => "a class has",
            _ => "classes have",
        },
        shown.join(", "),
    );
    loaded.notes.insert(loaded.val_notes, note);
    loaded.val_notes += 1;
    Ok(loaded)
}

/// Samples per label.
fn counts(d: &Dataset) -> Vec<usize> {
    let mut n = vec![0; d.classes];
    for &y in &d.y {
        if let Some(c) = n.get_mut(y as usize) {
            *c += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use crate::data::{load, DataOptions, DataSpec};

    fn csv(rows: &str) -> (tempfile::TempDir, DataSpec) {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("rare.csv");
        std::fs::write(&f, rows).unwrap();
        let spec = format!("csv:{}", f.display()).parse().unwrap();
        (dir, spec)
    }

    fn split(f: f64) -> DataOptions {
        DataOptions {
            val_fraction: Some(f),
            ..DataOptions::default()
        }
    }

    #[test]
    fn a_class_the_split_leaves_out_of_training_is_said_and_one_class_left_refused() {
        // 2 of 5 rows to validation: with seed s, which ones is the split's; find a seed that
        // takes class 2's only row, and one that leaves class 0 alone in training
        let (_d, spec) = csv("1,2,0\n3,4,0\n6,1,0\n5,5,1\n2,2,1\n7,7,2\n");
        let mut noted = false;
        for seed in 0..64 {
            match load(&spec, &split(0.34), seed) {
                Ok(l) => {
                    let lacks = l.val.y.iter().any(|y| !l.train.y.contains(y));
                    let note = l.notes.iter().find(|n| n.contains("no training sample"));
                    assert_eq!(note.is_some(), lacks, "seed {seed}: {:?}", l.notes);
                    if let Some(n) = note.filter(|_| !l.train.y.contains(&2)) {
                        assert!(n.contains(": 2 (1 in validation); "), "{n}");
                        assert!(n.contains("a smaller --val-split"), "{n}");
                        noted = true;
                    }
                }
                Err(e) => {
                    let e = e.to_string();
                    assert!(e.contains("the training split holds class"), "{e}");
                }
            }
        }
        assert!(noted, "no seed took class 2's row");
        // every sample of class 1 in validation: class 0 alone trains
        let (_d, spec) = csv("1,2,0\n3,4,0\n6,1,0\n5,5,0\n2,2,1\n");
        let refused = (0..64).filter_map(|seed| load(&spec, &split(0.2), seed).err());
        let e = refused.map(|e| e.to_string()).next().expect("no seed");
        assert!(
            e.contains("the training split holds class 0 alone, the validation split every sample of class 1 (split 4 train / 1 val"),
            "{e}"
        );
    }
}
