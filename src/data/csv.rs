//! CSV: one sample per line, numeric features and one integer label column.

use std::fmt;
use std::str::FromStr;

use super::{finish, Dataset};

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

/// Parses CSV text; errors name the line (1-based) and column.
pub(super) fn parse(text: &str, label: LabelColumn, header: bool) -> Result<Dataset, String> {
    let mut x = Vec::new();
    let mut y = Vec::new();
    let mut width = None;
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        if (header && i == 0) || line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let w = *width.get_or_insert(fields.len());
        if fields.len() != w {
            return Err(format!("line {lineno} has {} fields but earlier lines have {w}; every row needs the same number of columns", fields.len()));
        }
        if w < 2 {
            return Err(format!(
                "line {lineno} has {w} field; a row needs at least one feature and a label"
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
            if j == lc {
                let v: f64 = f.parse().map_err(|_| bad_label(lineno, j, f))?;
                if v < 0.0 || v.fract() != 0.0 || v >= 65536.0 {
                    return Err(bad_label(lineno, j, f));
                }
                y.push(v as u32);
            } else {
                let v: f32 = f
                    .parse()
                    .map_err(|_| format!("line {lineno}, column {j}: `{f}` is not a number (if line 1 is a header, add ,header to --data)"))?;
                if !v.is_finite() {
                    return Err(format!(
                        "line {lineno}, column {j}: `{f}` is not a finite number"
                    ));
                }
                x.push(v);
            }
        }
    }
    finish(width.map_or(0, |w| w - 1), x, y)
}

fn bad_label(line: usize, col: usize, f: &str) -> String {
    format!("line {line}, column {col}: label `{f}` is not a class index (an integer 0..65535); pick the label column with label=first|last|N")
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    #[test]
    fn errors_name_the_line_and_the_fix() {
        let e = parse("1,2,0\n3,4\n", LabelColumn::Last, false).unwrap_err();
        assert!(e.contains("line 2 has 2 fields"), "{e}");
        let e = parse("x,y,label\n1,2,0\n", LabelColumn::Last, false).unwrap_err();
        assert!(
            e.contains("line 1, column 0") && e.contains(",header"),
            "{e}"
        );
        let e = parse("1,2,-1\n", LabelColumn::Last, false).unwrap_err();
        assert!(e.contains("label `-1`"), "{e}");
        let e = parse("1,2,0.5\n", LabelColumn::Last, false).unwrap_err();
        assert!(e.contains("label `0.5`"), "{e}");
        let e = parse("", LabelColumn::Last, false).unwrap_err();
        assert!(e.contains("empty"), "{e}");
        let e = parse("1,2\n", LabelColumn::Index(5), false).unwrap_err();
        assert!(e.contains("label column 5"), "{e}");
    }
}
