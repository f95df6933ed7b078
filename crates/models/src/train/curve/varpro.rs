//! Levenberg–Marquardt for the logistic by variable projection: after every pass the linear
//! parameters (A, off) are replaced by their exact least-squares values for the pass's
//! (x0, k), from sums the pass made anyway. The search then moves in (x0, k) only; with A and
//! off free to trail the step, LM spent most of its passes letting them catch up along the
//! valley of a sigmoid whose midpoint lies left of the data (nx12 `cache_miss`: 30–40
//! passes from the coarse grid's start).

use super::kernels::{self, LogisticSums};
use super::{levenberg_marquardt, target_floor, LmPoint, Matrix, Vector};

/// The point with (A, off) solved exactly for its (x0, k), and its sums: `None` when the
/// sigmoid is too flat on the rows to tell A from off (the two cancel, see
/// [`super::MIN_SPREAD`]) or A is 0 (the sums of u and v cannot be rescaled from it).
fn project(p: [f64; 4], sums: LogisticSums, n: f64) -> Option<([f64; 4], LogisticSums)> {
    let [rr, sr, ur, vr, r, ss, su, sv, s, uu, uv, u, vv, v] = sums;
    let det = n * ss - s * s;
    // NaN sums fail the comparison too.
    if det.is_nan() || det <= 1e-8 * n * ss || p[0] == 0.0 {
        return None;
    }
    // The residual's least-squares fit on (s, 1), taken out of it.
    let da = (n * sr - s * r) / det;
    let doff = (ss * r - s * sr) / det;
    let a = p[0] + da;
    // u and v are proportional to A.
    let rho = a / p[0];
    let moved = [
        (rr - da * sr - doff * r).max(0.0),
        sr - da * ss - doff * s,
        rho * (ur - da * su - doff * u),
        rho * (vr - da * sv - doff * v),
        r - da * s - doff * n,
        ss,
        rho * su,
        rho * sv,
        s,
        rho * rho * uu,
        rho * rho * uv,
        rho * u,
        rho * rho * vv,
        rho * v,
    ];
    let q = [a, p[1], p[2], p[3] + doff];
    (q.iter().chain(&moved).all(|v| v.is_finite())).then_some((q, moved))
}

/// JᵀJ and Jᵀr from the sums (the gradient is [s, −k·u, v, 1]).
pub(super) fn normal_equations(k: f64, sums: &LogisticSums, n: f64) -> (Matrix, Vector) {
    let [_, sr, ur, vr, r, ss, su, sv, s, uu, uv, u, vv, v] = *sums;
    let jtj = [
        [ss, -k * su, sv, s],
        [-k * su, k * k * uu, -k * uv, -k * u],
        [sv, -k * uv, vv, v],
        [s, -k * u, v, n],
    ];
    (jtj, [sr, -k * ur, vr, r])
}

/// The sums at `p` with (A, off) projected where that is possible.
fn evaluate(p: [f64; 4], x: &[f64], y: &[f64]) -> Option<([f64; 4], LogisticSums)> {
    let sums = kernels::logistic_sums(p, x, y);
    let n = x.len().min(y.len()) as f64;
    let out = project(p, sums, n).unwrap_or((p, sums));
    out.1.iter().all(|v| v.is_finite()).then_some(out)
}

/// LM from `p` until an accepted step gains less than `rel_tol` of the SSE: the parameters
/// and the passes made over the rows.
pub(super) fn refine(p: [f64; 4], x: &[f64], y: &[f64], rel_tol: f64) -> ([f64; 4], usize) {
    let n = x.len().min(y.len()) as f64;
    let at = |p: [f64; 4]| {
        evaluate(p, x, y).map(|(p, sums)| {
            let (jtj, jtr) = normal_equations(p[2], &sums, n);
            LmPoint {
                p,
                sse: sums[0],
                jtj,
                jtr,
            }
        })
    };
    let Some(start) = at(p) else {
        return (p, 1);
    };
    levenberg_marquardt(start, 4, target_floor(y), rel_tol, |p, delta| {
        at([0, 1, 2, 3].map(|i| p[i] + delta[i]))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projected_sums_are_the_sums_at_the_projected_point() {
        let mut rng = crate::train::gbt::reference::Rng(11);
        let x: Vec<f64> = (0..700).map(|_| rng.unit()).collect();
        let y: Vec<f64> = x
            .iter()
            .map(|x| 40.0 + 150.0 / (1.0 + (-6.0 * (x - 0.4)).exp()) + 5.0 * rng.unit())
            .collect();
        let n = x.len() as f64;
        for p in [
            [150.0, 0.4, 6.0, 40.0],
            [10.0, -0.3, 3.0, 0.0],
            [-80.0, 0.9, 20.0, 300.0],
        ] {
            let (q, moved) = project(p, kernels::logistic_sums(p, &x, &y), n).unwrap();
            let fresh = kernels::logistic_sums(q, &x, &y);
            for (i, (m, f)) in moved.iter().zip(fresh).enumerate() {
                // Residual sums are near 0 after projection: compare on the scale of Σr².
                let scale = 1.0 + f.abs().max(fresh[0].sqrt());
                assert!((m - f).abs() <= 1e-9 * scale, "{p:?} sum {i}: {m} vs {f}");
            }
            // Nothing else on (s, 1) lowers the error: Σs·r and Σr are 0.
            assert!(fresh[1].abs() <= 1e-9 * fresh[0].sqrt() * fresh[5].sqrt());
            assert!(fresh[4].abs() <= 1e-9 * (fresh[0] * n).sqrt());
            assert!(fresh[0] <= kernels::logistic_sums(p, &x, &y)[0]);
        }
        // A sigmoid flat on the rows is left as it is.
        let flat = [1.0, -30.0, 50.0, 0.0];
        assert!(project(flat, kernels::logistic_sums(flat, &x, &y), n).is_none());
    }

    #[test]
    fn reaches_the_optimum_of_a_noisy_sigmoid() {
        let mut rng = crate::train::gbt::reference::Rng(5);
        let x: Vec<f64> = (0..1500).map(|_| rng.unit()).collect();
        let y: Vec<f64> = x
            .iter()
            .map(|x| 60.0 + 90.0 / (1.0 + (-9.0 * (x - 0.55)).exp()) + 8.0 * (rng.unit() - 0.5))
            .collect();
        let (p, passes) = refine([50.0, 0.3, 3.0, 80.0], &x, &y, 1e-10);
        // At the optimum the gradient of the SSE vanishes in every parameter.
        let sums = kernels::logistic_sums(p, &x, &y);
        let (jtj, jtr) = normal_equations(p[2], &sums, x.len() as f64);
        for i in 0..4 {
            assert!(
                jtr[i].abs() <= 1e-6 * (jtj[i][i] * sums[0]).sqrt(),
                "{p:?}: {jtr:?}"
            );
        }
        for (got, want) in p.iter().zip([90.0, 0.55, 9.0, 60.0]) {
            assert!((got - want).abs() < 0.05 * want, "{p:?}");
        }
        assert!(passes < 30, "{passes} passes");
    }
}
