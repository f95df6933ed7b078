//! Choosing the model for a legacy `POST /model` request (DESIGN §7).
//!
//! Candidates are narrowed step by step, and the first step that leaves none is the reason
//! of the 400:
//!
//! 1. source (`rapl`, `intel_rapl`, … name `rapl-sysfs`, as upstream) and output type;
//! 2. `pipeline_name`, when given;
//! 3. features: every feature the model needs is among the request's `metrics` (upstream
//!    asks for its whole feature group; a feature a model weighs 0 is not needed here);
//! 4. `trainer_name`, when given (the trainer, compared exactly);
//! 5. format: a weight JSON for `weight: true`, an archive for `weight: false`;
//! 6. `filter` (see [`super::filter`]);
//! 7. node type: a `node_type` ≥ 0 keeps that node type only; with `-1` and a
//!    `machine_spec`, each model's node type is matched against the spec (see
//!    [`super::nodematch`]) and only the best-matching node type is kept: the exact machine,
//!    else (with `loose_node_type`, the default) the same CPU at the nearest size, else the
//!    nearest other machine. `loose_node_type: false` accepts exact matches only.
//! 8. among what is left, the lowest MAE (unknown last), then the lowest MAPE, then the path.

use std::cmp::Ordering;

use kepler_models::builtin::MachineSpec;
use kepler_models::features::canonical_feature;
use kepler_models::Trainer;
use serde::Deserialize;

use super::filter::Filter;
use super::index::{ModelEntry, ModelIndex};
use super::nodematch::{MatchClass, NodeMatch};
use super::types::{Accuracy, FileFormat, OutputType};

/// Upstream's "any node type".
pub const ANY_NODE_TYPE: i64 = -1;

/// The legacy request body. Optional fields may be absent or `null`.
#[derive(Debug, Deserialize)]
pub struct ModelRequest {
    pub metrics: Vec<String>,
    pub output_type: OutputType,
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub node_type: Option<NodeTypeField>,
    #[serde(default)]
    pub weight: Option<bool>,
    #[serde(default)]
    pub trainer_name: Option<String>,
    #[serde(default)]
    pub filter: Option<String>,
    #[serde(default)]
    pub pipeline_name: Option<String>,
    /// Older clients call it `spec`.
    #[serde(default, alias = "spec")]
    pub machine_spec: Option<serde_json::Value>,
    #[serde(default)]
    pub loose_node_type: Option<bool>,
}

/// `node_type` as a number, or as a numeric string (the upstream README calls it a string).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum NodeTypeField {
    Number(i64),
    Text(String),
}

/// The chosen model and how its node type matched.
#[derive(Debug)]
pub struct Selection<'a> {
    pub model: &'a ModelEntry,
    /// `None` when node types played no part (no spec, or an explicit `node_type`).
    pub node_match: Option<MatchClass>,
}

/// Source names that mean the RAPL pipeline's `rapl-sysfs`: upstream maps every source
/// containing "rapl" to it; we compare whole tokens (`rapl`, `intel_rapl`, `rapl-msr`).
pub fn normalize_source(source: Option<&str>) -> String {
    match source.map(str::trim).filter(|s| !s.is_empty()) {
        None => "rapl-sysfs".to_string(),
        Some(s) if s.split(['-', '_']).any(|t| t.eq_ignore_ascii_case("rapl")) => {
            "rapl-sysfs".to_string()
        }
        Some(s) => s.to_string(),
    }
}

/// Lower MAE first, unknown last; then MAPE; then the path, so that answers are stable.
pub fn by_accuracy(a: &ModelEntry, b: &ModelEntry) -> Ordering {
    fn key(x: Option<f64>) -> (bool, f64) {
        (x.is_none(), x.unwrap_or(0.0))
    }
    let (am, bm) = (key(a.accuracy.mae), key(b.accuracy.mae));
    let (ap, bp) = (key(a.accuracy.mape), key(b.accuracy.mape));
    am.0.cmp(&bm.0)
        .then(am.1.total_cmp(&bm.1))
        .then(ap.0.cmp(&bp.0))
        .then(ap.1.total_cmp(&bp.1))
        .then_with(|| a.path.cmp(&b.path))
}

