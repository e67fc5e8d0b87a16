//! Text in a message of words (`u64`s): its length in bytes, then its bytes eight a word.

/// `text` as words.
pub fn text_words(text: &str) -> Vec<u64> {
    let bytes = text.as_bytes();
    let mut words = vec![bytes.len() as u64];
    words.extend(bytes.chunks(8).map(|c| {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        u64::from_le_bytes(w)
    }));
    words
}

/// The text `text_words` made at the start of `words` (bytes that are not UTF-8 replaced),
/// and the words after it; of a message cut short, what it holds, and nothing after.
pub fn text_of(words: &[u64]) -> (String, &[u64]) {
    let Some((&len, rest)) = words.split_first() else {
        return (String::new(), words);
    };
    let n = usize::try_from(len.div_ceil(8)).map_or(rest.len(), |n| n.min(rest.len()));
    let (text, after) = rest.split_at(n);
    let bytes: Vec<u8> = text.iter().flat_map(|w| w.to_le_bytes()).collect();
    let len = usize::try_from(len).map_or(bytes.len(), |l| l.min(bytes.len()));
    (String::from_utf8_lossy(&bytes[..len]).into_owned(), after)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_goes_through_whole_and_a_cut_message_gives_what_it_holds() {
        for text in [
            "",
            "a",
            "abcdefgh",
            "cc1plus (pid 9) é",
            "abcdefghijklmnopq",
        ] {
            let mut words = text_words(text);
            words.push(7);
            assert_eq!(text_of(&words), (text.to_string(), &[7u64][..]));
        }
        let words = text_words("abcdefghij");
        assert_eq!(text_of(&words[..2]), ("abcdefgh".to_string(), &[][..]));
        assert_eq!(text_of(&[]), (String::new(), &[][..]));
        assert_eq!(text_of(&[u64::MAX, 0x41]).0, "A\0\0\0\0\0\0\0");
    }
}
