//! A 64-bit FNV-1a over words: what processes compare to know they hold the same numbers (the
//! data at start-up, the parameters in the replica check). Word-wise, not byte-wise: it is
//! compared only between processes of one build, and it runs over whole models.

pub(super) fn fingerprint(words: impl IntoIterator<Item = u64>) -> u64 {
    words.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, w| {
        (h ^ w).wrapping_mul(0x100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::fingerprint;

    #[test]
    fn one_changed_bit_or_order_changes_it() {
        let a = [1u64, 2, 3];
        assert_eq!(fingerprint(a), fingerprint([1, 2, 3]));
        assert_ne!(fingerprint(a), fingerprint([1, 2, 3 ^ 1 << 40]));
        assert_ne!(fingerprint(a), fingerprint([2, 1, 3]));
    }
}
