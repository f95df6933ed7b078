//! XGBoost regression trees in XGBoost's JSON model format (`Booster.save_model("*.json")`,
//! as XgboostFitTrainer stores one per component).
//!
//! Inference mirrors XGBoost's CPU predictor so results match it to the last bit in practice:
//! inputs are converted to `f32`, a node goes left when `value < split_condition` (both
//! `f32`), a leaf's value is its `split_conditions` entry, and the sum starts at `base_score`
//! and adds the trees in order in `f32`. Only what the published models use is supported:
//! `gbtree` with numerical splits, one target, an identity-link objective. Missing values
//! never reach the trees (non-finite inputs are rejected earlier), so `default_left` is not
//! read.

use std::collections::BTreeSet;

use serde::Deserialize;

use crate::error::parse_json;
use crate::ModelError;

#[derive(Deserialize)]
struct File {
    learner: Learner,
}

#[derive(Deserialize)]
struct Learner {
    learner_model_param: LearnerParam,
    objective: Objective,
    gradient_booster: Booster,
}

#[derive(Deserialize)]
struct LearnerParam {
    base_score: String,
    num_feature: String,
    #[serde(default)]
    num_class: Option<String>,
    #[serde(default)]
    num_target: Option<String>,
}

#[derive(Deserialize)]
struct Objective {
    name: String,
}

#[derive(Deserialize)]
struct Booster {
    name: String,
    #[serde(default)]
    model: Option<GbTree>,
}

#[derive(Deserialize)]
struct GbTree {
    trees: Vec<JsonTree>,
    #[serde(default)]
    tree_info: Vec<i64>,
}

#[derive(Deserialize)]
struct JsonTree {
    left_children: Vec<i64>,
    right_children: Vec<i64>,
    split_indices: Vec<i64>,
    split_conditions: Vec<f64>,
    #[serde(default)]
    split_type: Vec<i64>,
    #[serde(default)]
    categories_nodes: Vec<i64>,
    tree_param: TreeParam,
}

#[derive(Deserialize)]
struct TreeParam {
    num_nodes: String,
    #[serde(default)]
    size_leaf_vector: Option<String>,
}

/// Objectives whose prediction is the raw margin (identity link).
const IDENTITY_OBJECTIVES: [&str; 5] = [
    "reg:squarederror",
    "reg:linear",
    "reg:absoluteerror",
    "reg:pseudohubererror",
    "reg:squaredlogerror",
];

const LEAF: i32 = -1;

/// One validated tree: node `i` is a leaf when `left[i] == LEAF`; children always have larger
/// indices than their parent (checked at load), so traversal terminates.
#[derive(Debug, Clone)]
struct Tree {
    left: Vec<i32>,
    right: Vec<i32>,
    feature: Vec<u32>,
    value: Vec<f32>,
}

/// A loaded XGBoost regressor.
#[derive(Debug, Clone)]
pub(crate) struct Xgboost {
    base_score: f32,
    num_feature: usize,
    trees: Vec<Tree>,
}

fn bad(file: &str, msg: impl std::fmt::Display) -> ModelError {
    ModelError::invalid(format!("{file}: {msg}"))
}

