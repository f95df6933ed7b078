//! Gradient-boosted regression trees (squared error) with XGBoost's defaults, grown from
//! gradient histograms over quantile bins (XGBoost's `hist` method; exact greedy for every
//! feature with at most `max_bin` distinct values), written in XGBoost's JSON model format.
//!
//! Inputs are compared as `f32` with `x < threshold` going left, as XGBoost's predictor does,
//! and thresholds are feature values seen in training, so a tree routes every training row
//! at inference exactly as it did while it was grown. Trees are grown on raw feature values
//! (trees do not care about scale), so the archive needs no scaler.

mod bins;
mod grow;
mod quant;
#[cfg(test)]
pub(crate) mod reference;
mod scan;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use bins::Binned;
use grow::{grow, Workspace};

/// Booster settings; defaults are XGBoost's (`XGBRegressor()`), so the benchmark compares
/// like with like.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GbtParams {
    pub n_trees: usize,
    pub max_depth: usize,
    pub learning_rate: f64,
    /// L2 penalty on leaf weights (`reg_lambda`).
    pub lambda: f64,
    pub min_child_weight: f64,
    /// Bins per feature for the split search (XGBoost's `max_bin`); a feature with at most
    /// this many distinct values is searched exactly. Clamped to 2..=65536.
    #[serde(default = "default_max_bin")]
    pub max_bin: usize,
}

fn default_max_bin() -> usize {
    256
}

impl Default for GbtParams {
    fn default() -> Self {
        GbtParams {
            n_trees: 100,
            max_depth: 6,
            learning_rate: 0.3,
            lambda: 1.0,
            min_child_weight: 1.0,
            max_bin: default_max_bin(),
        }
    }
}

/// Node arrays in XGBoost's layout (children after parents, breadth first).
#[derive(Debug, Default, Clone)]
struct Tree {
    left: Vec<i64>,
    right: Vec<i64>,
    parent: Vec<i64>,
    feature: Vec<usize>,
    /// Threshold of an inner node, weight of a leaf.
    cond: Vec<f32>,
    base_weight: Vec<f32>,
    loss_change: Vec<f32>,
    hess: Vec<f32>,
}

impl Tree {
    /// Room for `nodes` nodes, so that growing a tree does not reallocate its arrays.
    fn with_capacity(nodes: usize) -> Tree {
        Tree {
            left: Vec::with_capacity(nodes),
            right: Vec::with_capacity(nodes),
            parent: Vec::with_capacity(nodes),
            feature: Vec::with_capacity(nodes),
            cond: Vec::with_capacity(nodes),
            base_weight: Vec::with_capacity(nodes),
            loss_change: Vec::with_capacity(nodes),
            hess: Vec::with_capacity(nodes),
        }
    }

    fn len(&self) -> usize {
        self.left.len()
    }

    /// Appends a node with gradient sums `(g, h)`; a leaf until it is split.
    fn push(&mut self, parent: i64, g: f64, h: f64, lambda: f64) {
        self.left.push(-1);
        self.right.push(-1);
        self.parent.push(parent);
        self.feature.push(0);
        self.cond.push(0.0);
        self.base_weight.push((-g / (h + lambda)) as f32);
        self.loss_change.push(0.0);
        self.hess.push(h as f32);
    }
}

/// A fitted booster.
#[derive(Debug)]
pub(crate) struct Booster {
    base_score: f32,
    num_feature: usize,
    trees: Vec<Tree>,
}

/// Features binned for fitting: one binning serves every target over the same rows, and
/// one set of buffers per thread serves every fit (allocating and first touching them was
/// ~2 % of a fit).
#[derive(Debug)]
pub(crate) struct Prepared {
    data: Binned,
    /// Buffers not in use: a fit takes one (or makes one) and gives it back.
    spare: Mutex<Vec<Workspace>>,
}

/// Bins `cols` (features, each as long as the targets to fit).
pub(crate) fn prepare(cols: &[Vec<f64>], params: &GbtParams) -> Prepared {
    let n = cols.first().map_or(0, Vec::len);
    let xs: Vec<Vec<f32>> = cols
        .iter()
        .map(|c| c.iter().map(|v| *v as f32).collect())
        .collect();
    Prepared {
        data: Binned::new(&xs, n, params.max_bin),
        spare: Mutex::default(),
    }
}

