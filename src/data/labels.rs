//! A table's class labels: class numbers 0..N-1, or class names (`setosa`, `Iris-virginica`),
//! numbered in sorted order as a folder's classes are; another set's named labels matched to
//! the classes a training set (or a checkpoint's model) has, by name.

use std::collections::HashMap;

use super::Dataset;
use crate::text::{excerpt, first_of};

/// The most classes a set may have (labels are stored as numbers below this).
pub(super) const MAX_CLASSES: usize = 65536;

/// Class names shown in a message or description before "and N more".
const SHOWN: usize = 8;

/// The labels of a table's rows as they are read: the first decides whether the column holds
/// class numbers or class names, and every other must be of its kind.
#[derive(Default)]
pub(super) struct Labels {
    /// The first label: whether it is a name, its line and its text.
    first: Option<(bool, usize, String)>,
    /// Each name's number in order of first appearance (`finish` numbers them sorted).
    numbers: HashMap<String, u32>,
    seen: Vec<String>,
}

impl Labels {
    /// The class of label `f` at `line`, column `col`: its number, or its name's number so far.
    pub(super) fn read(&mut self, line: usize, col: usize, f: &str) -> Result<u32, String> {
        // (`nan`, `inf`: names, not numbers a class could be)
        let number = f.parse::<f64>().ok().filter(|v| v.is_finite());
        let (named, first_line, first) =
            (self.first).get_or_insert_with(|| (number.is_none(), line, f.to_string()));
        let (named, first_line) = (*named, *first_line);
        if named != number.is_none() {
            let (this, that) = match named {
                true => ("a number", "a class name"),
                false => ("a name", "a class number"),
            };
            // (line 1 odd one out at once: a header's label over the samples')
            let header = match (first_line, line) {
                (1, 2) => " (line 1 a header? add ,header after the file's name)",
                _ => "",
            };
            return Err(format!(
                "line {line}, column {col} (from 0): label `{}` is {this} where line {first_line}'s, `{}`, is {that}{header}; a label column holds class numbers or names, not both: mend the row, or pick the label column with label=first|last|N",
                excerpt(f),
                excerpt(first)
            ));
        }
        match number {
            Some(v) if v < 0.0 || v.fract() != 0.0 || v >= MAX_CLASSES as f64 => {
                Err(format!("line {line}, column {col} (from 0): label `{}` is not a class number (an integer 0 to 65535); pick the label column with label=first|last|N", excerpt(f)))
            }
            Some(v) => Ok(v as u32),
            None => {
                if let Some(&n) = self.numbers.get(f) {
                    return Ok(n);
                }
                if self.seen.len() == MAX_CLASSES {
                    return Err(format!("line {line}, column {col} (from 0): label `{}` is the {}th class name, more than the {MAX_CLASSES} classes a set may have: is column {col} the label column? (pick it with label=first|last|N)", excerpt(f), MAX_CLASSES + 1));
                }
                let n = self.seen.len() as u32;
                self.numbers.insert(f.to_string(), n);
                self.seen.push(f.to_string());
                Ok(n)
            }
        }
    }

    /// The class names in sorted order, with the labels `y` read renumbered to it; empty where
    /// the labels are class numbers.
    pub(super) fn finish(self, y: &mut [u32]) -> Vec<String> {
        let mut order: Vec<u32> = (0..self.seen.len() as u32).collect();
        order.sort_by_key(|&n| &self.seen[n as usize]);
        let mut place = vec![0u32; order.len()];
        for (i, &n) in order.iter().enumerate() {
            place[n as usize] = i as u32;
        }
        if !place.is_empty() {
            for l in y.iter_mut() {
                *l = place[*l as usize];
            }
        }
        let mut seen = self.seen;
        order
            .into_iter()
            .map(|n| std::mem::take(&mut seen[n as usize]))
            .collect()
    }
}

/// The names of a set's classes for a description: ` (a, b, c)`, or nothing where unnamed;
/// with what may be amiss with them: names that differ in case only, as many classes as
/// samples nearly (a column of ids).
pub(super) fn listed(names: &[String], samples: usize) -> String {
    if names.is_empty() {
        return String::new();
    }
    let mut lower: HashMap<String, &str> = HashMap::new();
    let twins = names.iter().find_map(|n| {
        lower
            .insert(n.to_lowercase(), n)
            .map(|other| (other, n.as_str()))
    });
    let mut amiss = String::new();
    if let Some((a, b)) = twins {
        amiss += &format!(
            "; `{}` and `{}` are two classes: they differ in case only",
            excerpt(a),
            excerpt(b)
        );
    }
    if names.len() > 20 && names.len() * 2 > samples {
        amiss += &format!(
            "; {} classes of {samples} samples, most of one sample: is this the label column? (label=first|last|N)",
            names.len()
        );
    }
    format!(" ({}{amiss})", first_of(names, SHOWN))
}

