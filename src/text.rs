//! Words every layer writes: counts with their nouns, the word meant by a misspelt one.

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