/// Fits a booster to `cols` (features, each as long as `y`) and `y`.
#[cfg(test)]
pub(crate) fn fit(cols: &[Vec<f64>], y: &[f64], params: &GbtParams) -> Booster {
    fit_prepared(&prepare(cols, params), y, params)
}

/// Fits one booster per target in `ys` (each as long as the features), on up to `threads`
/// threads (this one included; 0 counts as 1). Each booster is the one [`fit_prepared`]
/// gives: the targets are independent, so the result does not depend on `threads`.
///
/// The components of one model (package and dram, say) are the natural unit: a tree is
/// tens of microseconds, too short to share among threads, while a component's hundred
/// trees take milliseconds. A thread that cannot be started leaves its share to the others.
pub(crate) fn fit_targets(
    prepared: &Prepared,
    ys: &[&[f64]],
    params: &GbtParams,
    threads: usize,
) -> Vec<Booster> {
    let workers = threads.clamp(1, ys.len().max(1));
    if workers == 1 {
        return ys
            .iter()
            .map(|y| fit_prepared(prepared, y, params))
            .collect();
    }
    // Targets are taken in order by whichever thread is free: a component that reads 0 W
    // (one tree, repeated) takes microseconds, so a fixed share per thread would idle one.
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(y) = ys.get(i) else { break done };
            done.push((i, fit_prepared(prepared, y, params)));
        }
    };
    let mut done = std::thread::scope(|s| {
        let helpers: Vec<_> = (1..workers)
            .filter_map(|_| {
                std::thread::Builder::new()
                    .name("gbt-fit".into())
                    .spawn_scoped(s, work)
                    .ok()
            })
            .collect();
        let mut done = work();
        for h in helpers {
            // A helper that panicked re-raises here, as the fit would have on this thread.
            match h.join() {
                Ok(d) => done.extend(d),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        done
    });
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, b)| b).collect()
}

/// Fits a booster to binned features and `y` (as long as the features).
pub(crate) fn fit_prepared(prepared: &Prepared, y: &[f64], params: &GbtParams) -> Booster {
    let data = &prepared.data;
    // A panic in an earlier fit leaves nothing a fit relies on in the buffers.
    let spare = || {
        prepared
            .spare
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    };
    let mut ws = spare().pop().unwrap_or_default();
    // The caller bins the rows it fits; a shorter `y` leaves the extra rows out of the
    // gradient sums (their gradients read 0).
    debug_assert_eq!(y.len(), data.n_rows);
    let n = y.len();
    let base_score = (y.iter().sum::<f64>() / n.max(1) as f64) as f32;
    let mut pred = vec![f64::from(base_score); n];
    let mut grad = vec![0.0; n];
    let mut trees = Vec::with_capacity(params.n_trees);
    while trees.len() < params.n_trees {
        for ((g, p), y) in grad.iter_mut().zip(&pred).zip(y) {
            *g = p - y;
        }
        let tree = grow(data, &grad, params, &mut ws, &mut pred);
        // A lone leaf of weight 0 leaves the predictions, hence the gradients, as they
        // were: every later tree is this one (a component that reads 0 W is all such trees).
        if tree.len() == 1 && tree.cond.first() == Some(&0.0) {
            trees.resize_with(params.n_trees, || tree.clone());
        } else {
            trees.push(tree);
        }
    }
    spare().push(ws);
    Booster {
        base_score,
        num_feature: data.n_features,
        trees,
    }
}

