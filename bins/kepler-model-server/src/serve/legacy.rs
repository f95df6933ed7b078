//! The legacy model server API, as Kepler v0.7–v0.9 agents and estimators call it:
//! `POST /model` (the best model for a machine, as a weight JSON or an archive) and
//! `GET /best-models` (the best model name per output type and feature group).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::filter::Filter;
use super::routes::{file_response, json_response, text_response, AppState};
use super::select::{by_accuracy, normalize_source, select, ModelRequest};
use super::types::OutputType;

/// `POST /model`: the body is a [`ModelRequest`]; the answer is the chosen file, with its
/// name in `Content-Disposition` and its path and node-type match in `X-Kepler-Model` and
/// `X-Kepler-Model-Match`; 400 with the reason as text when nothing fits or the body is
/// malformed.
pub async fn post_model(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    let req: ModelRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return text_response(
                StatusCode::BAD_REQUEST,
                format!("invalid model request: {e}\n"),
            )
        }
    };
    let index = state.index();
    match select(&index, &req) {
        Ok(sel) => {
            tracing::info!(
                model = %sel.model.path,
                node_match = ?sel.node_match,
                "POST /model answered"
            );
            let mut response = file_response(sel.model);
            if let Some(class) = sel.node_match {
                response.headers_mut().insert(
                    "x-kepler-model-match",
                    axum::http::HeaderValue::from_static(class.as_str()),
                );
            }
            response
        }
        Err(reason) => {
            tracing::info!(%reason, "POST /model: no model");
            text_response(
                StatusCode::BAD_REQUEST,
                format!("cannot find a model: {reason}\n"),
            )
        }
    }
}

/// Query of `GET /best-models`, upstream's names: feature group, output type, source, filter.
#[derive(Debug, Deserialize)]
pub struct BestQuery {
    fg: Option<String>,
    ot: Option<OutputType>,
    source: Option<String>,
    filter: Option<String>,
}

/// `GET /best-models`: `{"AbsPower": {"BPFOnly": "<model name>", ...}, "DynPower": {...}}`
/// for one source (default `rapl-sysfs`, as upstream), the most accurate model of each
/// output type and feature group over every node type and format, after the filter.
pub async fn best_models(
    State(state): State<Arc<AppState>>,
    Query(q): Query<BestQuery>,
) -> Response {
    let filter = match Filter::parse(q.filter.as_deref().unwrap_or("")) {
        Ok(f) => f,
        Err(e) => return text_response(StatusCode::BAD_REQUEST, format!("{e}\n")),
    };
    let source = normalize_source(q.source.as_deref());
    let outputs: Vec<OutputType> = match q.ot {
        Some(t) => vec![t],
        None => OutputType::ALL.to_vec(),
    };
    let index = state.index();
    let mut answer: BTreeMap<&str, BTreeMap<&str, &str>> = BTreeMap::new();
    for output in outputs {
        let mut best: BTreeMap<&str, &super::index::ModelEntry> = BTreeMap::new();
        for m in &index.models {
            let Some(group) = m.feature_group.as_deref() else {
                continue;
            };
            if m.source.as_deref() != Some(source.as_str())
                || m.output_type != Some(output)
                || q.fg.as_deref().is_some_and(|fg| fg != group)
                || !filter.accepts(&m.accuracy)
            {
                continue;
            }
            let slot = best.entry(group).or_insert(m);
            if by_accuracy(m, slot).is_lt() {
                *slot = m;
            }
        }
        answer.insert(
            output.as_str(),
            best.into_iter()
                .map(|(g, m)| (g, m.name.as_str()))
                .collect(),
        );
    }
    json_response(&answer)
}
