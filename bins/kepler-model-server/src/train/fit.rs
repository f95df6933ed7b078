//! The few statistics training needs: medians, a Theil–Sen line, and the curvature of a
//! logarithmic curve pinned at both ends. All deterministic (no randomness, fixed iteration
//! counts, total ordering of floats).

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
/// has (blade enclosures, 2007 servers), unlike least squares.
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

/// Median absolute percentage error of `predict` over `(x, y)` points with `y > 0`, in %.
pub fn mdape(points: &[(f64, f64)], predict: impl Fn(f64) -> f64) -> f64 {
    median(
        points
            .iter()
            .filter(|(_, y)| *y > 0.0)
            .map(|(x, y)| 100.0 * (predict(*x) - y).abs() / y),
    )
    .unwrap_or(f64::NAN)
}

/// Bounds of the curvature `b`: below 1e-3 the curve is a straight line to 0.05 %, above 1e3
/// it is a step, which no measured CPU is.
const B_MIN: f64 = 1e-3;
const B_MAX: f64 = 1e3;

/// `g(u) = ln(1 + b·u) / ln(1 + b)`: 0 at idle, 1 at full load, concave for any b > 0.
pub fn log_shape(b: f64, u: f64) -> f64 {
    (1.0 + b * u).ln() / (1.0 + b).ln()
}

/// The curvature `b` whose [`log_shape`] best fits normalised points `(u, y)` (least
/// squares). Ends are pinned by construction, so only inner points matter. Searched on a
/// log grid, then refined by golden section around the best grid point.
pub fn fit_log_b(points: &[(f64, f64)]) -> f64 {
    let sse = |t: f64| -> f64 {
        let b = t.exp();
        points
            .iter()
            .map(|(u, y)| (log_shape(b, *u) - y).powi(2))
            .sum()
    };
    let (lo, hi) = (B_MIN.ln(), B_MAX.ln());
    const GRID: u32 = 400;
    let at = |i: u32| lo + (hi - lo) * f64::from(i) / f64::from(GRID);
    let best = (0..=GRID)
        .min_by(|a, b| sse(at(*a)).total_cmp(&sse(at(*b))))
        .unwrap_or(0);
    let (mut a, mut b) = (at(best.saturating_sub(1)), at((best + 1).min(GRID)));
    let phi = (5f64.sqrt() - 1.0) / 2.0;
    for _ in 0..100 {
        let c = b - phi * (b - a);
        let d = a + phi * (b - a);
        if sse(c) <= sse(d) {
            b = d;
        } else {
            a = c;
        }
    }
    round_digits(((a + b) / 2.0).exp(), 6)
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
    }

    #[test]
    fn recovers_a_known_curvature() {
        let pts: Vec<(f64, f64)> = [0.1, 0.5]
            .iter()
            .map(|u| (*u, log_shape(5.0, *u)))
            .collect();
        assert!((fit_log_b(&pts) - 5.0).abs() < 1e-4);
        // A straight line drives b to its lower bound.
        assert!(fit_log_b(&[(0.1, 0.1), (0.5, 0.5)]) <= 1.1e-3);
    }
}