impl Booster {
    /// The model in XGBoost's JSON format (as `Booster.save_model("m.json")` writes it).
    pub(crate) fn to_json(&self) -> Value {
        let trees: Vec<Value> = self
            .trees
            .iter()
            .enumerate()
            .map(|(id, t)| {
                let leaf = |k: usize| t.left[k] < 0;
                json!({
                    "base_weights": t.base_weight,
                    "categories": [], "categories_nodes": [], "categories_segments": [],
                    "categories_sizes": [],
                    "default_left": vec![0; t.left.len()],
                    "id": id,
                    "left_children": t.left,
                    "loss_changes": t.loss_change,
                    "parents": t.parent,
                    "right_children": t.right,
                    "split_conditions": t.cond,
                    "split_indices": (0..t.left.len()).map(|k| if leaf(k) { 0 } else { t.feature[k] }).collect::<Vec<_>>(),
                    "split_type": vec![0; t.left.len()],
                    "sum_hessian": t.hess,
                    "tree_param": {
                        "num_deleted": "0",
                        "num_feature": self.num_feature.to_string(),
                        "num_nodes": t.left.len().to_string(),
                        "size_leaf_vector": "1"
                    }
                })
            })
            .collect();
        let n = self.trees.len();
        json!({
            "learner": {
                "attributes": { "scikit_learn": "{\"_estimator_type\": \"regressor\"}" },
                "feature_names": [],
                "feature_types": [],
                "gradient_booster": {
                    "model": {
                        "gbtree_model_param": { "num_parallel_tree": "1", "num_trees": n.to_string() },
                        "iteration_indptr": (0..=n).collect::<Vec<_>>(),
                        "tree_info": vec![0; n],
                        "trees": trees
                    },
                    "name": "gbtree"
                },
                "learner_model_param": {
                    "base_score": format!("{:E}", self.base_score),
                    "boost_from_average": "1",
                    "num_class": "0",
                    "num_feature": self.num_feature.to_string(),
                    "num_target": "1"
                },
                "objective": { "name": "reg:squarederror", "reg_loss_param": { "scale_pos_weight": "1" } }
            },
            "version": [2, 1, 1]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_fit_side_by_side_give_the_boosters_fit_one_by_one() {
        let n = 500;
        let mut rng = reference::Rng(0x2545_f491_4f6c_dd1d);
        let cols: Vec<Vec<f64>> = (0..3)
            .map(|_| (0..n).map(|_| rng.unit() * 100.0).collect())
            .collect();
        // Five targets, one of them all zero (one tree, repeated), so that the threads
        // finish out of order.
        let ys: Vec<Vec<f64>> = (0..5)
            .map(|k| {
                (0..n)
                    .map(|i| match k {
                        0 => 0.0,
                        _ => cols[k % 3][i] * k as f64 + (cols[(k + 1) % 3][i] / 10.0).sin(),
                    })
                    .collect()
            })
            .collect();
        let ys: Vec<&[f64]> = ys.iter().map(Vec::as_slice).collect();
        let params = GbtParams {
            n_trees: 20,
            ..GbtParams::default()
        };
        let prepared = prepare(&cols, &params);
        let one: Vec<Value> = fit_targets(&prepared, &ys, &params, 1)
            .iter()
            .map(Booster::to_json)
            .collect();
        assert_eq!(one.len(), 5);
        for threads in [0, 2, 3, 8] {
            let side: Vec<Value> = fit_targets(&prepared, &ys, &params, threads)
                .iter()
                .map(Booster::to_json)
                .collect();
            assert!(side == one, "{threads} threads");
        }
        // Every thread gave its buffers back for the next fit.
        let spare = prepared.spare.lock().map(|s| s.len()).unwrap_or(0);
        assert!((1..=5).contains(&spare), "{spare}");
        // And a fresh binning's boosters are the same (no state carried in the buffers).
        let again = fit_targets(&prepare(&cols, &params), &ys, &params, 1);
        assert!(again.iter().map(Booster::to_json).collect::<Vec<_>>() == one);
    }

    #[test]
    fn boosting_fits_a_step_and_a_slope() {
        let x: Vec<f64> = (0..400).map(f64::from).collect();
        let y: Vec<f64> = x
            .iter()
            .map(|v| if *v < 150.0 { 10.0 } else { 40.0 + v / 10.0 })
            .collect();
        let b = fit(std::slice::from_ref(&x), &y, &GbtParams::default());
        let predict = |v: f32| {
            b.trees.iter().fold(b.base_score, |s, t| {
                let mut k = 0usize;
                while t.left[k] >= 0 {
                    k = if v < t.cond[k] { t.left[k] } else { t.right[k] } as usize;
                }
                s + t.cond[k]
            })
        };
        for (v, y) in x.iter().zip(&y) {
            assert!((f64::from(predict(*v as f32)) - y).abs() < 1.0, "{v}: {y}");
        }
    }

    #[test]
    #[allow(clippy::needless_range_loop)] // Rows are indices into several columns.
    fn every_split_is_the_best_over_the_rows_it_routes() {
        // Three features: two continuous ones binned by quantiles (16 bins for 600 rows),
        // one with 5 values searched exactly; a noisy nonlinear target.
        let n = 600;
        let mut rng = reference::Rng(0x9e37_79b9_7f4a_7c15u64);
        let mut next = || rng.unit();
        let cols: Vec<Vec<f64>> = vec![
            (0..n).map(|_| next() * 1e9).collect(),
            (0..n).map(|_| (next() * 5.0).floor()).collect(),
            (0..n).map(|_| next().powi(3) * 300.0).collect(),
        ];
        let y: Vec<f64> = (0..n)
            .map(|i| {
                let (a, b, c) = (cols[0][i] / 1e9, cols[1][i], cols[2][i]);
                40.0 * a * a + 6.0 * b + if c > 50.0 { 25.0 } else { 0.0 } + 3.0 * next()
            })
            .collect();
        let params = GbtParams {
            n_trees: 8,
            max_depth: 5,
            max_bin: 16,
            ..GbtParams::default()
        };
        let b = fit(&cols, &y, &params);
        let xs: Vec<Vec<f32>> = cols
            .iter()
            .map(|c| c.iter().map(|v| *v as f32).collect())
            .collect();
        let bins = Binned::new(&xs, n, params.max_bin);
        let score = |g: f64, h: f64| g * g / (h + params.lambda);
        let mut pred = vec![f64::from(b.base_score); n];
        let mut splits = 0;
        for t in &b.trees {
            let grad: Vec<f64> = pred.iter().zip(&y).map(|(p, y)| p - y).collect();
            let mut routed: Vec<Vec<usize>> = vec![Vec::new(); t.len()];
            for r in 0..n {
                let mut k = 0;
                loop {
                    routed[k].push(r);
                    if t.left[k] < 0 {
                        break;
                    }
                    let go_left = xs[t.feature[k]][r] < t.cond[k];
                    k = if go_left { t.left[k] } else { t.right[k] } as usize;
                }
            }
            for (k, rows) in routed.iter().enumerate() {
                assert_eq!(t.hess[k], rows.len() as f32, "node {k}");
                if t.left[k] < 0 {
                    for r in rows {
                        pred[*r] += f64::from(t.cond[k]);
                    }
                    continue;
                }
                // Every threshold a histogram offers, summed over this node's rows.
                let g: f64 = rows.iter().map(|r| grad[*r]).sum();
                let h = rows.len() as f64;
                let mut best = f64::NEG_INFINITY;
                for (f, lower) in bins.lower.iter().enumerate() {
                    for thr in lower {
                        let left: Vec<usize> =
                            rows.iter().copied().filter(|r| xs[f][*r] < *thr).collect();
                        let hl = left.len() as f64;
                        if hl >= 1.0 && h - hl >= 1.0 {
                            let gl: f64 = left.iter().map(|r| grad[*r]).sum();
                            best = best.max(score(gl, hl) + score(g - gl, h - hl) - score(g, h));
                        }
                    }
                }
                let got = f64::from(t.loss_change[k]);
                assert!(
                    (got - best).abs() <= 1e-5 * best.abs().max(1.0),
                    "node {k}: gain {got}, best {best}"
                );
                // The threshold is the lower bound of a bin that holds a row of this node:
                // the split search's candidates, not a bound between empty bins.
                let f = t.feature[k];
                let lower = &bins.lower[f];
                let at = lower.iter().position(|l| *l == t.cond[k]);
                let next = at.and_then(|i| lower.get(i + 1)).copied();
                let in_bin = |v: f32| v >= t.cond[k] && next.is_none_or(|hi| v < hi);
                assert!(
                    at.is_some() && rows.iter().any(|r| in_bin(xs[f][*r])),
                    "node {k}"
                );
                splits += 1;
            }
        }
        assert!(splits > 8 * 10, "{splits} splits");
    }
}
