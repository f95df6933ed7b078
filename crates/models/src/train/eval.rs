//! Seeded splits, idle isolation and accuracy figures.

use serde::Serialize;

/// Smallest measured value (W) a sample needs to count in MAPE.
pub(crate) const MAPE_MIN_W: f64 = 1.0;

/// One component's accuracy on held-back rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ComponentAccuracy {
    pub component: String,
    pub mae_w: f64,
    /// `None` when no held-back sample has at least 1 W (a component without power).
    pub mape_pct: Option<f64>,
}

/// A model's accuracy: the worst component decides.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Accuracy {
    pub mae_w: f64,
    pub mape_pct: Option<f64>,
    pub components: Vec<ComponentAccuracy>,
}

impl Accuracy {
    /// From per-component (measured, predicted) pairs.
    pub fn from_points(points: &[(String, Vec<(f64, f64)>)]) -> Accuracy {
        let components: Vec<ComponentAccuracy> = points
            .iter()
            .map(|(c, pts)| {
                let n = pts.len().max(1) as f64;
                let mae_w = pts.iter().map(|(m, p)| (m - p).abs()).sum::<f64>() / n;
                let pct: Vec<f64> = pts
                    .iter()
                    .filter(|(m, _)| *m >= MAPE_MIN_W)
                    .map(|(m, p)| 100.0 * (m - p).abs() / m)
                    .collect();
                let mape_pct =
                    (!pct.is_empty()).then(|| pct.iter().sum::<f64>() / pct.len() as f64);
                ComponentAccuracy {
                    component: c.clone(),
                    mae_w,
                    mape_pct,
                }
            })
            .collect();
        Accuracy::worst_of(components)
    }

    fn worst_of(components: Vec<ComponentAccuracy>) -> Accuracy {
        let mae_w = components.iter().map(|c| c.mae_w).fold(0.0, f64::max);
        let mape_pct = components
            .iter()
            .filter_map(|c| c.mape_pct)
            .reduce(f64::max);
        Accuracy {
            mae_w,
            mape_pct,
            components,
        }
    }

    /// The mean of several accuracies of the same components (k-fold).
    pub(crate) fn mean(folds: &[Accuracy]) -> Option<Accuracy> {
        let first = folds.first()?;
        let k = folds.len() as f64;
        let components = first
            .components
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let of = |f: &Accuracy| f.components.get(i).cloned();
                let all: Vec<ComponentAccuracy> = folds.iter().filter_map(of).collect();
                let mapes: Vec<f64> = all.iter().filter_map(|c| c.mape_pct).collect();
                ComponentAccuracy {
                    component: c.component.clone(),
                    mae_w: all.iter().map(|c| c.mae_w).sum::<f64>() / k,
                    mape_pct: (!mapes.is_empty())
                        .then(|| mapes.iter().sum::<f64>() / mapes.len() as f64),
                }
            })
            .collect();
        Some(Accuracy::worst_of(components))
    }

    /// Whether the model passes: MAE or MAPE within its threshold.
    pub(crate) fn passes(&self, a: &super::Acceptance) -> bool {
        self.mae_w <= a.max_mae_w || self.mape_pct.is_some_and(|m| m <= a.max_mape_pct)
    }
}

/// `12.34 %` or `n/a`.
pub(crate) fn fmt_pct(p: Option<f64>) -> String {
    p.map_or("n/a".into(), |p| format!("{p:.2} %"))
}

/// SplitMix64: a tiny, well-known seeded generator; the split must not depend on a
/// dependency's version.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Row indices `0..n` in a seeded random order (Fisher–Yates).
pub(crate) fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..n).collect();
    let mut rng = SplitMix(seed);
    for i in (1..n).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        idx.swap(i, j);
    }
    idx
}

/// (train, test) row indices of a dataset of `n` rows, as [`train_all`](super::train_all)
/// splits it with [`TrainOptions::seed`](super::TrainOptions::seed) and
/// [`TrainOptions::test_fraction`](super::TrainOptions::test_fraction): a seeded shuffle,
/// the first `test_fraction` held back. Both sorted.
pub fn split(n: usize, seed: u64, test_fraction: f64) -> (Vec<usize>, Vec<usize>) {
    let idx = shuffled(n, seed);
    let test = ((n as f64 * test_fraction).round() as usize).clamp(1, n.saturating_sub(1));
    let (t, r) = idx.split_at(test);
    (sorted(r.to_vec()), sorted(t.to_vec()))
}

/// k (train, test) folds over a seeded shuffle.
pub(crate) fn folds(n: usize, seed: u64, k: usize) -> Vec<(Vec<usize>, Vec<usize>)> {
    let idx = shuffled(n, seed);
    (0..k)
        .map(|f| {
            let (lo, hi) = (f * n / k, (f + 1) * n / k);
            let test = idx.get(lo..hi).unwrap_or_default().to_vec();
            let train = idx
                .iter()
                .enumerate()
                .filter(|(i, _)| *i < lo || *i >= hi)
                .map(|(_, r)| *r)
                .collect();
            (sorted(train), sorted(test))
        })
        .collect()
}

fn sorted(mut v: Vec<usize>) -> Vec<usize> {
    v.sort_unstable();
    v
}

/// Idle power of a component: the lowest power among the rows whose main feature is in the
/// lowest 5 % of `rows` (at least 3 rows). Like upstream's `min` isolator, but a low reading
/// under load (a meter glitch) cannot become the idle.
pub(crate) fn idle_power(main: &[f64], power: &[f64], rows: &[usize]) -> f64 {
    let mut by_load: Vec<usize> = rows.to_vec();
    by_load.sort_by(|a, b| main[*a].total_cmp(&main[*b]));
    let take = (rows.len() / 20).max(3).min(rows.len());
    by_load
        .iter()
        .take(take)
        .map(|r| power[*r])
        .reduce(f64::min)
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_are_seeded_and_disjoint() {
        let (a, b) = split(100, 7, 0.2);
        assert_eq!((a.len(), b.len()), (80, 20));
        assert_eq!(split(100, 7, 0.2), (a.clone(), b.clone()));
        assert_ne!(split(100, 8, 0.2).1, b);
        assert!(b.iter().all(|r| !a.contains(r)));
        let f = folds(10, 1, 3);
        let mut all: Vec<usize> = f.iter().flat_map(|(_, t)| t.clone()).collect();
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn the_worst_component_decides() {
        let pts = vec![
            ("package".to_string(), vec![(100.0, 90.0), (100.0, 110.0)]),
            ("dram".to_string(), vec![(10.0, 5.0), (10.0, 5.0)]),
            ("core".to_string(), vec![(0.0, 0.0)]),
        ];
        let a = Accuracy::from_points(&pts);
        assert_eq!(a.mae_w, 10.0);
        assert_eq!(a.mape_pct, Some(50.0));
        assert_eq!(a.components[2].mape_pct, None);
        assert!(a.passes(&super::super::Acceptance::default()));
        let idle = idle_power(&[0.0, 1.0, 2.0, 3.0], &[5.0, 6.0, 7.0, 8.0], &[0, 1, 2, 3]);
        assert_eq!(idle, 5.0);
    }
}
