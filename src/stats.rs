//! Small statistics the detectors and the benchmarks share.

/// The middle of `v` (of an even count, the mean of the middle two: neither flattered), NaNs
/// ordered last; 0 when empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let (n, mid) = (v.len(), v.len() / 2);
    let (below, upper, _) = v.select_nth_unstable_by(mid, f64::total_cmp);
    match below.iter().copied().max_by(f64::total_cmp) {
        Some(lower) if n % 2 == 0 => (lower + *upper) / 2.0,
        _ => *upper,
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn the_median_is_the_middle_value_whatever_the_order() {
        assert_eq!(median(vec![5.0, 1.0, 3.0]), 3.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![7.0]), 7.0);
        assert_eq!(median(vec![2.0, f64::NAN, 1.0]), 2.0);
        assert_eq!(median(Vec::new()), 0.0);
    }
}
