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

/// Of `known`, the one `word` most likely misspells (`batch_per_replica`: `batch-per-replica`),
/// where one is near enough: a few edits, `_` and `-` alike.
pub fn nearest<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    let norm = |w: &str| -> Vec<char> { w.to_lowercase().replace('_', "-").chars().collect() };
    let w = norm(word);
    let most = (w.len() / 3).clamp(1, 3);
    (known.iter())
        .map(|k| (edits(&w, &norm(k)), *k))
        .filter(|(d, _)| *d <= most)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// The fewest insertions, deletions and substitutions that make `a` into `b`.
fn edits(a: &[char], b: &[char]) -> usize {
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
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
        assert_eq!(nearest("", &known), None);
        assert_eq!(edits(&['a', 'b'], &[]), 2);
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