impl Xgboost {
    /// Parses and validates an XGBoost JSON model; `file` names it in errors.
    pub(crate) fn from_json(bytes: &[u8], file: &str) -> Result<Self, ModelError> {
        let f: File = parse_json(bytes, file)?;
        let l = f.learner;
        if l.gradient_booster.name != "gbtree" {
            return Err(ModelError::Unsupported(format!(
                "{file}: booster {} (only gbtree)",
                l.gradient_booster.name
            )));
        }
        if !IDENTITY_OBJECTIVES.contains(&l.objective.name.as_str()) {
            return Err(ModelError::Unsupported(format!(
                "{file}: objective {} (only regression objectives with an identity link)",
                l.objective.name
            )));
        }
        let p = l.learner_model_param;
        let count = |s: &Option<String>| s.as_deref().map_or(Ok(0), |v| v.trim().parse::<u64>());
        match (count(&p.num_class), count(&p.num_target)) {
            (Ok(0), Ok(0 | 1)) => {}
            _ => {
                return Err(ModelError::Unsupported(format!(
                    "{file}: multi-class or multi-target model"
                )))
            }
        }
        let num_feature: usize = p
            .num_feature
            .trim()
            .parse()
            .map_err(|_| bad(file, format!("num_feature {:?}", p.num_feature)))?;
        let base_score = parse_base_score(&p.base_score).ok_or_else(|| {
            bad(
                file,
                format!("base_score {:?} is not one finite number", p.base_score),
            )
        })?;
        let model = l
            .gradient_booster
            .model
            .ok_or_else(|| bad(file, "gbtree has no model"))?;
        if model.tree_info.iter().any(|&g| g != 0) {
            return Err(ModelError::Unsupported(format!(
                "{file}: trees for more than one output group"
            )));
        }
        let trees = model
            .trees
            .into_iter()
            .enumerate()
            .map(|(i, t)| validate(t, num_feature).map_err(|e| bad(file, format!("tree {i}: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Xgboost {
            base_score,
            num_feature,
            trees,
        })
    }

    /// Number of input columns the model was trained on.
    pub(crate) fn num_feature(&self) -> usize {
        self.num_feature
    }

    /// Column indices some split reads; other columns cannot change the prediction.
    pub(crate) fn used_features(&self) -> BTreeSet<usize> {
        self.trees
            .iter()
            .flat_map(|t| {
                t.left
                    .iter()
                    .zip(&t.feature)
                    .filter(|(l, _)| **l != LEAF)
                    .map(|(_, f)| *f as usize)
            })
            .collect()
    }

    /// Predicts from one row; `row[i]` is column `i`, `None` for columns no split reads.
    pub(crate) fn predict(&self, row: &[Option<f32>]) -> Result<f64, ModelError> {
        let mut sum = self.base_score;
        for tree in &self.trees {
            sum += tree.leaf(row)?;
        }
        Ok(f64::from(sum))
    }
}

impl Tree {
    fn leaf(&self, row: &[Option<f32>]) -> Result<f32, ModelError> {
        let mut node = 0usize;
        // Children have larger indices than parents, so at most len() steps.
        for _ in 0..=self.left.len() {
            let (Some(&left), Some(&right), Some(&feature), Some(&value)) = (
                self.left.get(node),
                self.right.get(node),
                self.feature.get(node),
                self.value.get(node),
            ) else {
                break;
            };
            if left == LEAF {
                return Ok(value);
            }
            let x = row
                .get(feature as usize)
                .copied()
                .flatten()
                .ok_or_else(|| {
                    ModelError::invalid(format!("tree reads column {feature}, not provided"))
                })?;
            node = if x < value { left } else { right } as usize;
        }
        Err(ModelError::invalid("tree traversal left the tree"))
    }
}

/// `"5.6E1"` (XGBoost 1.x/2.x) or `"[5.6E1]"` (3.x) → 56.0.
fn parse_base_score(s: &str) -> Option<f32> {
    let inner = s.trim().trim_start_matches('[').trim_end_matches(']');
    let mut parts = inner.split(',');
    let first = parts.next()?.trim().parse::<f32>().ok()?;
    (parts.next().is_none() && first.is_finite()).then_some(first)
}

fn validate(t: JsonTree, num_feature: usize) -> Result<Tree, String> {
    let n: usize = t
        .tree_param
        .num_nodes
        .trim()
        .parse()
        .map_err(|_| format!("num_nodes {:?}", t.tree_param.num_nodes))?;
    if let Some(s) = &t.tree_param.size_leaf_vector {
        if !matches!(s.trim(), "0" | "1") {
            return Err("vector leaves (multi-target) are not supported".into());
        }
    }
    if n == 0 {
        return Err("empty tree".into());
    }
    let lens = [
        t.left_children.len(),
        t.right_children.len(),
        t.split_indices.len(),
        t.split_conditions.len(),
    ];
    if lens.iter().any(|&l| l != n) {
        return Err(format!("arrays of lengths {lens:?} for {n} nodes"));
    }
    if t.split_type.iter().any(|&s| s != 0) || !t.categories_nodes.is_empty() {
        return Err("categorical splits are not supported".into());
    }
    let mut left = Vec::with_capacity(n);
    let mut right = Vec::with_capacity(n);
    let mut feature = Vec::with_capacity(n);
    let mut value = Vec::with_capacity(n);
    let nodes = t
        .left_children
        .iter()
        .zip(&t.right_children)
        .zip(&t.split_indices)
        .zip(&t.split_conditions);
    for (i, (((&l, &r), &f), &cond)) in nodes.enumerate() {
        // Leaves and thresholds are f32 in XGBoost; a value beyond f32 range is corrupt.
        let cond32 = cond as f32;
        if !cond32.is_finite() {
            return Err(format!(
                "node {i}: non-finite split condition or leaf value {cond}"
            ));
        }
        if l == i64::from(LEAF) {
            if r != i64::from(LEAF) {
                return Err(format!("node {i}: only one child"));
            }
            feature.push(0);
        } else {
            let child_ok = |c: i64| usize::try_from(c).is_ok_and(|c| c > i && c < n);
            if !child_ok(l) || !child_ok(r) {
                return Err(format!("node {i}: children {l}, {r} out of order or range"));
            }
            let column = u32::try_from(f)
                .ok()
                .filter(|&c| (c as usize) < num_feature)
                .ok_or_else(|| format!("node {i}: split on column {f} of {num_feature}"))?;
            feature.push(column);
        }
        // Both children are -1 or in 0..n (checked above), so they fit in i32 when n does.
        let to_i32 =
            |c: i64| i32::try_from(c).map_err(|_| format!("node {i}: child {c} too large"));
        left.push(to_i32(l)?);
        right.push(to_i32(r)?);
        value.push(cond32);
    }
    Ok(Tree {
        left,
        right,
        feature,
        value,
    })
}
