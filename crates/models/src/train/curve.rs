//! Curve fits on one MaxAbs-scaled feature, by Levenberg–Marquardt from a grid start.
//!
//! The grid start is a variable projection: for fixed nonlinear parameters (b; or x0, k) the
//! curve is linear in the others, which least squares gives exactly, so the grid point with
//! the lowest error is a start close to the optimum and LM only refines it.

// Index loops here read as the matrix formulas they implement.
#![allow(clippy::needless_range_loop)]

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

#[cfg(test)]
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
            // A trial step can make k huge: exp() far outside ±40 only changes s by < 1e-17
            // but takes libm's slow overflow/underflow path (50× slower per row on nx12).
            let s = 1.0 / (1.0 + (-k * (x - x0)).clamp(-40.0, 40.0).exp());
            let ds = a * s * (1.0 - s);
            grad.copy_from_slice(&[s, -k * ds, (x - x0) * ds, 1.0]);
            a * s + at(3)
        }
    }
}

/// Rows the grid start looks at: it only needs to land near the optimum, LM refines on all.
const GRID_ROWS: usize = 256;

/// `y ≈ a·s + c` by least squares over `(s, y)` pairs: `(a, c, SSE)`, from running sums in
/// one pass (no allocation: the grid tries hundreds of bases). A basis without variation
/// gets `a = 0`, as [`super::linalg::least_squares`] treats it.
fn linear_fit(pairs: impl Iterator<Item = (f64, f64)>) -> (f64, f64, f64) {
    let (mut n, mut sx, mut sy, mut sxx, mut sxy, mut syy) = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    for (s, y) in pairs {
        n += 1.0;
        sx += s;
        sy += y;
        sxx += s * s;
        sxy += s * y;
        syy += y * y;
    }
    let n = f64::max(n, 1.0);
    let (vxx, vxy, vyy) = (sxx - sx * sx / n, sxy - sx * sy / n, syy - sy * sy / n);
    let a = if vxx > 1e-18 * n { vxy / vxx } else { 0.0 };
    let c = (sy - a * sx) / n;
    let sse = (vyy - a * vxy).max(0.0);
    (a, c, if sse.is_finite() { sse } else { f64::INFINITY })
}

/// The grid start: candidate nonlinear parameters with the linear ones solved exactly, on
/// an evenly strided subsample of at most [`GRID_ROWS`] rows; the candidate of least error.
fn start(kind: CurveKind, x_all: &[f64], y_all: &[f64]) -> Vec<f64> {
    let stride = x_all.len().div_ceil(GRID_ROWS).max(1);
    let sample = || {
        x_all
            .iter()
            .zip(y_all)
            .step_by(stride)
            .map(|(x, y)| (*x, *y))
    };
    let mut best = (f64::INFINITY, Vec::new());
    let mut consider = |sse: f64, p: &dyn Fn() -> Vec<f64>| {
        if sse < best.0 {
            best = (sse, p());
        }
    };
    match kind {
        CurveKind::Logarithmic => {
            for i in 0..=48 {
                let b = 10f64.powf(-3.0 + 7.0 * f64::from(i) / 48.0);
                let (a, c, sse) = linear_fit(sample().map(|(x, y)| ((b * x + 1.0).ln(), y)));
                consider(sse, &|| vec![a, b, c]);
            }
        }
        CurveKind::Exponential => {
            for i in (-40..=40).filter(|i| *i != 0) {
                let b = f64::from(i) / 4.0;
                let (a, c, sse) = linear_fit(sample().map(|(x, y)| ((b * x).exp(), y)));
                consider(sse, &|| vec![a, b, c]);
            }
        }
        CurveKind::Logistic => {
            for i in 0..=10 {
                let x0 = f64::from(i) / 10.0;
                for j in 0..=15 {
                    let k = 10f64.powf(-0.5 + 2.5 * f64::from(j) / 15.0);
                    let s = |x: f64| 1.0 / (1.0 + (-k * (x - x0)).exp());
                    let (a, off, sse) = linear_fit(sample().map(|(x, y)| (s(x), y)));
                    consider(sse, &|| vec![a, x0, k, off]);
                }
            }
        }
    }
    best.1
}

/// Most parameters of a curve.
const MAX_PARAMS: usize = 4;
type Vector = [f64; MAX_PARAMS];
type Matrix = [[f64; MAX_PARAMS]; MAX_PARAMS];

