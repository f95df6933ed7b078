//! Medians, a robust line, an error summary and decimal rounding.

/// Median; `None` for no values. Even counts average the middle two.
pub fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.into_iter().collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => v.get(n / 2).copied(),
        _ => Some((v.get(n / 2 - 1)? + v.get(n / 2)?) / 2.0),
    }
}

/// Theil–Sen line `y = intercept + slope·x`: slope = median of the pairwise slopes (pairs with
/// equal x skipped), intercept = median of `y − slope·x`. Robust to the outliers SPECpower
/// has (blade enclosures, 2007 servers), unlike least squares. Returns (intercept, slope);
/// `None` for no points.
pub fn theil_sen(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let mut slopes = Vec::new();
    for (i, (x1, y1)) in points.iter().enumerate() {
        for (x2, y2) in points.iter().skip(i + 1) {
            if x2 != x1 {
                slopes.push((y2 - y1) / (x2 - x1));
            }
        }
    }
    let slope = median(slopes).unwrap_or(0.0);
    let intercept = median(points.iter().map(|(x, y)| y - slope * x))?;
    Some((intercept, slope))
}

/// Median absolute percentage error of `predict` over `(x, y)` points with `y > 0`, in %;
/// NaN when no point has `y > 0`.
pub fn mdape(points: &[(f64, f64)], predict: impl Fn(f64) -> f64) -> f64 {
    median(
        points
            .iter()
            .filter(|(_, y)| *y > 0.0)
            .map(|(x, y)| 100.0 * (predict(*x) - y).abs() / y),
    )
    .unwrap_or(f64::NAN)
}

/// Rounds to `digits` significant digits (exact decimal formatting, platform-independent).
pub fn round_digits(x: f64, digits: usize) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    format!("{x:.*e}", digits.saturating_sub(1))
        .parse()
        .unwrap_or(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median([3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median([4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(Vec::new()), None);
    }

    #[test]
    fn theil_sen_ignores_an_outlier() {
        let pts = [(1.0, 3.0), (2.0, 5.0), (3.0, 7.0), (4.0, 9.0), (5.0, 100.0)];
        assert_eq!(theil_sen(&pts), Some((1.0, 2.0)));
        assert_eq!(theil_sen(&[]), None);
    }

    #[test]
    fn mdape_skips_points_without_power() {
        let pts = [(1.0, 10.0), (2.0, 0.0), (3.0, 20.0), (4.0, 40.0)];
        // Misses of 10 %, 50 % and 0 %: the median is 10 %.
        let predict = |x: f64| match x {
            1.0 => 11.0,
            3.0 => 30.0,
            _ => 40.0,
        };
        assert_eq!(mdape(&pts, predict), 10.0);
        assert!(mdape(&[(1.0, 0.0)], |x| x).is_nan());
    }

    #[test]
    fn rounding_is_to_significant_digits() {
        assert_eq!(round_digits(123.456_789, 4), 123.5);
        assert_eq!(round_digits(0.000_123_456, 2), 0.000_12);
        assert_eq!(round_digits(0.0, 3), 0.0);
        assert!(round_digits(f64::NAN, 3).is_nan());
    }
}
