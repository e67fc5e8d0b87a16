//! CSV: one sample per line, numeric features and one label column (class numbers or names).

mod fields;

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
                format!("label column `{s}` must be first, last, a 0-based column number or a column's name in the header")
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

/// The most of a file read for its first lines (`leading`).
const LEADING_MAX: u64 = 64 << 20;

/// The features of each row (all columns but the label's) from the file's first row alone (as
/// `parse` takes its width): for a model refused before the file is read whole. None where
/// that row does not tell (the load then says why).
pub(super) fn features_of_first_row(
    path: &Path,
    label: LabelColumn,
    header: bool,
) -> Option<usize> {
    let n = leading(path, header)?.1?.len();
    match label {
        LabelColumn::Index(c) if c >= n => None,
        _ => n.checked_sub(1).filter(|&d| d > 0),
    }
}

/// Whether line 1 of `path` reads as a row of samples (every field but the label column's a
/// number, its label one of `classes`, or a number where they are numbered: a header of
/// numbered columns, `0,1,2,label`, is none): not a header, whatever another file's reading
/// says. False where it cannot be read.
pub(crate) fn line_one_is_a_sample(path: &Path, label: LabelColumn, classes: &[String]) -> bool {
    let Some((fields, _)) = leading(path, true) else {
        return false;
    };
    let lc = match label {
        LabelColumn::First => 0,
        LabelColumn::Last => fields.len().saturating_sub(1),
        LabelColumn::Index(c) => c,
    };
    let labelled = |f: &str| match classes.is_empty() {
        true => f.trim().parse::<f64>().is_ok(),
        false => classes.iter().any(|c| c == f),
    };
    fields.len() > 1
        && lc < fields.len()
        && labelled(&fields[lc])
        && (fields.iter().enumerate()).all(|(j, f)| j == lc || f.trim().parse::<f64>().is_ok())
}

/// The position of the column `name` heads in line 1 (the header) of `path`: `label=NAME`.
/// Err: why not, naming the columns there are.
pub(super) fn column_named(path: &Path, name: &str) -> Result<usize, String> {
    let (fields, _) = leading(path, true).ok_or_else(|| {
        format!(
            "{} has no line 1 of text to find that column in (a plain CSV file is read there); give the label column's position, label=N from 0",
            path.display()
        )
    })?;
    let named: Vec<usize> = (0..fields.len()).filter(|&i| fields[i] == name).collect();
    match named[..] {
        [i] => Ok(i),
        // (the other would be read as a feature: a copy of the label among the inputs)
        [..] if named.len() > 1 => Err(format!(
            "line 1 of {} names {} columns `{}` (columns {} from 0); give the label column's position, label=N",
            path.display(),
            named.len(),
            excerpt(name),
            (named.iter().map(|i| i.to_string())).collect::<Vec<_>>().join(", "),
        )),
        _ => {
            let shown: Vec<String> = (fields.iter().take(12))
                .map(|f| format!("`{}`", excerpt(f)))
                .collect();
            let more = match fields.len() > shown.len() {
                true => format!(" ... ({} columns)", fields.len()),
                false => String::new(),
            };
            Err(format!(
                "no column of line 1 of {} is named `{}` (its columns: {}{more}); name one of them, or give the label column's position, label=N from 0",
                path.display(),
                excerpt(name),
                shown.join(", ")
            ))
        }
    }
}

/// The fields of line 1 of `path` and of its first row of values as `parse` takes them (the
/// first line that is not blank, after line 1 where that is the `header`; None where the
/// file ends first), read alone, at most `LEADING_MAX` bytes of it. None where the file is not
/// a plain file (a pipe is read once) or not text (gzip-compressed, binary: the load says so).
fn leading(path: &Path, header: bool) -> Option<(Vec<String>, Option<Vec<String>>)> {
    use std::io::{BufRead, Read};
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return None;
    }
    let file = std::fs::File::open(path).ok()?;
    let mut r = std::io::BufReader::new(file).take(LEADING_MAX);
    let mut bytes = Vec::new();
    let fields = |line: &str| -> Option<Vec<String>> {
        let fields = fields::split(line, MAX_FIELDS).ok()?;
        Some(fields.into_iter().map(|f| f.into_owned()).collect())
    };
    loop {
        // (whole lines: each read ends at a line's end, or at the file's or the bound's)
        let more = r.read_until(b'\n', &mut bytes).ok()? > 0;
        let text = std::str::from_utf8(&bytes)
            .ok()
            .filter(|t| !t.contains('\0'))?;
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut all = lines(text);
        let one = all.next();
        let rows = one.filter(|_| !header).into_iter().chain(all);
        let row = rows.into_iter().find(|l| !l.trim().is_empty());
        if row.is_some() || !more {
            return Some((fields(one?)?, row.and_then(fields)));
        }
    }
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
    let fields = fields::split(line, MAX_FIELDS).ok()?;
    let lc = match label {
        LabelColumn::First => 0,
        LabelColumn::Last => fields.len().checked_sub(1)?,
        LabelColumn::Index(c) => c,
    };
    let named = fields.get(lc)?.as_ref();
    if header {
        let features =
            (fields.iter().enumerate()).all(|(j, f)| j == lc || f.parse::<f64>().is_ok());
        let a_class = match set.names.is_empty() {
            true => named.parse::<f64>().is_ok(),
            false => set.names.iter().any(|n| n == named),
        };
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
        let fields = fields::split(line, most).map_err(|e| format!("line {lineno}: {e}"))?;
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
                    "label column {c} does not exist: rows have {w} columns (0 to {})",
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
                    let word_below = (below.and_then(|l| fields::split(l, j + 1).ok()))
                        .is_some_and(|b| b.get(j).is_some_and(|b| b.parse::<f64>().is_err()));
                    not_a_number(lineno, j, f, header || word_below, flag)
                })?;
                if !v.is_finite() {
                    // (a number past f32's range, 1e39 or 1e400, is read as infinite: one
                    // written in digits is no NaN or infinity)
                    let word = f.to_ascii_lowercase();
                    let why = match !word.contains("inf") && !word.contains("nan") {
                        true => "is too large for the 32-bit floats a model computes in (at most 3.4e38 either side of 0); scale the column down",
                        false => "is not a finite number; replace or drop rows with NaN or infinite values",
                    };
                    return Err(format!(
                        "line {lineno}, column {j} (from 0): `{}` {why}",
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
/// header (unless `no_header`: given `,header`, or a word below it in its column), else a
/// word a class label (its column the labels').
fn not_a_number(lineno: usize, col: usize, f: &str, no_header: bool, flag: &str) -> String {
    let pick = match col {
        0 => "first".to_string(),
        c => c.to_string(),
    };
    let may = match (
        lineno == 1 && !no_header,
        f.chars().any(char::is_alphabetic),
    ) {
        _ if f.contains(',') && f.replacen(',', ".", 1).parse::<f64>().is_ok() => {
            format!(
                " (a decimal comma: numbers take a decimal point, {})",
                f.replacen(',', ".", 1)
            )
        }
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
mod tests;
