//! Curve fits on one MaxAbs-scaled feature, by Levenberg–Marquardt from a grid start.
//!
//! The grid start is a variable projection: for fixed nonlinear parameters (b; or x0, k) the
//! curve is linear in the others, which least squares gives exactly, so the grid point with
//! the lowest error is a start close to the optimum and LM only refines it.

use super::linalg::{least_squares, solve_spd, Mode};

/// The curve families, evaluated exactly as [`crate::curvefit`] does at inference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CurveKind {
    /// `[a, b, c]`: a·ln(b·x+1)+c.
    Logarithmic,
    /// `[a, b, c]`: a·e^(b·x)+c.
    Exponential,
    /// `[A, x0, k, off]`: A/(1+e^(−k(x−x0)))+off.
    Logistic,
}

pub(crate) fn eval(kind: CurveKind, p: &[f64], x: f64) -> f64 {
    let at = |i: usize| p.get(i).copied().unwrap_or(f64::NAN);
    match kind {
        CurveKind::Logarithmic => at(0) * (at(1) * x + 1.0).ln() + at(2),
        CurveKind::Exponential => at(0) * (at(1) * x).exp() + at(2),
        CurveKind::Logistic => at(0) / (1.0 + (-at(2) * (x - at(1))).exp()) + at(3),
    }
}

fn sse(kind: CurveKind, p: &[f64], x: &[f64], y: &[f64]) -> f64 {
    let s: f64 = x
        .iter()
        .zip(y)
        .map(|(x, y)| (eval(kind, p, *x) - y).powi(2))
        .sum();
    if s.is_finite() {
        s
    } else {
        f64::INFINITY
    }
}

/// The grid start: candidate parameter vectors with the linear ones solved exactly.
fn start(kind: CurveKind, x: &[f64], y: &[f64]) -> Vec<f64> {
    let linear = |basis: &dyn Fn(f64) -> f64| {
        let col: Vec<f64> = x.iter().map(|v| basis(*v)).collect();
        let (c, w) = least_squares(&[&col], y, Mode::Ordinary);
        (w.first().copied().unwrap_or(0.0), c)
    };
    let mut candidates: Vec<Vec<f64>> = Vec::new();
    match kind {
        CurveKind::Logarithmic => {
            for i in 0..=48 {
                let b = 10f64.powf(-3.0 + 7.0 * f64::from(i) / 48.0);
                let (a, c) = linear(&|v| (b * v + 1.0).ln());
                candidates.push(vec![a, b, c]);
            }
        }
        CurveKind::Exponential => {
            for i in -40..=40 {
                let b = f64::from(i) / 4.0;
                if b == 0.0 {
                    continue;
                }
                let (a, c) = linear(&|v| (b * v).exp());
                candidates.push(vec![a, b, c]);
            }
        }
        CurveKind::Logistic => {
            for i in 0..=10 {
                let x0 = f64::from(i) / 10.0;
                for j in 0..=15 {
                    let k = 10f64.powf(-0.5 + 2.5 * f64::from(j) / 15.0);
                    let (a, off) = linear(&|v| 1.0 / (1.0 + (-k * (v - x0)).exp()));
                    candidates.push(vec![a, x0, k, off]);
                }
            }
        }
    }
    candidates
        .into_iter()
        .min_by(|a, b| sse(kind, a, x, y).total_cmp(&sse(kind, b, x, y)))
        .unwrap_or_default()
}

/// Fits the curve to `(x, y)`; parameters in the model-DB order.
pub(crate) fn fit(kind: CurveKind, x: &[f64], y: &[f64]) -> Vec<f64> {
    let mut p = start(kind, x, y);
    let m = p.len();
    let mut cur = sse(kind, &p, x, y);
    let mut lambda = 1e-3;
    for _ in 0..200 {
        // Central-difference Jacobian of the curve, accumulated straight into JᵀJ and Jᵀr.
        let steps: Vec<f64> = p.iter().map(|v| 1e-6 * v.abs().max(1e-3)).collect();
        let mut jtj = vec![vec![0.0; m]; m];
        let mut jtr = vec![0.0; m];
        let mut row = vec![0.0; m];
        for (xi, yi) in x.iter().zip(y) {
            for j in 0..m {
                let mut hi = p.clone();
                let mut lo = p.clone();
                hi[j] += steps[j];
                lo[j] -= steps[j];
                row[j] = (eval(kind, &hi, *xi) - eval(kind, &lo, *xi)) / (2.0 * steps[j]);
            }
            let r = yi - eval(kind, &p, *xi);
            for a in 0..m {
                jtr[a] += row[a] * r;
                for b in 0..m {
                    jtj[a][b] += row[a] * row[b];
                }
            }
        }
        if jtj.iter().flatten().chain(&jtr).any(|v| !v.is_finite()) {
            break;
        }
        let mut improved = false;
        for _ in 0..12 {
            let mut damped = jtj.clone();
            for (i, r) in damped.iter_mut().enumerate() {
                r[i] += lambda * r[i].max(1e-12);
            }
            if let Some(delta) = solve_spd(&damped, &jtr) {
                let next: Vec<f64> = p.iter().zip(&delta).map(|(a, d)| a + d).collect();
                let s = sse(kind, &next, x, y);
                if s < cur {
                    let gain = (cur - s) / cur.max(1e-300);
                    p = next;
                    cur = s;
                    lambda = (lambda / 10.0).max(1e-12);
                    improved = gain > 1e-12;
                    break;
                }
            }
            lambda *= 10.0;
        }
        if !improved {
            break;
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_each_curve() {
        let x: Vec<f64> = (0..200).map(|i| f64::from(i) / 200.0).collect();
        let cases = [
            (CurveKind::Logarithmic, vec![30.0, 8.0, 50.0]),
            (CurveKind::Exponential, vec![20.0, 1.5, 40.0]),
            (CurveKind::Logistic, vec![100.0, 0.4, 12.0, 60.0]),
        ];
        for (kind, truth) in cases {
            let y: Vec<f64> = x.iter().map(|v| eval(kind, &truth, *v)).collect();
            let p = fit(kind, &x, &y);
            let worst = x
                .iter()
                .zip(&y)
                .map(|(v, y)| (eval(kind, &p, *v) - y).abs())
                .fold(0.0, f64::max);
            assert!(worst < 1e-3, "{kind:?}: {p:?} misses by {worst}");
        }
        // A flat component fits a constant.
        let flat = fit(CurveKind::Logarithmic, &x, &vec![0.0; x.len()]);
        assert!(x
            .iter()
            .all(|v| eval(CurveKind::Logarithmic, &flat, *v).abs() < 1e-9));
    }
}
