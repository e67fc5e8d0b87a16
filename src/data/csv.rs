//! CSV: one sample per line, numeric features and one label column (class numbers or names).

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use super::host_memory;
use super::labels::Labels;
use super::{finish, DataError, Dataset};
use crate::files::read::{self, Expect};
use crate::text::excerpt;

/// The most fields a row may have: a million features is far past any model here, and the
/// cap keeps a hostile line from allocating without bound.
const MAX_FIELDS: usize = 1 << 20;

/// Which column holds the label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LabelColumn {
    First,
    Last,
    Index(usize),
}

impl FromStr for LabelColumn {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "first" => Ok(Self::First),
            "last" => Ok(Self::Last),
            _ => s.parse().map(Self::Index).map_err(|_| {
                format!("label column `{s}` must be first, last or a 0-based column number")
            }),
        }
    }
}

impl fmt::Display for LabelColumn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::First => f.write_str("first"),
            Self::Last => f.write_str("last"),
            Self::Index(i) => write!(f, "{i}"),
        }
    }
}

/// Reads a CSV file of at most an eighth of the machine's memory: held as text while parsed,
/// then as floats (up to twice the text for one-digit values) and split, a CSV takes up to
/// about eight times its size.
pub(super) fn read(path: &Path, flag: &'static str) -> Result<String, DataError> {
    let (memory, _) = host_memory::machine_memory();
    let fix = format!(
        "the cap is an eighth of {}, as loading a CSV takes up to about 8 times its size; train on a sample of its rows",
        host_memory::memory_text()
    );
    let expect = Expect {
        what: "a CSV file",
        flag,
        max: memory / 8,
        fix: &fix,
    };
    read::read_text(path, &expect).map_err(|e| DataError::read(e, flag))
}

/// Lines ended by LF, CRLF or a lone CR (old Mac files).
fn lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (line, next) = match rest.find(['\n', '\r']) {
            None => (rest, ""),
            Some(i) if rest[i..].starts_with("\r\n") => (&rest[..i], &rest[i + 2..]),
            Some(i) => (&rest[..i], &rest[i + 1..]),
        };
        rest = next;
        Some(line)
    })
}

/// What the text's line 1 may be that its reading (`header` or not) did not take it for, said
/// after the set read from it (`set`): under `,header` a line of numbers and a label like the
/// samples' (a sample skipped); without it, where labels are names, a label no other row has
/// (a header read as a sample of a class of its own).
pub(super) fn line_one_note(
    text: &str,
    label: LabelColumn,
    header: bool,
    set: &Dataset,
) -> Option<String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let line = lines(text).next().filter(|l| !l.trim().is_empty())?;
    let fields: Vec<&str> = line.split(',').map(field).collect();
    let lc = match label {
        LabelColumn::First => 0,
        LabelColumn::Last => fields.len().checked_sub(1)?,
        LabelColumn::Index(c) => c,
    };
    let named = fields.get(lc)?;
    if header {
        let features =
            (fields.iter().enumerate()).all(|(j, f)| j == lc || f.parse::<f64>().is_ok());
        let a_class = named.parse::<f64>().is_ok() || set.names.iter().any(|n| n == named);
        return (features && a_class).then(|| {
            "its line 1, numbers and a label like the samples', left out as the header ,header names: drop ,header if it is a sample".into()
        });
    }
    let first = *set.y.first()?;
    let alone = set.y.iter().filter(|&&y| y == first).count() == 1;
    (!set.names.is_empty() && alone && set.len() > 2).then(|| {
        format!(
            "its line 1's label `{}` is no other row's class: if line 1 is a header, add ,header",
            excerpt(named)
        )
    })
}

/// A field's value: trimmed, and out of its double quotes where it is quoted (as pandas'
/// `QUOTE_ALL` and spreadsheets write every field: `"1.5"`).
fn field(f: &str) -> &str {
    let f = f.trim();
    match f.strip_prefix('"').and_then(|f| f.strip_suffix('"')) {
        Some(inner) => inner.trim(),
        None => f,
    }
}

