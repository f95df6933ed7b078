//! Exact proportional division of an integer amount of energy.

/// Divides `total` among `weights` in proportion, in whole units, so that the parts add up to
/// `total` exactly (largest-remainder method). With all weights zero every part is zero and the
/// function returns `false`: nothing could be divided.
///
/// `out` is cleared and filled with one part per weight; it is a parameter so callers can reuse
/// its allocation tick after tick ([`Splitter`] also reuses the scratch space).
pub fn split_proportionally(total: u64, weights: &[u64], out: &mut Vec<u64>) -> bool {
    Splitter::default().split(total, weights, out)
}

/// [`split_proportionally`] with its scratch space kept between calls.
#[derive(Debug, Default)]
pub struct Splitter {
    /// (remainder, index) of the parts that flooring cut short, in 64-bit arithmetic.
    narrow: Vec<(u64, u32)>,
    /// The same in 128-bit arithmetic, for sums or products beyond 64 bits.
    wide: Vec<(u128, usize)>,
}

impl Splitter {
    pub fn split(&mut self, total: u64, weights: &[u64], out: &mut Vec<u64>) -> bool {
        out.clear();
        let sum: u128 = weights.iter().map(|&w| u128::from(w)).sum();
        if sum == 0 {
            out.resize(weights.len(), 0);
            return total == 0;
        }
        let max_weight = weights.iter().copied().max().unwrap_or(0);
        // Division and the selection of remainders dominate the cost; 64-bit division and
        // 16-byte entries are several times cheaper, and total × weight fits in 64 bits for
        // realistic ticks (micro-joules × nanoseconds).
        let narrow = (
            u64::try_from(sum),
            total.checked_mul(max_weight),
            u32::try_from(weights.len()),
        );
        if let (Ok(sum), Some(_), Ok(_)) = narrow {
            let mut given = 0u64;
            self.narrow.clear();
            for (i, &w) in weights.iter().enumerate() {
                // Cannot overflow: w <= max_weight and total * max_weight fits.
                let exact = total * w;
                let part = exact / sum;
                given += part;
                out.push(part);
                let remainder = exact % sum;
                if remainder > 0 {
                    // i < weights.len(), which fits in u32 (checked above).
                    self.narrow.push((remainder, i as u32));
                }
            }
            give_remaining(total - given, &mut self.narrow, out, |i| i as usize);
        } else {
            let mut given = 0u128;
            self.wide.clear();
            for (i, &w) in weights.iter().enumerate() {
                let exact = u128::from(total) * u128::from(w);
                let part = exact / sum;
                given += part;
                // The part never exceeds `total`, which fits in u64.
                out.push(part as u64);
                let remainder = exact % sum;
                if remainder > 0 {
                    self.wide.push((remainder, i));
                }
            }
            // `given` never exceeds `total`.
            give_remaining(total - given as u64, &mut self.wide, out, |i| i);
        }
        true
    }
}

/// Hands the `left` units that flooring left over to the largest remainders, one each; ties
/// go to the lower index so results are deterministic. Fewer units are left than there are
/// non-zero remainders (each is below one unit's worth).
fn give_remaining<R: Ord + Copy, I: Ord + Copy>(
    left: u64,
    remainders: &mut Vec<(R, I)>,
    out: &mut [u64],
    index: impl Fn(I) -> usize,
) {
    let left = usize::try_from(left).unwrap_or(usize::MAX);
    if left == 0 {
        return;
    }
    // Only the `left` largest matter: selecting them is linear, sorting all would not be.
    if left < remainders.len() {
        remainders.select_nth_unstable_by(left - 1, |a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        remainders.truncate(left);
    }
    for &(_, i) in remainders.iter() {
        if let Some(part) = out.get_mut(index(i)) {
            *part += 1;
        }
    }
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

    #[test]
    fn wide_and_narrow_arithmetic_agree() {
        // Same proportions, once small enough for 64-bit products and once not.
        let mut narrow = Vec::new();
        let mut wide = Vec::new();
        split_proportionally(1_000, &[3, 5, 7, 11], &mut narrow);
        split_proportionally(1_000, &[3 << 59, 5 << 59, 7 << 59, 11 << 59], &mut wide);
        assert_eq!(narrow.iter().sum::<u64>(), 1_000);
        assert_eq!(wide.iter().sum::<u64>(), 1_000);
        // 1000·w/26 = 115.38, 192.31, 269.23, 423.08: the one unit left goes to 115.38.
        assert_eq!(narrow, vec![116, 192, 269, 423]);
        assert_eq!(wide, narrow);
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