/// Renumbers `set`'s labels to the classes `names` (`whose`: "the training set's", "the run's
/// model's"), matched by name where the set's labels are names; a set of class numbers stays
/// as it is against classes without names. Its class count becomes theirs where named.
pub(super) fn onto(set: &mut Dataset, names: &[String], whose: &str) -> Result<(), String> {
    match (set.names.is_empty(), names.is_empty()) {
        (true, true) => return Ok(()),
        (true, false) => {
            return Err(format!(
                "its labels are class numbers and {whose} classes are names ({}): label its rows by those names",
                first_of(names, SHOWN)
            ))
        }
        (false, true) => {
            return Err(format!(
                "its labels are class names ({}) and {whose} classes are numbers 0 to N-1: label its rows by class number",
                first_of(&set.names, SHOWN)
            ))
        }
        (false, false) => {}
    }
    let at: HashMap<&str, u32> = (names.iter().enumerate())
        .map(|(i, n)| (n.as_str(), i as u32))
        .collect();
    let mut to = Vec::with_capacity(set.names.len());
    for n in &set.names {
        match at.get(n.as_str()) {
            Some(&i) => to.push(i),
            None => {
                let like = (names.iter())
                    .find(|c| c.to_lowercase() == n.to_lowercase())
                    .map_or(String::new(), |c| {
                        format!(
                            " (it has `{}`: names match as written, case and all)",
                            excerpt(c)
                        )
                    });
                return Err(format!(
                    "its class `{}` is not one of {whose} classes ({}){like}: drop its rows, or train on a set that has it",
                    excerpt(n),
                    first_of(names, SHOWN)
                ));
            }
        }
    }
    for l in set.y.iter_mut() {
        *l = to[*l as usize];
    }
    set.names = names.to_vec();
    set.classes = names.len().max(2);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(labels: &[&'static str]) -> Result<(Vec<u32>, Vec<String>), String> {
        let mut l = Labels::default();
        let mut y = (labels.iter().enumerate())
            .map(|(i, f)| l.read(i + 1, 4, f))
            .collect::<Result<Vec<_>, _>>()?;
        let names = l.finish(&mut y);
        Ok((y, names))
    }

    #[test]
    fn names_are_numbered_in_sorted_order_whatever_order_rows_come_in() {
        let (y, names) = read(&["virginica", "setosa", "versicolor", "setosa"]).unwrap();
        assert_eq!(names, ["setosa", "versicolor", "virginica"]);
        assert_eq!(y, [2, 0, 1, 0]);
        let (y, names) = read(&["2", "0", "1"]).unwrap();
        assert!(names.is_empty());
        assert_eq!(y, [2, 0, 1]);
    }

    #[test]
    fn a_column_of_numbers_and_names_is_refused_naming_both_lines() {
        let e = read(&["0", "1", "setosa"]).unwrap_err();
        assert!(
            e.contains("line 3, column 4")
                && e.contains("`setosa` is a name where line 1's, `0`, is a class number"),
            "{e}"
        );
        let e = read(&["setosa", "2"]).unwrap_err();
        assert!(
            e.contains("`2` is a number where line 1's, `setosa`, is a class name"),
            "{e}"
        );
        for bad in ["-1", "0.5", "70000"] {
            let e = read(&["0", bad]).unwrap_err();
            assert!(
                e.contains(&format!("label `{bad}` is not a class number")),
                "{e}"
            );
        }
        // not-a-number and infinity are names where names are, not numbers
        let (_, names) = read(&["cat", "nan", "inf"]).unwrap();
        assert_eq!(names, ["cat", "inf", "nan"]);
        assert!(read(&["0", "NaN"]).unwrap_err().contains("`NaN` is a name"));
        // a header's label over numbered rows: its line 1 may be a header
        let e = read(&["target", "3"]).unwrap_err();
        assert!(e.contains("(line 1 a header? add ,header"), "{e}");
        assert!(!read(&["0", "0", "x"]).unwrap_err().contains("header"));
    }

    #[test]
    fn names_that_differ_in_case_only_or_as_many_as_samples_are_said() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(listed(&names(&["a", "b"]), 10), " (a, b)");
        let l = listed(&names(&["Setosa", "setosa", "x"]), 10);
        assert!(
            l.contains("`Setosa` and `setosa` are two classes: they differ in case only"),
            "{l}"
        );
        let ids: Vec<String> = (0..60).map(|i| format!("id-{i}")).collect();
        let l = listed(&ids, 60);
        assert!(
            l.contains("60 classes of 60 samples, most of one sample"),
            "{l}"
        );
        assert!(!listed(&ids, 600).contains("most of one"));
        assert_eq!(listed(&[], 5), "");
    }

    #[test]
    fn another_sets_names_are_matched_to_the_classes_by_name() {
        let mut set = crate::data::Dataset {
            features: 1,
            classes: 2,
            image: None,
            x: vec![0.0; 3],
            y: vec![1, 0, 1],
            names: vec!["b".into(), "c".into()],
            pictures: None,
        };
        let classes: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        onto(&mut set, &classes, "the training set's").unwrap();
        assert_eq!((set.y.as_slice(), set.classes), (&[2, 1, 2][..], 3));
        let mut odd = crate::data::Dataset {
            names: vec!["z".into()],
            y: vec![0],
            ..set.clone()
        };
        let e = onto(&mut odd, &classes, "the training set's").unwrap_err();
        assert!(
            e.contains("class `z` is not one of the training set's classes (a, b, c)"),
            "{e}"
        );
        odd.names = vec!["B".into()];
        let e = onto(&mut odd, &classes, "the training set's").unwrap_err();
        assert!(
            e.contains("(it has `b`: names match as written, case and all)"),
            "{e}"
        );
        let mut numbered = crate::data::Dataset {
            names: Vec::new(),
            ..set.clone()
        };
        let e = onto(&mut numbered, &classes, "the run's model's").unwrap_err();
        assert!(
            e.contains("labels are class numbers and the run's model's classes are names"),
            "{e}"
        );
        assert!(onto(&mut numbered, &[], "the run's model's").is_ok());
        let e = onto(&mut set, &[], "the run's model's").unwrap_err();
        assert!(e.contains("labels are class names (a, b, c)"), "{e}");
    }
}