/// Parses CSV text; errors name the line (1-based) and column, and their fixes the flag that
/// named the file (`--data`, `--val-data`).
pub(super) fn parse(
    text: &str,
    label: LabelColumn,
    header: bool,
    flag: &str,
) -> Result<Dataset, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut x = Vec::new();
    let mut y = Vec::new();
    let mut labels = Labels::default();
    let mut width = None;
    let mut commas_end = None;
    for (i, line) in lines(text).enumerate() {
        let lineno = i + 1;
        if (header && i == 0) || line.trim().is_empty() {
            continue;
        }
        // at most one field more than the row may have, so that a long row is seen, not stored
        let most = width.map_or(MAX_FIELDS, |w: usize| w) + 1;
        // (a quoted field with a comma inside is split by it: said, not read as two halves)
        let split_quote = |f: &&str| {
            let f = f.trim();
            f == "\"" || f.starts_with('"') != f.ends_with('"')
        };
        if line.contains('"') && line.split(',').take(most).any(|f| split_quote(&f)) {
            return Err(format!("line {lineno}: a quoted field holds a comma (a decimal comma, or text): fields are numbers with decimal points, separated by commas"));
        }
        let fields: Vec<&str> = line.split(',').take(most).map(field).collect();
        if fields.len() > MAX_FIELDS {
            return Err(format!("line {lineno} has more than {MAX_FIELDS} fields, the most a row may have; is it a CSV file (one sample per line, values separated by commas)?"));
        }
        let w = *width.get_or_insert(fields.len());
        // (whether the first row ended with a comma: every row's doing so is the file's way)
        commas_end.get_or_insert(line.trim_end().ends_with(','));
        if fields.len() != w {
            let n = if fields.len() > w {
                format!("more than {w}")
            } else {
                fields.len().to_string()
            };
            return Err(format!("line {lineno} has {n} fields but earlier lines have {w}; every row needs the same number of columns"));
        }
        if w < 2 {
            // a CSV of another locale or a TSV: its separator named
            let other = [(';', "semicolons", ";"), ('\t', "tabs", "\\t"), ('|', "bars", "|")]
                .into_iter()
                .find(|(c, _, _)| line.contains(*c))
                .map_or(String::new(), |(_, name, tr)| {
                    format!(" (its values look separated by {name}: mgtop-train reads commas; convert it, e.g. tr '{tr}' ',' < in.csv > out.csv)")
                });
            return Err(format!(
                "line {lineno} has {w} field; a row needs at least one feature and a label{other}"
            ));
        }
        let lc = match label {
            LabelColumn::First => 0,
            LabelColumn::Last => w - 1,
            LabelColumn::Index(c) if c < w => c,
            LabelColumn::Index(c) => {
                return Err(format!(
                    "label column {c} does not exist: rows have {w} columns (0..{})",
                    w - 1
                ))
            }
        };
        for (j, f) in fields.iter().enumerate() {
            if f.is_empty() {
                return Err(empty_field(lineno, j, w, commas_end == Some(true)));
            }
            if j == lc {
                y.push(labels.read(lineno, j, f)?);
            } else {
                let v: f32 = f.parse().map_err(|_| {
                    // (line 1's word over a word in the line after: a labels' column)
                    let below = lines(text).skip(i + 1).find(|l| !l.trim().is_empty());
                    let labels = below
                        .and_then(|l| l.split(',').nth(j))
                        .is_some_and(|b| field(b).parse::<f64>().is_err());
                    not_a_number(lineno, j, f, header || labels, flag)
                })?;
                if !v.is_finite() {
                    return Err(format!(
                        "line {lineno}, column {j} (from 0): `{}` is not a finite number; replace or drop rows with NaN or infinite values",
                        excerpt(f)
                    ));
                }
                x.push(v);
            }
        }
    }
    if y.is_empty() {
        return Err(no_rows(text, header));
    }
    let names = labels.finish(&mut y);
    let mut set = finish(width.map_or(0, |w| w - 1), x, y)?;
    set.names = names;
    Ok(set)
}

/// Why a file gave no samples, saying what it holds.
fn no_rows(text: &str, header: bool) -> String {
    if text.is_empty() {
        return "the file is empty; it needs one sample per line: features and a label, separated by commas".into();
    }
    let holds = if header && lines(text).filter(|l| !l.trim().is_empty()).count() == 1 {
        "only the header line".to_string()
    } else if text.bytes().all(|b| b == b'\r') {
        format!(
            "{} carriage return (CR) characters and nothing else",
            text.len()
        )
    } else {
        format!("{} bytes of whitespace and line breaks only", text.len())
    };
    format!("file has no data rows: it holds {holds}; it needs one sample per line: features and a label, separated by commas")
}

