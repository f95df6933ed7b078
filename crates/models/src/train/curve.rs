//! Curve fits on one MaxAbs-scaled feature, by Levenberg–Marquardt from a grid start.
//!
//! The grid start is a variable projection: for fixed nonlinear parameters (b; or x0, k) the
//! curve is linear in the others, which least squares gives exactly, so the grid point with
//! the lowest error is a start close to the optimum and LM only refines it. The logistic's
//! LM keeps projecting after every pass ([`varpro`]), and its per-row loops are vectorized
//! ([`kernels`]).

// Index loops here read as the matrix formulas they implement.
#![allow(clippy::needless_range_loop)]

mod kernels;
mod varpro;

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
    linear_from_sums(n, [sx, sxx, sxy], sy, syy)
}

/// [`linear_fit`] from its sums: `n`, `[Σs, Σs², Σs·y]`, Σy and Σy².
fn linear_from_sums(n: f64, [sx, sxx, sxy]: [f64; 3], sy: f64, syy: f64) -> (f64, f64, f64) {
    let n = f64::max(n, 1.0);
    let (vxx, vxy, vyy) = (sxx - sx * sx / n, sxy - sx * sy / n, syy - sy * sy / n);
    let a = if vxx > 1e-18 * n { vxy / vxx } else { 0.0 };
    let c = (sy - a * sx) / n;
    let sse = (vyy - a * vxy).max(0.0);
    (a, c, if sse.is_finite() { sse } else { f64::INFINITY })
}

/// Midpoints (tenths of the feature's max) the logistic grid tries, below 0 as well: a
/// counter such as `cpu_instructions` never reads near 0 under load, and the best fitting
/// midpoint then lies left of every row (nx12: x0 ≈ −0.3). From a grid that stopped at 0
/// LM crawled there in 17–25 passes, 4–6× the passes of a start near the optimum.
const LOGISTIC_X0_GRID: std::ops::RangeInclusive<i32> = -5..=10;

/// Least rise of a grid sigmoid across the sampled rows. One flatter than that is a
/// constant plus an exponential tail (a midpoint far left and a steep slope): its linear
/// fit cancels two huge terms (A ≈ 2.6e8, off ≈ −2.6e8 on nx12 `cache_miss`), the running
/// sums lose the digits that rank it, and LM then spends every allowed step on it.
const MIN_SPREAD: f64 = 0.1;

/// The logistic grid's step in log10(k).
const LOGISTIC_K_STEP: f64 = 2.5 / 15.0;

