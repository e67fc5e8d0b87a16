//! Small statistics the detectors and the benchmarks share.

/// The middle of `v` (the upper one of an even count), NaNs ordered last; 0 when empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mid = v.len() / 2;
    *v.select_nth_unstable_by(mid, f64::total_cmp).1
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn the_median_is_the_middle_value_whatever_the_order() {
        assert_eq!(median(vec![5.0, 1.0, 3.0]), 3.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 3.0);
        assert_eq!(median(vec![2.0, f64::NAN, 1.0]), 2.0);
        assert_eq!(median(Vec::new()), 0.0);
    }
}
