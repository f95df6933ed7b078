//! The model server's own API: `GET /models` (what is served, with accuracy, and what is
//! broken) and `GET /models/<path>` (one file).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::{Deserialize, Serialize};

use super::index::{Broken, ModelEntry};
use super::routes::{file_response, json_response, text_response, AppState};
use super::select::normalize_source;
use super::types::{ComponentAccuracy, FileFormat, OutputType};

/// Optional narrowing of `GET /models`; each given field must match exactly.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    source: Option<String>,
    output_type: Option<OutputType>,
    feature_group: Option<String>,
    pipeline: Option<String>,
    trainer: Option<String>,
    node_type: Option<u32>,
}

/// One listed model.
#[derive(Debug, Serialize)]
struct ModelView<'a> {
    /// Fetch it at `/models/<path>`.
    path: &'a str,
    name: &'a str,
    format: FileFormat,
    #[serde(skip_serializing_if = "Option::is_none")]
    pipeline: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_type: Option<OutputType>,
    #[serde(skip_serializing_if = "Option::is_none")]
    feature_group: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    trainer: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    node_type: Option<u32>,
    /// The node type's machine, from the pipeline's node-type index.
    #[serde(skip_serializing_if = "Option::is_none")]
    machine_spec: Option<serde_json::Value>,
    kind: String,
    /// What a request must provide (`POST /model` matches on these).
    features: &'a [String],
    declared_features: &'a [String],
    components: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    mae: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mape: Option<f64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    component_accuracy: &'a BTreeMap<String, ComponentAccuracy>,
    size: usize,
}

#[derive(Debug, Serialize)]
struct Listing<'a> {
    models: Vec<ModelView<'a>>,
    broken: &'a [Broken],
}

/// `GET /models`.
pub async fn list(State(state): State<Arc<AppState>>, Query(q): Query<ListQuery>) -> Response {
    let index = state.index();
    let source = q.source.as_deref().map(|s| normalize_source(Some(s)));
    let keep = |m: &ModelEntry| {
        source
            .as_deref()
            .is_none_or(|s| m.source.as_deref() == Some(s))
            && q.output_type.is_none_or(|t| m.output_type == Some(t))
            && q.feature_group
                .as_deref()
                .is_none_or(|g| m.feature_group.as_deref() == Some(g))
            && q.pipeline
                .as_deref()
                .is_none_or(|p| m.pipeline.as_deref() == Some(p))
            && q.trainer
                .as_deref()
                .is_none_or(|t| m.trainer.is_some_and(|mt| mt.name() == t))
            && q.node_type.is_none_or(|n| m.node_type == Some(n))
    };
    let models = index
        .models
        .iter()
        .filter(|m| keep(m))
        .map(|m| ModelView {
            path: &m.path,
            name: &m.name,
            format: m.format,
            pipeline: m.pipeline.as_deref(),
            source: m.source.as_deref(),
            output_type: m.output_type,
            feature_group: m.feature_group.as_deref(),
            trainer: m.trainer.map(|t| t.name()),
            node_type: m.node_type,
            machine_spec: index.node_type_info(m).map(|i| i.spec.to_spec_value()),
            kind: m.kind.to_string(),
            features: &m.features,
            declared_features: &m.declared_features,
            components: &m.components,
            mae: m.accuracy.mae,
            mape: m.accuracy.mape,
            component_accuracy: &m.accuracy.components,
            size: m.bytes.len(),
        })
        .collect();
    json_response(&Listing {
        models,
        broken: &index.broken,
    })
}

/// Checks a model path from a URL: relative, `/`-separated, no empty, `.` or `..`
/// component, no backslash or NUL. Only indexed files are served in any case (and symlinks
/// leaving the directory are never indexed); this turns traversal attempts into a clear 400
/// instead of a 404.
pub fn check_model_path(path: &str) -> Result<&str, String> {
    if path.is_empty() {
        return Err("empty model path".into());
    }
    if path.starts_with('/') {
        return Err("model paths are relative to the model directory".into());
    }
    if path.contains(['\\', '\0']) {
        return Err("model paths may not contain backslashes or NUL".into());
    }
    if path
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err("model paths may not contain empty, '.' or '..' components".into());
    }
    Ok(path)
}

/// `GET /models/<path>`: the file, as loaded at the last scan.
pub async fn fetch(State(state): State<Arc<AppState>>, Path(path): Path<String>) -> Response {
    let path = match check_model_path(&path) {
        Ok(p) => p,
        Err(e) => return text_response(StatusCode::BAD_REQUEST, format!("{e}\n")),
    };
    let index = state.index();
    match index.get(path) {
        Some(m) => file_response(m),
        None => text_response(
            StatusCode::NOT_FOUND,
            format!("no model {path:?}; GET /models lists them\n"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traversal_is_rejected() {
        for bad in [
            "",
            "/etc/passwd",
            "../secret",
            "a/../../b",
            "a/./b",
            "a//b",
            "a/",
            "..",
            "a\\..\\b",
            "a\0b",
        ] {
            assert!(check_model_path(bad).is_err(), "{bad:?}");
        }
        for good in [
            "x.json",
            "ec2/rapl-sysfs/AbsPower/BPFOnly/X_0.zip",
            "a..b/c",
        ] {
            assert_eq!(check_model_path(good), Ok(good));
        }
    }
}
