//! Gradient-boosted regression trees (squared error), XGBoost's exact greedy algorithm with
//! its defaults, written in XGBoost's JSON model format.
//!
//! Inputs are compared as `f32` with `x < threshold` going left, as XGBoost's predictor does,
//! and thresholds are feature values seen in training, so a tree routes every training row
//! at inference exactly as it did while it was grown. Trees are grown on raw feature values
//! (trees do not care about scale), so the archive needs no scaler.

// Index loops here read as the matrix formulas they implement.
#![allow(clippy::needless_range_loop)]

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

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
}

impl Default for GbtParams {
    fn default() -> Self {
        GbtParams {
            n_trees: 100,
            max_depth: 6,
            learning_rate: 0.3,
            lambda: 1.0,
            min_child_weight: 1.0,
        }
    }
}

/// Node arrays in XGBoost's layout (children after parents, breadth first).
#[derive(Debug, Default)]
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

/// A fitted booster.
#[derive(Debug)]
pub(crate) struct Booster {
    base_score: f32,
    num_feature: usize,
    trees: Vec<Tree>,
}

#[derive(Clone, Copy)]
struct Best {
    gain: f64,
    feature: usize,
    threshold: f32,
}

/// Fits a booster to `cols` (features, each as long as `y`) and `y`.
pub(crate) fn fit(cols: &[Vec<f64>], y: &[f64], params: &GbtParams) -> Booster {
    let n = y.len();
    let xs: Vec<Vec<f32>> = cols
        .iter()
        .map(|c| c.iter().map(|v| *v as f32).collect())
        .collect();
    // Per feature, (value, row) sorted by value: the split search reads them in order.
    let order: Vec<Vec<(f32, usize)>> = xs
        .iter()
        .map(|c| {
            let mut idx: Vec<(f32, usize)> = c.iter().copied().zip(0..n).collect();
            idx.sort_by(|a, b| a.0.total_cmp(&b.0));
            idx
        })
        .collect();
    let base_score = (y.iter().sum::<f64>() / n.max(1) as f64) as f32;
    let mut pred = vec![f64::from(base_score); n];
    let mut trees = Vec::with_capacity(params.n_trees);
    let mut grad = vec![0.0; n];
    let mut node_of = vec![0usize; n];
    for _ in 0..params.n_trees {
        for i in 0..n {
            grad[i] = pred[i] - y[i];
        }
        let tree = grow(&xs, &order, &grad, params, &mut node_of);
        for i in 0..n {
            pred[i] += f64::from(tree.cond[node_of[i]]);
        }
        trees.push(tree);
    }
    Booster {
        base_score,
        num_feature: cols.len(),
        trees,
    }
}

/// Grows one tree level by level; leaves `node_of[i]` at row i's leaf.
fn grow(
    xs: &[Vec<f32>],
    order: &[Vec<(f32, usize)>],
    grad: &[f64],
    p: &GbtParams,
    node_of: &mut [usize],
) -> Tree {
    let n = grad.len();
    let mut t = Tree::default();
    let mut g_sum = vec![grad.iter().sum::<f64>()];
    let mut h_sum = vec![n as f64];
    t.parent.push(i64::from(i32::MAX));
    node_of.iter_mut().for_each(|v| *v = 0);
    let score = |g: f64, h: f64| g * g / (h + p.lambda);
    let mut open: Vec<usize> = vec![0];
    let push_node = |t: &mut Tree, parent: usize, g: f64, h: f64| {
        t.left.push(-1);
        t.right.push(-1);
        t.parent.push(parent as i64);
        t.feature.push(0);
        t.cond.push(0.0);
        t.base_weight.push((-g / (h + p.lambda)) as f32);
        t.loss_change.push(0.0);
        t.hess.push(h as f32);
    };
    t.left.push(-1);
    t.right.push(-1);
    t.feature.push(0);
    t.cond.push(0.0);
    t.base_weight
        .push((-g_sum[0] / (h_sum[0] + p.lambda)) as f32);
    t.loss_change.push(0.0);
    t.hess.push(n as f32);
    for _depth in 0..p.max_depth {
        if open.is_empty() {
            break;
        }
        let total = t.left.len();
        let mut best: Vec<Option<Best>> = vec![None; total];
        let is_open: Vec<bool> = (0..total).map(|k| open.contains(&k)).collect();
        let parent_score: Vec<f64> = (0..total).map(|k| score(g_sum[k], h_sum[k])).collect();
        for (f, idx) in order.iter().enumerate() {
            let mut gl = vec![0.0; total];
            let mut hl = vec![0.0; total];
            let mut last: Vec<Option<f32>> = vec![None; total];
            for &(v, i) in idx {
                let k = node_of[i];
                if !is_open[k] {
                    continue;
                }
                if last[k].is_some_and(|l| l < v) {
                    let (gr, hr) = (g_sum[k] - gl[k], h_sum[k] - hl[k]);
                    if hl[k] >= p.min_child_weight && hr >= p.min_child_weight {
                        let gain = score(gl[k], hl[k]) + score(gr, hr) - parent_score[k];
                        if best[k].is_none_or(|b| gain > b.gain) {
                            best[k] = Some(Best {
                                gain,
                                feature: f,
                                threshold: v,
                            });
                        }
                    }
                }
                last[k] = Some(v);
                gl[k] += grad[i];
                hl[k] += 1.0;
            }
        }
        let mut next = Vec::new();
        let mut children = vec![(0usize, 0usize); total];
        for &k in &open {
            let Some(b) = best[k].filter(|b| b.gain > 1e-6) else {
                continue;
            };
            let (l, r) = (t.left.len(), t.left.len() + 1);
            t.left[k] = l as i64;
            t.right[k] = r as i64;
            t.feature[k] = b.feature;
            t.cond[k] = b.threshold;
            t.loss_change[k] = b.gain as f32;
            children[k] = (l, r);
            // Sums are filled in by the row pass below.
            push_node(&mut t, k, 0.0, 0.0);
            push_node(&mut t, k, 0.0, 0.0);
            g_sum.extend([0.0, 0.0]);
            h_sum.extend([0.0, 0.0]);
            next.extend([l, r]);
        }
        // One pass over the rows: move each row of a split node to its child and add its
        // gradient to the child's sums.
        for i in 0..n {
            let k = node_of[i];
            let (l, r) = children[k];
            if l != 0 {
                let c = if xs[t.feature[k]][i] < t.cond[k] {
                    l
                } else {
                    r
                };
                node_of[i] = c;
                g_sum[c] += grad[i];
                h_sum[c] += 1.0;
            }
        }
        for &c in &next {
            t.base_weight[c] = (-g_sum[c] / (h_sum[c] + p.lambda)) as f32;
            t.hess[c] = h_sum[c] as f32;
        }
        open = next;
    }
    // Leaves hold their shrunken weight as their `split_conditions` value.
    for k in 0..t.left.len() {
        if t.left[k] < 0 {
            let w = -g_sum[k] / (h_sum[k] + p.lambda) * p.learning_rate;
            t.cond[k] = w as f32;
            t.base_weight[k] = w as f32;
        }
    }
    t
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
}
