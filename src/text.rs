//! Words every layer writes: counts with their nouns, the word meant by a misspelt one, byte
//! counts, text from outside made safe to print (escaped, cut short), a TOML error in a line.

/// A setting as a command line gives it: `--lr 0.01`, or `--lr not given` for "" (what the
/// processes of a run compare, each value as a text).
pub fn setting(flag: &str, value: &str) -> String {
    match value {
        "" => format!("{flag} not given"),
        v => format!("{flag} {v}"),
    }
}

/// `n` and the noun, singular for one: `counted(1, "file")` is "1 file", `counted(2, "class")`
/// "2 classes".
pub fn counted(n: usize, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        _ if noun.ends_with('s') || noun.ends_with('x') => format!("{n} {noun}es"),
        _ => format!("{n} {noun}s"),
    }
}

/// A number as a message quotes it: as written where that is short, in scientific notation
/// where it is very large or small (`1e300`, not 301 digits).
pub fn number(x: f64) -> String {
    match x.abs() {
        a if a != 0.0 && a.is_finite() && !(1e-4..1e6).contains(&a) => format!("{x:e}"),
        _ => x.to_string(),
    }
}

/// Of `known`, the one `word` most likely misspells (`batch_per_replica`: `batch-per-replica`),
/// where one is near enough: a few edits, `_` and `-` alike.
pub fn nearest<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    let norm = |w: &str| -> Vec<char> { w.to_lowercase().replace('_', "-").chars().collect() };
    // (a flag's dashes written in a key: `--lr` is `lr`)
    let w = norm(word.trim_start_matches('-'));
    let most = (w.len() / 3).clamp(1, 3);
    (known.iter())
        .map(|k| (edits(&w, &norm(k)), *k))
        .filter(|(d, _)| *d <= most)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// The fewest insertions, deletions, substitutions and swaps of neighbours (`modle` is one
/// from `model`) that make `a` into `b`.
fn edits(a: &[char], b: &[char]) -> usize {
    // d[i][j]: a[..i] into b[..j]
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, first) in d[0].iter_mut().enumerate() {
        *first = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let mut best = (d[i - 1][j - 1] + usize::from(a[i - 1] != b[j - 1]))
                .min(d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// Shares of a whole (fractions) in whole percents that add up as the shares do: each rounded
/// down, then those that lost the most rounded up until the percents make the shares' total
/// (`[0.335, 0.335, 0.33]`: 34, 33, 33, where rounding each says 34, 34, 33). A share that is not
/// a number counts as none.
pub fn whole_percents(shares: &[f64]) -> Vec<u64> {
    let scaled: Vec<f64> = (shares.iter())
        .map(|s| match s.is_finite() {
            true => (s * 100.0).max(0.0),
            false => 0.0,
        })
        .collect();
    let total = scaled.iter().sum::<f64>().round() as u64;
    let mut percents: Vec<u64> = scaled.iter().map(|s| s.floor() as u64).collect();
    let mut by_loss: Vec<usize> = (0..scaled.len()).collect();
    by_loss.sort_by(|&a, &b| {
        (scaled[b] - scaled[b].floor()).total_cmp(&(scaled[a] - scaled[a].floor()))
    });
    let short = total.saturating_sub(percents.iter().sum());
    for &i in by_loss.iter().take(short as usize) {
        percents[i] += 1;
    }
    percents
}

/// The most characters of a file's content quoted in a message.
pub const EXCERPT_CHARS: usize = 40;
/// The most of a quoted part an error message prints (`clip_quotes`): a path as deep as any
/// a user types stays whole.
pub const QUOTED_CHARS: usize = 512;

/// A tensor's shape as a message gives it: `[64, 3, 7, 7]`; past 8 dimensions (a file's header
/// can claim a million) its first 6, its last and how many: `[1, 1, 1, 1, 1, 1, ..., 1] (1000 dims)`.
pub fn dims<D: std::fmt::Display>(shape: &[D]) -> String {
    const MOST: usize = 8;
    let list = |d: &[D]| d.iter().map(D::to_string).collect::<Vec<_>>().join(", ");
    match shape {
        [first @ .., last] if shape.len() > MOST => format!(
            "[{}, ..., {last}] ({} dims)",
            list(&first[..MOST - 2]),
            shape.len()
        ),
        _ => format!("[{}]", list(shape)),
    }
}

/// A byte count for people: "512 bytes", "1 MiB", "2.5 GiB".
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} bytes");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    let text = format!("{v:.1}");
    format!("{} {}", text.trim_end_matches(".0"), UNITS[unit])
}

