//! What a scan tells the user: the classes and their sizes, the files it ignored and the ones
//! it skipped, each kept to a few lines however large the folder (ImageNet has 1000 classes; a
//! folder of another format's files would otherwise be a line per file).

use std::collections::BTreeMap;

use super::Folder;

/// Classes listed one by one up to this many; more are summed up.
const LISTED_CLASSES: usize = 20;
/// Skipped files named one by one up to this many; more are counted by why.
const NAMED_SKIPS: usize = 10;
/// Reasons the skipped files past those named are counted under, the most common first.
const REASONS: usize = 3;

/// The scan's start-up notes (`training`: a run's set, whose accuracy also picks its best
/// checkpoint; else a set eval scores).
pub fn notes(f: &Folder, training: bool) -> Vec<String> {
    let mut notes = vec![format!("{}: {}", f.dir.display(), classes(f))];
    // (a validation folder, whose classes are the training set's, may lack some)
    let missing: Vec<&str> = (f.classes.iter().zip(f.counts()))
        .filter(|&(_, n)| n == 0)
        .map(|(c, _)| c.as_str())
        .collect();
    if !missing.is_empty() {
        let shown: Vec<&str> = missing.iter().take(LISTED_CLASSES).copied().collect();
        let also = match training {
            true => " (--checkpoint-best's choice too)",
            false => "",
        };
        notes.push(format!(
            "{}: no picture of {} ({}{}): the accuracy measured on it{also} is over the other classes only; add some of each",
            f.dir.display(),
            crate::text::counted(missing.len(), "class"),
            shown.join(", "),
            if missing.len() > shown.len() { ", ..." } else { "" }
        ));
    }
    if !f.ignored.is_empty() {
        let total = f.ignored.values().sum::<usize>();
        let by: Vec<String> = f.ignored.iter().map(|(e, n)| format!("{e} {n}")).collect();
        notes.push(format!(
            "{}: {} that {} not .jpg/.jpeg/.png ignored ({}); convert them to read them",
            f.dir.display(),
            crate::text::counted(total, "file"),
            if total == 1 { "is" } else { "are" },
            by.join(", ")
        ));
    }
    if let Some((n, one)) = &f.loose {
        notes.push(format!(
            "{}: {} beside the class folders, in none of them, left out (e.g. {one})",
            f.dir.display(),
            crate::text::counted(*n, "picture"),
        ));
    }
    let named = match f.skipped.len() > NAMED_SKIPS + 2 {
        true => NAMED_SKIPS,
        false => f.skipped.len(),
    };
    notes.extend(f.skipped[..named].iter().map(|s| s.to_string()));
    let rest = &f.skipped[named..];
    if !rest.is_empty() {
        let mut by: BTreeMap<String, usize> = BTreeMap::new();
        for s in rest {
            *by.entry(numbers_as_n(&s.why)).or_default() += 1;
        }
        let mut by: Vec<(String, usize)> = by.into_iter().collect();
        by.sort_by_key(|b| std::cmp::Reverse(b.1));
        let mut reasons: Vec<String> = (by.iter().take(REASONS))
            .map(|(why, n)| format!("{n}: {why}"))
            .collect();
        let others: usize = by.iter().skip(REASONS).map(|(_, n)| n).sum();
        if others > 0 {
            reasons.push(format!("{others}: other reasons"));
        }
        notes.push(format!(
            "{}: {} more files skipped besides the {named} above ({})",
            f.dir.display(),
            rest.len(),
            reasons.join("; ")
        ));
    }
    notes
}

/// A reason with its numbers as N, so that the files cut short at different bytes count as
/// one reason.
fn numbers_as_n(why: &str) -> String {
    let (mut out, mut in_number) = (String::with_capacity(why.len()), false);
    for c in why.chars() {
        match c.is_ascii_digit() {
            true if in_number => {}
            true => out.push('N'),
            false => out.push(c),
        }
        in_number = c.is_ascii_digit();
    }
    out
}