/// Logistic candidates `ks` × `x0s` with the linear parameters solved on `(x, y)`.
fn logistic_grid(
    ks: impl Iterator<Item = f64>,
    x0s: impl Iterator<Item = f64> + Clone,
    x: &[f64],
    y: &[f64],
    best: &mut (f64, Vec<f64>),
) {
    let (sy, syy) = y.iter().fold((0.0, 0.0), |(s, q), y| (s + y, q + y * y));
    let n = x.len() as f64;
    // e^(−k(x−x0)) = e^(−kx)·e^(kx0): one exponential per row and k serves every x0.
    let mut decay = Vec::new();
    for k in ks {
        kernels::decay(k, x, &mut decay);
        let (lo, hi) = decay.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), d| {
            (lo.min(*d), hi.max(*d))
        });
        for x0 in x0s.clone() {
            let shift = (k * x0).exp();
            // The sigmoid falls as the decay grows: its range from the extremes.
            let spread = 1.0 / (1.0 + lo * shift) - 1.0 / (1.0 + hi * shift);
            // NaN (an overflowed bound) is no spread either.
            if spread.is_nan() || spread < MIN_SPREAD {
                continue;
            }
            let sums = kernels::sigmoid_sums(&decay, shift, y);
            let (a, off, sse) = linear_from_sums(n, sums, sy, syy);
            if sse < best.0 {
                *best = (sse, vec![a, x0, k, off]);
            }
        }
    }
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
    // The strided rows once, not per grid point (the same values in the same order).
    let (xs, ys): (Vec<f64>, Vec<f64>) = sample().unzip();
    let sample = || xs.iter().copied().zip(ys.iter().copied());
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
            let coarse_k = (0..=15).map(|j| 10f64.powf(-0.5 + LOGISTIC_K_STEP * f64::from(j)));
            let coarse_x0 = LOGISTIC_X0_GRID.map(|i| f64::from(i) / 10.0);
            // No finer grid on all rows after this one: from its best, plain LM took 30
            // passes on nx12 `cache_miss` (k 10 → 6.9 down a curved valley), hence a second
            // grid 4× finer that cost 49 sigmoids per row; variable projection (`varpro`)
            // takes 9 passes from here and ends 0.2 % lower in SSE.
            logistic_grid(coarse_k, coarse_x0, &xs, &ys, &mut best);
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
    match (kind, p) {
        (CurveKind::Logistic, &[a, x0, k, off]) => logistic_normal_equations([a, x0, k, off], x, y),
        (CurveKind::Logarithmic, &[a, b, c]) => sums3(x, y, |x| {
            let u = b * x + 1.0;
            let l = u.ln();
            (a * l + c, [l, a * x / u, 1.0])
        }),
        (CurveKind::Exponential, &[a, b, c]) => sums3(x, y, |x| {
            let e = (b * x).exp();
            (a * e + c, [e, a * x * e, 1.0])
        }),
        // Parameters of another count are no point of this curve: nothing to fit from.
        _ => (
            f64::INFINITY,
            [[0.0; MAX_PARAMS]; MAX_PARAMS],
            [0.0; MAX_PARAMS],
        ),
    }
}

/// [`normal_equations`] of a three-parameter curve given its value and gradient at `x`,
/// with the parameter count known to the compiler (nx12, 1 762 rows: 14 µs a pass, 18 with
/// it unknown). The built-in models are logarithmic fits, checked byte for byte against a
/// fresh training: the order of these sums is part of them.
fn sums3(x: &[f64], y: &[f64], at: impl Fn(f64) -> (f64, [f64; 3])) -> (f64, Matrix, Vector) {
    let (mut sse, mut jtj, mut jtr) = (0.0, [[0.0; MAX_PARAMS]; MAX_PARAMS], [0.0; MAX_PARAMS]);
    for (xi, yi) in x.iter().zip(y) {
        let (v, row) = at(*xi);
        let r = yi - v;
        sse += r * r;
        for a in 0..3 {
            jtr[a] += row[a] * r;
            for b in 0..=a {
                jtj[a][b] += row[a] * row[b];
            }
        }
    }
    for a in 0..3 {
        for b in 0..a {
            jtj[b][a] = jtj[a][b];
        }
    }
    let finite = sse.is_finite() && jtj.iter().flatten().chain(&jtr).all(|v| v.is_finite());
    (if finite { sse } else { f64::INFINITY }, jtj, jtr)
}

/// [`normal_equations`] of the logistic from the vectorized sums.
fn logistic_normal_equations(p: [f64; 4], x: &[f64], y: &[f64]) -> (f64, Matrix, Vector) {
    let sums = kernels::logistic_sums(p, x, y);
    let n = x.len().min(y.len()) as f64;
    let (jtj, jtr) = varpro::normal_equations(p[2], &sums, n);
    let finite = sums[0].is_finite() && jtj.iter().flatten().chain(&jtr).all(|v| v.is_finite());
    (if finite { sums[0] } else { f64::INFINITY }, jtj, jtr)
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
    fit_counting(kind, x, y).0
}

