//! The logistic fit's per-row loops, written so that the compiler vectorizes them: an
//! exponential from arithmetic only (libm's `exp` is a call per row, which keeps a loop
//! scalar: a pass over 1 762 rows took 38 µs with it, 6.5 µs vectorized), and
//! sums kept in [`LANES`] running lanes added in a fixed order. Each loop is compiled twice,
//! portable and with AVX2 enabled (chosen at run time); neither contracts `a·b+c` into FMA,
//! so both give the same bits.

// Index loops over lanes are what the vectorizer turns into one vector operation.
#![allow(clippy::needless_range_loop)]

/// Rows summed side by side.
const LANES: usize = 4;

/// e^t for t in [−700, 700] (callers clamp), within 2ε of the true value relatively:
/// t = n·ln 2 + r with |r| ≤ ln 2 / 2, e^r by its Taylor series to r^13 (the first term left
/// out is below 2^−58 of the sum), 2^n built in the exponent bits.
#[inline(always)]
fn exp(t: f64) -> f64 {
    // Adding 1.5·2^52 rounds to an integer, which then sits in the low mantissa bits.
    const ROUND: f64 = 6_755_399_441_055_744.0;
    // ln 2 split so that n·LN2_HI is exact for |n| < 2^11; LN2_LO is the rest of the true
    // ln 2, not of its rounded `f64` (that one is 2^−54 off, 1e−13 at n = 1 000).
    const LN2_HI: f64 = f64::from_bits(0x3FE6_2E42_FEE0_0000);
    const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
    let shifted = t * std::f64::consts::LOG2_E + ROUND;
    let n = shifted - ROUND;
    let r = (t - n * LN2_HI) - n * LN2_LO;
    // Estrin's scheme: pairs, then pairs of pairs; the dependency chain is 5 operations
    // long instead of Horner's 26, so successive rows overlap.
    const C: [f64; 14] = [
        1.0,
        1.0,
        1.0 / 2.0,
        1.0 / 6.0,
        1.0 / 24.0,
        1.0 / 120.0,
        1.0 / 720.0,
        1.0 / 5_040.0,
        1.0 / 40_320.0,
        1.0 / 362_880.0,
        1.0 / 3_628_800.0,
        1.0 / 39_916_800.0,
        1.0 / 479_001_600.0,
        1.0 / 6_227_020_800.0,
    ];
    let r2 = r * r;
    let r4 = r2 * r2;
    let pair = |i: usize| C[i] + C[i + 1] * r;
    let w0 = pair(0) + pair(2) * r2;
    let w1 = pair(4) + pair(6) * r2;
    let w2 = pair(8) + pair(10) * r2;
    let p = (w0 + w1 * r4) + (w2 + pair(12) * r4) * (r4 * r4);
    // |n| ≤ 1 010 here, so n + 1023 is a normal exponent.
    let bits = shifted.to_bits().wrapping_sub(ROUND.to_bits());
    p * f64::from_bits(bits.wrapping_add(1023) << 52)
}

/// Runs `body` compiled with AVX2 where the CPU has it.
macro_rules! dispatch {
    ($avx2:ident, $body:ident($($arg:expr),*)) => {{
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, checked just above.
            return unsafe { $avx2($($arg),*) };
        }
        $body($($arg),*)
    }};
}