fn describe_accuracy(a: &Accuracy) -> String {
    match (a.mae, a.mape) {
        (Some(e), Some(p)) => format!("mae {e}, mape {p}"),
        (Some(e), None) => format!("mae {e}"),
        (None, Some(p)) => format!("mape {p}"),
        (None, None) => "accuracy unknown".into(),
    }
}

/// Chooses the model for `req`, or says why none fits.
pub fn select<'a>(index: &'a ModelIndex, req: &ModelRequest) -> Result<Selection<'a>, String> {
    let source = normalize_source(req.source.as_deref());
    let output = req.output_type;
    let node_type = match &req.node_type {
        None => ANY_NODE_TYPE,
        Some(NodeTypeField::Number(n)) => *n,
        Some(NodeTypeField::Text(t)) if t.trim().is_empty() => ANY_NODE_TYPE,
        Some(NodeTypeField::Text(t)) => t
            .trim()
            .parse()
            .map_err(|_| format!("node_type must be a number, found {t:?}"))?,
    };
    if node_type < ANY_NODE_TYPE {
        return Err(format!(
            "node_type must be -1 (any) or a node type number, found {node_type}"
        ));
    }
    let weight = req.weight.unwrap_or(false);
    let loose = req.loose_node_type.unwrap_or(true);
    let filter = Filter::parse(req.filter.as_deref().unwrap_or(""))?;
    let trainer = match req
        .trainer_name
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        Some(t) => Some(Trainer::parse(t).map_err(|e| format!("trainer_name: {e}"))?),
        None => None,
    };
    let spec = match &req.machine_spec {
        Some(v) if node_type == ANY_NODE_TYPE && !is_empty_spec(v) => {
            Some(MachineSpec::from_spec_value(v).map_err(|e| format!("machine_spec: {e}"))?)
        }
        _ => None,
    };
    if req.metrics.is_empty() {
        return Err("metrics is empty: list the features this node can provide".into());
    }
    let metrics: Vec<&str> = req.metrics.iter().map(|m| canonical_feature(m)).collect();

    let mut c: Vec<&ModelEntry> = index
        .models
        .iter()
        .filter(|m| m.source.as_deref() == Some(source.as_str()))
        .filter(|m| m.output_type.is_none_or(|t| t == output))
        .collect();
    if c.is_empty() {
        return Err(format!("no {} model for source {source}", output.as_str()));
    }
    if let Some(p) = req
        .pipeline_name
        .as_deref()
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        c.retain(|m| m.pipeline.as_deref() == Some(p) || m.pipeline_dir.as_deref() == Some(p));
        if c.is_empty() {
            return Err(format!(
                "no {} {source} model in pipeline {p:?}",
                output.as_str()
            ));
        }
    }
    let before = c.clone();
    c.retain(|m| m.features.iter().all(|f| metrics.contains(&f.as_str())));
    if c.is_empty() {
        let mut needs: Vec<String> = before.iter().map(|m| m.features.join("+")).collect();
        needs.sort();
        needs.dedup();
        return Err(format!(
            "no {} {source} model reads only the given metrics {:?}; the models need {}",
            output.as_str(),
            req.metrics,
            needs.join(" or ")
        ));
    }
    if let Some(t) = trainer {
        c.retain(|m| m.trainer == Some(t));
        if c.is_empty() {
            return Err(format!(
                "no {} {source} model of trainer {t} for these metrics",
                output.as_str()
            ));
        }
    }
    let format = if weight {
        FileFormat::Json
    } else {
        FileFormat::Zip
    };
    c.retain(|m| m.format == format);
    if c.is_empty() {
        return Err(if weight {
            "weight: true asks for a weight JSON, and no model for these metrics has one \
             (ask for weight: false to get an archive)"
                .to_string()
        } else {
            "weight: false asks for a .zip archive, and no model for these metrics has one \
             (ask for weight: true to get a weight JSON)"
                .to_string()
        });
    }
    if !filter.is_empty() {
        let before = c.clone();
        c.retain(|m| filter.accepts(&m.accuracy));
        if c.is_empty() {
            let best = before.iter().min_by(|a, b| by_accuracy(a, b));
            return Err(format!(
                "none of the {} candidate models passes filter {filter}{}",
                before.len(),
                best.map(|b| format!(
                    " (the most accurate, {}, has {})",
                    b.path,
                    describe_accuracy(&b.accuracy)
                ))
                .unwrap_or_default()
            ));
        }
    }
    let mut node_match = None;
    if node_type != ANY_NODE_TYPE {
        let before = c.clone();
        c.retain(|m| m.node_type.is_some_and(|n| i64::from(n) == node_type));
        if c.is_empty() {
            let mut types: Vec<u32> = before.iter().filter_map(|m| m.node_type).collect();
            types.sort_unstable();
            types.dedup();
            return Err(format!(
                "no candidate model for node type {node_type} (candidates have node types {types:?})"
            ));
        }
    } else if let Some(spec) = &spec {
        let ranked: Vec<(&ModelEntry, NodeMatch)> = c
            .iter()
            .map(|m| {
                let nm = index
                    .node_type_info(m)
                    .map_or(NodeMatch::UNKNOWN, |info| NodeMatch::of(spec, &info.spec));
                (*m, nm)
            })
            .collect();
        let best = ranked
            .iter()
            .map(|(_, nm)| *nm)
            .min_by(|a, b| a.cmp(b))
            .unwrap_or(NodeMatch::UNKNOWN);
        if !loose && best.class != MatchClass::Exact {
            return Err(no_exact_match(index, spec, c.len()));
        }
        c = ranked
            .into_iter()
            .filter(|(_, nm)| nm.cmp(&best).is_eq())
            .map(|(m, _)| m)
            .collect();
        node_match = Some(best.class);
    }
    let model = c
        .into_iter()
        .min_by(|a, b| by_accuracy(a, b))
        .ok_or_else(|| "no model left".to_string())?;
    Ok(Selection { model, node_match })
}

