//! A straightforward grower, for tests: every node sums its own rows for every candidate
//! threshold, with no histograms, subtraction, bin ranges, row partition or shortcuts.
//! The optimised grower must give the same boosters, byte for byte.

use std::collections::VecDeque;

use super::bins::Binned;
use super::grow::Pack;
use super::quant::quantize;
use super::scan::score;
use super::{fit, Booster, GbtParams, Tree};

/// A split: its gain in q units, and its rows.
struct Candidate {
    gain: f64,
    feature: usize,
    bin: usize,
    left: Vec<usize>,
    right: Vec<usize>,
}

fn reference_fit(cols: &[Vec<f64>], y: &[f64], p: &GbtParams) -> Booster {
    let n = y.len();
    let xs: Vec<Vec<f32>> = cols
        .iter()
        .map(|c| c.iter().map(|v| *v as f32).collect())
        .collect();
    let data = Binned::new(&xs, n, p.max_bin);
    let base_score = (y.iter().sum::<f64>() / n.max(1) as f64) as f32;
    let mut pred = vec![f64::from(base_score); n];
    let inv = |h: usize| 1.0 / (h as f64 + p.lambda);
    let sq = |q: i64| (q as f64) * (q as f64);
    let min_n = p.min_child_weight.ceil().max(1.0) as usize;
    let mut trees = Vec::new();
    let mut q = Vec::new();
    for _ in 0..p.n_trees {
        let grad: Vec<f64> = pred.iter().zip(y).map(|(p, y)| p - y).collect();
        let pack = Pack::for_rows(n);
        let unit = quantize(&grad, pack, &mut q, false);
        let q: Vec<i64> = q.iter().map(|v| pack.q(*v)).collect();
        let mut t = Tree::default();
        let sum = |rows: &[usize]| rows.iter().map(|r| q[*r]).sum::<i64>();
        let all: Vec<usize> = (0..n).collect();
        t.push(
            i64::from(i32::MAX),
            sum(&all) as f64 * unit,
            n as f64,
            p.lambda,
        );
        let mut queue = VecDeque::from([(0usize, all, 0usize)]);
        while let Some((id, rows, depth)) = queue.pop_front() {
            let (qs, m) = (sum(&rows), rows.len());
            // The first best wins.
            let mut best: Option<Candidate> = None;
            for (f, lower) in data.lower.iter().enumerate() {
                if depth >= p.max_depth {
                    break;
                }
                let bin = |r: &usize| usize::from(data.cols[f][*r]);
                for b in 1..lower.len() {
                    if !rows.iter().any(|r| bin(r) == b) {
                        continue;
                    }
                    let (left, right): (Vec<usize>, Vec<usize>) =
                        rows.iter().partition(|r| bin(r) < b);
                    if left.len() < min_n || right.len() < min_n {
                        continue;
                    }
                    let ql = sum(&left);
                    let (nl, nr) = (left.len() as f64, right.len() as f64);
                    let gain = score(ql as f64, (qs - ql) as f64, nl, nr, p.lambda);
                    if best.as_ref().is_none_or(|s| gain > s.gain) {
                        best = Some(Candidate {
                            gain,
                            feature: f,
                            bin: b,
                            left,
                            right,
                        });
                    }
                }
            }
            let best = best.map(|s| ((s.gain - sq(qs) * inv(m)) * unit * unit, s));
            match best.filter(|(gain, _)| *gain > 1e-6) {
                Some((gain, c)) => {
                    let Candidate {
                        feature: f,
                        bin: b,
                        left,
                        right,
                        ..
                    } = c;
                    let (l, r) = (t.len(), t.len() + 1);
                    t.left[id] = l as i64;
                    t.right[id] = r as i64;
                    t.feature[id] = f;
                    t.cond[id] = data.lower[f][b];
                    t.loss_change[id] = gain as f32;
                    for (child, rows) in [(l, left), (r, right)] {
                        let (qc, nc) = (sum(&rows), rows.len());
                        t.push(id as i64, qc as f64 * unit, nc as f64, p.lambda);
                        queue.push_back((child, rows, depth + 1));
                    }
                }
                None => {
                    let g = qs as f64 * unit;
                    let w = (-g / (m as f64 + p.lambda) * p.learning_rate) as f32;
                    t.cond[id] = w;
                    t.base_weight[id] = w;
                    for r in &rows {
                        pred[*r] += f64::from(w);
                    }
                }
            }
        }
        trees.push(t);
    }
    Booster {
        base_score,
        num_feature: cols.len(),
        trees,
    }
}