/// `out[i] = e^(−k·x[i])`, clamped to the exponential's domain.
pub(super) fn decay(k: f64, x: &[f64], out: &mut Vec<f64>) {
    out.clear();
    out.resize(x.len(), 0.0);
    dispatch!(decay_avx2, decay_body(k, x, out))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn decay_avx2(k: f64, x: &[f64], out: &mut [f64]) {
    decay_body(k, x, out);
}

#[inline(always)]
fn decay_body(k: f64, x: &[f64], out: &mut [f64]) {
    for (o, x) in out.iter_mut().zip(x) {
        *o = exp((-k * x).clamp(-700.0, 700.0));
    }
}

/// Σs, Σs² and Σs·y over the rows for the sigmoid s = 1/(1 + decay·shift).
pub(super) fn sigmoid_sums(decay: &[f64], shift: f64, y: &[f64]) -> [f64; 3] {
    dispatch!(sigmoid_sums_avx2, sigmoid_sums_body(decay, shift, y))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sigmoid_sums_avx2(decay: &[f64], shift: f64, y: &[f64]) -> [f64; 3] {
    sigmoid_sums_body(decay, shift, y)
}

#[inline(always)]
fn sigmoid_sums_body(decay: &[f64], shift: f64, y: &[f64]) -> [f64; 3] {
    let mut acc = [[0.0; LANES]; 3];
    let whole = decay.len().min(y.len()) / LANES * LANES;
    let (d_body, d_tail) = decay.split_at(whole);
    let (y_body, y_tail) = y.split_at(whole);
    let add = |acc: &mut [[f64; LANES]; 3], l: usize, d: f64, y: f64| {
        let s = 1.0 / (1.0 + d * shift);
        acc[0][l] += s;
        acc[1][l] += s * s;
        acc[2][l] += s * y;
    };
    for (d, y) in d_body.chunks_exact(LANES).zip(y_body.chunks_exact(LANES)) {
        for l in 0..LANES {
            add(&mut acc, l, d[l], y[l]);
        }
    }
    for (l, (d, y)) in d_tail.iter().zip(y_tail).enumerate() {
        add(&mut acc, l, *d, *y);
    }
    acc.map(|lanes| lanes.iter().sum())
}

/// Sums over the rows for the logistic `[A, x0, k, off]` and its residuals r, with
/// s = 1/(1 + e^(−k(x−x0))), u = A·s·(1−s) and v = (x−x0)·u (the gradient is
/// [s, −k·u, v, 1]), in this order: r², s·r, u·r, v·r, r, s², s·u, s·v, s, u², u·v, u,
/// v², v.
pub(super) type LogisticSums = [f64; 14];

/// [`LogisticSums`] at `p` over `(x, y)`.
pub(super) fn logistic_sums(p: [f64; 4], x: &[f64], y: &[f64]) -> LogisticSums {
    dispatch!(logistic_sums_avx2, logistic_sums_body(p, x, y))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn logistic_sums_avx2(p: [f64; 4], x: &[f64], y: &[f64]) -> LogisticSums {
    logistic_sums_body(p, x, y)
}

#[inline(always)]
fn logistic_sums_body(p: [f64; 4], x: &[f64], y: &[f64]) -> LogisticSums {
    let mut acc = [[0.0; LANES]; 14];
    let whole = x.len().min(y.len()) / LANES * LANES;
    let (x_body, x_tail) = x.split_at(whole);
    let (y_body, y_tail) = y.split_at(whole);
    for (xs, ys) in x_body.chunks_exact(LANES).zip(y_body.chunks_exact(LANES)) {
        let (mut xl, mut yl) = ([0.0; LANES], [0.0; LANES]);
        xl.copy_from_slice(xs);
        yl.copy_from_slice(ys);
        add_rows(p, xl, yl, [1.0; LANES], &mut acc);
    }
    // The last rows in the lanes they fit, the other lanes weighed 0.
    let (mut xl, mut yl, mut w) = ([0.0; LANES], [0.0; LANES], [0.0; LANES]);
    for (l, (x, y)) in x_tail.iter().zip(y_tail).enumerate() {
        (xl[l], yl[l], w[l]) = (*x, *y, 1.0);
    }
    add_rows(p, xl, yl, w, &mut acc);
    acc.map(|lanes| lanes.iter().sum())
}

/// Adds one row per lane, weighed 1 or 0, to the [`LogisticSums`] lanes. Each quantity is a
/// whole lane array so that every step is one vector operation.
#[inline(always)]
fn add_rows(
    p: [f64; 4],
    x: [f64; LANES],
    y: [f64; LANES],
    w: [f64; LANES],
    acc: &mut [[f64; LANES]; 14],
) {
    let [a, x0, k, off] = p;
    let (mut s, mut u, mut v, mut r) = ([0.0; LANES], [0.0; LANES], [0.0; LANES], [0.0; LANES]);
    for l in 0..LANES {
        let dx = x[l] - x0;
        // A trial step can make k huge: beyond ±40 the sigmoid moves by < 1e−17.
        let sl = 1.0 / (1.0 + exp((-k * dx).clamp(-40.0, 40.0)));
        s[l] = w[l] * sl;
        u[l] = w[l] * (a * sl * (1.0 - sl));
        v[l] = dx * u[l];
        r[l] = w[l] * (y[l] - (a * sl + off));
    }
    let terms = [
        (r, r),
        (s, r),
        (u, r),
        (v, r),
        (r, w),
        (s, s),
        (s, u),
        (s, v),
        (s, w),
        (u, u),
        (u, v),
        (u, w),
        (v, v),
        (v, w),
    ];
    for (acc, (f, g)) in acc.iter_mut().zip(terms) {
        for l in 0..LANES {
            acc[l] += f[l] * g[l];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_a_few_ulp_of_libm() {
        // Every binade the fit reaches, and the points where n·ln 2 changes n.
        let mut t = -700.0;
        let mut worst = 0.0f64;
        while t <= 700.0 {
            for t in [t, t + std::f64::consts::LN_2 / 2.0, -t * 1e-9] {
                let (ours, libm) = (exp(t), t.exp());
                worst = worst.max((ours - libm).abs() / libm);
            }
            t += 0.0137;
        }
        assert!(worst < 2.0 * f64::EPSILON, "relative error {worst}");
        assert_eq!(exp(0.0), 1.0);
    }

    /// The sums term by term, with libm's exponential and no lanes.
    fn straightforward(p: [f64; 4], x: &[f64], y: &[f64]) -> LogisticSums {
        let [a, x0, k, off] = p;
        let mut out = [0.0; 14];
        for (x, y) in x.iter().zip(y) {
            let s = 1.0 / (1.0 + (-k * (x - x0)).clamp(-40.0, 40.0).exp());
            let u = a * s * (1.0 - s);
            let v = (x - x0) * u;
            let r = y - (a * s + off);
            let terms = [
                r * r,
                s * r,
                u * r,
                v * r,
                r,
                s * s,
                s * u,
                s * v,
                s,
                u * u,
                u * v,
                u,
                v * v,
                v,
            ];
            for (o, t) in out.iter_mut().zip(terms) {
                *o += t;
            }
        }
        out
    }

    #[test]
    fn sums_match_the_straightforward_loop_and_both_builds_agree() {
        let mut rng = crate::train::gbt::reference::Rng(7);
        for rows in [0, 1, 3, 4, 5, 257, 1762] {
            let x: Vec<f64> = (0..rows).map(|_| rng.unit()).collect();
            let y: Vec<f64> = x.iter().map(|x| 50.0 + 200.0 * x + rng.unit()).collect();
            for p in [
                [250.0, 0.3, 6.0, -20.0],
                [1e3, -0.3, 60.0, 1.0],
                [5.0, 2.0, 0.3, 0.0],
            ] {
                let (ours, want) = (logistic_sums_body(p, &x, &y), straightforward(p, &x, &y));
                for (i, (o, w)) in ours.iter().zip(want).enumerate() {
                    let scale: f64 = 1.0 + w.abs();
                    assert!(
                        (o - w).abs() <= 1e-12 * scale,
                        "sum {i} of {rows}: {o} vs {w}"
                    );
                }
                assert_eq!(logistic_sums(p, &x, &y), ours);
            }
            let mut d = Vec::new();
            decay(7.5, &x, &mut d);
            let mut d_portable = vec![0.0; x.len()];
            decay_body(7.5, &x, &mut d_portable);
            assert_eq!(d, d_portable);
            for (d, x) in d.iter().zip(&x) {
                let want = (-7.5 * x).exp();
                assert!((d - want).abs() <= 8.0 * f64::EPSILON * want);
            }
            let sums = sigmoid_sums(&d, 1.7, &y);
            assert_eq!(sums, sigmoid_sums_body(&d, 1.7, &y));
            let s = d.iter().map(|d| 1.0 / (1.0 + d * 1.7));
            let want = s
                .zip(&y)
                .fold([0.0; 3], |[a, b, c], (s, y)| [a + s, b + s * s, c + s * y]);
            for (o, w) in sums.iter().zip(want) {
                assert!((o - w).abs() <= 1e-12 * (1.0 + w.abs()));
            }
        }
    }
}