/// Upstream agents send a spec with every field empty when they know nothing.
fn is_empty_spec(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Null => true,
        serde_json::Value::Object(m) => m
            .values()
            .all(|v| v.is_null() || v.as_str().is_some_and(str::is_empty)),
        _ => false,
    }
}

/// The 400 reason for `loose_node_type: false` without an exact match: which node types
/// match the machine exactly (they then have no model for this request), or that none does.
fn no_exact_match(index: &ModelIndex, spec: &MachineSpec, candidates: usize) -> String {
    let exact: Vec<String> = index
        .pipelines
        .values()
        .flat_map(|p| {
            p.node_types
                .iter()
                .filter(|(_, info)| NodeMatch::of(spec, &info.spec).class == MatchClass::Exact)
                .map(move |(id, info)| {
                    format!("{} node type {id} ({})", p.name, info.members.join(", "))
                })
        })
        .collect();
    let machine = format!(
        "{} with {} logical CPUs, {} sockets, {} GB",
        spec.processor, spec.logical_cores, spec.chips, spec.memory_gb
    );
    if exact.is_empty() {
        format!(
            "machine spec ({machine}) matches no node type exactly, and loose_node_type is false \
             ({candidates} candidate models are for other machines)"
        )
    } else {
        format!(
            "machine spec ({machine}) matches {} exactly, which has no model for this request; \
             loose_node_type is false",
            exact.join("; ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rapl_source_names() {
        for s in [
            None,
            Some(""),
            Some("rapl"),
            Some("intel_rapl"),
            Some("rapl-sysfs"),
            Some("rapl-msr"),
        ] {
            assert_eq!(normalize_source(s), "rapl-sysfs", "{s:?}");
        }
        assert_eq!(normalize_source(Some("acpi")), "acpi");
        // Whole tokens only: "trapline" is not RAPL.
        assert_eq!(normalize_source(Some("trapline")), "trapline");
    }

    #[test]
    fn empty_specs_are_no_spec() {
        assert!(is_empty_spec(&serde_json::json!(null)));
        assert!(is_empty_spec(
            &serde_json::json!({"processor": "", "cores": null})
        ));
        assert!(!is_empty_spec(
            &serde_json::json!({"processor": "x", "cores": 4})
        ));
    }
}
