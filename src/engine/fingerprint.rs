//! A 64-bit FNV-1a over words: what processes compare to know they hold the same numbers (the
//! data at start-up, the parameters in the replica check), and what a checkpoint records of its
//! training split (a resumed run on other contents is told). Word-wise, not byte-wise: it runs
//! over whole models; a change to it would only make a resume say its data changed.

use crate::data::Dataset;

pub(super) fn fingerprint(words: impl IntoIterator<Item = u64>) -> u64 {
    words.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, w| {
        (h ^ w).wrapping_mul(0x100_0000_01b3)
    })
}

/// A fingerprint of the data's shape and of up to 4096 samples spread over it, so that
/// processes that loaded different data (another file, another seed's split), and a resumed run
/// and its checkpoint's, are told apart without reading all of it.
pub(super) fn of_data(d: &Dataset) -> u64 {
    let n = d.len();
    // a picture set's samples are made batch by batch: its rows of the set, and what each of
    // those pictures is (a file's name and length), stand for them
    let rows = (0..n).step_by((n / 4096).max(1)).flat_map(|i| {
        let (x, row, picture) = match &d.pictures {
            None => (&d.x[i * d.features..(i + 1) * d.features], 0, Vec::new()),
            Some(p) => {
                let row = p.rows[i] as usize;
                (&[][..], row as u64, p.set.identity(row))
            }
        };
        [d.y[i] as u64, row]
            .into_iter()
            .chain(x.iter().map(|v| v.to_bits() as u64))
            .chain(picture)
    });
    let shape = [n, d.features, d.classes].map(|v| v as u64);
    fingerprint(shape.into_iter().chain(rows))
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