/// `s` with its control characters escaped (`\u{1b}` for ESC): text from a file or a socket
/// printed to a terminal cannot move its cursor, retitle it or clear it.
pub fn printable(s: &str) -> String {
    escaped(s, false)
}

/// `printable`, its line breaks kept: a message of several lines (an error listing runs) whose
/// parts (a directory's name) came from outside.
pub fn printable_lines(s: &str) -> String {
    escaped(s, true)
}

/// Whether `c` would drive a terminal rather than show: a control character, or one that
/// reorders the text after it (Unicode's bidirectional embeddings, overrides and isolates:
/// U+202E turns the rest of a line right to left; the marks, as in right-to-left names, stay).
pub fn unprintable(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn escaped(s: &str, keep_lines: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if unprintable(c) && !(keep_lines && c == '\n') {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// The first `shown` of `names` (each an `excerpt`), then how many more: `a, b, c and 4 more`.
pub fn first_of(names: &[String], shown: usize) -> String {
    let mut s = (names.iter().take(shown))
        .map(|n| excerpt(n))
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > shown {
        s.push_str(&format!(" and {} more", names.len() - shown));
    }
    s
}

/// Untrusted text for a message: at most [`EXCERPT_CHARS`] characters, then an ellipsis, with
/// control characters escaped (`\r`, `\u{1b}`), so a field can neither flood nor drive the
/// terminal.
pub fn excerpt(s: &str) -> String {
    excerpt_of(s, EXCERPT_CHARS)
}

/// [`excerpt`] of at most `max` characters: for text that is told whole where it is what
/// the program wrote (a recipe's words), bounded where a file wrote it.
pub fn excerpt_of(s: &str, max: usize) -> String {
    let head: String = s.chars().take(max).collect();
    let mut out = printable(&head);
    if s.chars().nth(max).is_some() {
        out.push('…');
    }
    out
}

/// A parser's message about untrusted text (such as a TOML error) with each quoted part, `…`
/// or "…", made an [`excerpt`].
pub fn excerpt_quotes(msg: &str) -> String {
    quotes_mapped(msg, excerpt)
}

/// An error message whose quoted parts (`…` or "…") of over `max` characters keep their first
/// `max`, then `…`: a value of thousands of characters given to a flag or written in a file is
/// named, not printed whole.
pub fn clip_quotes(msg: &str, max: usize) -> String {
    quotes_mapped(msg, |s| match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    })
}

/// `msg` with each quoted part, `…` or "…", replaced by `f` of it.
fn quotes_mapped(msg: &str, f: impl Fn(&str) -> String) -> String {
    let mut out = String::new();
    let mut rest = msg;
    while let Some(i) = rest.find(['`', '"']) {
        let quote = &rest[i..i + 1];
        out.push_str(&rest[..=i]);
        rest = &rest[i + 1..];
        let end = rest.find(quote).unwrap_or(rest.len());
        out.push_str(&f(&rest[..end]));
        out.push_str(&rest[end..(end + 1).min(rest.len())]);
        rest = &rest[(end + 1).min(rest.len())..];
    }
    out.push_str(rest);
    out
}

/// The columns `s` takes on a terminal: a CJK character or an emoji two, a combining mark none.
pub fn columns(s: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(s)
}

/// `s` in `w` columns: cut with `…` where longer, padded with spaces where shorter (a table's
/// column of names, whatever their script).
pub fn in_columns(s: &str, w: usize) -> String {
    let mut out = String::new();
    let mut used = 0;
    if columns(s) > w {
        for c in s.chars() {
            let cw = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
            if used + cw + 1 > w {
                break;
            }
            out.push(c);
            used += cw;
        }
        out.push('…');
        used += 1;
    } else {
        out.push_str(s);
        used = columns(s);
    }
    out.extend(std::iter::repeat_n(' ', w.saturating_sub(used)));
    out
}

/// A TOML parser's error about `text` in one line: the line it is on, and what is wrong (an
/// unknown key with the known one it likely misspells, quoted parts made excerpts).
pub fn toml_error(text: &str, e: &toml::de::Error) -> (Option<usize>, String) {
    let line = e.span().map(|s| text[..s.start].matches('\n').count() + 1);
    let msg = e.message();
    let unknown = msg.strip_prefix("unknown field `").and_then(|rest| {
        let (key, rest) = rest.split_once('`')?;
        let known: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
        Some(match crate::text::nearest(key, &known) {
            Some(k) => format!("unknown key `{}`: did you mean `{k}`?", excerpt(key)),
            // (a short list is said whole: a theme file's)
            None if !known.is_empty() && known.len() <= 24 => format!(
                "unknown key `{}`: the keys are {}",
                excerpt(key),
                known.join(", ")
            ),
            None => format!("unknown key `{}`", excerpt(key)),
        })
    });
    let msg = unknown.unwrap_or_else(|| {
        let lines: Vec<&str> = msg
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        let mut msg = excerpt_quotes(&lines.join(": "));
        // a whole number of 0 or more that does not fit: too large, not of the wrong kind
        let too_large = (msg.strip_prefix("invalid value: integer `"))
            .and_then(|rest| rest.split_once("`, expected "))
            .filter(|(n, _)| !n.starts_with('-'))
            .and_then(|(n, ty)| {
                let most = match ty {
                    "u32" => u32::MAX as u64,
                    "u64" | "usize" => u64::MAX,
                    _ => return None,
                };
                Some(format!("the number `{n}` is too large: at most {most}"))
            });
        if let Some(m) = too_large {
            msg = m;
        }
        // serde's words for types are Rust's: said in a config file's
        for (rust, said) in [
            ("invalid type: string", "a text"),
            ("invalid type: floating point", "a fraction"),
            ("invalid type: integer", "a whole number"),
            ("invalid type: boolean", "true/false"),
            ("invalid value: integer", "the number"),
            (
                "invalid string: expected `\"`, `'`",
                "no value (a text goes in quotes, a number without)",
            ),
            ("expected u64", "expected a whole number of 0 or more"),
            ("expected usize", "expected a whole number of 0 or more"),
            ("expected u32", "expected a whole number of 0 or more"),
            ("expected f64", "expected a number"),
            ("expected f32", "expected a number"),
            ("expected a boolean", "expected true or false"),
            // (TOML's whole numbers are 64-bit signed)
            (
                "number too large to fit in target type",
                "a number too large for a config file: at most 9223372036854775807",
            ),
        ] {
            msg = msg.replace(rust, said);
        }
        if msg.starts_with("a text") && msg.contains("expected a") && msg.contains("number") {
            msg += " (numbers go without quotes)";
        }
        if msg.starts_with("invalid type: sequence") && msg.ends_with("expected a string") {
            msg = "a list, expected one text: give its items in one, comma-separated (\"crop:4,flip\", not [\"crop:4\", \"flip\"])".into();
        } else if !msg.starts_with("a text") && msg.ends_with("expected a string") {
            msg = msg.replace("expected a string", "expected a text (texts go in quotes)");
        }
        msg
    });
    // the key the line sets, where the message does not name it (a value's error)
    let at = line.and_then(|l| text.lines().nth(l - 1)).map(str::trim);
    // a bare word for true or false, as Python or YAML write it
    let word = at.and_then(|l| l.split_once('=')).map(|(_, v)| v.trim());
    let msg = match word {
        Some(w)
            if msg.starts_with("no value (a text")
                && ["true", "false", "yes", "no", "on", "off"]
                    .contains(&w.to_ascii_lowercase().as_str()) =>
        {
            format!(
                "{} is no TOML value: true and false are written so, in lower case (a text goes in quotes)",
                excerpt(w)
            )
        }
        _ => msg,
    };
    let msg = match at {
        Some(l) if l.starts_with('[') => format!(
            "{msg}: the file's keys are at its top level, without sections such as {}",
            excerpt(l)
        ),
        Some(l) if !msg.starts_with("unknown key") => match l.split_once('=') {
            Some((key, _))
                if !key.trim().is_empty() && !msg.contains(&format!("`{}`", key.trim())) =>
            {
                format!("`{}`: {msg}", excerpt(key.trim()))
            }
            _ => msg,
        },
        _ => msg,
    };
    (line, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_take_their_columns_whatever_their_script() {
        assert_eq!(in_columns("cat", 5), "cat  ");
        // two columns a CJK character, two an emoji, none a combining accent
        assert_eq!(in_columns("犬", 4), "犬  ");
        assert_eq!(columns(&in_columns("😀emoji", 8)), 8);
        assert_eq!(in_columns("Hu\u{308}ndchen", 9), "Hu\u{308}ndchen ");
        // cut where longer, the ellipsis within the width
        assert_eq!(in_columns("犬犬犬犬", 5), "犬犬…");
        assert_eq!(in_columns("犬犬犬犬", 6), "犬犬… ");
        assert_eq!(in_columns("abcdef", 4), "abc…");
    }

    #[test]
    fn a_misspelt_word_is_matched_to_the_nearest_known_one_when_near() {
        let known = ["batch-per-replica", "epochs", "steps", "lr", "log-every"];
        assert_eq!(
            nearest("batch_per_replica", &known),
            Some("batch-per-replica")
        );
        assert_eq!(nearest("epoch", &known), Some("epochs"));
        assert_eq!(nearest("Steps", &known), Some("steps"));
        assert_eq!(nearest("log_evry", &known), Some("log-every"));
        assert_eq!(nearest("colour", &known), None);
        // two letters swapped; a flag's dashes
        assert_eq!(nearest("modle", &["model", "name"]), Some("model"));
        assert_eq!(nearest("--lr", &known), Some("lr"));
        assert_eq!(nearest("", &known), None);
        assert_eq!(edits(&['a', 'b'], &[]), 2);
    }

    #[test]
    fn whole_percents_add_up_as_their_shares_do() {
        // rounding each part would say 34 + 34 + 33 = 101
        assert_eq!(whole_percents(&[0.335, 0.335, 0.33]), [34, 33, 33]);
        assert_eq!(
            whole_percents(&[0.696, 0.052, 0.068, 0.024, 0.16]),
            [70, 5, 7, 2, 16]
        );
        // parts that leave some of the whole keep to their own total
        assert_eq!(whole_percents(&[0.5, 0.2]), [50, 20]);
        assert_eq!(
            whole_percents(&[0.126, 0.126, 0.126]).iter().sum::<u64>(),
            38
        );
        assert_eq!(whole_percents(&[f64::NAN, -0.1, 0.4]), [0, 0, 40]);
    }

    #[test]
    fn numbers_are_quoted_short_at_any_size() {
        assert_eq!(number(1e300), "1e300");
        assert_eq!(number(-2.5e-9), "-2.5e-9");
        assert_eq!(number(0.2), "0.2");
        assert_eq!(number(0.0), "0");
        assert_eq!(number(f64::INFINITY), "inf");
        assert_eq!(number(123456.0), "123456");
    }

    #[test]
    fn one_is_singular_and_the_rest_plural() {
        assert_eq!(counted(1, "file"), "1 file");
        assert_eq!(counted(0, "file"), "0 files");
        assert_eq!(counted(2, "class"), "2 classes");
        assert_eq!(counted(3, "step"), "3 steps");
        assert_eq!(counted(30, "epoch"), "30 epochs");
    }

    #[test]
    fn text_from_outside_cannot_drive_the_terminal() {
        let name = "runs/evil\u{1b}[31mred\nline";
        assert_eq!(printable(name), "runs/evil\\u{1b}[31mred\\nline");
        // a message of several lines keeps its lines, not its escapes
        let message = format!("2 runs:\n  {name}");
        assert_eq!(
            printable_lines(&message),
            "2 runs:\n  runs/evil\\u{1b}[31mred\nline"
        );
    }

    #[test]
    fn an_error_names_a_huge_value_by_its_start() {
        let long = "10,".repeat(100_000);
        let msg =
            format!("--schedule: unknown schedule `x{long}`: use cosine or multistep:F,S1,S2");
        let clipped = clip_quotes(&msg, 8);
        assert_eq!(
            clipped,
            "--schedule: unknown schedule `x10,10,1…`: use cosine or multistep:F,S1,S2"
        );
        // short quoted parts, "…" ones too, stay whole
        let msg = "--prometheus \"0.0.0.0:x\": not an address; use `9091`";
        assert_eq!(clip_quotes(msg, 512), msg);
    }

    #[test]
    fn excerpts_are_short_and_escaped() {
        assert_eq!(excerpt("abc"), "abc");
        let long = "x".repeat(10_000_000);
        assert_eq!(excerpt(&long), format!("{}…", "x".repeat(EXCERPT_CHARS)));
        assert_eq!(excerpt("a\rb\x1b[2J"), "a\\rb\\u{1b}[2J");
        // text-direction controls are escaped too: the rest of the line stays in order
        assert_eq!(printable("run\u{202e}txt.exe"), "run\\u{202e}txt.exe");
        assert_eq!(printable("日本 ü \u{200f}"), "日本 ü \u{200f}");
        let msg = format!("invalid type: string \"{long}\", expected f64 at `lr`");
        let short = excerpt_quotes(&msg);
        assert_eq!(
            short,
            format!(
                "invalid type: string \"{}…\", expected f64 at `lr`",
                "x".repeat(EXCERPT_CHARS)
            )
        );
        assert_eq!(excerpt_quotes("unclosed `abc"), "unclosed `abc");
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(bytes(512), "512 bytes");
        assert_eq!(bytes(1 << 20), "1 MiB");
        assert_eq!(dims(&[64, 3, 7, 7]), "[64, 3, 7, 7]");
        assert_eq!(dims::<u64>(&[]), "[]");
        let mut many = vec![1; 1_000_000];
        many[999_999] = 5;
        assert_eq!(dims(&many), "[1, 1, 1, 1, 1, 1, ..., 5] (1000000 dims)");
        assert_eq!(bytes(5 << 29), "2.5 GiB");
    }
}
