//! Words every layer writes: counts with their nouns.

/// `n` and the noun, singular for one: `counted(1, "file")` is "1 file", `counted(2, "class")`
/// "2 classes".
pub fn counted(n: usize, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        _ if noun.ends_with('s') || noun.ends_with('x') => format!("{n} {noun}es"),
        _ => format!("{n} {noun}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_is_singular_and_the_rest_plural() {
        assert_eq!(counted(1, "file"), "1 file");
        assert_eq!(counted(0, "file"), "0 files");
        assert_eq!(counted(2, "class"), "2 classes");
        assert_eq!(counted(3, "step"), "3 steps");
        assert_eq!(counted(30, "epoch"), "30 epochs");
    }
}