/// Why feature `f` (line `lineno`, column `col`) is refused, with what it may be: line 1 a
/// header (not under `,header`), a word on a later line a class label (its column the
/// labels').
fn not_a_number(lineno: usize, col: usize, f: &str, header: bool, flag: &str) -> String {
    let pick = match col {
        0 => "first".to_string(),
        c => c.to_string(),
    };
    let may = match (lineno == 1 && !header, f.chars().any(char::is_alphabetic)) {
        (true, _) => format!(" (if line 1 is a header, add ,header to {flag})"),
        (false, true) => {
            format!(" (if column {col} holds the class labels, pick it with label={pick})")
        }
        (false, false) => String::new(),
    };
    format!(
        "line {lineno}, column {col} (from 0): `{}` is not a number{may}",
        excerpt(f)
    )
}

/// Why field `col` of line `lineno` (of `w` fields) is empty: a comma at the end of every line
/// (`commas_end`: the first row's did; a spreadsheet's export), or a missing value.
fn empty_field(lineno: usize, col: usize, w: usize, commas_end: bool) -> String {
    if col == w - 1 && commas_end {
        return format!("line {lineno} ends with a comma, an empty last column (column {col}, from 0); remove the commas at the ends of the lines, e.g. sed 's/,[[:space:]]*$//' in.csv > out.csv");
    }
    format!("line {lineno}, column {col} (from 0) is empty: a missing value; fill it in or drop the row")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, label: LabelColumn, header: bool) -> Result<Dataset, String> {
        super::parse(text, label, header, "--data")
    }

    #[test]
    fn parses_label_columns_and_header() {
        let d = parse("a,b,c\n1,2,0\n3,4,1\n", LabelColumn::Last, true).unwrap();
        assert_eq!(
            (d.features, d.classes, d.x.clone(), d.y.clone()),
            (2, 2, vec![1.0, 2.0, 3.0, 4.0], vec![0, 1])
        );
        let d = parse("2,1.5,7\n0,2.5,8\n", LabelColumn::First, false).unwrap();
        assert_eq!((d.y.clone(), d.classes), (vec![2, 0], 3));
        let d = parse("1.5,2,7\n2.5,0,8\n", LabelColumn::Index(1), false).unwrap();
        assert_eq!(d.x, vec![1.5, 7.0, 2.5, 8.0]);
        // every field quoted (pandas' QUOTE_ALL, spreadsheets): read as the numbers inside
        let quoted = "\"a\",\"b\",\"label\"\n\"1.5\",\" 2\",\"1\"\n\"3\",\"4\",\"0\"\n";
        let d = parse(quoted, LabelColumn::Last, true).unwrap();
        assert_eq!(
            (d.x.clone(), d.y.clone()),
            (vec![1.5, 2.0, 3.0, 4.0], vec![1, 0])
        );
        let e = parse("\"1\",\"\",\"0\"\n", LabelColumn::Last, false).unwrap_err();
        assert!(e.contains("column 1 (from 0) is empty"), "{e}");
        let e = parse("\"1,5\",\"2\",\"0\"\n", LabelColumn::Last, false).unwrap_err();
        assert!(e.contains("line 1: a quoted field holds a comma"), "{e}");
    }

    #[test]
    fn a_line_1_read_otherwise_than_it_looks_is_said() {
        let note = |text: &str, label, header| {
            let set = parse(text, label, header).unwrap();
            super::line_one_note(text, label, header, &set)
        };
        // a sample skipped under ,header: numbers and a label like the others', numbered or named
        for text in ["1,2.5,0\n3,4,1\n5,6,0\n", "1,2,cat\n3,4,dog\n5,6,cat\n"] {
            let n = note(text, LabelColumn::Last, true).unwrap();
            assert!(
                n.contains("its line 1, numbers and a label like the samples'"),
                "{n}"
            );
        }
        // a real header of numbered columns (pandas' for integer column names) is no sample
        assert_eq!(
            note("0,1,species\n3,4,dog\n5,6,cat\n", LabelColumn::Last, true),
            None
        );
        assert_eq!(note("a,b,label\n3,4,1\n", LabelColumn::Last, true), None);
        let quoted = "\"a\",\"b\",\"label\"\n\"1.5\",\" 2\",\"1\"\n\"3\",\"4\",\"0\"\n";
        assert_eq!(note(quoted, LabelColumn::Last, true), None);
        // without ,header: a header of numbered columns reads as a class of one sample
        let n = note(
            "0,1,species\n3,4,dog\n5,6,cat\n7,8,dog\n",
            LabelColumn::Last,
            false,
        )
        .unwrap();
        assert!(n.contains("line 1's label `species` is no other row's class: if line 1 is a header, add ,header"), "{n}");
        assert_eq!(
            note("1,2,cat\n3,4,dog\n5,6,cat\n", LabelColumn::Last, false),
            None
        );
        // a word among the features: its column may be the labels' (on line 1 too, where the
        // line after has a word there; a word over a number is a header's)
        let e = parse("setosa,1,2\nversicolor,3,4\n", LabelColumn::Last, false).unwrap_err();
        assert!(e.contains("line 1, column 0 (from 0): `setosa` is not a number (if column 0 holds the class labels, pick it with label=first)"), "{e}");
        let e = parse("x,y,label\n1,2,0\n", LabelColumn::Last, false).unwrap_err();
        assert!(
            e.contains("(if line 1 is a header, add ,header to --data)"),
            "{e}"
        );
        let e = parse("1,2,3\nsetosa,4,1\n", LabelColumn::Last, false).unwrap_err();
        assert!(
            e.contains("`setosa` is not a number (if column 0 holds the class labels, pick it with label=first)") && !e.contains(",header"),
            "{e}"
        );
    }

    #[test]
    fn errors_name_the_line_and_the_fix() {
        let e = parse("1,2,0\n3,4\n", LabelColumn::Last, false).unwrap_err();
        assert!(e.contains("line 2 has 2 fields"), "{e}");
        let e = parse("1;2;0\n3;4;1\n", LabelColumn::Last, false).unwrap_err();
        assert!(
            e.contains("line 1 has 1 field") && e.contains("separated by semicolons"),
            "{e}"
        );
        let e = parse("x,y,label\n1,2,0\n", LabelColumn::Last, false).unwrap_err();
        assert!(
            e.contains("line 1, column 0 (from 0)") && e.contains(",header"),
            "{e}"
        );
        let e = parse("1,2,-1\n", LabelColumn::Last, false).unwrap_err();
        assert!(e.contains("label `-1`"), "{e}");
        let e = parse("1,2,0.5\n", LabelColumn::Last, false).unwrap_err();
        assert!(e.contains("label `0.5`"), "{e}");
        // class names are the classes, in sorted order
        let d = parse(
            "a,b,label\n1,2,setosa\n3,4,Iris virginica\n",
            LabelColumn::Last,
            true,
        )
        .unwrap();
        assert_eq!(
            (d.names.as_slice(), d.y.as_slice(), d.classes),
            (
                &["Iris virginica".to_string(), "setosa".into()][..],
                &[1, 0][..],
                2
            )
        );
        let e = parse("", LabelColumn::Last, false).unwrap_err();
        assert!(e.contains("empty"), "{e}");
        let e = parse("1,2\n", LabelColumn::Index(5), false).unwrap_err();
        assert!(e.contains("label column 5"), "{e}");
        // a missing value, a feature's or the label's, is said as one
        for text in ["1,2,0\n3,,1\n", "1,2,0\n3,4,\n"] {
            let label = LabelColumn::First;
            let e = parse(text, label, false).unwrap_err();
            assert!(
                e.contains("line 2, column ") && e.contains("is empty: a missing value"),
                "{e}"
            );
        }
        let e = parse("1,,0\n", LabelColumn::Last, false).unwrap_err();
        assert!(e.contains("line 1, column 1 (from 0) is empty"), "{e}");
        // a comma ending every line: named, with the way to drop it
        let e = parse("1,2,0,\n3,4,1,\n", LabelColumn::Index(2), false).unwrap_err();
        assert!(
            e.starts_with("line 1 ends with a comma") && e.contains("sed"),
            "{e}"
        );
    }

    #[test]
    fn files_that_are_not_text_say_what_they_are() {
        let dir = tempfile::tempdir().unwrap();
        for (bytes, said) in [
            (&b"\x1f\x8b\x08\0\0\0"[..], "gzip-compressed: unpack it first (gunzip -k FILE)"),
            (b"PK\x03\x04\x14\0", "a zip archive"),
            (b"\xff\xfe1\x002\x00", "UTF-16 text"),
            (b"1\x00,\x002\x00,\x000\x00\n\x001\x00,\x002\x00,\x000\x00\n\x001\x00,\x002\x00,\x000\x00\n\x00", "UTF-16 text"),
            (b"1,2,0\n\x003,4,1\n", "a NUL byte (byte 6): it is a binary file"),
            // a binary file's NULs are not UTF-16's (an IDX file given as csv:)
            (&[0u8, 0, 8, 3, 0, 0, 0, 10, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 0][..], "binary file"),
            (b"BZh91AY&SY", "bzip2-compressed"),
        ] {
            let f = dir.path().join("d.csv");
            std::fs::write(&f, bytes).unwrap();
            let e = super::read(&f, "--data").unwrap_err().to_string();
            assert!(e.contains(said) && e.contains("plain UTF-8 text"), "{e}");
        }
        // text that begins as bzip2's mark does is text
        let f = dir.path().join("d.csv");
        std::fs::write(&f, "BZh,2,0\n1,2,1\n").unwrap();
        let e = super::read(&f, "--data").err().map(|e| e.to_string());
        assert!(e.as_ref().is_none_or(|e| !e.contains("bzip2")), "{e:?}");
    }

    #[test]
    fn a_csv_larger_than_an_eighth_of_memory_is_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("big.csv");
        let (memory, _) = host_memory::machine_memory();
        // sparse: nothing is written, and nothing may be read
        std::fs::File::create(&f)
            .unwrap()
            .set_len(memory / 8 + 1)
            .unwrap();
        let e = super::read(&f, "--data").unwrap_err().to_string();
        assert!(
            e.contains("mgtop-train reads as a CSV file")
                && e.contains("train on a sample of its rows"),
            "{e}"
        );
    }

    #[test]
    fn a_byte_order_mark_and_any_line_ending_are_read() {
        let d = parse("\u{feff}1,2,0\n3,4,1\n", LabelColumn::Last, false).unwrap();
        assert_eq!(d.x, vec![1.0, 2.0, 3.0, 4.0]);
        let d = parse("\u{feff}a,b,c\r\n1,2,0\r\n", LabelColumn::Last, true).unwrap();
        assert_eq!(d.x, vec![1.0, 2.0]);
        let d = parse("1,2,0\r3,4,1\r", LabelColumn::Last, false).unwrap();
        assert_eq!(
            (d.x.clone(), d.y.clone()),
            (vec![1.0, 2.0, 3.0, 4.0], vec![0, 1])
        );
        let e = parse("1,2,0\r3,x,1\r", LabelColumn::Last, false).unwrap_err();
        assert!(e.starts_with("line 2, column 1 (from 0): `x`"), "{e}");
    }

    #[test]
    fn a_file_without_rows_says_what_it_holds() {
        let e = parse("\r\r\r\r", LabelColumn::Last, false).unwrap_err();
        assert!(
            e.contains("no data rows") && e.contains("4 carriage return (CR)"),
            "{e}"
        );
        let e = parse(" \n\n\t\r\n", LabelColumn::Last, false).unwrap_err();
        assert!(
            e.contains("no data rows") && e.contains("whitespace"),
            "{e}"
        );
        assert!(!e.contains("empty"), "{e}");
        let e = parse("a,b,label\n\n", LabelColumn::Last, true).unwrap_err();
        assert!(e.contains("only the header line"), "{e}");
    }

    #[test]
    fn rows_with_too_many_fields_are_refused_before_they_are_stored() {
        let wide = ",".repeat(MAX_FIELDS + 10);
        let e = parse(&wide, LabelColumn::Last, false).unwrap_err();
        assert!(e.contains("line 1 has more than 1048576 fields"), "{e}");
        let e = parse(&format!("1,2,0\n{wide}"), LabelColumn::Last, false).unwrap_err();
        assert!(e.contains("line 2 has more than 3 fields"), "{e}");
    }

    #[test]
    fn fields_in_messages_are_cut_short_and_escaped() {
        let huge = "9".repeat(10_000_000) + "x";
        let e = parse(&format!("1,{huge},0\n"), LabelColumn::Last, false).unwrap_err();
        assert!(e.len() < 300 && e.contains("9999…`"), "{} bytes", e.len());
        let e = parse(&format!("1,2,0\n1,2,{huge}\n"), LabelColumn::Last, false).unwrap_err();
        assert!(
            e.len() < 300 && e.contains("label `9999"),
            "{} bytes",
            e.len()
        );
        let e = parse("1,\x1b[2J,0\n", LabelColumn::Last, false).unwrap_err();
        assert!(e.contains("`\\u{1b}[2J`"), "{e}");
    }

    #[test]
    fn nan_and_infinite_values_are_refused_with_their_place() {
        for v in ["NaN", "inf", "-infinity", "1e39"] {
            let e = parse(&format!("1,2,0\n3,{v},1\n"), LabelColumn::Last, false).unwrap_err();
            assert!(
                e.contains("line 2, column 1 (from 0)") && e.contains("not a finite number"),
                "{v}: {e}"
            );
        }
        let e = parse("1,2,0\n1,2,NaN\n", LabelColumn::Last, false).unwrap_err();
        assert!(e.contains("label `NaN` is a name"), "{e}");
    }
}
