//! Exact proportional division of an integer amount of energy.

/// Divides `total` among `weights` in proportion, in whole units, so that the parts add up to
/// `total` exactly (largest-remainder method). With all weights zero every part is zero and the
/// function returns `false`: nothing could be divided.
///
/// `out` is cleared and filled with one part per weight; it is a parameter so callers can reuse
/// its allocation tick after tick.
pub fn split_proportionally(total: u64, weights: &[u64], out: &mut Vec<u64>) -> bool {
    out.clear();
    let sum: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    if sum == 0 {
        out.resize(weights.len(), 0);
        return total == 0;
    }
    let total_wide = u128::from(total);
    let mut given: u128 = 0;
    // Remainders decide who gets the units that flooring left over.
    let mut remainders: Vec<(u128, usize)> = Vec::new();
    for (i, &w) in weights.iter().enumerate() {
        let exact = total_wide * u128::from(w);
        let part = exact / sum;
        let remainder = exact % sum;
        given += part;
        // The part never exceeds `total`, which fits in u64.
        out.push(part as u64);
        if remainder > 0 {
            remainders.push((remainder, i));
        }
    }
    // Fewer units are left than there are non-zero remainders (each remainder is below one
    // unit's worth), so `left` fits in usize whenever it is positive.
    let left = usize::try_from(total_wide - given).unwrap_or(usize::MAX);
    if left > 0 {
        // Largest remainder first; ties go to the lower index so results are deterministic.
        // Only the `left` largest matter: selecting them is linear, sorting all would not be.
        let order = |a: &(u128, usize), b: &(u128, usize)| b.0.cmp(&a.0).then(a.1.cmp(&b.1));
        if left < remainders.len() {
            remainders.select_nth_unstable_by(left - 1, order);
            remainders.truncate(left);
        }
        for &(_, i) in &remainders {
            if let Some(part) = out.get_mut(i) {
                *part += 1;
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn thirds_add_up() {
        let mut out = Vec::new();
        assert!(split_proportionally(10, &[1, 1, 1], &mut out));
        assert_eq!(out, vec![4, 3, 3]);
    }

    #[test]
    fn zero_weights_divide_nothing() {
        let mut out = Vec::new();
        assert!(!split_proportionally(10, &[0, 0], &mut out));
        assert_eq!(out, vec![0, 0]);
        assert!(split_proportionally(0, &[], &mut out));
    }

    proptest! {
        #[test]
        fn parts_always_sum_to_total(total in any::<u64>(), weights in proptest::collection::vec(any::<u64>(), 1..50)) {
            let mut out = Vec::new();
            let divided = split_proportionally(total, &weights, &mut out);
            prop_assert_eq!(out.len(), weights.len());
            if weights.iter().any(|&w| w > 0) {
                prop_assert!(divided);
                let sum: u128 = out.iter().map(|&p| u128::from(p)).sum();
                prop_assert_eq!(sum, u128::from(total));
                for (p, w) in out.iter().zip(&weights) {
                    if *w == 0 { prop_assert_eq!(*p, 0); }
                }
            }
        }

        #[test]
        fn parts_are_within_one_unit_of_the_exact_share(total in 0u64..1_000_000_000_000, weights in proptest::collection::vec(0u64..1_000_000_000, 1..30)) {
            let mut out = Vec::new();
            split_proportionally(total, &weights, &mut out);
            let sum: f64 = weights.iter().map(|&w| w as f64).sum();
            if sum > 0.0 {
                for (p, w) in out.iter().zip(&weights) {
                    let exact = total as f64 * (*w as f64) / sum;
                    prop_assert!((*p as f64 - exact).abs() <= 1.0 + exact * 1e-12);
                }
            }
        }
    }
}