/// SSE, JᵀJ and Jᵀr at `p` in one pass over the rows (the trial step's SSE and the next
/// step's normal equations cost the same exponentials, so LM never makes a second pass).
fn normal_equations(kind: CurveKind, p: &[f64], x: &[f64], y: &[f64]) -> (f64, Matrix, Vector) {
    let m = p.len().min(MAX_PARAMS);
    let (mut sse, mut jtj, mut jtr) = (0.0, [[0.0; MAX_PARAMS]; MAX_PARAMS], [0.0; MAX_PARAMS]);
    let mut row = [0.0; MAX_PARAMS];
    for (xi, yi) in x.iter().zip(y) {
        let r = yi - value_and_grad(kind, p, *xi, &mut row[..m]);
        sse += r * r;
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
    let finite = sse.is_finite() && jtj.iter().flatten().chain(&jtr).all(|v| v.is_finite());
    (if finite { sse } else { f64::INFINITY }, jtj, jtr)
}

/// Solves `a·x = b` for the leading `m`×`m` block of a symmetric positive definite `a` by
/// Cholesky; `None` when it is not (numerically) positive definite.
fn solve_small(a: &Matrix, b: &Vector, m: usize) -> Option<Vector> {
    let mut l = [[0.0; MAX_PARAMS]; MAX_PARAMS];
    for i in 0..m {
        for j in 0..=i {
            let s = a[i][j] - (0..j).map(|k| l[i][k] * l[j][k]).sum::<f64>();
            if i == j {
                if s.is_nan() || s <= 1e-12 * a[i][i].abs().max(f64::MIN_POSITIVE) {
                    return None;
                }
                l[i][i] = s.sqrt();
            } else {
                l[i][j] = s / l[j][j];
            }
        }
    }
    let mut z = [0.0; MAX_PARAMS];
    for i in 0..m {
        z[i] = (b[i] - (0..i).map(|k| l[i][k] * z[k]).sum::<f64>()) / l[i][i];
    }
    let mut out = [0.0; MAX_PARAMS];
    for i in (0..m).rev() {
        out[i] = (z[i] - (i + 1..m).map(|k| l[k][i] * out[k]).sum::<f64>()) / l[i][i];
    }
    out.iter().all(|v| v.is_finite()).then_some(out)
}

/// LM iterations at most; a start from the grid needs few.
const MAX_STEPS: usize = 50;
/// Stop once an accepted step lowers the SSE by less than this share (RMSE by 0.005 %).
/// An exact fit converges quadratically and never trips it early; a noisy fit whose optimum
/// lies at infinity (a logistic with its midpoint far left of the data turns exponential)
/// would otherwise crawl down that valley for every allowed step while the error changes
/// in the fourth digit (nx12: 50 steps for 0.2 % of SSE).
const REL_TOL: f64 = 1e-4;

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
    if p.is_empty() {
        // Every grid curve overflowed: the mean is the best constant.
        let mean = y.iter().sum::<f64>() / y.len().max(1) as f64;
        return match kind {
            CurveKind::Logistic => vec![0.0, 0.0, 1.0, mean],
            _ => vec![0.0, 1.0, mean],
        };
    }
    let m = p.len().min(MAX_PARAMS);
    let (mut cur, mut jtj, mut jtr) = normal_equations(kind, &p, x, y);
    if !cur.is_finite() {
        return p;
    }
    let mut lambda = 1e-3;
    for _ in 0..MAX_STEPS {
        let mut gain = None;
        for _ in 0..12 {
            let mut damped = jtj;
            for (i, r) in damped.iter_mut().enumerate().take(m) {
                r[i] += lambda * r[i].max(1e-12);
            }
            if let Some(delta) = solve_small(&damped, &jtr, m) {
                let next: Vec<f64> = p.iter().zip(&delta).map(|(a, d)| a + d).collect();
                let (s, j, r) = normal_equations(kind, &next, x, y);
                if s < cur {
                    gain = Some((cur - s) / cur.max(1e-300));
                    (p, cur, jtj, jtr) = (next, s, j, r);
                    lambda = (lambda / 10.0).max(1e-12);
                    break;
                }
            }
            lambda *= 10.0;
        }
        if gain.is_none_or(|g| g < REL_TOL) {
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