/// [`fit`], and how many passes over the rows LM made (what a fit's time is made of).
fn fit_counting(kind: CurveKind, x: &[f64], y: &[f64]) -> (Vec<f64>, usize) {
    // A component without variation (core and uncore on many machines read 0 W) is a
    // constant: a = 0 makes the curve ignore its input.
    if let Some(first) = y.first() {
        if y.iter().all(|v| v == first) {
            let p = match kind {
                CurveKind::Logistic => vec![0.0, 0.0, 1.0, *first],
                _ => vec![0.0, 1.0, *first],
            };
            return (p, 0);
        }
    }
    let p = start(kind, x, y);
    if p.is_empty() {
        // Every grid curve overflowed (or, logistic, is flat on the data): the mean is the
        // best constant.
        let mean = y.iter().sum::<f64>() / y.len().max(1) as f64;
        let p = match kind {
            CurveKind::Logistic => vec![0.0, 0.0, 1.0, mean],
            _ => vec![0.0, 1.0, mean],
        };
        return (p, 0);
    }
    if let (CurveKind::Logistic, &[a, x0, k, off]) = (kind, &p[..]) {
        let (q, passes) = varpro::refine([a, x0, k, off], x, y, REL_TOL);
        return (q.to_vec(), passes);
    }
    refine(kind, p, x, y, REL_TOL)
}

/// Levenberg–Marquardt from `p` until an accepted step gains less than `rel_tol` of the
/// SSE: the parameters and the passes made over the rows.
fn refine(kind: CurveKind, p: Vec<f64>, x: &[f64], y: &[f64], rel_tol: f64) -> (Vec<f64>, usize) {
    let m = p.len().min(MAX_PARAMS);
    let at = |p: Vec<f64>| {
        let (sse, jtj, jtr) = normal_equations(kind, &p, x, y);
        LmPoint { p, sse, jtj, jtr }
    };
    let start = at(p);
    if !start.sse.is_finite() {
        return (start.p, 1);
    }
    levenberg_marquardt(start, m, target_floor(y), rel_tol, |p, delta| {
        Some(at(p.iter().zip(delta).map(|(a, d)| a + d).collect()))
    })
}

/// Where Levenberg–Marquardt stands: the parameters, their SSE and the normal equations
/// (JᵀJ, Jᵀr) there.
pub(super) struct LmPoint<P> {
    pub(super) p: P,
    pub(super) sse: f64,
    pub(super) jtj: Matrix,
    pub(super) jtr: Vector,
}

/// SSE below round-off of the targets' squares is an exact fit: gains there are noise (a
/// converged exact fit kept "gaining" 2 % on 1e-26 for every allowed step).
pub(super) fn target_floor(y: &[f64]) -> f64 {
    f64::EPSILON * y.iter().map(|v| v * v).sum::<f64>()
}

