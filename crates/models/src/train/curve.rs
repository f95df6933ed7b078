//! Curve fits on one MaxAbs-scaled feature, by Levenberg–Marquardt from a grid start.
//!
//! The grid start is a variable projection: for fixed nonlinear parameters (b; or x0, k) the
//! curve is linear in the others, which least squares gives exactly, so the grid point with
//! the lowest error is a start close to the optimum and LM only refines it.

// Index loops here read as the matrix formulas they implement.
#![allow(clippy::needless_range_loop)]

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

/// The curve's value and its gradient in the parameters at `x`.
fn value_and_grad(kind: CurveKind, p: &[f64], x: f64, grad: &mut [f64]) -> f64 {
    let at = |i: usize| p.get(i).copied().unwrap_or(f64::NAN);
    match kind {
        CurveKind::Logarithmic => {
            let (a, b) = (at(0), at(1));
            let u = b * x + 1.0;
            let l = u.ln();
            grad.copy_from_slice(&[l, a * x / u, 1.0]);
            a * l + at(2)
        }
        CurveKind::Exponential => {
            let (a, b) = (at(0), at(1));
            let e = (b * x).exp();
            grad.copy_from_slice(&[e, a * x * e, 1.0]);
            a * e + at(2)
        }
        CurveKind::Logistic => {
            let (a, x0, k) = (at(0), at(1), at(2));
            let s = 1.0 / (1.0 + (-k * (x - x0)).exp());
            let ds = a * s * (1.0 - s);
            grad.copy_from_slice(&[s, -k * ds, (x - x0) * ds, 1.0]);
            a * s + at(3)
        }
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

/// Rows the grid start looks at: it only needs to land near the optimum, LM refines on all.
const GRID_ROWS: usize = 256;

/// The grid start: candidate parameter vectors with the linear ones solved exactly, on an
/// evenly strided subsample of at most [`GRID_ROWS`] rows.
fn start(kind: CurveKind, x_all: &[f64], y_all: &[f64]) -> Vec<f64> {
    let stride = x_all.len().div_ceil(GRID_ROWS).max(1);
    let x: Vec<f64> = x_all.iter().step_by(stride).copied().collect();
    let y: Vec<f64> = y_all.iter().step_by(stride).copied().collect();
    let (x, y) = (x.as_slice(), y.as_slice());
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
        .map(|c| (sse(kind, &c, x, y), c))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
        .unwrap_or_default()
}

/// Fits the curve to `(x, y)`; parameters in the model-DB order.
pub(crate) fn fit(kind: CurveKind, x: &[f64], y: &[f64]) -> Vec<f64> {
    // A component without variation (core and uncore on many machines read 0 W) is a
    // constant: a = 0 makes the curve ignore its input.
    if let Some(first) = y.first() {
        if y.iter().all(|v| v == first) {
            return match kind {
                CurveKind::Logistic => vec![0.0, 0.0, 1.0, *first],
                _ => vec![0.0, 1.0, *first],
            };
        }
    }
    let mut p = start(kind, x, y);
    let m = p.len();
    let mut cur = sse(kind, &p, x, y);
    let mut lambda = 1e-3;
    let mut row = vec![0.0; m];
    for _ in 0..100 {
        let mut jtj = vec![vec![0.0; m]; m];
        let mut jtr = vec![0.0; m];
        for (xi, yi) in x.iter().zip(y) {
            let r = yi - value_and_grad(kind, &p, *xi, &mut row);
            for a in 0..m {
                jtr[a] += row[a] * r;
                for b in 0..=a {
                    jtj[a][b] += row[a] * row[b];
                }
            }
        }
        for a in 0..m {
            for b in 0..a {
                jtj[b][a] = jtj[a][b];
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
                    improved = gain > 1e-9;
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