/// "2 classes: cat (4), dog (2)", or for many classes their number and the smallest and largest.
fn classes(f: &Folder) -> String {
    let counts = f.counts();
    let mut listed: Vec<(&String, usize)> = f.classes.iter().zip(counts).collect();
    let n = listed.len();
    let show = |l: &[(&String, usize)]| {
        l.iter()
            // (a count in brackets: a name can hold digits and spaces, `10`, `chat noir`)
            .map(|(name, c)| format!("{} ({c})", crate::text::printable(name)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if n <= LISTED_CLASSES {
        let classes = crate::text::counted(n, "class");
        return format!("{classes}: {}", show(&listed));
    }
    listed.sort_by_key(|&(_, c)| c);
    let (least, most) = (listed[0].1, listed[n - 1].1);
    if least == most {
        return format!(
            "{n} classes of {} each",
            crate::text::counted(most, "picture")
        );
    }
    format!(
        "{n} classes of {least} to {most} pictures (fewest: {}; most: {})",
        show(&listed[..3]),
        show(&listed[n - 3..])
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::folder::Skipped;
    use std::path::PathBuf;

    fn folder(counts: &[usize], skipped: &[(&str, &str)]) -> Folder {
        let classes: Vec<String> = (0..counts.len()).map(|c| format!("c{c:02}")).collect();
        let labels: Vec<u32> = (counts.iter().enumerate())
            .flat_map(|(c, &n)| std::iter::repeat_n(c as u32, n))
            .collect();
        Folder {
            dir: "/data/train".into(),
            classes,
            files: vec![PathBuf::new(); labels.len()],
            sizes: vec![(8, 8); labels.len()],
            labels,
            skipped: (skipped.iter())
                .map(|(p, why)| Skipped {
                    path: p.into(),
                    why: why.to_string(),
                })
                .collect(),
            loose: None,
            ignored: Default::default(),
        }
    }

    #[test]
    fn many_classes_are_summed_up_and_the_extremes_named() {
        assert_eq!(
            notes(&folder(&[3], &[]), true),
            ["/data/train: 1 class: c00 (3)"]
        );
        let few = notes(&folder(&[4, 2], &[]), true);
        assert_eq!(few, ["/data/train: 2 classes: c00 (4), c01 (2)"]);
        let even = notes(&folder(&[1300; 1000], &[]), true);
        assert_eq!(even, ["/data/train: 1000 classes of 1300 pictures each"]);
        let ones = notes(&folder(&[1; 30], &[]), true);
        assert_eq!(ones, ["/data/train: 30 classes of 1 picture each"]);
        let mut counts = vec![50; 25];
        (counts[3], counts[7], counts[20]) = (2, 900, 1);
        let uneven = notes(&folder(&counts, &[]), true);
        assert_eq!(
            uneven,
            ["/data/train: 25 classes of 1 to 900 pictures (fewest: c20 (1), c03 (2), c00 (50); most: c23 (50), c24 (50), c07 (900))"]
        );
    }

    #[test]
    fn many_skipped_files_are_counted_by_why_past_the_first_ten() {
        let twelve: Vec<(&str, &str)> = vec![("a.jpg", "damaged"); 12];
        let all = notes(&folder(&[1], &twelve), true);
        assert_eq!(all.len(), 13, "{all:?}");
        assert_eq!(all[12], "skipped a.jpg: damaged");
        let mut many = vec![("x.jpg", "not a picture"); 15];
        many.extend([("y.jpg", "too large"); 3]);
        many.extend([
            ("z.jpg", "a FIFO"),
            ("w.jpg", "cut short"),
            ("v.jpg", "a socket"),
        ]);
        many.extend([
            ("c1.jpg", "ends at byte 48213"),
            ("c2.jpg", "ends at byte 9"),
        ]);
        let told = notes(&folder(&[1], &many), true);
        assert_eq!(told.len(), 12, "{told:?}");
        assert!(told[1..11]
            .iter()
            .all(|l| l == "skipped x.jpg: not a picture"));
        assert_eq!(
            told[11],
            "/data/train: 13 more files skipped besides the 10 above (5: not a picture; 3: too large; 2: ends at byte N; 3: other reasons)"
        );
    }

    #[test]
    fn a_skipped_file_s_name_is_said_on_one_line() {
        let s = Skipped {
            path: "/data/dog/bad\nname.png".into(),
            why: "cannot be decoded".into(),
        };
        assert_eq!(
            s.to_string(),
            "skipped /data/dog/bad\\nname.png: cannot be decoded"
        );
    }
}
