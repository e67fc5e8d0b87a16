//! A CSV line's fields: split at the commas outside double quotes, each trimmed and out of its
//! quotes, `""` inside them one `"` (as spreadsheets and pandas write text, and pandas'
//! `QUOTE_ALL` every field: `"1.5"`, `"Iris, setosa"`).

use std::borrow::Cow;

use crate::text::excerpt;

/// The fields of `line`, at most `most` of them (a longer line is seen, not stored).
pub(super) fn split(line: &str, most: usize) -> Result<Vec<Cow<'_, str>>, String> {
    if !line.contains('"') {
        return Ok(line
            .split(',')
            .take(most)
            .map(|f| f.trim().into())
            .collect());
    }
    let mut out = Vec::new();
    let mut rest = line;
    while out.len() < most {
        let t = rest.trim_start();
        let Some(quoted) = t.strip_prefix('"') else {
            match t.find(',') {
                Some(k) => {
                    out.push(t[..k].trim().into());
                    rest = &t[k + 1..];
                    continue;
                }
                None => {
                    out.push(t.trim().into());
                    break;
                }
            }
        };
        let (value, after) = unquoted(quoted).ok_or_else(|| {
            format!(
                "the quoted field `\"{}` has no closing quote",
                excerpt(quoted)
            )
        })?;
        out.push(value);
        let after = after.trim_start();
        match after.strip_prefix(',') {
            Some(r) => rest = r,
            None if after.is_empty() => break,
            None => {
                return Err(format!(
                    "`{}` follows a quoted field's closing quote: a field is quoted whole (\"...\"), with a quote inside it doubled (\"\")",
                    excerpt(after.split(',').next().unwrap_or(after))
                ))
            }
        }
    }
    Ok(out)
}

/// The value of a quoted field whose opening quote `s` follows (trimmed inside, `""` made `"`)
/// and what follows its closing quote; None where it has none.
fn unquoted(s: &str) -> Option<(Cow<'_, str>, &str)> {
    let mut doubled = false;
    let mut at = 0;
    loop {
        let k = at + s[at..].find('"')?;
        if s[k + 1..].starts_with('"') {
            doubled = true;
            at = k + 2;
            continue;
        }
        let inner = s[..k].trim();
        let value = match doubled {
            true => Cow::Owned(inner.replace("\"\"", "\"")),
            false => Cow::Borrowed(inner),
        };
        return Some((value, &s[k + 1..]));
    }
}

#[cfg(test)]
mod tests {
    use super::split;

    fn fields(line: &str) -> Vec<String> {
        split(line, 100)
            .unwrap()
            .into_iter()
            .map(|f| f.into_owned())
            .collect()
    }

    #[test]
    fn quoted_fields_keep_their_commas_and_quotes() {
        assert_eq!(fields(" 1 , 2.5,x "), ["1", "2.5", "x"]);
        assert_eq!(fields("1,2,"), ["1", "2", ""]);
        assert_eq!(
            fields("\"1.5\",\" 2\",\"Iris, setosa\""),
            ["1.5", "2", "Iris, setosa"]
        );
        assert_eq!(fields("1,\"say \"\"hi\"\"\", 3"), ["1", "say \"hi\"", "3"]);
        assert_eq!(fields("\"\",1"), ["", "1"]);
        assert_eq!(split("1,2,3,4", 2).unwrap().len(), 2);
        let e = split("1,\"open, 2", 100).unwrap_err();
        assert!(e.contains("has no closing quote"), "{e}");
        let e = split("\"a\"b,1", 100).unwrap_err();
        assert!(
            e.contains("`b` follows a quoted field's closing quote"),
            "{e}"
        );
    }
}