/// Levenberg–Marquardt over the first `m` parameters from `start`, until an accepted step
/// gains less than `rel_tol` of the SSE (of at least `floor`). `step(p, delta)` makes the
/// point at `p + delta` (one pass over the rows; `None` where it is not finite). Returns the
/// last accepted parameters and the passes made, the start's included.
pub(super) fn levenberg_marquardt<P>(
    mut at: LmPoint<P>,
    m: usize,
    floor: f64,
    rel_tol: f64,
    mut step: impl FnMut(&P, &Vector) -> Option<LmPoint<P>>,
) -> (P, usize) {
    let mut passes = 1;
    let mut lambda = 1e-3;
    for _ in 0..MAX_STEPS {
        let mut gain = None;
        for _ in 0..12 {
            let mut damped = at.jtj;
            for (i, r) in damped.iter_mut().enumerate().take(m) {
                r[i] += lambda * r[i].max(1e-12);
            }
            if let Some(delta) = solve_small(&damped, &at.jtr, m) {
                passes += 1;
                if let Some(next) = step(&at.p, &delta).filter(|n| n.sse < at.sse) {
                    gain = Some((at.sse - next.sse) / at.sse.max(floor).max(f64::MIN_POSITIVE));
                    at = next;
                    lambda = (lambda / 10.0).max(1e-12);
                    break;
                }
            }
            lambda *= 10.0;
        }
        if gain.is_none_or(|g| g < rel_tol) {
            break;
        }
    }
    (at.p, passes)
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

    /// Worst absolute miss of `p` on the rows.
    fn worst(kind: CurveKind, p: &[f64], x: &[f64], y: &[f64]) -> f64 {
        x.iter()
            .zip(y)
            .map(|(v, y)| (eval(kind, p, *v) - y).abs())
            .fold(0.0, f64::max)
    }

    #[test]
    fn logistic_with_its_midpoint_left_of_the_data_converges_in_few_passes() {
        // Instructions per interval of a busy node (2e10–1.2e11), MaxAbs-scaled as training
        // does: x in [1/6, 1]. The midpoint lies left of every row, where a grid that only
        // tried midpoints in [0, 1] started LM from its edge.
        let raw: Vec<f64> = (0..400).map(|i| 2e10 + 2.5e8 * f64::from(i)).collect();
        let max = raw.iter().fold(0.0f64, |a, v| a.max(v.abs()));
        let x: Vec<f64> = raw.iter().map(|v| v / max).collect();
        let truth = [120.0, -0.2, 3.0, 20.0];
        let y: Vec<f64> = x
            .iter()
            .map(|v| eval(CurveKind::Logistic, &truth, *v))
            .collect();
        let (p, passes) = fit_counting(CurveKind::Logistic, &x, &y);
        let miss = worst(CurveKind::Logistic, &p, &x, &y);
        assert!(miss < 1e-3, "{p:?} misses by {miss} W");
        for (got, want) in p.iter().zip(truth) {
            assert!((got - want).abs() < 1e-3 * want.abs(), "{p:?} vs {truth:?}");
        }
        assert!(passes <= 12, "{passes} passes");
    }

    #[test]
    fn logistic_fits_of_nx12_counters_take_few_passes_and_stay_near_the_optimum() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../data/kepler-model-db/models/v0.6/nx12/preprocessed_data/preprocess_abs_default_rapl_Basic.csv"
        );
        let data = crate::dataset::Dataset::read_csv_file(path.as_ref()).unwrap();
        let power = |c: &str| &data.power.iter().find(|(n, _)| n == c).unwrap().1;
        let sse =
            |p: &[f64], x: &[f64], y: &[f64]| normal_equations(CurveKind::Logistic, p, x, y).0;
        // All rows, and the training rows of the default split (their subsample led the
        // grid to a start LM then needed 30 passes from).
        let (train, _) = crate::train::eval::split(data.len(), 42, 0.2);
        let all: Vec<usize> = (0..data.len()).collect();
        let cases = [
            (crate::features::Feature::CpuInstructions, "package"),
            (crate::features::Feature::CacheMiss, "dram"),
            (crate::features::Feature::BpfCpuTimeMs, "package"),
        ];
        for ((feature, component), rows) in cases.into_iter().flat_map(|c| [(c, &all), (c, &train)])
        {
            let col = data.feature(feature).unwrap();
            let raw: Vec<f64> = rows.iter().map(|r| col[*r]).collect();
            let max = raw.iter().fold(0.0f64, |a, v| a.max(v.abs()));
            let x: Vec<f64> = raw.iter().map(|v| v / max).collect();
            let target = power(component);
            let y: Vec<f64> = rows.iter().map(|r| target[*r]).collect();
            let (p, passes) = fit_counting(CurveKind::Logistic, &x, &y);
            // The optimum as far as LM gets from our start with a tolerance 1e8× finer.
            let (best, _) = refine(CurveKind::Logistic, p.clone(), &x, &y, 1e-12);
            let (ours, least) = (sse(&p, &x, &y), sse(&best, &x, &y));
            assert!(ours <= least * 1.005, "{feature:?}: SSE {ours} vs {least}");
            // No start from a flat sigmoid whose two huge linear terms cancel.
            assert!(p[0].abs() < 1e4 && p[3].abs() < 1e4, "{feature:?}: {p:?}");
            assert!(passes <= 10, "{feature:?}: {passes} passes");
        }
    }
}
