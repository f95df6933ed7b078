//! Least squares with an intercept on a handful of columns: ordinary, ridge and
//! non-negative (Lawson–Hanson), all through the small Gram matrix of the centred columns.

// Index loops here read as the matrix formulas they implement.
#![allow(clippy::needless_range_loop)]

/// Which least-squares problem.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Mode {
    Ordinary,
    /// Penalty α·‖w‖² (intercept not penalised).
    Ridge(f64),
    /// w ≥ 0 (intercept free).
    NonNegative,
}

/// Solves `a·x = b` for a symmetric positive definite `a` (Cholesky); `None` when `a` is not
/// positive definite (numerically).
pub(crate) fn solve_spd(a: &[Vec<f64>], b: &[f64]) -> Option<Vec<f64>> {
    let n = b.len();
    let mut l = vec![vec![0.0; n]; n];
    for i in 0..n {
        for j in 0..=i {
            let mut s = *a.get(i)?.get(j)?;
            for k in 0..j {
                s -= l[i][k] * l[j][k];
            }
            if i == j {
                if s <= 1e-12 * a[i][i].abs().max(f64::MIN_POSITIVE) || !s.is_finite() {
                    return None;
                }
                l[i][j] = s.sqrt();
            } else {
                l[i][j] = s / l[j][j];
            }
        }
    }
    let mut y = vec![0.0; n];
    for i in 0..n {
        let s: f64 = (0..i).map(|k| l[i][k] * y[k]).sum();
        y[i] = (b[i] - s) / l[i][i];
    }
    let mut x = vec![0.0; n];
    for i in (0..n).rev() {
        let s: f64 = (i + 1..n).map(|k| l[k][i] * x[k]).sum();
        x[i] = (y[i] - s) / l[i][i];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

/// Solves `g·w = c`, adding a vanishing ridge when `g` is singular (collinear columns).
fn solve_or_regularise(g: &[Vec<f64>], c: &[f64]) -> Vec<f64> {
    if let Some(w) = solve_spd(g, c) {
        return w;
    }
    let max_diag = (0..c.len()).map(|i| g[i][i]).fold(0.0, f64::max);
    let mut eps = 1e-10 * max_diag.max(1e-300);
    for _ in 0..12 {
        let mut r = g.to_vec();
        for (i, row) in r.iter_mut().enumerate() {
            row[i] += eps;
        }
        if let Some(w) = solve_spd(&r, c) {
            return w;
        }
        eps *= 100.0;
    }
    vec![0.0; c.len()]
}

/// Fits `y ≈ b + Σ w_j·cols[j]`; returns `(b, w)`. Constant columns get weight 0.
pub(crate) fn least_squares(cols: &[&[f64]], y: &[f64], mode: Mode) -> (f64, Vec<f64>) {
    let n = y.len().max(1) as f64;
    let my = y.iter().sum::<f64>() / n;
    let means: Vec<f64> = cols.iter().map(|c| c.iter().sum::<f64>() / n).collect();
    // Only columns that vary take part; the others cannot be told from the intercept.
    let active: Vec<usize> = (0..cols.len())
        .filter(|&j| {
            let var = cols[j].iter().map(|x| (x - means[j]).powi(2)).sum::<f64>();
            var > 1e-18 * n
        })
        .collect();
    let p = active.len();
    let mut g = vec![vec![0.0; p]; p];
    let mut c = vec![0.0; p];
    for (a, &ja) in active.iter().enumerate() {
        for (b, &jb) in active.iter().enumerate().skip(a) {
            let s: f64 = cols[ja]
                .iter()
                .zip(cols[jb])
                .map(|(x, z)| (x - means[ja]) * (z - means[jb]))
                .sum();
            g[a][b] = s;
            g[b][a] = s;
        }
        c[a] = cols[ja]
            .iter()
            .zip(y)
            .map(|(x, v)| (x - means[ja]) * (v - my))
            .sum();
    }
    let w_active = match mode {
        Mode::Ordinary => solve_or_regularise(&g, &c),
        Mode::Ridge(alpha) => {
            for (i, row) in g.iter_mut().enumerate() {
                row[i] += alpha;
            }
            solve_or_regularise(&g, &c)
        }
        Mode::NonNegative => nnls(&g, &c),
    };
    let mut w = vec![0.0; cols.len()];
    for (k, &j) in active.iter().enumerate() {
        w[j] = w_active[k];
    }
    let b = my - means.iter().zip(&w).map(|(m, w)| m * w).sum::<f64>();
    (b, w)
}

/// Lawson–Hanson active set for min ½wᵀGw − cᵀw, w ≥ 0 (the normal-equation form of NNLS).
fn nnls(g: &[Vec<f64>], c: &[f64]) -> Vec<f64> {
    let p = c.len();
    let mut w = vec![0.0; p];
    let mut free = vec![false; p];
    let scale = c.iter().map(|v| v.abs()).fold(0.0, f64::max).max(1e-300);
    let tol = 1e-12 * scale;
    for _ in 0..3 * p + 3 {
        let grad: Vec<f64> = (0..p)
            .map(|i| c[i] - (0..p).map(|j| g[i][j] * w[j]).sum::<f64>())
            .collect();
        let Some(j) = (0..p)
            .filter(|&j| !free[j] && grad[j] > tol)
            .max_by(|&a, &b| grad[a].total_cmp(&grad[b]))
        else {
            break;
        };
        free[j] = true;
        for _ in 0..3 * p + 3 {
            let idx: Vec<usize> = (0..p).filter(|&i| free[i]).collect();
            let sub: Vec<Vec<f64>> = idx
                .iter()
                .map(|&a| idx.iter().map(|&b| g[a][b]).collect())
                .collect();
            let rhs: Vec<f64> = idx.iter().map(|&a| c[a]).collect();
            let z_sub = solve_or_regularise(&sub, &rhs);
            let mut z = vec![0.0; p];
            for (k, &i) in idx.iter().enumerate() {
                z[i] = z_sub[k];
            }
            if idx.iter().all(|&i| z[i] > 0.0) {
                w = z;
                break;
            }
            // Step towards z until the first free weight hits zero, then fix it there.
            let alpha = idx
                .iter()
                .filter(|&&i| z[i] <= 0.0)
                .map(|&i| w[i] / (w[i] - z[i]))
                .fold(1.0, f64::min);
            for i in 0..p {
                w[i] += alpha * (z[i] - w[i]);
                if free[i] && w[i] <= 1e-15 * scale.max(1.0) {
                    w[i] = 0.0;
                    free[i] = false;
                }
            }
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_ridge_and_non_negative() {
        let x1: Vec<f64> = (0..50).map(|i| f64::from(i) / 50.0).collect();
        let x2: Vec<f64> = (0..50).map(|i| f64::from((i * 7) % 13) / 13.0).collect();
        let y: Vec<f64> = x1
            .iter()
            .zip(&x2)
            .map(|(a, b)| 3.0 + 10.0 * a - 2.0 * b)
            .collect();
        let (b, w) = least_squares(&[&x1, &x2], &y, Mode::Ordinary);
        assert!((b - 3.0).abs() < 1e-9 && (w[0] - 10.0).abs() < 1e-9 && (w[1] + 2.0).abs() < 1e-9);
        let (_, wr) = least_squares(&[&x1, &x2], &y, Mode::Ridge(1.0));
        assert!(wr[0] < 10.0 && wr[0] > 5.0, "{wr:?}");
        let (_, wn) = least_squares(&[&x1, &x2], &y, Mode::NonNegative);
        assert_eq!(wn[1], 0.0);
        assert!(wn[0] > 0.0);
        // A constant column gets weight 0; collinear columns still solve.
        let ones = vec![1.0; 50];
        let (b, w) = least_squares(&[&x1, &ones, &x1], &y, Mode::Ordinary);
        assert_eq!(w[1], 0.0);
        assert!(b.is_finite() && w.iter().all(|v| v.is_finite()));
    }
}
