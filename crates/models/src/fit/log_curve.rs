//! The logarithmic load curve of the `rapl` built-in models: `idle + (max − idle)·g(u)` with
//! `g(u) = ln(1 + b·u) / ln(1 + b)`, pinned at idle (`u = 0`) and full load (`u = 1`), its
//! curvature `b` fitted to the points between.

use crate::builtin::CurveParams;

use super::stats::round_digits;

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
/// log grid, then refined by golden section around the best grid point; rounded to 6
/// significant digits.
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

/// The logarithmic curve through `(utilisation, watts)` points: the first point is idle
/// (`u = 0`), the last full load (`u = 1`), and the curvature is fitted to the points between
/// them, normalised to the idle–full span. Also returns the largest miss at those inner
/// points, in W. `None` for fewer than two points.
pub fn fit_log_curve(points: &[(f64, f64)]) -> Option<(CurveParams, f64)> {
    let (&(_, idle), rest) = points.split_first()?;
    let (&(_, max), inner) = rest.split_last()?;
    let span = max - idle;
    let inner: Vec<(f64, f64)> = inner
        .iter()
        .map(|(u, p)| (*u, if span > 0.0 { (p - idle) / span } else { 0.0 }))
        .collect();
    let b = fit_log_b(&inner);
    let miss = inner
        .iter()
        .map(|(u, y)| ((log_shape(b, *u) - y) * span).abs())
        .fold(0.0, f64::max);
    let curve = CurveParams {
        idle_w: round_digits(idle, 12),
        max_w: round_digits(max, 12),
        log_b: Some(b),
    };
    Some((curve, miss))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_curve_through_load_points_keeps_its_ends() {
        // 50 W idle, 150 W at full load, inner points on the b = 5 curve.
        let on_curve = |u: f64| 50.0 + 100.0 * log_shape(5.0, u);
        let pts = [
            (0.0, 50.0),
            (0.1, on_curve(0.1)),
            (0.5, on_curve(0.5)),
            (1.0, 150.0),
        ];
        let (curve, miss) = fit_log_curve(&pts).unwrap();
        assert_eq!((curve.idle_w, curve.max_w), (50.0, 150.0));
        assert!((curve.log_b.unwrap() - 5.0).abs() < 1e-4);
        assert!(miss < 1e-3, "{miss}");
        // A flat component (no power change) gets the straight-line bound, no miss.
        let (flat, miss) = fit_log_curve(&[(0.0, 3.0), (0.5, 3.0), (1.0, 3.0)]).unwrap();
        assert_eq!((flat.idle_w, flat.max_w, miss), (3.0, 3.0, 0.0));
        assert!(fit_log_curve(&[(0.0, 1.0)]).is_none());
    }
}