/// A seeded generator for the trees' tests (Knuth's MMIX LCG): reproducible cases without a
/// dependency.
pub(crate) struct Rng(pub u64);

impl Rng {
    fn step(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0
    }

    /// Uniform in [0, 1).
    pub(crate) fn unit(&mut self) -> f64 {
        (self.step() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, m) (0 when m is 0).
    pub(super) fn below(&mut self, m: u64) -> u64 {
        (self.step() >> 33) % m.max(1)
    }
}

#[test]
fn boosters_match_the_straightforward_grower() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut splits = 0;
    for case in 0..24 {
        let n = [1, 2, 9, 60, 250, 400][case % 6];
        // Up to five features: the histogram sums take another path past four.
        let nf = 1 + case % 5;
        // Continuous, few distinct values, constant, heavy-tailed.
        let cols: Vec<Vec<f64>> = (0..nf)
            .map(|f| {
                (0..n)
                    .map(|_| match (f + case) % 4 {
                        0 => rng.unit() * 1e9,
                        1 => (rng.unit() * 6.0).floor(),
                        2 => 3.0,
                        _ => rng.unit().powi(4) * 500.0,
                    })
                    .collect()
            })
            .collect();
        let y: Vec<f64> = (0..n)
            .map(|i| {
                let x: f64 = cols.iter().map(|c| c[i].sqrt()).sum();
                // Some targets are a constant or 0 W, as power components can be.
                match case % 5 {
                    3 => 0.0,
                    4 => 42.0,
                    _ => x.sin() * 30.0 + x / 100.0 + rng.unit() * 5.0,
                }
            })
            .collect();
        let params = GbtParams {
            n_trees: 6,
            max_depth: [1, 3, 6][case % 3],
            learning_rate: 0.3,
            lambda: [1.0, 0.0, 5.0, 1.0][case % 4],
            min_child_weight: [1.0, 0.5, 3.0, 10.0, 1.0][(case / 2) % 5],
            max_bin: [256, 16, 2, 64][(case / 3) % 4],
        };
        let got = fit(&cols, &y, &params);
        let want = reference_fit(&cols, &y, &params);
        assert_eq!(
            got.to_json(),
            want.to_json(),
            "case {case}: {params:?}, {n} rows"
        );
        splits += want.trees.iter().map(|t| t.len() / 2).sum::<usize>();
    }
    // The cases grow real trees, not only stumps.
    assert!(splits > 300, "{splits} splits");
}

#[test]
fn quantized_gradients_sum_exactly_within_range() {
    let mut rng = Rng(7);
    for scale in [1e-300, 1e-9, 1.0, 3e5, 1e200] {
        let grad: Vec<f64> = (0..1000).map(|_| (rng.unit() - 0.5) * scale).collect();
        let pack = Pack::for_rows(grad.len());
        let mut packed = Vec::new();
        let unit = quantize(&grad, pack, &mut packed, false);
        // Any subset's packed sum holds its gradient sum and its count, exactly.
        let total = packed.iter().try_fold(0i64, |s, v| s.checked_add(v.abs()));
        assert!(total.is_some(), "scale {scale}");
        let odd: Vec<i64> = packed.iter().copied().skip(1).step_by(2).collect();
        let q: Vec<i64> = packed.iter().map(|v| pack.q(*v)).collect();
        let sum: i64 = odd.iter().sum();
        assert_eq!(pack.q(sum), q.iter().skip(1).step_by(2).sum::<i64>());
        assert_eq!(sum & 1023, 500, "scale {scale}: the count");
        for (g, q) in grad.iter().zip(&q) {
            // Truncation: within one unit of the gradient.
            assert!((q.abs() as f64) * unit <= g.abs(), "scale {scale}: {g} {q}");
            assert!(
                g.abs() - (q.abs() as f64) * unit <= unit,
                "scale {scale}: {g} {q}"
            );
        }
        // Precision: at least 38 bits of the largest gradient (1 000 rows).
        let max = grad.iter().fold(0.0f64, |m, g| m.max(g.abs()));
        assert!(
            unit <= max * 2f64.powi(-38) || scale < 1e-100,
            "scale {scale}"
        );
    }
    let pack = Pack::for_rows(3);
    let mut q = Vec::new();
    assert_eq!(quantize(&[0.0, 0.0], pack, &mut q, false), 1.0);
    assert_eq!(q, [1, 1]);
    quantize(&[f64::NAN, f64::INFINITY, 2.0], pack, &mut q, false);
    assert_eq!(&q[..2], &[1, 1]);
    assert!(pack.q(q[2]) > 0);
}
